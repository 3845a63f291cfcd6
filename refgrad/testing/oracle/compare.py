"""Comparing a device's output with the reference, the way docs/SPEC.md says.

- exact: equal bits, except that any two NaNs are equal (a NaN's sign and payload are unspecified);
- a ULP bound: for transcendentals, at most `ulp_bound` representable steps apart (NaN must match NaN);
- an absolute bound per lane (refgrad.testing.oracle.bounds): |actual - expected| <= bound[i], where inf means no
  bound exists and the lane is skipped and counted, and 0 means exact (so `-0.0` never passes for `+0.0`);
and lanes the reference marks undefined are skipped and counted.

`compare_lanes` keeps the verdict of every lane (`LaneVerdicts`), so that a run of lanes (one cell of a batch that
refgrad check runs as one kernel) is summed up without comparing again; `compare` sums up all of them.
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


@dataclass
class LaneVerdicts:
  """What compare_lanes found in each lane of one output (flat arrays, one entry per lane)."""
  dtype: DType
  undefined: np.ndarray  # the reference leaves the lane undefined: skipped
  unbounded: np.ndarray  # no error bound exists for the lane: skipped where defined
  good: np.ndarray       # the two values agree as the spec requires
  numbers: np.ndarray    # neither value is NaN
  ulps: np.ndarray | None  # ULP distance per lane, for floats compared with a bound (None: not measured)

  def summary(self, lanes: slice = slice(None), undefined: np.ndarray | None = None, keep: int = 5) -> Comparison:
    """The Comparison of `lanes` (flat indices in it count from the slice's start); `undefined` skips more lanes."""
    skipped = self.undefined[lanes] if undefined is None else self.undefined[lanes] | undefined[lanes]
    unbounded = self.unbounded[lanes] & ~skipped
    defined = ~skipped & ~unbounded
    result = Comparison(self.dtype, checked=int(defined.sum()), undefined=int(skipped.sum()),
                        unbounded=int(unbounded.sum()))
    if self.ulps is not None:
      measured = self.ulps[lanes][defined & self.numbers[lanes]]
      result.worst_ulp = int(measured.max()) if measured.size else 0
    bad = np.flatnonzero(defined & ~self.good[lanes])
    result.mismatch_count, result.mismatches = int(bad.size), bad[:keep].tolist()
    return result

  def histogram(self, lanes: slice = slice(None)) -> dict[int, int]:
    """ulp_histogram of `lanes`: lanes per ULP bucket, over the defined lanes where both values are numbers."""
    if self.ulps is None:
      raise ValueError("a ULP histogram needs float lanes compared with a bound")
    return bucket_counts(self.ulps[lanes][self.numbers[lanes] & ~self.undefined[lanes]])


def compare_lanes(actual: np.ndarray, expected: np.ndarray, undefined: np.ndarray | None = None, ulp_bound: int = 0,
                  abs_bound: np.ndarray | None = None) -> LaneVerdicts:
  """Compare flat copies of two arrays of one dtype lane by lane, keeping each lane's verdict."""
  actual, expected = np.ascontiguousarray(actual).reshape(-1), np.ascontiguousarray(expected).reshape(-1)
  if actual.dtype != expected.dtype or actual.shape != expected.shape:
    raise ValueError(f"cannot compare {actual.dtype}{list(actual.shape)} with {expected.dtype}{list(expected.shape)}")
  dtype = from_numpy(actual.dtype)
  skipped = np.zeros(actual.shape, dtype=bool) if undefined is None else \
    np.broadcast_to(np.asarray(undefined).reshape(-1), actual.shape)
  unbounded = np.zeros(actual.shape, dtype=bool)
  if abs_bound is not None:
    abs_bound = np.broadcast_to(np.asarray(abs_bound, dtype=np.float64), actual.shape)
    unbounded = np.isinf(abs_bound)
  nan_actual, nan_expected = _is_nan(actual), _is_nan(expected)
  good = (_bits(actual) == _bits(expected)) | (nan_actual & nan_expected)
  ulps = None
  if dtype.kind == "f" and (ulp_bound or abs_bound is not None):
    ulps = ulp_distance(actual, expected)
    if ulp_bound:  # ULP distance puts +0.0 and -0.0 at one point: only a real bound may accept the other zero
      good |= ulps <= ulp_bound
    if abs_bound is not None:
      with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
      good |= (abs_bound > 0) & (diff <= abs_bound)  # a zero bound means bit-exact: -0.0 is not +0.0
  return LaneVerdicts(dtype, skipped, unbounded, good, ~nan_actual & ~nan_expected, ulps)


def compare(actual: np.ndarray, expected: np.ndarray, undefined: np.ndarray | None = None, ulp_bound: int = 0,
            abs_bound: np.ndarray | None = None, keep: int = 5) -> Comparison:
  """Compare flat copies of two arrays of one dtype lane by lane."""
  return compare_lanes(actual, expected, undefined, ulp_bound, abs_bound).summary(keep=keep)


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
  return bucket_counts(ulp_distance(actual[keep], expected[keep]))


def bucket_counts(distances: np.ndarray) -> dict[int, int]:
  """How many of these ULP distances fall in each ulp_bucket."""
  values, counts = np.unique(distances, return_counts=True)
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

