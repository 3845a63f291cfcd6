"""Every device against the PYTHON reference, on random kernels (primitive ops straight on UOps, full of edge
values, with constants, long rows and reductions) and random tensor programs, through check_against_reference:
exact ops must match bit for bit, transcendentals within SPEC.md's ULP bound, reductions within its order-free
bound, and lanes the reference marks undefined are skipped."""
import pytest
from hypothesis import HealthCheck, given, reject, settings

from refgrad.codegen.contract import UnsupportedDTypeError
from refgrad.testing.reference import check_against_reference
from refgrad.testing.strategies import alu_kernels, tensor_programs

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def agrees(program, device):
  """Raises ReferenceMismatch (an AssertionError) explaining any difference; examples with a dtype the device does
  not claim are not examples for it."""
  try:
    check_against_reference(program.run, *program.inputs, device=device)
  except UnsupportedDTypeError:
    reject()


@pytest.fixture
def compiled_device(refgrad_device):
  if refgrad_device == "PYTHON":
    pytest.skip("PYTHON is the reference: it is compared with itself in test_interpreters.py")
  return refgrad_device


@SETTINGS
@given(kernel=alu_kernels())
def test_random_kernels_match_the_reference(compiled_device, kernel):
  agrees(kernel, compiled_device)


@SETTINGS
@given(program=tensor_programs(transcendentals=False))
def test_random_programs_match_the_reference(compiled_device, program):
  agrees(program, compiled_device)
