"""How much of refgrad's conformance matrix torch computes as SPEC.md says: every cell (op or cast x dtype) of the
check's batches (refgrad/testing/conformance/batches.py), each exported as a graph of its own.

    python plugins/torch/tests/torch_measure.py          # eager torch
    python plugins/torch/tests/torch_measure.py --compile  # Inductor: one graph per batch, judged per cell
"""
from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass

from refgrad_torch.export import Unsupported, run_on_torch
from torch_oracle import check_on_torch

from refgrad.tensor import Tensor
from refgrad.testing.conformance.batches import Batch, Segment, all_batches
from refgrad.testing.oracle.compare import Comparison, compare_lanes
from refgrad.testing.oracle.graph_check import plain_graph, reference_bounds
from refgrad.testing.strategies import ALL


@dataclass
class Cell:
  row: str
  column: str
  verdict: str  # "pass", "fail", "unsupported" or "error" (the compiler raised)
  detail: str = ""


def check_cell(batch: Batch, segment: Segment, compile: bool = False) -> Cell:
  """One cell of a batch as a graph of its own."""
  root = segment.build(tuple(Tensor(x) for x in batch.inputs)).uop
  try:
    result = check_on_torch(root, compile)
  except Unsupported as why:
    return Cell(segment.row, segment.column, "unsupported", str(why))
  return _verdict(segment.row, segment.column, result)


def _verdict(row: str, column: str, result: Comparison) -> Cell:
  if result.ok:
    return Cell(row, column, "pass")
  return Cell(row, column, "fail", f"{result.mismatch_count} of {result.checked} lanes differ")


def check_batch(batch: Batch, compile: bool = True) -> list[Cell]:
  """A whole batch as one graph (compiling costs seconds per graph), each cell judged on its own lanes."""
  sizes: list[int] = []
  root = plain_graph(batch.program(sizes)(*(Tensor(x) for x in batch.inputs)).uop)
  try:
    actual = run_on_torch(root, compile).reshape(-1)
  except Unsupported as why:
    return [Cell(s.row, s.column, "unsupported", str(why)) for s in batch.segments]
  except Exception as error:  # noqa: BLE001 -- the compiler failing on a graph eager torch runs is a finding
    return [Cell(s.row, s.column, "error", f"{type(error).__name__}: {str(error).splitlines()[0]}")
            for s in batch.segments]
  expected, bound, undefined = reference_bounds(root)
  verdicts = compare_lanes(actual, expected, undefined, abs_bound=bound)
  starts = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
  return [_verdict(s.row, s.column, verdicts.summary(slice(starts[i], starts[i + 1])))
          for i, s in enumerate(batch.segments)]


def all_cells(compile: bool = False) -> list[Cell]:
  """Eager: every cell a graph of its own (so one unsupported op costs one cell); compiled: one graph per batch."""
  batches = all_batches(list(ALL))
  if compile:
    return [cell for batch in batches for cell in check_batch(batch)]
  return [check_cell(batch, segment) for batch in batches for segment in batch.segments]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--compile", action="store_true", help="through torch.compile (Inductor) instead of eager")
  cells = all_cells(parser.parse_args().compile)
  print(dict(Counter(c.verdict for c in cells)))
  for cell in cells:
    if cell.verdict != "pass":
      print(f"{cell.verdict:12} {cell.row:28} {cell.column:10} {cell.detail}")


if __name__ == "__main__":
  main()
