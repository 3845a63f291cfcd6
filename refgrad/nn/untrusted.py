"""Checks the file readers share on what a file claims, done with Python integers before numpy sees a number."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from refgrad.safe_pickle import shown

MAX_DIMS = 64  # numpy's limit on an array's dimensions
MAX_BYTES = 2**63 - 1  # numpy's: the product of an array's nonzero sizes times its itemsize must fit in an intp


def is_count(value: Any) -> bool:
  """A non-negative Python int (a bool is not a count, though Python calls it an int)."""
  return _is_int(value) and value >= 0


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def shape_fault(shape: Any, itemsize: int) -> str | None:
  """Why `shape` cannot be an array's shape with elements of `itemsize` bytes, or None: every entry a count, at most
  MAX_DIMS of them, and an array numpy can describe (an empty shape like (0, 2**63) too: numpy refuses it)."""
  if not isinstance(shape, Sequence) or isinstance(shape, (str, bytes)) or not all(is_count(n) for n in shape):
    return f"shape {shown(shape)} is not a sequence of non-negative integers"
  if len(shape) > MAX_DIMS:
    return f"shape has {len(shape)} dimensions, over the {MAX_DIMS} an array can have"
  if math.prod(n for n in shape if n) * itemsize > MAX_BYTES:
    return f"shape {tuple(shape)} is too large for any array ({itemsize}-byte elements)"
  return None


def view_fault(offset: Any, shape: tuple[int, ...], strides: Any, elements: int) -> str | None:
  """Why elements at `offset` with `strides` (all in elements) and a valid `shape` do not all lie inside a storage
  of `elements` elements, or None. A negative offset is refused, and a negative stride where it would step (on an
  axis of more than one element of a tensor that has elements), as torch refuses them; so the lowest element
  reached is the offset itself and the highest offset + sum((n - 1) * stride), in exact integers."""
  if not is_count(offset):
    return f"offset {shown(offset)} is not a non-negative integer"
  if not isinstance(strides, Sequence) or len(strides) != len(shape) or not all(map(_is_int, strides)):
    return f"strides {shown(strides)} are not {len(shape)} integers"
  if 0 in shape:
    return None  # reads nothing
  if any(s < 0 for n, s in zip(shape, strides) if n > 1):
    return f"strides {tuple(strides)} step backwards on an axis of shape {tuple(shape)}"
  highest = offset + sum((n - 1) * s for n, s in zip(shape, strides))
  if highest >= elements:
    return (f"shape {shape} at offset {offset} with strides {tuple(strides)} reaches element {highest}, past the "
            f"{elements} of its storage")
  return None
