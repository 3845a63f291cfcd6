"""Bad input: the exception type (the same as torch's where torch has the op), and a message that names the shapes,
dims or values involved. Also: a failed realize leaves every tensor usable."""
import numpy as np
import pytest
import torch
from helpers import check

import refgrad.device
from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def t23():
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def tt23():
  return torch.arange(6, dtype=torch.float32).reshape(2, 3)


# name: (our call, the same mistake in torch (numpy for indexing torch allows) or None, expected exception, fragments
# the message must contain)
ERRORS = {
  "broadcast": (lambda: t23() + Tensor.ones(4, 3), lambda: tt23() + torch.ones(4, 3), ValueError, ["(2, 3)", "(4, 3)"]),
  "broadcast_runtime": (lambda: t23() * Tensor.ones(2, 1, 2), lambda: tt23() * torch.ones(2, 1, 2), RuntimeError,
                        ["(2, 3)", "(2, 1, 2)"]),
  "where_broadcast": (lambda: Tensor([True, False]).where(t23(), 0), lambda: torch.where(torch.tensor([True, False]),
                      tt23(), 0), RuntimeError, ["(2,)", "(2, 3)"]),
  "reshape": (lambda: t23().reshape(4, 2), lambda: tt23().reshape(4, 2), RuntimeError, ["(4, 2)", "6"]),
  "reshape_value_error": (lambda: t23().reshape(5, -1), lambda: tt23().reshape(5, -1), ValueError, ["(5, -1)", "6"]),
  "reshape_two_inferred": (lambda: t23().reshape(-1, -1), lambda: tt23().reshape(-1, -1), RuntimeError, ["-1"]),
  "view": (lambda: t23().view(7), lambda: tt23().view(7), RuntimeError, ["(7,)", "6"]),
  "expand": (lambda: t23().expand(4, 3), lambda: tt23().expand(4, 3), RuntimeError, ["4", "(2, 3)"]),
  "expand_fewer_dims": (lambda: t23().expand(3), lambda: tt23().expand(3), RuntimeError, ["(2, 3)"]),
  "permute_not_permutation": (lambda: t23().permute(0, 0), lambda: tt23().permute(0, 0), RuntimeError, ["(0, 0)"]),
  "permute_too_few": (lambda: t23().permute(1,), lambda: tt23().permute(1,), RuntimeError, ["(1,)"]),
  "flip_repeated": (lambda: t23().flip(0, 0), lambda: tt23().flip(0, 0), RuntimeError, ["0"]),
  "shrink_out_of_bounds": (lambda: t23().shrink(((0, 3), None)), None, ValueError, ["(0, 3)", "2"]),
  "pad_too_long": (lambda: t23().pad((1, 1, 1, 1, 1, 1)), lambda: torch.nn.functional.pad(tt23(), (1,) * 6),
                   RuntimeError, ["(1, 1, 1, 1, 1, 1)"]),
  "pad_negative_size": (lambda: t23().pad((-2, -2)), lambda: torch.nn.functional.pad(tt23(), (-2, -2)), RuntimeError,
                        ["(-2, -2)", "(2, 3)"]),
  "sum_bad_dim": (lambda: t23().sum(2), lambda: tt23().sum(2), IndexError, ["2"]),
  "max_bad_negative_dim": (lambda: t23().max(-3), lambda: tt23().amax(-3), IndexError, ["-3"]),
  "argmax_bad_dim": (lambda: t23().argmax(5), lambda: tt23().argmax(5), IndexError, ["5"]),
  "transpose_bad_dim": (lambda: t23().transpose(0, 2), lambda: tt23().transpose(0, 2), IndexError, ["2"]),
  "permute_bad_dim": (lambda: t23().permute(0, 2), lambda: tt23().permute(0, 2), IndexError, ["2"]),
  "unsqueeze_bad_dim": (lambda: t23().unsqueeze(4), lambda: tt23().unsqueeze(4), IndexError, ["4"]),
  "squeeze_bad_dim": (lambda: t23().squeeze(-3), lambda: tt23().squeeze(-3), IndexError, ["-3"]),
  "flatten_bad_dim": (lambda: t23().flatten(2), lambda: tt23().flatten(2), IndexError, ["2"]),
  "flip_bad_dim": (lambda: t23().flip(2), lambda: tt23().flip(2), IndexError, ["2"]),
  "sum_repeated_dim": (lambda: t23().sum((1, -1)), lambda: tt23().sum((1, -1)), RuntimeError, ["1"]),
  "bool": (lambda: bool(t23()), None, TypeError, []),
  "bool_one_element": (lambda: bool(Tensor([1.0])), None, TypeError, []),
  "if_tensor": (lambda: 1 if Tensor(1) else 0, None, TypeError, []),
  "len_0d": (lambda: len(Tensor(3.0)), lambda: len(torch.tensor(3.0)), TypeError, ["0-d"]),
  "ragged": (lambda: Tensor([[1, 2], [3]]), lambda: torch.tensor([[1, 2], [3]]), ValueError, []),
  "ragged_depth": (lambda: Tensor([1, [2]]), None, ValueError, []),
  "unknown_dtype": (lambda: Tensor([1, 2], dtype="float33"), None, TypeError, ["float33"]),
  "unknown_dtype_zeros": (lambda: Tensor.zeros(2, dtype="int3"), None, TypeError, ["int3"]),
  "unknown_dtype_cast": (lambda: t23().cast("complex64"), None, TypeError, ["complex64"]),
  "numpy_unsupported_dtype": (lambda: Tensor(np.zeros(2, np.complex64)), None, TypeError, ["complex64"]),
  "index_out_of_range": (lambda: t23()[2], lambda: tt23()[2], IndexError, ["2", "size 2"]),
  "index_negative_out_of_range": (lambda: t23()[0, -4], lambda: tt23()[0, -4], IndexError, ["-4", "size 3"]),
  "too_many_indices": (lambda: t23()[0, 0, 0], lambda: tt23()[0, 0, 0], IndexError, ["3"]),
  "two_ellipses": (lambda: t23()[..., 0, ...], lambda: np.zeros((2, 3))[..., 0, ...], IndexError, ["ellipsis"]),
  "index_0d": (lambda: Tensor(1.0)[0], lambda: torch.tensor(1.0)[0], IndexError, []),
  "slice_step_zero": (lambda: t23()[::0], lambda: tt23()[::0], ValueError, ["step"]),
  "item_many": (lambda: t23().item(), lambda: tt23().item(), ValueError, ["(2, 3)"]),
  "item_empty": (lambda: Tensor.zeros(0).item(), lambda: torch.zeros(0).item(), RuntimeError, ["(0,)"]),
  "matmul_mismatch": (lambda: t23() @ Tensor.ones(4, 5), lambda: tt23() @ torch.ones(4, 5), RuntimeError,
                      ["2x3", "4x5"]),
  "matmul_mismatch_value_error": (lambda: t23().dot(Tensor.ones(2)), lambda: tt23().matmul(torch.ones(2)), ValueError,
                                  ["2x3", "2"]),
  "matmul_batched_mismatch": (lambda: Tensor.ones(2, 2, 3) @ Tensor.ones(3, 2, 4), lambda: torch.ones(2, 2, 3) @
                              torch.ones(3, 2, 4), RuntimeError, ["3", "2"]),
  "matmul_0d": (lambda: Tensor(2.0) @ t23(), lambda: torch.tensor(2.0) @ tt23(), RuntimeError, ["0D"]),
  "argmax_empty_dim": (lambda: Tensor.zeros(2, 0).argmax(1), None, RuntimeError, ["(2, 0)"]),  # torch: IndexError
  "sub_bool": (lambda: Tensor([True]) - Tensor([False]), None, TypeError, ["bool"]),
  "bitwise_float": (lambda: t23() & t23(), None, TypeError, ["float32"]),
  "shift_float": (lambda: t23() << 1, None, TypeError, ["float32"]),
  "bitcast_itemsize": (lambda: t23().bitcast(dtypes.float64), lambda: tt23().view(torch.float64), RuntimeError,
                       ["(2, 3)", "float32", "float64"]),
  "bitcast_0d_itemsize": (lambda: Tensor(1.0).bitcast(dtypes.int8), lambda: torch.tensor(1.0).view(torch.int8),
                          RuntimeError, ["()", "0-d"]),
  "bitcast_bool": (lambda: Tensor([1, 0], dtype=dtypes.uint8).bitcast(dtypes.bool), None, TypeError,
                   ["uint8", "bool"]),  # torch allows it; a bool byte other than 0 or 1 has no meaning here
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  ours, theirs, exc, fragments = ERRORS[name]
  with pytest.raises(exc) as info:
    ours().realize()
  for fragment in fragments:
    assert fragment in str(info.value), f"{fragment!r} not in message {str(info.value)!r}"
  if theirs is not None:  # torch rejects the same mistake, and catching what torch raises also catches ours
    with pytest.raises(Exception) as their_info:
      theirs()
    base = next(e for e in (IndexError, TypeError, ValueError, RuntimeError) if isinstance(their_info.value, e))
    assert isinstance(info.value, base), f"torch raises {base.__name__}, we raise {type(info.value).__name__}"


def test_shape_error_is_both_value_and_runtime_error():
  for bad in (lambda: t23() + Tensor.ones(3, 2), lambda: t23().reshape(7), lambda: t23() @ t23()):
    with pytest.raises(ValueError):
      bad()
    with pytest.raises(RuntimeError):
      bad()


def test_errors_leave_tensor_usable():
  t = t23()
  for bad in (lambda: t.reshape(5), lambda: t[9], lambda: t.sum(3), lambda: t + Tensor.ones(5)):
    with pytest.raises((ValueError, IndexError, RuntimeError)):
      bad()
  check(t * 2, tt23() * 2, dtypes.float32)


def test_failed_realize_leaves_other_tensors_usable(monkeypatch):
  a = t23()
  x = a - a.max()  # two kernels: the max, then the subtraction
  y = a * 2 + 1
  assert len(x.schedule()) == 2
  compiled = []
  real_compile = refgrad.device.compile_ast

  def fails_on_second_kernel(ast, *caps):
    compiled.append(ast)
    if len(compiled) == 2:
      raise RuntimeError("injected compile failure")
    return real_compile(ast, *caps)
  monkeypatch.setattr(refgrad.device, "compile_ast", fails_on_second_kernel)
  with pytest.raises(RuntimeError, match="injected"):
    x.realize()
  monkeypatch.undo()
  assert len(x.schedule()) == 2  # x was not replaced by a half-written buffer
  check(x, tt23() - tt23().max(), dtypes.float32)
  check(y, tt23() * 2 + 1, dtypes.float32)
  check(a, tt23(), dtypes.float32)
  check(x + y, tt23() - tt23().max() + tt23() * 2 + 1, dtypes.float32)
