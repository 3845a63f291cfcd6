"""`refgrad check --standalone DIR`: a reproducer in the backend's own language (the device's DeviceImpl.standalone
hook) for each failing cell, `DIR/<device>_<row>_<column>_standalone/`. A unit with a failing cell is checked again
to get its failing kernel as a case (oracle/standalone_cases.py); a batch's output kernel holds many cells, so each
cell's reproducer judges only that cell's lanes of it. The cell's detail gets a line saying where it is (or why there
is none)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from refgrad.standalone import STANDALONE_SUFFIX, StandaloneCase
from refgrad.testing.conformance.batches import Batch
from refgrad.testing.conformance.corpus import ProgramCase
from refgrad.testing.conformance.results import FAIL, CaseResult
from refgrad.testing.oracle.reference import reference_schedule
from refgrad.testing.oracle.standalone_cases import failing_case, write_standalone


def folder_name(device: str, row: str, column: str) -> str:
  """A cell's reproducer folder: its device, row and column, in letters, digits and underscores."""
  slug = re.sub(r"[^0-9a-z]+", "_", f"{device} {row} {column}".lower()).strip("_")
  return slug + STANDALONE_SUFFIX


def segment_lanes(sizes: list[int], index: int) -> np.ndarray:
  """The flat lanes of a batch's output kernel that segment `index` fills (the segments are concatenated)."""
  lanes = np.zeros(sum(sizes), bool)
  start = sum(sizes[:index])
  lanes[start:start + sizes[index]] = True
  return lanes


def cell_cases(unit: Batch | ProgramCase, device: str, failed: list[CaseResult]) -> dict[int, StandaloneCase | None]:
  """The case of each failed cell (by its place in `failed`), None where the unit did not fail again."""
  if isinstance(unit, ProgramCase):
    if unit.replay:  # a jit's replays against its plain calls: no one kernel to reproduce
      return dict.fromkeys(range(len(failed)))
    case = failing_case(unit.fn, *unit.inputs, device=device, opts=unit.opts_on(device))
    return dict.fromkeys(range(len(failed)), case)
  sizes: list[int] = []
  program = unit.program(sizes)
  case = failing_case(program, *unit.inputs, device=device)
  if case is None or case.device_error or case.program.key is not reference_schedule(program, *unit.inputs)[-1].ast:
    return dict.fromkeys(range(len(failed)), case)  # no case, or a kernel every segment depends on: all of it
  places = {(s.row, s.column): i for i, s in enumerate(unit.segments)}
  return {n: case.judging_only(segment_lanes(sizes, places[(r.row, r.column)])) for n, r in enumerate(failed)}


def write_cell_reproducers(unit: Batch | ProgramCase, device: str, results: list[CaseResult], out: Path) -> None:
  """Write the reproducer of every failed cell of `unit` into `out`; each failed cell's detail says where."""
  failed = [r for r in results if r.status == FAIL]
  if not failed:
    return
  try:
    cases = cell_cases(unit, device, failed)
    notes = {n: write_standalone(out / folder_name(device, r.row, r.column), cases[n]) for n, r in enumerate(failed)}
  except Exception as e:  # the check's own verdicts stand whatever goes wrong here
    notes = dict.fromkeys(range(len(failed)), f"no standalone reproducer: writing it failed ({type(e).__name__}: {e})")
  for n, result in enumerate(failed):
    result.detail = f"{result.detail}\n{notes[n]}" if result.detail else notes[n]
