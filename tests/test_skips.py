"""No silent skips: a test is skipped for a dtype only when its device's declared capabilities
(Capabilities.dtypes) exclude it, and `refgrad check` lists the dtypes a device does not declare."""
import json
import sys
from pathlib import Path

import pytest

from refgrad import Device, Tensor, dtypes
from refgrad.cli import main
from refgrad.codegen.contract import UnsupportedDTypeError
from refgrad.device import DeviceImpl
from refgrad.dtype import ALL_DTYPES
from refgrad.interp.device import PythonAllocator
from refgrad.interp.kernel import PythonKernel

sys.path.insert(0, str(Path(__file__).parent))
from broken_devices import InterpretingRuntime, ListingCompiler, ListingRenderer  # noqa: E402

pytest_plugins = ["pytester"]
NO_FLOAT64 = frozenset(ALL_DTYPES.values()) - {dtypes.float64}


class RefusingRuntime:
  """A backend that gives up on float64 although its renderer claims it: a bug a skip must not hide."""

  def load(self, binary: bytes, program):
    if any(u.dtype == dtypes.float64 for u in program.uops):
      raise UnsupportedDTypeError("this runtime cannot launch float64 kernels")
    return PythonKernel(program)


DEVICES = {
  "NOFP64_DECLARED": (NO_FLOAT64, InterpretingRuntime),
  "FP64_REFUSED": (frozenset(ALL_DTYPES.values()), RefusingRuntime),
}


@pytest.fixture(scope="module", autouse=True)
def test_devices():
  for name, (claimed, runtime) in DEVICES.items():
    Device.register(name, lambda name=name, claimed=claimed, runtime=runtime: DeviceImpl(
      name, PythonAllocator(), renderer=ListingRenderer(claimed), compiler=ListingCompiler(), runtime=runtime()))
  try:
    yield
  finally:
    for name in DEVICES:
      Device.remove(name)


def double(device: str):
  return (Tensor([1.5, 2.5], dtype=dtypes.float64, device=device) * 2).numpy()


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_only_the_declared_capabilities_check_counts_as_unsupported(device):
  from helpers import declared_unsupported
  with pytest.raises(UnsupportedDTypeError) as info:
    double(device)
  assert declared_unsupported(info.value) == (device == "NOFP64_DECLARED")
  assert not declared_unsupported(UnsupportedDTypeError("never raised"))


def test_the_suite_skips_declared_gaps_and_fails_refusals(pytester):
  """The project's conftest, run on an inner suite: a float64 test skips on the device that does not declare
  float64 and fails on the device that declares it but refuses it."""
  pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
  pytester.makepyfile(test_inner="""
from test_skips import double


def test_declared():
  double("NOFP64_DECLARED")


def test_refused():
  double("FP64_REFUSED")
""")
  pytester.syspathinsert(Path(__file__).parent)
  result = pytester.runpytest_inprocess("-rs", "-p", "no:randomly")
  result.assert_outcomes(passed=0, skipped=1, failed=1)
  result.stdout.fnmatch_lines(["*device NOFP64_DECLARED does not support float64*not in Capabilities.dtypes*"])


def test_check_lists_undeclared_dtypes_in_matrix_and_summary(tmp_path, capsys, monkeypatch):
  from refgrad.testing.conformance import corpus, run
  programs = corpus._corpus()
  monkeypatch.setattr(corpus, "_corpus", lambda: {"matmul": programs["matmul"]})
  monkeypatch.setattr(run, "DTYPES_BY_PRIORITY", [dtypes.bool, dtypes.float32, dtypes.float64])
  report = tmp_path / "report.json"
  assert main(["check", "--device", "NOFP64_DECLARED", "--json", str(report)]) == 0
  out = capsys.readouterr().out
  assert "unsupported on NOFP64_DECLARED: float64 (not in Capabilities.dtypes)" in out
  header, add_row = out.splitlines()[0], next(line for line in out.splitlines() if line.startswith("ADD "))
  assert header.split()[-1] == "float64" and add_row.split()[-1] == "-"
  results = json.loads(report.read_text())
  assert results["unsupported_dtypes"] == ["float64"]
  unsupported = [c for c in results["cases"] if c["status"] == "unsupported"]
  assert unsupported and all("float64 not in Capabilities.dtypes" in c["detail"] for c in unsupported)
  assert {c["column"] for c in results["cases"] if c["status"] == "pass"} == {"bool", "float32", "program"}
