"""Running a schedule: compile each kernel for its device (cached) and launch it."""
from __future__ import annotations

from collections.abc import Callable

from refgrad.codegen.linearize import compile_ast
from refgrad.device import Buffer, Device
from refgrad.schedule import ScheduleItem
from refgrad.search import opts_for

# While a TinyJit captures a call (refgrad/jit.py): every launch, as (runner, buffers); a runner None is a copy.
CAPTURE: list[tuple[Callable[..., None] | None, tuple[Buffer, ...]]] | None = None


def run_schedule(items: list[ScheduleItem]) -> None:
  for item in items:
    if item.is_copy:
      dest, src = item.buffers
      dest.copyin(src.numpy())
      runner = None
    else:
      device = Device[item.buffers[0].device]
      program = compile_ast(item.ast, device.caps, opts_for(item.ast, device.name))
      runner = device.get_runner(program)
      runner(*(b.handle for b in item.buffers))
    if CAPTURE is not None:
      CAPTURE.append((runner, item.buffers))
