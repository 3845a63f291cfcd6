"""What `refgrad check` feeds each op, checked against numpy: edge values with their neighbours, the rounding
boundaries of narrowing casts, signed zeros compared bit for bit, and the backend code paths the check reaches."""
import itertools
import json
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from refgrad import Device
from refgrad.cli import main
from refgrad.dtype import DTYPES_BY_PRIORITY, dtypes
from refgrad.ops import OP_FACTS
from refgrad.testing.conformance import report as check_report
from refgrad.testing.conformance.batches import cast_batches, exact_sum_rows, op_batches, reduce
from refgrad.testing.conformance.results import PASS
from refgrad.testing.conformance.run import run_conformance
from refgrad.testing.edges import cast_values, dtype_edges, float_neighbours, narrows
from refgrad.testing.oracle import bounds
from refgrad.testing.oracle.compare import compare
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.uop import Ops

FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
COMPILED = [d for d in ("CLANG", "LLVM") if d in Device.available()]


def bits(x: np.ndarray) -> set[int]:
  return set(x.view(f"u{x.dtype.itemsize}").tolist())


def test_check_has_a_bitcast_cell_for_every_pair_of_dtypes_but_bool():
  """Same item size (the BITCAST primitive) and different ones (Tensor.bitcast's composition), in one row per
  target; a resizing source's edges fill whole target elements."""
  kinds = DTYPES_BY_PRIORITY
  batches = [b for d in kinds for b in cast_batches(d, kinds)]
  cells = {(s.row, s.column) for b in batches for s in b.segments if s.row.startswith("BITCAST")}
  numeric = [d for d in kinds if d != dtypes.bool]
  assert cells == {(f"BITCAST->{d.name}", s.name) for d in numeric for s in numeric if s != d}
  resizing = [b for b in batches if b.label.endswith("between item sizes")]
  assert all(x.nbytes % dst.itemsize == 0 for b in resizing for x, dst in zip(b.inputs, [b.dtypes[0]] * len(b.inputs)))


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_float_edges_hold_signed_zeros_nan_payloads_and_neighbours(dtype):
  edges = dtype_edges(dtype)
  info = ml_dtypes.finfo(dtype.np)
  with np.errstate(invalid="ignore"):  # signalling NaNs
    as64 = edges.astype(np.float64)
  assert {0.0, -0.0} <= set(as64.tolist()) and np.signbit(as64[as64 == 0]).tolist().count(True) == 1
  assert np.isinf(as64).sum() == 2 and np.isnan(as64).sum() >= 3  # default, payload, negative, signalling NaNs
  assert len(bits(edges[np.isnan(as64)])) == np.isnan(as64).sum()  # the NaNs differ in their bits
  one, largest, smallest = np.array([1.0, float(info.max), float(info.smallest_subnormal)], dtype=dtype.np)
  if dtype == dtypes.float64:  # numpy's nextafter is the oracle for one step
    for value in (one, largest, smallest):
      for direction in (np.inf, -np.inf):
        with np.errstate(over="ignore"):
          neighbour = np.nextafter(np.float64(value), direction)
        if np.isfinite(neighbour):
          assert int(np.array(neighbour).view(np.uint64)) in bits(edges)
  steps = float_neighbours(np.array([1.0], dtype=dtype.np)).astype(np.float64)
  assert sorted(steps.tolist()) == [1 - float(info.epsneg), 1 + float(info.eps)]
  assert 2.0 ** (info.nmant + 1) in as64.tolist()  # where consecutive integers stop being representable


@pytest.mark.parametrize("src,dst", [(dtypes.float32, dtypes.float16), (dtypes.float32, dtypes.bfloat16),
                                     (dtypes.float64, dtypes.float32), (dtypes.int64, dtypes.float32),
                                     (dtypes.float16, dtypes.bfloat16)], ids=str)
def test_narrowing_casts_reach_ties_rounding_down_and_up(src, dst):
  """Among the inputs are values exactly halfway between two neighbouring `dst` values, both ones that round to
  even downward and ones that round to even upward (numpy, which rounds to nearest even, is the oracle), and
  values one step either side of such a tie."""
  values = cast_values(src, dst)
  with np.errstate(all="ignore"):
    rounded = values.astype(dst.np)
  down = up = 0
  present = bits(values) if src.kind == "f" else set(values.tolist())
  for i, (x, r) in enumerate(zip(values.tolist(), rounded)):
    if not np.isfinite(float(r)) or (src.kind == "f" and not np.isfinite(x)):
      continue
    exact, result = Fraction(int(x)) if src.kind in "iu" else Fraction(float(x)), Fraction(float(r))
    for other in float_neighbours(np.array([r], dtype=dst.np)).astype(np.float64).tolist():
      if not np.isfinite(other):
        continue
      around = bits(float_neighbours(values[i:i + 1])) if src.kind == "f" else {x - 1, x + 1}
      if 2 * exact == result + Fraction(other) and around <= present:  # a tie, with its neighbours in `src`
        down, up = down + (other > result), up + (other < result)
  assert narrows(src, dst)
  assert down > 0 and up > 0


def test_float32_to_half_boundaries_include_overflow_and_subnormal_thresholds():
  with np.errstate(invalid="ignore"):
    values = cast_values(dtypes.float32, dtypes.float16).astype(np.float64)
  threshold = 65504.0 + 16.0  # half's max plus half an ulp: rounds to inf
  assert threshold in values and np.nextafter(np.float32(threshold), np.float32(0)) in values.astype(np.float32)
  smallest = float(ml_dtypes.finfo(np.float16).smallest_subnormal)
  assert smallest / 2 in values and 1.5 * smallest in values  # ties at the bottom of the subnormal range
  with np.errstate(over="ignore"):
    assert np.isinf(np.float32(threshold).astype(np.float16)) and np.float32(smallest / 2).astype(np.float16) == 0


def test_signed_zero_never_passes_for_the_other_where_the_spec_is_exact():
  minus, plus = np.array([-0.0], np.float32), np.array([0.0], np.float32)
  assert not compare(minus, plus).ok
  assert not compare(minus, plus, abs_bound=np.zeros(1)).ok
  assert compare(minus, plus, abs_bound=np.full(1, 1e-6)).ok  # a real bound accepts either zero
  assert not compare(np.array([1e-7], np.float32), plus, abs_bound=np.zeros(1)).ok


def test_a_sum_of_negative_zeros_may_have_either_sign():
  """SPEC.md leaves the sign of a zero sum open: the device's -0.0 and the reference's +0.0 both pass, and a
  later op that depends on the sign (1/x) is not held to one."""
  rows = np.full((3, 5), -0.0, np.float32)
  report = check_against_reference(lambda t: t.sum(1), rows, device="PYTHON")
  assert report.ok
  from refgrad.tensor import Tensor
  from refgrad.testing.oracle.bounds import kernel_error_bounds
  item = Tensor(rows).sum(1).schedule()[-1]
  _, bound, _ = kernel_error_bounds(item.ast, {1: rows.reshape(-1), 0: np.zeros(3, np.float32)})
  assert np.all(bound > 0) and np.all(bound < 1e-40)


def test_matrix_counts_lanes_per_op_and_dtype(capsys, tmp_path):
  report = tmp_path / "report.json"
  assert main(["check", "--device", "PYTHON", "--only", "FDIV", "--json", str(report)]) == 0
  out = capsys.readouterr().out
  row = next(line for line in out.splitlines() if line.startswith("FDIV "))
  edges = len(dtype_edges(dtypes.float32))
  assert str(edges * edges) in row.split()  # every ordered pair of float32 edge values
  assert "lanes checked" in out
  cells = {(c["row"], c["column"]): c for c in json.loads(report.read_text())["cases"]}
  assert cells[("FDIV", "float64")]["checked"] == len(dtype_edges(dtypes.float64)) ** 2


@pytest.mark.parametrize("device", COMPILED)
def test_check_reaches_split_reductions_and_their_remainder(device, capsys):
  run = run_conformance(device, only="REDUCE")
  assert all(r.status == PASS for r in run.results)
  assert run.paths["split reduction (8 accumulators)"] > 0 and run.paths["split reduction remainder loop"] > 0
  assert "split reduction" in check_report.paths_text(run)


@pytest.mark.parametrize("device", ["PYTHON"] + COMPILED)
def test_reductions_of_single_value_rows_match_numpy(device):
  """The reference itself, at the points a wrong identity shows: numpy gives max(-inf row) = -inf, min(+inf row) =
  +inf, sum/prod/max of NaN rows NaN, and the empty reduction's identity."""
  from refgrad import Tensor
  for value in (-np.inf, np.inf, np.nan, -0.0, float(np.finfo(np.float32).max)):
    rows = np.full((2, 13), value, np.float32)
    t = Tensor(rows, device=device)
    np.testing.assert_array_equal(t.max(1).numpy(), rows.max(1))
    np.testing.assert_array_equal(t.min(1).numpy(), rows.min(1))
  empty = np.zeros((3, 0), np.float32)
  assert reduce(Tensor(empty, device=device), Ops.MAX).numpy().tolist() == [-np.inf] * 3
  np.testing.assert_array_equal(Tensor(empty, device=device).sum(1).numpy(), empty.sum(1))


# ---- issue 26: what the check once missed
DOUBLE_ROUNDING = [(dtypes.int64, dtypes.float32, dtypes.float64), (dtypes.uint64, dtypes.float32, dtypes.float64),
                   (dtypes.int64, dtypes.bfloat16, dtypes.float32), (dtypes.int32, dtypes.bfloat16, dtypes.float32),
                   (dtypes.uint32, dtypes.bfloat16, dtypes.float32), (dtypes.float64, dtypes.float16, dtypes.float32),
                   (dtypes.float64, dtypes.bfloat16, dtypes.float32)]


def _rounded_once(value: Fraction, dst) -> float:
  """value rounded to nearest-even at dst's precision, computed in exact rationals (NaN outside dst's normal range,
  which the test leaves out): numpy's own conversions to bfloat16 round through float32 in some ml_dtypes versions."""
  info = ml_dtypes.finfo(dst.np)
  if value == 0:
    return 0.0
  exponent = value.numerator.bit_length() - value.denominator.bit_length()  # floor(log2 |value|), or one above
  if Fraction(2) ** exponent > abs(value):
    exponent -= 1
  if not info.minexp <= exponent < info.maxexp:
    return float("nan")
  step = Fraction(2) ** (exponent - info.nmant)
  rounded = float(round(value / step) * step)  # Fraction's round() is half to even
  return rounded if rounded <= float(info.max) else float("inf")


@pytest.mark.parametrize("src, dst, middle", DOUBLE_ROUNDING, ids=lambda d: d.name)
def test_cast_rows_hold_values_that_a_conversion_through_a_wider_float_rounds_twice(src, dst, middle):
  """Rounded once to dst (exactly, in rationals) and rounded twice, through `middle`: some of the row's values must
  tell the two apart, on both sides of zero where src has them (int64 2^60 + 2^36 + 1 -> float32, for one)."""
  values = cast_values(src, dst)
  finite = values[np.isfinite(values.astype(np.float64))] if src.kind == "f" else values
  exact = [Fraction(int(v)) if src.kind in "iu" else Fraction(float(v)) for v in finite]
  direct = np.array([_rounded_once(abs(v), dst) * (1 if v >= 0 else -1) for v in exact])
  with np.errstate(all="ignore"):
    twice = finite.astype(middle.np).astype(dst.np).astype(np.float64)
  apart = finite[~np.isnan(direct) & (direct != twice)]
  assert len(apart) >= 2
  if src.kind != "u":
    assert (apart.astype(np.float64) < 0).any() and (apart.astype(np.float64) > 0).any()


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
def test_transcendental_rows_reach_every_class_of_result(dtype):
  """Results (computed by numpy in float64, rounded to the dtype) that are subnormal, among the smallest normals,
  within a factor 2 of overflow, and exact powers of two, for EXP2; exact powers of two and subnormal inputs for LOG2
  and SIN."""
  info = ml_dtypes.finfo(dtype.np)
  tiny, largest = float(info.tiny), float(info.max)
  rows = {op: op_batches(dtype)[0].inputs[i] for i, op in
          zip(range(6, 9), [op for op, facts in OP_FACTS.items() if facts.transcendental])}
  with np.errstate(all="ignore"):
    exp2 = np.exp2(rows[Ops.EXP2].astype(np.float64)).astype(dtype.np).astype(np.float64)
    log2_inputs, sin_inputs = (rows[op].astype(np.float64) for op in (Ops.LOG2, Ops.SIN))
  assert ((exp2 > 0) & (exp2 < tiny)).any() and ((exp2 >= tiny) & (exp2 < 4 * tiny)).any()
  assert ((exp2 > largest / 2) & np.isfinite(exp2)).any() and np.isinf(exp2).any()
  assert {2.0 ** k for k in range(-6, 7)} <= set(exp2.tolist())
  for inputs in (log2_inputs, sin_inputs):
    assert ((inputs > 0) & (inputs < tiny)).any() and (np.abs(inputs) == tiny).any()
  assert {2.0 ** k for k in (-1, 0, 1, 2)} <= set(log2_inputs.tolist())


def sequential_sums(terms: np.ndarray) -> set[float]:
  """Every order's left-to-right sum, rounded after each add in the terms' dtype (numpy's scalar arithmetic)."""
  out = set()
  for order in itertools.permutations(terms.tolist()):
    total = terms.dtype.type(0)
    for t in order:
      total = terms.dtype.type(total + terms.dtype.type(t))
    out.add(float(total))
  return out


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32], ids=lambda d: d.name)
def test_a_sum_judged_exact_in_every_order_is(dtype):
  """Where bounds.exact_in_every_order says so, every summation order of every lane gives the exact (Fraction) sum;
  the exact-sum rows of the check are such lanes, and their sum is not exact once a product is fused (unrounded)."""
  rng = np.random.default_rng(3)
  digits = ml_dtypes.finfo(dtype.np).nmant + 1
  spread = rng.integers(0, digits + 3, (300, 1))  # how far apart the terms' exponents may be, per lane
  exponents = rng.integers(-16, -4, (300, 1)) + (rng.random((300, 5)) * (spread + 1)).astype(int)
  lanes = (rng.integers(-40, 40, (300, 5)) * 2.0 ** exponents).astype(dtype.np)
  exact = bounds.exact_in_every_order(lanes.astype(np.float64), (1,), dtype).reshape(-1)
  assert exact.any() and not exact.all()
  for lane in lanes[exact]:
    assert sequential_sums(lane) == {float(sum(Fraction(float(t)) for t in lane))}
  a, b = exact_sum_rows(dtype)
  products = (a * b).astype(np.float64)
  assert bounds.exact_in_every_order(products, (1,), dtype).all()
  unrounded = a.astype(np.float64) * b.astype(np.float64)  # exact for these operands in float64
  assert (unrounded.sum(1) != products.sum(1)).all()


@pytest.mark.skipif("OPENCL" not in Device.available(), reason="the grouped path is OPENCL's")
def test_every_reduce_row_reaches_every_reduction_path_of_the_device(tmp_path):
  """Each REDUCE row of a float and an int dtype reports, in the JSON, the paths its kernels took: serial loops,
  split reductions with their remainder, and OPENCL's grouped reduction for the long rows."""
  report = tmp_path / "report.json"
  assert main(["check", "--device", "OPENCL", "--only", "REDUCE ADD", "--json", str(report)]) == 0
  cases = {(c["row"], c["column"]): set(c["paths"]) for c in json.loads(report.read_text())["cases"]}
  for dtype in ("float32", "int32"):
    paths = cases[("REDUCE ADD", dtype)]
    assert {"serial reduction loop", "split reduction (8 accumulators)",
            "grouped reduction (local memory and barriers)"} <= paths
