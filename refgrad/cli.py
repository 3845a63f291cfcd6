"""The `refgrad` command: `demo`, `devices`, `check` (conformance), `fuzz` (differential fuzzing) and `selftest`
(the kit's own mutation score)."""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import TYPE_CHECKING

import numpy as np

from refgrad.testing.selftest import add_selftest_parser

if TYPE_CHECKING:
  from refgrad.testing.conformance import CaseResult

HARNESS_FAILED = 3  # `refgrad fuzz`'s exit status when refgrad itself failed (0: no finding, 1: findings, 2: usage)
INTERRUPTED = 130  # Ctrl-C: the campaign stopped early (its findings and report are written), as a shell reports it


def _load_plugins(args: argparse.Namespace) -> None:
  from refgrad.testing.fuzz import load_plugin_file
  for path in getattr(args, "plugin", None) or []:
    load_plugin_file(path)


def cmd_devices(args: argparse.Namespace) -> int:
  """List every registered device with its plugin, version and status."""
  from refgrad import Device
  for spec in Device.specs():
    status = "available" if spec.unavailable_reason is None else f"unavailable: {spec.unavailable_reason}"
    print(f"{spec.name:10s} {spec.plugin:18s} {spec.version or '-':28s} {status}")
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
  from refgrad.testing.compare import compare
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
  from refgrad.testing.reference import ReferenceMismatch, check_against_reference
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


def cmd_demo(args: argparse.Namespace) -> int:
  """Show the product: the reference checking itself, then every other available device checked against it."""
  from refgrad import Device
  programs = _demo_programs(args.seed)
  devices = [Device.canonicalize(args.device)] if args.device else ["PYTHON"] + [
    d for d in Device.available() if d != "PYTHON"]
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

  from refgrad.testing.check_report import matrix_text
  from refgrad.testing.terminal import is_interactive, matrix_view
  if is_interactive(sys.stdout):
    Console().print(matrix_view(results))
  else:
    print(matrix_text(results))


def cmd_check(args: argparse.Namespace) -> int:
  """The conformance suite: every op x dtype x edge value, casts, reductions and a corpus of programs."""
  from refgrad import Device
  from refgrad.testing import check_report, conformance
  device = Device.canonicalize(args.device)
  Device[device]  # fail early, with the reason, if the device cannot run here
  if not args.quiet:
    print(f"refgrad check on {device}", file=sys.stderr)
  run = conformance.run_conformance(device, None if args.quiet else conformance.progress_printer(), only=args.only)
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
    if r.status == conformance.FAIL and args.verbose:
      print(f"\n--- {r.row} / {r.column}\n{r.detail}")
  if args.json:
    check_report.write_json(args.json, run)
  if args.html:
    check_report.write_html(args.html, run)
  return 1 if counts["fail"] else 0


def _check_fuzz_options(args: argparse.Namespace) -> None:
  """Usage errors of `refgrad fuzz`, raised before a campaign starts (not taken for a failure of the harness)."""
  if args.workers is not None and not args.ray:
    raise ValueError("--workers counts Ray actors: give --ray auto or --ray HOST:PORT (local processes: --jobs N)")
  if (args.workers if args.workers is not None else args.jobs) < 1:
    raise ValueError(f"need at least one worker, got --jobs {args.jobs} --workers {args.workers}")
  needs = [("ray", "--ray")] if args.ray else []
  needs += [("redis", "a redis:// database")] if any(str(u).startswith("redis://") for u in
                                                     [args.database, *(args.shared_database or ())]) else []
  for module, option in needs:
    try:
      __import__(module)
    except ImportError:
      raise RuntimeError(f"{option} needs the {module} package: pip install 'refgrad[ray]'") from None


def cmd_fuzz(args: argparse.Namespace) -> int:
  """Random programs on a device against the reference until the time is up; findings become pytest files."""
  from refgrad import Device
  from refgrad.testing.fuzz import fuzz
  device = Device.canonicalize(args.device)
  Device[device]
  _check_fuzz_options(args)
  engine = f"{args.workers or args.jobs} Ray worker(s) at {args.ray}" if args.ray else f"{args.jobs} job(s)"
  if not args.quiet:
    print(f"refgrad fuzz on {device} for {args.seconds:g} s with {engine}, seed {args.seed}", file=sys.stderr)
  try:
    report = fuzz(device, args.seconds, args.seed, args.jobs, args.findings, args.plugin or [], args.timeout,
                  args.max_findings, args.opts, database=args.database, shared=tuple(args.shared_database or ()),
                  ray=args.ray, workers=args.workers, html=args.html, quiet=args.quiet)
  except Exception:  # by construction not a finding: refgrad's own harness failed
    traceback.print_exc()
    print(f"refgrad fuzz: refgrad's own fuzzing harness failed (above), not {device}: this is a bug in refgrad, "
          "please report it", file=sys.stderr)
    return HARNESS_FAILED
  for finding in report.signatures.values():
    print(f"finding ({finding.kind}): {finding.path}" + (f"  (hit {finding.count} times)" if finding.count > 1 else ""))
  if report.replayed:
    print(f"replayed {report.replayed} example(s) from the example database")
  print(f"{report.programs} programs in {report.seconds:.1f} s: {report.rate:.1f} programs/s, "
        f"{len(report.findings)} distinct finding(s)" + ("; interrupted" if report.interrupted else ""))
  print(report.coverage_text())
  if args.html:
    print(f"report: {args.html}")
  if report.interrupted:
    return INTERRUPTED
  return 1 if report.findings else 0


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="refgrad", description="refgrad: tensors you can prove right")
  sub = parser.add_subparsers(dest="command", required=True)
  devices = sub.add_parser("devices", help="list devices and whether they are available")
  devices.set_defaults(fn=cmd_devices)
  demo = sub.add_parser("demo", help="run a few programs and check them against the reference")
  demo.add_argument("--device", default=None, help="device to run on (default: REFGRAD_DEVICE or PYTHON)")
  demo.add_argument("--seed", type=int, default=0)
  demo.set_defaults(fn=cmd_demo)
  check = sub.add_parser("check", help="conformance suite of a device against the reference")
  check.add_argument("--device", required=True)
  check.add_argument("--json", metavar="FILE", help="write the results as JSON")
  check.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
  check.add_argument("--verbose", "-v", action="store_true", help="print the explanation of every failure")
  check.add_argument("--only", metavar="ROW", help="run only the cases whose row contains ROW (e.g. CAST, REDUCE)")
  check.add_argument("--quiet", "-q", action="store_true", help="no progress and no matrix: only the summary lines")
  check.set_defaults(fn=cmd_check)
  fz = sub.add_parser("fuzz", help="differential fuzzing of a device against the reference")
  fz.add_argument("--device", required=True)
  fz.add_argument("--seconds", type=float, default=60.0)
  fz.add_argument("--seed", type=int, default=0)
  fz.add_argument("--jobs", type=int, default=1, help="parallel campaigns (processes)")
  fz.add_argument("--findings", default="refgrad-findings", metavar="DIR", help="where findings are written")
  fz.add_argument("--timeout", type=float, default=30.0, help="seconds before a program counts as a hang")
  fz.add_argument("--max-findings", type=int, default=None, help="stop a campaign after this many findings")
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
  selftest = add_selftest_parser(sub)
  for p in (devices, demo, check, fz, selftest):
    p.add_argument("--plugin", action="append", metavar="FILE", help="load a backend plugin from a .py file")
  return parser


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  try:
    _load_plugins(args)
    return args.fn(args)
  except (ValueError, RuntimeError) as e:
    print(f"refgrad: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
