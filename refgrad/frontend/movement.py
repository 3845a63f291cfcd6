"""Movement methods of Tensor: they only change how elements are addressed, never copy data.

The six movement primitives (reshape, permute, expand, pad, shrink, flip) become index math in the kernels that
read them. Everything else here is built from them; `cat` (and the pad modes that need it) also uses `where`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from refgrad.dtype import dtypes, least_upper_dtype
from refgrad.frontend import views
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.indexing import IndexingMixin
from refgrad.frontend.rearrange import plan_rearrange
from refgrad.frontend.shapes import ShapeError, is_int, is_size, normalize_dim, shape_args
from refgrad.gradient import custom_gradient
from refgrad.symbolic_shapes import canonical, is_symbolic, is_symbolic_shape, shape_value, size_check, sizes_equal
from refgrad.uop import Ops, UOp, prod


class InvalidArgumentError(RuntimeError, ValueError):
  """An argument value torch rejects with RuntimeError (meshgrid's indexing); also a ValueError."""


class ZeroDimJoinError(ShapeError, IndexError):
  """cat (or unflatten) of a 0-d tensor: torch raises RuntimeError, tinygrad IndexError (it has no dim to join along,
  or to split)."""


def _copy(t: Any) -> Any:
  """t's value as a tensor that views nothing, for the results torch copies (pad, repeat, roll, cat): writing them
  must not write t. Free: refgrad values are immutable graphs."""
  return t._from(t.uop)


def _ints(values: Any, what: str) -> tuple[int, ...]:
  """An int or a sequence of ints as a tuple of Python ints; TypeError for anything else."""
  values = (values,) if not isinstance(values, (tuple, list)) else tuple(values)
  if not all(is_int(v) for v in values):
    raise TypeError(f"{what} must be ints, got {values}")
  return tuple(int(v) for v in values)


def _on_dim(ndim: int, dim: int, value: Any, other: Any = None) -> tuple:
  """A per-dim argument that is `value` on `dim` and `other` elsewhere (for shrink, pad, expand)."""
  return tuple(value if i == dim else other for i in range(ndim))


class MovementMixin(IndexingMixin):
  __slots__ = ()

  def _movement(self, op: Ops, arg: Any) -> Self:
    """The op applied to self; all but PAD make a view of self (refgrad/frontend/views.py)."""
    out = self._from(UOp(op, self.dtype, (self.uop,), arg))
    return views.make_view(out, self, (op, arg)) if op in views.VIEW_OPS else out

  # ---- the primitives
  def reshape(self, shape: Any = (), *more: Any) -> Self:
    """The same elements in a new shape, given as sizes, one sequence, or `shape=` (as tinygrad and torch name it);
    one -1 is inferred, None keeps that dim.

    >>> Tensor([1, 2, 3, 4, 5, 6]).reshape(2, -1).tolist()
    [[1, 2, 3], [4, 5, 6]]
    """
    shape = shape_args((shape, *more))
    new = [self.shape[i] if s is None and i < self.ndim else s for i, s in enumerate(shape)]
    if is_symbolic_shape(tuple(new)) or is_symbolic_shape(self.shape):
      return self._symbolic_reshape(tuple(new))
    for s in new:
      if not is_int(s):
        raise TypeError(f"reshape: sizes must be ints, got {shape}")
    new = [int(s) for s in new]
    if new.count(-1) > 1:
      raise ShapeError(f"reshape: only one dimension can be inferred (-1), got {tuple(shape)}")
    if any(s < -1 for s in new):
      raise ShapeError(f"reshape: invalid size in shape {tuple(shape)}")
    if -1 in new:
      known = prod(s for s in new if s != -1)
      if known == 0 or self.numel() % known:
        raise ShapeError(f"shape {tuple(shape)} is invalid for input of size {self.numel()}")
      new[new.index(-1)] = self.numel() // known
    new_shape = tuple(new)
    if prod(new_shape) != self.numel():
      raise ShapeError(f"shape {new_shape} is invalid for input of size {self.numel()} (shape {self.shape})")
    return self if new_shape == self.shape else self._movement(Ops.RESHAPE, new_shape)

  def _symbolic_reshape(self, new: tuple) -> Self:
    """A reshape where a size is symbolic: no -1; the sizes must multiply to the same for the bound values, as in
    tinygrad (docs/architecture.md, "Symbolic shapes": a kernel reading it computes the index from the values)."""
    if not all(is_size(s) and size_check(s >= 0) for s in new):
      raise TypeError(f"reshape: sizes must be non-negative ints or bound Variables, got {new}")
    if not size_check(sizes_equal(prod(new), prod(self.shape))):
      raise ShapeError(f"shape {new} is invalid for input of shape {self.shape} (sizes {shape_value(new)} and "
                       f"{shape_value(self.shape)} at the bound values)")
    new = tuple(canonical(s) for s in new)
    return self if new == self.shape else self._movement(Ops.RESHAPE, new)

  def view(self, *shape: Any) -> Self:
    """Same as reshape (refgrad views never need contiguous memory).

    >>> Tensor([[1, 2], [3, 4]]).view(4).tolist()
    [1, 2, 3, 4]
    """
    return self.reshape(*shape)

  def expand(self, *shape: Any) -> Self:
    """Broadcast size-1 dims to a larger size (-1 keeps a dim); new leading dims may be added.

    >>> Tensor([[1], [2]]).expand(2, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    shape = shape_args(shape)
    if len(shape) < self.ndim:
      raise ShapeError(f"expand: the number of sizes {len(shape)} in {tuple(shape)} must be >= the number of "
                           f"dims {self.ndim} of the tensor's shape {self.shape}")
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(old if s == -1 else s for s, old in zip(shape, padded))
    for s, old in zip(new, padded):
      if not is_size(s):
        raise TypeError(f"expand: sizes must be ints, got {tuple(shape)}")
      if is_int(s) and s < 0:
        raise ShapeError(f"expand: invalid size {s} in {tuple(shape)}")
      if old != s and old != 1:
        raise ShapeError(f"expand: the expanded size {s} must match the existing size {old} at a non-singleton "
                             f"dimension (tensor shape {self.shape}, target {tuple(shape)})")
    base = self.reshape(padded) if padded != self.shape else self
    new = tuple(canonical(s) for s in new)
    return base if new == base.shape else base._movement(Ops.EXPAND, new)

  def permute(self, *order: Any) -> Self:
    """Reorder the dims.

    >>> Tensor([[1, 2, 3]]).permute(1, 0).tolist()
    [[1], [2], [3]]
    """
    order = shape_args(order)
    if len(order) != self.ndim:
      raise ShapeError(f"permute: {order} names {len(order)} dims, but the tensor has shape {self.shape}")
    order = tuple(normalize_dim(d, self.ndim) for d in order)
    if sorted(order) != list(range(self.ndim)):
      raise ShapeError(f"permute: {order} is not a permutation of the dims of a {self.ndim}-d tensor")
    return self if order == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, order)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
    """Swap two dims.

    >>> Tensor([[1, 2], [3, 4]]).transpose(0, 1).tolist()
    [[1, 3], [2, 4]]
    """
    a, b = normalize_dim(dim0, self.ndim), normalize_dim(dim1, self.ndim)
    if self.ndim == 0:  # dims 0 and -1 of a 0-d tensor: nothing to swap (torch returns it)
      return self
    order = list(range(self.ndim))
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Self:  # noqa: N802
    """`transpose()`: dims 0 and 1 swapped, as tinygrad's (torch reverses every dim, and deprecates that for other
    than 2 dims); a 0-d or 1-d tensor is returned as it is (torch's; tinygrad raises).

    >>> Tensor([[1, 2, 3]]).T.tolist()
    [[1], [2], [3]]
    >>> Tensor.ones(2, 3, 4).T.shape
    (3, 2, 4)
    """
    return self.transpose() if self.ndim >= 2 else self

  def flip(self, *axis: Any) -> Self:
    """Reverse the order of the elements along the given dims.

    >>> Tensor([[1, 2], [3, 4]]).flip(1).tolist()
    [[2, 1], [4, 3]]
    """
    axes = [normalize_dim(a, self.ndim) for a in shape_args(axis)]
    if len(set(axes)) != len(axes):
      raise RuntimeError(f"flip: dim {axis} appears multiple times")
    return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Self:
    """Keep [start, end) of each dim (None keeps the whole dim).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink((None, (1, 3))).tolist()
    [[2, 3], [5, 6]]
    """
    if len(arg) != self.ndim:
      raise ShapeError(f"shrink: expected {self.ndim} ranges for shape {self.shape}, got {len(arg)}")
    bounds = tuple((0, s) if a is None else tuple(v if is_symbolic(v) else int(v) for v in a)
                   for a, s in zip(arg, self.shape))
    for (start, end), s in zip(bounds, self.shape):
      if not (size_check(start >= 0) and size_check(end >= start) and size_check(s >= end)):
        raise ShapeError(f"shrink: range {(start, end)} does not fit in size {s} (shape {self.shape})")
    return self if all(b == (0, s) for b, s in zip(bounds, self.shape)) else self._movement(Ops.SHRINK, bounds)

  def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Self:
    """Pad (or, with negative amounts, crop) each dim.

    padding: flat torch-style (left, right) pairs starting from the last dim, or one (before, after) pair or None
    per dim. mode: "constant" (fill with value), "reflect" (mirror without repeating the edge), "replicate"
    (repeat the edge), "circular" (wrap around).

    >>> Tensor([1, 2, 3]).pad((1, 2), value=9).tolist()
    [9, 1, 2, 3, 9, 9]
    >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
    [3, 2, 1, 2, 3, 2]
    >>> Tensor([1, 2, 3]).pad(((1, -1),), mode="circular").tolist()
    [2, 1, 2]
    """
    if mode not in PAD_MODES:
      raise NotImplementedError(f"pad mode {mode!r} is not supported; use one of {', '.join(PAD_MODES)}")
    if mode != "constant" and value != 0:
      raise InvalidArgumentError(f"pad mode {mode!r} does not take a value (got {value})")
    if _symbolic_padding(padding) or is_symbolic_shape(self.shape):
      return _copy(_pad_symbolic(self, padding, mode, value))
    pairs = _pad_pairs(padding, self.shape)
    return _copy(self if all(p == (0, 0) for p in pairs) else PAD_MODES[mode](self, pairs, value))

  # ---- dims of size one
  def squeeze(self, dim: int | Sequence[int] | None = None) -> Self:
    """Remove dims of size 1 (all of them, or those among `dim` that have size 1).

    >>> Tensor([[[1], [2]]]).squeeze().tolist()
    [1, 2]
    >>> Tensor([[1, 2]]).squeeze(1).shape
    (1, 2)
    """
    if dim is None:
      return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = [normalize_dim(d, self.ndim) for d in _ints(dim, "squeeze: dims")]
    if len(set(dims)) != len(dims):
      raise RuntimeError(f"squeeze: dim {dim} appears multiple times in the list of dims")
    if self.ndim == 0:
      return self
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims or s != 1))

  def unsqueeze(self, dim: int) -> Self:
    """Insert a dim of size 1 at `dim` (negative counts from the end of the result).

    >>> Tensor([1, 2]).unsqueeze(-1).tolist()
    [[1], [2]]
    """
    d = normalize_dim(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
    """Merge dims start_dim..end_dim (inclusive) into one.

    >>> Tensor([[[1, 2], [3, 4]]]).flatten(1).tolist()
    [[1, 2, 3, 4]]
    """
    start, end = normalize_dim(start_dim, self.ndim), normalize_dim(end_dim, self.ndim)
    if self.ndim == 0:
      return self.reshape(1)
    if start > end:
      raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return self.reshape(self.shape[:start] + (prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
    """Split dim `dim` into several dims of the given sizes (one may be -1).

    >>> Tensor([1, 2, 3, 4, 5, 6]).unflatten(0, (2, -1)).tolist()
    [[1, 2, 3], [4, 5, 6]]
    """
    d = normalize_dim(dim, self.ndim)
    if self.ndim == 0:
      raise ZeroDimJoinError(f"unflatten: dim {dim} of a 0-d tensor, which has no dims to split")
    sizes = list(_ints(sizes, "unflatten: sizes"))
    known, size = prod(s for s in sizes if s != -1), self.shape[d]
    fits = sizes.count(-1) <= 1 and all(s >= -1 for s in sizes) and (known * (size // known) == size if known
                                                                      else size == 0 and -1 not in sizes)
    if not sizes or not fits or (-1 not in sizes and known != size):
      raise ShapeError(f"unflatten: sizes {tuple(sizes)} don't multiply up to the size {size} of dim {dim} "
                           f"(shape {self.shape})")
    if -1 in sizes:
      sizes[sizes.index(-1)] = size // known
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  # ---- copies by index math
  def repeat(self, *repeats: Any) -> Self:
    """Tile the tensor: repeats[i] copies along dim i (extra leading repeats add dims).

    >>> Tensor([1, 2]).repeat(2, 2).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    repeats = _ints(shape_args(repeats), "repeat: repeats")
    if len(repeats) < self.ndim:
      raise ShapeError(f"repeat: the number of repeats {len(repeats)} in {repeats} can not be smaller than the "
                           f"number of dims {self.ndim} of the tensor's shape {self.shape}")
    if any(r < 0 for r in repeats):
      raise ShapeError(f"repeat: repeats must be non-negative, got {repeats}")
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    pairs = tuple(x for s in base.shape for x in (1, s))
    tiled = tuple(x for r, s in zip(repeats, base.shape) for x in (r, s))
    return _copy(base.reshape(pairs).expand(tiled).reshape(tuple(r * s for r, s in zip(repeats, base.shape))))

  def repeat_interleave(self, repeats: Any, dim: int | None = None) -> Self:
    """Repeat each element `repeats` times along dim (the flattened tensor when dim is None). repeats may also be
    a list or int tensor with one count per element, which is read on the host.

    >>> Tensor([1, 2]).repeat_interleave(2).tolist()
    [1, 1, 2, 2]
    >>> Tensor([[1, 2], [3, 4]]).repeat_interleave([1, 2], dim=0).tolist()
    [[1, 2], [3, 4], [3, 4]]
    """
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else normalize_dim(dim, x.ndim)
    if x.ndim == 0:
      x, d = x.reshape(1), 0
    if is_int(repeats):
      repeats = int(repeats)
      if repeats < 0:
        raise ShapeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
      return _copy(x.unsqueeze(d + 1).expand(_on_dim(x.ndim + 1, d + 1, repeats, -1)).flatten(d, d + 1))
    counts = _repeat_counts(repeats, x.shape[d])
    index = type(self)([i for i, c in enumerate(counts) for _ in range(c)], dtype=dtypes.int32, device=self.device)
    return x[(slice(None),) * d + (index,)]

  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
    """Rotate elements along dims by shifts (the flattened tensor when dims is None).

    >>> Tensor([1, 2, 3]).roll(1).tolist()
    [3, 1, 2]
    >>> Tensor([[1, 2], [3, 4]]).roll((1, -1), (0, 1)).tolist()
    [[4, 3], [2, 1]]
    """
    shifts = _ints(shifts, "roll: shifts")
    if dims is None:
      if len(shifts) != 1:
        raise ShapeError(f"roll: shifts {shifts} need matching dims when more than one shift is given")
      return self.flatten().roll(shifts, 0).reshape(self.shape)
    dims = _ints(dims, "roll: dims")
    if len(shifts) != len(dims):
      raise ShapeError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    x = self.reshape(1) if self.ndim == 0 else self
    for shift, dim in zip(shifts, dims):
      x = x._roll_one(shift, normalize_dim(dim, x.ndim))
    return _copy(x.reshape(self.shape))

  def _roll_one(self, shift: int, d: int) -> Self:
    """Two copies side by side along d, then the window that starts `shift` before the end of the first."""
    n = self.shape[d]
    k = shift % n if n else 0
    if k == 0:
      return self
    doubled = self.repeat(_on_dim(self.ndim, d, 2, 1))
    return doubled.shrink(_on_dim(self.ndim, d, (n - k, 2 * n - k)))

  # ---- pieces and joins
  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
    """Cut into pieces along dim: of `sizes` elements each (the last may be smaller), or of the listed sizes.

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split(2)]
    [[1, 2], [3, 4], [5]]
    >>> [t.tolist() for t in Tensor([1, 2, 3]).split([1, 2])]
    [[1], [2, 3]]
    """
    if self.ndim == 0:
      raise ShapeError("split: cannot split a 0-d tensor")
    d = normalize_dim(dim, self.ndim)
    n = self.shape[d]
    pieces = _split_sizes(sizes, n, d)
    starts = [sum(pieces[:i]) for i in range(len(pieces))]
    return tuple(self.shrink(_on_dim(self.ndim, d, (s, s + p))) for s, p in zip(starts, pieces))

  def chunk(self, chunks: int, dim: int = 0) -> list[Self]:
    """Cut into `chunks` pieces of ceil(size / chunks) along dim (fewer if the size runs out).

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(3)]
    [[1, 2], [3, 4], [5]]
    """
    if not is_int(chunks):
      raise TypeError(f"chunk: chunks must be an int, got {type(chunks).__name__}")
    chunks = int(chunks)
    if chunks <= 0:
      raise ShapeError(f"chunk: chunks must be greater than 0, got {chunks}")
    n = self.shape[normalize_dim(dim, self.ndim)] if self.ndim else 0
    return list(self.split(math.ceil(n / chunks) if n else [0] * chunks, dim))

  def cat(self, *args: Any, dim: int = 0) -> Self:
    """Join tensors along an existing dim (dtypes promote; 1-d empty tensors are skipped, as in torch).
    Also callable as Tensor.cat([a, b, ...], dim=...).

    >>> Tensor([1, 2]).cat(Tensor([3]), Tensor([4, 5])).tolist()
    [1, 2, 3, 4, 5]
    >>> Tensor.cat([Tensor([[1]]), Tensor([[2]])], dim=1).tolist()
    [[1, 2]]
    """
    tensors = _tensor_list(self, args, "cat")
    for i, t in enumerate(tensors):
      if t.ndim == 0:
        raise ZeroDimJoinError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated")
    kept = [t for t in tensors if t.shape != (0,)] or tensors[:1]
    first = kept[0]
    d = normalize_dim(dim, first.ndim)
    for t in kept:
      if t.ndim != first.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != d):
        raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}: got shapes "
                             f"{', '.join(str(u.shape) for u in kept)}")
      if t.device != first.device:
        raise RuntimeError(f"cat: all tensors must be on one device, got {first.device} and {t.device}")
    out_dtype = least_upper_dtype(*(t.dtype for t in kept))
    parts = [t.cast(out_dtype) for t in kept if t.shape[d]] or [kept[0].cast(out_dtype)]
    out = _copy(_join(parts, d))
    if all(t.numel() for t in tensors):
      return out
    # empty inputs add nothing to the value, but autograd must still reach them (torch gives them empty gradients)
    return custom_gradient(out, ("cat", d), *(t.cast(out_dtype) for t in tensors))

  def stack(self, *args: Any, dim: int = 0) -> Self:
    """Join equally shaped tensors along a new dim. Also callable as Tensor.stack([a, b, ...], dim=...).

    >>> Tensor([1, 2]).stack(Tensor([3, 4]), dim=1).tolist()
    [[1, 3], [2, 4]]
    """
    tensors = _tensor_list(self, args, "stack")
    for i, t in enumerate(tensors):
      if t.shape != tensors[0].shape:
        raise ShapeError(f"stack expects each tensor to be equal size, but got {tensors[0].shape} at entry 0 "
                             f"and {t.shape} at entry {i}")
    d = normalize_dim(dim, tensors[0].ndim + 1)
    return type(tensors[0]).cat([t.unsqueeze(d) for t in tensors], dim=d)

  def meshgrid(self, *args: Any, indexing: str = "ij") -> tuple[Self, ...]:
    """Coordinate grids from 1-d tensors: with "ij" the i-th output varies along dim i; "xy" swaps the first two
    dims (cartesian order). Also callable as Tensor.meshgrid([x, y]).

    >>> [t.tolist() for t in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
    """
    if indexing not in ("ij", "xy"):
      raise InvalidArgumentError(f'meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
    tensors = _tensor_list(self, args, "meshgrid")
    for i, t in enumerate(tensors):
      if t.ndim > 1:
        raise ShapeError(f"meshgrid: expected 0-d or 1-d tensors, got shape {t.shape} at position {i}")
    flat = [t.reshape(-1) for t in tensors]
    axes = list(range(len(flat)))
    if indexing == "xy" and len(flat) > 1:
      axes[0], axes[1] = 1, 0
    shape = [0] * len(flat)
    for t, axis in zip(flat, axes):
      shape[axis] = t.shape[0]
    return tuple(t.reshape(_on_dim(len(flat), axis, -1, 1)).expand(shape) for t, axis in zip(flat, axes))

  def rearrange(self, formula: str, **sizes: int) -> Self:
    """einops-style reshape and permute: "b (h w) c -> b h w c" with sizes for split axes, "..." (or "…") for
    the dims not named, "1" or "()" for a dim of size 1. A malformed formula raises RearrangeError (a ValueError and
    an AssertionError).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).rearrange("a b -> b a").tolist()
    [[1, 4], [2, 5], [3, 6]]
    >>> Tensor([1, 2, 3, 4]).rearrange("(h w) -> h w", h=2).tolist()
    [[1, 2], [3, 4]]
    """
    split_shape, order, out_shape = plan_rearrange(formula, self.shape, sizes)
    return self.reshape(split_shape).permute(order).reshape(out_shape)


# ---- pad modes: (tensor, ((before, after), ...) per dim, value) -> tensor
def _pad_constant(x: Any, pairs: tuple[tuple[int, int], ...], value: Any) -> Any:
  if any(is_symbolic(v) for p in pairs for v in p) or is_symbolic_shape(x.shape):  # non-negative: nothing to crop
    cropped, grow = x, pairs
  else:
    cropped, grow = _crop_negative(x, pairs), tuple((max(b, 0), max(a, 0)) for b, a in pairs)
  if all(is_int(g) and g == 0 for p in grow for g in p):
    return cropped
  padded = cropped._movement(Ops.PAD, grow)
  if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):  # -0.0 pads as -0.0
    return padded
  inside = x._const(True, dtypes.bool).expand(cropped.shape)._movement(Ops.PAD, grow)
  return inside.where(padded, x._const(value))


def _crop_negative(x: Any, pairs: tuple[tuple[int, int], ...]) -> Any:
  return x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))


def _pad_edges(edge_fn: Any) -> Any:
  """A mode that grows each dim by joining edge pieces made by edge_fn(x, dim, before, after), then crops
  negative pads (grow first, as torch does, so a crop on one side does not change the other side's edge)."""
  def pad(x: Any, pairs: tuple[tuple[int, int], ...], value: Any) -> Any:
    for d, (b, a) in enumerate(pairs):
      b, a = max(b, 0), max(a, 0)
      if b or a:
        before, after = edge_fn(x, d, b, a)
        x = _join([p for p in (before, x, after) if p is not None], d)
    return _crop_negative(x, pairs)
  return pad


def _reflect_edges(x: Any, d: int, b: int, a: int) -> tuple[Any, Any]:
  n = x.shape[d]
  if max(b, a) >= n:
    raise ShapeError(f"pad: reflect padding ({b}, {a}) must be less than the size {n} of dim {d} "
                         f"(shape {x.shape})")
  before = x.shrink(_on_dim(x.ndim, d, (1, b + 1))).flip(d) if b else None
  after = x.shrink(_on_dim(x.ndim, d, (n - 1 - a, n - 1))).flip(d) if a else None
  return before, after


def _replicate_edges(x: Any, d: int, b: int, a: int) -> tuple[Any, Any]:
  n = x.shape[d]
  if n == 0:
    raise ShapeError(f"pad: cannot replicate the edge of empty dim {d} (shape {x.shape})")
  before = x.shrink(_on_dim(x.ndim, d, (0, 1))).expand(_on_dim(x.ndim, d, b, -1)) if b else None
  after = x.shrink(_on_dim(x.ndim, d, (n - 1, n))).expand(_on_dim(x.ndim, d, a, -1)) if a else None
  return before, after


class CroppedWrapError(ShapeError, NotImplementedError):
  """A circular pad that wraps around more than the part a negative pad leaves. torch's result is undefined there
  (it copies memory it never wrote) and tinygrad refuses negative circular pads (NotImplementedError)."""


def _pad_circular(x: Any, pairs: tuple[tuple[int, int], ...], value: Any) -> Any:
  """Crop first (as torch does for this mode), then take a window of three copies side by side: no data moves."""
  original = x.shape
  x = _crop_negative(x, pairs)
  for d, (b, a) in enumerate(pairs):
    if max(b, a) > original[d]:
      raise ShapeError(f"pad: circular padding {(b, a)} wraps around more than once for size {original[d]} of dim {d}")
    b, a, n = max(b, 0), max(a, 0), x.shape[d]
    if b > n or a > n:
      raise CroppedWrapError(f"pad: circular padding {pairs[d]} of dim {d} (size {original[d]}) wraps around more "
                             f"than the {n} elements its negative pad leaves")
    if b or a:
      x = x.repeat(_on_dim(x.ndim, d, 3, 1)).shrink(_on_dim(x.ndim, d, (n - b, 2 * n + a)))
  return x


PAD_MODES = {"constant": _pad_constant, "reflect": _pad_edges(_reflect_edges),
             "replicate": _pad_edges(_replicate_edges), "circular": _pad_circular}


def _symbolic_padding(padding: Any) -> bool:
  return isinstance(padding, (tuple, list)) and any(
    is_symbolic(v) for p in padding for v in (p if isinstance(p, (tuple, list)) else (p,)))


def _pad_symbolic(x: Any, padding: Sequence[Any], mode: str, value: Any) -> Any:
  """Padding by symbolic amounts, or of a tensor of symbolic shape: constant mode, one non-negative (before, after)
  pair (or None) per dim."""
  if mode != "constant":
    raise NotImplementedError(f"pad: mode {mode!r} with symbolic sizes; only 'constant' is supported")
  if padding and not any(isinstance(p, (tuple, list)) or p is None for p in padding):  # flat, torch-style
    if len(padding) % 2 or len(padding) // 2 > x.ndim:
      raise ShapeError(f"pad: flat padding {tuple(padding)} must have an even length of at most {2 * x.ndim}")
    padding = [None] * (x.ndim - len(padding) // 2) + [padding[i:i + 2] for i in range(len(padding) - 2, -1, -2)]
  if len(padding) != x.ndim or not all(p is None or (isinstance(p, (tuple, list)) and len(p) == 2) for p in padding):
    raise ShapeError(f"pad: with symbolic sizes give one (before, after) pair per dim, got {tuple(padding)}")
  pairs = tuple((0, 0) if p is None else tuple(p) for p in padding)
  if not all(is_size(v) and size_check(v >= 0) for p in pairs for v in p):
    raise ValueError(f"pad: with symbolic sizes the amounts must be non-negative sizes, got {pairs}")
  return _pad_constant(x, pairs, value)


def _pad_pairs(padding: Sequence[Any], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  ndim = len(shape)
  if not isinstance(padding, (tuple, list)):
    raise TypeError(f"pad: padding must be a sequence, got {type(padding).__name__}")
  if all(isinstance(p, (tuple, list)) or p is None for p in padding) and len(padding):
    if len(padding) != ndim:
      raise ShapeError(f"pad: got {len(padding)} (before, after) pairs for a {ndim}-d tensor of shape {shape}")
    pairs = tuple((0, 0) if p is None else tuple(_ints(p, "pad: padding")) for p in padding)
    if any(len(p) != 2 for p in pairs):
      raise ValueError(f"pad: each per-dim padding must be a (before, after) pair, got {tuple(padding)}")
  else:
    flat = _ints(padding, "pad: padding")
    if len(flat) % 2 or len(flat) // 2 > ndim:
      raise ShapeError(f"pad: flat padding {flat} must have an even length of at most {2 * ndim}")
    pairs = ((0, 0),) * (ndim - len(flat) // 2) + tuple((flat[i], flat[i + 1]) for i in range(len(flat) - 2, -1, -2))
  for (b, a), s in zip(pairs, shape):
    if s + b + a < 0:
      raise ShapeError(f"pad: padding {tuple(padding)} leaves a negative size for shape {shape}")
  return pairs


# ---- joining
def _join(parts: list[Any], d: int) -> Any:
  """Concatenate same-dtype tensors along d: each is padded to the full size and picked where it lies."""
  if len(parts) == 1:
    return parts[0]
  total, start, out = sum(p.shape[d] for p in parts), 0, None
  for p in parts:
    grow = _on_dim(p.ndim, d, (start, total - start - p.shape[d]), (0, 0))
    padded = p._movement(Ops.PAD, grow)
    if out is None:
      out = padded  # the first part needs no mask: every later part overwrites its own range
    else:
      inside = p._const(True, dtypes.bool).expand(p.shape)._movement(Ops.PAD, grow)
      out = inside.where(padded, out)
    start += p.shape[d]
  return out


def _tensor_list(first: Any, rest: tuple, what: str) -> list[Any]:
  """cat/stack/meshgrid accept t.cat(a, b), Tensor.cat(t, a, b) and Tensor.cat([t, a, b])."""
  tensors = list(first) + list(rest) if isinstance(first, (list, tuple)) else [first, *rest]
  if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
    tensors = list(tensors[0])
  if not tensors:
    raise ValueError(f"{what}: expected a non-empty list of tensors")
  for i, t in enumerate(tensors):
    if not isinstance(t, TensorBase):
      raise TypeError(f"{what}: expected Tensors, got {type(t).__name__} at position {i}")
  return tensors


def _split_sizes(sizes: Any, n: int, d: int) -> list[int]:
  if is_int(sizes):
    sizes = int(sizes)
    if sizes < 0 or (sizes == 0 and n):
      raise ShapeError(f"split: split size must be positive (0 only for an empty dim), got {sizes} for size {n}")
    return [min(sizes, n - i) for i in range(0, n, sizes)] if n else [0]
  pieces = list(_ints(sizes, "split: sizes"))
  if any(p < 0 for p in pieces) or sum(pieces) != n:
    raise ShapeError(f"split: sizes {tuple(pieces)} must be non-negative and sum exactly to {n}, the size of "
                         f"dim {d}")
  return pieces


def _repeat_counts(repeats: Any, n: int) -> list[int]:
  """Per-element counts from a list or tensor (one count broadcasts to all elements)."""
  counts = np.asarray(repeats.numpy() if hasattr(repeats, "numpy") else repeats)
  if counts.dtype.kind not in "iu" and counts.size:
    raise TypeError(f"repeat_interleave: repeats must be ints, got dtype {counts.dtype}")
  counts = counts.reshape(-1).astype(np.int64).tolist()
  if len(counts) == 1:
    counts = counts * n
  if len(counts) != n or any(c < 0 for c in counts):
    raise ShapeError(f"repeat_interleave: repeats must be {n} non-negative counts (one per element), got "
                         f"{counts}")
  return counts
