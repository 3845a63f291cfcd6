"""Indexing against torch: advanced getitem (lists, int tensors, bool masks, broadcasting, mixed with basic
indices), setitem, gather, scatter, scatter_reduce, masked_fill and one_hot, on views, 0-size and 0-d tensors and
several dtypes. Picking elements only moves data, so values must match bit for bit (NaN and -0.0 included)."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from helpers import NP_DTYPE, check, edge_values, to_torch, view_pair

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

VIEWS = ["permuted", "sliced", "expanded"]  # of helpers.VIEW_BASES


def idx(values, dtype=dtypes.int32):
  """The same index as a refgrad tensor and a torch (int64) tensor."""
  a = np.asarray(values)
  return Tensor(a.astype(NP_DTYPE[dtype])), torch.from_numpy(a.astype(np.int64))


I01, T01 = idx([0, 1])
I_NEG, T_NEG = idx([-1, 0, -2], dtypes.int8)
I_COL, T_COL = idx([[2], [0]], dtypes.int64)
I_0D, T_0D = idx(1, dtypes.uint8)

# name: (refgrad index, torch index); an int apart from the advanced indices places the index dims as numpy does,
# not as torch does, so those cases are in test_indexing_numpy.py
GET = {
  "list": ([1, 0, 1], [1, 0, 1]),
  "list_two_dims": (([1, 0, 1], slice(None), [0, 3, 2]), ([1, 0, 1], slice(None), [0, 3, 2])),
  "list_middle": ((slice(None), [2, 0]), (slice(None), [2, 0])),
  "ellipsis_list": ((Ellipsis, [3, 3, 0]), (Ellipsis, [3, 3, 0])),
  "broadcast_lists": (([[0], [1]], [[0, 2]]), ([[0], [1]], [[0, 2]])),
  "tensor_and_slice": ((slice(None), I01, slice(1, 3)), (slice(None), T01, slice(1, 3))),
  "separated_by_slice": ((I01, slice(None), I01), (T01, slice(None), T01)),
  "int_then_list": ((0, [0, 1], slice(None)), (0, [0, 1], slice(None))),
  "list_int_list": (([0, 1], 0, [1, 2]), ([0, 1], 0, [1, 2])),
  "none_separates": ((slice(None), None, [0, 1], [1, 2]), (slice(None), None, [0, 1], [1, 2])),
  "none_between_lists": (([0, 1], None, [1, 2]), ([0, 1], None, [1, 2])),
  "negative_tensor": ((slice(None), slice(None), I_NEG), (slice(None), slice(None), T_NEG)),
  "column_tensor_with_int": ((slice(None), I_COL, 1), (slice(None), T_COL, 1)),
  "zero_d_tensor": ((slice(None), I_0D), (slice(None), T_0D)),
  "step_slice_and_list": ((slice(1, None), [2, 0], slice(None, None, 2)),
                          (slice(1, None), [2, 0], slice(None, None, 2))),
  "bool_list": ([True, False], [True, False]),
  "bool_list_middle": ((slice(None), [True, False, True]), (slice(None), [True, False, True])),
  "empty_list": ([], []),
}


@pytest.mark.parametrize("case, base", [(c, b) for i, c in enumerate(GET) for b in ("contiguous", VIEWS[i % 3])])
def test_getitem_advanced(case, base):
  ours, theirs = GET[case]
  t, tt = view_pair(base)
  check(t[ours], tt[theirs], dtypes.float32)


def test_getitem_bool_masks():
  t, tt = view_pair("permuted")
  check(t[t > 10], tt[tt > 10], dtypes.float32)
  mask = np.array([[True, False, True], [False, False, True]])
  check(t[Tensor(mask)], tt[torch.from_numpy(mask)], dtypes.float32)
  check(t[:, :, Tensor([True, False, False, True])], tt[:, :, torch.tensor([True, False, False, True])], dtypes.float32)


def test_getitem_negative_step_with_list():
  t = Tensor(np.arange(24, dtype=np.int16).reshape(2, 3, 4))
  a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
  check(t[::-1, [2, 0], ::-3], a[::-1, [2, 0], ::-3], dtypes.int16)


def test_getitem_out_of_range_tensor_selects_zero():
  t = Tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
  got = t[Tensor([0, 3, -3, -4, 100, 2])]
  want = np.arange(1, 13, dtype=np.float32).reshape(3, 4)[[0, 0, 0, 0, 0, 2]]
  want[[1, 3, 4]] = 0
  check(got, want, dtypes.float32)
  check(t[:, Tensor(np.array([5, 1], np.uint64))], np.array([[0, 2], [0, 6], [0, 10]], np.float32), dtypes.float32)


def test_zero_size_and_zero_d():
  empty, tempty = Tensor(np.zeros((2, 0, 3), np.float32)), torch.zeros(2, 0, 3)
  check(empty[[1, 0, 1]], tempty[[1, 0, 1]], dtypes.float32)
  check(empty[:, Tensor.zeros(0, 1, dtype=dtypes.int64), 1], tempty[:, torch.zeros(0, 1, dtype=torch.long), 1],
        dtypes.float32)
  check(empty.gather(2, Tensor.zeros(2, 0, 1, dtype=dtypes.int32)), tempty.gather(2, torch.zeros(2, 0, 1,
        dtype=torch.long)), dtypes.float32)
  check(empty.scatter(1, Tensor.zeros(2, 0, 3, dtype=dtypes.int32), 1.0), tempty.scatter(1, torch.zeros(2, 0, 3,
        dtype=torch.long), 1.0), dtypes.float32)
  t, tt = Tensor([1.5, -2.0]), torch.tensor([1.5, -2.0])
  check(t[Tensor(1)], tt[torch.tensor(1)], dtypes.float32)
  check(t[Tensor([[1], [0]])], tt[torch.tensor([[1], [0]])], dtypes.float32)
  check(Tensor(3.5)[None, ...][[0, 0]], torch.tensor(3.5)[None, ...][[0, 0]], dtypes.float32)


DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_picking_is_bit_exact(dtype):
  """NaN, -0.0, infinities and integer extremes come through advanced indexing, gather and scatter unchanged."""
  values = edge_values(dtype)
  n = len(values)
  order = np.arange(n)[::-1].copy()
  t = Tensor(values)
  check(t[Tensor(order.astype(np.int32))], values[order], dtype)
  check(t.reshape(1, n).gather(1, Tensor(order.reshape(1, n).astype(np.int64))), values[order].reshape(1, n), dtype)
  check(t.zeros_like().scatter(0, Tensor(order.astype(np.int32)), t), values[order], dtype)  # order is its own inverse
  two = Tensor(np.stack([values, values[::-1]]))
  check(two[[1, 0], ::-1], np.stack([values[::-1], values])[:, ::-1], dtype)


def test_setitem_basic():
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  t = Tensor(a.copy())
  t[1] = 5
  t[:, 1:3, ::3] = Tensor([[-1.0], [-2.0]])
  t[..., ::-2] = Tensor(np.arange(2, dtype=np.float32) + 100).permute(0)
  t[None, 0, 2] = float("nan")
  a[1] = 5
  a[:, 1:3, ::3] = [[-1.0], [-2.0]]
  a[..., ::-2] = np.arange(2) + 100
  a[None, 0, 2] = np.nan
  check(t, a, dtypes.float32)


def test_setitem_advanced():
  a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  t = Tensor(a.copy())
  t[[0, 1], [2, 0]] = Tensor([[7, 7, 7, 7], [8, 8, 8, 8]])
  t[:, [1, 1, 2], 3] = Tensor([[10, 11, 12], [13, 14, 15]])  # repeated index: the last write wins, as in numpy
  t[t > 20] = -1
  t[Tensor([[1]]), :, Tensor([0, 2])] = 99
  a[[0, 1], [2, 0]] = [[7, 7, 7, 7], [8, 8, 8, 8]]
  a[:, [1, 1, 2], 3] = [[10, 11, 12], [13, 14, 15]]
  a[a > 20] = -1
  a[[[1]], :, [0, 2]] = 99
  check(t, a, dtypes.int32)


def test_setitem_value_views_and_casts():
  t = Tensor(np.zeros((3, 4), np.int8))
  src = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3) + 0.75)
  t[:, :] = src.T  # a permuted float view, truncated to int8
  t[0] = Tensor([5]).expand(4)
  t[Tensor([2, 5])] = 9  # the out-of-range row index writes nothing
  want = np.trunc(np.arange(12, dtype=np.float32).reshape(4, 3).T + 0.75).astype(np.int8)
  want[0], want[2] = 5, 9
  check(t, want, dtypes.int8)


def test_setitem_keeps_identity_views_see_it_computed_values_do_not():
  t = Tensor(np.arange(6, dtype=np.float32)).realize()
  alias, view, lazy = t, t.reshape(2, 3), t * 2
  before = t.uop
  t[1:4] = 0
  assert alias is t and alias.tolist() == [0, 0, 0, 0, 4, 5]
  assert t.uop is not before
  check(view, np.array([[0, 0, 0], [0, 4, 5]], np.float32), dtypes.float32)  # a view shares t's data, as in torch
  check(lazy, np.arange(6, dtype=np.float32) * 2, dtypes.float32)  # computed before the write


def test_setitem_targets():
  lazy = Tensor([1, 2, 3]) + 1
  lazy[0] = 0
  assert lazy.tolist() == [0, 3, 4]
  zeros = Tensor.zeros(2, 2)
  zeros[1, 1] = 1.0
  assert zeros.tolist() == [[0, 0], [0, 1]]
  scalar = Tensor(3.0).realize()
  scalar[...] = 5
  assert scalar.item() == 5
  empty = Tensor(np.zeros((2, 0), np.float32))
  empty[:, :] = 1
  assert empty.shape == (2, 0)
  base = Tensor([[1, 2], [3, 4]]).realize()
  base[0][1] = 5  # writes through the view base[0], as in torch
  assert base.tolist() == [[1, 5], [3, 4]]


GATHER = [((2, 3, 4), 0, (1, 3, 4)), ((2, 3, 4), 1, (2, 5, 3)), ((2, 3, 4), -1, (2, 2, 6)), ((5,), 0, (7,)),
          ((3, 0), 1, (2, 0)), ((2, 3), 0, (0, 3))]


@pytest.mark.parametrize("shape, dim, index_shape", GATHER)
def test_gather(shape, dim, index_shape):
  rng = np.random.default_rng(0)
  a = rng.standard_normal(shape).astype(np.float32)
  index = rng.integers(0, max(shape[dim], 1), index_shape) if shape[dim] else np.zeros(index_shape, np.int64)
  check(Tensor(a).gather(dim, Tensor(index.astype(np.int32))), torch.from_numpy(a).gather(dim,
        torch.from_numpy(index)), dtypes.float32)


def test_gather_views_and_index_dtypes():
  t, tt = view_pair("sliced")
  index = np.array([[[3, 0, 1, 2]], [[1, 1, 0, 3]]])
  expanded = Tensor(index.astype(np.uint8)).expand(2, 3, 4)  # an expanded index of another int dtype
  check(t.gather(2, expanded), tt.gather(2, torch.from_numpy(index).expand(2, 3, 4)), dtypes.float32)
  permuted = Tensor(np.array([[0, 1], [1, 0], [1, 1]], dtype=np.int64)).T  # (2, 3), non-contiguous
  check(t.gather(0, permuted.unsqueeze(-1)), tt.gather(0, torch.tensor([[0, 1], [1, 0], [1, 1]]).T.unsqueeze(-1)),
        dtypes.float32)
  check(Tensor(4.5).gather(0, Tensor(0)), torch.tensor(4.5).gather(0, torch.tensor(0)), dtypes.float32)
  check(Tensor([1.0, 2.0]).gather(0, Tensor([1, 2, -1])), np.array([2.0, 0.0, 0.0], np.float32), dtypes.float32)


def scatter_inputs(dtype):
  rng = np.random.default_rng(1)
  a = rng.integers(-5, 6, (3, 5)).astype(NP_DTYPE[dtype])
  index = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])
  src = rng.integers(1, 4, (2, 4)).astype(NP_DTYPE[dtype])
  return a, index, src


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32], ids=["float32", "int32"])
@pytest.mark.parametrize("reduce", [None, "add", "multiply"])
def test_scatter(reduce, dtype):
  a, index, src = scatter_inputs(dtype)
  ours = Tensor(a).scatter(0, Tensor(index), Tensor(src), reduce=reduce)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch deprecates reduce= with a tensor src
    kwargs = {} if reduce is None else {"reduce": reduce}
    theirs = torch.from_numpy(a).scatter(0, torch.from_numpy(index), torch.from_numpy(src), **kwargs)
  check(ours, theirs, dtype)


def test_scatter_value_views_and_dims():
  a, index, _ = scatter_inputs(dtypes.float32)
  check(Tensor(a).scatter(-1, Tensor(index.astype(np.int8)), 2.5), torch.from_numpy(a).scatter(-1,
        torch.from_numpy(index), 2.5), dtypes.float32)
  src = np.arange(20, dtype=np.float32).reshape(5, 4)
  check(Tensor(a).scatter(1, Tensor(index), Tensor(src).T), torch.from_numpy(a).scatter(1, torch.from_numpy(index),
        torch.from_numpy(src).T), dtypes.float32)
  check(Tensor(a).scatter(1, Tensor(index), 1.5, reduce="multiply"), torch.from_numpy(a).scatter(1,
        torch.from_numpy(index), 1.5, reduce="multiply"), dtypes.float32)
  check(Tensor(2.0).scatter(0, Tensor(0), Tensor(7.0)), torch.tensor(2.0).scatter(0, torch.tensor(0),
        torch.tensor(7.0)), dtypes.float32)


def test_scatter_repeated_index_last_wins():
  got = Tensor([0, 0, 0, 0]).scatter(0, Tensor([1, 3, 1, 1]), Tensor([5, 6, 7, 8]))
  check(got, torch.zeros(4, dtype=torch.int32).scatter(0, torch.tensor([1, 3, 1, 1]),
                                                         torch.tensor([5, 6, 7, 8], dtype=torch.int32)), dtypes.int32)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float16], ids=["float32", "int32", "float16"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce, include_self, dtype):
  a, index, src = scatter_inputs(dtype)
  ours = Tensor(a).scatter_reduce(0, Tensor(index), Tensor(src), reduce, include_self=include_self)
  theirs = to_torch(a).scatter_reduce(0, torch.from_numpy(index), to_torch(src), reduce, include_self=include_self)
  check(ours, theirs, dtype)  # small integer values: every sum, product and mean here is exact


def test_scatter_reduce_nan_and_negative_zero():
  a = np.array([-0.0, 1.0, np.nan, 4.0], np.float32)
  index, src = np.array([1, 1, 3]), np.array([np.nan, 2.0, -1.0], np.float32)
  for reduce in ("amax", "amin", "sum"):
    for include_self in (True, False):
      check(Tensor(a).scatter_reduce(0, Tensor(index), Tensor(src), reduce, include_self=include_self),
            torch.from_numpy(a).scatter_reduce(0, torch.from_numpy(index), torch.from_numpy(src), reduce,
                                               include_self=include_self), dtypes.float32)


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int16, dtypes.bfloat16, dtypes.float32],
                         ids=["bool", "int16", "bfloat16", "float32"])
def test_masked_fill(dtype):
  t, tt = view_pair("expanded", dtype)
  mask = np.array([[True], [False], [True]])
  for value in (1, 0.5, float("nan")) if dtype.kind == "f" else (1, 0):
    check(t.masked_fill(Tensor(mask), value), tt.masked_fill(torch.from_numpy(mask), value), dtype)
  row = np.array([False, True, True, False])
  check(t.masked_fill(Tensor(row), Tensor(3)), tt.masked_fill(torch.from_numpy(row), torch.tensor(3)), dtype)


def test_masked_fill_broadcasts_self_with_a_larger_mask():
  a, mask = np.array([1.5, -0.0], np.float32), np.array([[[True, False]], [[False, False]]])
  check(Tensor(a).masked_fill(Tensor(mask), 7.0), torch.from_numpy(a).masked_fill(torch.from_numpy(mask), 7.0),
        dtypes.float32)


@pytest.mark.parametrize("value", [np.float32(2.5), np.int64(-3), np.bool_(True), np.float16(-0.0)], ids=repr)
def test_masked_fill_takes_numpy_scalars(value):
  a, mask = np.array([1.5, 4.0], np.float32), np.array([True, False])
  check(Tensor(a).masked_fill(Tensor(mask), value), torch.from_numpy(a).masked_fill(torch.from_numpy(mask), value),
        dtypes.float32)


def test_masked_fill_truncates_into_ints_and_0d():
  check(Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 2.7),
        torch.tensor([1, 2, 3], dtype=torch.int32).masked_fill(torch.tensor([True, False, True]), 2.7), dtypes.int32)
  check(Tensor(1.5).masked_fill(Tensor(True), -0.0), torch.tensor(1.5).masked_fill(torch.tensor(True), -0.0),
        dtypes.float32)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int8, dtypes.bool, dtypes.float16], ids=lambda d: d.name)
def test_masked_select_of_views_against_torch(dtype):
  """Both broadcast (torch's rule), picked in row-major order of the broadcast shape; bits kept (NaN, -0.0)."""
  for view in VIEWS:
    t, tt = view_pair(view, dtype, np.resize(edge_values(dtype), 120))
    row = np.array([False, True, True, False])
    check(t.masked_select(Tensor(row)), tt.masked_select(torch.from_numpy(row)), dtype)
    column = np.array([[[True], [False], [True]]] * 3)  # (3, 3, 1): broadcasts the (2, 3, 4) view to (3, 2, 3, 4)
    check(t.masked_select(Tensor(column[:, None])), tt.masked_select(torch.from_numpy(column[:, None])), dtype)


def test_masked_select_0d_empty_gradient_and_bad_mask():
  check(Tensor(-0.0).masked_select(Tensor(True)), torch.tensor(-0.0).masked_select(torch.tensor(True)),
        dtypes.float32)
  check(Tensor([1.0, 2.0]).masked_select(Tensor(False)), torch.tensor([1.0, 2.0]).masked_select(torch.tensor(False)),
        dtypes.float32)
  check(Tensor.ones(2, 0).masked_select(Tensor([True])), np.zeros(0, np.float32), dtypes.float32)
  a, mask = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32), np.array([[True, False], [True, True]])
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.masked_select(Tensor(mask)) * Tensor([1.0, 2.0, 3.0])).sum().backward()
  (tx.masked_select(torch.from_numpy(mask)) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
  check(x.grad, tx.grad, dtypes.float32)
  with pytest.raises(RuntimeError, match="int32"):
    Tensor([1.0, 2.0]).masked_select(Tensor([1, 0]))


@pytest.mark.parametrize("values, num_classes", [([0, 2, 1, 2], -1), ([[1, 0], [3, 3]], 5), (2, 4), ([], 3),
                                                 (np.zeros((2, 0), np.int64), 2)])
def test_one_hot(values, num_classes):
  a = np.asarray(values, dtype=np.int64)
  check(Tensor(a.astype(np.int16)).one_hot(num_classes), F.one_hot(torch.from_numpy(a), num_classes), dtypes.int32)


def test_one_hot_out_of_range_is_all_zeros():
  check(Tensor([-1, 1, 3]).one_hot(3), np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], np.int32), dtypes.int32)


def test_no_product_sized_buffers_or_extra_kernels():
  """gather and indexing compare along the indexed dim only and fuse: one kernel, no buffer larger than the inputs
  and the output, although the product of all dims of input and index is 2**24."""
  x, index = Tensor.ones(64, 64).contiguous().realize(), Tensor.zeros(64, 64, dtype=dtypes.int32).contiguous().realize()
  for out in (x.gather(1, index), x[index[0], index[1]], index.one_hot(64), x[:, index[0]]):
    items = out.schedule()
    assert len(items) == 1
    assert max(b.size for b in items[0].buffers) <= 64 * 64 * 64 if out.ndim == 3 else 64 * 64
  assert len(x.scatter(1, index, x).schedule()) <= 3
