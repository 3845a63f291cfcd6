"""The OPENCL device's standalone reproducer (refgrad_opencl/standalone.py): kernel.cl and driver.py run with
pyopencl and numpy alone (refgrad cannot be imported), pass on the kernels of a small program (edge values, a reduce
shared by a work-group through local memory, a transcendental judged by its error bound, work-groups of a chosen size)
and fail naming the lane when one expected value is wrong."""
import numpy as np
import pytest

from refgrad import Device
from refgrad.codegen.contract import Opt
from refgrad.codegen.pipeline import lowered_kernel
from refgrad.uop import Ops

pytestmark = pytest.mark.skipif("OPENCL" not in Device.available(), reason="no OpenCL device")

EDGES = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, -7.0, 3e3, 1e-45, 3.4e38, -126.5], np.float32)


def program(a):
  return (a * 2 + 1).max(keepdim=True) + (a * a).sqrt(), a.exp2()


def work_groups(ast) -> tuple[Opt, ...]:
  """The reduce shared by work-groups of 4 items, the 12 outputs in work-groups of 4."""
  return (Opt("LOCAL", 0, 4),) if lowered_kernel(ast)[1] == EDGES.shape else (Opt("GROUP", 0, 4),)


def test_an_opencl_reproducer_runs_without_refgrad_and_fails_on_a_wrong_value(standalone_cases, reproduces, tmp_path):
  from refgrad_opencl.standalone import opencl_reproducer
  impl = Device["OPENCL"]
  cases = standalone_cases("OPENCL", program, EDGES, opts=work_groups)
  assert any(u.op is Ops.BARRIER for c in cases for u in c.program.uops) and any(c.abs_bounds.any() for c in cases)
  for n, case in enumerate(cases):
    reproduces(lambda c: opencl_reproducer(c, impl), case, tmp_path / f"kernel{n}")
