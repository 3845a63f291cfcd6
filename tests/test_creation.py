"""Creating tensors: from Python data, numpy and bytes, and the static constructors, checked against torch/numpy."""
import numpy as np
import pytest
import torch
from helpers import DTYPE_LIST, NP_DTYPE, check, edge_values, ids, raises_like, to_numpy

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


@pytest.mark.parametrize("value, dtype", [(3, dtypes.int32), (-7, dtypes.int32), (2.5, dtypes.float32),
                                          (-0.0, dtypes.float32), (True, dtypes.bool), (False, dtypes.bool),
                                          (float("inf"), dtypes.float32), (float("nan"), dtypes.float32)])
def test_python_scalar(value, dtype):
  t = Tensor(value)
  assert t.shape == () and t.ndim == 0
  check(t, np.array(value, dtype=NP_DTYPE[dtype]), dtype)


@pytest.mark.parametrize("value", [np.float16(1.5), np.int8(-3), np.uint64(2**63 + 5), np.float64(0.1), np.bool_(True)])
def test_numpy_scalar_keeps_dtype(value):
  t = Tensor(value)
  assert t.shape == ()
  check(t, np.array(value), dtypes.from_np(np.asarray(value).dtype))
  assert t.item() == value.item()


@pytest.mark.parametrize("data, dtype", [
  ([True, False, True], dtypes.bool),
  ([[True], [False]], dtypes.bool),
  ([1, 2, -3], dtypes.int32),
  ([[1, 2], [3, 4], [5, 6]], dtypes.int32),
  ([True, 2, 3], dtypes.int32),
  ([1, 2.5], dtypes.float32),
  ([[1.0, 2], [True, 4]], dtypes.float32),
  ((1, 2, 3), dtypes.int32),
  ([(1.5, 2.5), (3.5, 4.5)], dtypes.float32),
  ([[[1], [2]], [[3], [4]]], dtypes.int32),
  ([], dtypes.float32),
  ([[], []], dtypes.float32),
])
def test_nested_lists(data, dtype):
  t = Tensor(data)
  want = torch.tensor(data)
  assert t.shape == tuple(want.shape)
  check(t, want, dtype)
  assert t.tolist() == want.to(torch.float32 if dtype == dtypes.float32 else want.dtype).tolist()


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=ids(DTYPE_LIST))
def test_list_with_dtype(dtype):
  data = [[0, 1, 1], [1, 0, 1]]
  check(Tensor(data, dtype=dtype), np.array(data).astype(NP_DTYPE[dtype]), dtype)
  check(Tensor(data, dtype=dtype.name), np.array(data).astype(NP_DTYPE[dtype]), dtype)


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=ids(DTYPE_LIST))
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 0, 4)])
def test_numpy_array_keeps_dtype(dtype, shape):
  values = np.resize(edge_values(dtype), shape)
  t = Tensor(values)
  assert t.shape == shape
  check(t, values, dtype)


def test_numpy_array_non_contiguous():
  a = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2].T
  check(Tensor(a), a, dtypes.float32)


def test_numpy_array_with_dtype_casts():
  a = np.array([1.75, -2.5, 3.0])
  check(Tensor(a, dtype=dtypes.float16), to_numpy(torch.from_numpy(a).half()), dtypes.float16)
  check(Tensor(a, dtype=dtypes.bfloat16), to_numpy(torch.from_numpy(a).bfloat16()), dtypes.bfloat16)


def test_bytes_are_uint8():
  data = bytes([0, 1, 127, 128, 255])
  t = Tensor(data)
  check(t, torch.frombuffer(bytearray(data), dtype=torch.uint8), dtypes.uint8)


def test_empty_has_shape_and_dtype():
  t = Tensor.empty(2, 3, dtype=dtypes.int16)
  assert t.shape == (2, 3) and t.dtype == dtypes.int16
  assert t.numpy().shape == (2, 3)
  assert Tensor.empty((4,)).dtype == dtypes.float32


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (2, 0, 3), (1, 1, 5)])
def test_zeros_ones(shape):
  check(Tensor.zeros(*shape), torch.zeros(shape), dtypes.float32)
  check(Tensor.ones(shape), torch.ones(shape), dtypes.float32)
  check(Tensor.zeros(shape, dtype=dtypes.int8), torch.zeros(shape, dtype=torch.int8), dtypes.int8)
  check(Tensor.ones(*shape, dtype="bool"), torch.ones(shape, dtype=torch.bool), dtypes.bool)


@pytest.mark.parametrize("fill, dtype", [(7, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool),
                                         (float("-inf"), dtypes.float32), (-0.0, dtypes.float32)])
def test_full(fill, dtype):
  check(Tensor.full((2, 3), fill), torch.full((2, 3), fill), dtype)


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=ids(DTYPE_LIST))
def test_full_with_dtype(dtype):
  check(Tensor.full((3, 1), 1, dtype=dtype), np.full((3, 1), 1).astype(NP_DTYPE[dtype]), dtype)


@pytest.mark.parametrize("args", [(5,), (0,), (2, 7), (7, 2), (2, 11, 3), (10, 0, -3), (-4, 4, 2), (3, 3)])
def test_arange_int(args):
  check(Tensor.arange(*args), np.arange(*args), dtypes.int32)  # torch rejects (7, 2); numpy gives empty like range


@pytest.mark.parametrize("args", [(0, 1, 0.1), (2.5,), (-1.0, 1.0, 0.25), (5, 0, -0.5), (0.5, 3)])
def test_arange_float(args):
  check(Tensor.arange(*args), torch.arange(*args, dtype=torch.float32), dtypes.float32)


@pytest.mark.parametrize("args", [(0, 2**60 + 1, 2**58), (2**60 + 1, 0, -2**58), (1, 3 * 2**55 + 2, 2**55)], ids=str)
def test_arange_large_ints_count_exactly(args):  # a float quotient rounded the count down: one element short
  check(Tensor.arange(*args), torch.arange(*args), dtypes.int64)


def test_arange_of_numpy_floats_is_float():
  check(Tensor.arange(np.float32(2.5)), torch.arange(np.float32(2.5)), dtypes.float32)
  check(Tensor.arange(0, np.float16(1.5), 0.5), torch.arange(0, np.float16(1.5), 0.5), dtypes.float32)


@pytest.mark.parametrize("args", [(0, 5, 0), (0, float("inf")), (0, float("nan")), (0.0, 1.0, 0.0)], ids=str)
def test_arange_bad_range_raises_like_torch(args):
  raises_like(lambda: Tensor.arange(*args), lambda: torch.arange(*args), (RuntimeError, ValueError), ["arange"])


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint16, dtypes.float16, dtypes.bfloat16, dtypes.float64],
                         ids=ids([dtypes.int8, dtypes.uint16, dtypes.float16, dtypes.bfloat16, dtypes.float64]))
def test_arange_dtype(dtype):
  check(Tensor.arange(2, 20, 3, dtype=dtype), np.arange(2, 20, 3).astype(NP_DTYPE[dtype]), dtype)


@pytest.mark.parametrize("n, m", [(1, None), (3, None), (2, 4), (4, 2), (0, 3)])
def test_eye(n, m):
  want = torch.eye(n) if m is None else torch.eye(n, m)
  check(Tensor.eye(n, m), want, dtypes.float32)
  check(Tensor.eye(n, m, dtype=dtypes.int64), want.long(), dtypes.int64)


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint32, dtypes.bfloat16, dtypes.float64],
                         ids=ids([dtypes.bool, dtypes.int8, dtypes.uint32, dtypes.bfloat16, dtypes.float64]))
def test_like_keeps_shape_and_dtype(dtype):
  t = Tensor(np.zeros((2, 0, 3) if dtype == dtypes.uint32 else (2, 3), dtype=NP_DTYPE[dtype]))
  check(t.zeros_like(), np.zeros(t.shape, NP_DTYPE[dtype]), dtype)
  check(t.ones_like(), np.ones(t.shape, NP_DTYPE[dtype]), dtype)
  check(t.full_like(1), np.full(t.shape, 1).astype(NP_DTYPE[dtype]), dtype)


def test_like_with_dtype():
  t = Tensor([[1, 2, 3]])
  check(t.full_like(2.5, dtype=dtypes.float16), torch.full_like(torch.tensor([[1, 2, 3]]), 2.5, dtype=torch.half),
        dtypes.float16)
  check(t.zeros_like(dtype=dtypes.float32), torch.zeros(1, 3), dtypes.float32)
  check(t.ones_like(dtype="int8"), torch.ones(1, 3, dtype=torch.int8), dtypes.int8)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (2, 3, 4)])
def test_shape_properties(shape):
  t = Tensor.ones(shape, dtype=dtypes.int16)
  want = torch.ones(shape, dtype=torch.int16)
  assert t.shape == tuple(want.shape) and t.ndim == want.ndim
  assert t.numel() == want.numel() and t.nbytes() == want.nbytes and t.element_size() == want.element_size()
  assert t.size() == tuple(want.size())
  if shape:
    assert len(t) == len(want) and t.size(-1) == want.size(-1)


def test_zero_size_ops_keep_shape():
  t = Tensor.ones(2, 0, 3)
  check((t + 1) * t, torch.zeros(2, 0, 3), dtypes.float32)
  check(t.reshape(0, 6), torch.zeros(0, 6), dtypes.float32)


@pytest.mark.parametrize("data", [3, 2.5, True, [1, 2], [[1.5], [2.5]], [[True, False]]])
def test_tolist_and_item(data):
  t, want = Tensor(data), torch.tensor(data)
  assert t.tolist() == want.tolist()
  if want.numel() == 1:
    assert t.item() == want.item() and type(t.item()) is type(want.item())


@pytest.mark.parametrize("dtype", [None, dtypes.int8, dtypes.bfloat16], ids=str)
def test_none_is_an_empty_tensor(dtype):
  """tinygrad's Tensor(None): no elements, shape (0,), default_float unless a dtype is given."""
  t = Tensor(None, dtype=dtype)
  assert t.shape == (0,) and t.dtype == (dtype or dtypes.default_float)
  check(t, np.zeros(0, NP_DTYPE[t.dtype]), t.dtype)


@pytest.mark.parametrize("data, dtype", [
  ([np.array([1, 2]), np.array([3, 4])], dtypes.int32),
  ([np.array([1.5, 2.0], np.float16), np.array([3.0, -0.0])], dtypes.float32),
  ([np.array([True]), np.array([False])], dtypes.bool),
  ([np.array(2**64 - 1, np.uint64), np.array(0, np.uint64)], dtypes.uint64),
  ([np.array(-2**63), np.array(2**31)], dtypes.int64),
  ([[np.array([1, 2])], [np.array([3, 4])]], dtypes.int32),
  ([np.array([1, 2]), [3.5, 4]], dtypes.float32),
  ([np.zeros((0, 3)), np.zeros((0, 3))], dtypes.float32),
], ids=str)
def test_a_list_of_arrays_is_the_nested_list_of_their_values(data, dtype):
  """An array inside a list counts as its values, as numpy scalars in a list do: int arrays give default_int (or
  the int64/uint64 their values need), float arrays default_float."""
  t = Tensor(data)
  want = np.array([np.asarray(x).tolist() for x in data], dtype=object)
  assert t.shape == want.shape
  check(t, want.astype(NP_DTYPE[dtype]), dtype)


def test_a_list_of_arrays_takes_a_dtype_and_refuses_ragged_arrays():
  check(Tensor([np.array([1, 2]), np.array([3, 300])], dtype=dtypes.int8), np.array([[1, 2], [3, 44]], np.int8),
        dtypes.int8)
  with pytest.raises(ValueError, match=r"ragged.*\(2,\), \(3,\)"):
    Tensor([np.array([1, 2]), np.array([1, 2, 3])])


DATA_DTYPES = [d for d in DTYPE_LIST if d != dtypes.bfloat16]


@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=ids(DATA_DTYPES))
@pytest.mark.parametrize("shape", [(), (0, 2), (2, 0), (3,), (2, 3)], ids=str)
def test_data_is_a_memoryview_of_the_shape_and_struct_format(dtype, shape):
  values = np.resize(edge_values(dtype), shape)
  view = Tensor(values).data()
  assert view.shape == shape and view.itemsize == dtype.itemsize and view.nbytes == values.nbytes
  assert view.format == dtype.fmt and np.dtype(view.format) == NP_DTYPE[dtype]  # 'q' for int64, as tinygrad
  assert view.tobytes() == values.tobytes()
  np.testing.assert_array_equal(np.asarray(view), values)


def test_data_of_a_0d_int_tensor_and_of_a_view():
  view = Tensor(3, dtype=dtypes.int32).data()
  assert (view.shape, view.format, view.tolist()) == ((), "i", 3)
  assert Tensor([[1, 2], [3, 4]]).T.data().tolist() == [[1, 3], [2, 4]]
  with pytest.raises(TypeError, match="bfloat16"):
    Tensor([1.0], dtype=dtypes.bfloat16).data()


def test_creation_rounds_once_as_cast_does():
  """Every way a value enters a float32/bfloat16 tensor rounds it once, as CAST of the exact value does (docs/SPEC.md):
  a Python int past 2**53 went through float64 first (2**62 + 2**38 + 1 became 2**62; torch.full gives 2**62 + 2**39),
  and lists and arrays of float64 or int64 went to bfloat16 through float32 (ml_dtypes rounds twice)."""
  assert torch.full((1,), 2**62 + 2**38 + 1, dtype=torch.float32).item() == 2.0**62 + 2.0**39
  cases = [(2**62 + 2**38 + 1, dtypes.float32), (2**62 + 2**54 + 1, dtypes.bfloat16),
           (2**63 + 2**39 + 1, dtypes.float32), (-(2**62 + 2**54 + 1), dtypes.bfloat16),
           (2**100 + 2**76 + 1, dtypes.float32), (1 + 2**-8 + 2**-30, dtypes.bfloat16)]
  for value, dt in cases:
    if abs(value) >= 2**64:  # the nearest float32, 2**100 + 2**77 (float64 makes it a tie, which rounds down)
      want = np.array([2.0**100 + 2.0**77], np.float32)
    else:
      src = dtypes.float64 if isinstance(value, float) else dtypes.uint64 if value >= 2**63 else dtypes.int64
      want = Tensor([value], dtype=src).cast(dt).numpy()
    made = [Tensor(value, dtype=dt), Tensor([value], dtype=dt), Tensor.full((1,), value, dtype=dt),
            Tensor.zeros(1, dtype=dt) + value, Tensor([True]).where(value, Tensor.zeros(1, dtype=dt))]
    if abs(value) < 2**63:
      made.append(Tensor(np.array([value]), dtype=dt))
    if isinstance(value, int):
      made.append(Tensor.arange(value, value + 1, dtype=dt))
    for t in made:
      check(t.reshape(1), want, dt)


def test_big_endian_arrays_give_their_values():
  """A non-native byte order is converted (TypeError before; torch raises ValueError, tinygrad reads the raw bytes)."""
  for npdt in (">i4", ">f8", ">u2"):
    a = np.array([1, 2, 300], npdt)
    check(Tensor(a), a.astype(np.dtype(npdt).newbyteorder("=")), dtypes.from_np(np.dtype(npdt).newbyteorder("=")))


def test_arange_counts_numpy_floats_in_float64():
  """torch's count, ceil((stop - start) / step) in float64: in np.float32 arithmetic 0.3f / 0.1f rounded to 3.0."""
  args = (0, np.float32(0.3), np.float32(0.1))
  check(Tensor.arange(*args), torch.arange(*args), dtypes.float32)
