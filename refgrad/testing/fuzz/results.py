"""What the fuzz campaign passes between its parts: a worker's verdict on one program, findings, and the chunk of work
a campaign reports to the driver (all picklable, for worker processes and Ray actors)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from refgrad.testing.oracle.compare import add_histogram
from refgrad.testing.programs import RandomKernel, TensorProgram

FINDING_KINDS = ("mismatch", "error", "crash", "hang")


class HarnessError(Exception):
  """refgrad's own fuzzing harness failed in a worker (not the device under test); the message is its traceback."""


@dataclass
class Verdict:
  """What the worker says of one program; `kernel` is the index of the schedule item that was running (-1: none)."""
  kind: str  # "ok", one of FINDING_KINDS, or "harness" (refgrad's own failure: detail is its traceback)
  detail: str = ""
  coverage: list[tuple[str, str]] = field(default_factory=list)
  ulp: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
  kernel: int = -1


@dataclass
class Finding:
  kind: str
  detail: str
  program: Any
  signature: str
  count: int = 1    # batches (and replays) that ended in it
  at: float = 0.0   # seconds into its worker's campaign when it was first found
  replayed: bool = False  # found by replaying an example saved in the database
  path: str = ""  # the pytest file written for its signature


class FindingError(Exception):
  def __init__(self, kind: str, detail: str, program: Any):
    super().__init__(f"{kind}: {detail.splitlines()[0] if detail else ''}")
    self.kind, self.detail, self.program = kind, detail, program


def only_findings(error: BaseException) -> bool:
  """True if hypothesis raised nothing but FindingErrors: one, several distinct ones (an exception group), or
  one that stopped reproducing when replayed (a FlakyFailure, e.g. a hang that came in time the second time)."""
  if isinstance(error, FindingError):
    return True
  inner = getattr(error, "exceptions", None)
  return bool(inner) and all(only_findings(e) for e in inner)


@dataclass
class Chunk:
  """What a campaign did in one `run_for`: added up by the driver, so it is all counts (picklable, small)."""
  programs: int = 0
  seconds: float = 0.0
  batches: int = 0
  replayed: int = 0
  cut: int = 0  # programs stopped unfinished when the campaign's time ran out (worker.CUT)
  done: bool = False  # the campaign reached its max_findings, or the command's time is up
  findings: list[Finding] = field(default_factory=list)
  coverage: Counter = field(default_factory=Counter)  # (op, dtype) -> programs that executed it
  ulp: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)

  def add(self, verdict: Verdict) -> None:
    self.programs += 1
    self.coverage.update(verdict.coverage)
    for key, histogram in verdict.ulp.items():
      add_histogram(self.ulp.setdefault(key, {}), histogram)


def check_chunk(chunk: Any, worker: str) -> Chunk:
  """`chunk` if it is a Chunk as a campaign makes one; else HarnessError naming the worker. A Ray worker's chunk is
  unpickled from the network (Ray itself pickles, so the cluster is trusted to run code); what it holds is checked
  before it is used: a finding's kind and signature name its file, and its program is written into it."""
  if fault := _chunk_fault(chunk):
    raise HarnessError(f"{worker} sent a chunk of work with {fault}: not refgrad's campaign, or corrupt")
  return chunk


def _chunk_fault(chunk: Any) -> str:
  if not isinstance(chunk, Chunk):
    return f"{type(chunk).__name__}, not a Chunk"
  counts = (chunk.programs, chunk.batches, chunk.replayed, chunk.cut)
  if not all(type(n) is int and n >= 0 for n in counts):
    return f"counts {counts} that are not non-negative ints"
  if not (isinstance(chunk.seconds, (int, float)) and 0 <= chunk.seconds < float("inf")):
    return f"seconds {chunk.seconds!r}"
  if not (isinstance(chunk.findings, list) and all(_is_finding(f) for f in chunk.findings)):
    return "a finding that is not one (its kind, signature, count or program)"
  return ""


def _is_finding(finding: Any) -> bool:
  return (isinstance(finding, Finding) and finding.kind in FINDING_KINDS and isinstance(finding.detail, str) and
          isinstance(finding.signature, str) and re.fullmatch(r"[0-9a-f]{64}", finding.signature) is not None and
          type(finding.count) is int and finding.count >= 1 and
          isinstance(finding.program, (TensorProgram, RandomKernel)))  # a campaign draws both
