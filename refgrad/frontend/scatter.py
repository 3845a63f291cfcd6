"""scatter and scatter_reduce: writes at computed positions, expressed without any write primitive.

Every lane of self along dim compares its position with every index entry that could write it (a "hit" mask of
index.shape with n at dim, plus a last axis of the M candidate writers), then reduces over the writers: the last
writer for plain scatter, a sum, product, mean, max or min for scatter_reduce. The region the index covers is then
placed back into self.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from refgrad.dtype import compute_dtype, dtypes
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.indexing import along_last, check_index_fits, int_index, pick, wrap_index
from refgrad.frontend.shapes import ShapeError, normalize_dim
from refgrad.uop import Ops


class ReduceModeError(ValueError, RuntimeError):
  """An unknown reduce mode for scatter or scatter_reduce. Catchable as ValueError, or as RuntimeError like torch's."""


class SrcDTypeError(TypeError, RuntimeError):
  """A src tensor whose dtype is not self's. Catchable as TypeError, or as RuntimeError like torch's and tinygrad's."""


# ---- scatter: a (index.shape with n at dim) + (M,) layout, M = index.shape[dim] candidate writers per lane
@dataclass(frozen=True)
class ScatterLayout:
  """hit[..., j, ..., m]: index[..., m, ...] == j, with j (a position of self along dim) in place of dim and the
  index's own dim-th coordinate m moved to a last axis. src is laid out the same way; region is the part of self
  the index covers."""
  hit: Any
  src: Any
  region: Any


def scatter_layout(t: Any, dim: int, index: Any, src: Any, what: str) -> tuple[int, ScatterLayout]:
  d = normalize_dim(dim, t.ndim)
  index = int_index(index, what)
  if isinstance(src, TensorBase):
    if src.ndim != t.ndim or index.ndim != t.ndim:
      raise ShapeError(f"{what}: index {index.shape} and src {src.shape} must have as many dims as self {t.shape}")
    too_big = [k for k, (i, s) in enumerate(zip(index.shape, src.shape)) if i > s]
    if too_big:
      raise ShapeError(f"{what}: index {index.shape} must be no larger than src {src.shape} in every dim, but is "
                         f"larger in dim {too_big[0]}")
    if src.dtype != t.dtype:
      raise SrcDTypeError(f"{what}: src has dtype {src.dtype.name} but self has {t.dtype.name} (they must be the "
                          "same; cast src first)")
    src = src.to(t.device).shrink(tuple((0, s) for s in index.shape))
  elif isinstance(src, (bool, int, float)):
    src = t._const(src)
  else:
    raise TypeError(f"{what}: src must be a Tensor or a Python number, got {type(src).__name__}")
  check_index_fits(t, index, d, what)
  n, ndim = t.shape[d], t.ndim
  idx, valid = wrap_index(index.to(t.device), n, negative_wraps=False)
  positions = idx.arange(n, dtype=idx.dtype, device=t.device).reshape(tuple(n if k == d else 1 for k in range(ndim)))
  hit = along_last(idx, d).eq(positions.unsqueeze(-1)) & along_last(valid, d)
  region = t.shrink(tuple(None if k == d else (0, s) for k, s in enumerate(index.shape)))
  return d, ScatterLayout(hit, along_last(src, d) if src.ndim else src, region)


def _place_region(t: Any, region: Any, d: int) -> Any:
  """The scattered region written back into all of t (the index may cover only part of t)."""
  if region.shape == t.shape:
    return region
  grow = tuple((0, s - r) for s, r in zip(t.shape, region.shape))
  inside = t._const(True, dtypes.bool)._broadcast_to(region.shape).pad(grow)
  return inside.where(region.pad(grow), t)


def _in_float32(fn: Callable) -> Callable:
  """Sums and products of float16/bfloat16 accumulate in float32 and round once."""
  @functools.wraps(fn)
  def run(layout: ScatterLayout, include_self: bool) -> Any:
    wide = compute_dtype(layout.region.dtype)
    if wide == layout.region.dtype:
      return fn(layout, include_self)
    widened = ScatterLayout(layout.hit, layout.src.cast(wide), layout.region.cast(wide))
    return fn(widened, include_self).cast(layout.region.dtype)
  return run


def _any_hit(layout: ScatterLayout) -> Any:
  return layout.hit._reduce(Ops.MAX, -1)


@_in_float32
def _scatter_sum(layout: ScatterLayout, include_self: bool) -> Any:
  total = layout.hit.where(layout.src, layout.region._const(0))._reduce(Ops.ADD, -1)
  return _any_hit(layout).where(layout.region + total if include_self else total, layout.region)


@_in_float32
def _scatter_prod(layout: ScatterLayout, include_self: bool) -> Any:
  product = layout.hit.where(layout.src, layout.region._const(1))._reduce(Ops.MUL, -1)
  return layout.region * product if include_self else _any_hit(layout).where(product, layout.region)


@_in_float32
def _scatter_mean(layout: ScatterLayout, include_self: bool) -> Any:
  """Float mean, or floor division for ints (as torch); lanes with no hit keep self."""
  total = layout.hit.where(layout.src, layout.region._const(0))._reduce(Ops.ADD, -1)
  count = layout.hit.cast(dtypes.int32)._reduce(Ops.ADD, -1) + int(include_self)
  total = layout.region + total if include_self else total
  count = count.maximum(1).cast(total.dtype)  # no division by zero, even in lanes that keep self
  mean = total / count if dtypes.is_float(total.dtype) else total // count
  return _any_hit(layout).where(mean, layout.region)


def _scatter_amax(layout: ScatterLayout, include_self: bool) -> Any:
  best = pick(layout.src._broadcast_to(layout.hit.shape), layout.hit, -1)
  return layout.region.maximum(best) if include_self else _any_hit(layout).where(best, layout.region)


def _order_flip(x: Any) -> Any:
  """An exact order-reversing map: -x for floats, ~x for ints and bools."""
  return x.neg() if dtypes.is_float(x.dtype) else x.bitwise_not()


def _scatter_amin(layout: ScatterLayout, include_self: bool) -> Any:
  flipped = ScatterLayout(layout.hit, _order_flip(layout.src), _order_flip(layout.region))
  return _order_flip(_scatter_amax(flipped, include_self))


SCATTER_REDUCE = {"sum": _scatter_sum, "prod": _scatter_prod, "mean": _scatter_mean, "amax": _scatter_amax,
                  "amin": _scatter_amin}
SCATTER_MODES = {"add": "sum", "multiply": "prod"}


def _scatter_last(layout: ScatterLayout) -> Any:
  """Plain scatter: the writer with the largest position along dim wins, like a loop over the index would."""
  m = layout.hit.shape[-1]
  writer = layout.hit.arange(m, dtype=dtypes.int32, device=layout.region.device)
  last = layout.hit.where(writer, -1)._reduce(Ops.MAX, -1)
  if layout.src.ndim == 0:
    value = layout.src
  else:
    value = pick(layout.src._broadcast_to(layout.hit.shape), writer.eq(last.unsqueeze(-1)), -1)
  return last.ge(0).where(value, layout.region)


def _zero_d(t: Any, fn: Callable, index: Any, src: Any) -> Any:
  """scatter on a 0-d tensor: as a 1-element 1-d one."""
  index = int_index(index, "scatter")
  src = src.reshape(-1) if isinstance(src, TensorBase) else src
  return fn(t.reshape(1), index.reshape(-1), src).reshape(())


class ScatterMixin(TensorBase):
  __slots__ = ()

  def scatter(self, dim: int, index: Any, src: Any, reduce: str | None = None) -> Self:
    """A copy of self with src written at index along dim: out[i][index[i][j]] = src[i][j] for dim=1. src may be a
    Python number. reduce="add" or "multiply" combines with self instead; for repeated indices the last write wins.

    >>> Tensor([0, 0, 0]).scatter(0, Tensor([2, 0]), Tensor([5, 6])).tolist()
    [6, 0, 5]
    >>> Tensor([1, 1, 1]).scatter(0, Tensor([1, 1]), 3, reduce="add").tolist()
    [1, 7, 1]
    """
    if reduce is not None and reduce not in SCATTER_MODES:
      raise ReduceModeError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    normalize_dim(dim, self.ndim)  # checked here too because a 0-d self is scattered along dim 0 of a 1-d one
    if self.ndim == 0:
      return _zero_d(self, lambda x, i, s: x.scatter(0, i, s, reduce), index, src)
    d, layout = scatter_layout(self, dim, index, src, "scatter")
    region = _scatter_last(layout) if reduce is None else SCATTER_REDUCE[SCATTER_MODES[reduce]](layout, True)
    return _place_region(self, region, d)

  def scatter_reduce(self, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Self:
    """Combine src into a copy of self at index along dim with "sum", "prod", "mean" (floor division for ints),
    "amax" or "amin"; include_self=False ignores self's values where something is written.

    >>> Tensor([1, 1, 1]).scatter_reduce(0, Tensor([0, 0, 2]), Tensor([5, 6, 7]), "amax").tolist()
    [6, 1, 7]
    >>> Tensor([1., 1.]).scatter_reduce(0, Tensor([1, 1]), Tensor([2., 4.]), "mean", include_self=False).tolist()
    [1.0, 3.0]
    """
    if reduce not in SCATTER_REDUCE:
      raise ReduceModeError(f"scatter_reduce: reduce must be one of {', '.join(SCATTER_REDUCE)}, got {reduce!r}")
    if not isinstance(src, TensorBase):
      raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
    normalize_dim(dim, self.ndim)  # checked here too because a 0-d self is scattered along dim 0 of a 1-d one
    if self.ndim == 0:
      return _zero_d(self, lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self), index, src)
    d, layout = scatter_layout(self, dim, index, src, "scatter_reduce")
    return _place_region(self, SCATTER_REDUCE[reduce](layout, include_self), d)
