"""Failures explain themselves: a mismatch report shows the kernel source the device really compiled, and
`refgrad fuzz` never takes a bug of its own harness for a finding, nor hides it."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.errors import FlakyFailure

import refgrad.compile_cache
import refgrad.testing.oracle.reference as reference
from refgrad import Device, Tensor
from refgrad.cli import HARNESS_FAILED, main
from refgrad.codegen.pipeline import compile_ast
from refgrad.device import DeviceImpl
from refgrad.interp.device import PythonAllocator
from refgrad.schedule import create_schedule
from refgrad.testing.fuzz import campaign
from refgrad.testing.fuzz.driver import fuzz
from refgrad.testing.fuzz.program_check import run_one
from refgrad.testing.fuzz.results import FindingError, HarnessError, only_findings
from refgrad.testing.programs import Step, TensorProgram


def scaled_row_sums(t):
  return (t * 0.8173).sum(1)  # a constant no other test uses: the kernel is compiled afresh here


@pytest.mark.skipif("OPENCL" not in Device.available(), reason="OPENCL is not available here")
def test_mismatch_report_shows_the_kernel_the_device_compiled(monkeypatch):
  compiled = []
  real_compile = refgrad.compile_cache.cached_compile

  def recording_compile(compiler, source):
    compiled.append(source)
    return real_compile(compiler, source)

  def every_lane_differs(actual, expected, *args, **kwargs):  # force a report whatever the device computed
    verdicts = real_compare(actual, expected, *args, **kwargs)
    verdicts.good[:] = False
    return verdicts
  real_compare = reference.compare_lanes
  monkeypatch.setattr(refgrad.compile_cache, "cached_compile", recording_compile)
  monkeypatch.setattr(reference, "compare_lanes", every_lane_differs)
  # the forced comparison would fail that check first
  monkeypatch.setattr(reference, "check_rewrites", lambda *args: ("", None))
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  with pytest.raises(reference.ReferenceMismatch) as info:
    reference.check_against_reference(scaled_row_sums, x, device="OPENCL")
  shown = str(info.value).split("kernel source on OPENCL:\n", 1)[1]
  assert compiled and shown == compiled[-1]
  items, _ = create_schedule([scaled_row_sums(Tensor(x, device="PYTHON")).uop])
  assert shown != Device["OPENCL"].render(compile_ast(items[-1].ast))  # what the report used to show


@pytest.fixture
def raising_device():
  """A device whose every kernel launch raises, as a buggy backend's would."""
  def interpret(program):
    def run(*handles):
      raise RuntimeError("the device under test broke")
    return run
  Device.register("RAISING_TEST", lambda: DeviceImpl("RAISING_TEST", PythonAllocator(), interpret=interpret))
  try:
    yield "RAISING_TEST"
  finally:
    Device.remove("RAISING_TEST")


def a_program():
  return TensorProgram([np.arange(4, dtype=np.float32)], [Step("add", (0, 1.0), refs=(True, False))])


def test_fuzz_counts_a_device_failure_as_a_finding(raising_device):
  kind, detail = run_one(a_program(), raising_device)
  assert kind == "error" and "the device under test broke" in detail


def test_fuzz_lets_a_harness_bug_in_the_comparison_propagate(monkeypatch):
  def broken_compare(*args, **kwargs):
    raise ZeroDivisionError("planted harness bug")
  monkeypatch.setattr(reference, "compare_lanes", broken_compare)
  with pytest.raises(ZeroDivisionError, match="planted harness bug"):
    run_one(a_program(), "PYTHON")


def test_fuzz_exits_with_the_traceback_of_a_harness_bug_in_the_strategy(monkeypatch, tmp_path, capsys):
  def broken_program(_):
    raise KeyError("planted harness bug")
  monkeypatch.setattr(campaign, "programs_strategy", lambda *choices: st.integers().map(broken_program))
  findings = tmp_path / "findings"
  assert main(["fuzz", "--device", "PYTHON", "--seconds", "10", "--findings", str(findings)]) == HARNESS_FAILED
  err = capsys.readouterr().err
  assert "Traceback" in err and "planted harness bug" in err and "bug in refgrad" in err
  assert not findings.exists()


def test_fuzz_exits_with_the_traceback_of_a_harness_bug_in_a_worker(tmp_path):
  """The comparison runs in the worker process: a plugin file plants the bug there (and in the parent)."""
  plugin = tmp_path / "plant_bug.py"
  plugin.write_text("import refgrad.testing.oracle.reference as reference\n\n\n"
                    "def broken_compare(*args, **kwargs):\n  raise ZeroDivisionError('planted harness bug')\n\n\n"
                    "reference.compare_lanes = broken_compare\n")
  findings = tmp_path / "findings"
  run = subprocess.run([sys.executable, "-m", "refgrad.cli", "fuzz", "--device", "PYTHON", "--seconds", "20",
                        "--findings", str(findings), "--plugin", str(plugin)], capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == HARNESS_FAILED, run.stderr
  assert "HarnessError" in run.stderr and "ZeroDivisionError: planted harness bug" in run.stderr
  assert "finding" not in run.stdout and not findings.exists()


def test_only_findings_are_swallowed_from_hypothesis():
  finding = FindingError("hang", "no answer within 3 s", None)
  assert only_findings(finding)
  assert only_findings(FlakyFailure("stopped reproducing", [finding, FindingError("crash", "", None)]))
  assert not only_findings(FlakyFailure("mixed", [finding, KeyError("harness")]))
  assert not only_findings(KeyError("harness"))


def test_a_worker_that_cannot_start_is_refgrads_failure_at_once(tmp_path):
  """A plugin file that breaks only in the worker process: reported as refgrad's failure, never as a finding of
  the device, and without hypothesis trying to shrink it first."""
  plugin = tmp_path / "breaks_in_workers.py"
  plugin.write_text("import multiprocessing\n\nif multiprocessing.parent_process() is not None:\n"
                    "  raise SystemExit(7)\n")
  with pytest.raises(HarnessError, match=r"died while starting \(exit code 7\)"):
    fuzz("PYTHON", 60, findings_dir=str(tmp_path / "findings"), plugin_files=[str(plugin)])
  assert not (tmp_path / "findings").exists()
