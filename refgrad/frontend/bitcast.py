"""Tensor.bitcast between dtypes of different item sizes, composed of primitive ops.

BITCAST itself (refgrad/alu.py) keeps the item size, so the number of elements never changes inside a kernel. A
bitcast that changes the item size, as torch's `view(dtype)`, reads the bytes of the last axis little-endian: the
element's bits go to the unsigned integer of its size (a same-size BITCAST), which shifts and truncating casts cut
into narrower pieces, lowest-order piece first, or which shifts and ORs join into a wider one; a last same-size
BITCAST gives the target dtype. No new primitive: every backend already runs these ops bit-exactly.
"""
from __future__ import annotations

import functools
import operator
from typing import Any

from refgrad.dtype import DType, dtypes

UNSIGNED_OF_SIZE: dict[int, DType] = {dt.itemsize: dt for dt in dtypes.uints}


class BitcastShapeError(RuntimeError):
  """A bitcast that changes the item size of a tensor whose last axis cannot be regrouped (torch: RuntimeError)."""


def check_bitcast(x: Any, dt: DType) -> None:
  """TypeError for bool (a bool byte other than 0 and 1 has no meaning); BitcastShapeError when the item sizes
  differ and the last axis cannot hold the bytes of whole elements of dt."""
  if dtypes.bool in (x.dtype, dt) and x.dtype != dt:
    raise TypeError(f"cannot bitcast {x.dtype.name} to {dt.name}: bool has no bit pattern for bytes other than 0 "
                    f"and 1; use cast()")
  if x.dtype.itemsize == dt.itemsize:
    return
  change = f"bitcast of shape {x.shape} from {x.dtype.name} ({x.dtype.itemsize}-byte items) to {dt.name} " \
           f"({dt.itemsize}-byte items)"
  if x.ndim == 0:
    raise BitcastShapeError(f"{change}: a change of item size needs a last axis to resize; got a 0-d tensor")
  last = x.shape[-1]
  if dt.itemsize > x.dtype.itemsize and (not isinstance(last, int) or last * x.dtype.itemsize % dt.itemsize):
    raise BitcastShapeError(f"{change}: the last axis ({last} elements, {last} * {x.dtype.itemsize} bytes) must "
                            f"hold a whole number of {dt.name} elements")


def resized_bitcast(x: Any, dt: DType) -> Any:
  """x's bytes as dt when the item sizes differ: the last axis shrinks or grows by the ratio of the item sizes."""
  bits = x.bitcast(UNSIGNED_OF_SIZE[x.dtype.itemsize])
  if dt.itemsize < x.dtype.itemsize:
    return _split(bits, UNSIGNED_OF_SIZE[dt.itemsize]).bitcast(dt)
  return _join(bits, UNSIGNED_OF_SIZE[dt.itemsize]).bitcast(dt)


def _split(bits: Any, narrow: DType) -> Any:
  """Each unsigned element as its narrow pieces, lowest-order first, side by side along the last axis."""
  count = bits.dtype.itemsize // narrow.itemsize
  pieces = [(bits >> (k * narrow.bits)).cast(narrow) for k in range(count)]  # the cast keeps the low bits
  return pieces[0].stack(*pieces[1:], dim=-1).flatten(-2)


def _join(bits: Any, wide: DType) -> Any:
  """Each run of narrow unsigned elements along the last axis as one wide element, the first the lowest-order."""
  count = wide.itemsize // bits.dtype.itemsize
  groups = bits.reshape(*bits.shape[:-1], bits.shape[-1] // count, count)
  pieces = [groups[..., k].cast(wide) << (k * bits.dtype.bits) for k in range(count)]
  return functools.reduce(operator.or_, pieces)
