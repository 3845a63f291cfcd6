"""`refgrad fuzz`: random programs on a device against the PYTHON reference, until the time is up.

Each program runs in a worker process, with a timeout, so a segfault or a hang of the backend under test
becomes a finding and the campaign goes on with a fresh worker. hypothesis generates the programs (random
Tensor programs and random primitive-op kernels) and shrinks every failure to a small one, which is written
as a standalone pytest file, once per signature (the kind of failure and the failing kernel's form). With an
example database, failures are saved there and every later campaign replays them first. Where the campaigns run
(this process, local processes, Ray actors) is refgrad/testing/fuzz_engines.py; the HTML report is fuzz_report.py.

Only failures of the device under test are findings. An exception of refgrad's own harness (the program
strategies, the reference run, the comparison, the report) is a bug of refgrad: it stops the campaign and
propagates (`refgrad fuzz` prints its traceback and exits with status 3), never counted, never ignored.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import re
import signal
import sys
import tempfile
import textwrap
import time
import traceback
import unittest
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from refgrad.codegen.contract import OptList
from refgrad.codegen.pipeline import random_kernel_opts
from refgrad.dtype import DTYPES_BY_PRIORITY, DType, dtypes
from refgrad.plugin_loader import load_plugin_file
from refgrad.registry import Device
from refgrad.testing.compare import add_histogram
from refgrad.testing.strategies import ALL, alu_kernels, tensor_programs
from refgrad.uop import GroupOp, Ops, UOp

FINDING_KINDS = ("mismatch", "error", "crash", "hang")
MISSING_SHOWN = 30  # unreached (op, dtype) pairs named at the end of a campaign


class HarnessError(Exception):
  """refgrad's own fuzzing harness failed in a worker (not the device under test); the message is its traceback."""


# ---- coverage: which primitive op x dtype pairs the campaign's kernels executed
def coverage_universe(claimed: tuple[DType, ...] = ALL) -> set[tuple[str, str]]:
  """Every (op, dtype) pair a device claiming `claimed` can be asked to run: ALU ops by operand dtype, casts and
  bitcasts by target dtype, reductions by dtype."""
  from refgrad.ops import OP_FACTS
  every = list(claimed)
  pairs = {(op.name, d.name) for op, facts in OP_FACTS.items() for d in every if d.kind in facts.kinds}
  pairs |= {("CAST", d.name) for d in every} | {("BITCAST", d.name) for d in every if d != dtypes.bool}
  pairs |= {(f"REDUCE {op}", d.name) for op in ("ADD", "MUL", "MAX") for d in every if d != dtypes.bool}
  pairs |= {("REDUCE MAX", "bool")} if dtypes.bool in every else set()  # any(): sums of bools are cast first
  return pairs


def kernel_pairs(ast: Any) -> set[tuple[str, str]]:
  """The (op, dtype) pairs one scheduled kernel executes (see coverage_universe)."""
  pairs = set()
  for u in ast.toposort:
    if u.op in GroupOp.ALU:
      pairs.add((u.op.name, (u.src[-1] if u.op is Ops.WHERE else u.src[0]).dtype.name))
    elif u.op in (Ops.CAST, Ops.BITCAST):
      pairs.add((u.op.name, u.dtype.name))
    elif u.op is Ops.REDUCE_AXIS:
      pairs.add((f"REDUCE {u.arg[0].name}", u.dtype.name))
  return pairs


# ---- the worker: runs one program at a time, in its own process
def opts_for(program_text: str, device: str) -> Callable[[UOp], OptList]:
  """The opt lists `refgrad fuzz --opts` runs a program's kernels with on a device: random and legal
  (pipeline.random_kernel_opts), drawn in kernel order from a seed made of the program's text, so a finding
  replays with the same opts."""
  caps = Device[device].caps
  rng = random.Random(hashlib.sha256(program_text.encode()).hexdigest())
  return lambda ast: random_kernel_opts(ast, caps, rng)


def transcendental_root(program: Any) -> tuple[str, str] | None:
  """(op, dtype) of a random kernel whose root is a transcendental op over exact operands (alu_kernels puts them
  only there), so the output's ULP error is that op's own; None for any other program."""
  root = getattr(program, "root", None)
  if root is None or getattr(Ops, root.op, None) not in GroupOp.Transcendental:
    return None
  return root.op, root.dtype.name


def run_one(program: Any, device: str, coverage: set[tuple[str, str]] | None = None, opts: bool = False,
            ulp: dict[tuple[str, str], dict[int, int]] | None = None,
            on_item: Callable[[int], None] | None = None) -> tuple[str, str]:
  """('ok'|'mismatch'|'error', detail) for one program, in this process. An exception that the device under
  test did not raise is refgrad's own and propagates. The (op, dtype) pairs of a checked program's kernels are
  added to `coverage`, and a transcendental root's ULP errors to `ulp` ((op, dtype) -> {bucket: lanes}). With
  `opts`, the device runs each kernel under a random legal opt list (opts_for). `on_item(index)` is told which
  schedule item runs next (check_against_reference)."""
  from refgrad.testing.reference import ReferenceMismatch, check_against_reference, raised_by_device
  chooser = opts_for(program.to_python(), device) if opts else None
  measured = transcendental_root(program) if ulp is not None else None
  try:
    report = check_against_reference(program.run, *program.inputs, device=device, opts=chooser,
                                     keep_lanes=measured is not None, on_item=on_item)
  except ReferenceMismatch as e:
    return "mismatch", str(e)
  except Exception as e:
    if not raised_by_device(e):
      raise
    return "error", traceback.format_exc(limit=6)
  if coverage is not None:
    for kernel in report.kernels:
      if kernel.ast is not None:  # None: a transfer between devices
        coverage |= kernel_pairs(kernel.ast)
  if measured is not None:
    add_histogram(ulp.setdefault(measured, {}), report.kernels[-1].lanes.verdicts.histogram())
  return "ok", ""


@dataclass
class Verdict:
  """What the worker says of one program; `kernel` is the index of the schedule item that was running (-1: none)."""
  kind: str  # "ok", one of FINDING_KINDS, or "harness" (refgrad's own failure: detail is its traceback)
  detail: str = ""
  coverage: list[tuple[str, str]] = field(default_factory=list)
  ulp: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
  kernel: int = -1


def _worker_main(conn: Any, current: Any, device: str, plugin_files: list[str], opts: bool) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the campaign's to handle: this process is stopped by it
  for path in plugin_files:
    load_plugin_file(path)
  conn.send("ready")  # the timeout of the first program starts now, not while this process imports

  def started(index: int) -> None:
    current.value = index
  while True:
    try:
      program = conn.recv()
    except EOFError:  # the campaign is gone
      return
    if program is None:
      return
    covered: set[tuple[str, str]] = set()
    ulp: dict[tuple[str, str], dict[int, int]] = {}
    current.value = -1
    try:
      kind, detail = run_one(program, device, covered, opts, ulp, started)
      verdict = Verdict(kind, detail, sorted(covered), ulp, current.value)
    except Exception:
      verdict = Verdict("harness", traceback.format_exc())
    try:
      conn.send(verdict)
    except (BrokenPipeError, EOFError):  # the campaign stopped (Ctrl-C, time up) while this program ran
      return


STARTUP_SECONDS = 300  # to import refgrad and the plugins in a new worker process (minutes on a loaded machine)


class Worker:
  """A worker process that is replaced whenever it dies or hangs. `send` then `receive` lets the campaign draw the
  next program while this one runs; `current` (shared memory) names the schedule item running, so a crash or a
  hang still says which kernel it was in."""

  def __init__(self, device: str, plugin_files: list[str], timeout: float, opts: bool = False):
    self.device, self.plugin_files, self.timeout, self.opts = device, plugin_files, timeout, opts
    self.process: multiprocessing.Process | None = None
    self.sent_at, self.start_failure = 0.0, ""

  def start(self) -> str:
    """Start the process and wait until it has loaded refgrad and the plugins; why it could not, or ""."""
    context = multiprocessing.get_context("spawn")
    self.conn, child = context.Pipe()
    self.current = context.Value("i", -1, lock=False)
    self.process = context.Process(target=_worker_main, daemon=True,
                                   args=(child, self.current, self.device, self.plugin_files, self.opts))
    self.process.start()
    child.close()  # the process's end only: once it dies, this side reads EOF
    if not self.conn.poll(STARTUP_SECONDS):
      self.stop()
      return f"the fuzz worker process did not start within {STARTUP_SECONDS} s"
    try:
      self.conn.recv()
    except (EOFError, ConnectionResetError):
      self.process.join(10)
      code = self.process.exitcode
      self.process = None
      return (f"the fuzz worker process died while starting (exit code {code}): loading refgrad or the plugin "
              f"files {self.plugin_files} failed")
    return ""

  def send(self, program: Any) -> None:
    if self.process is None or not self.process.is_alive():
      self.start_failure = self.start()
    if not self.start_failure:
      self.conn.send(program)
    self.sent_at = time.monotonic()

  def receive(self) -> Verdict:
    """The verdict on the program sent last: a hang if none comes within the timeout, a crash if the process died;
    refgrad's own failure ("harness") if the process never started."""
    if self.start_failure:
      return Verdict("harness", self.start_failure)
    if not self.conn.poll(max(0.0, self.timeout - (time.monotonic() - self.sent_at))):
      kernel = self.current.value
      self.stop()
      return Verdict("hang", f"no answer within {self.timeout:.0f} s", kernel=kernel)
    try:
      return self.conn.recv()
    except (EOFError, ConnectionResetError):
      code = self.process.exitcode if self.process else None
      self.process.join()
      self.process = None
      return Verdict("crash", f"the worker process died (exit code {code})", kernel=self.current.value)

  def run(self, program: Any) -> Verdict:
    self.send(program)
    return self.receive()

  def stop(self) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.join()
      self.process = None


# ---- findings: named by a signature, so the same failure found twice (or by two workers) is one finding
def normalized_form(ast: UOp) -> str:
  """What a kernel computes, without its sizes, layout, constants or order: the (op, dtype) pairs it executes
  (kernel_pairs). Hypothesis shrinks each failing batch to a smallest program, so the same bug found again, by any
  worker, usually fails in a kernel of the same form."""
  return " ".join(f"{op}:{dtype}" for op, dtype in sorted(kernel_pairs(ast))) or "no ops"


def finding_signature(kind: str, program: Any, kernel: int) -> str:
  """sha256 of the kind of failure and the normalized form of the kernel it happened in (the reference's schedule
  item `kernel`, or every kernel of the program when the worker died before naming one)."""
  from refgrad.testing.reference import reference_schedule
  items = reference_schedule(program.run, *program.inputs)
  chosen = [items[kernel]] if 0 <= kernel < len(items) else items
  form = " | ".join(item.ast.op.name if item.is_transfer else normalized_form(item.ast) for item in chosen)
  return hashlib.sha256(f"{kind}\n{form}".encode()).hexdigest()


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


# ---- the shared example database
REDIS_CONNECT_SECONDS = 5.0  # for a database server to answer before a campaign starts


def url_scheme(url: str) -> str | None:
  """The scheme of a database given as a URL ('redis' for redis://host:port), or None for a directory path."""
  match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", url)
  return match.group(1).lower() if match else None


def open_database(url: str) -> Any:
  """A hypothesis example database: `redis://host:port[/db]` (hypothesis.extra.redis) or a directory path. Any
  other URL is refused (as a path it would become a local folder named after the URL)."""
  from hypothesis.database import DirectoryBasedExampleDatabase
  scheme = url_scheme(url)
  if scheme == "redis":
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase
    return RedisExampleDatabase(redis.Redis.from_url(url))
  if scheme is not None:
    raise ValueError(_not_redis(url, scheme))
  return DirectoryBasedExampleDatabase(url)


def _not_redis(url: str, scheme: str) -> str:
  return f"{url!r}: a database server is given as redis://HOST:PORT, not {scheme}:// (or give a directory)"


def database_problem(url: str, write: bool = True) -> str:
  """Why `url` cannot serve as an example database now, or "": its server must answer, its directory be writable
  (one only read must exist). hypothesis ignores a database it cannot write, so a campaign would lose its examples
  without a word; a server that does not answer would stop it after start-up."""
  scheme = url_scheme(url)
  if scheme is None:
    if write:
      return unwritable_directory(url)
    return "" if Path(url).is_dir() else f"no directory {url!r} to replay examples from"
  if scheme != "redis":
    return _not_redis(url, scheme)
  try:
    import redis
  except ImportError:
    return f"{url!r} needs the redis package: pip install 'refgrad[ray]'"
  try:
    redis.Redis.from_url(url, socket_connect_timeout=REDIS_CONNECT_SECONDS).ping()
  except (redis.RedisError, ValueError) as e:
    return f"cannot reach {url!r}: {e}"
  return ""


def unwritable_directory(path: str) -> str:
  """Why a directory cannot be written at `path` (made with its parents if need be), or "". Probed by making and
  removing a directory where the first one would be made, so nothing is left behind."""
  existing = target = Path(path)
  while not os.path.lexists(existing):
    existing = existing.parent
  if not existing.is_dir():
    return f"{path!r} is a file, not a directory" if existing == target else \
      f"cannot make directory {path!r}: {str(existing)!r} is a file"
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".refgrad-probe-", dir=existing))
  except OSError as e:
    return f"cannot write in {path!r}: {e.strerror}" if existing == target else \
      f"cannot make directory {path!r}: {str(existing)!r} takes no new entry ({e.strerror})"
  return ""


def example_database(database: str | None, shared: tuple[str, ...] = ()) -> Any:
  """`database` read and written, every `shared` one only read (hypothesis's MultiplexedDatabase of them); None if
  there is none."""
  from hypothesis.database import MultiplexedDatabase, ReadOnlyDatabase
  dbs = ([open_database(database)] if database else []) + [ReadOnlyDatabase(open_database(u)) for u in shared]
  return None if not dbs else dbs[0] if len(dbs) == 1 else MultiplexedDatabase(*dbs)


def database_key(device: str, focus: DType, allowed: tuple[DType, ...]) -> bytes:
  """Where a batch's failing examples are kept: one key per device and program strategy (focus and claimed dtypes),
  so an example is replayed by the strategy that drew it, and only on its device (hypothesis deletes a replayed
  example that passes: a campaign on a correct device must not erase another device's findings)."""
  return f"refgrad-fuzz/{STRATEGY_VERSION}/{device}/{focus.name}/{'+'.join(d.name for d in allowed)}".encode()


STRATEGY_VERSION = 2  # bump when the program strategies draw differently: old examples would replay as other programs


# ---- a campaign: batches of hypothesis examples, run in chunks of time so progress can be reported
@dataclass
class Chunk:
  """What a campaign did in one `run_for`: added up by the driver, so it is all counts (picklable, small)."""
  programs: int = 0
  seconds: float = 0.0
  batches: int = 0
  replayed: int = 0
  done: bool = False  # the campaign reached its max_findings, or the command's time is up
  findings: list[Finding] = field(default_factory=list)
  coverage: Counter = field(default_factory=Counter)  # (op, dtype) -> programs that executed it
  ulp: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)

  def add(self, verdict: Verdict) -> None:
    self.programs += 1
    self.coverage.update(verdict.coverage)
    for key, histogram in verdict.ulp.items():
      add_histogram(self.ulp.setdefault(key, {}), histogram)


def programs_strategy(focus: DType | None = None, allowed: tuple[DType, ...] = ALL) -> st.SearchStrategy[Any]:
  """Random Tensor programs and random primitive-op kernels over the dtypes in `allowed` (those the device
  claims); with `focus`, their inputs and roots have that dtype. Campaigns rotate the focus through every allowed
  dtype, batch by batch: left to itself, generation favours the first choices, and a minute's campaign would never
  reach the rarer dtypes' ops."""
  choices = (focus,) if focus is not None else allowed
  return st.one_of(tensor_programs(dtype_choices=choices, allowed=allowed),
                   alu_kernels(dtype_choices=choices, allowed=allowed))


def claimed_dtypes(device: str) -> tuple[DType, ...]:
  """The dtypes `device` declares (Capabilities.dtypes), in the strategies' order: all a campaign may draw."""
  return tuple(d for d in ALL if d in Device[device].caps.dtypes)


SHRINK_SECONDS = 20.0  # at least this long to shrink a finding, even if the chunk's time is up


@dataclass(frozen=True)
class CampaignConfig:
  device: str
  plugin_files: tuple[str, ...] = ()
  timeout: float = 30.0        # seconds before a program counts as a hang
  opts: bool = False           # run every kernel under a random legal opt list
  batch: int = 40              # hypothesis examples per batch (one seed, one focus dtype)
  max_findings: int | None = None
  database: str | None = None  # the example database read and written (directory or redis://)
  shared: tuple[str, ...] = ()  # example databases only read
  ends_at: float | None = None  # time.time() when the command's time is up, start-up included (None: no limit);
  # wall-clock time, so it means the same in every process and on every machine of a Ray cluster


def batch_seed(start_seed: int, batch: int, index: int, workers: int) -> int:
  """The seed of worker `index`'s `batch`-th batch: the workers of a campaign take turns, so none repeats another."""
  return start_seed + batch * workers + index


class Campaign:
  """One worker's campaign, run in chunks (`run_for`). Worker `index` of `workers` takes batch seeds
  start_seed + k * workers + index, so workers never repeat each other. Worker 0 first replays every example of
  the database. Each batch runs pipelined: the worker process runs a program while hypothesis draws the next; a
  batch in which a program failed is run again one program at a time with the same seed, so hypothesis reaches
  the same failure, shrinks it and saves it in the database."""

  def __init__(self, config: CampaignConfig, start_seed: int = 0, index: int = 0, workers: int = 1,
               first_batch: int = 0):
    for path in config.plugin_files:  # this process asks the device which dtypes it claims
      load_plugin_file(path)
    self.config, self.start_seed, self.index, self.workers = config, start_seed, index, workers
    self.allowed = claimed_dtypes(config.device)
    self.worker = Worker(config.device, list(config.plugin_files), config.timeout, config.opts)
    self.database = example_database(config.database, config.shared)
    self.batch_index, self.replay_pending = first_batch, self.database is not None and index == 0
    self.started, self.found, self.harness_failure = time.monotonic(), 0, ""

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
    chunk.seconds, chunk.done = time.monotonic() - began, self.done
    return chunk

  @property
  def seconds_left(self) -> float:
    return float("inf") if self.config.ends_at is None else self.config.ends_at - time.time()

  @property
  def done(self) -> bool:
    """The campaign reached its max_findings, or the command's time is up (once the database is replayed)."""
    time_up = self.seconds_left <= 0 and not self.replay_pending
    return time_up or (self.config.max_findings is not None and self.found >= self.config.max_findings)

  def close(self) -> None:
    self.worker.stop()

  def _test(self, check: Callable[[Any], None], focus: DType, seed_value: int, phases: list[Phase],
            database: Any) -> Callable[[], None]:
    # settings after seed: @seed turns the database off, so it is given again last
    test = settings(max_examples=self.config.batch, deadline=None, database=database, derandomize=False,
                    phases=phases, print_blob=False, suppress_health_check=list(HealthCheck))(
      seed(seed_value)(given(programs_strategy(focus, self.allowed))(check)))
    test._hypothesis_internal_database_key = database_key(self.config.device, focus, self.allowed)
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
    chunk.add(verdict)
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

  def _batch(self, chunk: Chunk, deadline: float) -> None:
    seed_value = batch_seed(self.start_seed, self.batch_index, self.index, self.workers)
    focus = self.allowed[self.batch_index % len(self.allowed)]
    self.batch_index += 1
    chunk.batches += 1
    suspect = self._pipelined(chunk, focus, seed_value, deadline)
    if suspect is None:
      return
    found: dict[str, Finding] = {}
    stop_at = max(deadline, time.monotonic() + SHRINK_SECONDS)
    self._run(self._test(self._shrinking_check(chunk, found, stop_at), focus, seed_value,
                         [Phase.generate, Phase.shrink], self.database))
    # one finding a batch: what hypothesis shrank to (the failures on the way are larger forms of it); not
    # reproduced (a flaky hang): the program as first seen
    self._keep(chunk, list(found.values())[-1:] or [suspect])

  def _pipelined(self, chunk: Chunk, focus: DType, seed_value: int, deadline: float) -> Finding | None:
    """One batch with the worker one program behind hypothesis; the first failing program, if any."""
    pending: list[Any] = []
    suspect: Finding | None = None

    def collect() -> None:
      nonlocal suspect
      program = pending.pop()
      finding = self._verdict(chunk, program, self.worker.receive())
      suspect = suspect or finding

    def check(program: Any) -> None:
      if suspect is not None or time.monotonic() > deadline or self.harness_failure:
        return
      if pending:
        collect()
      if suspect is None:
        self.worker.send(program)
        pending.append(program)
    try:
      self._run(self._test(check, focus, seed_value, [Phase.generate], None))
    finally:
      if pending:
        collect()
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


# ---- findings as standalone pytest files
def finding_source(kind: str, detail: str, program: Any, device: str, plugin_files: list[str],
                   opts: bool = False) -> str:
  arrays = ",\n      ".join(f"np.array({x.tolist()!r}, dtype=np.dtype({str(x.dtype)!r}))"
                            if x.dtype.name != "bfloat16" else
                            f"np.array({x.astype('float32').tolist()!r}, dtype=np.float32).astype(ml_dtypes.bfloat16)"
                            for x in program.inputs)
  params = ", ".join(f"v{i}" for i in range(len(program.inputs)))
  plugins = "".join(f"load_plugin_file({p!r})\n" for p in plugin_files)
  summary = textwrap.indent("\n".join(detail.splitlines()[:12]), "# ")
  body = textwrap.indent(program.to_python(), "  ")
  replay_opts = f", opts=opts_for({program.to_python()!r}, {device!r})" if opts else ""
  return f'''"""refgrad fuzz finding ({kind}) on {device}. Run: python -m pytest {{this file}}"""
from math import inf, nan  # noqa: F401  (values print as inf and nan)

import ml_dtypes  # noqa: F401
import numpy as np

from refgrad import Variable, dtypes  # noqa: F401
from refgrad.plugin_loader import load_plugin_file  # noqa: F401
from refgrad.testing.fuzz import opts_for, run_one  # noqa: F401
from refgrad.testing.programs import TensorProgram  # noqa: F401
from refgrad.testing.reference import check_against_reference
from refgrad.uop import Ops, UOp  # noqa: F401

{plugins}
{summary}

def program({params}):
{body}


def test_finding():
  inputs = [
      {arrays}]
  check_against_reference(program, *inputs, device={device!r}{replay_opts})
'''


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


class FindingsDir:
  """Where findings go: one pytest file per signature, written once (a later campaign that hits the signature
  again only counts it), and index.json with every signature's kind, file and count."""

  def __init__(self, path: str, device: str, plugin_files: list[str], opts: bool):
    self.path, self.device, self.plugin_files, self.opts = Path(path), device, plugin_files, opts
    index = self.path / "index.json"
    self.index: dict[str, dict[str, Any]] = json.loads(index.read_text()) if index.exists() else {}

  def file_for(self, finding: Finding) -> Path:
    return self.path / f"test_finding_{self.device.lower()}_{finding.kind}_{finding.signature[:12]}.py"

  def write(self, finding: Finding) -> Path:
    path = self.file_for(finding)
    if not path.exists():
      self.path.mkdir(parents=True, exist_ok=True)
      path.write_text(finding_source(finding.kind, finding.detail, finding.program, self.device, self.plugin_files,
                                     self.opts))
    return path

  def save_index(self, report: FuzzReport) -> None:
    if not report.signatures:
      return
    for signature, finding in report.signatures.items():
      entry = self.index.setdefault(signature, {"kind": finding.kind, "device": self.device, "count": 0,
                                                "file": self.file_for(finding).name})
      entry["count"] += finding.count
    self.path.mkdir(parents=True, exist_ok=True)
    (self.path / "index.json").write_text(json.dumps(self.index, indent=1, sort_keys=True))


def fuzz(device: str, seconds: float, start_seed: int = 0, jobs: int = 1, findings_dir: str = "refgrad-findings",
         plugin_files: list[str] | None = None, timeout: float = 30.0, max_findings: int | None = None,
         opts: bool = False, *, database: str | None = None, shared: tuple[str, ...] = (), ray: str | None = None,
         workers: int | None = None, html: str | None = None, quiet: bool = True, stream: Any = None,
         started: float | None = None) -> FuzzReport:
  """Campaigns on `device` until `seconds` after `started` (a time.time(), default now: the command's start, so
  its start-up counts): `jobs` local processes, or with `ray` (an address or "auto") `workers` Ray actors; each stops
  early after `max_findings` findings. Each distinct finding (by signature) is written to
  `findings_dir` as soon as it arrives. With `opts`, every kernel runs under a random legal opt list; with
  `database` (a directory or redis://host:port) failing examples are saved there and replayed first, `shared`
  databases are only read. `html`: the campaign report. Unless `quiet`, a live dashboard goes to `stream`
  (stderr). Ctrl-C stops every worker; what was found is written and reported (report.interrupted)."""
  from refgrad.testing.fuzz_engines import engine_for
  from refgrad.testing.terminal import Dashboard
  plugin_files = [str(Path(p).resolve()) for p in (plugin_files or [])]
  for path in plugin_files:
    load_plugin_file(path)
  origin = time.time() if started is None else started
  ends_at = origin + seconds
  config = CampaignConfig(device, tuple(plugin_files), timeout, opts, 40, max_findings, database, tuple(shared),
                          ends_at)
  engine = engine_for(config, start_seed, jobs, ray, workers)
  report = FuzzReport(device, claimed=claimed_dtypes(device), workers=engine.names)
  out = FindingsDir(findings_dir, device, plugin_files, opts)
  began, found_by = time.monotonic(), Counter()
  left = round(max(0.0, ends_at - time.time()), 1)
  with Dashboard(f"refgrad fuzz on {device}", left, engine.names, stream=stream or sys.stderr, quiet=quiet) as board:
    board.note(f"starting {len(engine.names)} worker(s) at {time.time() - origin:.1f} s of {seconds:g} s "
               "(their start-up counts against the time)")
    try:
      for worker, chunk in engine.chunks(left):
        if worker not in found_by:
          board.note(f"{worker}: first report at {time.time() - origin:.1f} s, {chunk.programs} program(s)")
        for finding in report.add(worker, chunk, time.monotonic() - began):
          finding.path = str(out.write(finding))
          report.findings.append((finding.kind, Path(finding.path)))
        for finding in chunk.findings:
          board.finding(finding.signature, finding.kind, report.signatures[finding.signature].count,
                        str(out.file_for(finding)))
        if chunk.replayed:
          board.note(f"{worker} replayed {chunk.replayed} example(s) from the database")
        found_by[worker] += len(chunk.findings)
        board.update(worker, report.per_worker[worker], chunk.programs / chunk.seconds if chunk.seconds else 0.0,
                     found_by[worker])
    except KeyboardInterrupt:
      report.interrupted = True
    finally:
      engine.stop()
  report.seconds = time.monotonic() - began
  out.save_index(report)
  if html:
    from refgrad.testing.fuzz_report import write_campaign_html
    write_campaign_html(html, campaign_summary(report, out))
  return report


def campaign_summary(report: FuzzReport, out: FindingsDir) -> Any:
  """The report's data as the HTML page shows it (refgrad.testing.fuzz_report.CampaignSummary)."""
  from refgrad.testing.fuzz_report import CampaignSummary, FindingSummary
  findings = [FindingSummary(f.signature, f.kind, f.count, str(out.file_for(f)), f.detail,
                             out.file_for(f).read_text() if out.file_for(f).exists() else "")
              for f in report.signatures.values()]
  order = {d.name: i for i, d in enumerate(DTYPES_BY_PRIORITY)}
  universe = sorted(coverage_universe(report.claimed), key=lambda pair: (pair[0], order[pair[1]]))
  return CampaignSummary(report.device, report.seconds, report.programs, report.workers, dict(report.coverage),
                         universe, report.ulp, report.timeline, findings, report.replayed)
