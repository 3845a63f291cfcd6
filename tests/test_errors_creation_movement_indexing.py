"""Bad input to the creation, movement and indexing API: the exception type (torch's, where torch has the op) and a
message that names the offending shapes, dims or values."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def t23():
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def tt23():
  return torch.arange(6, dtype=torch.float32).reshape(2, 3)


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

# name: (our call, the same mistake in torch or None, expected exception, fragments the message must contain)
ERRORS = {
  # creation and data
  "linspace_negative_steps": (lambda: Tensor.linspace(0, 1, -2), lambda: torch.linspace(0, 1, -2), RuntimeError,
                              ["-2"]),
  "linspace_bool": (lambda: Tensor.linspace(5, 10, 3, dtype="bool"), lambda: torch.linspace(5, 10, 3, dtype=torch.bool),
                    NotImplementedError, ["bool"]),
  "linspace_bool_tinygrad": (lambda: Tensor.linspace(5, 10, 3, dtype="bool"), None, ValueError, ["bool"]),
  "kaiming_negative_size": (lambda: Tensor.kaiming_uniform(-3, 3), lambda: torch.empty(-3, 3), RuntimeError,
                            ["(-3, 3)"]),
  "kaiming_negative_size_tinygrad": (lambda: Tensor.kaiming_normal(3, -3), None, ValueError, ["(3, -3)"]),
  "kaiming_nested_sizes": (lambda: Tensor.kaiming_normal((-3, 3), 3), lambda: torch.empty((-3, 3), 3), TypeError,
                           ["((-3, 3), 3)"]),
  "kaiming_nested_sizes_tinygrad": (lambda: Tensor.kaiming_uniform((-3, -3), 3), None, ValueError, ["((-3, -3), 3)"]),
  "linspace_float_steps": (lambda: Tensor.linspace(0, 1, 2.5), lambda: torch.linspace(0, 1, 2.5), TypeError,
                           ["float"]),
  "assign_shape": (lambda: t23().assign(Tensor.ones(3, 2)), lambda: tt23().set_(torch.ones(3, 2)).add_(
                   torch.ones(2, 3)), RuntimeError, ["(3, 2)", "(2, 3)"]),
  "assign_dtype": (lambda: t23().assign(Tensor.ones(2, 3, dtype=dtypes.int32)), None, TypeError, ["int32", "float32"]),
  "replace_shape": (lambda: t23().replace(Tensor.ones(6)), None, ValueError, ["(6,)", "(2, 3)"]),
  "from_blob_null": (lambda: Tensor.from_blob(0, (2,)), None, TypeError, ["0"]),
  # movement
  "pad_unknown_mode": (lambda: t23().pad((1, 1), mode="wrap"), lambda: F.pad(tt23(), (1, 1), mode="wrap"),
                       NotImplementedError, ["wrap"]),
  # torch raises RuntimeError here, tinygrad NotImplementedError: a bad argument value is a ValueError in Python
  "pad_reflect_value": (lambda: t23().pad((1, 1), mode="reflect", value=2.0), None, ValueError, ["reflect", "2.0"]),
  "pad_reflect_too_large": (lambda: t23().pad((3, 0), mode="reflect"), lambda: F.pad(tt23(), (3, 0), mode="reflect"),
                            RuntimeError, ["(3, 0)", "3", "(2, 3)"]),
  "pad_circular_wraps_twice": (lambda: t23().pad((4, 0), mode="circular"), lambda: F.pad(tt23()[None], (4, 0),
                               mode="circular"), RuntimeError, ["(4, 0)", "3"]),
  # torch accepts this pad but copies memory it never wrote; tinygrad raises NotImplementedError
  "pad_circular_wraps_cropped": (lambda: Tensor.ones(1, 1, 5, 5).pad((3, -5, 1, -5), mode="circular"), None,
                                 NotImplementedError, ["(1, -5)", "dim 2", "size 5", "0 elements"]),
  "pad_replicate_empty": (lambda: Tensor.zeros(2, 0).pad((1, 1), mode="replicate"), None, ValueError, ["(2, 0)"]),
  "pad_pairs_count": (lambda: t23().pad(((1, 1),)), None, ValueError, ["1", "(2, 3)"]),
  "pad_not_ints": (lambda: t23().pad((1.5, 1)), lambda: F.pad(tt23(), (1.5, 1)), TypeError, ["1.5"]),
  "squeeze_bad_dim_tuple": (lambda: t23().squeeze((0, 2)), lambda: tt23().squeeze((0, 2)), IndexError, ["2"]),
  "unflatten_sizes": (lambda: t23().unflatten(1, (2, 2)), lambda: tt23().unflatten(1, (2, 2)), RuntimeError,
                      ["(2, 2)", "3"]),
  "unflatten_bad_dim": (lambda: t23().unflatten(2, (1, 3)), lambda: tt23().unflatten(2, (1, 3)), IndexError, ["2"]),
  "repeat_too_few": (lambda: t23().repeat(2), lambda: tt23().repeat(2), RuntimeError, ["(2,)", "(2, 3)"]),
  "repeat_negative": (lambda: t23().repeat(1, -1), lambda: tt23().repeat(1, -1), RuntimeError, ["-1"]),
  "repeat_interleave_counts": (lambda: t23().repeat_interleave([1, 2], dim=1), lambda: tt23().repeat_interleave(
                               torch.tensor([1, 2]), dim=1), RuntimeError, ["3", "[1, 2]"]),
  "repeat_interleave_bad_dim": (lambda: t23().repeat_interleave(2, dim=3), lambda: tt23().repeat_interleave(2, dim=3),
                                IndexError, ["3"]),
  "roll_mismatch": (lambda: t23().roll((1, 2), (0,)), lambda: tt23().roll((1, 2), (0,)), RuntimeError,
                    ["(1, 2)", "(0,)"]),
  "roll_bad_dim": (lambda: t23().roll(1, 2), lambda: tt23().roll(1, 2), IndexError, ["2"]),
  "split_sizes_sum": (lambda: t23().split([1, 1], 1), lambda: tt23().split([1, 1], 1), RuntimeError, ["(1, 1)", "3"]),
  "split_zero": (lambda: t23().split(0), lambda: tt23().split(0), RuntimeError, ["0"]),
  "chunk_zero": (lambda: t23().chunk(0), lambda: tt23().chunk(0), RuntimeError, ["0"]),
  "cat_sizes": (lambda: t23().cat(Tensor.ones(2, 4)), lambda: torch.cat([tt23(), torch.ones(2, 4)]), RuntimeError,
                ["(2, 3)", "(2, 4)", "0"]),
  "cat_ndim": (lambda: t23().cat(Tensor.ones(3), dim=1), lambda: torch.cat([tt23(), torch.ones(3)], 1), RuntimeError,
               ["(2, 3)", "(3,)"]),
  "cat_0d": (lambda: Tensor(1.0).cat(Tensor(2.0)), lambda: torch.cat([torch.tensor(1.0), torch.tensor(2.0)]),
             RuntimeError, ["zero-dimensional", "0"]),
  "cat_0d_tinygrad": (lambda: Tensor(3.14).cat(Tensor(3.14)), None, IndexError, ["zero-dimensional", "0"]),
  "cat_empty_list": (lambda: Tensor.cat([]), lambda: torch.cat([]), ValueError, ["non-empty"]),
  "cat_bad_dim": (lambda: t23().cat(t23(), dim=2), lambda: torch.cat([tt23(), tt23()], 2), IndexError, ["2"]),
  "cat_not_tensor": (lambda: t23().cat([1, 2]), None, TypeError, ["list"]),
  "stack_shapes": (lambda: t23().stack(Tensor.ones(3, 2)), lambda: torch.stack([tt23(), torch.ones(3, 2)]),
                   RuntimeError, ["(2, 3)", "(3, 2)", "1"]),
  "stack_bad_dim": (lambda: t23().stack(t23(), dim=4), lambda: torch.stack([tt23(), tt23()], 4), IndexError, ["4"]),
  "meshgrid_2d": (lambda: t23().meshgrid(Tensor([1])), lambda: torch.meshgrid(tt23(), torch.tensor([1]),
                  indexing="ij"), RuntimeError, ["(2, 3)"]),
  "meshgrid_indexing": (lambda: Tensor([1]).meshgrid(Tensor([2]), indexing="ji"), None, ValueError, ["ji"]),
  "rearrange_names": (lambda: t23().rearrange("a b -> a c"), None, ValueError, ["a b -> a c"]),
  "rearrange_axis_count": (lambda: t23().rearrange("a b c -> c b a"), None, RuntimeError, ["3 axes", "(2, 3)"]),
  "rearrange_size": (lambda: t23().rearrange("a (b c) -> a b c", b=2), None, ValueError, ["3", "['b', 'c']"]),
  "rearrange_arrow": (lambda: t23().rearrange("a b"), None, ValueError, ["->"]),
  # tinygrad's asserts: AssertionError
  "rearrange_underdetermined": (lambda: Tensor.zeros(8, 1).rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=2), None,
                                AssertionError, ["['a2', 'a3']"]),
  "rearrange_permuted_axis_size": (lambda: Tensor.zeros(8, 1).rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=2, a2=2,
                                   b=2), None, AssertionError, ["['b']", "[2]", "1"]),
  "rearrange_parentheses": (lambda: t23().rearrange("a (b -> a b"), None, ValueError, ["parentheses"]),
  # indexing
  "index_float": (lambda: t23()[1.5], lambda: tt23()[1.5], IndexError, ["1.5"]),
  "index_str": (lambda: t23()["a"], lambda: tt23()["a"], TypeError, ["'a'", "str"]),
  "index_float_tensor": (lambda: t23()[Tensor([0.0])], lambda: tt23()[torch.tensor([0.0])], IndexError, ["float32"]),
  "index_list_out_of_range": (lambda: t23()[[0, 2]], lambda: tt23()[[0, 2]], IndexError, ["2", "size 2"]),
  "index_list_negative_out_of_range": (lambda: t23()[:, [-4]], lambda: tt23()[:, [-4]], IndexError, ["-4", "size 3"]),
  "index_broadcast": (lambda: t23()[[0, 1], [0, 1, 2]], lambda: tt23()[[0, 1], [0, 1, 2]], IndexError,
                      ["(2,)", "(3,)"]),
  "index_mask_shape": (lambda: t23()[Tensor([True, False, True])], lambda: tt23()[torch.tensor([True, False, True])],
                       IndexError, ["(3,)", "(2,)"]),
  "index_too_many_with_list": (lambda: t23()[0, [0], 0], lambda: tt23()[0, [0], 0], IndexError, ["3"]),
  "slice_float": (lambda: t23()[0:1.5], lambda: tt23()[0:1.5], TypeError, ["1.5"]),
  "setitem_shape": (lambda: set_item(settable(), 0, Tensor([1.0, 2.0])), lambda: set_item(tt23(), 0,
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
  "setitem_value_type": (lambda: set_item(settable(), 0, "x"), lambda: set_item(tt23(), 0, "x"), TypeError, ["str"]),
  "setitem_out_of_range": (lambda: set_item(settable(), 2, 1.0), lambda: set_item(tt23(), 2, 1.0), IndexError,
                           ["2", "size 2"]),
  "gather_bad_dim": (lambda: t23().gather(2, I0), lambda: tt23().gather(2, TI0), IndexError, ["2"]),
  "gather_float_index": (lambda: t23().gather(0, Tensor([[0.0]])), lambda: tt23().gather(0, torch.tensor([[0.0]])),
                         RuntimeError, ["float32"]),
  "gather_ndim": (lambda: t23().gather(0, Tensor([0])), lambda: tt23().gather(0, torch.tensor([0])), RuntimeError,
                  ["(1,)", "(2, 3)"]),
  "gather_index_too_big": (lambda: t23().gather(0, Tensor.zeros(1, 4, dtype=dtypes.int32)), lambda: tt23().gather(
                           0, torch.zeros(1, 4, dtype=torch.long)), RuntimeError, ["(1, 4)", "(2, 3)", "0"]),
  "gather_index_not_tensor": (lambda: t23().gather(0, [[0]]), lambda: tt23().gather(0, [[0]]), TypeError, ["list"]),
  "scatter_reduce_mode": (lambda: t23().scatter(0, I0, 1.0, reduce="max"), None, ValueError, ["'max'"]),
  "scatter_reduce_bad_reduce": (lambda: t23().scatter_reduce(0, I0, t23(), "max"), None, ValueError, ["'max'"]),
  "scatter_src_too_small": (lambda: t23().scatter(0, Tensor.zeros(2, 3, dtype=dtypes.int32), Tensor.ones(1, 3)),
                            lambda: tt23().scatter(0, torch.zeros(2, 3, dtype=torch.long), torch.ones(1, 3)),
                            RuntimeError, ["(2, 3)", "(1, 3)"]),
  "scatter_bad_dim": (lambda: t23().scatter(-3, I0, 1.0), lambda: tt23().scatter(-3, TI0, 1.0), IndexError, ["-3"]),
  "scatter_float_index": (lambda: t23().scatter(0, Tensor([[0.5]]), 1.0), lambda: tt23().scatter(0,
                          torch.tensor([[0.5]]), 1.0), RuntimeError, ["float32"]),
  "scatter_reduce_scalar_src": (lambda: t23().scatter_reduce(0, I0, 1.0, "sum"), lambda: tt23().scatter_reduce(
                                0, TI0, 1.0, "sum"), TypeError, ["float"]),
  "masked_fill_mask_dtype": (lambda: t23().masked_fill(Tensor([1, 0, 1]), 0.0), lambda: tt23().masked_fill(
                             torch.tensor([1, 0, 1]), 0.0), RuntimeError, ["int32"]),
  "masked_fill_shape": (lambda: t23().masked_fill(Tensor.ones(3, 2, dtype=dtypes.bool), 0.0), lambda: tt23().
                        masked_fill(torch.ones(3, 2, dtype=torch.bool), 0.0), RuntimeError, ["(3, 2)", "(2, 3)"]),
  "masked_fill_value_shape": (lambda: t23().masked_fill(Tensor(True), Tensor([1.0])), lambda: tt23().masked_fill(
                              torch.tensor(True), torch.tensor([1.0])), RuntimeError, ["(1,)"]),
  "one_hot_float": (lambda: t23().one_hot(3), lambda: F.one_hot(tt23(), 3), RuntimeError, ["float32"]),
  "scatter_src_dtype": (lambda: t23().half().scatter(0, Tensor.zeros(2, 3, dtype=dtypes.int32), t23()),
                        lambda: tt23().half().scatter(0, torch.zeros(2, 3, dtype=torch.long), tt23()), RuntimeError,
                        ["float32", "float16"]),
  "scatter_reduce_src_dtype": (lambda: t23().scatter_reduce(0, Tensor.zeros(2, 3, dtype=dtypes.int32), t23().half(),
                               "sum"), lambda: tt23().scatter_reduce(0, torch.zeros(2, 3, dtype=torch.long),
                               tt23().half(), "sum"), TypeError, ["float32", "float16"]),
  "one_hot_empty": (lambda: Tensor.zeros(0, dtype=dtypes.int32).one_hot(), lambda: F.one_hot(torch.zeros(
                    0, dtype=torch.long)), RuntimeError, ["(0,)"]),
  "one_hot_num_classes": (lambda: Tensor([1]).one_hot(-3), None, ValueError, ["-3"]),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's deprecation warnings for some of these indices
@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  ours, theirs, exc, fragments = ERRORS[name]
  with pytest.raises(exc) as info:
    out = ours()
    for t in out if isinstance(out, (tuple, list)) else (out,):
      t.realize()
  for fragment in fragments:
    assert fragment in str(info.value), f"{fragment!r} not in message {str(info.value)!r}"
  if theirs is not None:  # torch rejects the same mistake, and catching what torch raises also catches ours
    with pytest.raises(Exception) as their_info:
      theirs()
    base = next(e for e in (IndexError, TypeError, NotImplementedError, ValueError, RuntimeError)
                if isinstance(their_info.value, e))
    assert isinstance(info.value, base), f"torch raises {base.__name__}, we raise {type(info.value).__name__}"


def test_enough_cases():
  assert len(ERRORS) >= 40


def test_errors_leave_tensors_unchanged():
  t = settable()
  for bad in (lambda: set_item(t, (0, 5), 1.0), lambda: set_item(t, 0, Tensor.ones(4)), lambda: t.assign(t.T)):
    with pytest.raises((IndexError, RuntimeError)):
      bad()
  assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
