"""The `refgrad` command: `demo`, `devices`, `check` (conformance), `fuzz` (differential fuzzing), `reduce` (shrink a
finding's standalone reproducer) and `selftest` (the kit's own mutation score)."""
from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np

from refgrad.testing.selftest.runner import add_selftest_parser

if TYPE_CHECKING:
  from refgrad.testing.conformance.results import CaseResult

USAGE = 2  # the exit status of a command line refgrad cannot act on (as argparse's)
HARNESS_FAILED = 3  # `refgrad fuzz`'s exit status when refgrad itself failed (0: no finding, 1: findings, 2: usage)
INTERRUPTED = 130  # Ctrl-C: the campaign stopped early (its findings and report are written), as a shell reports it
MIN_TIMEOUT = 1.0  # seconds: a correct program can take a good part of one (a compile on a busy machine), and a
# shorter timeout would report it as a hang
MAX_SECONDS = 1e6  # seconds (11.6 days), for every time option: more than a campaign of days needs, and far inside
# what deadlines and the OS's waits can hold (--timeout 1e10 overflowed a wait: "timestamp too large")
JOBS_PER_CPU = 4  # local jobs beyond this many per CPU only share the cores (at 2 per CPU a job's start-up already
# takes seconds), and each costs two processes' memory; --jobs 100000 ran out of semaphores and never stopped
MAX_JOBS = JOBS_PER_CPU * (os.cpu_count() or 1)
MAX_WORKERS = 1024  # Ray actors take a CPU each: a typo's 100000 would wait for CPUs no cluster we know of has


class UsageError(Exception):
  """A command line refgrad cannot act on, found before any work: main() prints it as argparse prints its own
  errors (`refgrad fuzz: error: argument --seconds: ...`) and returns USAGE."""

  def __init__(self, message: str, parser: argparse.ArgumentParser | None = None):
    super().__init__(message)
    self.parser = parser  # set for argparse's own errors, whose usage line is printed too


class _Parser(argparse.ArgumentParser):
  """argparse, raising its errors for main() to report, so `main([...])` returns USAGE rather than exiting."""

  def error(self, message: str) -> NoReturn:
    raise UsageError(message, self)


def _option(dest: str) -> str:
  return "--" + dest.replace("_", "-")


# What each numeric option (by argparse dest, in any subcommand) must be: outside it a command would test nothing
# (`--seconds 0`), report a false finding (`--timeout 0`: every program a hang), fail deep inside numpy or the OS, or
# never end. A count to stop at and a seed need no upper bound: a count never reached is no limit, and any seed draws.
NUMBERS: dict[str, tuple[Callable[[float], bool], str]] = {
  "seconds": (lambda v: 0 < v <= MAX_SECONDS, f"more than 0 and at most {MAX_SECONDS:.0f} seconds"),
  "fuzz_seconds": (lambda v: 0 <= v <= MAX_SECONDS, f"0 (no fuzzing) to {MAX_SECONDS:.0f} seconds"),
  "timeout": (lambda v: MIN_TIMEOUT <= v <= MAX_SECONDS, f"{MIN_TIMEOUT:g} to {MAX_SECONDS:.0f} seconds"),
  "case_timeout": (lambda v: MIN_TIMEOUT <= v <= MAX_SECONDS, f"{MIN_TIMEOUT:g} to {MAX_SECONDS:.0f} seconds"),
  "jobs": (lambda v: 1 <= v <= MAX_JOBS, f"1 to {MAX_JOBS} jobs ({JOBS_PER_CPU} per CPU)"),
  "workers": (lambda v: 1 <= v <= MAX_WORKERS, f"1 to {MAX_WORKERS} Ray workers"),
  "max_findings": (lambda v: v >= 1, "at least 1 finding to stop at"),
  "max_programs": (lambda v: v >= 1, "at least 1 program to stop at"),
  "seed": (lambda v: v >= 0, "a non-negative integer"),
}
# outputs and databases, checked before work
PATHS = ("html", "json", "findings", "standalone", "database", "shared_database")


def _check_numbers(args: argparse.Namespace) -> None:
  for dest, (allowed, need) in NUMBERS.items():
    value = getattr(args, dest, None)
    if value is not None and not allowed(value):
      raise UsageError(f"argument {_option(dest)}: need {need}, got {value}")


def _unwritable_file(path: str) -> str:
  """Why a report cannot be written at `path`, or "". Opened for appending, so nothing it holds is lost, and removed
  again if this made it."""
  parent = Path(path).absolute().parent
  if not parent.is_dir():
    return f"cannot write {path!r}: no directory {str(parent)!r}"
  existed = os.path.lexists(path)
  try:
    with open(path, "a"):
      pass
  except OSError as e:
    return f"cannot write {path!r}: {e.strerror}"
  if not existed:
    os.remove(path)
  return ""


def _check_environment() -> None:
  """The numeric environment variables refgrad reads, read now as the library will: a bad one is a usage error
  before any work, not a failure in the middle of it (or in a fuzz worker, where it looked like a bug in refgrad)."""
  from refgrad.compile_cache import cache_limit
  from refgrad.execute import search_budget
  for read in (search_budget, cache_limit):
    try:
      read()
    except ValueError as e:
      raise UsageError(str(e)) from None


def _check_paths(args: argparse.Namespace) -> None:
  """Every output file and directory can be written, every database answers: else the work would be lost at its
  end (a report) or silently (hypothesis drops examples it cannot save)."""
  given = [(dest, value) for dest in PATHS for value in _as_list(getattr(args, dest, None))]
  if not given:
    return
  from refgrad.testing.fuzz.database import database_problem, unwritable_directory
  checks: dict[str, Callable[[str], str]] = {
    "html": _unwritable_file, "json": _unwritable_file, "findings": unwritable_directory,
    "standalone": unwritable_directory, "database": database_problem,
    "shared_database": lambda url: database_problem(url, write=False)}
  for dest, value in given:
    if problem := checks[dest](value):
      raise UsageError(f"argument {_option(dest)}: {problem}")


def _as_list(value: str | list[str] | None) -> list[str]:
  return [] if value is None else value if isinstance(value, list) else [value]


def _load_plugins(args: argparse.Namespace) -> None:
  """Each --plugin file once; one that fails to load is a usage error naming it, one that adds no device a warning
  (it may only patch refgrad or add aliases)."""
  from refgrad import Device
  from refgrad.plugin_loader import PluginFileError, load_plugin_file, why_not_loaded
  for path in dict.fromkeys(getattr(args, "plugin", None) or []):
    before = {spec.name for spec in Device.specs()}
    try:
      load_plugin_file(path)
    except PluginFileError as e:
      raise UsageError(f"argument --plugin: cannot load {e}") from None
    except SystemExit as e:  # the plugin's, not the command's: it must not end it silently
      raise UsageError(f"argument --plugin: cannot load {why_not_loaded(path, e)}") from None
    if not {spec.name for spec in Device.specs()} - before:
      print(f"refgrad: warning: --plugin {path} registered no device (no refgrad_devices hook marked with "
            "@refgrad.hookspecs.hookimpl?)", file=sys.stderr)


def _device(name: str | None, source: str = "argument --device") -> str:
  """The canonical name of a device that can run here; else a usage error naming the known devices, or why not."""
  from refgrad import Device
  try:
    device = Device.canonicalize(name)
    Device[device]
  except (ValueError, RuntimeError) as e:
    raise UsageError(f"{source}: {e}") from None
  return device


def cmd_devices(args: argparse.Namespace) -> int:
  """List every registered device with its kind (kernel or graph), plugin, version and status."""
  from refgrad import Device
  for spec in Device.specs():
    status = "available" if spec.unavailable_reason is None else f"unavailable: {spec.unavailable_reason}"
    print(f"{spec.name:10s} {spec.kind:6s} {spec.plugin:18s} {spec.version or '-':28s} {status}")
  return 0


def _demo_programs(seed: int) -> dict[str, tuple]:
  """A few small programs (name -> (function of Tensors, numpy inputs)) touching each part of the pipeline."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((64, 32)).astype(np.float32)
  w = rng.standard_normal((32, 16)).astype(np.float32)
  i = rng.integers(-100, 100, (64, 32)).astype(np.int32)
  return {
    "elementwise: (x*2+1).relu()": (lambda x: (x * 2 + 1).relu(), [x]),
    "fused reduce: (x*x+1).sum(1)": (lambda x: (x * x + 1).sum(1), [x]),
    "matmul: x @ w": (lambda x, w: x @ w, [x, w]),
    "softmax-like: (x - x.max(1)).exp2()": (lambda x: (x - x.max(1, keepdim=True)).exp2(), [x]),
    "integers: (i // 7) % 5 - (i >> 2)": (lambda i: (i // 7) % 5 - (i >> 2), [i]),
    "movement: x.T[::2, 1:].pad(((1,1),(2,0)))": (lambda x: x.T[::2, 1:].pad(((1, 1), (2, 0))), [x]),
  }


def _demo_interpreters(programs: dict[str, tuple]) -> int:
  """PYTHON's two oracles against each other; returns the number of programs that disagree."""
  from refgrad import Tensor
  from refgrad.interp.graph import evaluate_graph
  from refgrad.testing.oracle.compare import compare
  print("PYTHON, the reference, checks itself: the kernel interpreter (scheduled, lowered, vectorized kernels) against")
  print("the graph evaluator (op by op with numpy, no scheduling). Both take op semantics from refgrad/alu.py,")
  print("so this checks the scheduler, lowering and rewrite rules; results must agree bit for bit.")
  failures = 0
  for name, (fn, inputs) in programs.items():
    start = time.perf_counter()
    out = fn(*(Tensor(a, device="PYTHON") for a in inputs))
    expected, undefined = evaluate_graph(out.uop)
    kernels = len(out.schedule())
    result = compare(out.numpy(), expected, undefined)
    failures += not result.ok
    verdict = f"ok    kernels={kernels} lanes={result.checked:6d} bit-exact" if result.ok else \
      f"FAIL  {result.mismatch_count} lanes differ, first at flat index {result.mismatches[:3]}"
    print(f"  {name:44s} {verdict} {(time.perf_counter() - start) * 1e3:7.1f} ms")
  return failures


def _demo_device(device: str, programs: dict[str, tuple]) -> int:
  """Every kernel of each program on `device` against the PYTHON reference; returns the number that disagree."""
  from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
  print(f"{device} against the PYTHON reference: every kernel runs on {device} and on PYTHON, and is compared as")
  print("docs/SPEC.md says (exact, or within its ULP/reduction bound).")
  failures = 0
  for name, (fn, inputs) in programs.items():
    start = time.perf_counter()
    try:
      report = check_against_reference(fn, *inputs, device=device)
      verdict = f"ok    kernels={len(report.kernels)} lanes={report.checked:6d} worst={report.worst_ulp} ulp"
    except ReferenceMismatch as e:
      failures += 1
      verdict = "FAIL  " + str(e).splitlines()[0]
    print(f"  {name:44s} {verdict} {(time.perf_counter() - start) * 1e3:7.1f} ms")
  return failures


def _demo_devices(args: argparse.Namespace) -> list[str]:
  """--device, else REFGRAD_DEVICE, else every available kernel device (the reference first): a graph device
  compiles each graph with its framework, seconds each, so it runs when named."""
  from refgrad import Device
  if args.device:
    return [_device(args.device)]
  if os.environ.get("REFGRAD_DEVICE"):
    return [_device(os.environ["REFGRAD_DEVICE"], "REFGRAD_DEVICE")]
  return ["PYTHON"] + [d for d in Device.available("kernel") if d != "PYTHON"]


def cmd_demo(args: argparse.Namespace) -> int:
  """Show the product: the reference checking itself, then every other available device checked against it."""
  from refgrad import Device
  devices = _demo_devices(args)
  programs = _demo_programs(args.seed)
  failures = 0
  for device in devices:
    failures += _demo_interpreters(programs) if device == "PYTHON" else _demo_device(device, programs)
    print()
  total = len(programs) * len(devices)
  print(f"{total - failures}/{total} program runs agree with the reference.")
  compiled = [d for d in Device.available() if d != "PYTHON"]
  if compiled:
    print(f"Next: refgrad check --device {compiled[0]}   (every op x dtype x edge value, casts, reductions)")
  else:
    print("No compiled backend is installed. Next: pip install -e plugins/clang && refgrad check --device CLANG")
  return 1 if failures else 0


def print_matrix(results: list[CaseResult]) -> None:
  """The matrix in colour on a terminal; as plain text otherwise, which CI logs and tests parse."""
  from rich.console import Console

  from refgrad.testing.conformance.report import matrix_text
  from refgrad.testing.conformance.terminal import matrix_view
  from refgrad.testing.terminal import is_interactive
  if is_interactive(sys.stdout):
    Console().print(matrix_view(results))
  else:
    print(matrix_text(results))


def cmd_check(args: argparse.Namespace) -> int:
  """The conformance suite: every op x dtype x edge value, casts, reductions and a corpus of programs."""
  from refgrad.testing.conformance import report as check_report
  from refgrad.testing.conformance.results import FAIL
  from refgrad.testing.conformance.run import all_units, progress_printer, run_conformance
  device = _device(args.device)  # fail early, with the reason, if the device cannot run here
  if args.only is not None:
    _check_only(args.only, [row for unit in all_units() for row in unit.rows])
  if not args.quiet:
    print(f"refgrad check on {device}", file=sys.stderr)
  run = run_conformance(device, None if args.quiet else progress_printer(), only=args.only,
                        standalone=args.standalone)
  results = run.results
  if not args.quiet:
    print_matrix(results)
  counts = check_report.summary(results)
  lanes = sum(r.checked for r in results)
  print(f"\n{check_report.paths_text(run)}")
  print(check_report.unsupported_line(device))
  print(f"{device}: {counts['pass']} passed, {counts['fail']} failed, {counts['unsupported']} unsupported "
        f"({lanes} lanes checked in {run.seconds:.1f} s)")  # last: the verdict (CI prints this line)
  for r in results:
    if r.status == FAIL and args.verbose:
      print(f"\n--- {r.row} / {r.column}\n{r.detail}")
  if args.json:
    check_report.write_json(args.json, run)
  if args.html:
    check_report.write_html(args.html, run)
  return 1 if counts["fail"] else 0


def _check_only(only: str, rows: list[str]) -> None:
  """A usage error unless some row of the check contains `only`; the message names the rows, a family once
  (CAST->DTYPE for the casts to each dtype, 'chain: ...' for the chains, a program once for its opts draws)."""
  if any(only in row for row in rows):
    return
  families = dict.fromkeys(re.sub(r"->.*", "->DTYPE", re.sub(r", .*", "", re.sub(r": .*", ": ...", row)))
                           for row in rows)
  raise UsageError(f"argument --only: no row contains {only!r} (case matters); rows: {'; '.join(families)}")


# The --ray addresses ray.init takes that a campaign can use: a cluster's GCS at HOST:PORT, or its Ray Client server
# at ray://HOST:PORT (HOST a name, an IPv4 address or a bracketed IPv6 one). Other schemes make ray.init import a
# module named by the address.
RAY_ADDRESS = re.compile(r"(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")
RAY_ADDRESSES = "auto, local, HOST:PORT (a cluster's head, e.g. head:6379) or ray://HOST:PORT (its Ray Client server)"
RAY_PROBE_SECONDS = 5.0  # for a cluster's head to accept a connection and answer a gRPC greeting
# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and Ray Client server are) answers
# with a SETTINGS frame of its own. ray.init waits for ever at an address that does not answer so.
HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
HTTP2_SETTINGS = 4  # the frame type, byte 3 of a frame's 9-byte header


def _check_ray(address: str) -> None:
  """--ray needs Ray, and an address ray.init takes at which a Ray cluster answers (ray.init waits for ever at one
  where nothing or something else answers)."""
  try:
    import ray  # noqa: F401
  except ImportError:
    raise UsageError("argument --ray: needs the ray package: pip install 'refgrad[ray]'") from None
  if address in ("auto", "local"):
    return
  form = RAY_ADDRESS.fullmatch(address)
  if form is None or not 1 <= int(form[2]) <= 65535:
    raise UsageError(f"argument --ray: {address!r} is not a Ray address: give {RAY_ADDRESSES}")
  if problem := _ray_unanswered(form[1].strip("[]"), int(form[2])):
    raise UsageError(f"argument --ray: no Ray cluster at {address!r}: {problem}")


def _ray_unanswered(host: str, port: int) -> str:
  """Why no gRPC server (a Ray cluster's head) answers at host:port within RAY_PROBE_SECONDS, or ""."""
  try:
    with socket.create_connection((host, port), timeout=RAY_PROBE_SECONDS) as connection:
      connection.sendall(HTTP2_GREETING)
      answer = connection.recv(9)
  except TimeoutError:
    return f"no answer within {RAY_PROBE_SECONDS:g} s"
  except OSError as e:
    return e.strerror or str(e)
  if len(answer) < 9 or answer[3] != HTTP2_SETTINGS:
    return "what answers there is not a Ray cluster's head (no gRPC)"
  return ""


def _check_fuzz_options(args: argparse.Namespace) -> None:
  """Usage errors of `refgrad fuzz`, raised before a campaign starts (not taken for a failure of the harness)."""
  if args.workers is not None and not args.ray:
    raise UsageError("argument --workers: needs --ray auto or --ray HOST:PORT (--workers counts Ray actors; local "
                     "processes: --jobs N)")
  if args.ray:
    _check_ray(args.ray)


def _fuzz_devices(args: argparse.Namespace) -> list[str]:
  """The devices of a campaign: --device is repeatable and takes comma-separated names, each one once."""
  names = [name.strip() for value in args.device for name in value.split(",") if name.strip()]
  devices = list(dict.fromkeys(_device(name) for name in names))
  if not devices:
    raise UsageError("argument --device: no device named")
  return devices


def _device_html(html: str | None, device: str, several: bool) -> str | None:
  """Each device's campaign report: the --html file itself, or with several devices one file per device beside it."""
  if html is None or not several:
    return html
  path = Path(html)
  return str(path.with_name(f"{path.stem}-{device}{path.suffix}"))


def cmd_fuzz(args: argparse.Namespace) -> int:
  """Random programs on each device against the reference until the time is up; findings become pytest files.
  Several devices run one after another, each for an equal share of --seconds."""
  devices = _fuzz_devices(args)
  _check_fuzz_options(args)
  share = args.seconds / len(devices)
  statuses, programs, findings = [], 0, 0
  for n, device in enumerate(devices):
    # the first campaign's clock starts with the process (its start-up counts), the others' when they start: one
    # that overruns its share a little does not take the next one's
    started = args.started if n == 0 else time.time()
    status, report = _fuzz_one(args, device, share, started, _device_html(args.html, device, len(devices) > 1))
    statuses.append(status)
    if report is not None:
      programs, findings = programs + report.programs, findings + len(report.findings)
    if status == INTERRUPTED:
      return INTERRUPTED
  if len(devices) > 1:
    print(f"campaign across {', '.join(devices)}: {programs} programs, {findings} distinct finding(s)")
  return max(statuses)


def _fuzz_one(args: argparse.Namespace, device: str, seconds: float, started: float, html: str | None):
  """One device's campaign and its summary: (exit status, report or None when the harness failed)."""
  from refgrad.testing.fuzz.driver import fuzz
  engine = f"{args.workers or args.jobs} Ray worker(s) at {args.ray}" if args.ray else f"{args.jobs} job(s)"
  if not args.quiet:
    print(f"refgrad fuzz on {device} for {seconds:g} s with {engine}, seed {args.seed}", file=sys.stderr)
  try:
    report = fuzz(device, seconds, args.seed, args.jobs, args.findings, args.plugin or [], args.timeout,
                  args.max_findings, args.opts, database=args.database, shared=tuple(args.shared_database or ()),
                  ray=args.ray, workers=args.workers, html=html, quiet=args.quiet, started=started,
                  max_programs=args.max_programs)
  except Exception:  # by construction not a finding: refgrad's own harness failed
    traceback.print_exc()
    print(f"refgrad fuzz: refgrad's own fuzzing harness failed (above), not {device}: this is a bug in refgrad, "
          "please report it", file=sys.stderr)
    return HARNESS_FAILED, None
  for finding in report.signatures.values():
    print(f"finding ({finding.kind}): {finding.path}" + (f"  (hit {finding.count} times)" if finding.count > 1 else ""))
  if report.replayed:
    print(f"replayed {report.replayed} example(s) from the example database")
  print(f"{device}: {report.programs} programs in {report.seconds:.1f} s: {report.rate:.1f} programs/s, "
        f"{len(report.findings)} distinct finding(s)" + ("; interrupted" if report.interrupted else "")
        + (f"; {report.cut} cut short when the time ran out (a hang is a finding only if --timeout ends in time)"
           if report.cut else ""))
  print(report.coverage_text())
  if html:
    print(f"report: {html}")
  if report.interrupted:
    return INTERRUPTED, report
  if not report.programs:  # a CI job must not pass having tested nothing
    why = "the first ran past it and was cut short" if report.cut else "start-up took it all"
    print(f"refgrad fuzz: error: argument --seconds: no program ran in {seconds:g} s on {device} ({why}): give it "
          "more time", file=sys.stderr)
    return USAGE, report
  return (1 if report.findings else 0), report


def cmd_reduce(args: argparse.Namespace) -> int:
  """Shrink a finding's standalone reproducer with C-Vise or C-Reduce, keeping its failure."""
  from refgrad.testing.reduce import reduce_reproducer, reproducer_folder
  reduced = reduce_reproducer(reproducer_folder(args.finding), args.tool, args.timeout, args.quick)
  print(f"reduced reproducer: {reduced}")
  return 0


def build_parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="refgrad", description="refgrad: tensors you can prove right")
  sub = parser.add_subparsers(dest="command", required=True)
  devices = sub.add_parser("devices", help="list devices and whether they are available")
  devices.set_defaults(fn=cmd_devices)
  demo = sub.add_parser("demo", help="run a few programs and check them against the reference")
  demo.add_argument("--device", default=None,
                    help="device to run on (default: REFGRAD_DEVICE if set, else every available device)")
  demo.add_argument("--seed", type=int, default=0)
  demo.set_defaults(fn=cmd_demo)
  check = sub.add_parser("check", help="conformance suite of a device against the reference")
  check.add_argument("--device", required=True)
  check.add_argument("--json", metavar="FILE", help="write the results as JSON")
  check.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
  check.add_argument("--verbose", "-v", action="store_true", help="print the explanation of every failure")
  check.add_argument("--only", metavar="ROW", help="run only the cases whose row contains ROW (e.g. CAST, REDUCE)")
  check.add_argument("--standalone", metavar="DIR", help="write each failing cell's reproducer in the backend's own "
                     "language into DIR (DeviceImpl.standalone)")
  check.add_argument("--quiet", "-q", action="store_true", help="no progress and no matrix: only the summary lines")
  check.set_defaults(fn=cmd_check)
  fz = sub.add_parser("fuzz", help="differential fuzzing of a device against the reference")
  fz.add_argument("--device", required=True, action="append",
                  help="the device to fuzz; repeat it or give NAME,NAME,... for one campaign across several devices, "
                       "one after another, each for an equal share of --seconds")
  fz.add_argument("--seconds", type=float, default=60.0,
                  help="time limit of the whole command, its start-up included (default: 60)")
  fz.add_argument("--seed", type=int, default=0)
  fz.add_argument("--jobs", type=int, default=1, help="parallel campaigns (processes)")
  fz.add_argument("--findings", default="refgrad-findings", metavar="DIR", help="where findings are written")
  fz.add_argument("--timeout", type=float, help="seconds before a program counts as a hang (default: 30 on a kernel "
                  "device, 120 on a graph device, which compiles each program whole as it runs it)")
  fz.add_argument("--max-findings", type=int, default=None, help="stop a campaign after this many findings")
  fz.add_argument("--max-programs", type=int, default=None,
                  help="stop a campaign after the batch (40 programs) in which it ran this many programs")
  fz.add_argument("--opts", action="store_true",
                  help="run every kernel under a random legal opt list (the kernel optimizer's choices)")
  fz.add_argument("--ray", metavar="ADDRESS",
                  help="run the campaigns as Ray actors: 'auto' (this machine's cluster, or a new local one) or a "
                       "cluster's address host:port (needs pip install refgrad[ray])")
  fz.add_argument("--workers", type=int, default=None, help="Ray workers (with --ray; default: --jobs)")
  fz.add_argument("--database", metavar="DIR|redis://HOST:PORT",
                  help="hypothesis example database: failing examples are saved there and replayed first")
  fz.add_argument("--shared-database", action="append", metavar="DIR|redis://HOST:PORT",
                  help="an example database only read (replayed, never written; repeatable)")
  fz.add_argument("--html", metavar="FILE", help="write the campaign report (coverage, ULP errors, rates, findings)")
  fz.add_argument("--quiet", action="store_true", help="no live dashboard, only the final summary")
  fz.set_defaults(fn=cmd_fuzz)
  reduce = sub.add_parser("reduce", help="shrink a finding's standalone reproducer with C-Vise or C-Reduce")
  reduce.add_argument("finding", metavar="FINDING",
                      help="a standalone reproducer's folder, or a finding's pytest file with one beside it")
  reduce.add_argument("--tool", default="cvise", choices=("cvise", "creduce"), help="the reducer (default: cvise)")
  reduce.add_argument("--timeout", type=float, default=20.0,
                      help="seconds one build and run of a candidate may take (default: 20)")
  reduce.add_argument("--quick", action="store_true",
                      help="only delete lines and tokens (C-Vise's delta passes): faster, less small")
  reduce.set_defaults(fn=cmd_reduce)
  selftest = add_selftest_parser(sub)
  for p in (devices, demo, check, fz, selftest):
    p.add_argument("--plugin", action="append", metavar="FILE", help="load a backend plugin from a .py file")
  return parser


def _process_age() -> float:
  """Seconds since this process started (from Linux's /proc; 0 where there is none)."""
  try:
    ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])  # field 22: starttime
    uptime = float(Path("/proc/uptime").read_text().split()[0])
  except (OSError, ValueError, IndexError):
    return 0.0
  return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


def main(argv: list[str] | None = None) -> int:
  """Run one command; returns its exit status. Without `argv` this process is the `refgrad` command, and a time
  limit counts from the process's start (imports included); with it, from this call."""
  started = time.time() - (_process_age() if argv is None else 0.0)
  parser = build_parser()
  try:
    args = parser.parse_args(argv)
    args.started = started
    _check_numbers(args)
    _check_environment()
    _check_paths(args)
    _load_plugins(args)
    return args.fn(args)
  except UsageError as e:
    if e.parser is not None:
      e.parser.print_usage(sys.stderr)
    prog = e.parser.prog if e.parser is not None else f"refgrad {args.command}"  # after parsing: args is set
    print(f"{prog}: error: {e}", file=sys.stderr)
    return USAGE
  except (ValueError, RuntimeError) as e:
    print(f"refgrad: error: {e}", file=sys.stderr)
    return USAGE


if __name__ == "__main__":
  sys.exit(main())
