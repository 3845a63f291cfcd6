"""One worker's campaign: batches of hypothesis examples, run in chunks of time so progress can be reported."""
from __future__ import annotations

import math
import time
import unittest
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from refgrad.dtype import DType
from refgrad.plugin_loader import load_plugin_file
from refgrad.registry import Device
from refgrad.testing.fuzz.database import database_key, example_database
from refgrad.testing.fuzz.program_check import compiles_apart
from refgrad.testing.fuzz.results import (
  FINDING_KINDS,
  Chunk,
  Finding,
  FindingError,
  HarnessError,
  Verdict,
  only_findings,
)
from refgrad.testing.fuzz.seeded import SeededDatabase, draw_seeded, program_seed
from refgrad.testing.fuzz.signatures import finding_signature
from refgrad.testing.fuzz.worker import CUT, PREPARED, Worker, died_planning
from refgrad.testing.strategies import ALL, alu_kernels, claimed_dtypes, tensor_programs


def programs_strategy(focus: DType | None = None, allowed: tuple[DType, ...] = ALL,
                      whole_graphs: bool = False) -> st.SearchStrategy[Any]:
  """Random Tensor programs and random primitive-op kernels over the dtypes in `allowed` (those the device
  claims); with `focus`, their inputs and roots have that dtype. Campaigns rotate the focus through every allowed
  dtype, batch by batch: left to itself, generation favours the first choices, and a minute's campaign would never
  reach the rarer dtypes' ops. For a graph device (`whole_graphs`) no program is sharded or of symbolic size: the
  graph-device contract has neither yet."""
  choices = (focus,) if focus is not None else allowed
  plain = {"sharded": False, "symbolic_sizes": False} if whole_graphs else {}
  return st.one_of(tensor_programs(dtype_choices=choices, allowed=allowed, **plain),
                   alu_kernels(dtype_choices=choices, allowed=allowed))


SHRINK_SECONDS = 20.0  # at least this long to shrink a finding, even if the chunk's time is up (not past the grace)
# Past the command's time (ends_at), what a campaign began goes on at most this long: the program running (whatever
# --timeout says), a finding being shrunk. Then the worker is stopped, and the program it ran is no finding: a
# campaign ends within --seconds plus this (and the engine's teardown), however long its programs or timeout. Ten
# seconds let most shrinks of a late finding finish, and keep a CI job's time limit easy to set.
GRACE_SECONDS = 10.0


# Seconds before a program counts as a hang, by the kind of device (refgrad fuzz --timeout overrides it). A graph
# device compiles each program whole with a framework's compiler as it runs it: torch.compile's first graph in a new
# worker took over 30 s on a loaded machine (a "hang" that replayed in 22 s), where a kernel device compiles ahead.
HANG_SECONDS = {"kernel": 30.0, "graph": 120.0}


def hang_seconds(device: str) -> float:
  """The default --timeout of a campaign on `device`."""
  return HANG_SECONDS[Device[device].kind]


@dataclass(frozen=True)
class CampaignConfig:
  device: str
  plugin_files: tuple[str, ...] = ()
  timeout: float = 30.0        # seconds before a program counts as a hang
  opts: bool = False           # run every kernel under a random legal opt list
  batch: int = 40              # hypothesis examples per batch (one seed, one focus dtype)
  compile_ahead: bool = True   # compile every kernel of a batch at once before its programs run
  max_findings: int | None = None
  database: str | None = None  # the example database read and written (directory or redis://)
  shared: tuple[str, ...] = ()  # example databases only read
  ends_at: float | None = None  # time.time() when the command's time is up, start-up included (None: no limit);
  # wall-clock time, so it means the same in every process and on every machine of a Ray cluster
  max_programs: int | None = None  # stop once this many programs ran (at the end of the batch that reached it)
  grace: float = GRACE_SECONDS  # how long past ends_at what was begun may go on

  @property
  def cut_at(self) -> float | None:
    """The time.time() when whatever a campaign still runs is cut short (None: never)."""
    return None if self.ends_at is None else self.ends_at + self.grace


def batch_seed(start_seed: int, batch: int, index: int, workers: int) -> int:
  """The seed of worker `index`'s `batch`-th batch: the workers of a campaign take turns, so none repeats another."""
  return start_seed + batch * workers + index


def _reached(count: int, limit: int | None) -> bool:
  return limit is not None and count >= limit


@dataclass
class Batch:
  """A batch's programs, each drawn from a seed of its own (seeded.draw_seeded), and the choices that drew each."""
  index: int
  focus: DType
  seed: int
  programs: list[Any]
  choices: list[tuple]


class Campaign:
  """One worker's campaign, run in chunks (`run_for`). Worker `index` of `workers` takes batch seeds
  start_seed + k * workers + index, so workers never repeat each other. Worker 0 first replays every example of
  the database. Each batch's programs are drawn from seeds first (while the worker runs the batch before), then sent
  to the worker, which compiles all their kernels at once and runs them in turn; the first program that fails is
  given to hypothesis as the choices that drew it, and hypothesis replays it, shrinks it and saves it in the
  database. A batch runs to its end even past its chunk's time (not past the command's)."""

  def __init__(self, config: CampaignConfig, start_seed: int = 0, index: int = 0, workers: int = 1,
               first_batch: int = 0):
    for path in config.plugin_files:  # this process asks the device which dtypes it claims
      load_plugin_file(path)
    self.config, self.start_seed, self.index, self.workers = config, start_seed, index, workers
    self.allowed = claimed_dtypes(config.device)
    self.announces = config.compile_ahead and compiles_apart(config.device)  # compiles a batch while one runs
    self.worker = Worker(config.device, list(config.plugin_files), config.timeout, config.opts, config.cut_at)
    self.database = example_database(config.database, config.shared)
    self.batch_index, self.replay_pending = first_batch, self.database is not None and index == 0
    self.started, self.found, self.ran, self.harness_failure = time.monotonic(), 0, 0, ""
    self.ahead: Batch | None = None  # the next batch, drawn while this one ran
    self.strategies: dict[DType, st.SearchStrategy[Any]] = {}  # programs_strategy by focus dtype, built once
    self.database_keys: dict[DType, bytes] = {}

  def run_for(self, seconds: float) -> Chunk:
    """Batches until `seconds` have passed, or the command's time is up (the first call of worker 0 only replays
    the database, so a stored failure is reported at once)."""
    chunk, began = Chunk(), time.monotonic()
    if self.replay_pending:
      self.replay_pending = False
      self._replay(chunk)
    else:
      deadline = began + min(seconds, self.seconds_left)
      while time.monotonic() < deadline and not self.done:
        self._batch(chunk, deadline)
    if self.harness_failure:  # reported by the last program of a batch, collected after its test had ended
      raise HarnessError(self.harness_failure)
    chunk.seconds, chunk.done = time.monotonic() - began, self.done
    return chunk

  @property
  def seconds_left(self) -> float:
    return float("inf") if self.config.ends_at is None else self.config.ends_at - time.time()

  @property
  def done(self) -> bool:
    """The campaign reached its max_findings or max_programs, or the command's time is up (once the database is
    replayed)."""
    time_up = self.seconds_left <= 0 and not self.replay_pending
    return time_up or _reached(self.found, self.config.max_findings) or _reached(self.ran, self.config.max_programs)

  def close(self) -> None:
    self.worker.stop()

  def _strategy(self, focus: DType) -> st.SearchStrategy[Any]:
    if focus not in self.strategies:
      whole = Device[self.config.device].graph is not None
      self.strategies[focus] = programs_strategy(focus, self.allowed, whole)
      self.database_keys[focus] = database_key(self.config.device, focus, self.allowed)
    return self.strategies[focus]

  def _test(self, check: Callable[[Any], None], focus: DType, seed_value: int, phases: list[Phase],
            database: Any) -> Callable[[], None]:
    # settings after seed: @seed turns the database off, so it is given again last
    test = settings(max_examples=self.config.batch, deadline=None, database=database, derandomize=False,
                    phases=phases, print_blob=False, suppress_health_check=list(HealthCheck))(
      seed(seed_value)(given(self._strategy(focus))(check)))
    test._hypothesis_internal_database_key = self.database_keys[focus]
    return test

  def _run(self, test: Callable[[], None]) -> None:
    """Run a hypothesis test whose failures are findings; anything else is refgrad's own bug and propagates, as
    does a failure the worker reported of refgrad's harness (kept aside so hypothesis never shrinks it)."""
    try:
      test()
    except Exception as e:
      if not only_findings(e):
        raise
    if self.harness_failure:
      raise HarnessError(self.harness_failure)

  def _verdict(self, chunk: Chunk, program: Any, verdict: Verdict) -> Finding | None:
    if verdict.kind == CUT:  # the program did not finish in the campaign's time: it neither ran nor failed
      chunk.cut += 1
      return None
    chunk.add(verdict)
    self.ran += 1
    if verdict.kind == "harness":
      self.harness_failure = self.harness_failure or verdict.detail
    if verdict.kind not in FINDING_KINDS:
      return None
    signature = finding_signature(verdict.kind, program, verdict.kernel)
    return Finding(verdict.kind, verdict.detail, program, signature, at=time.monotonic() - self.started)

  def _shrinking_check(self, chunk: Chunk, found: dict[str, Finding], stop_at: float) -> Callable[[Any], None]:
    """A check that runs each program and raises its finding, for hypothesis to shrink; every failing program goes
    in `found` by signature, in order, so the last is the one hypothesis ended on (its smallest)."""
    def check(program: Any) -> None:
      if time.monotonic() > stop_at or self.harness_failure:
        return  # time is up, or refgrad itself failed: let hypothesis finish quickly, without shrinking
      finding = self._verdict(chunk, program, self.worker.run(program))
      if finding is not None:
        found.pop(finding.signature, None)
        found[finding.signature] = finding
        raise FindingError(finding.kind, finding.detail, program)
    return check

  def _replay(self, chunk: Chunk) -> None:
    """Every example stored under each focus dtype's key, run once (hypothesis's reuse phase)."""
    found: dict[str, Finding] = {}
    check = self._shrinking_check(chunk, found, float("inf"))
    for focus in self.allowed:
      before = chunk.programs
      try:
        self._run(self._test(check, focus, 0, [Phase.reuse], self.database))
      except unittest.SkipTest:  # nothing saved under this key: hypothesis ran no example
        pass
      chunk.replayed += chunk.programs - before
    for finding in found.values():
      finding.replayed = True
    self._keep(chunk, found.values())

  def _draw(self, index: int) -> Batch:
    """Batch `index`: its focus dtype (rotating through the allowed ones), its seed, and its programs drawn from
    the seeds program_seed(seed, 0), program_seed(seed, 1), ... (drawn ahead while the batch before ran)."""
    if self.ahead is not None and self.ahead.index == index:
      return self.ahead
    focus = self.allowed[index % len(self.allowed)]
    batch = Batch(index, focus, batch_seed(self.start_seed, index, self.index, self.workers), [], [])
    for position in range(self.config.batch):
      drawn = draw_seeded(self._strategy(focus), program_seed(batch.seed, position))
      if drawn is not None:
        batch.programs.append(drawn[0])
        batch.choices.append(drawn[1])
    return batch

  def _batch(self, chunk: Chunk, deadline: float) -> None:
    batch = self._draw(self.batch_index)
    self.batch_index += 1
    chunk.batches += 1
    failed = self._run_batch(chunk, batch.programs)
    if failed is None:
      return
    position, suspect = failed
    found: dict[str, Finding] = {}
    cut = math.inf if self.config.cut_at is None else time.monotonic() + self.config.cut_at - time.time()
    stop_at = min(max(deadline, time.monotonic() + SHRINK_SECONDS), cut)
    replay = SeededDatabase(self.database_keys[batch.focus], batch.choices[position], self.database)
    self._run(self._test(self._shrinking_check(chunk, found, stop_at), batch.focus, batch.seed,
                         [Phase.reuse, Phase.shrink], replay))
    # one finding a batch: what hypothesis shrank to (the failures on the way are larger forms of it); not
    # reproduced (a flaky hang): the program as first seen
    self._keep(chunk, list(found.values())[-1:] or [suspect])

  def _run_batch(self, chunk: Chunk, programs: list[Any]) -> tuple[int, Finding] | None:
    """The batch in the worker, every kernel of its programs compiled first in one go (unless the config says not
    to), then each program run in turn until the first that fails, whose position and finding this returns. The
    next batch is drawn while the worker compiles, and on a device that compiles apart (program_check.compiles_apart)
    announced to the worker, which plans it and compiles its kernels while this batch runs. A worker that dies or
    hangs while compiling runs the batch again without compiling ahead, and one that dies or hangs while planning
    the next batch runs the rest of this one again, so that a crash or a hang is pinned to its program and kernel."""
    self.worker.send(programs, prepare=self.config.compile_ahead)
    self.ahead = None
    if not self.done:
      self.ahead = self._draw(self.batch_index)
      if self.announces:
        self.worker.announce(self.ahead.programs)
    if self.config.compile_ahead and (first := self.worker.receive()) != PREPARED:
      if isinstance(first, Verdict) and first.kind in ("harness", CUT):  # the worker never started, or time ran out
        finding = self._verdict(chunk, programs[0], first)
        return None if finding is None else (0, finding)
      self.worker.send(programs)
    suspect: tuple[int, Finding] | None = None
    done = 0
    while done < len(programs):  # the first runs even when the worker's start-up took the time (not the grace)
      verdict = self.worker.receive(more_to_come=done < len(programs) - 1)
      if died_planning(verdict):  # the next batch's own prepare meets what it died of again
        self.worker.send(programs[done:])
        continue
      finding = self._verdict(chunk, programs[done], verdict)
      suspect = None if finding is None else (done, finding)
      done += 1
      if suspect is not None or self.harness_failure or self.seconds_left <= 0:
        break
    self.worker.finish()
    return suspect

  def _keep(self, chunk: Chunk, findings: Any) -> None:
    for finding in findings:
      chunk.findings.append(finding)
      self.found += 1


def replay_database(device: str, databases: tuple[str, ...], plugin_files: tuple[str, ...] = (),
                    timeout: float = 30.0) -> Chunk:
  """Every failing example saved for `device` in `databases` (read only), run once on it: the Chunk's findings are
  those that still fail, `replayed` how many ran."""
  runner = Campaign(CampaignConfig(device, plugin_files, timeout, shared=tuple(databases)))
  try:
    return runner.run_for(0.0)
  finally:
    runner.close()
