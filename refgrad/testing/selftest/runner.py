"""`refgrad selftest`: the oracle kit's mutation score, measured on a compiled backend (CLANG, LLVM or OPENCL) with one
planted bug at a time.

Why: the kit's job is to catch wrong backends, and nobody can say how well it does without trying. First the kit runs
on the unmutated device (any finding there is a false alarm, which counts against the score). Then, for each mutant
planted in that device (mutants/: its own family, and on CLANG the optimizer's), in a process of its
own (a mutant may crash or hang, and a -ffast-math library changes the floating-point mode of the process that loads
it), `refgrad check`'s cases run in their usual order until the first failure; if none fails, a short `refgrad fuzz`
campaign follows. A crash of the device counts as detected, and so does a hang past the timeout (the table says
which). An escape is then confirmed live by its witness program. The mutants' binaries go to a compile cache of the
run's own, deleted at the end and shared by its mutants (a kernel a mutant does not change is compiled once per
run, mutants/__init__.py says why that is sound): the user's cache is left alone.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

CHECK, FUZZ, CRASH, HANG, ESCAPED, ERROR = "check", "fuzz", "crash", "hang", "escaped", "error"
DETECTED = (CHECK, FUZZ, CRASH, HANG)
BASELINE = "(unmutated)"


@dataclass
class Outcome:
  """What happened to one mutant (or, named BASELINE, to the unmutated device)."""
  mutant: str
  kind: str
  verdict: str = ESCAPED  # one of CHECK FUZZ CRASH HANG ESCAPED ERROR
  seconds: float = 0.0    # from the start of the check to detection (or to the end of the run)
  fuzz_seconds: float = 0.0
  where: str = ""         # the case that caught it ("CMPLT / float32"), the fuzz finding's kind, or the phase
  detail: str = ""        # the first lines of the explanation
  cases: int = 0          # check steps run (cases, or batches of cases)
  failures: list[str] = field(default_factory=list)  # baseline only: every failing case and fuzz finding
  family: str = ""        # the mutant's family (its device's, or optimizer): the score is reported per family

  @property
  def detected(self) -> bool:
    return self.verdict in DETECTED

  def caught_by(self) -> str:
    return {CHECK: f"check: {self.where}", FUZZ: f"fuzz: {self.where}", CRASH: f"crash during {self.where}",
            HANG: f"hang during {self.where}", ESCAPED: f"ESCAPED{self.where and ' (' + self.where + ')'}",
            ERROR: f"ERROR: {self.where}"}[self.verdict]

  def time_text(self) -> str:
    if self.verdict not in DETECTED:
      return f"({self.seconds:.1f} s)"
    return f"{self.seconds - self.fuzz_seconds:.1f}+{self.fuzz_seconds:.1f} s" if self.fuzz_seconds else \
      f"{self.seconds:.1f} s"


@dataclass
class SelftestReport:
  device: str
  fuzz_seconds: float
  baseline: Outcome
  outcomes: list[Outcome]
  seconds: float = 0.0
  skipped: list[tuple[str, str]] = field(default_factory=list)  # (mutant, why it cannot run on this machine)

  @property
  def caught(self) -> list[Outcome]:
    return [o for o in self.outcomes if o.detected]

  @property
  def escaped(self) -> list[Outcome]:
    return [o for o in self.outcomes if o.verdict == ESCAPED]

  @property
  def errors(self) -> list[Outcome]:
    return [o for o in self.outcomes if o.verdict == ERROR]

  @property
  def exit_code(self) -> int:
    return 0 if len(self.caught) == len(self.outcomes) and not self.baseline.failures else 1

  def family_scores(self) -> str:
    """'LLVM 14/14, optimizer 2/2': caught over run, per family in the order they ran."""
    families = list(dict.fromkeys(o.family for o in self.outcomes))
    scores = [(f, [o for o in self.outcomes if o.family == f]) for f in families]
    return ", ".join(f"{f} {sum(o.detected for o in run)}/{len(run)}" for f, run in scores) or "none"

  def text(self) -> str:
    width = max([len(o.mutant) for o in self.outcomes] + [len(BASELINE)])
    lines = [f"{'mutant':{width}s}  {'kind':12s}  {'caught by':52s}  time to detection"]
    lines += [f"{o.mutant:{width}s}  {o.kind:12s}  {o.caught_by()[:52]:52s}  {o.time_text()}" for o in self.outcomes]
    total = len(self.outcomes)
    percent = f" ({100 * len(self.caught) / total:.0f}%)" if total else ""
    lines += ["", f"score: {len(self.caught)}/{total} caught{percent} on {self.device}, check then "
              f"{self.fuzz_seconds:g} s of fuzz per escape; {self.seconds:.0f} s in all",
              f"by family: {self.family_scores()}",
              f"false alarms on the unmutated {self.device}: {len(self.baseline.failures)} "
              f"({self.baseline.cases} check steps, {self.fuzz_seconds:g} s of fuzz)"]
    lines += [f"  {failure}" for failure in self.baseline.failures]
    lines.append(f"escaped: {', '.join(o.mutant for o in self.escaped) or 'none'}")
    lines += [f"not run on this machine: {name} ({why})" for name, why in self.skipped]
    if self.errors:
      lines.append(f"not measured (harness or planting error): {', '.join(o.mutant for o in self.errors)}")
      lines += [f"  {o.mutant}: {line}" for o in self.errors for line in o.detail.splitlines()]
    return "\n".join(lines)


# ---- the child process: one mutant (or the baseline), reporting each step to the parent through a pipe
@dataclass(frozen=True)
class Job:
  mutant: str | None           # None: the unmutated device
  device: str
  fuzz_seconds: float
  rows: frozenset[str] | None
  cache: str | None            # REFGRAD_CACHE for this job (None: the user's)
  findings: str
  environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))  # the parent's, when the job was made


def check_steps(device: str, rows: Collection[str] | None = None) -> list[tuple[str, Callable[[], list[Any]]]]:
  """`refgrad check` as (label, run) steps in its own order (its batches and programs), each run giving CaseResults
  (row, column, status, detail); `rows` keeps the steps that check one of those rows. As in refgrad check, the
  kernels of several steps compile at once before the first of them runs (prepare_units), but 1, 2, 4, ... steps'
  at a time before PREPARED_UNITS': a mutant stops at its first failure, and one caught at its first steps would
  otherwise wait for the kernels of 32."""
  from refgrad.testing.conformance.run import PREPARED_UNITS, all_units, prepare_units, run_unit
  from refgrad.testing.oracle.prepare import growing_batches
  units = [unit for unit in all_units() if rows is None or set(unit.rows) & set(rows)]
  ahead = {batch.start: batch for batch in growing_batches(len(units), PREPARED_UNITS)}

  def step(index: int) -> list[Any]:
    if (batch := ahead.get(index)) is not None:
      prepare_units([units[i] for i in batch], device)
    return run_unit(units[index], device).results
  return [(unit.label, functools.partial(step, index)) for index, unit in enumerate(units)]


def _check(job: Job, send: Callable[..., None], started: float) -> list[str]:
  """Run the check's steps in order; a mutant stops at its first failure. Returns the failures as 'row / column:
  detail'."""
  failures: list[str] = []
  ran = 0
  for label, run in check_steps(job.device, job.rows):
    send("case", label)
    ran += 1
    failed = [r for r in run() if r.status == "fail"]
    for r in failed:
      failures.append(f"{r.row} / {r.column}: {r.detail}")
      send("fail", f"{r.row} / {r.column}", time.perf_counter() - started, r.detail)
    if failed and job.mutant is not None:
      break
  send("checked", ran, time.perf_counter() - started)
  return failures


def _fuzz(job: Job, send: Callable[..., None]) -> int:
  """A campaign of job.fuzz_seconds (a mutant's stops at its first finding); returns the number of findings."""
  from refgrad.testing.fuzz.driver import fuzz
  send("fuzz", job.fuzz_seconds)
  started = time.perf_counter()
  report = fuzz(job.device, job.fuzz_seconds, findings_dir=job.findings, plugin_files=[_plugin_shim(job.findings)],
                max_findings=None if job.mutant is None else 1)
  send("fuzzed", time.perf_counter() - started, [(kind, str(path)) for kind, path in report.findings])
  return len(report.findings)


def _plugin_shim(folder: str) -> str:
  """A plugin file for the fuzz workers that imports this package's mutants module: loading mutants.py itself as a
  file would define its dataclasses in a module that is not in sys.modules, which dataclasses cannot handle."""
  path = os.path.join(folder, "refgrad_mutants_plugin.py")
  os.makedirs(folder, exist_ok=True)
  with open(path, "w") as f:
    f.write("from refgrad.testing.selftest.mutants import refgrad_devices  # noqa: F401  (its hook registers them)\n")
  return path


def _witness_fails(job: Job) -> bool:
  """True if the mutant computes its own witness program differently from the reference (it is live, so its
  escape is real), judged bit for bit without the kit under measurement."""
  from refgrad.testing.selftest import mutants
  return mutants.witness_deviation(mutants.BY_NAME[job.mutant]) is not None


def run_job(conn: Any, job: Job) -> None:
  """The child's main: register the mutants, plant this one, check, fuzz if nothing failed, confirm an escape."""
  def send(*event: Any) -> None:
    conn.send(event)
  try:
    os.environ.clear()  # a forked child has the fork server's environment, from when it started
    os.environ.update(job.environ)
    if job.cache:
      os.environ["REFGRAD_CACHE"] = job.cache  # fuzz workers inherit it
    from refgrad import Device, dtype, plugin_loader
    # refgrad was imported with the fork server's environment, to unpickle this function: read DEFAULT_FLOAT again
    dtype.dtypes.default_float = dtype.dtypes.float32
    dtype._default_float_from_environment()
    from refgrad.testing.selftest import mutants
    plugin_loader.register(mutants, name="refgrad.testing.selftest.mutants")
    Device[job.device]  # plants the mutant: a failure here is a harness error, never a detection
    started = time.perf_counter()
    send("started")
    found = len(_check(job, send, started))
    if job.fuzz_seconds > 0 and (job.mutant is None or not found):
      found += _fuzz(job, send)
    if job.mutant is not None and not found:
      send("witness", _witness_fails(job))
    send("done", time.perf_counter() - started)
  except BaseException:
    send("error", traceback.format_exc())


# ---- the parent: one child per job, watched for crashes and hangs
PRELOADED = ["numpy", "ml_dtypes"]  # seconds of import (ml_dtypes' casts) a fresh process would pay per job


def fresh_process_context() -> multiprocessing.context.BaseContext:
  """Fresh processes forked from a server that imported PRELOADED once (what spawn re-imported per job), and no more:
  refgrad (imported in the child to unpickle its function, under the server's environment) and the device libraries
  (a -ffast-math one sets the FP mode of its process, PoCL starts threads) are loaded by each child itself. A child
  gets the parent's sys.path and working directory as a spawned one does; run_job restores the parent's environment
  and reads again what refgrad read from it at import (DEFAULT_FLOAT)."""
  context = multiprocessing.get_context("forkserver")
  context.set_forkserver_preload(PRELOADED)
  return context


def _watch(job: Job, case_timeout: float) -> list[tuple]:
  """Run `job` in a fresh process; returns its events, ending with ('crash', exit code, seconds) or ('hang',
  silence, seconds) if it died or went silent for longer than a case may take (a fuzz campaign gets twice its
  length plus that). Seconds count from the start of the check."""
  context = fresh_process_context()
  receiver, sender = context.Pipe(duplex=False)
  process = context.Process(target=run_job, args=(sender, job))  # not a daemon: fuzz workers are its children
  process.start()
  sender.close()
  events: list[tuple] = []
  timeout, started = case_timeout, time.perf_counter()
  try:
    while True:
      if not receiver.poll(timeout):
        process.kill()
        return events + [(HANG, timeout, time.perf_counter() - started)]
      try:
        event = receiver.recv()
      except EOFError:
        process.join()
        return events + [(CRASH, process.exitcode, time.perf_counter() - started)]
      events.append(event)
      if event[0] in ("done", "error"):
        return events
      started = time.perf_counter() if event[0] == "started" else started
      timeout = 2 * event[1] + case_timeout if event[0] == "fuzz" else case_timeout
  finally:
    process.join(5)
    if process.is_alive():
      process.kill()
      process.join()
    receiver.close()


def _first_lines(text: str, n: int = 3) -> str:
  return "\n".join(text.splitlines()[:n])


def _last_lines(text: str, n: int = 4) -> str:
  """The end of a traceback: the exception and the frames nearest to it."""
  return "\n".join(text.splitlines()[-n:])


def outcome_of(name: str, kind: str, events: list[tuple]) -> Outcome:
  """Read a mutant's events: the first failing case, a fuzz finding, a crash or hang (and where), or an escape."""
  out = Outcome(name, kind)
  where = "startup"
  for tag, *args in events:
    if tag == "case":
      where = f"check: {args[0]}"
    elif tag == "checked":
      out.cases, out.seconds = args
    elif tag == "fail" and out.verdict == ESCAPED:  # the first failing cell of the step is what caught it
      compile_error = args[2].startswith("CompileError")  # the mutant's C is broken: nothing was measured
      out.verdict = ERROR if compile_error else CHECK
      out.where = f"the mutant does not compile ({args[0]})" if compile_error else args[0]
      out.seconds, out.detail = args[1], _first_lines(args[2])
    elif tag == "fuzz":
      where = "fuzz"
    elif tag == "fuzzed":
      out.fuzz_seconds = args[0]
      out.seconds += args[0]
      if args[1]:
        out.verdict, out.where, out.detail = FUZZ, args[1][0][0], args[1][0][1]
    elif tag == "witness":
      out.where = "" if args[0] else "INERT: its witness passes too"
    elif tag == "error":
      out.verdict, out.where, out.detail = ERROR, "harness error", _last_lines(args[0])
    elif tag in (CRASH, HANG):
      out.verdict, out.where, out.seconds = tag, where, args[1]
      out.detail = f"exit code {args[0]}" if tag == CRASH else f"silent for {args[0]:.0f} s"
      if where == "startup":  # no kernel of the mutant ran yet: the harness itself failed
        out.verdict, out.where = ERROR, f"{tag} before the check started ({out.detail})"
  return out


def baseline_of(events: list[tuple]) -> Outcome:
  """The unmutated device's run: every failing case, fuzz finding, crash, hang or harness error is a false alarm."""
  out = Outcome(BASELINE, "")
  for tag, *args in events:
    if tag == "fail":
      out.failures.append(f"check {args[0]}: {_first_lines(args[2], 1)}")
    elif tag == "checked":
      out.cases, out.seconds = args
    elif tag == "fuzzed":
      out.fuzz_seconds = args[0]
      out.seconds += args[0]
      out.failures += [f"fuzz {kind}: {path}" for kind, path in args[1]]
    elif tag in (CRASH, HANG, "error"):
      out.failures.append(f"{tag}: {_last_lines(str(args[0]))}")
  return out


def run_selftest(device: str = "CLANG", fuzz_seconds: float = 30.0, mutants: list[str] | None = None,
                 progress: Callable[[Outcome, int, int], None] | None = None, rows: Collection[str] | None = None,
                 case_timeout: float = 120.0,
                 findings_dir: str | None = None) -> SelftestReport:
  """The mutation score of the kit on `device` (CLANG, LLVM or OPENCL): the mutants planted in it, equivalent ones
  left out (listed as not run, with the reason). `rows` restricts the check to the steps
  that check one of those rows (tests use that to stay fast); `progress(outcome, index, total)` is called as each
  job finishes, the baseline first (index -1)."""
  from refgrad import Device
  from refgrad.testing.selftest import mutants as table
  base = Device.canonicalize(device)
  if base not in table.BACKENDS:
    raise ValueError(f"the mutants are planted in {', '.join(table.BACKENDS)}; there are none for {device}")
  Device[base]  # fail early, with the reason, if the device cannot run here
  why_not = {m.name: table.probe(m) or (m.equivalent and f"equivalent here: {m.equivalent}")
             for m in table.select(mutants, base)}
  chosen = [m for m in table.select(mutants, base) if not why_not[m.name]]
  skipped = [(name, why) for name, why in why_not.items() if why]
  started = time.perf_counter()
  scratch = tempfile.mkdtemp(prefix="refgrad-selftest-")
  try:
    def job(mutant: Any) -> Job:
      return Job(mutant.name if mutant else None, mutant.device if mutant else base, fuzz_seconds,
                 None if rows is None else frozenset(rows),
                 os.path.join(scratch, "cache") if mutant else None, findings_dir or os.path.join(scratch, "findings"))
    baseline = baseline_of(_watch(job(None), case_timeout))
    if progress:
      progress(baseline, -1, len(chosen))
    outcomes = []
    for i, mutant in enumerate(chosen):
      outcomes.append(_measure(mutant, job(mutant), case_timeout))
      if progress:
        progress(outcomes[-1], i, len(chosen))
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  return SelftestReport(base, fuzz_seconds, baseline, outcomes, time.perf_counter() - started, skipped)


def _measure(mutant: Any, job: Job, case_timeout: float) -> Outcome:
  """Plant in this process first (cheap, nothing compiled) so a planting error is reported as such."""
  from refgrad.testing.selftest.mutants import check_planted
  try:
    check_planted(mutant)
  except Exception as e:
    return Outcome(mutant.name, mutant.kind, ERROR, where="not planted", detail=str(e), family=mutant.family)
  outcome = outcome_of(mutant.name, mutant.kind, _watch(job, case_timeout))
  outcome.family = mutant.family
  return outcome


def progress_printer(device: str, stream: Any = None) -> Callable[[Outcome, int, int], None]:
  """One line per finished mutant (and one for the baseline)."""
  stream = stream or sys.stderr

  def show(outcome: Outcome, index: int, total: int) -> None:
    if index < 0:
      alarms = len(outcome.failures)
      stream.write(f"[baseline] unmutated {device}: {outcome.cases} check steps, {alarms} false alarm(s), "
                   f"{outcome.seconds:.1f} s\n")
    else:
      stream.write(f"[{index + 1:3d}/{total}] {outcome.mutant:28s} {outcome.kind:12s} {outcome.caught_by()[:60]:60s} "
                   f"{outcome.time_text()}\n")
    stream.flush()
  return show


# ---- the command line
def add_selftest_parser(subparsers: Any) -> argparse.ArgumentParser:
  """Add `refgrad selftest` to the CLI's subcommands."""
  p = subparsers.add_parser("selftest", help="mutation score of the oracle kit: planted bugs in a copy of a backend")
  p.add_argument("--device", default=None,
                 help="the backend the mutants are planted in: CLANG (the default), LLVM or OPENCL")
  p.add_argument("--fuzz-seconds", type=float, default=30.0, help="fuzz campaign for a mutant the check missed")
  p.add_argument("--only", nargs="+", action="extend", metavar="NAME", help="run only these mutants")
  p.add_argument("--list", action="store_true", help="print the mutants (of --device, else of every device) and exit")
  p.add_argument("--rows", nargs="+", action="extend", metavar="ROW",
                 help="run only the check's steps for these rows (e.g. CMPLT 'REDUCE MAX'): quicker, not the score")
  p.add_argument("--case-timeout", type=float, default=120.0, help="seconds before a silent mutant counts as a hang")
  p.add_argument("--findings", default=None, metavar="DIR", help="keep the fuzz reproducers here")
  p.set_defaults(fn=cmd_selftest)
  return p


def cmd_selftest(args: argparse.Namespace) -> int:
  """Print the mutant table (--list), or measure: 0 if every mutant was caught with no false alarm, else 1."""
  from refgrad import Device
  from refgrad.testing.selftest import mutants
  base = args.device and Device.canonicalize(args.device)
  chosen = mutants.select(args.only, base)
  if args.list:
    print(mutants.table_text(chosen))
    return 0
  base = base or "CLANG"
  print(f"refgrad selftest: the mutants of {base}, check then {args.fuzz_seconds:g} s of fuzz for each escape",
        file=sys.stderr)
  report = run_selftest(base, args.fuzz_seconds, args.only, progress_printer(base), args.rows, args.case_timeout,
                        args.findings)
  print(report.text())
  return report.exit_code
