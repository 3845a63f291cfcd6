"""Indexing: t[...], t[...] = v, gather, masked_fill and one_hot (scatter and scatter_reduce: scatter.py).

Basic indices (ints, slices with any step, None, one Ellipsis) are movement ops and copy nothing. Advanced indices
(lists, int tensors, bool masks) pick elements by value, and there is no gather primitive: an index is compared with
arange(n) along the dims it indexes only, and the hits are combined by a MAX reduce over those dims. MAX's identity,
the lowest value of the dtype, never beats a real element, so a pick is bit-exact (NaN and -0.0 included). This
costs numel(result) * n work and no memory of that size: the comparison fuses into the reducing kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from refgrad.dtype import dtypes
from refgrad.frontend import views
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.shapes import ShapeError, broadcast_shape, is_int, normalize_dim
from refgrad.uop import Ops, UOp, prod, size_sum

Shape = tuple[int, ...]


class IndexDTypeError(TypeError, RuntimeError):
  """An index or mask tensor of the wrong dtype. Catchable as TypeError, or as RuntimeError like torch's."""


def _inverse(order: list[int]) -> list[int]:
  return [order.index(i) for i in range(len(order))]


# ---- basic indexing: ints, slices, None as shrink, flip, stride and reshape, and the way back
@dataclass(frozen=True)
class BasicPlan:
  """How t[ints, slices, None] reads t: the range touched per input dim, the dims read backwards, the step per
  input dim, and the result's shape. `place` is the inverse, used by t[...] = v."""
  bounds: tuple[tuple[int, int], ...]
  flips: tuple[int, ...]
  steps: tuple[int, ...]
  out_shape: Shape

  def apply(self, t: Any) -> Any:
    out = t.shrink(self.bounds)
    if self.flips:
      out = out.flip(self.flips)
    if any(s > 1 for s in self.steps):
      out = _stride(out, self.steps)
    return out.reshape(self.out_shape)

  def place(self, x: Any, in_shape: Shape) -> Any:
    """x (of out_shape) put back where `apply` took it from, in a tensor of in_shape that is 0 elsewhere."""
    lengths = [end - start for start, end in self.bounds]
    out = x.reshape(tuple(len(range(0, n, st)) for n, st in zip(lengths, self.steps)))
    if any(s > 1 for s in self.steps):
      out = _unstride(out, self.steps, lengths)
    if self.flips:
      out = out.flip(self.flips)
    return out.pad(tuple((start, s - end) for (start, end), s in zip(self.bounds, in_shape)))


def _symbolic_slices(index: Any, shape: tuple) -> tuple[tuple, tuple] | None:
  """t[:n], t[a:n, ...] and t[:n, 0] with a symbolic size n (refgrad/symbolic_shapes.py), and t[:, :1] or t[1] of a
  tensor of symbolic shape: (the shrink they are, the shape after it with the int-indexed dims dropped), when every
  item is a slice of step 1 with non-negative bounds or an int on a dim of concrete size, and a bound or a size is
  symbolic; None otherwise (ordinary indexing)."""
  items = index if isinstance(index, tuple) else (index,)
  if len(items) > len(shape) or not all((isinstance(i, slice) and i.step in (None, 1))
                                        or (is_int(i) and isinstance(size, int)) for i, size in zip(items, shape)):
    return None
  slices = [i for i in items if isinstance(i, slice)]
  if not any(isinstance(part, UOp) for i in slices for part in (i.start, i.stop)) and \
     not any(isinstance(size, UOp) for size in shape):
    return None
  if any(not isinstance(part, UOp) and part is not None and part < 0 for i in slices for part in (i.start, i.stop)):
    raise IndexError(f"with a symbolic size, slice bounds must be non-negative, got {index}")
  bounds, out_shape = [], []
  for dim, (i, size) in enumerate(zip(items, shape)):
    if isinstance(i, slice):
      bounds.append((0 if i.start is None else i.start, size if i.stop is None else i.stop))
      out_shape.append(size_sum((bounds[-1][1], 1), (bounds[-1][0], -1)))
    else:
      at = _check_int(int(i), size, dim)
      bounds.append((at, at + 1))
  return tuple(bounds) + (None,) * (len(shape) - len(items)), tuple(out_shape) + tuple(shape[len(items):])


def _slice_bounds(s: slice, size: int) -> tuple[int, int, int]:
  for part in (s.start, s.stop, s.step):
    if part is not None and not is_int(part):
      raise TypeError(f"slice indices must be integers or None, got {part!r}")
  if s.step == 0:
    raise ValueError("slice step cannot be zero")
  return s.indices(size)


def basic_plan(shape: Shape, items: list[Any]) -> BasicPlan:
  """items: ints (already in range and non-negative), slices and None, covering a prefix of the dims."""
  bounds, flips, steps, out_shape = [], [], [], []
  dim = 0
  for item in items:
    if item is None:
      out_shape.append(1)
      continue
    if isinstance(item, slice):
      start, stop, step = _slice_bounds(item, shape[dim])
      count = len(range(start, stop, step))
      last = start + (count - 1) * step
      bounds.append((min(start, last), max(start, last) + 1) if count else (0, 0))
      if step < 0:
        flips.append(dim)
      steps.append(abs(step))
      out_shape.append(count)
    else:
      bounds.append((item, item + 1))
      steps.append(1)
    dim += 1
  rest = shape[dim:]
  return BasicPlan(tuple(bounds) + tuple((0, s) for s in rest), tuple(flips), tuple(steps) + (1,) * len(rest),
                   tuple(out_shape) + rest)


def _stride(t: Any, steps: tuple[int, ...]) -> Any:
  """Every step-th element per dim: pad each dim up to a multiple of its step, split it, keep index 0."""
  padded = t.pad(tuple((0, (-s) % st if s else 0) for s, st in zip(t.shape, steps)))
  split = [x for s, st in zip(padded.shape, steps) for x in (s // st, st)]
  picked = padded.reshape(tuple(split)).shrink(tuple((0, s) if k % 2 == 0 else (0, 1) for k, s in enumerate(split)))
  return picked.reshape(tuple(split[0::2]))


def _unstride(t: Any, steps: tuple[int, ...], lengths: list[int]) -> Any:
  """The inverse of _stride: each element followed by step-1 zeros, cut to the original length."""
  split = t.reshape(tuple(x for s in t.shape for x in (s, 1)))
  spread = split.pad(tuple(p for st in steps for p in ((0, 0), (0, st - 1))))
  flat = spread.reshape(tuple(s * st for s, st in zip(t.shape, steps)))
  return flat.shrink(tuple((0, n) for n in lengths))


# ---- parsing an index into a basic plan plus advanced indices
@dataclass(frozen=True)
class Advanced:
  """An advanced index along one dim: int values wrapped into [0, n), and which lanes were in range (None: all
  known to be, because the index came from the host and was checked)."""
  index: Any
  valid: Any


# torch reads a short list as a tuple of indices when it holds one of these (numpy's pre-1.23 rule); x[[0, [1]]] is
# x[0, [1]], while x[[0, 1]] stays one list index
_TUPLE_LIKE = (list, tuple, np.ndarray, slice, type(None), type(Ellipsis))
_TUPLE_LIKE_MAX_LEN = 32


def _index_items(index: Any) -> list[Any]:
  """The items of an index, read as torch reads them: a tuple, or a short list holding sequences, slices, None,
  ... or tensors, is a list of items; anything else is one item."""
  if isinstance(index, tuple):
    return list(index)
  if isinstance(index, list) and len(index) < _TUPLE_LIKE_MAX_LEN and \
     any(isinstance(i, (*_TUPLE_LIKE, TensorBase)) for i in index):
    return list(index)
  return [index]


def _normalize_item(item: Any) -> Any:
  """None, Ellipsis, slices and ints stay; lists, bools and arrays become numpy arrays; tensors stay tensors."""
  if item is None or item is Ellipsis or isinstance(item, slice):
    return item
  if is_int(item):
    return int(item)
  if isinstance(item, TensorBase):
    if item.dtype == dtypes.bool:
      return item.numpy()  # a mask: the result's shape depends on its values
    if not dtypes.is_int(item.dtype):
      raise IndexError(f"tensors used as indices must be int or bool tensors, got {item.dtype.name}")
    return item
  if isinstance(item, (list, tuple, np.ndarray, bool, np.bool_)):
    return _index_array(item)
  if isinstance(item, (float, np.floating)):
    raise IndexError(f"only ints, slices, None, ..., lists and int or bool tensors are valid indices, got {item!r}")
  raise TypeError(f"invalid index {item!r} of type {type(item).__name__}")


def _index_array(item: Any) -> np.ndarray:
  try:
    array = np.asarray(item)
  except (ValueError, TypeError):  # ragged, or holding tensors or other objects numpy cannot read as numbers
    raise IndexError(f"lists used as indices must be rectangular and hold only ints or bools, got {item!r}") from None
  array = array.astype(np.int64) if array.size == 0 and array.dtype != bool else array
  if array.dtype != bool and array.dtype.kind not in "iu":
    raise IndexError(f"lists used as indices must hold ints or bools, got {array.dtype} in {item!r}")
  return array


def _is_mask(item: Any) -> bool:
  return isinstance(item, np.ndarray) and item.dtype == bool


def _dims_used(item: Any) -> int:
  if item is None or item is Ellipsis:
    return 0
  return item.ndim if _is_mask(item) else 1


def _expand_ellipsis(items: list[Any], ndim: int) -> list[Any]:
  used = sum(_dims_used(i) for i in items)
  ellipses = [k for k, i in enumerate(items) if i is Ellipsis]
  if len(ellipses) > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  if used > ndim:
    raise IndexError(f"too many indices for tensor of dimension {ndim}: got {used}")
  fill = [slice(None)] * (ndim - used)
  return items[:ellipses[0]] + fill + items[ellipses[0] + 1:] if ellipses else items + fill


def _batch_anchor(advanced: list[tuple[int, Advanced]]) -> int | None:
  """torch's rule (and tinygrad's) for where the broadcast index dims go: in place of the indexed dims when these
  are next to each other once ints have removed their dims, None has added its and the Ellipsis is expanded, else
  first. A 0-d int index is an int here, as in torch (it selects; tinygrad counts a 0-d int tensor as an index
  tensor, so its x[Tensor(0), :, [1, 2]] differs). Returns the first indexed dim, or None for first.
  numpy differs: it counts ints and 0-d arrays as advanced items, and an Ellipsis apart from them separates even
  where it stands for no dims, so it puts the index dims of x[0, :, [1, 2]] first; refgrad follows torch."""
  zero_d = [d for d, a in advanced if a.index.ndim == 0]
  placed = [d for d, a in advanced if a.index.ndim]
  if not placed:
    return 0
  after_selects = [d - sum(z < d for z in zero_d) for d in placed]
  return placed[0] if after_selects == list(range(after_selects[0], after_selects[0] + len(placed))) else None


@dataclass(frozen=True)
class ParsedIndex:
  """An index as a basic plan (advanced dims kept whole) and the advanced indices with the dim of the plan's result
  each indexes; `anchor` is the indexed dim the index dims replace, or None when they go first (_batch_anchor)."""
  plan: BasicPlan
  advanced: list[tuple[int, Advanced]]
  anchor: int | None


def parse_index(t: Any, index: Any) -> ParsedIndex:
  written = [_normalize_item(i) for i in _index_items(index)]
  items = _expand_ellipsis(written, t.ndim)
  basic, advanced, dim, out_dim = [], [], 0, 0
  for item in items:
    if item is None or isinstance(item, slice):
      basic.append(item)
      dim, out_dim = dim + (item is not None), out_dim + 1
    elif isinstance(item, int):
      basic.append(_check_int(item, t.shape[dim], dim))
      dim += 1
    elif _is_mask(item) and item.ndim == 0:  # x[True] is x[None][[0]], x[False] is x[None][[]]
      basic.append(None)
      advanced.append((out_dim, _prepare(np.zeros(int(item), np.int64), 1, dim, t)))
      out_dim += 1
    else:
      for part in _mask_parts(item, t.shape, dim):
        advanced.append((out_dim, _prepare(part, t.shape[dim], dim, t)))
        basic.append(slice(None))
        dim, out_dim = dim + 1, out_dim + 1
  return ParsedIndex(basic_plan(t.shape, basic), advanced, _batch_anchor(advanced))


def _check_int(i: int, size: int, dim: int) -> int:
  if not -size <= i < size:
    raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
  return i % size


def _mask_parts(item: Any, shape: Shape, dim: int) -> list[Any]:
  """A bool mask over k dims becomes k int indices (its nonzero positions); other indices stay one."""
  if not (isinstance(item, np.ndarray) and item.dtype == bool):
    return [item]
  if item.shape != shape[dim:dim + item.ndim]:
    raise IndexError(f"the shape of the mask {item.shape} at index {dim} does not match the shape of the indexed "
                     f"tensor {shape[dim:dim + item.ndim]} (of {shape})")
  return list(np.nonzero(item))


def _prepare(index: Any, n: int, dim: int, t: Any) -> Advanced:
  if isinstance(index, np.ndarray):  # values known now: check them like torch, and wrap them on the host
    bad = (index < -n) | (index >= n)
    if bad.any():
      raise IndexError(f"index {index[bad].reshape(-1)[0]} is out of bounds for dimension {dim} with size {n}")
    wrapped = np.where(index < 0, index + n, index).astype(np.int32 if n < 2**31 else np.int64)
    return Advanced(type(t)(wrapped, device=t.device), None)
  return Advanced(*wrap_index(index.to(t.device), n, negative_wraps=True))


def wrap_index(index: Any, n: int, negative_wraps: bool) -> tuple[Any, Any]:
  """An int index tensor as int32 (int64 if needed), negative values wrapped when negative_wraps, and the mask of
  lanes in [0, n). uint64 values past int64's range turn negative in the cast, so they stay invalid."""
  wide = index.dtype.itemsize == 8 or index.dtype == dtypes.uint32 or n >= 2**31
  idx = index.cast(dtypes.int64 if wide else dtypes.int32)
  if negative_wraps and index.dtype.kind == "i":
    idx = idx.lt(0).where(idx + n, idx)
  return idx, idx.ge(0) & idx.lt(n)


# ---- advanced get and set
@dataclass(frozen=True)
class AdvancedPlan:
  """Advanced indices on some dims of y, broadcast together to `batch`. The result has the batch dims in place of
  the indexed dims from `anchor` on, or first when anchor is None (torch's rule, _batch_anchor)."""
  dims: list[int]
  rest: list[int]
  batch: Shape
  linear: Any  # one int index into the indexed dims flattened, of shape batch
  valid: Any   # bool of shape batch, or None when every index is known to be in range
  size: int    # the number of positions the linear index chooses from
  anchor: int | None

  def result_order(self) -> list[int]:
    """Permutation from (batch dims, rest dims) to the result's dims."""
    nb = len(self.batch)
    before = 0 if self.anchor is None else sum(1 for d in self.rest if d < self.anchor)
    rest = [nb + i for i in range(len(self.rest))]
    return rest[:before] + list(range(nb)) + rest[before:]

  def result_shape(self, y: Any) -> Shape:
    both = self.batch + tuple(y.shape[d] for d in self.rest)
    return tuple(both[i] for i in self.result_order())

  def batch_positions(self) -> list[int]:
    order = self.result_order()
    return [order.index(b) for b in range(len(self.batch))]

  def flat_source(self, y: Any) -> Any:
    """y with its rest dims first and the indexed dims flattened into one last dim."""
    return y.permute(self.rest + self.dims).reshape(tuple(y.shape[d] for d in self.rest) + (self.size,))

  def hits(self, extra_dims: int) -> Any:
    """linear == arange(size), of shape batch + (1,) * extra_dims + (size,)."""
    lin = self.linear.reshape(self.batch + (1,) * (extra_dims + 1))
    return lin.eq(lin.arange(self.size, dtype=lin.dtype, device=lin.device))


def advanced_plan(y: Any, parsed: ParsedIndex) -> AdvancedPlan:
  advanced = parsed.advanced
  dims = [d for d, _ in advanced]
  try:
    batch = broadcast_shape(*(a.index.shape for _, a in advanced))
  except ShapeError:
    shapes = ", ".join(str(a.index.shape) for _, a in advanced)
    raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}") from None
  sizes = [y.shape[d] for d in dims]
  size = prod(sizes)
  wide = size >= 2**31 or any(a.index.dtype == dtypes.int64 for _, a in advanced)
  linear = None
  for k, (_, a) in enumerate(advanced):
    stride = prod(sizes[k + 1:])
    term = a.index.cast(dtypes.int64 if wide else dtypes.int32) * stride if stride != 1 else a.index
    linear = term if linear is None else linear + term
  valid = None
  for _, a in advanced:
    if a.valid is not None:
      valid = a.valid if valid is None else valid & a.valid
  rest = [d for d in range(y.ndim) if d not in dims]
  return AdvancedPlan(dims, rest, batch, linear.cast(dtypes.int64 if wide else dtypes.int32)._broadcast_to(batch),
                      None if valid is None else valid._broadcast_to(batch), size, parsed.anchor)


def pick(values: Any, hit: Any, axes: Any) -> Any:
  """The value where hit is True along axes (at most one hit per lane; the dtype's lowest value if none)."""
  return hit.where(values, values._const(dtypes.min(values.dtype)))._reduce(Ops.MAX, axes)


def advanced_get(y: Any, plan: AdvancedPlan) -> Any:
  nb, nr = len(plan.batch), len(plan.rest)
  source = plan.flat_source(y)
  out = pick(source.reshape((1,) * nb + source.shape), plan.hits(nr), -1)
  if plan.valid is not None:  # out-of-range tensor indices select 0
    out = plan.valid.reshape(plan.batch + (1,) * nr).where(out, out._const(0))
  return out.permute(plan.result_order())


def advanced_set(y: Any, plan: AdvancedPlan, value: Any) -> Any:
  """y with the indexed positions set from value (the last write wins for repeated indices, like numpy). value has
  the indexed result's shape, or broadcasts to it."""
  nb, nr = len(plan.batch), len(plan.rest)
  rest_shape = tuple(y.shape[d] for d in plan.rest)
  hit = plan.hits(0)
  if plan.valid is not None:
    hit = hit & plan.valid.reshape(plan.batch + (1,))
  writer = y.arange(prod(plan.batch), dtype=dtypes.int32, device=y.device).reshape(plan.batch)
  last = hit.where(writer.reshape(plan.batch + (1,)), -1)._reduce(Ops.MAX, tuple(range(nb)))  # shape (size,)
  written = last.ge(0)
  result_shape = plan.result_shape(y)
  aligned = (1,) * (len(result_shape) - value.ndim) + value.shape
  if any(aligned[p] != 1 for p in plan.batch_positions()):
    by_batch = value._broadcast_to(result_shape).permute(_inverse(plan.result_order()))
    chosen = writer.reshape(plan.batch + (1,) * (nr + 1)).eq(last.reshape((1,) * (nb + nr) + (plan.size,)))
    new = pick(by_batch.reshape(by_batch.shape + (1,)), chosen, tuple(range(nb)))
  else:  # one value for every writer: no need to find which one wrote
    keep = [s for k, s in enumerate(aligned) if k not in plan.batch_positions()]
    new = value.reshape(tuple(keep))._broadcast_to(rest_shape).reshape(rest_shape + (1,))
  sizes = tuple(y.shape[d] for d in plan.dims)
  back = _inverse(plan.rest + plan.dims)
  return written.where(new, plan.flat_source(y)).reshape(rest_shape + sizes).permute(back)


# ---- t[index] and t[index] = v
def basic_view(t: Any, plan: BasicPlan) -> Any:
  """t[ints, slices, None] as a view of t (a write to it writes t; refgrad/frontend/views.py)."""
  return views.make_view(plan.apply(t), t, (views.INDEX, plan))


def get_index(t: Any, index: Any) -> Any:
  parsed = parse_index(t, index)
  y = basic_view(t, parsed.plan)
  return advanced_get(y, advanced_plan(y, parsed)) if parsed.advanced else y


def set_index(t: Any, index: Any, value: Any) -> None:
  """t[index] = value, lazily: a write through the view t[basic part of index], whose new value is value at the
  advanced indices (if any) and its old value elsewhere."""
  for x, what in ((t, "the tensor written"), (value, "the value")):
    if isinstance(x, TensorBase) and x.requires_grad:
      raise NotImplementedError(f"setitem: {what} (shape {x.shape}) requires grad, and setitem is not "
                                "differentiable (as in tinygrad); write a detached tensor, or build the new value "
                                "with where/pad/cat")
  if (symbolic := _symbolic_slices(index, t.shape)) is not None:
    y, adv = t.shrink(symbolic[0]).reshape(symbolic[1]), None
  else:
    parsed = parse_index(t, index)
    y = basic_view(t, parsed.plan)
    adv = advanced_plan(y, parsed) if parsed.advanced else None
  v = _value_tensor(t, value, adv.result_shape(y) if adv else y.shape)
  y.assign(advanced_set(y, adv, v) if adv else v._broadcast_to(y.shape))


def _value_tensor(t: Any, value: Any, shape: Shape) -> Any:
  """value as a tensor of t's dtype and device that broadcasts to shape (extra leading 1s are dropped)."""
  if isinstance(value, TensorBase):
    v = value.cast(t.dtype).to(t.device)
  elif isinstance(value, (bool, int, float, np.generic)):
    v = t._const(value.item() if isinstance(value, np.generic) else value)
  elif isinstance(value, (list, tuple, np.ndarray)):
    v = type(t)(value, dtype=t.dtype, device=t.device)
  else:
    raise TypeError(f"cannot assign a {type(value).__name__} to a Tensor")
  while v.ndim > len(shape) and v.shape[0] == 1:
    v = v.reshape(v.shape[1:])
  try:
    fits = broadcast_shape(v.shape, shape) == shape
  except ShapeError:
    fits = False
  if not fits:
    raise ShapeError(f"setitem: value of shape {v.shape} cannot be broadcast to the indexed shape {shape}")
  return v


# ---- shared with gather and scatter (refgrad/frontend/scatter.py)
def along_last(x: Any, d: int) -> Any:
  """x's dim d moved to a new last axis, leaving a size-1 dim in its place."""
  return x.unsqueeze(-1).transpose(d, -1)


def int_index(index: Any, what: str) -> Any:
  if not isinstance(index, TensorBase):
    raise TypeError(f"{what}: index must be a Tensor, got {type(index).__name__}")
  if not dtypes.is_int(index.dtype):
    raise IndexDTypeError(f"{what}: index must be an int tensor, got dtype {index.dtype.name}")
  return index


def check_index_fits(t: Any, index: Any, d: int, what: str) -> None:
  if index.ndim != t.ndim:
    raise ShapeError(f"{what}: index {index.shape} must have as many dims as self {t.shape}")
  if any(i > s for k, (i, s) in enumerate(zip(index.shape, t.shape)) if k != d):
    raise ShapeError(f"{what}: index {index.shape} must be no larger than self {t.shape} apart from dim {d}")


class IndexingMixin(TensorBase):
  __slots__ = ()

  def __getitem__(self, index: Any) -> Self:
    """Numpy/torch indexing: ints, slices (any step), None, ..., lists and int tensors (advanced indexing, which
    broadcast together; out-of-range values in tensors select 0), bool masks and 0-d bools. The index dims go first
    when the advanced indices are apart once ints have selected and the Ellipsis is expanded, as in torch and
    tinygrad (numpy also counts ints, and puts those of t[0, :, [1, 2]] first); a list holding lists is read as a
    tuple of indices, as in torch.

    >>> t = Tensor([[1, 2, 3], [4, 5, 6]])
    >>> t[1, ::-1].tolist()
    [6, 5, 4]
    >>> t[[0, 1, 1], [2, 0, 2]].tolist()
    [3, 4, 6]
    >>> t[:, Tensor([[0], [2]])].shape
    (2, 2, 1)
    >>> Tensor.zeros(2, 3, 4)[0, :, [1, 2]].shape
    (3, 2)
    """
    if (symbolic := _symbolic_slices(index, self.shape)) is not None:
      return self.shrink(symbolic[0]).reshape(symbolic[1])
    return get_index(self, index)

  def __setitem__(self, index: Any, value: Any) -> None:
    """t[index] = value, for any index t[index] accepts; a repeated index writes its last value. The tensor is
    realized now with its new value; if it is a view, the tensor it views is written too, and every other view of
    that tensor sees the write (as in torch), while tensors computed from the old value keep it. NotImplementedError
    if the tensor or the value requires grad (as in tinygrad).

    >>> t = Tensor([1, 2, 3, 4]).realize()
    >>> t[1:3] = 0
    >>> t[[0, -1]] = Tensor([7, 8])
    >>> t.tolist()
    [7, 0, 0, 8]
    """
    set_index(self, index, value)
    self.realize()

  def gather(self, dim: int, index: Any) -> Self:
    """out[i][j][k] = self[i][index[i][j][k]][k] for dim=1 (and so on); index has self's number of dims and may be
    smaller than self in the other dims. Out-of-range index values select 0.

    >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    d = normalize_dim(dim, self.ndim)
    index = int_index(index, "gather")
    check_index_fits(self, index, d, "gather")
    if self.ndim == 0:
      return self.reshape(1).gather(0, index.reshape(1)).reshape(())
    n = self.shape[d]
    idx, valid = wrap_index(index.to(self.device), n, negative_wraps=False)
    source = along_last(self.shrink(tuple(None if k == d else (0, s) for k, s in enumerate(index.shape))), d)
    hit = idx.unsqueeze(-1).eq(idx.arange(n, dtype=idx.dtype, device=self.device))
    out = pick(source.expand(index.shape + (n,)), hit, -1)
    return valid.where(out, out._const(0))

  def masked_fill(self, mask: Any, value: Any) -> Self:
    """value where mask (bool) is True, self elsewhere; self and mask broadcast together, as in torch and tinygrad.

    >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    """
    if not isinstance(mask, TensorBase) or mask.dtype != dtypes.bool:
      got = mask.dtype.name if isinstance(mask, TensorBase) else type(mask).__name__
      raise IndexDTypeError(f"masked_fill: mask must be a bool tensor, got {got}")
    try:
      broadcast_shape(self.shape, mask.shape)
    except ShapeError:
      raise ShapeError(f"masked_fill: mask of shape {mask.shape} does not broadcast with self's shape "
                       f"{self.shape}") from None
    if isinstance(value, TensorBase):
      if value.ndim:
        raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
      fill = value.cast(self.dtype)
    elif isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
      fill = self._const(value.item() if isinstance(value, np.generic) else value)
    else:
      raise TypeError(f"masked_fill: value must be a number or a 0-d tensor, got {type(value).__name__}")
    return mask.to(self.device).where(fill, self)

  def one_hot(self, num_classes: int = -1) -> Self:
    """A new last dim of num_classes with 1 at each value's position (default int dtype, like tinygrad);
    num_classes=-1 uses max + 1. Values outside [0, num_classes) give all zeros.

    >>> Tensor([0, 2]).one_hot(3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if not dtypes.is_int(self.dtype):
      raise IndexDTypeError(f"one_hot: expected an int tensor, got dtype {self.dtype.name}")
    if not is_int(num_classes) or num_classes < -1:
      raise ValueError(f"one_hot: num_classes must be -1 or a non-negative int, got {num_classes!r}")
    if num_classes == -1:
      if self.numel() == 0:
        raise ShapeError(f"one_hot: cannot infer the number of classes from an empty tensor of shape {self.shape}")
      num_classes = int(self.max().item()) + 1
    idx, _ = wrap_index(self, max(num_classes, 0), negative_wraps=False)
    classes = idx.arange(num_classes, dtype=idx.dtype, device=self.device)
    return idx.unsqueeze(-1).eq(classes).where(1, 0)
