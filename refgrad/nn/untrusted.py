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
  return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
  of `elements` elements, or None. Negative offsets and strides are refused (torch refuses them too); the highest
  element reached is offset + sum((n - 1) * stride), the lowest the offset itself, in exact integers."""
  if not is_count(offset):
    return f"offset {shown(offset)} is not a non-negative integer"
  if not isinstance(strides, Sequence) or len(strides) != len(shape) or not all(is_count(s) for s in strides):
    return f"strides {shown(strides)} are not {len(shape)} non-negative integers"
  if 0 in shape:
    return None  # reads nothing
  highest = offset + sum((n - 1) * s for n, s in zip(shape, strides))
  if highest >= elements:
    return (f"shape {shape} at offset {offset} with strides {tuple(strides)} reaches element {highest}, past the "
            f"{elements} of its storage")
  return None
