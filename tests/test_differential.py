"""Every device against the PYTHON reference, on random kernels (primitive ops straight on UOps, full of edge
values, with constants, long rows and reductions) and random tensor programs, through check_against_reference:
exact ops must match bit for bit, transcendentals within SPEC.md's ULP bound, reductions within its order-free
bound, and lanes the reference marks undefined are skipped."""
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refgrad.testing.oracle.reference import check_against_reference
from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS, alu_kernels, claimed_dtypes, tensor_programs

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)


def agrees(data, strategy, device):
  """Draws a program of `strategy` over the dtypes the device claims (so no draw is rejected) and raises
  ReferenceMismatch (an AssertionError) explaining any difference from the reference."""
  claimed = claimed_dtypes(device)
  program = data.draw(strategy(dtype_choices=claimed, allowed=claimed), label="program")
  check_against_reference(program.run, *program.inputs, device=device)


@pytest.fixture
def compiled_device(refgrad_device):
  if refgrad_device == "PYTHON":
    pytest.skip("PYTHON is the reference: it is compared with itself in test_interpreters.py")
  return refgrad_device


@SETTINGS
@given(data=st.data())
def test_random_kernels_match_the_reference(compiled_device, data):
  agrees(data, alu_kernels, compiled_device)


@SETTINGS
@given(data=st.data())
def test_random_programs_match_the_reference(compiled_device, data):
  agrees(data, functools.partial(tensor_programs, transcendentals=False), compiled_device)
