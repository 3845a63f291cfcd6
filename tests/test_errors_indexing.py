"""Bad indices and index arguments (getitem, setitem, gather, scatter, masked_fill, one_hot): the exception class
torch (numpy, for the indexing torch allows) raises for the same mistake, and a message that names the offending
index, shapes or values."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual torch alias
from helpers import f23, raises_like, tf23

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def settable():
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()


LEAF = Tensor([1.0], requires_grad=True)  # alive: a value computed from it requires grad


def set_item(t, index, value):
  t[index] = value
  return t


def iadd(t, value):
  t += value
  return t


I0 = Tensor([[0]])
TI0 = torch.tensor([[0]])

# name: (our call, the same mistake in torch or None, expected exception class (or classes), message fragments)
ERRORS = {
  "index_out_of_range": (lambda: f23()[2], lambda: tf23()[2], IndexError, ["2", "size 2"]),
  "index_negative_out_of_range": (lambda: f23()[0, -4], lambda: tf23()[0, -4], IndexError, ["-4", "size 3"]),
  "too_many_indices": (lambda: f23()[0, 0, 0], lambda: tf23()[0, 0, 0], IndexError, ["3"]),
  "two_ellipses": (lambda: f23()[..., 0, ...], lambda: np.zeros((2, 3))[..., 0, ...], IndexError, ["ellipsis"]),
  "index_0d": (lambda: Tensor(1.0)[0], lambda: torch.tensor(1.0)[0], IndexError, []),
  "slice_step_zero": (lambda: f23()[::0], lambda: tf23()[::0], ValueError, ["step"]),
  "index_float": (lambda: f23()[1.5], lambda: tf23()[1.5], IndexError, ["1.5"]),
  "index_str": (lambda: f23()["a"], lambda: tf23()["a"], TypeError, ["'a'", "str"]),
  "index_float_tensor": (lambda: f23()[Tensor([0.0])], lambda: tf23()[torch.tensor([0.0])], IndexError, ["float32"]),
  "index_list_out_of_range": (lambda: f23()[[0, 2]], lambda: tf23()[[0, 2]], IndexError, ["2", "size 2"]),
  "index_list_negative_out_of_range": (lambda: f23()[:, [-4]], lambda: tf23()[:, [-4]], IndexError, ["-4", "size 3"]),
  "index_broadcast": (lambda: f23()[[0, 1], [0, 1, 2]], lambda: tf23()[[0, 1], [0, 1, 2]], IndexError,
                      ["(2,)", "(3,)"]),
  "index_mask_shape": (lambda: f23()[Tensor([True, False, True])], lambda: tf23()[torch.tensor([True, False, True])],
                       IndexError, ["(3,)", "(2,)"]),
  "index_too_many_with_list": (lambda: f23()[0, [0], 0], lambda: tf23()[0, [0], 0], IndexError, ["3"]),
  "slice_float": (lambda: f23()[0:1.5], lambda: tf23()[0:1.5], TypeError, ["1.5"]),
  "setitem_shape": (lambda: set_item(settable(), 0, Tensor([1.0, 2.0])), lambda: set_item(tf23(), 0,
                    torch.tensor([1.0, 2.0])), RuntimeError, ["(2,)", "(3,)"]),
  "setitem_expanded": (lambda: set_item(Tensor([[1.0, 2.0, 3.0]]).expand(2, 3), (slice(None), 0), 5.0),
                       lambda: set_item(torch.tensor([[1.0, 2.0, 3.0]]).expand(2, 3), (slice(None), 0), 5.0),
                       RuntimeError, ["expanded", "(2, 3)", "(1, 3)"]),
  "iadd_expanded": (lambda: iadd(Tensor([[1.0], [2.0]]).expand(2, 3), 1.0),
                    lambda: iadd(torch.tensor([[1.0], [2.0]]).expand(2, 3), 1.0), RuntimeError, ["(2, 3)", "(2, 1)"]),
  "setitem_requires_grad": (lambda: set_item(Tensor([1.0, 2.0], requires_grad=True), 0, 5.0), None,
                            NotImplementedError, ["requires grad", "(2,)"]),
  "setitem_value_requires_grad": (lambda: set_item(settable(), 0, LEAF * 2), None,
                                  NotImplementedError, ["value", "requires grad", "(1,)"]),
  "setitem_value_type": (lambda: set_item(settable(), 0, "x"), lambda: set_item(tf23(), 0, "x"), TypeError, ["str"]),
  "setitem_out_of_range": (lambda: set_item(settable(), 2, 1.0), lambda: set_item(tf23(), 2, 1.0), IndexError,
                           ["2", "size 2"]),
  "gather_bad_dim": (lambda: f23().gather(2, I0), lambda: tf23().gather(2, TI0), IndexError, ["2"]),
  "gather_float_index": (lambda: f23().gather(0, Tensor([[0.0]])), lambda: tf23().gather(0, torch.tensor([[0.0]])),
                         RuntimeError, ["float32"]),
  "gather_ndim": (lambda: f23().gather(0, Tensor([0])), lambda: tf23().gather(0, torch.tensor([0])), RuntimeError,
                  ["(1,)", "(2, 3)"]),
  "gather_index_too_big": (lambda: f23().gather(0, Tensor.zeros(1, 4, dtype=dtypes.int32)), lambda: tf23().gather(
                           0, torch.zeros(1, 4, dtype=torch.long)), RuntimeError, ["(1, 4)", "(2, 3)", "0"]),
  "gather_index_not_tensor": (lambda: f23().gather(0, [[0]]), lambda: tf23().gather(0, [[0]]), TypeError, ["list"]),
  "scatter_reduce_mode": (lambda: f23().scatter(0, I0, 1.0, reduce="max"), None, ValueError, ["'max'"]),
  "scatter_reduce_bad_reduce": (lambda: f23().scatter_reduce(0, I0, f23(), "max"), None, ValueError, ["'max'"]),
  "scatter_src_too_small": (lambda: f23().scatter(0, Tensor.zeros(2, 3, dtype=dtypes.int32), Tensor.ones(1, 3)),
                            lambda: tf23().scatter(0, torch.zeros(2, 3, dtype=torch.long), torch.ones(1, 3)),
                            RuntimeError, ["(2, 3)", "(1, 3)"]),
  "scatter_bad_dim": (lambda: f23().scatter(-3, I0, 1.0), lambda: tf23().scatter(-3, TI0, 1.0), IndexError, ["-3"]),
  "scatter_float_index": (lambda: f23().scatter(0, Tensor([[0.5]]), 1.0), lambda: tf23().scatter(0,
                          torch.tensor([[0.5]]), 1.0), RuntimeError, ["float32"]),
  "scatter_reduce_scalar_src": (lambda: f23().scatter_reduce(0, I0, 1.0, "sum"), lambda: tf23().scatter_reduce(
                                0, TI0, 1.0, "sum"), TypeError, ["float"]),
  "scatter_src_dtype": (lambda: f23().half().scatter(0, Tensor.zeros(2, 3, dtype=dtypes.int32), f23()),
                        lambda: tf23().half().scatter(0, torch.zeros(2, 3, dtype=torch.long), tf23()), RuntimeError,
                        ["float32", "float16"]),
  "scatter_reduce_src_dtype": (lambda: f23().scatter_reduce(0, Tensor.zeros(2, 3, dtype=dtypes.int32), f23().half(),
                               "sum"), lambda: tf23().scatter_reduce(0, torch.zeros(2, 3, dtype=torch.long),
                               tf23().half(), "sum"), TypeError, ["float32", "float16"]),
  "masked_fill_mask_dtype": (lambda: f23().masked_fill(Tensor([1, 0, 1]), 0.0), lambda: tf23().masked_fill(
                             torch.tensor([1, 0, 1]), 0.0), RuntimeError, ["int32"]),
  "masked_fill_shape": (lambda: f23().masked_fill(Tensor.ones(3, 2, dtype=dtypes.bool), 0.0), lambda: tf23().
                        masked_fill(torch.ones(3, 2, dtype=torch.bool), 0.0), RuntimeError, ["(3, 2)", "(2, 3)"]),
  "masked_fill_value_shape": (lambda: f23().masked_fill(Tensor(True), Tensor([1.0])), lambda: tf23().masked_fill(
                              torch.tensor(True), torch.tensor([1.0])), RuntimeError, ["(1,)"]),
  "one_hot_float": (lambda: f23().one_hot(3), lambda: F.one_hot(tf23(), 3), RuntimeError, ["float32"]),
  "one_hot_empty": (lambda: Tensor.zeros(0, dtype=dtypes.int32).one_hot(), lambda: F.one_hot(torch.zeros(
                    0, dtype=torch.long)), RuntimeError, ["(0,)"]),
  "one_hot_num_classes": (lambda: Tensor([1]).one_hot(-3), None, ValueError, ["-3"]),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's deprecation warnings for some of these indices
@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  raises_like(*ERRORS[name])
