"""Comparing a device's output with the reference, the way docs/SPEC.md says.

- exact: equal bits, except that any two NaNs are equal (a NaN's sign and payload are unspecified);
- a ULP bound: for transcendentals, at most `ulp_bound` representable steps apart (NaN must match NaN);
- an absolute bound per lane (refgrad.testing.bounds): |actual - expected| <= bound[i], where inf means no
  bound exists and the lane is skipped and counted, and 0 means exact (so `-0.0` never passes for `+0.0`);
and lanes the reference marks undefined are skipped and counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refgrad.alu import ulp_distance
from refgrad.dtype import DType, from_numpy


@dataclass
class Comparison:
  """The outcome of comparing one output. `mismatches` holds flat indices of the first differing lanes."""
  dtype: DType
  checked: int = 0
  undefined: int = 0
  unbounded: int = 0  # lanes where no error bound exists (an inexact input straddles a comparison): skipped
  worst_ulp: int = 0
  mismatches: list[int] = field(default_factory=list)
  mismatch_count: int = 0

  @property
  def ok(self) -> bool:
    return self.mismatch_count == 0


def _bits(x: np.ndarray) -> np.ndarray:
  return x.view(f"u{x.dtype.itemsize}")


def _is_nan(x: np.ndarray) -> np.ndarray:
  if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
    with np.errstate(invalid="ignore"):
      return np.isnan(x.astype(np.float64))
  return np.zeros(x.shape, dtype=bool)


def compare(actual: np.ndarray, expected: np.ndarray, undefined: np.ndarray | None = None, ulp_bound: int = 0,
            abs_bound: np.ndarray | None = None, keep: int = 5) -> Comparison:
  """Compare flat copies of two arrays of one dtype lane by lane."""
  actual, expected = np.ascontiguousarray(actual).reshape(-1), np.ascontiguousarray(expected).reshape(-1)
  if actual.dtype != expected.dtype or actual.shape != expected.shape:
    raise ValueError(f"cannot compare {actual.dtype}{list(actual.shape)} with {expected.dtype}{list(expected.shape)}")
  dtype = from_numpy(actual.dtype)
  defined = np.ones(actual.shape, dtype=bool) if undefined is None else ~np.asarray(undefined).reshape(-1)
  undefined_count = int((~defined).sum())
  unbounded = 0
  if abs_bound is not None:
    abs_bound = np.broadcast_to(np.asarray(abs_bound, dtype=np.float64), actual.shape)
    skip = np.isinf(abs_bound) & defined
    unbounded, defined = int(skip.sum()), defined & ~skip
  result = Comparison(dtype, checked=int(defined.sum()), undefined=undefined_count, unbounded=unbounded)
  both_nan = _is_nan(actual) & _is_nan(expected)
  good = (_bits(actual) == _bits(expected)) | both_nan
  if dtype.kind == "f" and (ulp_bound or abs_bound is not None):
    ulps = ulp_distance(actual, expected)
    if ulp_bound:  # ULP distance puts +0.0 and -0.0 at one point: only a real bound may accept the other zero
      good |= ulps <= ulp_bound
    if abs_bound is not None:
      with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
      good |= (abs_bound > 0) & (diff <= abs_bound)  # a zero bound means bit-exact: -0.0 is not +0.0
    checked_ulps = ulps[defined & ~both_nan & ~(_is_nan(actual) ^ _is_nan(expected))]
    result.worst_ulp = int(checked_ulps.max()) if checked_ulps.size else 0
  bad = np.flatnonzero(defined & ~good)
  result.mismatch_count, result.mismatches = int(bad.size), bad[:keep].tolist()
  return result


def ulp_bucket(distance: int) -> int:
  """The histogram bucket of a ULP distance: 0, 1, 2, then the next power of two (4 holds 3 and 4, 8 holds 5..8)."""
  return 0 if distance <= 0 else 1 << (int(distance) - 1).bit_length()


def ulp_histogram(actual: np.ndarray, expected: np.ndarray, undefined: np.ndarray | None = None) -> dict[int, int]:
  """How many lanes lie how many ULPs from the reference (bucket -> lanes, see ulp_bucket), over the defined lanes
  where both are numbers (a NaN against a number is a mismatch, not a distance)."""
  actual, expected = np.ascontiguousarray(actual).reshape(-1), np.ascontiguousarray(expected).reshape(-1)
  keep = ~(_is_nan(actual) | _is_nan(expected))
  if undefined is not None:
    keep &= ~np.broadcast_to(np.asarray(undefined), actual.shape).reshape(-1)
  values, counts = np.unique(ulp_distance(actual[keep], expected[keep]), return_counts=True)
  histogram: dict[int, int] = {}
  for value, count in zip(values.tolist(), counts.tolist()):
    bucket = ulp_bucket(value)
    histogram[bucket] = histogram.get(bucket, 0) + count
  return histogram


def add_histogram(into: dict[int, int], histogram: dict[int, int]) -> dict[int, int]:
  """Add `histogram`'s lanes into `into`, bucket by bucket; returns `into`."""
  for bucket, lanes in histogram.items():
    into[bucket] = into.get(bucket, 0) + lanes
  return into

