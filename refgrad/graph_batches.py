"""A schedule's consecutive kernels on one graph device, stitched into one graph (refgrad/graph_device.py).

The scheduler cuts a tensor graph into kernels; a graph device wants the graph whole, so its framework fuses and
schedules it itself. Stitching undoes the cut: where a kernel reads a buffer that an earlier kernel of the run wrote,
it reads that kernel's value instead, and the run becomes one item whose graph stores every buffer its kernels wrote
(the schedule made them, and a later schedule or a realized tensor may read any of them) from the buffers they read
first. A buffer read before it is written (an assignment) stays an input: the graph device reads every input before
it writes any output.
"""
from __future__ import annotations

from collections.abc import Callable

from refgrad.buffer import Buffer
from refgrad.dtype import dtypes
from refgrad.schedule import ScheduleItem
from refgrad.uop import Ops, UOp, prod


def _stitchable(item: ScheduleItem) -> bool:
  """A kernel of concrete sizes whose output fills its buffer (a symbolic one runs alone, and says why not)."""
  if item.is_transfer or item.var_vals:
    return False
  stored = item.ast.src[0].src[1] if len(item.ast.src) == 1 else None
  return stored is not None and prod(stored.shape) == item.buffers[0].size


def _buffers(items: list[ScheduleItem]) -> tuple[list[Buffer], list[Buffer]]:
  """The buffers the run writes (in order of first write) and those it reads before writing them (in order)."""
  written: dict[Buffer, None] = {}
  read: dict[Buffer, None] = {}
  for item in items:
    for buffer in item.buffers[1:]:
      if buffer not in written:
        read.setdefault(buffer)
    written.setdefault(item.buffers[0])
  return list(written), list(read)


def stitch(items: list[ScheduleItem]) -> ScheduleItem:
  """One item computing what `items` (kernels of one graph device, in order) compute: a SINK with one STORE per
  buffer they write, over PARAMs numbered outputs first, then the inputs."""
  outputs, inputs = _buffers(items)
  output_index = {id(b): i for i, b in enumerate(outputs)}  # a buffer both written and read first has two PARAMs
  param = {id(b): UOp(Ops.PARAM, b.dtype, (), (len(outputs) + i, b.size)) for i, b in enumerate(inputs)}
  latest: dict[int, UOp] = {}  # buffer -> the value the run has written into it so far, flat
  for item in items:
    reads = {u: latest.get(id(item.buffers[u.arg[0]]), param.get(id(item.buffers[u.arg[0]])))
             for u in item.ast.toposort if u.op is Ops.PARAM and u.arg[0] > 0}
    value = item.ast.src[0].src[1].substitute(reads)
    size = item.buffers[0].size
    latest[id(item.buffers[0])] = value if value.shape == (size,) else UOp(Ops.RESHAPE, value.dtype, (value,), (size,))
  stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, b.dtype, (), (output_index[id(b)], b.size)), latest[id(b)]))
            for b in outputs]
  return ScheduleItem(UOp(Ops.SINK, dtypes.void, tuple(stores)), tuple(outputs + inputs))


def stitch_graph_runs(items: list[ScheduleItem], is_graph: Callable[[str], bool]) -> list[ScheduleItem]:
  """The schedule with each run of consecutive stitchable kernels on one graph device (is_graph(device name)) as
  one item; other items as they were."""
  merged: list[ScheduleItem] = []
  run: list[ScheduleItem] = []

  def flush() -> None:
    if run:
      merged.append(stitch(run) if len(run) > 1 else run[0])
      run.clear()
  for item in items:
    device = item.buffers[0].device
    if not is_graph(device) or not _stitchable(item):  # the cheap test first: most devices are kernel devices
      flush()
      merged.append(item)
    elif run and run[0].buffers[0].device != device:
      flush()
      run.append(item)
    else:
      run.append(item)
  flush()
  return merged
