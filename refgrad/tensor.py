"""The lazy `Tensor`: the tinygrad 0.10 Tensor API on top of the UOp graph.

A Tensor holds one UOp. Methods build new UOps; nothing runs until `realize()` (or `numpy()`, `tolist()`,
`item()`). Every method is written in terms of the primitive ops (see docs/SPEC.md), so a backend that
implements those gets the whole API.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from refgrad.device import Buffer, Device
from refgrad.dtype import DType, dtypes, from_numpy, least_upper_dtype, to_dtype
from refgrad.frontend.elementwise import ElementwiseMixin
from refgrad.frontend.movement import MovementMixin
from refgrad.frontend.reduce import ReduceMixin
from refgrad.realize import run_schedule
from refgrad.schedule import ScheduleItem, buffer_node, create_schedule
from refgrad.uop import Ops, UOp, prod

Scalar = int | float | bool
Shape = tuple[int, ...]


class ShapeError(RuntimeError, ValueError):
  """Shapes that do not fit together (broadcast, reshape, matmul). Catchable as RuntimeError or ValueError."""


# ---- argument helpers
def normalize_dim(dim: int, ndim: int) -> int:
  """A dim in [-ndim, ndim) as a non-negative index; IndexError otherwise (0-d tensors accept -1 and 0)."""
  if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
    raise TypeError(f"dim must be an int, got {type(dim).__name__}")
  size = max(ndim, 1)
  if not -size <= dim < size:
    raise IndexError(f"Dimension out of range (expected to be in range of [{-size}, {size - 1}], but got {dim})")
  return int(dim) % size


def shape_args(shape: Sequence[Any]) -> tuple:
  """Accept f(2, 3) and f((2, 3)) alike."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    return tuple(shape[0])
  return tuple(shape)


def _check_shape(shape: tuple, what: str) -> Shape:
  for s in shape:
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
      raise TypeError(f"{what}: sizes must be ints, got {shape}")
    if s < 0:
      raise ValueError(f"{what}: negative dimension in shape {shape}")
  return tuple(int(s) for s in shape)


def broadcast_shape(*shapes: Shape) -> Shape:
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for axis, sizes in enumerate(zip(*padded)):
    non_one = {s for s in sizes if s != 1}
    if len(non_one) > 1:
      raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together: "
                       f"sizes {sorted(non_one)} differ at dimension {axis}")
    out.append(non_one.pop() if non_one else 1)
  return tuple(out)


def _nested_shape_and_kind(data: Any) -> tuple[Shape, DType]:
  """Shape of a nested list and the dtype its leaves call for; ValueError for ragged lists."""
  if isinstance(data, (list, tuple)):
    if len(data) == 0:
      return (0,), dtypes.default_float
    children = [_nested_shape_and_kind(x) for x in data]
    shapes = {c[0] for c in children}
    if len(shapes) != 1:
      raise ValueError(f"ragged nested sequence: elements have different shapes {sorted(shapes)}")
    return (len(data),) + shapes.pop(), least_upper_dtype(*(c[1] for c in children))
  if isinstance(data, (bool, np.bool_)):
    return (), dtypes.bool
  if isinstance(data, (int, np.integer)):
    return (), dtypes.default_int
  if isinstance(data, (float, np.floating)):
    return (), dtypes.default_float
  raise TypeError(f"cannot make a Tensor from an element of type {type(data).__name__}: {data!r}")


class Tensor(ElementwiseMixin, MovementMixin, ReduceMixin):
  """A lazily evaluated n-dimensional array on a device."""
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
  training: bool = False
  no_grad: bool = False

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self.requires_grad, self.grad = requires_grad, None
    dtype = to_dtype(dtype) if dtype is not None else None
    device = Device.canonicalize(device)
    if isinstance(data, UOp):
      self.uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
      return
    if isinstance(data, Tensor):
      self.uop = data.uop if dtype is None else data.cast(dtype).uop
      return
    if isinstance(data, (bool, int, float, np.bool_, np.integer, np.floating)) and not isinstance(data, np.ndarray):
      dt = dtype or (from_numpy(type(data)) if isinstance(data, np.generic) else dtypes.from_py(data))
      self.uop = _const_uop(data, dt, device)
      return
    array = _to_numpy(data, dtype)
    buf = Buffer(device, array.size, from_numpy(array.dtype)).copyin(array)
    self.uop = buffer_node(buf, array.shape)

  @classmethod
  def _from(cls, uop: UOp) -> Tensor:
    """Wrap a graph node (no checks, no device lookup): what every method returns."""
    t = object.__new__(cls)
    t.uop, t.requires_grad, t.grad = uop, None, None
    return t

  def _const(self, value: Scalar, dtype: DType | None = None) -> Tensor:
    """A 0-d constant on this tensor's device, of this tensor's dtype unless given."""
    return self._from(_const_uop(value, dtype or self.dtype, self.device))

  # ---- properties
  @property
  def shape(self) -> Shape:
    return self.uop.shape

  @property
  def dtype(self) -> DType:
    return self.uop.dtype

  @property
  def device(self) -> str:
    return self.uop.device

  @property
  def ndim(self) -> int:
    return len(self.shape)

  def numel(self) -> int:
    return prod(self.shape)

  def element_size(self) -> int:
    return self.dtype.itemsize

  def nbytes(self) -> int:
    return self.numel() * self.element_size()

  def size(self, dim: int | None = None) -> Shape | int:
    return self.shape if dim is None else self.shape[normalize_dim(dim, self.ndim)]

  def is_floating_point(self) -> bool:
    return dtypes.is_float(self.dtype)

  def __len__(self) -> int:
    if self.ndim == 0:
      raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous; use .item(), .any() or .all()")

  def __repr__(self) -> str:
    return f"<Tensor {self.shape} {self.dtype} on {self.device}>"

  def __hash__(self) -> int:
    return id(self)

  # ---- creation
  @staticmethod
  def full(shape: Any, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None,
           **kwargs: Any) -> Tensor:
    shape = _check_shape(shape_args((shape,)) if not isinstance(shape, (tuple, list)) else tuple(shape), "full")
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    const = Tensor(_const_uop(fill_value, dt, Device.canonicalize(device)), **kwargs)
    return const.reshape((1,) * len(shape)).expand(shape)

  @staticmethod
  def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    return Tensor.full(shape_args(shape), 0, dtype or dtypes.default_float, device, **kwargs)

  @staticmethod
  def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    return Tensor.full(shape_args(shape), 1, dtype or dtypes.default_float, device, **kwargs)

  @staticmethod
  def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    shape = _check_shape(shape_args(shape), "empty")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    return Tensor(buffer_node(Buffer(Device.canonicalize(device), prod(shape), dt), shape), **kwargs)

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
             device: str | None = None, **kwargs: Any) -> Tensor:
    if stop is None:
      start, stop = 0, start
    if step == 0:
      raise ValueError("arange: step must be nonzero")
    default = dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.default_int
    dt = to_dtype(dtype) if dtype is not None else default
    count = max(0, math.ceil((stop - start) / step))
    values = start + step * np.arange(count, dtype=np.float64 if dt.kind == "f" else np.int64)
    return Tensor(values.astype(dt.np), device=device, **kwargs)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
          **kwargs: Any) -> Tensor:
    m = n if m is None else m
    _check_shape((n, m), "eye")
    rows = Tensor.arange(n, device=device).reshape(n, 1)
    cols = Tensor.arange(m, device=device).reshape(1, m)
    return Tensor((rows == cols).cast(to_dtype(dtype) if dtype else dtypes.default_float).uop, **kwargs)

  def full_like(self, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device)

  def zeros_like(self, **kwargs: Any) -> Tensor:
    return self.full_like(0, **kwargs)

  def ones_like(self, **kwargs: Any) -> Tensor:
    return self.full_like(1, **kwargs)

  @staticmethod
  def from_uop(uop: UOp, **kwargs: Any) -> Tensor:
    return Tensor(uop, **kwargs)

  # ---- realizing and reading data
  def schedule(self, *others: Tensor) -> list[ScheduleItem]:
    """The kernels that realizing these tensors would run (nothing runs)."""
    items, _ = create_schedule([t.uop for t in (self, *others)])
    return items

  def realize(self, *others: Tensor) -> Tensor:
    tensors = (self, *others)
    items, buffers = create_schedule([t.uop for t in tensors])
    run_schedule(items)  # if this raises, no tensor has been changed
    for t in tensors:
      t.uop = buffer_node(buffers[t.uop], t.shape)
    return self

  def _buffer(self) -> Buffer:
    self.realize()
    node = self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop
    return node.arg

  def numpy(self) -> np.ndarray:
    return self._buffer().numpy().reshape(self.shape)

  def tolist(self) -> Any:
    return self.numpy().tolist()

  def item(self) -> Scalar:
    if self.numel() != 1:
      raise ShapeError(f"item() needs a tensor with one element, got shape {self.shape}")  # torch: RuntimeError
    return self.numpy().reshape(()).item()

  def data(self) -> memoryview:
    array = self.numpy()
    if self.dtype == dtypes.bfloat16:
      raise TypeError("memoryview cannot hold bfloat16; use numpy()")
    return memoryview(np.ascontiguousarray(array)) if array.ndim else memoryview(array.reshape(1)).cast(
      array.dtype.char, ())

  def contiguous(self) -> Tensor:
    return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

  def to(self, device: str) -> Tensor:
    device = Device.canonicalize(device)
    return self if device == self.device else Tensor(UOp(Ops.COPY, self.dtype, (self.uop,), device))

  def clone(self) -> Tensor:
    return self.contiguous()

  def detach(self) -> Tensor:
    return Tensor(self.uop)

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    return self.numpy() if dtype is None else self.numpy().astype(dtype)


def _const_uop(value: Scalar, dtype: DType, device: str) -> UOp:
  return UOp.const(dtype, value).replace(src=(UOp(Ops.DEVICE, dtypes.void, (), device),))


def _to_numpy(data: Any, dtype: DType | None) -> np.ndarray:
  if isinstance(data, bytes):
    array = np.frombuffer(data, dtype=np.uint8)
    return array if dtype is None else array.view(dtype.np)
  if isinstance(data, np.ndarray):
    if dtype is None:
      from_numpy(data.dtype)  # TypeError for dtypes refgrad lacks
      return data
    return data.astype(dtype.np)
  if isinstance(data, (list, tuple)):
    shape, kind = _nested_shape_and_kind(data)
    dt = dtype or kind
    if dt.kind in "iu" and kind.kind == "f":
      return np.array(data, dtype=np.float64).reshape(shape).astype(dt.np)
    return np.array(data, dtype=np.float64 if dt == dtypes.bfloat16 else dt.np).reshape(shape).astype(dt.np)
  raise TypeError(f"cannot make a Tensor from {type(data).__name__}")


