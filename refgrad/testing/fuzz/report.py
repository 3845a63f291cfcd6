"""A campaign's results, added up chunk by chunk as the workers report them."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from refgrad.dtype import DType
from refgrad.testing.fuzz.coverage import coverage_universe
from refgrad.testing.fuzz.results import Chunk, Finding
from refgrad.testing.oracle.compare import add_histogram
from refgrad.testing.strategies import ALL

MISSING_SHOWN = 30  # unreached (op, dtype) pairs named at the end of a campaign


@dataclass
class FuzzReport:
  """A campaign's results, added up chunk by chunk as the workers report them."""
  device: str
  seconds: float = 0.0
  programs: int = 0
  findings: list[tuple[str, Path]] = field(default_factory=list)  # (kind, file), one per signature
  coverage: Counter = field(default_factory=Counter)  # (op, dtype) -> programs that executed it
  claimed: tuple[DType, ...] = ALL  # the dtypes the device claims: coverage is counted over them
  workers: list[str] = field(default_factory=list)
  per_worker: Counter = field(default_factory=Counter)  # worker -> programs
  timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # worker -> [(t, programs/s)]
  ulp: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
  signatures: dict[str, Finding] = field(default_factory=dict)  # signature -> its first (smallest) finding
  replayed: int = 0
  cut: int = 0  # programs stopped unfinished when the time ran out
  first_replay: float | None = None  # seconds from the start until a replayed example failed
  interrupted: bool = False

  @property
  def rate(self) -> float:
    return self.programs / self.seconds if self.seconds else 0.0

  def add(self, worker: str, chunk: Chunk, elapsed: float) -> list[Finding]:
    """Count one chunk in; returns the findings of signatures not seen before."""
    self.programs += chunk.programs
    self.per_worker[worker] += chunk.programs
    self.coverage.update(chunk.coverage)
    self.replayed += chunk.replayed
    self.cut += chunk.cut
    if chunk.programs and chunk.seconds and not chunk.replayed:
      self.timeline.setdefault(worker, []).append((round(elapsed, 2), chunk.programs / chunk.seconds))
    for key, histogram in chunk.ulp.items():
      add_histogram(self.ulp.setdefault(key, {}), histogram)
    new = []
    for finding in chunk.findings:
      if finding.replayed and self.first_replay is None:
        self.first_replay = elapsed
      if finding.signature in self.signatures:
        self.signatures[finding.signature].count += finding.count
      else:
        self.signatures[finding.signature] = finding
        new.append(finding)
    return new

  def coverage_text(self) -> str:
    """How many of the (op, dtype) pairs the campaign executed, and which it never reached."""
    universe = coverage_universe(self.claimed)
    missing = sorted(universe - set(self.coverage))
    dtypes_seen = {d for _, d in self.coverage}
    text = f"coverage: {len(universe) - len(missing)}/{len(universe)} op x dtype pairs executed, " \
           f"{len(dtypes_seen)} dtypes"
    if not missing:
      return text + "; every pair reached"
    shown = ", ".join(f"{op} {d}" for op, d in missing[:MISSING_SHOWN])
    return text + f"; never reached: {shown}" + (f" and {len(missing) - MISSING_SHOWN} more"
                                                  if len(missing) > MISSING_SHOWN else "")
