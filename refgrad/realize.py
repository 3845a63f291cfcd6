"""Running a schedule: compile each kernel for its device (cached) and launch it."""
from __future__ import annotations

from collections.abc import Callable

from refgrad.codegen.linearize import compile_ast
from refgrad.device import Buffer, Device
from refgrad.schedule import ScheduleItem
from refgrad.search import opts_for
from refgrad.uop import Ops, UOp

# While a TinyJit captures a call (refgrad/jit.py): every launch, as (runner, buffers, ast); a runner None is a
# transfer (run_transfer(ast, buffers)).
CAPTURE: list[tuple[Callable[..., None] | None, tuple[Buffer, ...], UOp]] | None = None


def run_transfer(ast: UOp, buffers: tuple[Buffer, ...] | list[Buffer]) -> None:
  """A COPY or ALLREDUCE item, run by its destination's device (DeviceImpl.copy_from, DeviceImpl.all_reduce)."""
  dest, *sources = buffers
  device = Device[dest.device]
  if ast.op is Ops.COPY:
    device.copy_from(dest, sources[0])
  else:
    device.all_reduce(ast.arg[0], dest, sources)


def run_schedule(items: list[ScheduleItem]) -> None:
  for item in items:
    if item.is_transfer:
      run_transfer(item.ast, item.buffers)
      runner = None
    else:
      device = Device[item.buffers[0].device]
      program = compile_ast(item.ast, device.caps, opts_for(item.ast, device.name))
      runner = device.get_runner(program)
      runner(*(b.handle for b in item.buffers))
    if CAPTURE is not None:
      CAPTURE.append((runner, item.buffers, item.ast))
