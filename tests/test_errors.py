"""What holds for every error (the tables of bad input are by subject: test_errors_creation.py, _shapes, _indexing,
_math and _nn): a shape error is both a ValueError and a RuntimeError, and an error, or a failed realize, leaves every
tensor usable and unchanged."""
import pytest
import test_errors_creation
import test_errors_indexing
import test_errors_math
import test_errors_nn
import test_errors_shapes
from helpers import check, f23, tf23

import refgrad.device
from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def test_shape_error_is_both_value_and_runtime_error():
  for bad in (lambda: f23() + Tensor.ones(3, 2), lambda: f23().reshape(7), lambda: f23() @ f23()):
    with pytest.raises(ValueError):
      bad()
    with pytest.raises(RuntimeError):
      bad()


def test_errors_leave_tensor_usable():
  t = f23()
  for bad in (lambda: t.reshape(5), lambda: t[9], lambda: t.sum(3), lambda: t + Tensor.ones(5)):
    with pytest.raises((ValueError, IndexError, RuntimeError)):
      bad()
  check(t * 2, tf23() * 2, dtypes.float32)


def test_errors_leave_tensors_unchanged():
  t = test_errors_indexing.settable()
  set_item = test_errors_indexing.set_item
  for bad in (lambda: set_item(t, (0, 5), 1.0), lambda: set_item(t, 0, Tensor.ones(4)), lambda: t.assign(t.T)):
    with pytest.raises((IndexError, RuntimeError)):
      bad()
  assert t.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_failed_realize_leaves_other_tensors_usable(monkeypatch):
  a = f23()
  x = a - a.max()  # two kernels: the max, then the subtraction
  y = a * 2 + 1
  assert len(x.schedule()) == 2
  kernels = []  # distinct ASTs in the order first compiled (a device may compile ahead of running, then again)
  real_compile = refgrad.device.compile_ast

  def fails_on_second_kernel(ast, *caps):
    kernels.extend([ast] if ast not in kernels else [])
    if kernels.index(ast) == 1:
      raise RuntimeError("injected compile failure")
    return real_compile(ast, *caps)
  monkeypatch.setattr(refgrad.device, "compile_ast", fails_on_second_kernel)
  with pytest.raises(RuntimeError, match="injected"):
    x.realize()
  monkeypatch.undo()
  assert len(x.schedule()) == 2  # x was not replaced by a half-written buffer
  check(x, tf23() - tf23().max(), dtypes.float32)
  check(y, tf23() * 2 + 1, dtypes.float32)
  check(a, tf23(), dtypes.float32)
  check(x + y, tf23() - tf23().max() + tf23() * 2 + 1, dtypes.float32)


@pytest.mark.parametrize("subject", [test_errors_creation, test_errors_shapes, test_errors_indexing, test_errors_math,
                                     test_errors_nn], ids=lambda m: m.__name__)
def test_every_subject_has_its_cases(subject):
  assert len(subject.ERRORS) >= 20
