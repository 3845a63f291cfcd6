"""The dtypes namespace as tinygrad 0.10 has it, and bitcast between dtypes of different item sizes, checked byte for
byte against numpy's `.view()` (little-endian, as torch's `view(dtype)`) on every device."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import DTYPE_LIST, NP_DTYPE

from refgrad import Tensor, dtypes
from refgrad.testing.edges import dtype_edges

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

SIZED = [d for d in DTYPE_LIST if d != dtypes.bool]
RESIZING = [(s, d) for s in SIZED for d in SIZED if s.itemsize != d.itemsize]
BLOCK = 64  # bytes: a whole number of elements of every dtype, and of 8 elements of every dtype along the last axis


def _padded_bytes(values: np.ndarray) -> np.ndarray:
  raw = raw_bytes(values)
  return np.concatenate([raw, np.zeros(-len(raw) % BLOCK, np.uint8)])


def bit_patterns(src, dst) -> np.ndarray:
  """An array of src, 8 elements a row, whose bytes hold the edge values of src and of dst (NaNs with payloads,
  signalling ones too, -0.0, infinities, subnormals, the extremes), each where an element of its dtype starts, and
  random bytes."""
  rng = np.random.default_rng(src.itemsize * 10 + dst.itemsize)
  raw = np.concatenate([_padded_bytes(dtype_edges(src)), _padded_bytes(dtype_edges(dst)),
                        rng.integers(0, 256, 2 * BLOCK, dtype=np.uint8)])
  return raw.view(NP_DTYPE[src]).reshape(-1, 8)


def raw_bytes(x: np.ndarray) -> np.ndarray:
  return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def assert_same_bytes(got: Tensor, want: np.ndarray) -> None:
  assert got.dtype == dtypes.from_np(want.dtype) and got.shape == want.shape
  np.testing.assert_array_equal(raw_bytes(got.numpy()), raw_bytes(want))


# ---- bitcast between item sizes
def test_the_example_of_issue_28():
  out = Tensor([1, 256], dtype=dtypes.int32).bitcast(dtypes.int8)
  assert out.dtype == dtypes.int8 and out.tolist() == [1, 0, 0, 0, 0, 1, 0, 0]


@pytest.mark.parametrize("src, dst", RESIZING, ids=[f"{s.name}-{d.name}" for s, d in RESIZING])
def test_bitcast_between_item_sizes_is_numpy_view(src, dst):
  x = bit_patterns(src, dst)
  assert_same_bytes(Tensor(x).bitcast(dst), x.view(NP_DTYPE[dst]))


@pytest.mark.parametrize("src, dst", [(dtypes.float32, dtypes.uint8), (dtypes.int8, dtypes.float64),
                                      (dtypes.bfloat16, dtypes.int32)], ids=str)
def test_bitcast_reads_the_values_of_a_view_in_their_order(src, dst):
  """Transposed, strided and flipped tensors give their own values' bytes (torch would refuse some of these views:
  refgrad has value semantics, so the bytes are those of a contiguous copy)."""
  x = np.random.default_rng(3).integers(0, 256, (4, 16, 8 * src.itemsize), dtype=np.uint8).view(NP_DTYPE[src])
  t = Tensor(x)
  for view, expected in ((t.permute(1, 0, 2), x.transpose(1, 0, 2)), (t[::2, 1::3], x[::2, 1::3]),
                         (t.flip(2), x[:, :, ::-1])):
    assert_same_bytes(view.bitcast(dst), np.ascontiguousarray(expected).view(NP_DTYPE[dst]))


def test_bitcast_round_trips_and_feeds_later_ops():
  x = np.array([[-1, 0, 127, -128, 5, 6, 7, 8]], np.int8)
  wide = Tensor(x).bitcast(dtypes.int64)
  np.testing.assert_array_equal(wide.bitcast(dtypes.int8).numpy(), x)
  np.testing.assert_array_equal((wide + 1).numpy(), x.view(np.int64) + 1)
  halves = Tensor(np.array([1.0, -0.0], np.float32)).bitcast(dtypes.uint16)
  np.testing.assert_array_equal((halves >> 8).numpy(), np.array([1.0, -0.0], np.float32).view(np.uint16) >> 8)


@pytest.mark.parametrize("shape, src, dst", [((0,), dtypes.int32, dtypes.int8), ((2, 0), dtypes.int8, dtypes.int64),
                                             ((0, 8), dtypes.uint8, dtypes.float64),
                                             ((3, 0), dtypes.float64, dtypes.float16)], ids=str)
def test_bitcast_of_an_empty_tensor_scales_its_last_axis(shape, src, dst):
  x = np.zeros(shape, NP_DTYPE[src])
  assert_same_bytes(Tensor(x).bitcast(dst), x.view(NP_DTYPE[dst]))


@pytest.mark.parametrize("value, dst", [(-0.0, dtypes.uint32), (float("-inf"), dtypes.int32), (1e-45, dtypes.int32)],
                         ids=str)
def test_a_0d_tensor_bitcasts_to_the_same_item_size(value, dst):
  x = np.array(value, np.float32)
  assert_same_bytes(Tensor(x).bitcast(dst), x.view(NP_DTYPE[dst]))


@pytest.mark.parametrize("dst", [dtypes.int8, dtypes.float64], ids=str)
def test_a_0d_tensor_cannot_change_item_size(dst):
  with pytest.raises(RuntimeError, match=r"shape \(\) from int32 \(4-byte items\) to .*0-d"):  # as torch
    Tensor(3, dtype=dtypes.int32).bitcast(dst)


@pytest.mark.parametrize("shape, src, dst", [((3,), dtypes.int8, dtypes.float16), ((2, 6), dtypes.uint16, dtypes.int64),
                                             ((4, 1), dtypes.float32, dtypes.float64)], ids=str)
def test_growing_items_need_a_divisible_last_axis(shape, src, dst):
  message = rf"{re.escape(str(shape))} from {src.name} .* to {dst.name} .*whole number"
  with pytest.raises(RuntimeError, match=message):  # as torch
    Tensor.zeros(*shape, dtype=src).bitcast(dst)


@pytest.mark.parametrize("src, dst", [(dtypes.bool, dtypes.int8), (dtypes.uint8, dtypes.bool),
                                      (dtypes.bool, dtypes.int32), (dtypes.float16, dtypes.bool)], ids=str)
def test_bitcast_to_or_from_bool_is_refused(src, dst):
  with pytest.raises(TypeError, match=f"{src.name} to {dst.name}.*cast"):
    Tensor.zeros(8, dtype=src).bitcast(dst)


# ---- the dtypes namespace
TINYGRAD_NAMES = {"bool": "bool", "char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16",
                  "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64", "half": "float16",
                  "float": "float32", "double": "float64"}


def test_fields_name_every_dtype_by_its_names_and_aliases():
  fields = dtypes.fields()
  assert set(fields) == {d.name for d in DTYPE_LIST} | set(TINYGRAD_NAMES)
  assert all(fields[alias].name == name for alias, name in TINYGRAD_NAMES.items())
  assert all(fields[d.name] is d for d in DTYPE_LIST)


def test_fields_leave_out_the_defaults_and_stay_the_same_when_a_default_changes():
  before = dtypes.fields()
  dtypes.default_float = dtypes.float16
  try:
    assert dtypes.fields() == before and "default_float" not in before and "void" not in before
  finally:
    dtypes.default_float = dtypes.float32


def test_dtypes_sort_by_priority_then_size_then_name():
  expected = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
  assert sorted(reversed(expected)) == expected
  assert dtypes.int8 < dtypes.uint8 < dtypes.float16 < dtypes.bfloat16 and dtypes.float64 > dtypes.float32
  assert dtypes.int32 <= dtypes.int <= dtypes.int32 and not dtypes.float32 < dtypes.float
  assert max(dtypes.half, dtypes.char) is dtypes.float16


def test_a_dtype_does_not_compare_with_other_things():
  with pytest.raises(TypeError):
    assert dtypes.int8 < 3


@pytest.mark.parametrize("value", [[], (), [[]], [[], []]], ids=str)
def test_from_py_of_an_empty_sequence_is_the_default_float(value):
  assert dtypes.from_py(value) == dtypes.default_float
  assert Tensor(value).dtype == dtypes.default_float and Tensor(value).shape == np.array(value).shape


def test_struct_formats_are_those_of_the_struct_module():
  for d in SIZED:
    if d != dtypes.bfloat16:
      assert np.dtype(d.fmt).itemsize == d.itemsize and np.dtype(d.fmt) == NP_DTYPE[d]
  assert dtypes.bool.fmt == "?" and dtypes.int64.fmt == "q" and dtypes.bfloat16.fmt is None


def test_from_py_of_what_has_no_dtype_is_a_runtime_error_too():
  with pytest.raises(RuntimeError, match="NoneType"):
    dtypes.from_py(None)
  with pytest.raises(TypeError, match="object"):
    dtypes.from_py(object())


@pytest.mark.parametrize("value, expected", [("HALF", "float16"), ("bfloat16", "bfloat16"), ("double", "float64")])
def test_default_float_from_the_environment(value, expected):
  code = "from refgrad import Tensor; print(Tensor([1.5]).dtype.name, Tensor.rand(2).dtype.name)"
  out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "DEFAULT_FLOAT": value},
                       capture_output=True, text=True, check=True).stdout.split()
  assert out == [expected, expected]


def test_default_float_that_is_not_a_float_is_refused():
  run = subprocess.run([sys.executable, "-c", "import refgrad"], env={**os.environ, "DEFAULT_FLOAT": "int32"},
                       capture_output=True, text=True)
  assert run.returncode != 0 and "DEFAULT_FLOAT='int32' is not a float dtype" in run.stderr
