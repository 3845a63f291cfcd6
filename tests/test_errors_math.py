"""Bad input to elementwise math, bitwise ops, casts, reductions, matmul and einsum: the exception class torch raises
for the same mistake (bitwise ops on floats and malformed einsum formulas: RuntimeError, which our TypeError and
ValueError also are), and a message that names the offending dtypes, shapes, dims or values."""
import numpy as np
import pytest
import torch
from helpers import f23, raises_like, tf23

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def i23():
  return Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))


def ti23():
  return torch.arange(6, dtype=torch.int32).reshape(2, 3)


# name: (our call, the same mistake in torch or None, expected exception class (or classes), message fragments)
ERRORS = {
  # elementwise
  "sub_bool": (lambda: Tensor([True]) - Tensor([False]), None, TypeError, ["bool"]),
  "clamp_no_bounds": (lambda: f23().clamp(), None, RuntimeError, ["min_", "max_"]),
  "lerp_ints": (lambda: i23().lerp(i23(), 0.5), None, TypeError, ["int32"]),
  "inplace_broadcast_grows": (lambda: Tensor.ones(3).__iadd__(Tensor.ones(2, 3)), None, RuntimeError,
                              ["(3,)", "(2, 3)"]),
  "inplace_float_into_int": (lambda: i23().__iadd__(0.5), None, RuntimeError, ["float32", "int32"]),
  "isclose_broadcast": (lambda: f23().isclose(Tensor.ones(4)), None, ValueError, ["(2, 3)", "(4,)"]),
  # bitwise ops and shifts
  "and floats": (lambda: f23() & f23(), lambda: tf23() & tf23(), TypeError, ["float32"]),
  "or int and float": (lambda: i23() | f23(), lambda: ti23() | tf23(), TypeError, ["float32"]),
  "xor float scalar": (lambda: i23() ^ 1.5, lambda: ti23() ^ 1.5, TypeError, ["float32"]),
  "bitwise_and method": (lambda: f23().bitwise_and(1), lambda: tf23().bitwise_and(1), TypeError, ["float32"]),
  "bitwise_not float": (lambda: f23().bitwise_not(), lambda: tf23().bitwise_not(), TypeError, ["float32"]),
  "invert float": (lambda: ~f23(), lambda: ~tf23(), TypeError, ["float32"]),
  "lshift float": (lambda: f23() << 1, lambda: tf23() << 1, TypeError, ["float32"]),
  "rshift float": (lambda: f23() >> 1, lambda: tf23() >> 1, TypeError, ["float32"]),
  "shift by float": (lambda: i23() << 1.5, lambda: ti23() << 1.5, TypeError, ["1.5"]),
  "shift by float tensor": (lambda: i23() >> f23(), lambda: ti23() >> tf23(), TypeError, ["float32"]),
  "shift_bool": (lambda: Tensor([True]) >> 1, None, TypeError, ["bool"]),
  "rshift bools": (lambda: Tensor([True]) >> Tensor([True]), lambda: torch.tensor([True]) >> torch.tensor([True]),
                   TypeError, ["bool"]),
  # casts
  "bitcast_itemsize": (lambda: f23().bitcast(dtypes.float64), lambda: tf23().view(torch.float64), RuntimeError,
                       ["(2, 3)", "float32", "float64"]),
  "bitcast_0d_itemsize": (lambda: Tensor(1.0).bitcast(dtypes.int8), lambda: torch.tensor(1.0).view(torch.int8),
                          RuntimeError, ["()", "0-d"]),
  "bitcast_bool": (lambda: Tensor([1, 0], dtype=dtypes.uint8).bitcast(dtypes.bool), None, TypeError,
                   ["uint8", "bool"]),  # torch allows it; a bool byte other than 0 or 1 has no meaning here
  "cast_dtype_name": (lambda: f23().cast("f32"), None, TypeError, ["'f32'", "float32"]),  # torch's type
  # reductions and scans (every dim op's out-of-range dim: test_errors_shapes.py)
  "argmax_bad_dim": (lambda: f23().argmax(5), lambda: tf23().argmax(5), IndexError, ["5"]),
  "argmax_empty_dim": (lambda: Tensor.zeros(2, 0).argmax(1), lambda: torch.zeros(2, 0).argmax(1), IndexError,
                       ["argmax", "(2, 0)"]),
  "argmin_empty_dim": (lambda: Tensor.zeros(0, 2).argmin(0), lambda: torch.zeros(0, 2).argmin(0), IndexError,
                       ["argmin", "(0, 2)"]),
  "argmin_empty_flat": (lambda: Tensor.zeros(2, 0).argmin(), lambda: torch.zeros(2, 0).argmin(), IndexError,
                        ["argmin", "(2, 0)"]),
  "sum_repeated_dim": (lambda: f23().sum((1, -1)), lambda: tf23().sum((1, -1)), RuntimeError, ["1"]),
  "any_repeated_dim": (lambda: f23().any((0, -2)), None, RuntimeError, ["(0, -2)"]),
  "std_bad_negative_dim": (lambda: f23().std(-3), None, IndexError, ["-3"]),
  "logsumexp_bad_dim": (lambda: f23().logsumexp(5), None, IndexError, ["5"]),
  "softmax_bad_dim": (lambda: f23().softmax(3), None, IndexError, ["3"]),
  "cummax_bad_dim_type": (lambda: f23().cummax(1.0), None, TypeError, ["float"]),
  "triu_1d": (lambda: Tensor.ones(3).triu(), None, RuntimeError, ["(3,)", "2 dimensions"]),
  "tril_bad_diagonal": (lambda: f23().tril(0.5), None, TypeError, ["float"]),
  "sum_acc_dtype_name": (lambda: f23().sum(acc_dtype=""), None, AttributeError, ["''"]),  # tinygrad's type
  "prod_acc_dtype_name": (lambda: f23().prod(acc_dtype="floot"), None, AttributeError, ["'floot'"]),
  "div_rounding_mode_typo": (lambda: f23().div(2, rounding_mode="typo"), lambda: tf23().div(2, rounding_mode="typo"),
                             RuntimeError, ["'typo'"]),
  "sum_dtype_name": (lambda: f23().sum(dtype=""), None, AttributeError, ["''"]),
  "sum_dtype_and_acc_dtype": (lambda: f23().sum(dtype=dtypes.float64, acc_dtype=dtypes.float32), None, TypeError,
                              ["dtype", "acc_dtype"]),
  "matmul_dtype_and_acc_dtype": (lambda: f23().matmul(Tensor.ones(3, 1), dtype="half", acc_dtype="half"), None,
                                 TypeError, ["half"]),
  # matmul
  "matmul_mismatch": (lambda: f23() @ Tensor.ones(4, 5), lambda: tf23() @ torch.ones(4, 5), RuntimeError,
                      ["2x3", "4x5"]),
  "matmul_shapes": (lambda: f23() @ f23(), None, RuntimeError, ["2x3", "2x3"]),
  "matmul_mismatch_value_error": (lambda: f23().dot(Tensor.ones(2)), lambda: tf23().matmul(torch.ones(2)), ValueError,
                                  ["2x3", "2"]),
  "matmul_batched_mismatch": (lambda: Tensor.ones(2, 2, 3) @ Tensor.ones(3, 2, 4), lambda: torch.ones(2, 2, 3) @
                              torch.ones(3, 2, 4), RuntimeError, ["3", "2"]),
  "matmul_0d": (lambda: Tensor(2.0) @ f23(), lambda: torch.tensor(2.0) @ tf23(), RuntimeError, ["0D"]),
  "linear_shapes": (lambda: f23().linear(Tensor.ones(2, 4)), None, RuntimeError, ["2x3", "2x4"]),
  # einsum (malformed formulas: the EINSUM table below)
  "einsum_size_mismatch": (lambda: Tensor.einsum("ij,ij->i", f23(), Tensor.ones(2, 4)), None, RuntimeError,
                           ["(2, 3)", "(2, 4)"]),
  "einsum_diagonal_sizes": (lambda: Tensor.einsum("ii->i", f23()), None, RuntimeError, ["'i'", "2", "3"]),
  "einsum_formula_type": (lambda: Tensor.einsum(3, f23()), None, TypeError, ["int"]),
  # tinygrad's tests catch AssertionError for these
  "einsum_too_many_operands": (lambda: Tensor.einsum("ij,jk->ij", f23(), f23().T, f23()), None, AssertionError,
                               ["2 operands", "3"]),
  "einsum_too_few_operands": (lambda: Tensor.einsum("ij,jk->ij", f23()), None, AssertionError, ["2 operands", "1"]),
  "einsum_sizes_across_operands": (lambda: Tensor.einsum("pqrs,tuqvr->pstuv", Tensor.zeros(3, 8, 10, 5),
                                                         Tensor.zeros(11, 5, 13, 16, 8)), None, AssertionError,
                                   ["'q'", "8", "13", "(3, 8, 10, 5)", "(11, 5, 13, 16, 8)"]),
  "einsum_ellipsis_sizes": (lambda: Tensor.einsum("...i,...i->...", Tensor.ones(4, 3), Tensor.ones(5, 3)), None,
                            RuntimeError, ["'...'", "4", "5"]),
}

# malformed einsum formulas given `count` (2, 3) operands: a ValueError, and the RuntimeError torch raises
EINSUM = {
  "too few operands": ("ij,jk->ik", 1, ["2 operands", "1"]),
  "too many operands": ("ij->ij", 2, ["1 operands", "2"]),
  "rank mismatch": ("ijk->i", 1, ["'ijk'", "(2, 3)"]),
  "unknown output": ("ij->iz", 1, ["'z'", "'iz'"]),
  "repeated output": ("ij->ii", 1, ["'i'"]),
  "digit": ("i1->i", 1, ["'i1'"]),
  "two ellipses": ("...i...->i", 1, ["'...i...'"]),
  "stray dots": ("..ij->i", 1, ["'..ij'"]),
  "two arrows": ("ij->i->j", 1, ["'i->j'"]),
  "bad character": ("i-j->i", 1, ["'i-j'"]),
}
ERRORS.update({f"einsum {name}": (lambda formula=formula, count=count: Tensor.einsum(formula, *[f23()] * count),
                                  lambda formula=formula, count=count: torch.einsum(formula, *[tf23()] * count),
                                  ValueError, fragments)
               for name, (formula, count, fragments) in EINSUM.items()})


@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  raises_like(*ERRORS[name])
