"""Edge values, the one list of them in refgrad (`edge_values`: the strategies mix them into random values, tests
read them), and what a conformance check feeds an op: each dtype's edge values with their neighbours, and the
rounding boundaries of every narrowing conversion.

Backends go wrong at a handful of points (signed zeros, NaNs, infinities, subnormals, the extremes, ±1) and one
step away from them, and conversions go wrong exactly at their rounding boundaries: halfway between two values of
the target (ties, to even and to odd), at the overflow threshold and around the subnormal range. Random values
almost never land there, so the check enumerates them.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.uop import Ops

# NaNs that are not the default one: a quiet NaN with a payload, a negative quiet NaN, a signalling NaN
_NAN_BITS = {16: (0x7E01, 0xFE00, 0x7C01), 32: (0x7FC00001, 0xFFC00000, 0x7F800001),
             64: (0x7FF8000000000001, 0xFFF8000000000000, 0x7FF0000000000001)}
_BF16_NAN_BITS = (0x7FC1, 0xFFC0, 0x7F81)


def edge_values(dtype: DType) -> list[Any]:
  """The values where backends usually go wrong, for one dtype (dtype_edges adds their neighbours and NaN payloads)."""
  if dtype == dtypes.bool:
    return [False, True]
  if dtypes.is_int(dtype):
    lo, hi = dtypes.min(dtype), dtypes.max(dtype)
    return sorted({0, 1, 2, 7, hi, hi - 1, lo, lo + 1} | ({-1, -2, -7} if lo < 0 else set()))
  info = ml_dtypes.finfo(dtype.np)
  tiny, smallest = float(info.tiny), float(info.smallest_subnormal)
  return [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, float("nan"), float("inf"), float("-inf"), float(info.max),
          -float(info.max), tiny, smallest, -smallest, 1e-3, 100.0, math.pi]


def _unsigned(dtype: DType) -> np.dtype:
  return np.dtype(f"u{dtype.itemsize}")


def _from_bits(bits: list[int], dtype: DType) -> np.ndarray:
  return np.array(bits, dtype=_unsigned(dtype)).view(dtype.np)


def _unique(values: np.ndarray) -> np.ndarray:
  """Distinct values by their bits, in first-seen order (so -0.0 and +0.0, and every NaN payload, stay)."""
  _, first = np.unique(values.view(_unsigned(dtypes.from_np(values.dtype))), return_index=True)
  return values[np.sort(first)]


def float_neighbours(values: np.ndarray) -> np.ndarray:
  """The representable values one step above and below each finite value (toward and away from zero)."""
  dtype = dtypes.from_np(values.dtype)
  finite = values[np.isfinite(values.astype(np.float64))]
  bits = finite.view(_unsigned(dtype)).astype(np.int64)
  magnitude_mask = (1 << (dtype.bits - 1)) - 1
  steps = []
  for delta in (1, -1):
    moved = bits + delta
    keep = ((bits & magnitude_mask) + delta >= 0)  # -1 from a zero would change its sign bit
    steps.append(moved[keep])
  stepped = np.concatenate(steps).astype(_unsigned(dtype)).view(dtype.np)  # int64 -> unsigned wraps the sign bit
  return stepped[~np.isnan(stepped.astype(np.float64))]


def dtype_edges(dtype: DType) -> np.ndarray:
  """Edge values of a dtype and the values next to them: for floats also NaNs with payloads and 2^(p), where
  consecutive integers stop being representable; for ints each edge's neighbours within range."""
  if dtype == dtypes.bool:
    return np.array([False, True])
  if dtypes.is_int(dtype):
    lo, hi = dtypes.min(dtype), dtypes.max(dtype)
    values = sorted({v + d for v in edge_values(dtype) for d in (-1, 0, 1) if lo <= v + d <= hi})
    return np.array(values, dtype=object).astype(dtype.np)
  info = ml_dtypes.finfo(dtype.np)
  limit = float(2 ** (info.nmant + 1))
  with np.errstate(all="ignore"):
    base = np.array(edge_values(dtype) + [limit, -limit], dtype=np.float64).astype(dtype.np)
  nans = _from_bits(list(_BF16_NAN_BITS if dtype == dtypes.bfloat16 else _NAN_BITS[dtype.bits]), dtype)
  return _unique(np.concatenate([base, nans, float_neighbours(base)]))


# ---- inputs whose results fall where a transcendental goes wrong
def result_class_inputs(op: Ops, dtype: DType) -> np.ndarray:
  """Inputs of a transcendental whose results fall in every class a backend may get wrong, beside its edge inputs:
  subnormal results, the smallest normals, results near overflow, and exact results (powers of two, log2 of a power
  of two, sin of a subnormal), with their neighbours and both signs. Edge inputs and random ones almost never give
  them: exp2's results are subnormal only for x in [-149, -126) in float32, [-24, -14) in half."""
  info = ml_dtypes.finfo(dtype.np)
  low, high = int(info.minexp), int(info.maxexp)  # 2^low is the smallest normal; the largest finite is below 2^high
  bottom = low - int(info.nmant)                    # 2^bottom is the smallest subnormal
  if op is Ops.EXP2:
    points = [bottom - 1, bottom - 0.5, bottom, bottom + 0.25, (bottom + low) / 2, low - 1.5, low - 0.5, low,
              low + 0.5, high - 1.5, high - 1, high - 0.25, high, 0.5, *range(-6, 7)]
  elif op is Ops.LOG2:
    powers = [bottom, bottom + 1, (bottom + low) // 2, low - 1, low, low + 1, -1, 0, 1, 2, high - 1]
    points = [2.0 ** k for k in powers] + [float(info.max), 1 + float(info.eps), 1 - float(info.epsneg)]
  elif op is Ops.SIN:
    points = [2.0 ** bottom, 3 * 2.0 ** bottom, 2.0 ** ((bottom + low) // 2), 2.0 ** low, 1.5 * 2.0 ** low,
              2.0 ** (low + 1), 2.0 ** -int(info.nmant), np.pi, np.pi / 2, 2 * np.pi]
  else:
    raise ValueError(f"result classes are defined for EXP2, LOG2 and SIN, not {op.name}")
  with np.errstate(all="ignore"):
    values = np.array([p for x in points for p in (x, -x)], dtype=np.float64).astype(dtype.np)
  return _unique(np.concatenate([values, float_neighbours(values)]))


# ---- rounding boundaries of conversions
def _ulp(value: Fraction, dtype: DType) -> Fraction:
  """The spacing of a float dtype's values at a positive `value` (the subnormal spacing below the normal range)."""
  if value <= 0:
    raise ValueError(f"the spacing of {dtype.name} is asked at {value}, which is not positive")
  info = ml_dtypes.finfo(dtype.np)
  exponent = value.numerator.bit_length() - value.denominator.bit_length()  # floor(log2(value)), or one more
  if Fraction(2) ** exponent > value:
    exponent -= 1
  return Fraction(2) ** (max(exponent, int(info.minexp)) - int(info.nmant))


def _limits(dtype: DType) -> tuple[Fraction, Fraction, Fraction]:
  """A float dtype's largest finite value, smallest normal and smallest subnormal, exactly, from its exponent range
  and digits (not computed in floating point: under flush-to-zero, ml_dtypes' first finfo of a dtype gives 0)."""
  info = ml_dtypes.finfo(dtype.np)
  low, high, digits = int(info.minexp), int(info.maxexp), int(info.nmant)
  return (2 - Fraction(2) ** -digits) * Fraction(2) ** (high - 1), Fraction(2) ** low, Fraction(2) ** (low - digits)


def float_boundaries(dtype: DType) -> list[Fraction]:
  """Points where converting to the float `dtype` changes its result: halfway between neighbouring values of
  `dtype` (ties: at 1 with an even last bit, next to 1 with an odd one, where the spacing reaches 1 and 2, at 2^31
  and 2^63 for wide integers, at the top of the subnormal range and its bottom), and the overflow threshold
  max + ulp/2. Both signs."""
  info = ml_dtypes.finfo(dtype.np)
  largest, tiny, smallest = _limits(dtype)
  one_up = 1 + _ulp(Fraction(1), dtype)
  spacing_one = Fraction(2) ** info.nmant
  points = [Fraction(1), one_up, Fraction(3), spacing_one, spacing_one + 1, 2 * spacing_one, 2 * spacing_one + 2,
            tiny, tiny - smallest, smallest, 2 * smallest, largest - _ulp(largest, dtype), Fraction(1000) + one_up]
  wide = [Fraction(2) ** k for k in (31, 63) if Fraction(2) ** k < largest]  # where wide integers round
  points += wide + [p + _ulp(p, dtype) for p in wide]
  boundaries = [p + _ulp(p, dtype) / 2 for p in points] + [smallest / 2, largest + _ulp(largest, dtype) / 2]
  return boundaries + [-b for b in boundaries]


# the floats a backend may convert through on the way to a narrower one (sitofp to double, then fptrunc)
INTERMEDIATE_FLOATS = (dtypes.float32, dtypes.float64)


def _spacing(value: Fraction, dtype: DType) -> Fraction:
  return Fraction(1) if dtypes.is_int(dtype) else _ulp(value, dtype)


def double_rounding_boundaries(src: DType, dst: DType) -> list[Fraction]:
  """Ties of `dst` that a conversion from `src` through a float of middle precision rounds onto: `src` holds values
  next to the tie that the intermediate cannot, so the intermediate rounds them to the tie itself, and the tie then
  goes to even, where the direct conversion goes the other way (int64 2^60 + 2^36 + 1 -> float32 is 2^60 + 2^37,
  through double 2^60). Per intermediate, in the binades of dst's lowest subnormals, its smallest normal, 1, where
  an integer source first outruns the intermediate, 2^60, and the top of src's and dst's ranges: the tie above the
  binade's even start, the one above its first odd value, and the one below its end. Both signs."""
  if not dtypes.is_float(dst) or src == dtypes.bool:
    return []
  d_info = ml_dtypes.finfo(dst.np)
  top = min(Fraction(dtypes.max(src)) if dtypes.is_int(src) else _limits(src)[0], _limits(dst)[0])
  ties = []
  for middle in INTERMEDIATE_FLOATS:
    m_info = ml_dtypes.finfo(middle.np)
    if middle == src or m_info.nmant <= d_info.nmant:
      continue
    exponents = {int(d_info.minexp) - int(d_info.nmant) + 1, int(d_info.minexp), 0, int(m_info.nmant) + 2, 60,
                 top.numerator.bit_length() - top.denominator.bit_length() - 1}
    for power in (Fraction(2) ** k for k in exponents):
      step = _ulp(power, dst)
      finer, rounds = _spacing(power, src) * 2 < _ulp(power, middle), _ulp(power, middle) < step
      if finer and rounds and 2 * power - step / 2 <= top:
        ties += [power + step / 2, power + 3 * step / 2, 2 * power - step / 2]
  return [t for tie in dict.fromkeys(ties) for t in (tie, -tie) if t % _spacing(abs(t), src) == 0]


def int_boundaries(dtype: DType) -> list[Fraction]:
  """Where converting to the int `dtype` changes: its range limits and the integers and halves around zero."""
  lo, hi = dtypes.min(dtype), dtypes.max(dtype)
  points = [0, Fraction(1, 2), Fraction(-1, 2), 1, -1, Fraction(3, 2), Fraction(-3, 2), hi, hi + 1, lo, lo - 1,
            1 << dtype.bits, Fraction(hi) + Fraction(1, 2), Fraction(lo) - Fraction(1, 2)]
  return [Fraction(p) for p in points]


def _around_in(boundary: Fraction, dtype: DType) -> list:
  """Values of `dtype` at and one step either side of `boundary` (the nearest ones when it is not representable)."""
  if dtypes.is_int(dtype):
    lo, hi = dtypes.min(dtype), dtypes.max(dtype)
    floor = boundary.numerator // boundary.denominator
    return [v for v in (floor - 1, floor, floor + 1, floor + 2) if lo <= v <= hi]
  with np.errstate(all="ignore"):
    nearest = np.array([float(boundary)], dtype=np.float64).astype(dtype.np)
  if not np.isfinite(nearest.astype(np.float64)).all():
    return []  # beyond what `dtype` holds: its extremes are among its edges already
  return list(nearest) + list(float_neighbours(nearest))


def narrows(src: DType, dst: DType) -> bool:
  """True if some value of `src` is not a value of `dst` (the conversion may round, overflow or wrap)."""
  if dst == dtypes.bool:
    return src != dtypes.bool
  if src == dtypes.bool:
    return False
  if dtypes.is_int(src) and dtypes.is_int(dst):
    return dtypes.min(src) < dtypes.min(dst) or dtypes.max(src) > dtypes.max(dst)
  if dtypes.is_float(dst) and dtypes.is_int(src):
    return max(abs(dtypes.min(src)), dtypes.max(src)).bit_length() > ml_dtypes.finfo(dst.np).nmant + 1
  if dtypes.is_float(src) and dtypes.is_float(dst):
    s, d = ml_dtypes.finfo(src.np), ml_dtypes.finfo(dst.np)
    return s.nmant > d.nmant or float(s.max) > float(d.max) or float(s.smallest_subnormal) < float(d.smallest_subnormal)
  return True  # float to int


def cast_values(src: DType, dst: DType) -> np.ndarray:
  """Inputs of `src` for a CAST to `dst`: the edges of `src`, and for a narrowing conversion the values at and one
  step either side of each of `dst`'s rounding boundaries that `src` can hold, its double-rounding ties included."""
  edges = dtype_edges(src)
  if not narrows(src, dst) or dst == dtypes.bool:
    return edges
  boundaries = float_boundaries(dst) + double_rounding_boundaries(src, dst) if dtypes.is_float(dst) else \
    int_boundaries(dst)
  found = [v for b in boundaries for v in _around_in(b, src)]
  with np.errstate(all="ignore"):
    extra = np.array(found, dtype=object if dtypes.is_int(src) else np.float64).astype(src.np)
  return _unique(np.concatenate([edges, extra])) if dtypes.is_float(src) else \
    np.array(sorted(set(edges.tolist()) | set(extra.tolist())), dtype=object).astype(src.np)
