"""The lazy `Tensor`: the tinygrad 0.10 Tensor API on top of the UOp graph.

A Tensor holds one UOp. Methods build new UOps; nothing runs until `realize()` (or `numpy()`, `tolist()`,
`item()`). Every method is written in terms of the primitive ops (see docs/SPEC.md), so a backend that
implements those gets the whole API.
"""
from __future__ import annotations

import math
import sys
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from refgrad import multi
from refgrad.alu import cast_python_int, exec_cast
from refgrad.buffer import Buffer, PickledValueError
from refgrad.dtype import (
  PYTHON_INT_RANGE,
  DType,
  check_python_int,
  dtypes,
  from_numpy,
  int_dtype_holding,
  least_upper_dtype,
  short_int,
  to_dtype,
)
from refgrad.execute import run_schedule
from refgrad.frontend import autograd, views
from refgrad.frontend.autograd import AutogradMixin
from refgrad.frontend.elementwise import ElementwiseMixin
from refgrad.frontend.movement import InvalidArgumentError, MovementMixin
from refgrad.frontend.nn_functional import NNFunctionalMixin
from refgrad.frontend.random import RandomMixin
from refgrad.frontend.reduce import ReduceMixin
from refgrad.frontend.scatter import ScatterMixin
from refgrad.frontend.shapes import Scalar, Shape, ShapeError, check_shape, normalize_dim, shape_args
from refgrad.frontend.sorting import SortingMixin
from refgrad.registry import Device
from refgrad.schedule import (
  ScheduleItem,
  buffer_node,
  create_schedule,
  device_parts,
  realized_buffer,
  realized_multi,
  realized_node,
  remember_realized,
)
from refgrad.symbolic_shapes import (
  bound_region,
  canonical,
  is_size_expression,
  is_symbolic_shape,
  max_shape,
  max_size,
  size_const,
  size_value,
)
from refgrad.uop import Ops, UOp, prod, size_sum


class LinspaceDTypeError(NotImplementedError, ValueError):
  """linspace into bool: torch's NotImplementedError, and tinygrad's ValueError."""


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


# Every live tensor, for TinyJit's capture (the state a captured call may read and replace): a weak reference each,
# which removes itself when its tensor dies. Adding one and the removal call no Python code (Tensor's hash is
# object's), about 0.4 us a tensor; a scan of gc.get_objects() took 0.3 s in a process of 640,000 objects.
LIVE: set[weakref.ref] = set()
_remember, _forget = LIVE.add, LIVE.discard


class Tensor(ElementwiseMixin, MovementMixin, ScatterMixin, SortingMixin, ReduceMixin, NNFunctionalMixin,
             RandomMixin, AutogradMixin):
  """A lazily evaluated n-dimensional array on a device."""
  __slots__ = ("_uop", "_view", "_requires_grad", "grad", "__weakref__")

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    self._requires_grad, self.grad = None, None
    self._view: views.ViewLink | None = None
    if isinstance(data, Tensor) and device is not None:  # a tensor keeps its device unless one is given
      data = data.to(device)
    self.uop = _node_of(data, Device.canonicalize(device), to_dtype(dtype) if dtype is not None else None)
    if requires_grad is not None:  # after the node: only float tensors may want gradients
      self.requires_grad = requires_grad
    _remember(weakref.ref(self, _forget))

  @classmethod
  def _from(cls, uop: UOp) -> Tensor:
    """Wrap a graph node (no checks, no device lookup): what every method returns."""
    t = object.__new__(cls)
    t._uop, t._view, t._requires_grad, t.grad = uop, None, None, None
    _remember(weakref.ref(t, _forget))
    # the WeakSets' own sets of references: their truth costs no Python call, as len() does. GRAD_NODES too: in
    # `x = Tensor(a, requires_grad=True) * 2 + 1` the leaf is gone before `+ 1` runs, and x wants gradients
    if autograd.WANT_GRAD.data or autograd.GRAD_NODES.data:
      autograd.COMPUTED.add(t)
    return t

  @property
  def uop(self) -> UOp:
    """The graph node of this tensor's value. A view's node is made again when its base's changed
    (refgrad/frontend/views.py)."""
    link = self._view
    return self._uop if link is None or link.seen == views.CLOCK.ticks else link.sync(self)

  @uop.setter
  def uop(self, node: UOp) -> None:
    """Replace the node; this writes nothing through a view (realize and the jit set nodes of the same value)."""
    views.CLOCK.ticks += 1
    self._uop = node
    if (link := self._view) is not None and (base := link.base()) is not None:
      link.synced(base)

  def _const(self, value: Scalar, dtype: DType | None = None) -> Tensor:
    """A 0-d constant on this tensor's device, of this tensor's dtype unless given."""
    return self._from(_const_uop(value, dtype or self.dtype, self.device))

  # ---- properties
  @property
  def shape(self) -> Shape:
    """The size of each dim.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shape
    (2, 3)
    """
    link = self._view  # the uop getter, inlined: read by every op
    return (self._uop if link is None or link.seen == views.CLOCK.ticks else link.sync(self)).shape

  @property
  def dtype(self) -> DType:
    """The element type.

    >>> Tensor([1.5]).dtype
    dtypes.float32
    """
    link = self._view  # the uop getter, inlined: read by every op
    return (self._uop if link is None or link.seen == views.CLOCK.ticks else link.sync(self)).dtype

  @property
  def device(self) -> str:
    """The name of the device that holds (or will compute) the data.

    >>> Tensor([1], device="PYTHON").device
    'PYTHON'
    """
    link = self._view  # the uop getter, inlined: read by every op
    return (self._uop if link is None or link.seen == views.CLOCK.ticks else link.sync(self)).device

  @property
  def ndim(self) -> int:
    """The number of dims.

    >>> Tensor([[1], [2]]).ndim
    2
    """
    return len(self.shape)

  def numel(self) -> int:
    """The number of elements.

    >>> Tensor.zeros(2, 3).numel()
    6
    """
    return prod(self.shape)

  def element_size(self) -> int:
    """Bytes per element.

    >>> Tensor([1], dtype=dtypes.int16).element_size()
    2
    """
    return self.dtype.itemsize

  def nbytes(self) -> int:
    """Bytes of all elements.

    >>> Tensor.zeros(2, 3).nbytes()
    24
    """
    return self.numel() * self.element_size()

  def size(self, dim: int | None = None) -> Shape | int:
    """The shape, or the size of one dim.

    >>> Tensor.zeros(2, 3).size(-1)
    3
    """
    if dim is None:
      return self.shape
    d = normalize_dim(dim, self.ndim)
    if self.ndim == 0:  # normalize_dim lets a 0-d tensor name dim 0 or -1, but it has no size to give
      raise IndexError(f"size: dim {dim} of a 0-d tensor, which has no dims")
    return self.shape[d]

  def is_floating_point(self) -> bool:
    """True for float dtypes.

    >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
    (True, False)
    """
    return dtypes.is_float(self.dtype)

  def __len__(self) -> int:
    if self.ndim == 0:
      raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __iter__(self) -> Iterator[Tensor]:
    """The tensor's rows (self[0], self[1], ...); a 0-d tensor raises TypeError, as in torch and numpy (Python's
    fallback through __getitem__ would yield nothing)."""
    if self.ndim == 0:
      raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(len(self)))

  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous; use .item(), .any() or .all()")

  def __repr__(self) -> str:
    return f"<Tensor {self.shape} {self.dtype} on {self.device}>"

  __hash__ = object.__hash__  # identity, as == is elementwise; object's own, so hashing calls no Python code

  # ---- creation
  @staticmethod
  def full(shape: Any, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None,
           **kwargs: Any) -> Tensor:
    """A tensor of the given shape filled with fill_value (its dtype from the value unless given). Costs no memory
    until a kernel reads it.

    >>> Tensor.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    shape = check_shape(shape_args((shape,)) if not isinstance(shape, (tuple, list)) else tuple(shape), "full")
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    const = Tensor(_const_uop(fill_value, dt, Device.canonicalize(device)))
    return Tensor(const.reshape((1,) * len(shape)).expand(shape).uop, **kwargs)  # kwargs: requires_grad

  @staticmethod
  def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    """Zeros of the given shape (default float dtype).

    >>> Tensor.zeros(2, 3).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return Tensor.full(shape_args(shape), 0, dtype or dtypes.default_float, device, **kwargs)

  @staticmethod
  def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    """Ones of the given shape (default float dtype).

    >>> Tensor.ones((2,), dtype=dtypes.int8).tolist()
    [1, 1]
    """
    return Tensor.full(shape_args(shape), 1, dtype or dtypes.default_float, device, **kwargs)

  @staticmethod
  def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    """A tensor with an uninitialized buffer.

    >>> Tensor.empty(2, 3, dtype=dtypes.int16).shape
    (2, 3)
    """
    shape = check_shape(shape_args(shape), "empty")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    device = Device.canonicalize(device)
    if isinstance(device, tuple):
      return Tensor(multi.multi([Tensor.empty(*shape, dtype=dt, device=d).uop for d in device], None, None), **kwargs)
    return Tensor(buffer_node(Buffer(device, prod(max_shape(shape)), dt), shape), **kwargs)

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
             device: str | None = None, **kwargs: Any) -> Tensor:
    """start, start + step, ... up to but excluding stop (one argument: 0 .. stop-1). Ints give default_int, any
    float gives default_float.

    >>> Tensor.arange(5).tolist(), Tensor.arange(1, 2, 0.25).tolist()
    ([0, 1, 2, 3, 4], [1.0, 1.25, 1.5, 1.75])
    """
    if stop is None:
      start, stop = 0, start
    if step == 0:
      raise InvalidArgumentError("arange: step must be nonzero")
    if is_size_expression(start) or is_size_expression(stop):
      return _symbolic_arange(start, stop, step, dtype, device, **kwargs)
    floats = any(isinstance(v, (float, np.floating)) for v in (start, stop, step))  # np.float32(2.5) too
    if floats:  # the count in float64, as torch: np.float32 arithmetic rounded 0.3f / 0.1f to 3, one element short
      start, stop, step = (float(v) if isinstance(v, np.floating) else v for v in (start, stop, step))
    if floats and not math.isfinite((stop - start) / step):
      raise InvalidArgumentError(f"arange: unsupported range {start} -> {stop} with step {step}")
    # ints: exact ceil division (a float quotient rounds (2**60 + 1) / 2**58 down to 4.0, losing the last element)
    count = max(0, math.ceil((stop - start) / step) if floats else -((start - stop) // step))
    if floats:
      dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
      return Tensor(start + step * np.arange(count, dtype=np.float64), dtype=dt, device=device, **kwargs)
    # ints: exact in Python or int64, then held, wrapped or rounded once to a float dtype
    last = start + step * (count - 1) if count else start
    dt = to_dtype(dtype) if dtype is not None else int_dtype_holding(min(start, last), max(start, last))
    if count and PYTHON_INT_RANGE[0] <= min(start, last) and max(start, last) < 2**63:
      return Tensor(start + step * np.arange(count, dtype=np.int64), dtype=dt, device=device, **kwargs)
    return Tensor([start + step * i for i in range(count)], dtype=dt, device=device, **kwargs)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None,
          **kwargs: Any) -> Tensor:
    """The n x m identity matrix (m defaults to n).

    >>> Tensor.eye(2, 3, dtype=dtypes.int32).tolist()
    [[1, 0, 0], [0, 1, 0]]
    """
    m = n if m is None else m
    check_shape((n, m), "eye")
    rows = Tensor.arange(n, device=device).reshape(n, 1)
    cols = Tensor.arange(m, device=device).reshape(1, m)
    return Tensor((rows == cols).cast(to_dtype(dtype) if dtype else dtypes.default_float).uop, **kwargs)

  @staticmethod
  def linspace(start: Scalar, stop: Scalar, steps: int, dtype: DType | str | None = None, device: str | None = None,
               **kwargs: Any) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included (computed like torch: the first half counts
    up from start, the second half down from stop).

    >>> Tensor.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool):
      raise TypeError(f"linspace: steps must be an int, got {type(steps).__name__}")
    if steps < 0:
      raise ShapeError(f"linspace: number of steps must be non-negative, got {steps}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dt == dtypes.bool:
      raise LinspaceDTypeError("linspace: dtype bool is not supported (as in torch and tinygrad)")
    step = (stop - start) / (steps - 1) if steps > 1 else 0.0
    i = np.arange(steps, dtype=np.float64)
    values = np.where(i < steps // 2, start + step * i, stop - step * (steps - 1 - i)) if steps > 1 else i + start
    values = np.trunc(values) if dt.kind in "iu" else values  # ints truncate toward zero, as in torch
    return Tensor(values, dtype=dt, device=device, **kwargs)  # rounded once (bfloat16 too), by the CAST

  def full_like(self, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None,
                **kwargs: Any) -> Tensor:
    """A tensor of self's shape (and dtype and device, unless given) filled with fill_value.

    >>> Tensor([[1, 2, 3]]).full_like(7).tolist()
    [[7, 7, 7]]
    """
    return Tensor.full(self.shape, fill_value, dtype or self.dtype, device or self.device, **kwargs)

  def zeros_like(self, **kwargs: Any) -> Tensor:
    """Zeros of self's shape (dtype and device as self unless given).

    >>> Tensor([1.5, 2.5]).zeros_like(dtype=dtypes.int8).tolist()
    [0, 0]
    """
    return self.full_like(0, **kwargs)

  def ones_like(self, **kwargs: Any) -> Tensor:
    """Ones of self's shape (dtype and device as self unless given).

    >>> Tensor([True, False]).ones_like().tolist()
    [True, True]
    """
    return self.full_like(1, **kwargs)

  @staticmethod
  def from_uop(uop: UOp, **kwargs: Any) -> Tensor:
    """Wrap a graph node.

    >>> Tensor.from_uop(Tensor([1, 2]).uop).tolist()
    [1, 2]
    """
    return Tensor(uop, **kwargs)

  @staticmethod
  def from_blob(ptr: int, shape: Any, dtype: DType | str | None = None, device: str | None = None,
                **kwargs: Any) -> Tensor:
    """A tensor made from `prod(shape)` elements in host memory at address ptr. The memory is copied now, so it
    may be freed afterwards (tinygrad shares it instead).

    >>> import numpy as np
    >>> a = np.array([1.5, 2.5], dtype=np.float32)
    >>> Tensor.from_blob(a.ctypes.data, (2,), dtype=dtypes.float32).tolist()
    [1.5, 2.5]
    """
    import ctypes
    if not isinstance(ptr, int) or isinstance(ptr, bool) or ptr <= 0:
      raise TypeError(f"from_blob: ptr must be a (non-null) memory address int, got {ptr!r}")
    shape = check_shape(shape_args((shape,)) if not isinstance(shape, (tuple, list)) else tuple(shape), "from_blob")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    nbytes = prod(shape) * dt.itemsize  # Python ints: a shape cannot wrap around to a small byte count
    if nbytes > sys.maxsize or any(s > sys.maxsize for s in shape):
      raise ShapeError(f"from_blob: shape {shape} of {dt.name} has a size or byte count past {sys.maxsize}, the most "
                       f"an array can have")
    raw = (ctypes.c_char * nbytes).from_address(ptr)
    return Tensor(np.frombuffer(raw, dtype=dt.np).reshape(shape).copy(), device=device, **kwargs)

  # ---- realizing and reading data
  def schedule(self, *others: Tensor) -> list[ScheduleItem]:
    """The kernels that realizing these tensors would run (nothing runs).

    >>> len((Tensor([1, 2]) + 1).schedule())
    1
    """
    items, _ = create_schedule([t.uop for t in (self, *others)])
    return items

  def schedule_with_vars(self, *others: Tensor) -> tuple[list[ScheduleItem], dict[UOp, int]]:
    """The kernels that realizing these tensors would run, and the value of each Variable bound in them. Each kernel
    is compiled for its Variables, not their values: `refgrad.execute.run_schedule(items, var_vals)` runs it for
    any values in their ranges.

    >>> from refgrad import Variable
    >>> n = Variable("n", 1, 8)
    >>> items, var_vals = Tensor.ones(8, 2).shrink(((0, n.bind(3)), None)).sum(0).schedule_with_vars()
    >>> len(items), var_vals[n]
    (1, 3)
    """
    items = self.schedule(*others)
    var_vals: dict[UOp, int] = {}
    for item in items:
      var_vals.update(item.var_vals)
    return items, var_vals

  def kernelize(self, *others: Tensor) -> Tensor:
    """tinygrad 0.10.3's step that groups a graph into kernels without running them. refgrad groups kernels when a
    tensor is realized, so this changes nothing; returns self.

    >>> t = Tensor([1, 2]) + 1
    >>> t.kernelize() is t, t.tolist()
    (True, [2, 3])
    """
    return self

  def realize(self, *others: Tensor) -> Tensor:
    """Run the kernels that compute these tensors; each then holds a buffer. Returns self.

    >>> t = (Tensor([1, 2]) * 2).realize()
    >>> len(t.schedule())
    0
    """
    tensors = views.with_written_bases((self, *others))  # a write through a view lands in its base's buffer
    lowered = device_parts([t.uop for t in tensors])
    items, buffers = create_schedule(lowered)
    run_schedule(items)  # if this raises, no tensor has been changed
    remember_realized(buffers)
    keep_history = self._keep_history(tensors)
    # a tensor computed from a leaf that is gone still wants gradients, as tinygrad's: it becomes a leaf of its own.
    # Only such leaves' nodes are looked for: one that leads to a live tensor wanting gradients keeps its graph
    from_gone_leaf = autograd.computed_from(autograd.orphaned_grad_nodes(), [t.uop for t in tensors])
    for t, node, keep, wants in zip(tensors, lowered, keep_history, from_gone_leaf):
      value = realized_node(node, buffers)
      if node.op is Ops.MULTI:
        remember_realized({t.uop: value})
      elif node is not t.uop:  # lowered from several devices (a gather): the tensor's own node is computed too
        remember_realized({t.uop: realized_buffer(value)})
      if not keep:
        t.uop = value
        if wants and t._requires_grad is None:
          t.requires_grad = True
    views.forget_written(tensors)
    return self

  def _buffer(self) -> Buffer:
    if isinstance(self.device, tuple):  # over several devices: gathered on the first
      return self.to(self.device[0])._buffer()
    self.realize()
    return realized_buffer(self.uop)

  def __reduce__(self) -> tuple:
    """Pickled as its values (realized), shape, dtype, device and requires_grad; a symbolic shape keeps its bound
    Variables; a tensor over several devices keeps its split axis and each device's part. The gradient and the graph
    are not kept."""
    values = self.realize().numpy().tobytes()
    return _unpickle, (values, self.shape, self.dtype, self.device, self.requires_grad, self._shard_layout())

  def _shard_layout(self) -> tuple[int, tuple[int, ...]] | None:
    """The split axis of a realized tensor over several devices and each device's size along it; None if it is on
    one device or whole on each."""
    node = realized_multi(self.uop) if isinstance(self.device, tuple) else None
    if node is None or node.arg[0] is None:
      return None
    axis, bounds = node.arg
    return axis, tuple(end - start for start, end in bounds)

  def numpy(self) -> np.ndarray:
    """The values as a numpy array (realizes).

    >>> Tensor([[1, 2]]).numpy()
    array([[1, 2]], dtype=int32)
    """
    if is_symbolic_shape(self.shape):  # the buffer is laid out for the largest sizes: take the bound ones
      return bound_region(self._buffer().numpy(), self.shape).copy()
    return self._buffer().numpy().reshape(self.shape)

  def tolist(self) -> Any:
    """The values as nested Python lists (realizes).

    >>> Tensor([[True], [False]]).tolist()
    [[True], [False]]
    """
    return self.numpy().tolist()

  def item(self) -> Scalar:
    """The one value of a one-element tensor, as a Python scalar.

    >>> Tensor([[2.5]]).item()
    2.5
    """
    if self.numel() != 1:
      raise ShapeError(f"item() needs a tensor with one element, got shape {self.shape}")  # torch: RuntimeError
    return self.numpy().reshape(()).item()

  def data(self) -> memoryview:
    """The values as a memoryview (realizes).

    >>> Tensor([1, 2]).data().tolist()
    [1, 2]
    """
    if self.dtype.fmt is None:
      raise TypeError(f"memoryview cannot hold {self.dtype.name}; use numpy()")
    # the struct format tinygrad gives ('q' for int64, where numpy's own memoryview says 'l'), in the tensor's shape
    return memoryview(np.array(self.numpy(), order="C").view(self.dtype.fmt))

  def contiguous(self) -> Tensor:
    """The same values, computed into a buffer of their own when realized (a kernel boundary).

    >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
    [[1, 3], [2, 4]]
    """
    return Tensor._from(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))  # _from: a computed tensor, given .grad

  def to(self, device: str | tuple[str, ...]) -> Tensor:
    """A copy on another device (self if it is already there). A tensor over several devices is gathered; a tuple
    of devices gives a copy on each (shard with axis None).

    >>> Tensor([1, 2]).to("PYTHON").device
    'PYTHON'
    """
    device = Device.canonicalize(device)
    if device == self.device:
      return self
    if isinstance(device, tuple):
      return self.shard(device)
    return Tensor._from(UOp(Ops.COPY, self.dtype, (self.uop,), device))

  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None,
            splits: tuple[int, ...] | None = None) -> Tensor:
    """This tensor over several devices: split along `axis` (device i holds the i-th range; as even as possible,
    or the sizes in `splits`), or a whole copy on each with axis None. Ops on it run on every device, with copies
    between them where an op needs data from another (a sum over the split axis adds every device's partial sum).

    >>> t = Tensor.arange(6).reshape(2, 3).shard(("PYTHON", "PYTHON:1"), axis=1)
    >>> t.device, t.shape, (t * 10).sum(1).tolist()
    (('PYTHON', 'PYTHON:1'), (2, 3), [30, 120])
    """
    devices = Device.canonicalize(tuple(devices) if isinstance(devices, list) else devices)
    if not isinstance(devices, tuple):
      raise TypeError(f"shard: devices must be a tuple of device names, got {devices!r}")
    if is_symbolic_shape(self.shape):
      raise NotImplementedError(f"shard: a tensor of symbolic shape {self.shape} cannot be sharded yet")
    if axis is None:
      if splits is not None:
        raise ValueError("shard: splits need an axis to split")
      return Tensor(multi.multi([self._part_on(d, None) for d in devices], None, None),
                    requires_grad=self.requires_grad)
    axis = normalize_dim(axis, self.ndim)
    bounds = multi.split_bounds(self.shape[axis], len(devices), None if splits is None else tuple(splits))
    parts = [self._part_on(d, (axis, lo, hi)) for d, (lo, hi) in zip(devices, bounds)]
    return Tensor(multi.multi(parts, axis, bounds), requires_grad=self.requires_grad)

  def _part_on(self, device: str, split: tuple[int, int, int] | None) -> UOp:
    """The node of one device's part of a shard: the range start:end of an axis of self (all of it for None)."""
    return multi.copy_to(self.uop if split is None else multi.shrink_axis(self.uop, *split), device)

  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None,
             splits: tuple[int, ...] | None = None) -> Tensor:
    """shard in place: this tensor becomes its shard over `devices`; returns self.

    >>> w = Tensor.ones(2, 2)
    >>> w.shard_(("PYTHON", "PYTHON:1")).device
    ('PYTHON', 'PYTHON:1')
    """
    return self._rebind(self.shard(devices, axis, splits).uop)

  def to_(self, device: str) -> Tensor:
    """Move this tensor to another device, in place; returns self.

    >>> t = Tensor([1, 2])
    >>> t.to_("PYTHON") is t, t.device
    (True, 'PYTHON')
    """
    return self.replace(self.to(device))

  def clone(self) -> Tensor:
    """A copy with a buffer of its own; it keeps requires_grad and a copy of .grad, as tinygrad's (gradients flow
    back through it, as torch's).

    >>> Tensor([1, 2]).clone().tolist()
    [1, 2]
    """
    out = Tensor(self.contiguous().uop, requires_grad=self.requires_grad)
    if self.grad is not None:
      out.grad = self.grad.clone()
    return out

  def detach(self) -> Tensor:
    """The same values, cut off from autograd. A view, as in torch: writing it writes self.

    >>> Tensor([1.0], requires_grad=True).detach().requires_grad is None
    True
    """
    return self._movement(Ops.DETACH, None)

  def assign(self, x: Any) -> Tensor:
    """Give this tensor x's value (x: a tensor of the same shape, dtype and device, or data to make one); returns
    self. Lazy, like every op. Tensors computed from self's old value keep that value; views of self see the new
    one; if self is a view, the tensor it views gets the new values in the region self covers (as in torch).

    >>> t = Tensor([1, 2, 3])
    >>> t.assign(t * 10).tolist()
    [10, 20, 30]
    >>> t[:2].assign(Tensor([0, 0])).tolist(), t.tolist()
    ([0, 0], [0, 0, 30])
    """
    if not isinstance(x, Tensor):
      x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape:
      raise ShapeError(f"assign: shape {x.shape} does not match the tensor's shape {self.shape}")
    if x.dtype != self.dtype:
      raise TypeError(f"assign: dtype {x.dtype.name} does not match the tensor's dtype {self.dtype.name}")
    if x.device != self.device:
      raise RuntimeError(f"assign: device {x.device} does not match the tensor's device {self.device}")
    views.write(self, x.uop)
    return self

  def replace(self, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:
    """Make this tensor hold x's data (same shape unless allow_shape_mismatch; dtype and device may differ); returns
    self. Unlike assign, this writes nothing through a view: a view that is replaced is a tensor of its own from
    then on.

    >>> t = Tensor([1, 2])
    >>> t.replace(Tensor([0.5, 1.5])).dtype
    dtypes.float32
    """
    if not isinstance(x, Tensor):
      raise TypeError(f"replace: expected a Tensor, got {type(x).__name__}")
    if x.shape != self.shape and not allow_shape_mismatch:
      raise ShapeError(f"replace: shape {x.shape} does not match the tensor's shape {self.shape}")
    return self._rebind(x.uop)

  def _rebind(self, node: UOp) -> Tensor:
    """Hold `node` from now on, as a tensor of its own: a view stops following the tensor it viewed."""
    self._view = None
    self.uop = node
    views.pin_views(self)
    return self

  # numpy's operators defer to ours (np.float32(0.5) + t is t.__radd__, a Tensor), as torch's do; np.asarray(t) still
  # reads the data through __array__
  __array_priority__ = 1000

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    return self.numpy() if dtype is None else self.numpy().astype(dtype)


def _node_of(data: Any, device: str | tuple[str, ...], dtype: DType | None) -> UOp:
  """The graph node of a Tensor made from data: a node, a tensor, a Python or numpy scalar, a nested list, an array
  or bytes."""
  if is_size_expression(data):
    return _size_node(data, dtype or dtypes.default_int, device)
  if isinstance(data, UOp):
    return data if dtype is None or data.dtype == dtype else data.cast(dtype)
  if isinstance(data, Tensor):
    return data.uop if dtype is None else data.cast(dtype).uop
  if isinstance(data, (bool, int, float, np.bool_, np.integer, np.floating)):
    dt = dtype or (from_numpy(type(data)) if isinstance(data, np.generic) else dtypes.from_py(data))
    return _const_uop(data, dt, device)
  array = _to_numpy(data, dtype)
  if isinstance(device, tuple):  # on several devices: a copy on each
    return Tensor(array, device=device[0]).shard(device).uop
  return buffer_node(Buffer(device, array.size, from_numpy(array.dtype)).copyin(array), array.shape)


def _unpickle(values: bytes, shape: tuple, dtype: DType, device: Any, requires_grad: bool | None,
              layout: tuple[int, tuple[int, ...]] | None = None) -> Tensor:
  _check_pickled_tensor(values, shape, dtype, requires_grad)
  whole = Tensor(np.frombuffer(values, dtype=dtype.np), device=device[0] if layout else device, dtype=dtype)
  t = whole.reshape(shape) if whole.shape != shape else whole
  if layout:
    t = t.shard(device, axis=layout[0], splits=layout[1]).realize()
  t.requires_grad = requires_grad
  return t


def _check_pickled_tensor(values: Any, shape: Any, dtype: Any, requires_grad: Any) -> None:
  """Refuse a pickled tensor whose values do not fill its shape exactly, or whose parts are of the wrong types (a
  corrupt or crafted pickle). A symbolic shape's count is checked by the reshape to it."""
  if not isinstance(shape, tuple) or not all(isinstance(s, UOp) or (type(s) is int and s >= 0) for s in shape):
    raise PickledValueError(f"unpickling a Tensor: shape {shape!r} is not a tuple of non-negative ints")
  if requires_grad is not None and type(requires_grad) is not bool:
    raise PickledValueError(f"unpickling a Tensor: requires_grad {requires_grad!r} is not None, True or False")
  if not isinstance(values, bytes) or not isinstance(dtype, DType):
    raise PickledValueError(f"unpickling a Tensor: its values ({type(values).__name__}) and dtype {dtype!r} are not "
                            f"bytes and a DType")
  if all(isinstance(s, int) for s in shape) and len(values) != prod(shape) * dtype.itemsize:
    raise PickledValueError(f"unpickling a Tensor of shape {shape} and dtype {dtype.name}: its values are "
                            f"{len(values)} bytes, not {prod(shape) * dtype.itemsize}")


def _symbolic_arange(start: Any, stop: Any, step: Any, dtype: DType | str | None, device: str | None,
                     **kwargs: Any) -> Tensor:
  """arange whose start or stop is a size of bound Variables: its length is symbolic too, so it is the start of a
  concrete arange as long as the largest length, shrunk to the bound one."""
  if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
    raise TypeError(f"arange: with a symbolic start or stop the step must be a positive int, got {step!r}")
  length = size_sum((stop, 1), (start, -1))
  length = canonical(length if step == 1 else (length + (step - 1)) // step)
  if size_value(length) < 0:
    raise ValueError(f"arange: stop {stop} is below start {start} at the bound values")
  dt = to_dtype(dtype) if dtype is not None else dtypes.default_int
  steps = Tensor.arange(max_size(length), dtype=dt, device=device).shrink(((0, length),))
  return Tensor((steps * step + start).uop, **kwargs)


def _size_node(size: UOp, dtype: DType, device: str | tuple[str, ...]) -> UOp:
  """A 0-d tensor holding the value of an expression of bound Variables (`Tensor(v)`, `t * v`)."""
  size_value(size)  # a ValueError naming a Variable that is not bound
  if isinstance(device, tuple):
    raise NotImplementedError("a tensor of a Variable's value on several devices")
  return size_const(canonical(size), dtype, device)


def _const_uop(value: Scalar, dtype: DType, device: str | tuple[str, ...]) -> UOp:
  """Every Python number a Tensor method takes ends here: an int wraps into an integer dtype but must fit 64 bits,
  and one too large for a float is refused rather than made inf by Python's float()."""
  if isinstance(value, int) and not isinstance(value, bool):
    if dtype.kind in "iu":
      check_python_int(value)
    elif dtype.kind == "f" and abs(value) > sys.float_info.max:
      raise OverflowError(f"Python int {short_int(value)} is too large for {dtype.name} (or any float dtype)")
  return multi.const_on(dtype, value, device)


def _to_numpy(data: Any, dtype: DType | None) -> np.ndarray:
  if data is None:  # tinygrad's empty tensor: no elements, shape (0,)
    data = []
  if isinstance(data, bytes):
    array = np.frombuffer(data, dtype=np.uint8)
    return array if dtype is None else array.view(dtype.np)
  if isinstance(data, np.ndarray):
    if not data.dtype.isnative:  # big-endian data: the same values in the host's byte order
      data = data.astype(data.dtype.newbyteorder("="))
    try:
      from_numpy(data.dtype)  # TypeError for dtypes refgrad lacks
    except TypeError:
      if dtype is None:
        raise
      return data.astype(dtype.np)
    # the CAST of docs/SPEC.md, rounding once (numpy's ml_dtypes rounds float64 and int64 to bfloat16 twice)
    return data if dtype is None else exec_cast(data, dtype)
  if isinstance(data, (list, tuple)):
    data = _arrays_as_lists(data)
    shape, kind = _nested_shape_and_kind(data)
    if kind.kind in "iu" and (dtype is None or dtype.kind in "iu"):
      return _python_ints(data, dtype).reshape(shape)
    if kind.kind in "iu" and dtype.kind == "f":  # rounded once from the exact ints, as Tensor(ints).cast(dtype)
      return _python_ints_as_floats(data, dtype).reshape(shape)
    dt = dtype or kind
    if dt.kind in "iu" or dt == dtypes.bfloat16:  # through float64, then the CAST: bfloat16 rounded once
      return exec_cast(np.array(data, dtype=np.float64).reshape(shape), dt)
    return np.array(data, dtype=dt.np).reshape(shape)
  raise TypeError(f"cannot make a Tensor from {type(data).__name__}")


def _arrays_as_lists(data: Any) -> Any:
  """A nested sequence with each numpy array in it replaced by the nested list of its values: an array in a list
  counts as its values, as numpy scalars in a list do (so int arrays give default_int), and its integers are
  checked like Python ints (numpy would wrap uint64 values above int64's range silently)."""
  if isinstance(data, np.ndarray):
    return data.tolist()
  return [_arrays_as_lists(x) for x in data] if isinstance(data, (list, tuple)) else data


def _python_ints_as_floats(data: Any, dtype: DType) -> np.ndarray:
  """A nested list of Python ints as an array of the float dtype, each rounded once (past 64 bits, one by one)."""
  try:
    return exec_cast(_python_ints(data, None), dtype)
  except OverflowError:
    return np.array([cast_python_int(int(v), dtype) for v in np.array(data, dtype=object).reshape(-1)], dtype.np)


def _python_ints(data: Any, dtype: DType | None) -> np.ndarray:
  """A nested list of Python ints (and bools) as an array: of the given integer dtype, values wrapping modulo
  2**bits, or of the dtype that holds them all; OverflowError for a value no 64-bit integer holds."""
  for wide in (np.int64, np.uint64):  # numpy refuses values these do not hold
    try:
      values = np.array(data, dtype=wide)
      break
    except OverflowError:
      continue
  else:  # ints on both sides of int64's range, or past 64 bits: one at a time
    flat = np.array(data, dtype=object).reshape(-1)
    lo, hi = min(flat, default=0), max(flat, default=0)
    dt = dtype or int_dtype_holding(lo, hi)
    return np.array([dtypes.as_const(check_python_int(int(v)), dt) for v in flat], dtype=dt.np)
  if dtype is None:
    dtype = int_dtype_holding(int(values.min(initial=0)), int(values.max(initial=0)))
  return values.astype(dtype.np)
