"""t[index] and t[index] = v against numpy on random index expressions, and against torch wherever torch can say.

The expressions mix ints, slices (any step), None, one Ellipsis, int lists, nested tuples, int tensors of several
dtypes and bool masks (lists, tensors, 0-d) over small shapes with size-0 dims. torch's rule (tinygrad's too) wins
where numpy differs on where the index dims go: numpy counts ints among the advanced indices and an Ellipsis as a
separator even where it stands for no dims, torch selects with the ints and expands the Ellipsis first. So numpy
indexes in two steps here, the basic items first and then the advanced ones (torch_rule_steps); torch checks that
reading. torch's rule also wins for reading a list that holds lists as a tuple of indices. Also the scatter family's
exceptions against torch."""
import itertools
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from helpers import check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


@dataclass
class Item:
  """One index item as refgrad, numpy and torch spell it. kind: int, slice, none, ellipsis or advanced."""
  ours: Any
  numpy: Any
  torch: Any
  kind: str


def same(x: Any, kind: str) -> Item:
  return Item(x, x, x, kind)


shapes = st.lists(st.sampled_from([0, 1, 2, 3, 3, 4]), max_size=4).map(tuple)  # size 0 is common enough


@st.composite
def sub_shape(draw, batch: tuple[int, ...]) -> tuple[int, ...]:
  """A shape that broadcasts to batch: a suffix of it with some sizes replaced by 1."""
  suffix = batch[len(batch) - draw(st.integers(0, len(batch))):]
  return tuple(1 if draw(st.booleans()) else s for s in suffix)


@st.composite
def int_index(draw, size: int, batch: tuple[int, ...]) -> Item:
  """An int list, nested tuple or int tensor (in range, negative values too) of a shape that broadcasts to batch."""
  shape = draw(sub_shape(batch))
  count = int(np.prod(shape))
  if size == 0 and count:
    return same(slice(None), "slice")
  drawn = draw(st.lists(st.integers(-size, size - 1), min_size=count, max_size=count)) if count else []
  values = np.array(drawn, dtype=np.int64).reshape(shape)
  form = draw(st.sampled_from(["list", "tuple", "tensor"] if shape else ["tensor"]))
  if form == "list":
    return Item(values.tolist(), values.tolist(), values.tolist(), "advanced")
  if form == "tuple":  # nested tuples inside the index tuple are arrays for numpy and torch alike
    nested = _as_tuples(values.tolist())
    return Item(nested, nested, nested, "advanced")
  dtype = draw(st.sampled_from(INDEX_DTYPES if values.min(initial=0) >= 0 else INDEX_DTYPES[:4]))
  return Item(Tensor(values.astype(dtype)), values, torch.from_numpy(values), "advanced")


def _as_tuples(x: Any) -> Any:
  return tuple(_as_tuples(v) for v in x) if isinstance(x, list) else x


@st.composite
def mask_index(draw, sizes: tuple[int, ...]) -> Item:
  mask = np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(sizes)), max_size=int(np.prod(sizes)))),
                  dtype=bool).reshape(sizes)
  if len(sizes) == 1 and draw(st.booleans()):
    return Item(mask.tolist(), mask.tolist(), mask.tolist(), "advanced")
  return Item(Tensor(mask), mask, torch.from_numpy(mask), "advanced")


@st.composite
def slice_item(draw, size: int) -> Item:
  bound = st.none() | st.integers(-size - 2, size + 2)
  s = slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2, -3])))
  return same(s, "slice")


@st.composite
def items_over(draw, shape: tuple[int, ...], dims: range, batch: tuple[int, ...]) -> list[Item]:
  """Items that index exactly the dims in `dims`, with None and 0-d bools among them."""
  items, dim = [], dims.start
  while dim < dims.stop:
    kind = draw(st.sampled_from(["int", "slice", "none", "int_index", "int_index", "mask", "bool"]))
    size = shape[dim]
    if kind == "none":
      items.append(same(None, "none"))
    elif kind == "bool":
      value = draw(st.booleans())
      items.append(Item(Tensor(value) if draw(st.booleans()) else value, np.bool_(value), value, "advanced"))
    elif kind == "int" and size:
      items.append(same(draw(st.integers(-size, size - 1)), "int"))
      dim += 1
    elif kind == "int_index":
      items.append(draw(int_index(size, batch)))
      dim += 1
    elif kind == "mask":
      ndim = draw(st.integers(1, min(2, dims.stop - dim)))
      items.append(draw(mask_index(shape[dim:dim + ndim])))
      dim += ndim
    else:
      items.append(draw(slice_item(size)))
      dim += 1
  return items


@st.composite
def index_items(draw, shape: tuple[int, ...]) -> list[Item]:
  """Items for some leading dims, then maybe an Ellipsis and items for some trailing dims (the dims between are
  implied). Advanced indices broadcast to one drawn batch shape, except bool masks, whose nonzero count may not:
  then numpy raises, and so must we."""
  batch = draw(st.lists(st.sampled_from([0, 1, 2, 3, 3]), max_size=2).map(tuple))
  lead = draw(st.integers(0, len(shape)) | st.just(len(shape)))
  items = draw(items_over(shape, range(lead), batch))
  if draw(st.booleans()):
    tail = draw(st.integers(lead, len(shape)))
    items += [same(Ellipsis, "ellipsis")] + draw(items_over(shape, range(tail, len(shape)), batch))
  return items


def make(shape: tuple[int, ...], permuted: bool) -> tuple[np.ndarray, Tensor]:
  """Distinct values, as a contiguous tensor or as a permuted view of one."""
  a = (np.arange(int(np.prod(shape)), dtype=np.float32) - 7).reshape(shape)
  if not permuted:
    return a, Tensor(a)
  order = tuple(reversed(range(len(shape))))
  return a, Tensor(a.transpose(order).copy()).permute(order)


def numpy_or_error(fn) -> tuple[Any, type | None]:
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("error")  # a deprecated index form would mean numpy reads it differently from torch
      return fn(), None
  except (IndexError, ValueError) as e:
    return None, type(e)


def _dims_used(item: Item) -> int:
  if item.kind in ("none", "ellipsis"):
    return 0
  return np.ndim(item.numpy) if item.kind == "advanced" and np.asarray(item.numpy).dtype == bool else 1


def _basic_and_advanced(item: Item, ellipsis_dims: int) -> tuple[list[Any], list[Any]]:
  """One item's share of the two numpy steps: what it is among the basic items, and what indexes the dims that
  share leaves. An int, or a 0-d int array, selects (torch's reading); a 0-d bool adds a dim that it then indexes."""
  value = item.numpy
  if item.kind == "int" or (item.kind == "advanced" and np.ndim(value) == 0 and np.asarray(value).dtype != bool):
    return [int(value)], []
  if item.kind == "advanced" and np.ndim(value) == 0:
    return [None], [np.arange(int(bool(value)))]
  if item.kind == "advanced":
    return [slice(None)] * _dims_used(item), [value]
  if item.kind == "ellipsis":
    return [slice(None)] * ellipsis_dims, [slice(None)] * ellipsis_dims
  return [value], [slice(None)]


def torch_rule_steps(items: list[Item], ndim: int) -> tuple[tuple, tuple]:
  """The index as two numpy indices, basic items then advanced ones: in the second, with only slices beside the
  advanced indices and the Ellipsis spelled out, numpy's rule for where the index dims go is torch's."""
  ellipsis_dims = ndim - sum(_dims_used(i) for i in items)
  basic, advanced = [], []
  for item in items:
    b, a = _basic_and_advanced(item, ellipsis_dims)
    basic, advanced = basic + b, advanced + a
  return tuple(basic) + (Ellipsis,), tuple(advanced)  # the Ellipsis keeps an all-int basic step a (0-d) view


def numpy_get(a: np.ndarray, items: list[Item]) -> np.ndarray:
  basic, advanced = torch_rule_steps(items, a.ndim)
  return a[basic][advanced]


def torch_result(base: np.ndarray, items: list[Item]) -> torch.Tensor | None:
  """torch's t[index], or None where torch cannot say (negative steps)."""
  if any(i.kind == "slice" and (i.torch.step or 1) < 0 for i in items):
    return None
  return torch.from_numpy(base)[tuple(i.torch for i in items)]


@SETTINGS
@given(shape=shapes, data=st.data())
def test_getitem_matches_numpy(shape, data):
  items = data.draw(index_items(shape))
  permuted = data.draw(st.booleans())
  a, t = make(shape, permuted)
  want, error = numpy_or_error(lambda: numpy_get(a, items))
  if error is not None:
    with pytest.raises(error):
      t[tuple(i.ours for i in items)]
    return
  got = t[tuple(i.ours for i in items)]
  check(got, want, dtypes.float32)
  theirs = torch_result(a, items)
  if theirs is not None:
    check(got, theirs, dtypes.float32)


@st.composite
def value_for(draw, shape: tuple[int, ...]) -> tuple[Any, np.ndarray]:
  """A value that broadcasts to shape, as a Tensor, a nested list or a Python number, and as numpy."""
  vshape = draw(sub_shape(shape))
  if draw(st.booleans()):
    vshape = (1,) + vshape  # numpy and torch drop extra leading 1s
  v = (np.arange(int(np.prod(vshape)), dtype=np.float32).reshape(vshape) + 100) * -1
  lists_keep_shape = np.array(v.tolist()).shape == vshape  # [] cannot say (0, 1)
  form = draw(st.sampled_from(["tensor", "list", "scalar"] if lists_keep_shape else ["tensor", "scalar"]))
  if form == "scalar":
    return -0.5, np.float32(-0.5)
  return (Tensor(v) if form == "tensor" else v.tolist()), v


@SETTINGS
@given(shape=shapes, data=st.data())
def test_setitem_matches_numpy(shape, data):
  items = data.draw(index_items(shape))
  a, _ = make(shape, permuted=False)
  target, error = numpy_or_error(lambda: numpy_get(a, items))
  if error is not None:
    return  # the getitem test covers bad indices
  ours, theirs = data.draw(value_for(target.shape))
  while theirs.ndim > target.ndim:  # numpy refuses an extra leading 1 where the target is 0-d; torch drops it
    theirs = theirs[0]
  want = a.copy()
  basic, advanced = torch_rule_steps(items, a.ndim)
  want[basic][advanced] = np.broadcast_to(theirs, target.shape)  # want[basic] is a view: this writes want
  t = Tensor(a.copy())
  t[tuple(i.ours for i in items)] = ours
  check(t, want, dtypes.float32)


# ---- the forms where numpy and torch read an index differently, against torch 2.13
X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)


def torch_get(index: Any) -> torch.Tensor:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch deprecates reading a list of lists as a tuple, but still does
    return torch.from_numpy(X)[index]


@pytest.mark.parametrize("index", [
  [[[0]]],  # a list holding a list is a tuple of indices for torch: x[[[0]]] is x[([[0]],)], not x[np.array([[[0]]])]
  (((0,),),),
  (1, (2, 1, 0), None, slice(None), (2, 1, 0)),
  [[1, 0], [2, 2]],
  [[0, 1]],
  [(0, 1)],
  [[]],
  [[0]] * 3,
  [[0]] * 32,  # 32 or more: one index again
  [0, None],
  [1, slice(None, None, 2)],
  [Ellipsis, [1, 3]],
], ids=["list3", "tuple3", "int_tuple_none_tuple", "list_of_lists", "list_of_list", "list_of_tuple", "list_of_empty",
        "three_lists", "32_lists", "list_none", "list_slice", "list_ellipsis"])
def test_sequences_read_like_torch(index):
  check(Tensor(X)[index], torch_get(index), dtypes.float32)


def test_sequences_holding_tensors_read_like_torch():
  check(Tensor(X)[[Tensor(1), Tensor([0, 2])]], torch_get([torch.tensor(1), torch.tensor([0, 2])]), dtypes.float32)


def test_setitem_with_list_of_lists_like_torch():
  t, want = Tensor(X.copy()), torch.from_numpy(X.copy())
  t[[[1, 0], [2, 2]]] = -1.0
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want[[[1, 0], [2, 2]]] = -1.0
  check(t, want, dtypes.float32)


@pytest.mark.parametrize("index", [
  (0, slice(None), [0, 1]),
  (slice(None), 2, slice(None), [3, 1, 0]),
  (np.int64(1), None, [[0], [2]]),
  (slice(None), [0, 1], slice(None), 0),
  (slice(None), [1, 2], Ellipsis, [0, 3], slice(None)),
  (slice(None), [[1], [2]], Ellipsis, 1, [0, 3]),
], ids=["int_slice_list", "slice_int_slice_list", "npint_none_list", "slice_list_slice_int", "empty_ellipsis",
        "empty_ellipsis_int"])
def test_index_dims_placed_like_torch(index):
  """torch selects with the ints and expands the Ellipsis first, and keeps these index dims in place; numpy counts
  the ints and the Ellipsis and puts them first. refgrad follows torch (and tinygrad)."""
  theirs = torch_get(index)
  assert theirs.shape != X[index].shape or not np.array_equal(theirs.numpy(), X[index])  # the difference is real
  check(Tensor(X)[index], theirs, dtypes.float32)
  t, want = Tensor(X.copy()), torch.from_numpy(X.copy())
  t[index] = Tensor(np.arange(theirs.shape[-1], dtype=np.float32))
  want[index] = torch.arange(theirs.shape[-1], dtype=torch.float32)
  check(t, want, dtypes.float32)


@pytest.mark.parametrize("index", [
  (Tensor(0), slice(None), [1, 2]),
  ([1, 0], Tensor(2), [0, 3]),
  (slice(None), Tensor(1), slice(None), Tensor([[0], [4]])),
], ids=["tensor0_slice_list", "list_tensor0_list", "slice_tensor0_slice_tensor"])
def test_zero_d_int_tensor_places_like_an_int(index):
  """torch selects with a 0-d int tensor, so it separates no index dims (tinygrad reads it as an index tensor and
  puts those of the first case first)."""
  theirs = torch_get(tuple(torch.tensor(i.numpy()) if isinstance(i, Tensor) else i for i in index))
  check(Tensor(X)[index], theirs, dtypes.float32)


@pytest.mark.parametrize("index", [True, False, (True, 0), (slice(None), True, [0, 1]), (0, True, slice(None), [0, 1]),
                                   (Ellipsis, False, None), ([1, 0], True)],
                         ids=["true", "false", "true_int", "slice_true_list", "int_true_slice_list", "false_none",
                              "list_true"])
def test_zero_d_bools(index):
  check(Tensor(X)[index], torch_get(index), dtypes.float32)
  check(Tensor(X)[index], X[index], dtypes.float32)


def test_zero_d_bool_tensor_and_setitem():
  check(Tensor(X)[Tensor(True), 1], torch.from_numpy(X)[torch.tensor(True), 1], dtypes.float32)
  t, want = Tensor(X.copy()), X.copy()
  t[True, 1, :, [0, 2]] = Tensor([[5.0], [6.0], [7.0]])  # the index dims go first: the target is (2, 3, 5)
  want[True, 1, :, [0, 2]] = [[5.0], [6.0], [7.0]]
  check(t, want, dtypes.float32)


@pytest.mark.parametrize("index, bad, size", [(2, 2, 2), (-3, -3, 2), ((0, [1, 3]), 3, 3), ((Ellipsis, [5]), 5, 5),
                                              ((0, 0, (((4,),),)), 4, 4), ([[0], [0, 0, -4]], -4, 3)],
                         ids=["int", "negative_int", "list", "ellipsis_list", "nested_tuple", "list_of_lists"])
def test_out_of_range_names_index_and_size(index, bad, size):
  with pytest.raises(IndexError):
    torch_get(index)
  with pytest.raises(IndexError, match=f"index {bad} is out of bounds for dimension \\d with size {size}"):
    Tensor(X)[index]


def test_empty_lists_and_size_zero_dims():
  z = np.zeros((2, 0, 3), np.float32)
  for index in ([], (slice(None), []), ([], slice(None), 0), (Ellipsis, []), (slice(None), [], [])):
    check(Tensor(X)[index], X[index], dtypes.float32)
    check(Tensor(X)[index], torch_get(index), dtypes.float32)
  for index in ((1, [], 2), (Ellipsis, [0, 2, 0]), (slice(None), slice(None), [True, False, True])):
    check(Tensor(z)[index], z[index], dtypes.float32)


# ---- the scatter family raises what a torch user already catches
T = np.arange(12, dtype=np.float32).reshape(3, 4)
I24 = np.zeros((2, 4), np.int64)


def both_raise(ours, theirs, expected: type, fragments: list[str]) -> None:
  with pytest.raises(Exception) as torch_error:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      theirs()
  assert isinstance(torch_error.value, expected)
  with pytest.raises(expected) as error:
    ours()
  assert all(f in str(error.value) for f in fragments), str(error.value)


@pytest.mark.parametrize("mode", ["foo", "add", "multiply", "SUM"])
def test_scatter_reduce_bad_mode(mode):
  src = np.ones((2, 4), np.float32)
  both_raise(lambda: Tensor(T).scatter_reduce(0, Tensor(I24), Tensor(src), mode),
             lambda: torch.from_numpy(T).scatter_reduce(0, torch.from_numpy(I24), torch.from_numpy(src), mode),
             RuntimeError, [repr(mode)])
  with pytest.raises(ValueError):  # the Python type for a bad argument value, too
    Tensor(T).scatter_reduce(0, Tensor(I24), Tensor(src), mode)


@pytest.mark.parametrize("tensor_src", [False, True], ids=["number_src", "tensor_src"])
@pytest.mark.parametrize("mode", ["sum", "foo", "mean"])
def test_scatter_bad_mode(mode, tensor_src):
  src, tsrc = (Tensor.ones(2, 4), torch.ones(2, 4)) if tensor_src else (1.0, 1.0)
  both_raise(lambda: Tensor(T).scatter(0, Tensor(I24), src, reduce=mode),
             lambda: torch.from_numpy(T).scatter(0, torch.from_numpy(I24), tsrc, reduce=mode), RuntimeError,
             [repr(mode)])


@pytest.mark.parametrize("index_shape, src_shape", [((3, 4), (2, 4)), ((2, 4), (2, 3)), ((1, 4), (1, 1))])
@pytest.mark.parametrize("op", ["scatter", "scatter_reduce"])
def test_scatter_index_larger_than_src(op, index_shape, src_shape):
  index, src = np.zeros(index_shape, np.int64), np.ones(src_shape, np.float32)
  args = ("sum",) if op == "scatter_reduce" else ()
  both_raise(lambda: getattr(Tensor(T), op)(0, Tensor(index), Tensor(src), *args),
             lambda: getattr(torch.from_numpy(T), op)(0, torch.from_numpy(index), torch.from_numpy(src), *args),
             RuntimeError, [str(index_shape), str(src_shape)])


@pytest.mark.parametrize("dim", [2, -3, 5])
@pytest.mark.parametrize("op", ["scatter", "scatter_reduce", "gather"])
def test_scatter_family_bad_dim(op, dim):
  src = np.ones((2, 4), np.float32)

  def call(t, index, s):
    if op == "gather":
      return t.gather(dim, index)
    return getattr(t, op)(dim, index, s, *(("sum",) if op == "scatter_reduce" else ()))
  both_raise(lambda: call(Tensor(T), Tensor(I24), Tensor(src)),
             lambda: call(torch.from_numpy(T), torch.from_numpy(I24), torch.from_numpy(src)), IndexError, [str(dim)])


@pytest.mark.parametrize("op", ["scatter", "scatter_reduce", "gather"])
def test_zero_d_scatter_family_bad_dim(op):
  def call(t, index):
    if op == "gather":
      return t.gather(1, index)
    return getattr(t, op)(1, index, t, *(("sum",) if op == "scatter_reduce" else ()))
  both_raise(lambda: call(Tensor(2.0), Tensor(0)), lambda: call(torch.tensor(2.0), torch.tensor(0)), IndexError, ["1"])


# every index of three items from these, on a 4-d tensor, against torch: where ints, slices, None and the Ellipsis
# stand between advanced indices decides where torch puts the index dims
PATTERN_ITEMS = {"int": -1, "slice": slice(1, None), "list": [1, 0, 1], "none": None, "ellipsis": Ellipsis,
                 "tensor": np.array([[1], [0]])}
PATTERNS = [p for p in itertools.product(PATTERN_ITEMS, repeat=3) if p.count("ellipsis") <= 1]


def _spell(pattern: tuple[str, ...], as_tensor) -> tuple:
  return tuple(as_tensor(PATTERN_ITEMS[k]) if k == "tensor" else PATTERN_ITEMS[k] for k in pattern)


@pytest.mark.parametrize("pattern", PATTERNS, ids="-".join)
def test_index_patterns_like_torch(pattern):
  theirs = torch_get(_spell(pattern, torch.from_numpy))
  check(Tensor(X)[_spell(pattern, Tensor)], theirs, dtypes.float32)
  t, want = Tensor(X.copy()), torch.from_numpy(X.copy())
  value = np.arange(theirs.numel(), dtype=np.float32).reshape(theirs.shape) + 1000
  t[_spell(pattern, Tensor)] = Tensor(value)
  want[_spell(pattern, torch.from_numpy)] = torch.from_numpy(value)
  check(t, want, dtypes.float32)
