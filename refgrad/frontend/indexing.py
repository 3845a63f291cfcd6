"""Basic indexing: ints, slices (any step), None and one Ellipsis, all as movement ops (no copy)."""
from __future__ import annotations

from typing import Any

import numpy as np


def _expand_ellipsis(index: tuple, ndim: int) -> tuple:
  consumes = [i for i in index if i is not None and i is not Ellipsis]
  ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
  if len(ellipses) > 1:
    raise IndexError("an index can only have a single ellipsis ('...')")
  if len(consumes) > ndim:
    raise IndexError(f"too many indices for tensor of dimension {ndim}: got {len(consumes)}")
  fill = (slice(None),) * (ndim - len(consumes))
  if ellipses:
    k = ellipses[0]
    return index[:k] + fill + index[k + 1:]
  return index + fill


def _slice_bounds(s: slice, size: int) -> tuple[int, int, int]:
  if s.step == 0:
    raise ValueError("slice step cannot be zero")
  for part in (s.start, s.stop, s.step):
    if part is not None and (not isinstance(part, (int, np.integer)) or isinstance(part, bool)):
      raise TypeError(f"slice indices must be integers or None, got {part!r}")
  return s.indices(size)


def basic_index(t: Any, index: Any) -> Any:
  """t[index] for ints, slices, None and Ellipsis: shrink, flip, stride by reshape, then reshape out dims."""
  index = index if isinstance(index, tuple) else (index,)
  for i in index:
    if not (i is None or i is Ellipsis or isinstance(i, slice) or
            (isinstance(i, (int, np.integer)) and not isinstance(i, bool))):
      raise TypeError(f"unsupported index {i!r} of type {type(i).__name__}: advanced indexing comes later")
  index = _expand_ellipsis(index, t.ndim)
  out, out_shape, dim = t, [], 0
  bounds, flips, steps = [], [], []
  for i in index:
    if i is None:
      out_shape.append(1)
      continue
    size = t.shape[dim]
    if isinstance(i, slice):
      start, stop, step = _slice_bounds(i, size)
      count = len(range(start, stop, step))
      last = start + (count - 1) * step
      bounds.append((min(start, last), max(start, last) + 1) if count else (0, 0))
      flips.append(step < 0)
      steps.append(abs(step))
      out_shape.append(count)
    else:
      if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
      i = int(i) % size
      bounds.append((i, i + 1))
      flips.append(False)
      steps.append(1)
    dim += 1
  out = out.shrink(tuple(bounds))
  if any(flips):
    out = out.flip(tuple(k for k, f in enumerate(flips) if f))
  if any(s > 1 for s in steps):
    out = _stride(out, steps)
  return out.reshape(tuple(out_shape))


def _stride(t: Any, steps: list[int]) -> Any:
  """Every step-th element per dim: pad each dim up to a multiple of its step, split it, keep index 0."""
  padded = t.pad(tuple((0, (-s) % st if s else 0) for s, st in zip(t.shape, steps)))
  split = []
  for s, st in zip(padded.shape, steps):
    split += [s // st, st]
  shaped = padded.reshape(tuple(split))
  picked = shaped.shrink(tuple((0, s) if k % 2 == 0 else (0, 1) for k, s in enumerate(split)))
  return picked.reshape(tuple(split[0::2]))
