"""`refgrad check`: every unit of the suite (batches.py, corpus.py) on a device, the results merged per cell, and
the device's code paths the programs that ran took."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from refgrad.codegen.contract import Program, UnsupportedOpError
from refgrad.dtype import DTYPES_BY_PRIORITY, DType
from refgrad.registry import Device
from refgrad.testing.conformance.batches import Batch, all_batches
from refgrad.testing.conformance.corpus import ProgramCase, corpus_cases
from refgrad.testing.conformance.reproducers import write_cell_reproducers
from refgrad.testing.conformance.results import FAIL, UNSUPPORTED, CaseResult, CheckRun, UnitOutcome
from refgrad.testing.oracle.compare import add_histogram
from refgrad.testing.oracle.prepare import prepare_checks
from refgrad.testing.oracle.reference import ReferenceMismatch
from refgrad.testing.terminal import ProgressBar

Unit = Batch | ProgramCase


def all_units(kinds: list[DType] | None = None) -> list[Unit]:
  """Everything `refgrad check` runs, in order: ops, chains, casts, reductions, then the program corpus."""
  return [*all_batches(list(kinds or DTYPES_BY_PRIORITY)), *corpus_cases()]


def _cells(unit: Unit) -> list[tuple[str, str]]:
  return [(s.row, s.column) for s in unit.segments] if isinstance(unit, Batch) else [(unit.label, "program")]


def run_unit(unit: Unit, device: str) -> UnitOutcome:
  """Run one batch or program on `device`; a dtype it does not declare makes every cell unsupported, an op a graph
  device cannot compute as SPEC.md says (UnsupportedOpError) the cells of that op (a batch is split into its cells
  to find them), and a crash of the device fails every cell with its message."""
  undeclared = [d.name for d in dict.fromkeys(unit.dtypes) if d not in Device[device].caps.dtypes]
  if undeclared:
    detail = f"{', '.join(undeclared)} not in Capabilities.dtypes"
    return UnitOutcome([CaseResult(row, column, UNSUPPORTED, detail=detail) for row, column in _cells(unit)])
  try:
    outcome = unit.run(device)
  except ReferenceMismatch as e:
    status, detail = FAIL, str(e)
  except UnsupportedOpError as e:
    if isinstance(unit, Batch) and len(unit.segments) > 1:  # one op of the batch: its own cell says so, not all
      return UnitOutcome.combined([run_unit(single, device) for single in unit.one_per_segment()])
    status, detail = UNSUPPORTED, str(e)
  except NotImplementedError as e:
    status, detail = UNSUPPORTED, str(e)
  except Exception as e:  # a crash of the device under test is a failure with its message
    status, detail = FAIL, f"{type(e).__name__}: {e}"
  else:
    outcome.paths = code_paths(device, outcome.programs)
    paths = sorted(outcome.paths)
    for result in outcome.results:
      result.paths = paths
    return outcome
  return UnitOutcome([CaseResult(row, column, status, detail=detail) for row, column in _cells(unit)])


def merge(results: list[CaseResult]) -> list[CaseResult]:
  """One result per (row, column): a cell checked in several batches (reduction lengths) adds up."""
  cells: dict[tuple[str, str], CaseResult] = {}
  for r in results:
    seen = cells.get((r.row, r.column))
    if seen is None:
      cells[(r.row, r.column)] = CaseResult(**asdict(r))
      continue
    seen.status = FAIL if FAIL in (seen.status, r.status) else seen.status
    seen.worst_ulp, seen.checked, seen.skipped = max(seen.worst_ulp, r.worst_ulp), seen.checked + r.checked, \
      seen.skipped + r.skipped
    seen.detail = "\n\n".join(d for d in (seen.detail, r.detail) if d)
    seen.paths = sorted(set(seen.paths) | set(r.paths))
    add_histogram(seen.ulp_histogram, r.ulp_histogram)
  return list(cells.values())


def code_paths(device: str, programs: list[Program]) -> Counter[str]:
  """Which of the device's code paths these programs (as they ran) took, as its renderer reports them (an optional
  `code_paths(program)` method: split reductions, remainder loops, grouped reductions, each opt and its amount,
  ...)."""
  report = getattr(Device[device].renderer, "code_paths", None)
  found: Counter[str] = Counter()
  if report is not None:
    for program in programs:
      found.update(report(program))
  return found


PREPARED_UNITS = 32  # units whose kernels compile in one batch (most units have one kernel: about 45 kernels)


def prepare_units(units: list[Unit], device: str) -> None:
  """Compile at once the kernels of the units that `device` claims the dtypes of (prepare.prepare_checks)."""
  claimed = Device[device].caps.dtypes
  prepare_checks(device, [plan for unit in units if all(d in claimed for d in unit.dtypes)
                          and (plan := unit.planned(device)) is not None])


def run_conformance(device: str, progress: Callable[[int, int, Unit], None] | None = None,
                    only: str | None = None, stop_on_failure: bool = False,
                    standalone: str | Path | None = None) -> CheckRun:
  """Run every unit (those with a row containing `only`, if given) on `device`; with `stop_on_failure`, stop
  after the first unit with a failing cell. The kernels of every PREPARED_UNITS units are compiled in one batch
  before they run (prepare_units). With `standalone` (a folder), each failing cell's reproducer in the
  backend's own language is written there (reproducers.py)."""
  device = Device.canonicalize(device)
  started = time.perf_counter()
  units = [u for u in all_units() if only is None or any(only in row for row in u.rows)]
  results: list[CaseResult] = []
  paths: Counter[str] = Counter()
  for i, unit in enumerate(units):
    if progress:
      progress(i, len(units), unit)
    if i % PREPARED_UNITS == 0:
      prepare_units(units[i:i + PREPARED_UNITS], device)
    outcome = run_unit(unit, device)
    if standalone is not None:
      write_cell_reproducers(unit, device, outcome.results, Path(standalone))
    results += outcome.results
    paths.update(outcome.paths)
    if stop_on_failure and any(r.status == FAIL for r in outcome.results):
      break
  reports = getattr(Device[device].renderer, "code_paths", None) is not None
  return CheckRun(device, merge(results), paths, reports, time.perf_counter() - started)


def progress_printer(stream: Any = None) -> Callable[[int, int, Unit], None]:
  """A terminal.ProgressBar over the units: opened at the first unit, closed at the last (a unit is counted when
  it starts, so the bar names the one running)."""
  bar: ProgressBar | None = None

  def show(i: int, total: int, unit: Unit) -> None:
    nonlocal bar
    if bar is None:
      bar = ProgressBar(total, "refgrad check", stream).start()
    bar.advance(label=unit.label)
    if i + 1 == total:
      bar.close()
      bar = None
  return show
