"""The LLVM device's standalone reproducer (refgrad_llvm/standalone.py): kernel.ll and driver.py run with llvmlite
and numpy alone (refgrad cannot be imported), pass on the kernels of a small program (edge values, a reduce, a
transcendental judged by its error bound, a threaded kernel), fail naming the lane when one expected value is wrong,
and compile kernel.ll to the very object file the device compiles."""
import runpy

import numpy as np
import pytest

from refgrad import Device
from refgrad.codegen.contract import Opt
from refgrad.codegen.pipeline import lowered_kernel

pytestmark = pytest.mark.skipif("LLVM" not in Device.available(), reason="refgrad-llvm or llvmlite is not installed")

EDGES = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, -7.0, 3e3, 1e-45, 3.4e38, -126.5], np.float32)


def program(a):
  return (a * 2 + 1).max(keepdim=True) + (a * a).sqrt(), a.exp2()


def thread_elementwise(ast) -> tuple[Opt, ...] | None:
  """THREAD over 5 ranges for a kernel of 12 outputs (ranges of unequal length), else the heuristic."""
  return (Opt("THREAD", 0, 5),) if lowered_kernel(ast)[1] == EDGES.shape else None


@pytest.fixture(scope="module")
def llvm_cases(standalone_cases):
  cases = standalone_cases("LLVM", program, EDGES, opts=thread_elementwise)
  assert any(c.program.threads > 1 for c in cases) and any(c.abs_bounds.any() for c in cases)
  return cases


def test_an_llvm_reproducer_runs_without_refgrad_and_fails_on_a_wrong_value(llvm_cases, reproduces, tmp_path):
  from refgrad_llvm.standalone import llvm_reproducer
  for n, case in enumerate(llvm_cases):
    reproduces(llvm_reproducer, case, tmp_path / f"kernel{n}")


def test_the_driver_compiles_kernel_ll_to_the_devices_object_file(llvm_cases, tmp_path):
  from refgrad_llvm.standalone import llvm_reproducer
  for n, case in enumerate(llvm_cases):
    folder = tmp_path / f"kernel{n}"
    folder.mkdir()
    for name, text in llvm_reproducer(case).items():
      (folder / name).write_text(text)
    driver = runpy.run_path(str(folder / "driver.py"), run_name="driver")  # its functions, main() not run
    assert driver["compile_kernel"](driver["target_machine"]()) == Device["LLVM"].compiler.compile(case.source)
