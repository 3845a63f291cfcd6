"""Running a schedule: compile each kernel for its device (cached) and launch it."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from refgrad.buffer import Buffer
from refgrad.codegen.pipeline import compile_ast
from refgrad.registry import Device
from refgrad.schedule import ScheduleItem
from refgrad.search import opts_for
from refgrad.uop import Ops, UOp

# While a TinyJit captures a call (refgrad/jit.py): every launch, as (runner, item); a runner None is a transfer
# (run_transfer(item.ast, item.buffers)).
CAPTURE: list[tuple[Callable[..., None] | None, ScheduleItem]] | None = None


def write_variables(item: ScheduleItem, var_vals: dict[UOp, int] | None) -> None:
  """Fill a symbolic kernel's values buffer (its last) for this launch."""
  values = []
  for var, bound in item.var_vals:
    value = bound if var_vals is None or var not in var_vals else var_vals[var]
    name, low, high = var.arg
    if not low <= value <= high:
      raise ValueError(f"Variable {name!r} = {value} is outside its range [{low}, {high}]")
    values.append(value)
  item.buffers[-1].copyin(np.array(values, np.int64))


def run_transfer(ast: UOp, buffers: tuple[Buffer, ...] | list[Buffer]) -> None:
  """A COPY or ALLREDUCE item, run by its destination's device (DeviceImpl.copy_from, DeviceImpl.all_reduce)."""
  dest, *sources = buffers
  device = Device[dest.device]
  if ast.op is Ops.COPY:
    device.copy_from(dest, sources[0])
  else:
    device.all_reduce(ast.arg[0], dest, sources)


def run_schedule(items: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  """Run the items in order. A kernel of symbolic shape gets its variables' values in its last buffer: the values
  bound when it was scheduled, or those in var_vals (Variable -> value; each checked against the Variable's range)."""
  for item in items:
    if item.var_vals:
      write_variables(item, var_vals)
    if item.is_transfer:
      run_transfer(item.ast, item.buffers)
      runner = None
    else:
      device = Device[item.buffers[0].device]
      program = compile_ast(item.ast, device.caps, opts_for(item.ast, device.name))
      runner = device.get_runner(program)
      runner(*(b.handle for b in item.buffers))
    if CAPTURE is not None:
      CAPTURE.append((runner, item))
