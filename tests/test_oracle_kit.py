"""The oracle kit catches real bugs: deliberately broken devices (tests/broken_devices.py) fail `refgrad check`
and `refgrad fuzz`, crashing and hanging backends become findings, and correct devices raise no false alarm."""
import functools
import json
import runpy
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from refgrad import Device
from refgrad.cli import main
from refgrad.dtype import DTYPES_BY_PRIORITY, dtypes
from refgrad.testing.conformance.results import FAIL, PASS
from refgrad.testing.conformance.run import run_conformance

BROKEN_FILE = str(Path(__file__).with_name("broken_devices.py"))
sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402

CORRECT = [d for d in ("PYTHON", "CLANG", "LLVM", "OPENCL") if d in Device.available()]


@pytest.fixture(autouse=True, scope="module")
def broken_plugin():
  """Register the broken devices for this module only (the CLI's --plugin loads them in fuzz workers)."""
  with broken_devices.registered():
    yield


@pytest.mark.parametrize("device", sorted(broken_devices.BUGS))
def test_check_detects_each_broken_device(device):
  """The check, in its order from its first unit, fails on each broken device and passes every cell before (it
  stops at the first failing unit; the full check of a broken device: the multi-device bugs below)."""
  statuses = Counter(r.status for r in run_conformance(device, stop_on_failure=True).results)
  assert statuses[FAIL] > 0 and set(statuses) <= {PASS, FAIL}


def failing_cells(device: str, only: str, tmp_path: Path, plugin: str | None = None) -> set[tuple[str, str]]:
  report = tmp_path / "report.json"
  main(["check", "--device", device, "--only", only, "--json", str(report)] + (["--plugin", plugin] if plugin else []))
  return {(c["row"], c["column"]) for c in json.loads(report.read_text())["cases"] if c["status"] == "fail"}


@pytest.mark.parametrize("device", sorted(broken_devices.BLIND_SPOTS))
def test_check_catches_each_bug_kind_it_once_missed_in_its_row(device, tmp_path):
  """Issue 26's kinds (a cast rounded twice through a wider float, exp2 flushing subnormal results, a multiply
  widened as if it could not wrap, constants printed with too few digits) each fail the row made for them."""
  _, row, column = broken_devices.BLIND_SPOTS[device]
  assert (row, column) in failing_cells(device, row, tmp_path)


def test_check_catches_a_multiply_add_fused_into_a_reduction(tmp_path):
  """CLANG with -ffp-contract=fast (the selftest's mutant) sums products fused: the exact-sum rows see it, though
  the order-free bound of an ordinary sum admits it."""
  if "CLANG" not in Device.available():
    pytest.skip("CLANG is not available here: the mutant is a copy of it")
  plugin = tmp_path / "mutants.py"
  plugin.write_text("from refgrad.testing.selftest.mutants import refgrad_devices  # noqa: F401\n")
  cells = failing_cells("CLANG~ffp_contract_fast", "exact in every order", tmp_path, str(plugin))
  assert ("REDUCE ADD of products, exact in every order", "float32") in cells


def test_check_bitcasts_to_a_smaller_item_size_catch_a_saturating_cast(tmp_path):
  """Tensor.bitcast to a smaller item size cuts each element into pieces with narrowing integer casts: a device
  whose narrowing casts saturate fails exactly those cells of the BITCAST rows (the others use no such cast)."""
  numeric = [d for d in DTYPES_BY_PRIORITY if d != dtypes.bool]
  narrowing = {(f"BITCAST->{d.name}", s.name) for d in numeric for s in numeric if d.itemsize < s.itemsize}
  assert failing_cells("BROKEN_CAST", "BITCAST", tmp_path) == narrowing


@pytest.mark.parametrize("device", CORRECT)
def test_check_passes_correct_devices(device, tmp_path):
  html, report = tmp_path / "report.html", tmp_path / "report.json"
  assert main(["check", "--device", device, "--json", str(report), "--html", str(html)]) == 0
  assert json.loads(report.read_text())["summary"]["fail"] == 0
  page = html.read_text()
  assert "<table>" in page and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained


@pytest.mark.parametrize("device", sorted(broken_devices.BUGS))
def test_fuzz_detects_each_broken_device_within_a_minute(device, tmp_path):
  findings = tmp_path / "findings"
  code = main(["fuzz", "--device", device, "--seconds", "60", "--max-findings", "1", "--findings", str(findings),
               "--plugin", BROKEN_FILE])
  written = list(findings.glob("test_finding_*.py"))
  assert code == 1 and written
  module = runpy.run_path(str(written[0]))  # the finding is a standalone reproducer: it must fail the same way
  with pytest.raises(AssertionError, match="differs from the reference"):
    module["test_finding"]()


@pytest.mark.parametrize("device", sorted(broken_devices.MULTI_BUGS))
def test_check_catches_each_planted_multi_device_bug(device, tmp_path):
  """A copy between the device's instances that drops the last shard, an all-reduce that counts one device twice:
  the check's sharded programs fail, naming the transfer, and every other row passes."""
  report = tmp_path / "report.json"
  assert main(["check", "--device", device, "--json", str(report)]) == 1
  cases = json.loads(report.read_text())["cases"]
  failed = [c for c in cases if c["status"] == "fail"]
  transfer = "copy PYTHON:1 -> PYTHON" if "COPY" in device else "allreduce ADD of PYTHON, PYTHON:1"
  assert failed and all(c["row"].startswith("sharded") and transfer in c["detail"] for c in failed)


def test_fuzz_draws_sharded_programs_and_finds_a_double_counting_allreduce(tmp_path):
  findings = tmp_path / "findings"
  # the campaign stops at its first finding (about 40 s on a quiet machine): the budget only bounds a slow, loaded one
  code = main(["fuzz", "--device", "MULTIBUG_ALLREDUCE_DOUBLE", "--seconds", "180", "--max-findings", "1",
               "--findings", str(findings), "--plugin", BROKEN_FILE])
  written = list(findings.glob("test_finding_*.py"))
  assert code == 1 and written and ".shard((" in written[0].read_text()
  module = runpy.run_path(str(written[0]))
  with pytest.raises(AssertionError, match="allreduce ADD"):
    module["test_finding"]()


def test_check_and_fuzz_catch_a_kernel_that_runs_with_the_variables_largest_value(tmp_path):
  """VARBUG_USES_MAX reads each Variable as its max, not the bound value: the check's symbolic rows fail (the correct
  devices pass them: test_check_passes_correct_devices), and a fuzz campaign's symbolic programs find it; the
  reproducer binds the Variable again."""
  report = tmp_path / "report.json"
  assert main(["check", "--device", "VARBUG_USES_MAX", "--only", "symbolic", "--json", str(report)]) == 1
  cases = json.loads(report.read_text())["cases"]
  assert cases and all(c["status"] == "fail" and "with rows=5" in c["detail"] for c in cases)
  findings = tmp_path / "findings"
  code = main(["fuzz", "--device", "VARBUG_USES_MAX", "--seconds", "60", "--max-findings", "1",
               "--findings", str(findings), "--plugin", BROKEN_FILE])
  written = list(findings.glob("test_finding_*.py"))
  assert code == 1 and written and "Variable('n'" in written[0].read_text()
  with pytest.raises(AssertionError, match="with n="):
    runpy.run_path(str(written[0]))["test_finding"]()


@pytest.mark.parametrize("device", sorted(broken_devices.OPT_BUGS))
def test_check_catches_each_planted_optimizer_bug(device, tmp_path, capsys):
  """The check's corpus under random and forced opt lists fails on each optimizer bug, and the report names the
  opts."""
  report = tmp_path / "report.json"
  assert main(["check", "--device", device, "--only", "opts", "--json", str(report), "--plugin",
               BROKEN_FILE]) == 1
  failed = [c for c in json.loads(report.read_text())["cases"] if c["status"] == "fail"]
  kind = broken_devices.OPT_BUGS[device][0]
  assert failed and all(f"{kind}(" in c["detail"] for c in failed)


@pytest.mark.parametrize("device", sorted(broken_devices.OPT_BUGS_BY_ROW))
def test_check_catches_optimizer_bugs_of_the_heuristics_sizes_and_forced_opts(device, tmp_path):
  """An upcast wider than 8 whose lanes wrap is reached by the heuristic at a column sum's real size; an unroll that
  drops an integer lane by the rows that unroll every integer reduction."""
  _, _, row = broken_devices.OPT_BUGS_BY_ROW[device]
  assert (row, "program") in failing_cells(device, row, tmp_path, BROKEN_FILE)


def test_random_opt_lists_draw_every_amount_the_heuristic_chooses():
  """On an 8-lane device the heuristic tiles a 256x256 column sum 16 wide: the random draws of the check and of
  `fuzz --opts` reach that opt too."""
  import random

  from refgrad import Tensor
  from refgrad.codegen.contract import Opt
  from refgrad.codegen.opt import default_opts
  from refgrad.codegen.pipeline import lowered_kernel, random_kernel_opts
  ast = Tensor.ones(256, 256).contiguous().realize().sum(0).schedule()[-1].ast
  caps = Device["PYTHON"].caps.__class__(upcast_lanes=8)
  chosen = default_opts(*lowered_kernel(ast), 8)
  assert Opt("UPCAST", 0, 16) in chosen
  rng = random.Random(0)
  drawn = {opt for _ in range(300) for opt in random_kernel_opts(ast, caps, rng)}
  assert Opt("UPCAST", 0, 16) in drawn


@pytest.fixture(scope="module")
def fresh_check(tmp_path_factory) -> Callable[[str, str], tuple[int, list]]:
  """`refgrad check --device NAME --only ONLY` in a fresh process: (exit code, cases). Memoized for the module: the
  real OPENCL's runs, the same for every planted bug, run once."""
  @functools.cache
  def check(name: str, only: str) -> tuple[int, list]:
    report = tmp_path_factory.mktemp("check") / "report.json"
    args = ["check", "--device", name, "--only", only, "--json", str(report), "--plugin", BROKEN_FILE]
    code = subprocess.run([sys.executable, "-c", f"from refgrad.cli import main; raise SystemExit(main({args!r}))"],
                          capture_output=True, text=True, timeout=600).returncode
    return code, json.loads(report.read_text())["cases"]
  return check


@pytest.mark.skipif("OPENCL" not in Device.available(), reason="the grouped-reduction bugs are planted in OPENCL")
@pytest.mark.parametrize("device", sorted(broken_devices.GPU_BUGS))
def test_check_catches_each_planted_grouped_reduction_bug(device, fresh_check):
  """A work-group reduction without its barrier, or counting the clamped last element again: the check's full
  reductions (long rows, few outputs: what a work-group shares) and its REDUCE rows (the long rows have a kernel of
  their own, which OPENCL reduces in work-groups: early in the check) fail on both; the real OPENCL passes them.
  Each check runs in a fresh process: PoCL reuses a work-group's local memory between launches, so a missing
  barrier reads the partial sums an identical earlier launch (in this process, by the real OPENCL) left there."""
  for only in ("full reductions", "REDUCE"):
    code, cases = fresh_check(device, only)
    failed = [c for c in cases if c["status"] == "fail"]
    assert code == 1 and any(only in c["row"] for c in failed)
    if only == "REDUCE":  # a batch reports the paths of its kernels, failed or not
      assert any("grouped reduction (local memory and barriers)" in c["paths"] for c in failed)
    assert fresh_check("OPENCL", only)[0] == 0


@pytest.mark.skipif("CLANG" not in Device.available(), reason="the threading bug is planted in CLANG")
def test_check_catches_threads_writing_overlapping_outputs(tmp_path):
  """CLANG with every thread's range launched from row 0: the threads write the same rows and the last are never
  written. The check's long batched kernels are threaded by CLANG's own heuristic, and fail."""
  report = tmp_path / "report.json"
  assert main(["check", "--device", "OPTBUG_THREADS_OVERLAP", "--json", str(report)]) == 1
  failed = [c for c in json.loads(report.read_text())["cases"] if c["status"] == "fail"]
  assert failed and all("THREAD(" in c["detail"] for c in failed)


def test_an_output_lane_the_device_never_writes_is_caught_even_where_the_answer_is_zero():
  """A device whose kernels write nothing, on zeros its allocator hands out: the answer (0) is already there, but
  the check fills every output with a poison pattern before the kernel runs."""
  from refgrad.device import DeviceImpl
  from refgrad.interp.device import PythonAllocator
  from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
  Device.register("WRITES_NOTHING", lambda: DeviceImpl("WRITES_NOTHING", PythonAllocator(),
                                                       interpret=lambda program: lambda *buffers: None))
  try:
    for dtype in (np.float32, np.int32, np.bool_):
      with pytest.raises(ReferenceMismatch):
        check_against_reference(lambda t: t * 0, np.zeros(8, dtype), device="WRITES_NOTHING")
  finally:
    Device.remove("WRITES_NOTHING")


def test_fuzz_with_opts_catches_an_optimizer_bug_and_the_reproducer_replays_its_opts(tmp_path):
  findings = tmp_path / "findings"
  code = main(["fuzz", "--device", "OPTBUG_UPCAST_STALE", "--opts", "--seconds", "60", "--max-findings", "1",
               "--findings", str(findings), "--plugin", BROKEN_FILE])
  written = list(findings.glob("test_finding_*.py"))
  assert code == 1 and written and "opts=random_opts_seeded_by(" in written[0].read_text()
  module = runpy.run_path(str(written[0]))
  with pytest.raises(AssertionError, match=r"opts .*UPCAST\("):
    module["test_finding"]()


def test_fuzz_with_opts_finds_nothing_on_a_correct_device(tmp_path, capsys):
  findings = tmp_path / "findings"
  assert main(["fuzz", "--device", "PYTHON", "--opts", "--seconds", "5", "--findings", str(findings)]) == 0
  assert not findings.exists()


@pytest.mark.parametrize("device,kind", [("CRASHY_SEGFAULT", "crash"), ("CRASHY_HANG", "hang")])
def test_fuzz_survives_crashing_and_hanging_backends(device, kind, tmp_path, capsys):
  findings = tmp_path / "findings"
  code = main(["fuzz", "--device", device, "--seconds", "40", "--max-findings", "1", "--timeout", "3",
               "--findings", str(findings), "--plugin", BROKEN_FILE])
  out = capsys.readouterr().out
  assert code == 1 and f"finding ({kind})" in out and "programs/s" in out


@pytest.mark.parametrize("device", CORRECT)
def test_fuzz_finds_nothing_on_correct_devices(device, tmp_path, capsys):
  findings = tmp_path / "findings"
  assert main(["fuzz", "--device", device, "--seconds", "8", "--findings", str(findings)]) == 0
  assert not findings.exists() and "programs/s" in capsys.readouterr().out


def test_check_against_reference_explains_a_mismatch():
  from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
  x = np.array([1.0, 2.0, float("nan"), -0.0], dtype=np.float32)
  with pytest.raises(ReferenceMismatch) as info:
    check_against_reference(lambda t: t.maximum(1.5), x, device="BROKEN_MAX_NAN")
  message = str(info.value)
  assert "at (2,): device 1.5, reference nan" in message
  assert "input 0:" in message and "kernel source on BROKEN_MAX_NAN" in message


def test_reduction_bounds_are_rigorous_not_arbitrary():
  """A float sum on CLANG may differ from the reference (order is free) but stays within gamma_n*sum|x|."""
  from refgrad.testing.oracle.reference import check_against_reference
  x = np.random.default_rng(3).standard_normal(100_000).astype(np.float32) * 1e3
  report = check_against_reference(lambda t: t.sum(), x, device=CORRECT[-1])
  assert report.ok and report.checked == 1


def test_demo_on_the_reference_compares_its_two_interpreters(capsys):
  assert main(["demo", "--device", "PYTHON"]) == 0
  out = capsys.readouterr().out
  assert "graph evaluator" in out and out.count("bit-exact") == 6
  assert out.strip().splitlines()[-1].startswith(("Next: refgrad check --device", "No compiled backend"))


def test_demo_reports_when_the_interpreters_disagree(capsys, monkeypatch):
  import refgrad.interp.graph as graph
  honest = graph.evaluate_graph

  def off_by_one(root):
    values, undefined = honest(root)
    return values + np.ones((), values.dtype), undefined
  monkeypatch.setattr(graph, "evaluate_graph", off_by_one)
  assert main(["demo", "--device", "PYTHON"]) == 1
  assert capsys.readouterr().out.count("FAIL") == 6


def test_demo_catches_a_broken_device(capsys):
  assert main(["demo", "--device", "BROKEN_PAD"]) == 1
  assert "FAIL" in capsys.readouterr().out


def test_demo_runs_every_available_device(capsys):
  """Without --device the demo runs on every available kernel device: the correct ones agree, and the broken ones
  registered by this module make it fail."""
  assert main(["demo"]) == 1
  sections = {block.split()[0].rstrip(","): block for block in capsys.readouterr().out.split("\n\n")}
  for device in Device.available("kernel"):
    assert device in sections, f"the demo skipped {device}"
    if device in CORRECT:
      assert "FAIL" not in sections[device], sections[device]
  assert "FAIL" in sections["BROKEN_PAD"]


def test_fuzz_draws_only_the_dtypes_a_device_claims(tmp_path, capsys):
  """A correct device that does not claim float16, bfloat16, float64 and uint64 gives no finding: the programs
  never use those dtypes, and the coverage is counted over the claimed ones."""
  findings = tmp_path / "findings"
  assert main(["fuzz", "--device", "NARROW", "--seconds", "15", "--findings", str(findings),
               "--plugin", BROKEN_FILE]) == 0
  out = capsys.readouterr().out
  assert not findings.exists()
  coverage = next(line for line in out.splitlines() if line.startswith("coverage:"))
  assert "float16" not in coverage and "float64" not in coverage and "uint64" not in coverage
