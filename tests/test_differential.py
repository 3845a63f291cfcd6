"""Every device against the PYTHON reference, on random kernels (primitive ops straight on UOps, full of edge
values) and random tensor programs. Exact ops must match bit for bit, transcendentals within SPEC.md's ULP
bound, and lanes the reference marks undefined are skipped."""
import pytest
from hypothesis import HealthCheck, given, reject, settings

from refgrad.device import UnsupportedDTypeError
from refgrad.interp.alu import TRANSCENDENTAL, ULP_BOUNDS
from refgrad.testing.compare import compare
from refgrad.testing.strategies import alu_kernels, tensor_programs
from refgrad.uop import Ops

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def reference(build):
  out = build("PYTHON").realize()
  node = out.uop.src[0] if out.uop.op is Ops.RESHAPE else out.uop
  return out.numpy(), node.arg.undefined


def on_device(build, device):
  """The device's result; examples with a dtype the device does not claim are not examples for it."""
  try:
    return build(device).numpy()
  except UnsupportedDTypeError:
    reject()


def root_ulp_bound(kernel) -> int:
  op = Ops.__members__.get(kernel.root.op)
  return ULP_BOUNDS[op][kernel.root.dtype] if op in TRANSCENDENTAL else 0


@pytest.fixture
def compiled_device(refgrad_device):
  if refgrad_device == "PYTHON":
    pytest.skip("PYTHON is the reference: it is compared with itself in test_interpreters.py")
  return refgrad_device


@SETTINGS
@given(kernel=alu_kernels())
def test_random_kernels_match_the_reference(compiled_device, kernel):
  expected, undefined = reference(kernel.build)
  actual = on_device(kernel.build, compiled_device)
  result = compare(actual, expected, undefined, ulp_bound=root_ulp_bound(kernel))
  assert result.ok, f"{kernel!r}\nfirst bad lanes {result.mismatches}: device {actual.reshape(-1)[result.mismatches]}" \
                    f" reference {expected.reshape(-1)[result.mismatches]}"


@SETTINGS
@given(program=tensor_programs(transcendentals=False))
def test_random_programs_match_the_reference(compiled_device, program):
  """Programs of exact ops only (transcendental errors grow through later ops; random kernels bound them)."""
  expected, undefined = reference(program.build)
  actual = on_device(program.build, compiled_device)
  result = compare(actual, expected, undefined)
  assert result.ok, f"{program!r}\nfirst bad lanes {result.mismatches}"
