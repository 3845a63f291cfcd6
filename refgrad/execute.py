"""Running a schedule: each kernel through its device's run_kernel (with a searched opt list under REFGRAD_SEARCH),
each transfer through its destination device; a graph device's consecutive kernels as one graph."""
from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable

from refgrad.buffer import Buffer
from refgrad.codegen.contract import OptList
from refgrad.graph_batches import stitch_graph_runs
from refgrad.registry import Device
from refgrad.schedule import ScheduleItem
from refgrad.search import search_opts
from refgrad.uop import Ops, UOp

# While a TinyJit captures a call (refgrad/jit.py): every launch, as (runner, item); a runner None is a transfer
# (run_transfer(item.ast, item.buffers)).
CAPTURE: list[tuple[Callable[..., None] | None, ScheduleItem]] | None = None


MAX_SEARCH = 1000  # opt lists per kernel: each is compiled once and run 4 times, so a thousand is minutes to hours
# for one kernel, and candidates() draws up to 4 lists per one kept (REFGRAD_SEARCH=1e9 would never end)


def search_budget() -> int:
  """REFGRAD_SEARCH's value: how many random opt lists a search may try per kernel (0: no search). Anything but a
  whole number from 0 to MAX_SEARCH raises ValueError (a negative one was taken for 0)."""
  value = os.environ.get("REFGRAD_SEARCH", "0")
  try:
    budget = int(value)
  except ValueError:
    budget = -1
  if not 0 <= budget <= MAX_SEARCH:
    raise ValueError(f"REFGRAD_SEARCH={value!r}: give the number of opt lists to try per kernel, 0 (no search) to "
                     f"{MAX_SEARCH}, e.g. 20")
  return budget


def kernel_opts(ast: UOp, device: str) -> OptList | None:
  """What realize runs a kernel with: None (the device's heuristic), or under REFGRAD_SEARCH on a compiled device
  the opt list a search chose (refgrad/search.py). The reference (an interpreting device) always runs kernels as
  lowered, and a graph device's framework chooses its own code."""
  budget = search_budget()
  if budget == 0 or Device[device].compiler is None or ast.op is not Ops.SINK:  # an interpreter, a graph device
    return None
  return search_opts(ast, device, budget)


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
  chosen = var_vals or {}
  items = stitch_graph_runs(items, lambda name: Device[name].graph is not None)  # a graph device computes them whole
  searching = search_budget() > 0  # read once, not per kernel: without a search every kernel runs the heuristic
  opts = [None if item.is_transfer or not searching else kernel_opts(item.ast, Device[item.buffers[0].device].name)
          for item in items]
  prepare_kernels(items, opts)
  for item, item_opts in zip(items, opts):
    if item.is_transfer:
      run_transfer(item.ast, item.buffers)
      runner = None
    else:
      device = Device[item.buffers[0].device]
      variables = [(var, chosen.get(var, bound)) for var, bound in item.var_vals] if item.var_vals else ()
      _, runner = device.run_kernel(item.ast, item.buffers, item_opts, variables)
    if CAPTURE is not None:
      CAPTURE.append((runner, item))


def prepare_kernels(items: list[ScheduleItem], opts: list[OptList | None]) -> None:
  """Before the first kernel runs, each device compiles and loads all of its kernels at once (DeviceImpl.prepare:
  one compiler run for many kernels)."""
  kernels: dict[str, list[tuple[UOp, OptList | None]]] = defaultdict(list)
  for item, item_opts in zip(items, opts):
    if not item.is_transfer:
      kernels[item.buffers[0].device].append((item.ast, item_opts))
  for device, asts in kernels.items():
    Device[device].prepare(asts)
