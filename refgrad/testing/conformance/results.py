"""What `refgrad check` finds: one result per cell of the op x dtype matrix (or corpus program), and the run's
whole record, which the reports (report.py, terminal.py) show."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from refgrad.codegen.contract import Program

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"


@dataclass
class CaseResult:
  row: str       # op name, "CAST->int8", "BITCAST->...", "REDUCE ADD", "chain: a*b+c", or a program name
  column: str    # dtype name (or "program")
  status: str
  worst_ulp: int = 0
  checked: int = 0
  skipped: int = 0
  detail: str = ""
  ulp_histogram: dict[int, int] = field(default_factory=dict)  # transcendental cells: ULP bucket -> lanes
  paths: list[str] = field(default_factory=list)  # the device's code paths its kernels took (as its renderer says)


@dataclass
class UnitOutcome:
  results: list[CaseResult]
  programs: list[Program] = field(default_factory=list)  # what ran on the device, for the code-path report
  paths: Counter[str] = field(default_factory=Counter)  # the code paths they took (run_unit reads them once)

  @staticmethod
  def combined(outcomes: list[UnitOutcome]) -> UnitOutcome:
    """The outcomes of a unit's parts, run one by one, as one."""
    paths: Counter[str] = Counter()
    for outcome in outcomes:
      paths.update(outcome.paths)
    return UnitOutcome([r for o in outcomes for r in o.results], [p for o in outcomes for p in o.programs], paths)


@dataclass
class CheckRun:
  device: str
  results: list[CaseResult]
  paths: Counter[str]
  reports_paths: bool  # the device's renderer reports code paths
  seconds: float
