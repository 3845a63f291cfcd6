"""Bad input where a tensor is made, filled, drawn at random or read back (data, dtypes, linspace, kaiming, assign,
from_blob, rand/randint/multinomial, bool/len/item): the exception class torch raises for the same mistake, and a
message that names the offending shapes, dtypes or values."""
import numpy as np
import pytest
import torch
from helpers import f23, raises_like, tf23

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


# name: (our call, the same mistake in torch or None, expected exception class (or classes), message fragments)
ERRORS = {
  # data and dtypes
  "ragged": (lambda: Tensor([[1, 2], [3]]), lambda: torch.tensor([[1, 2], [3]]), ValueError, []),
  "ragged_depth": (lambda: Tensor([1, [2]]), None, ValueError, []),
  "unknown_dtype": (lambda: Tensor([1, 2], dtype="float33"), None, TypeError, ["float33"]),
  "unknown_dtype_zeros": (lambda: Tensor.zeros(2, dtype="int3"), None, TypeError, ["int3"]),
  "unknown_dtype_cast": (lambda: f23().cast("complex64"), None, TypeError, ["complex64"]),
  "tuple_as_dtype": (lambda: Tensor([3], dtype=(dtypes.int,)), None, (TypeError, AttributeError), ["int32"]),
  "numpy_unsupported_dtype": (lambda: Tensor(np.zeros(2, np.complex64)), None, TypeError, ["complex64"]),
  "from_blob_null": (lambda: Tensor.from_blob(0, (2,)), None, TypeError, ["0"]),
  "from_blob_bytes_overflow": (lambda: Tensor.from_blob(1, (2**40, 2**40)), lambda: torch.empty(2**40, 2**40,
                               device="meta"), RuntimeError, ["(1099511627776, 1099511627776)", "float32"]),
  "from_blob_size_overflow": (lambda: Tensor.from_blob(1, (0, 2**63)), None, (RuntimeError, ValueError),
                              ["(0, 9223372036854775808)"]),
  # creation functions: torch's NotImplementedError and tinygrad's ValueError
  "linspace_bool": (lambda: Tensor.linspace(5, 10, 3, dtype="bool"), lambda: torch.linspace(5, 10, 3, dtype=torch.bool),
                    (NotImplementedError, ValueError), ["bool"]),
  "linspace_negative_steps": (lambda: Tensor.linspace(0, 1, -2), lambda: torch.linspace(0, 1, -2), RuntimeError,
                              ["-2"]),
  "linspace_float_steps": (lambda: Tensor.linspace(0, 1, 2.5), lambda: torch.linspace(0, 1, 2.5), TypeError,
                           ["float"]),
  "kaiming_negative_size": (lambda: Tensor.kaiming_uniform(-3, 3), lambda: torch.empty(-3, 3), RuntimeError,
                            ["(-3, 3)"]),
  "kaiming_negative_size_tinygrad": (lambda: Tensor.kaiming_normal(3, -3), None, ValueError, ["(3, -3)"]),
  "kaiming_nested_sizes": (lambda: Tensor.kaiming_normal((-3, 3), 3), lambda: torch.empty((-3, 3), 3), TypeError,
                           ["((-3, 3), 3)"]),
  "kaiming_nested_sizes_tinygrad": (lambda: Tensor.kaiming_uniform((-3, -3), 3), None, ValueError, ["((-3, -3), 3)"]),
  # assigning a whole tensor
  "assign_shape": (lambda: f23().assign(Tensor.ones(3, 2)), lambda: tf23().set_(torch.ones(3, 2)).add_(
                   torch.ones(2, 3)), RuntimeError, ["(3, 2)", "(2, 3)"]),
  "assign_dtype": (lambda: f23().assign(Tensor.ones(2, 3, dtype=dtypes.int32)), None, TypeError, ["int32", "float32"]),
  "replace_shape": (lambda: f23().replace(Tensor.ones(6)), None, ValueError, ["(6,)", "(2, 3)"]),
  # random
  "manual_seed_type": (lambda: Tensor.manual_seed(1.5), None, TypeError, ["float"]),
  "rand_int_dtype": (lambda: Tensor.rand(3, dtype=dtypes.int32), None, TypeError, ["int32"]),
  "rand_negative_shape": (lambda: Tensor.rand(2, -1), None, ValueError, ["(2, -1)"]),
  "randint_bounds": (lambda: Tensor.randint(3, low=5, high=5), None, ValueError, ["low=5", "high=5"]),
  "randint_float_bound": (lambda: Tensor.randint(3, high=2.5), None, TypeError, ["2.5"]),
  "randint_float_dtype": (lambda: Tensor.randint(3, dtype=dtypes.float32), None, TypeError, ["float32"]),
  "multinomial_rank": (lambda: Tensor.ones(2, 2, 2).multinomial(), None, RuntimeError, ["(2, 2, 2)"]),
  "multinomial_too_many": (lambda: Tensor.ones(3).multinomial(4), None, RuntimeError, ["4", "3"]),
  "multinomial_num_samples": (lambda: Tensor.ones(3).multinomial(0, replacement=True), None, ValueError, ["0"]),
  "randint_outside_dtype": (lambda: Tensor.randint(3, low=0, high=200, dtype=dtypes.int8),
                            lambda: torch.randint(0, 200, (3,), dtype=torch.int8), RuntimeError, ["200", "int8"]),
  "multinomial_negative": (lambda: Tensor([1.0, -1.0]).multinomial(1), lambda: torch.tensor([1.0, -1.0]).multinomial(1),
                           RuntimeError, ["< 0", "(2,)"]),
  "multinomial_all_zero": (lambda: Tensor.zeros(2, 3).multinomial(1, replacement=True),
                           lambda: torch.zeros(2, 3).multinomial(1, True), RuntimeError, ["sum", "(2, 3)"]),
  "multinomial_no_category": (lambda: Tensor.ones(2, 0).multinomial(1), lambda: torch.ones(2, 0).multinomial(1),
                              RuntimeError, ["(2, 0)"]),
  "glorot_0d": (lambda: Tensor.glorot_uniform(), lambda: torch.nn.init.xavier_uniform_(torch.empty(())),
                (ValueError, IndexError), ["0-d"]),
  # reading a tensor back into Python
  "bool": (lambda: bool(f23()), None, TypeError, []),
  "bool_one_element": (lambda: bool(Tensor([1.0])), None, TypeError, []),
  "if_tensor": (lambda: 1 if Tensor(1) else 0, None, TypeError, []),
  "len_0d": (lambda: len(Tensor(3.0)), lambda: len(torch.tensor(3.0)), TypeError, ["0-d"]),
  "item_many": (lambda: f23().item(), lambda: tf23().item(), ValueError, ["(2, 3)"]),
  "item_empty": (lambda: Tensor.zeros(0).item(), lambda: torch.zeros(0).item(), RuntimeError, ["(0,)"]),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  raises_like(*ERRORS[name])
