"""Movement methods of Tensor: they only change how elements are addressed, never copy data."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp, prod


def _shape_error():
  from refgrad.tensor import ShapeError
  return ShapeError


def _norm(dim: int, ndim: int) -> int:
  from refgrad.tensor import normalize_dim
  return normalize_dim(dim, ndim)


def _args(shape: Sequence[Any]) -> tuple:
  from refgrad.tensor import shape_args
  return shape_args(shape)


class MovementMixin:
  __slots__ = ()

  def _movement(self, op: Ops, arg: Any) -> Any:
    return self._from(UOp(op, self.dtype, (self.uop,), arg))

  def reshape(self, *shape: Any) -> Any:
    """New shape with the same elements; one -1 is inferred, None keeps that dim. t.reshape(2, -1)"""
    shape = _args(shape)
    new = [self.shape[i] if s is None else s for i, s in enumerate(shape)]
    for s in new:
      if not isinstance(s, int) or isinstance(s, bool):
        raise TypeError(f"reshape: sizes must be ints, got {shape}")
    if new.count(-1) > 1:
      raise _shape_error()(f"reshape: only one dimension can be inferred (-1), got {tuple(shape)}")
    if any(s < -1 for s in new):
      raise _shape_error()(f"reshape: invalid size in shape {tuple(shape)}")
    if -1 in new:
      known = prod(s for s in new if s != -1)
      if known == 0 or self.numel() % known:
        raise _shape_error()(f"shape {tuple(shape)} is invalid for input of size {self.numel()}")
      new[new.index(-1)] = self.numel() // known
    new_shape = tuple(new)
    if prod(new_shape) != self.numel():
      raise _shape_error()(f"shape {new_shape} is invalid for input of size {self.numel()} (shape {self.shape})")
    return self if new_shape == self.shape else self._movement(Ops.RESHAPE, new_shape)

  def view(self, *shape: Any) -> Any:
    return self.reshape(*shape)

  def expand(self, *shape: Any) -> Any:
    """Broadcast size-1 dims to a larger size (-1 keeps a dim); new leading dims may be added."""
    shape = _args(shape)
    if len(shape) < self.ndim:
      raise _shape_error()(f"expand: the number of sizes {len(shape)} in {tuple(shape)} must be >= the number of "
                           f"dims {self.ndim} of the tensor's shape {self.shape}")
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(old if s == -1 else s for s, old in zip(shape, padded))
    for s, old in zip(new, padded):
      if old != s and old != 1:
        raise _shape_error()(f"expand: the expanded size {s} must match the existing size {old} at a non-singleton "
                             f"dimension (tensor shape {self.shape}, target {tuple(shape)})")
    base = self.reshape(padded) if padded != self.shape else self
    return base if new == base.shape else base._movement(Ops.EXPAND, new)

  def permute(self, *order: Any) -> Any:
    order = tuple(_norm(d, self.ndim) for d in _args(order))
    if sorted(order) != list(range(self.ndim)):
      raise _shape_error()(f"permute: {order} is not a permutation of the dims of a {self.ndim}-d tensor")
    return self if order == tuple(range(self.ndim)) else self._movement(Ops.PERMUTE, order)

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Any:
    order = list(range(self.ndim))
    a, b = _norm(dim0, self.ndim), _norm(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Any:  # noqa: N802
    return self.permute(tuple(reversed(range(self.ndim))))

  def flip(self, *axis: Any) -> Any:
    axes = [_norm(a, self.ndim) for a in _args(axis)]
    if len(set(axes)) != len(axes):
      raise RuntimeError(f"flip: dim {axis} appears multiple times")
    return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim))) if axes else self

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Any:
    """Keep [start, end) of each dim (None keeps the whole dim)."""
    if len(arg) != self.ndim:
      raise _shape_error()(f"shrink: expected {self.ndim} ranges for shape {self.shape}, got {len(arg)}")
    bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
    for (start, end), s in zip(bounds, self.shape):
      if not 0 <= start <= end <= s:
        raise _shape_error()(f"shrink: range {(start, end)} does not fit in size {s} (shape {self.shape})")
    return self if all(b == (0, s) for b, s in zip(bounds, self.shape)) else self._movement(Ops.SHRINK, bounds)

  def pad(self, padding: Sequence[Any], mode: str = "constant", value: float = 0.0) -> Any:
    """Pad with `value`. padding: flat torch-style (last dim first, (left, right) pairs) or one pair per dim."""
    if mode != "constant":
      raise NotImplementedError(f"pad mode {mode!r} is not implemented yet; only 'constant'")
    pairs = _pad_pairs(padding, self.shape)
    if all(p == (0, 0) for p in pairs):
      return self
    # negative padding crops first
    cropped = self.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, self.shape)))
    grow = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
    padded = cropped._movement(Ops.PAD, grow) if any(g != (0, 0) for g in grow) else cropped
    if value == 0 or all(g == (0, 0) for g in grow):
      return padded
    mask = self._const(True, dtypes.bool).expand(cropped.shape)._movement(Ops.PAD, grow)
    return mask.where(padded, value)

  def squeeze(self, dim: int | None = None) -> Any:
    if dim is None:
      return self.reshape(tuple(s for s in self.shape if s != 1))
    d = _norm(dim, self.ndim)
    if self.ndim == 0 or self.shape[d] != 1:
      return self
    return self.reshape(self.shape[:d] + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Any:
    d = _norm(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
    if self.ndim == 0:
      return self.reshape(1)
    start, end = _norm(start_dim, self.ndim), _norm(end_dim, self.ndim)
    if start > end:
      raise _shape_error()(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return self.reshape(self.shape[:start] + (prod(self.shape[start:end + 1]),) + self.shape[end + 1:])

  def __getitem__(self, index: Any) -> Any:
    from refgrad.frontend.indexing import basic_index
    return basic_index(self, index)


def _pad_pairs(padding: Sequence[Any], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  ndim = len(shape)
  if all(isinstance(p, (tuple, list)) or p is None for p in padding):
    if len(padding) != ndim:
      raise _shape_error()(f"pad: got {len(padding)} (before, after) pairs for a {ndim}-d tensor of shape {shape}")
    return tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
  if len(padding) % 2 or len(padding) // 2 > ndim:
    raise _shape_error()(f"pad: flat padding {tuple(padding)} must have an even length of at most {2 * ndim}")
  pairs = [(0, 0)] * ndim
  for i in range(len(padding) // 2):
    pairs[ndim - 1 - i] = (int(padding[2 * i]), int(padding[2 * i + 1]))
  for (b, a), s in zip(pairs, shape):
    if s + b + a < 0:
      raise _shape_error()(f"pad: padding {tuple(padding)} leaves a negative size for shape {shape}")
  return tuple(pairs)
