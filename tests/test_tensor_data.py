"""Creation and data: linspace, the *_like constructors with dtype and device, from_blob, clone, to, to_, assign,
replace, detach, the properties and pickling, checked against torch and numpy."""
import pickle

import numpy as np
import pytest
import torch
from helpers import DTYPE_LIST, NP_DTYPE, TORCH_DTYPE, check, edge_values, ids, to_numpy

import refgrad.tensor
from refgrad import Device, Tensor, dtypes
from refgrad.buffer import PickledValueError, _restore_buffer
from refgrad.schedule import realized_buffer

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

LINSPACE_DTYPES = [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int8]


@pytest.mark.parametrize("dtype", LINSPACE_DTYPES, ids=ids(LINSPACE_DTYPES))
@pytest.mark.parametrize("args", [(0, 1, 5), (0, 1, 7), (-3.5, 2.25, 11), (1, 0, 4), (3, 5, 1), (0, 1, 0),
                                  (2, 2, 3), (-100, 27, 13)])
def test_linspace(args, dtype):
  """Ints are exact (computed in float64 and truncated, as torch does). Floats: refgrad rounds the float64 values
  once; torch accumulates in the dtype and its error grows with the endpoints (not with the value), so the bound is
  two ULPs of the larger endpoint."""
  want = torch.linspace(*args, dtype=TORCH_DTYPE[dtype])
  eps = float(torch.finfo(TORCH_DTYPE[dtype]).eps) if dtype.kind == "f" else 0.0
  check(Tensor.linspace(*args, dtype=dtype), want, dtype, atol=2 * eps * max(abs(args[0]), abs(args[1])))


def test_linspace_default_dtype_and_device():
  t = Tensor.linspace(0, 1, 3)
  assert t.dtype == dtypes.float32 and t.device == Device.DEFAULT
  assert Tensor.linspace(0, 1, 3, device="PYTHON").device == "PYTHON"


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int16, dtypes.uint32, dtypes.float16],
                         ids=ids([dtypes.bool, dtypes.int16, dtypes.uint32, dtypes.float16]))
def test_like_constructors_with_dtype_and_device(dtype):
  base = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).T  # a view: the result only takes its shape
  for got, fill in ((base.zeros_like(dtype=dtype), 0), (base.ones_like(dtype=dtype), 1),
                    (base.full_like(3, dtype=dtype), 3)):
    check(got, np.full((3, 2), fill).astype(NP_DTYPE[dtype]), dtype)
  moved = base.full_like(7, dtype=dtype, device="PYTHON")
  assert moved.device == "PYTHON" and base.zeros_like(device="PYTHON").device == "PYTHON"
  check(moved, np.full((3, 2), 7).astype(NP_DTYPE[dtype]), dtype)
  assert base.ones_like(requires_grad=True).requires_grad is True


@pytest.mark.parametrize("dtype", [dtypes.uint8, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float64],
                         ids=ids([dtypes.uint8, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float64]))
def test_from_blob_copies_host_memory(dtype):
  values = np.resize(edge_values(dtype), (2, 3))
  t = Tensor.from_blob(values.ctypes.data, (2, 3), dtype=dtype)
  values[...] = values[0, 0]  # the tensor holds a copy
  check(t, np.resize(edge_values(dtype), (2, 3)), dtype)
  assert Tensor.from_blob(values.ctypes.data, (0,), dtype=dtype).shape == (0,)


def test_clone_has_its_own_buffer():
  t = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3)).realize()
  c = t.clone().realize()
  assert realized_buffer(c.uop) is not realized_buffer(t.uop)
  check(c, np.arange(6).reshape(2, 3).astype(np.int32), dtypes.int32)
  check(t[:, ::-1].clone(), torch.arange(6, dtype=torch.int32).reshape(2, 3).flip(1), dtypes.int32)
  check(Tensor(2.5).clone(), torch.tensor(2.5), dtypes.float32)


def test_to_and_to_():
  t = Tensor(np.arange(4, dtype=np.float32))
  assert t.to(Device.DEFAULT) is t
  moved = t.to("PYTHON")
  assert moved.device == "PYTHON"
  check(moved, np.arange(4, dtype=np.float32), dtypes.float32)
  back = (moved * 2).to(Device.DEFAULT)
  check(back, np.arange(4, dtype=np.float32) * 2, dtypes.float32)
  same = t.to_("PYTHON")
  assert same is t and t.device == "PYTHON"
  check(t, np.arange(4, dtype=np.float32), dtypes.float32)


def test_assign_keeps_identity_and_is_lazy():
  t = Tensor(np.arange(4, dtype=np.int32)).realize()
  other, view = t * 1, t.reshape(2, 2)
  result = t.assign(t * 10 + 1)
  assert result is t and len(t.schedule()) == 1  # nothing ran yet
  check(t, np.arange(4, dtype=np.int32) * 10 + 1, dtypes.int32)
  check(other, np.arange(4, dtype=np.int32), dtypes.int32)  # tensors computed from the old value keep it
  check(view, (np.arange(4, dtype=np.int32) * 10 + 1).reshape(2, 2), dtypes.int32)  # a view shares t's data (torch)
  t.assign([7, 8, 9, 10])
  check(t, np.array([7, 8, 9, 10], np.int32), dtypes.int32)
  z = Tensor(1.5)
  z.assign(Tensor(-0.0))
  check(z, np.array(-0.0, np.float32), dtypes.float32)


def test_replace_and_detach():
  t = Tensor([1, 2, 3])
  assert t.replace(Tensor([0.5, -0.0, 2.0])) is t and t.dtype == dtypes.float32
  check(t, np.array([0.5, -0.0, 2.0], np.float32), dtypes.float32)
  with pytest.raises(RuntimeError, match=r"\(2,\)"):
    t.replace(Tensor([1.0, 2.0]))
  g = Tensor([1.0, 2.0], requires_grad=True)
  d = g.detach()
  assert d is not g and d.requires_grad is None and d.grad is None
  check(d, np.array([1.0, 2.0], np.float32), dtypes.float32)


def test_replace_with_another_shape_cuts_the_views_off():
  """allow_shape_mismatch (tinygrad's): the tensor takes the new shape; its views cannot follow a base of another
  shape, so they keep the value they had (a same-shape replace they follow)."""
  t = Tensor([1.0, 2.0, 3.0, 4.0])
  middle, whole = t[1:3], t.reshape(2, 2)
  assert t.replace(Tensor([[5, 6, 7]]), allow_shape_mismatch=True) is t
  check(t, np.array([[5, 6, 7]], np.int32), dtypes.int32)
  check(middle, np.array([2.0, 3.0], np.float32), dtypes.float32)
  check(whole, np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), dtypes.float32)
  u = Tensor([1.0, 2.0, 3.0])
  tail = u[1:]
  u.replace(Tensor([-0.0, 8.0, 9.0]), allow_shape_mismatch=True)
  check(tail, np.array([8.0, 9.0], np.float32), dtypes.float32)
  empty = Tensor.ones(0, 2)
  first = empty[:, 0]
  empty.replace(Tensor(2.5), allow_shape_mismatch=True)
  check(empty, np.array(2.5, np.float32), dtypes.float32)
  assert first.numpy().shape == (0,)


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=ids(DTYPE_LIST))
def test_properties(dtype):
  for shape in [(), (0,), (2, 0, 3), (2, 3, 4)]:
    t = Tensor.zeros(shape, dtype=dtype)
    want = torch.zeros(shape, dtype=TORCH_DTYPE.get(dtype, torch.int64))
    assert t.shape == tuple(want.shape) and t.ndim == want.ndim and t.size() == tuple(want.size())
    assert t.numel() == want.numel() and t.element_size() == dtype.itemsize == NP_DTYPE[dtype].itemsize
    assert t.nbytes() == t.numel() * dtype.itemsize
    assert t.is_floating_point() == (dtype.kind == "f") and t.dtype == dtype and t.device == Device.DEFAULT
    assert t.requires_grad is None and t.grad is None
    if shape:
      assert t.size(-1) == want.size(-1) and t.size(0) == want.size(0)
  assert to_numpy(Tensor.ones(2, dtype=dtype).numpy()).dtype == NP_DTYPE[dtype]


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=ids(DTYPE_LIST))
def test_pickle_keeps_every_bit_shape_dtype_and_device(dtype):
  """Edge values (-0.0, NaN, subnormals, extremes) come back bit for bit, also as a 0-d tensor, an empty one and a
  lazy view of a realized tensor; requires_grad is kept."""
  values = edge_values(dtype)
  t = Tensor(values)
  for made, want in ((t, values), (t[1:].flip(0), values[1:][::-1]), (Tensor(values[:1]).reshape(()), values[0]),
                     (t.reshape(1, -1)[:0], values.reshape(1, -1)[:0])):
    back = pickle.loads(pickle.dumps(made))
    assert back.device == Device.DEFAULT
    check(back, np.asarray(want), dtype)
  if dtype.kind == "f":
    assert pickle.loads(pickle.dumps(Tensor([1.0, 2.0], dtype=dtype, requires_grad=True))).requires_grad is True


class Crafted:
  """Pickles as a call of `reconstruct` with `args`: what a crafted or corrupt pickle of a refgrad object holds."""

  def __init__(self, reconstruct, *args):
    self.reduced = (reconstruct, args)

  def __reduce__(self):
    return self.reduced


F32 = dtypes.float32
BAD_TENSOR_PICKLES = {"short values": (b"\0" * 15, (4,), F32, "values are 15 bytes, not 16"),
                      "long values": (b"\0" * 32, (2, 2), F32, "values are 32 bytes, not 16"),
                      "an inferred size": (b"\0" * 16, (-1,), F32, r"shape \(-1,\) is not a tuple of non-negative"),
                      "a float size": (b"\0" * 16, (4.0,), F32, "is not a tuple of non-negative ints"),
                      "a dtype name": (b"\0" * 16, (4,), "float32", "dtype 'float32' are not bytes and a DType"),
                      "a huge size of no elements": (b"\0" * 16, (0, 2**63), F32, "values are 16 bytes, not 0")}


@pytest.mark.parametrize("case", BAD_TENSOR_PICKLES)
def test_a_pickled_tensor_whose_values_do_not_fill_its_shape_is_refused(case):
  values, shape, dtype, message = BAD_TENSOR_PICKLES[case]
  data = pickle.dumps(Crafted(refgrad.tensor._unpickle, values, shape, dtype, Device.DEFAULT, None))
  with pytest.raises(PickledValueError, match=message) as caught:
    pickle.loads(data)
  assert isinstance(caught.value, pickle.UnpicklingError) and isinstance(caught.value, ValueError)
  with pytest.raises(PickledValueError, match="requires_grad 'yes' is not None, True or False"):
    pickle.loads(pickle.dumps(Crafted(refgrad.tensor._unpickle, b"\0" * 16, (4,), F32, Device.DEFAULT, "yes")))


BAD_BUFFER_PICKLES = {"contents short of the size": (64, b"\0" * 16, None, "contents are 16 bytes, not 256"),
                      "a negative size, never allocated": (-4, None, None, "size -4 and dtype .* not a non-negative"),
                      "a mask short of the size": (4, b"\0" * 16, np.ones(2, bool), "not a bool mask of shape"),
                      "a mask of ints": (4, b"\0" * 16, np.ones(4, np.int8), "not a bool mask of shape")}


@pytest.mark.parametrize("case", BAD_BUFFER_PICKLES)
def test_a_pickled_buffer_whose_contents_do_not_fill_its_size_is_refused(case):
  size, data, undefined, message = BAD_BUFFER_PICKLES[case]
  with pytest.raises(PickledValueError, match=message):
    pickle.loads(pickle.dumps(Crafted(_restore_buffer, Device.DEFAULT, size, F32, data, undefined)))


def test_iteration_yields_rows_and_refuses_0d():
  a = np.arange(6, dtype=np.float32).reshape(3, 2)
  for got, want in zip(Tensor(a).T, torch.from_numpy(a).T, strict=True):
    check(got, want, dtypes.float32)
  assert list(Tensor.zeros(0, 2)) == [] == list(torch.zeros(0, 2))
  for t in (Tensor(1.5), torch.tensor(1.5)):  # Python's fallback through t[0] gave [] for ours
    with pytest.raises(TypeError, match="0-d"):
      list(t)


def test_size_of_a_dim_of_0d_raises_index_error():
  with pytest.raises(IndexError):
    torch.tensor(1.0).size(0)
  for dim in (0, -1):
    with pytest.raises(IndexError, match=rf"dim {dim} of a 0-d tensor"):
      Tensor(1.0).size(dim)


def test_a_tensor_made_from_a_tensor_goes_to_the_given_device():
  t = Tensor([1.5, -0.0]).realize()
  u = Tensor(t, device="PYTHON:1")  # the device was ignored
  assert u.device == "PYTHON:1"
  check(u, np.array([1.5, -0.0], np.float32), dtypes.float32)
  assert Tensor(t).device == t.device
