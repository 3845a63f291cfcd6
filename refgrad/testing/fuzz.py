"""`refgrad fuzz`: random programs on a device against the PYTHON reference, until the time is up.

Each program runs in a worker process, with a timeout, so a segfault or a hang of the backend under test
becomes a finding and the campaign goes on with a fresh worker. hypothesis generates the programs (random
Tensor programs and random primitive-op kernels) and shrinks every failure to a small one, which is written
as a standalone pytest file; identical minimal programs are written once.

Only failures of the device under test are findings. An exception of refgrad's own harness (the program
strategies, the reference run, the comparison, the report) is a bug of refgrad: it stops the campaign and
propagates (`refgrad fuzz` prints its traceback and exits with status 3), never counted, never ignored.
"""
from __future__ import annotations

import hashlib
import importlib.util
import multiprocessing
import random
import sys
import textwrap
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from refgrad.codegen.linearize import random_kernel_opts
from refgrad.codegen.opt import OptList
from refgrad.device import Device
from refgrad.dtype import DType, dtypes
from refgrad.testing.strategies import ALL, alu_kernels, tensor_programs
from refgrad.uop import UOp

FINDING_KINDS = ("mismatch", "error", "crash", "hang")
MISSING_SHOWN = 30  # unreached (op, dtype) pairs named at the end of a campaign


class HarnessError(Exception):
  """refgrad's own fuzzing harness failed in a worker (not the device under test); the message is its traceback."""


def load_plugin_file(path: str) -> Any:
  """Import a plugin from a .py file and register it, once per file (for backends that are not installed)."""
  from refgrad import plugins
  name = f"refgrad_plugin_file_{hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:8]}"
  if (loaded := plugins.manager.get_plugin(name)) is not None:
    return loaded
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # as an import would: dataclasses and pickling look modules up there
  spec.loader.exec_module(module)
  plugins.register(module, name=name)
  return module


# ---- coverage: which primitive op x dtype pairs the campaign's kernels executed
def coverage_universe(claimed: tuple[DType, ...] = ALL) -> set[tuple[str, str]]:
  """Every (op, dtype) pair a device claiming `claimed` can be asked to run: ALU ops by operand dtype, casts and
  bitcasts by target dtype, reductions by dtype."""
  from refgrad.alu import OP_KINDS
  every = list(claimed)
  pairs = {(op.name, d.name) for op, kinds in OP_KINDS.items() for d in every if d.kind in kinds}
  pairs |= {("CAST", d.name) for d in every} | {("BITCAST", d.name) for d in every if d != dtypes.bool}
  pairs |= {(f"REDUCE {op}", d.name) for op in ("ADD", "MUL", "MAX") for d in every if d != dtypes.bool}
  return pairs


def kernel_pairs(ast: Any) -> set[tuple[str, str]]:
  """The (op, dtype) pairs one scheduled kernel executes (see coverage_universe)."""
  from refgrad.uop import GroupOp, Ops
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
  (linearize.random_kernel_opts), drawn in kernel order from a seed made of the program's text, so a finding
  replays with the same opts."""
  caps = Device[device].caps
  rng = random.Random(hashlib.sha256(program_text.encode()).hexdigest())
  return lambda ast: random_kernel_opts(ast, caps, rng)


def run_one(program: Any, device: str, coverage: set[tuple[str, str]] | None = None,
            opts: bool = False) -> tuple[str, str]:
  """('ok'|'mismatch'|'error', detail) for one program, in this process. An exception that the device under
  test did not raise is refgrad's own and propagates. The (op, dtype) pairs of a checked program's kernels are
  added to `coverage`. With `opts`, the device runs each kernel under a random legal opt list (opts_for)."""
  from refgrad.testing.reference import ReferenceMismatch, check_against_reference, raised_by_device
  chooser = opts_for(program.to_python(), device) if opts else None
  try:
    report = check_against_reference(program.run, *program.inputs, device=device, opts=chooser)
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
  return "ok", ""


def _worker_main(conn: Any, device: str, plugin_files: list[str], opts: bool) -> None:
  for path in plugin_files:
    load_plugin_file(path)
  while True:
    program = conn.recv()
    if program is None:
      return
    covered: set[tuple[str, str]] = set()
    try:
      verdict = (*run_one(program, device, covered, opts), sorted(covered))
    except Exception:
      verdict = ("harness", traceback.format_exc(), [])
    conn.send(verdict)


class Worker:
  """A worker process that is replaced whenever it dies or hangs."""

  def __init__(self, device: str, plugin_files: list[str], timeout: float, opts: bool = False):
    self.device, self.plugin_files, self.timeout, self.opts = device, plugin_files, timeout, opts
    self.process: multiprocessing.Process | None = None

  def start(self) -> None:
    context = multiprocessing.get_context("spawn")
    self.conn, child = context.Pipe()
    self.process = context.Process(target=_worker_main, args=(child, self.device, self.plugin_files, self.opts),
                                   daemon=True)
    self.process.start()

  def run(self, program: Any) -> tuple[str, str, list[tuple[str, str]]]:
    """(kind, detail, (op, dtype) pairs the program's kernels executed)."""
    if self.process is None or not self.process.is_alive():
      self.start()
    self.conn.send(program)
    if not self.conn.poll(self.timeout):
      self.stop()
      return "hang", f"no answer within {self.timeout:.0f} s", []
    try:
      return self.conn.recv()
    except EOFError:
      code = self.process.exitcode if self.process else None
      self.process = None
      return "crash", f"the worker process died (exit code {code})", []

  def stop(self) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.join()
      self.process = None


# ---- a campaign: batches of hypothesis examples until the deadline
class FindingError(Exception):
  def __init__(self, kind: str, detail: str, program: Any):
    super().__init__(f"{kind}: {detail.splitlines()[0] if detail else ''}")
    self.kind, self.detail, self.program = kind, detail, program


@dataclass
class CampaignResult:
  programs: int = 0
  findings: list[tuple[str, str, Any]] = field(default_factory=list)  # (kind, detail, program)
  coverage: Counter = field(default_factory=Counter)  # (op, dtype) -> programs that executed it


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


def only_findings(error: BaseException) -> bool:
  """True if hypothesis raised nothing but FindingErrors: one, several distinct ones (an exception group), or
  one that stopped reproducing when replayed (a FlakyFailure, e.g. a hang that came in time the second time)."""
  if isinstance(error, FindingError):
    return True
  inner = getattr(error, "exceptions", None)
  return bool(inner) and all(only_findings(e) for e in inner)


def campaign(device: str, seconds: float, start_seed: int, plugin_files: list[str], timeout: float,
             max_findings: int | None = None, batch: int = 40, opts: bool = False) -> CampaignResult:
  for path in plugin_files:  # this process asks the device which dtypes it claims
    load_plugin_file(path)
  allowed = claimed_dtypes(device)
  worker = Worker(device, plugin_files, timeout, opts)
  deadline = time.monotonic() + seconds
  result = CampaignResult()
  harness_failure = ""

  def check(program: Any) -> None:
    nonlocal harness_failure
    if time.monotonic() > deadline or harness_failure:
      return  # time is up, or refgrad itself failed: let hypothesis finish quickly, without shrinking
    result.programs += 1
    kind, detail, covered = worker.run(program)
    result.coverage.update(covered)
    if kind == "harness":
      harness_failure = detail
    elif kind in FINDING_KINDS:
      smallest[kind] = (kind, detail, program)  # shrinking only ever tries smaller candidates
      raise FindingError(kind, detail, program)

  run_seed = start_seed
  try:
    while time.monotonic() < deadline and (max_findings is None or len(result.findings) < max_findings):
      smallest: dict[str, tuple[str, str, Any]] = {}
      test = seed(run_seed)(settings(max_examples=batch, deadline=None, database=None, derandomize=False,
                                     phases=[Phase.generate, Phase.shrink], print_blob=False,
                                     suppress_health_check=list(HealthCheck))(
        given(programs_strategy(allowed[run_seed % len(allowed)], allowed))(check)))
      try:
        test()
      except Exception as e:
        if not only_findings(e):
          raise
      if harness_failure:
        raise HarnessError(harness_failure)
      result.findings += smallest.values()
      run_seed += 1
  finally:
    worker.stop()
  return result


def _campaign_job(args: tuple) -> CampaignResult:
  return campaign(*args)


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
from refgrad.testing.fuzz import load_plugin_file, opts_for, run_one  # noqa: F401
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
  device: str
  seconds: float
  programs: int
  findings: list[tuple[str, Path]]  # (kind, file written), deduplicated
  coverage: Counter = field(default_factory=Counter)  # (op, dtype) -> programs that executed it
  claimed: tuple[DType, ...] = ALL  # the dtypes the device claims: coverage is counted over them

  @property
  def rate(self) -> float:
    return self.programs / self.seconds if self.seconds else 0.0

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


def fuzz(device: str, seconds: float, start_seed: int = 0, jobs: int = 1, findings_dir: str = "refgrad-findings",
         plugin_files: list[str] | None = None, timeout: float = 30.0, max_findings: int | None = None,
         opts: bool = False) -> FuzzReport:
  """Run `jobs` campaigns in parallel for `seconds` (each stops early after `max_findings` findings);
  write each distinct finding to `findings_dir`. With `opts`, every kernel runs under a random legal opt list."""
  plugin_files = [str(Path(p).resolve()) for p in (plugin_files or [])]
  started = time.monotonic()
  args = [(device, seconds, start_seed + 100_003 * j, plugin_files, timeout, max_findings, 40, opts)
          for j in range(jobs)]
  if jobs == 1:
    results = [campaign(*args[0])]
  else:
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
      results = pool.map(_campaign_job, args)
  out = Path(findings_dir)
  written: dict[str, tuple[str, Path]] = {}
  for result in results:
    for kind, detail, program in result.findings:
      key = hashlib.sha256(f"{kind}\n{program.to_python()}\n{program.inputs!r}".encode()).hexdigest()[:12]
      if key in written:
        continue
      out.mkdir(parents=True, exist_ok=True)
      path = out / f"test_finding_{device.lower()}_{kind}_{key}.py"
      path.write_text(finding_source(kind, detail, program, device, plugin_files, opts))
      written[key] = (kind, path)
  coverage = sum((r.coverage for r in results), Counter())
  for path in plugin_files:
    load_plugin_file(path)
  return FuzzReport(device, time.monotonic() - started, sum(r.programs for r in results), list(written.values()),
                    coverage, claimed_dtypes(device))
