"""refgrad/alu.py against independent oracles.

Integers: Python's unbounded ints reduced mod 2**bits, and torch (CPU) for the dtypes it fully supports. Floats: exact
Fraction arithmetic rounded by the small correctly rounding `round_exact` below, Python floats and `math` for the
rest. Every test runs with warnings as errors, since alu.py must never warn.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch

from refgrad import alu
from refgrad.alu import exec_alu, exec_bitcast, exec_cast, exec_reduce, undefined_cast_lanes, undefined_lanes
from refgrad.dtype import DType, dtypes
from refgrad.ops import OP_FACTS
from refgrad.testing.edges import edge_values
from refgrad.uop import GroupOp, Ops

pytestmark = pytest.mark.filterwarnings("error")

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
        dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
ALL = [dtypes.bool, *INTS, *FLOATS]
INT_BINARY = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.CMPLT, Ops.CMPNE,
              Ops.SHL, Ops.SHR]
FLOAT_BINARY = [Ops.ADD, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE]


def rng(seed: int) -> np.random.Generator:
  return np.random.default_rng(seed)


def ids(dts: list[DType]) -> list[str]:
  return [d.name for d in dts]


# ---- integer oracle: Python ints
def bounds(dt: DType) -> tuple[int, int]:
  if dt.kind == "u":
    return 0, (1 << dt.bits) - 1
  return -(1 << (dt.bits - 1)), (1 << (dt.bits - 1)) - 1


def wrap(v: int, dt: DType) -> int:
  low = v & ((1 << dt.bits) - 1)
  return low - (1 << dt.bits) if dt.kind == "i" and low >> (dt.bits - 1) else low


def int_edges(dt: DType, n_random: int = 6) -> list[int]:
  """The oracle kit's edge values, and what integer ALU semantics also turn on: small odd divisors and shift counts
  (3, 5, -3), the halves and a third of the range (products and sums that just fit or just overflow), random ints."""
  lo, hi = bounds(dt)
  picks = set(edge_values(dt)) | {3, 5, -3, hi // 2, lo // 2, hi // 3}
  picks |= {int(v) for v in rng(dt.bits).integers(lo, hi, size=n_random, dtype=dt.np, endpoint=True)}
  return sorted(v for v in picks if lo <= v <= hi)


def c_div(a: int, b: int) -> int:
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


PY_INT: dict[Ops, object] = {
  Ops.ADD: lambda a, b: a + b, Ops.MUL: lambda a, b: a * b, Ops.MAX: max,
  Ops.IDIV: c_div, Ops.MOD: lambda a, b: a - b * c_div(a, b),
  Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
  Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b,
  Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b,  # Python's >> on negatives is arithmetic
}


def int_undefined(op: Ops, dt: DType, a: int, b: int) -> bool:
  if op in (Ops.IDIV, Ops.MOD):
    return b == 0 or (dt.kind == "i" and a == bounds(dt)[0] and b == -1)
  if op in (Ops.SHL, Ops.SHR):
    return not 0 <= b < dt.bits
  return False


def int_expected(op: Ops, dt: DType, a: int, b: int) -> int:
  """The exact result, or the value SPEC says the reference returns in an undefined lane."""
  if int_undefined(op, dt, a, b):
    return a if op is Ops.IDIV and b == -1 else 0  # MIN / -1 gives the wrapped quotient, MIN
  out = PY_INT[op](a, b)
  return out if op in GroupOp.Comparison else wrap(out, dt)


def int_operands(op: Ops, dt: DType) -> tuple[np.ndarray, np.ndarray]:
  a_vals = int_edges(dt)
  b_vals = [v for v in range(-2, dt.bits + 3) if bounds(dt)[0] <= v] if op in (Ops.SHL, Ops.SHR) else a_vals
  a, b = np.meshgrid(np.array(a_vals, dt.np), np.array(b_vals, dt.np))
  return a.ravel(), b.ravel()


@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
@pytest.mark.parametrize("op", INT_BINARY, ids=lambda o: o.name)
def test_int_binary_against_python(op: Ops, dt: DType):
  a, b = int_operands(op, dt)
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  got = exec_alu(op, out_dt, a, b)
  assert got.dtype == out_dt.np and got.shape == a.shape
  want = [int_expected(op, dt, x, y) for x, y in zip(a.tolist(), b.tolist())]
  bad = [(x, y, g, w) for x, y, g, w in zip(a.tolist(), b.tolist(), got.tolist(), want) if g != w]
  assert not bad, f"{op} {dt} (a, b, got, want): {bad[:5]}"
  marks = undefined_lanes(op, out_dt, a, b)
  if op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR):
    assert marks.tolist() == [int_undefined(op, dt, x, y) for x, y in zip(a.tolist(), b.tolist())]
  else:
    assert marks is None


@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
def test_int_neg_wraps(dt: DType):
  a = np.array(int_edges(dt), dt.np)
  assert exec_alu(Ops.NEG, dt, a).tolist() == [wrap(-v, dt) for v in a.tolist()]
  assert undefined_lanes(Ops.NEG, dt, a) is None


def test_int64_uint64_exact_near_limits():
  # values that lose bits through float64: quotients and remainders must still be exact
  a = np.array([2**63 - 1, 2**63 - 1, -2**63, -2**63 + 1, 2**62 + 1, -(2**53 + 1)], np.int64)
  b = np.array([3, -2**62 - 1, 3, 2**53 + 1, 2**53 - 1, -7], np.int64)
  assert exec_alu(Ops.IDIV, dtypes.int64, a, b).tolist() == [c_div(x, y) for x, y in zip(a.tolist(), b.tolist())]
  assert exec_alu(Ops.MOD, dtypes.int64, a, b).tolist() == [x - y * c_div(x, y) for x, y in zip(a.tolist(), b.tolist())]
  ua = np.array([2**64 - 1, 2**64 - 1, 2**63 + 12345], np.uint64)
  ub = np.array([3, 2**63 + 1, 2**32 + 1], np.uint64)
  assert exec_alu(Ops.IDIV, dtypes.uint64, ua, ub).tolist() == [x // y for x, y in zip(ua.tolist(), ub.tolist())]
  assert exec_alu(Ops.MOD, dtypes.uint64, ua, ub).tolist() == [x % y for x, y in zip(ua.tolist(), ub.tolist())]
  assert exec_alu(Ops.MUL, dtypes.uint64, ua, ub).tolist() == [x * y % 2**64 for x, y in zip(ua.tolist(), ub.tolist())]


# ---- torch as a second integer oracle (only where torch has full support for the dtype)
TORCH_INTS = {dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16, dtypes.int32: torch.int32,
              dtypes.int64: torch.int64}
TORCH_OPS: dict[Ops, object] = {
  Ops.ADD: torch.add, Ops.MUL: torch.mul, Ops.MAX: torch.maximum,
  Ops.IDIV: lambda a, b: torch.div(a, b, rounding_mode="trunc"), Ops.MOD: torch.fmod,
  Ops.AND: torch.bitwise_and, Ops.OR: torch.bitwise_or, Ops.XOR: torch.bitwise_xor,
  Ops.CMPLT: torch.lt, Ops.CMPNE: torch.ne, Ops.SHL: torch.bitwise_left_shift, Ops.SHR: torch.bitwise_right_shift,
}


@pytest.mark.parametrize("dt", list(TORCH_INTS), ids=ids(list(TORCH_INTS)))
@pytest.mark.parametrize("op", INT_BINARY, ids=lambda o: o.name)
def test_int_binary_against_torch(op: Ops, dt: DType):
  a, b = int_operands(op, dt)
  keep = ~undefined_lanes(op, dt, a, b) if op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR) else np.ones(a.shape, bool)
  a, b = a[keep], b[keep]  # torch traps on MIN / -1 and raises on / 0
  got = exec_alu(op, dtypes.bool if op in GroupOp.Comparison else dt, a, b)
  want = TORCH_OPS[op](torch.from_numpy(a), torch.from_numpy(b)).numpy()
  np.testing.assert_array_equal(got, want)


# ---- bool
BOOL_RULES = {Ops.ADD: lambda a, b: a or b, Ops.MUL: lambda a, b: a and b, Ops.MAX: max, Ops.AND: lambda a, b: a and b,
              Ops.OR: lambda a, b: a or b, Ops.XOR: lambda a, b: a != b, Ops.CMPLT: lambda a, b: a < b,
              Ops.CMPNE: lambda a, b: a != b}


@pytest.mark.parametrize("op", list(BOOL_RULES), ids=lambda o: o.name)
def test_bool_truth_tables(op: Ops):
  a = np.array([False, False, True, True])
  b = np.array([False, True, False, True])
  got = exec_alu(op, dtypes.bool, a, b)
  assert got.dtype == np.bool_ and got.tolist() == [BOOL_RULES[op](x, y) for x, y in zip(a.tolist(), b.tolist())]


@pytest.mark.parametrize("op", [Ops.NEG, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.FDIV, Ops.TRUNC])
def test_bool_rejects_arithmetic(op: Ops):
  srcs = [np.array([True, False])] * (1 if op in GroupOp.Unary else 2)
  with pytest.raises(TypeError):
    exec_alu(op, dtypes.bool, *srcs)


def test_not_is_xor_true():
  assert exec_alu(Ops.XOR, dtypes.bool, np.array([False, True]), np.bool_(True)).tolist() == [True, False]


# ---- float oracle: exact rationals, rounded once
FORMAT = {dtypes.float16: (11, -14, 15), dtypes.bfloat16: (8, -126, 127), dtypes.float32: (24, -126, 127),
          dtypes.float64: (53, -1022, 1023)}  # significand bits p, emin, emax


def round_exact(x: Fraction | int, dt: DType) -> float:
  """The nonzero exact value x rounded to nearest-even in dt (with subnormals and overflow to inf)."""
  p, emin, emax = FORMAT[dt]
  sign = -1.0 if x < 0 else 1.0
  mag = abs(Fraction(x))
  e = mag.numerator.bit_length() - mag.denominator.bit_length()
  if Fraction(2) ** e > mag:
    e -= 1
  quantum = Fraction(2) ** (max(e, emin) - p + 1)
  val = round(mag / quantum) * quantum  # Fraction rounds halves to even
  return sign * (math.inf if val >= Fraction(2) ** (emax + 1) else float(val))


def round_float(x: float, dt: DType) -> float:
  """A Python float rounded to dt; NaN, inf and zeros pass through."""
  return x if not math.isfinite(x) or x == 0 else round_exact(Fraction(x), dt)


def exact_or(a: float, b: float, exact, fallback, dt: DType) -> float:
  """exact(Fraction, Fraction) rounded to dt for finite inputs with a nonzero exact result; fallback() otherwise."""
  if math.isfinite(a) and math.isfinite(b):
    val = exact(Fraction(a), Fraction(b))
    if val != 0:
      return round_exact(val, dt)
  return fallback()


def py_div(a: float, b: float) -> float:
  if b != 0:
    return a / b
  return math.nan if math.isnan(a) or a == 0 else math.copysign(1.0, a) * math.copysign(math.inf, b)


def py_max(a: float, b: float) -> float:
  if math.isnan(a) or math.isnan(b):
    return math.nan
  if a == b:
    return b if math.copysign(1.0, a) < 0 else a
  return max(a, b)


FLOAT_REF = {
  Ops.ADD: lambda a, b, dt: exact_or(a, b, lambda x, y: x + y, lambda: a + b, dt),
  Ops.MUL: lambda a, b, dt: exact_or(a, b, lambda x, y: x * y, lambda: a * b, dt),
  Ops.FDIV: lambda a, b, dt: exact_or(a, b, lambda x, y: x / y if y else 0, lambda: py_div(a, b), dt),
  Ops.MAX: lambda a, b, dt: py_max(a, b),
  Ops.CMPLT: lambda a, b, dt: a < b,
  Ops.CMPNE: lambda a, b, dt: a != b,
  Ops.NEG: lambda a, dt: -a,
  Ops.RECIP: lambda a, dt: exact_or(1.0, a, lambda x, y: x / y if y else 0, lambda: py_div(1.0, a), dt),
  Ops.SQRT: lambda a, dt: math.nan if math.isnan(a) or a < 0 else round_float(math.sqrt(a), dt),  # 53 >= 2*24+2
  Ops.TRUNC: lambda a, dt: a if not math.isfinite(a) else math.copysign(float(math.trunc(a)), a),
}


def f64(x: np.ndarray) -> np.ndarray:
  """x widened to float64 (exact); signaling NaNs of random bit patterns would warn while being quieted."""
  with np.errstate(invalid="ignore"):
    return np.asarray(x).astype(np.float64)


def to_dtype(values: list[float] | np.ndarray, dt: DType) -> np.ndarray:
  """Test inputs in dt (how they round does not matter; overflow to inf is wanted, so no warning)."""
  with np.errstate(all="ignore"):
    return np.asarray(values, np.float64).astype(dt.np)


def float_edges(dt: DType, n_random: int = 10) -> np.ndarray:
  """The oracle kit's edge values, and what float ALU semantics also turn on: ties and inexact fractions for
  rounding (1.5, -2.5, 0.75, 0.1, 1/3), half the max, subnormals past the smallest and the largest one, one ulp
  above 1 and eps, -tiny, and random magnitudes over six decades."""
  fi = ml_dtypes.finfo(dt.np)
  big, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
  vals = [float(v) for v in edge_values(dt)] + [1.5, -3.0, 0.1, 1 / 3, 7.0, 1e4, -2.5, 0.75, big / 2, -tiny, 3 * sub,
                                                tiny - sub, float(fi.eps), 1 + float(fi.eps)]
  vals += (rng(dt.bits).standard_normal(n_random) * 10.0 ** rng(1).integers(-3, 3, n_random)).tolist()
  return to_dtype(vals, dt)


def same(got: float, want: float) -> bool:
  """Bit-exact up to NaN equivalence: equal values with equal signs (so -0.0 differs from +0.0)."""
  if math.isnan(got) or math.isnan(want):
    return math.isnan(got) and math.isnan(want)
  return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def as_floats(x: np.ndarray) -> list:
  return f64(x).tolist() if x.dtype != np.bool_ else x.tolist()


def check_float_op(op: Ops, dt: DType, *srcs: np.ndarray):
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  got = exec_alu(op, out_dt, *srcs)
  assert got.dtype == out_dt.np
  ins = [as_floats(s) for s in srcs]
  want = [FLOAT_REF[op](*xs, dt) for xs in zip(*ins)]
  bad = [(xs, g, w) for xs, g, w in zip(zip(*ins), as_floats(got), want) if not same(float(g), float(w))]
  assert not bad, f"{op} {dt} (inputs, got, want): {bad[:5]}"
  assert undefined_lanes(op, out_dt, *srcs) is None


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", FLOAT_BINARY, ids=lambda o: o.name)
def test_float_binary_edges(op: Ops, dt: DType):
  a, b = np.meshgrid(float_edges(dt), float_edges(dt))
  check_float_op(op, dt, a.ravel(), b.ravel())


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.TRUNC], ids=lambda o: o.name)
def test_float_unary_edges(op: Ops, dt: DType):
  x = float_edges(dt)
  check_float_op(op, dt, np.concatenate([x, np.array([2.5, -2.5, -0.5, 0.999, 1e3 + 0.5, -7.75], dt.np)]))


def random_bits(dt: DType, n: int, seed: int) -> np.ndarray:
  """Arbitrary bit patterns of dt: every binade, subnormals, infinities and NaNs."""
  u = np.dtype(f"u{dt.itemsize}")
  return rng(seed).integers(0, np.iinfo(u).max, size=n, dtype=u, endpoint=True).view(dt.np)


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.FDIV], ids=lambda o: o.name)
def test_float_binary_random_bits(op: Ops, dt: DType):
  # random patterns, plus pairs scaled to land near the subnormal range where rounding twice could go wrong
  a, b = random_bits(dt, 1500, 1), random_bits(dt, 1500, 2)
  check_float_op(op, dt, a, b)
  small = (rng(3).standard_normal(600) * float(ml_dtypes.finfo(dt.np).tiny) * 64).astype(dt.np)
  check_float_op(op, dt, small, rng(4).uniform(0.5, 100, 600).astype(dt.np))


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", [Ops.RECIP, Ops.SQRT], ids=lambda o: o.name)
def test_float_unary_random_bits(op: Ops, dt: DType):
  check_float_op(op, dt, random_bits(dt, 2000, 5))


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_signed_zero_rules(dt: DType):
  pz, nz = np.array([0.0], dt.np), np.array([-0.0], dt.np)
  for a, b in [(pz, nz), (nz, pz)]:
    assert not np.signbit(exec_alu(Ops.MAX, dt, a, b))[0]  # +0 in both orders
    assert not exec_alu(Ops.CMPNE, dtypes.bool, a, b)[0] and not exec_alu(Ops.CMPLT, dtypes.bool, a, b)[0]
  assert np.signbit(exec_alu(Ops.MAX, dt, nz, nz))[0]
  assert np.signbit(exec_alu(Ops.ADD, dt, nz, nz))[0] and not np.signbit(exec_alu(Ops.ADD, dt, nz, pz))[0]
  assert np.signbit(exec_alu(Ops.TRUNC, dt, np.array([-0.5], dt.np)))[0]
  assert np.signbit(exec_alu(Ops.SQRT, dt, nz))[0]
  assert np.signbit(exec_alu(Ops.NEG, dt, pz))[0]
  assert exec_alu(Ops.RECIP, dt, nz)[0] == -np.inf


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_nan_rules(dt: DType):
  nan, one = np.array([np.nan], dt.np), np.array([1.0], dt.np)
  for a, b in [(nan, one), (one, nan), (nan, nan)]:
    assert np.isnan(exec_alu(Ops.MAX, dt, a, b))[0]
    assert not exec_alu(Ops.CMPLT, dtypes.bool, a, b)[0] and exec_alu(Ops.CMPNE, dtypes.bool, a, b)[0]


def test_fdiv_is_not_mul_recip():
  a, b = np.float32(3), np.float32(7)
  want = round_exact(Fraction(3, 7), dtypes.float32)
  assert float(exec_alu(Ops.FDIV, dtypes.float32, a, b)) == want
  assert float(exec_alu(Ops.MUL, dtypes.float32, a, exec_alu(Ops.RECIP, dtypes.float32, b))) != want


# ---- transcendentals: math's float64 results rounded to the dtype, within their OP_FACTS ulp_bound
def ref_exp2(x: float) -> float:
  try:
    return math.exp2(x)
  except OverflowError:
    return math.inf


MATH_REF = {
  Ops.EXP2: ref_exp2,
  Ops.LOG2: lambda x: math.nan if math.isnan(x) or x < 0 else -math.inf if x == 0 else math.log2(x),
  Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
}
DOMAINS = {Ops.EXP2: (-40.0, 40.0), Ops.LOG2: (0.0, 1e4), Ops.SIN: (-50.0, 50.0)}


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", sorted(GroupOp.Transcendental, key=lambda o: o.value), ids=lambda o: o.name)
def test_transcendental_within_ulp_bounds(op: Ops, dt: DType):
  lo, hi = DOMAINS[op]
  x = np.concatenate([float_edges(dt), rng(6).uniform(lo, hi, 1500).astype(dt.np),
                      np.array([1e-3, 0.25, 8.0, 15.5, 16.0, -24.0, -25.0, 127.0, 128.0, -149.0, -150.0], dt.np)])
  got = exec_alu(op, dt, x)
  assert got.dtype == dt.np and undefined_lanes(op, dt, x) is None
  want = np.array([round_float(MATH_REF[op](v), dt) for v in f64(x).tolist()], np.float64).astype(dt.np)
  wide_x = f64(x)
  checked = ~(np.isfinite(wide_x) & (np.abs(wide_x) > OP_FACTS[op].ulp_range))
  dist = alu.ulp_distance(got[checked], want[checked])
  assert dist.max() <= OP_FACTS[op].ulp_bound[dt], f"{op} {dt}: worst input {x[checked][dist.argmax()]}"
  wide = np.abs(f64(got[~checked]))
  assert (wide <= 1).all()


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_transcendental_special_values_exact(dt: DType):
  def run(op: Ops, x: float) -> float:
    return float(exec_alu(op, dt, np.array([x], dt.np))[0])
  inf, nan = math.inf, math.nan
  cases = [(Ops.EXP2, -inf, 0.0), (Ops.EXP2, inf, inf), (Ops.EXP2, 0.0, 1.0), (Ops.EXP2, nan, nan),
           (Ops.LOG2, 0.0, -inf), (Ops.LOG2, -0.0, -inf), (Ops.LOG2, -1.0, nan), (Ops.LOG2, 1.0, 0.0),
           (Ops.LOG2, inf, inf), (Ops.LOG2, -inf, nan), (Ops.LOG2, nan, nan), (Ops.SIN, inf, nan), (Ops.SIN, -inf, nan),
           (Ops.SIN, -0.0, -0.0), (Ops.SIN, 0.0, 0.0), (Ops.SIN, nan, nan)]
  for op, x, want in cases:
    assert same(run(op, x), want), (op, x)
  assert run(Ops.EXP2, 1e4) == math.inf


@pytest.mark.parametrize("dt", [*INTS, dtypes.bool], ids=ids([*INTS, dtypes.bool]))
@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP], ids=lambda o: o.name)
def test_transcendentals_reject_non_floats(op: Ops, dt: DType):
  with pytest.raises(TypeError, match=f"{op.name}.*{dt.name}"):
    exec_alu(op, dt, np.array([1], dt.np))


def test_ulp_distance():
  f = np.float32
  one = np.array([1.0], f)
  assert alu.ulp_distance(one, np.nextafter(one, f(2))).tolist() == [1]
  assert alu.ulp_distance(np.array([0.0], f), np.array([-0.0], f)).tolist() == [0]
  sub = np.array([1e-45], f)
  assert alu.ulp_distance(sub, -sub).tolist() == [2]
  big = np.array([np.finfo(f).max], f)
  assert alu.ulp_distance(big, np.array([np.inf], f)).tolist() == [1]
  nan = np.array([np.nan], f)
  assert alu.ulp_distance(nan, nan).tolist() == [0] and alu.ulp_distance(nan, one).tolist() == [2**64 - 1]
  d = np.array([-np.inf, np.inf])
  assert alu.ulp_distance(d[:1], d[1:]).tolist() == [2 * 0x7FF0000000000000]
  bf = np.array([1.0, 1.0078125], ml_dtypes.bfloat16)  # adjacent bfloat16 values
  assert alu.ulp_distance(bf[:1], bf[1:]).tolist() == [1]


# ---- WHERE, shapes, scalars, validation
@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
def test_where_selects_bits(dt: DType):
  a = np.array([[-0.0, 1.0, np.nan]]).astype(dt.np) if dt.kind == "f" else np.array([[1, 0, 1]], dt.np)
  b = np.zeros((), dt.np)
  c = np.array([[True], [False]])
  got = exec_alu(Ops.WHERE, dt, c, a, b)
  assert got.shape == (2, 3) and got.dtype == dt.np
  view = np.dtype(f"u{dt.itemsize}")
  np.testing.assert_array_equal(got.view(view), np.where(c, a, b).view(view))


def test_scalars_and_broadcasting():
  out = exec_alu(Ops.ADD, dtypes.int8, np.int8(127), np.int8(1))
  assert isinstance(out, np.ndarray) and out.shape == () and out == -128
  grid = exec_alu(Ops.MUL, dtypes.float32, np.ones((3, 1), np.float32), np.arange(4, dtype=np.float32)[None])
  assert grid.shape == (3, 4)
  marks = undefined_lanes(Ops.IDIV, dtypes.int32, np.arange(3, dtype=np.int32)[:, None], np.zeros(2, np.int32))
  assert marks.shape == (3, 2) and marks.all()


def test_validation_errors():
  with pytest.raises(TypeError):
    exec_alu(Ops.ADD, dtypes.int32, np.int32(1), np.int64(1))  # mixed source dtypes
  with pytest.raises(TypeError):
    exec_alu(Ops.ADD, dtypes.int64, np.int32(1), np.int32(1))  # output dtype differs
  with pytest.raises(TypeError):
    exec_alu(Ops.CMPLT, dtypes.int32, np.int32(1), np.int32(2))  # comparisons give bool
  with pytest.raises(TypeError):
    exec_alu(Ops.NEG, dtypes.int32, np.int32(1), np.int32(2))  # arity
  with pytest.raises(TypeError):
    exec_alu(Ops.WHERE, dtypes.int32, np.int32(1), np.int32(1), np.int32(2))  # condition must be bool
  with pytest.raises(TypeError):
    exec_alu(Ops.CAST, dtypes.int32, np.int32(1))


@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
@pytest.mark.parametrize("op", sorted(GroupOp.ALU, key=lambda o: o.value), ids=lambda o: o.name)
def test_every_op_every_dtype(op: Ops, dt: DType):
  """Each op runs warning-free on every dtype it accepts (with edge values) and refuses the others."""
  vals = float_edges(dt) if dt.kind == "f" else np.array([False, True]) if dt.kind == "b" else np.array(int_edges(dt),
                                                                                                        dt.np)
  a, b = np.meshgrid(vals, vals)
  cond = np.arange(a.size).reshape(a.shape) % 3 == 0
  srcs = {1: (a,), 2: (a, b), 3: (cond, a, b)}[OP_FACTS[op].arity]
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  if dt.kind not in OP_FACTS[op].kinds:
    with pytest.raises(TypeError):
      exec_alu(op, out_dt, *srcs)
    return
  got = exec_alu(op, out_dt, *srcs)
  assert got.dtype == out_dt.np and got.shape == a.shape
  marks = undefined_lanes(op, out_dt, *srcs)
  has_undefined = op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR) and dt.kind != "f"  # float MOD is total
  assert marks.shape == a.shape if has_undefined else marks is None


def test_exact_ops_and_ulp_table():
  assert GroupOp.Transcendental == {Ops.EXP2, Ops.LOG2, Ops.SIN}
  for op in GroupOp.Transcendental:
    assert OP_FACTS[op].ulp_bound == {dtypes.float16: 1, dtypes.bfloat16: 1, dtypes.float32: 2, dtypes.float64: 2}
  assert OP_FACTS[Ops.SIN].ulp_range == 1e4
  assert {op for op, facts in OP_FACTS.items() if facts.cost > 1} == {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT}


# ---- casts
@pytest.mark.parametrize("src", INTS, ids=ids(INTS))
def test_cast_int_to_int_wraps(src: DType):
  x = np.array(int_edges(src), src.np)
  for dst in INTS:
    assert exec_cast(x, dst).tolist() == [wrap(v, dst) for v in x.tolist()], dst
    assert undefined_cast_lanes(x, dst) is None


@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
def test_cast_bool_both_ways(dt: DType):
  assert f64(exec_cast(np.array([False, True]), dt)).tolist() == [0.0, 1.0]
  vals = float_edges(dt) if dt.kind == "f" else np.array(int_edges(dt), dt.np) if dt.kind != "b" else np.array([True])
  got = exec_cast(vals, dtypes.bool)
  assert got.dtype == np.bool_
  assert got.tolist() == [math.isnan(v) or v != 0 for v in f64(vals).tolist()]
  assert undefined_cast_lanes(vals, dtypes.bool) is None


def tricky_ints(src: DType) -> list[int]:
  """Ints one above a rounding tie at 8/11/24 bits: a float64 step first would round to the tie, then the wrong way."""
  lo, hi = bounds(src)
  out = []
  for p in (8, 11, 24):
    for e in (24, 40, 53, 54, 62, 63):
      tie = (1 << e) + (1 << (e - p))
      out += [tie, tie + 1, tie - 1, -tie, -tie - 1, tie + (1 << (e - p + 1))]
  return [v for v in out if lo <= v <= hi]


@pytest.mark.parametrize("src", INTS, ids=ids(INTS))
@pytest.mark.parametrize("dst", FLOATS, ids=ids(FLOATS))
def test_cast_int_to_float_single_rounding(src: DType, dst: DType):
  lo, hi = bounds(src)
  vals = int_edges(src, 40) + tricky_ints(src) + [lo, hi]
  x = np.array(vals, src.np)
  got = exec_cast(x, dst)
  want = [round_exact(v, dst) if v else 0.0 for v in x.tolist()]
  bad = [(v, g, w) for v, g, w in zip(x.tolist(), f64(got).tolist(), want) if not same(g, w)]
  assert not bad, bad[:5]
  assert undefined_cast_lanes(x, dst) is None


def tricky_floats() -> list[float]:
  """float64 values one float32-invisible bit above a bfloat16/float16 tie, and the ties themselves."""
  out = []
  for p in (8, 11):
    for scale in (1.0, 2.0 ** -130, 2.0 ** -20, 2.0 ** 100, 2.0 ** -140):
      tie = scale * (1 + 2.0 ** -p)
      out += [tie, tie * (1 + 2.0 ** -40), tie * (1 - 2.0 ** -40), -tie * (1 + 2.0 ** -40)]
  bf_max_tie = (2 - 2.0 ** -8) * 2.0 ** 127  # half way between bfloat16's max and 2**128: rounds to inf
  return out + [bf_max_tie, bf_max_tie * (1 - 2.0 ** -40), 65520.0, 65519.99, 2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -40),
                2.0 ** -134, 2.0 ** -134 * (1 + 2.0 ** -40), 1e300, -1e300, 1e-300, -1e-300]


@pytest.mark.parametrize("src", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("dst", FLOATS, ids=ids(FLOATS))
def test_cast_float_to_float_single_rounding(src: DType, dst: DType):
  x = np.concatenate([float_edges(src), random_bits(src, 1500, 7), to_dtype(tricky_floats(), src)])
  got = exec_cast(x, dst)
  assert got.dtype == dst.np
  want = [round_float(v, dst) for v in f64(x).tolist()]
  bad = [(v, g, w) for v, g, w in zip(f64(x).tolist(), f64(got).tolist(), want)
         if not same(g, w)]
  assert not bad, bad[:5]
  assert undefined_cast_lanes(x, dst) is None


def test_cast_known_double_rounding_cases():
  bf = dtypes.bfloat16
  assert float(exec_cast(np.array(1 + 2.0 ** -8 + 2.0 ** -30), bf)) == 1 + 2.0 ** -7
  assert float(exec_cast(np.array(1 + 2.0 ** -11 + 2.0 ** -30), dtypes.float16)) == 1 + 2.0 ** -10
  assert float(exec_cast(np.array(2**62 + 2**54 + 1, np.int64), bf)) == 2.0 ** 62 + 2.0 ** 55
  assert float(exec_cast(np.array(2**62 + 2**38 + 1, np.int64), dtypes.float32)) == 2.0 ** 62 + 2.0 ** 39
  assert float(exec_cast(np.array(2**64 - 1, np.uint64), dtypes.float32)) == 2.0 ** 64
  assert float(exec_cast(np.array(65520, np.int32), dtypes.float16)) == math.inf


FLOAT_TO_INT_VALUES = [0.0, -0.0, 0.9, -0.9, 1.5, -1.5, 127.9, 128.0, -128.9, -129.0, 255.9, 256.0, -1.0, 32767.5,
                       32768.0, -32769.0, 65535.5, 65536.0, 2.0 ** 31 - 0.5, 2.0 ** 31, -(2.0 ** 31) - 1, 2.0 ** 32,
                       2.0 ** 63 - 1024, 2.0 ** 63, -(2.0 ** 63), -(2.0 ** 63) - 2048, 2.0 ** 64 - 2048, 2.0 ** 64,
                       1e30, -1e30, 1e300, math.inf, -math.inf, math.nan, 1e-40, 3.0e4]


@pytest.mark.parametrize("src", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("dst", INTS, ids=ids(INTS))
def test_cast_float_to_int(src: DType, dst: DType):
  x = np.concatenate([float_edges(src), to_dtype(FLOAT_TO_INT_VALUES, src)])
  lo, hi = bounds(dst)
  truncs = [math.trunc(v) if math.isfinite(v) else None for v in f64(x).tolist()]
  undefined = [t is None or not lo <= t <= hi for t in truncs]
  got = exec_cast(x, dst)
  assert got.dtype == dst.np
  assert got.tolist() == [wrapped_int64(t, dst) if u else t for t, u in zip(truncs, undefined)]
  assert undefined_cast_lanes(x, dst).tolist() == undefined


def wrapped_int64(t: int | None, dst: DType) -> int:
  """What the reference gives on an undefined float -> int lane (docs/SPEC.md): trunc(x) as int64 wrapped into dst,
  0 past int64 and for NaN and infinities; in Python integers."""
  if t is None or not -2**63 <= t < 2**63:
    return 0
  low_bits = t % 2**dst.bits
  return low_bits - 2**dst.bits if dst.kind == "i" and low_bits >= 2**(dst.bits - 1) else low_bits


# ---- bitcast
def struct_bits(x: np.ndarray, float_fmt: str, int_fmt: str) -> list[int]:
  return [struct.unpack(int_fmt, struct.pack(float_fmt, v))[0] for v in f64(x).tolist()]


def test_bitcast_against_struct():
  f32 = np.array([1.0, -0.0, 1e-45, np.inf, -2.5], np.float32)
  assert exec_bitcast(f32, dtypes.int32).tolist() == struct_bits(f32, "<f", "<i")
  d64 = np.array([1.0, -0.0, 5e-324, -np.inf], np.float64)
  assert exec_bitcast(d64, dtypes.uint64).tolist() == struct_bits(d64, "<d", "<Q")
  f16 = np.array([1.0, -2.0, 6e-8], np.float16)
  assert exec_bitcast(f16, dtypes.uint16).tolist() == struct_bits(f16, "<e", "<H")
  bf = np.array([1.0, -2.0, 0.15625], ml_dtypes.bfloat16)  # bfloat16 bits are float32's top half
  top = [v >> 16 for v in struct_bits(bf, "<f", "<I")]
  assert exec_bitcast(bf, dtypes.uint16).tolist() == top
  assert exec_bitcast(np.array([-1, -128], np.int8), dtypes.uint8).tolist() == [255, 128]
  assert exec_bitcast(exec_bitcast(f32, dtypes.uint32), dtypes.float32).view(np.uint32).tolist() == \
    f32.view(np.uint32).tolist()


def test_bitcast_rejects_size_mismatch_and_bool():
  with pytest.raises(TypeError, match="float32.*int16|int16.*float32"):
    exec_bitcast(np.array([1.0], np.float32), dtypes.int16)
  with pytest.raises(TypeError):
    exec_bitcast(np.array([1], np.uint8), dtypes.bool)


# ---- reductions
@pytest.mark.parametrize("dt", INTS, ids=ids(INTS))
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MUL, Ops.MAX], ids=lambda o: o.name)
def test_reduce_ints_wrap(op: Ops, dt: DType):
  lo, hi = bounds(dt)
  x = rng(8).integers(lo, hi, size=(3, 37), dtype=dt.np, endpoint=True)
  exact = {Ops.ADD: sum, Ops.MUL: math.prod, Ops.MAX: max}[op]
  got = exec_reduce(op, dt, x, 1)
  assert got.shape == (3, 1) and got.dtype == dt.np
  assert got[:, 0].tolist() == [wrap(exact(row), dt) for row in x.tolist()]
  got0 = exec_reduce(op, dt, x, 0)
  assert got0.shape == (1, 37) and got0[0].tolist() == [wrap(exact(col), dt) for col in x.T.tolist()]


def test_reduce_axes_and_shapes():
  x = np.arange(120, dtype=np.int64).reshape(2, 3, 4, 5)
  for axis in [(0, 2), -1, (3, 1), (0, 1, 2, 3), ()]:
    np.testing.assert_array_equal(exec_reduce(Ops.ADD, dtypes.int64, x, axis), np.sum(x, axis=axis, keepdims=True))
  assert exec_reduce(Ops.MAX, dtypes.int64, np.array(5, np.int64), ()).tolist() == 5


@pytest.mark.parametrize("dt", ALL, ids=ids(ALL))
def test_reduce_empty_gives_identity(dt: DType):
  x = np.zeros((2, 0, 3), dt.np)
  for op in (Ops.ADD, Ops.MUL, Ops.MAX):
    got = exec_reduce(op, dt, x, 1)
    want = alu.reduce_identity(op, dt)
    assert got.shape == (2, 1, 3) and got.dtype == dt.np and (got == want).all()
  assert alu.reduce_identity(Ops.ADD, dt) == 0 and alu.reduce_identity(Ops.MUL, dt) == 1
  kind = {"b": bool, "i": int, "u": int, "f": float}[dt.kind]
  assert all(type(alu.reduce_identity(op, dt)) is kind for op in (Ops.ADD, Ops.MUL, Ops.MAX))
  lowest = {"b": False, "f": -math.inf}[dt.kind] if dt.kind in "bf" else bounds(dt)[0]
  assert alu.reduce_identity(Ops.MAX, dt) == lowest


def test_reduce_bool():
  x = np.array([[False, False], [False, True], [True, True]])
  assert exec_reduce(Ops.ADD, dtypes.bool, x, 1)[:, 0].tolist() == [False, True, True]
  assert exec_reduce(Ops.MUL, dtypes.bool, x, 1)[:, 0].tolist() == [False, False, True]
  assert exec_reduce(Ops.MAX, dtypes.bool, x, 1)[:, 0].tolist() == [False, True, True]


def unit_roundoff(dt: DType) -> float:
  return 2.0 ** -FORMAT[dt][0]


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_reduce_float_sum_within_gamma_n(dt: DType, n: int):
  x = rng(n).uniform(-1, 1, (4, n)).astype(dt.np)
  got = f64(exec_reduce(Ops.ADD, dt, x, 1)[:, 0])
  eps = unit_roundoff(dt)
  gamma = n * eps / (1 - n * eps)
  for row, r in zip(f64(x).tolist(), got.tolist()):
    exact = sum(Fraction(v) for v in row)
    assert abs(Fraction(r) - exact) <= Fraction(gamma) * sum(Fraction(abs(v)) for v in row)


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_reduce_float_product_within_gamma_n(dt: DType):
  x = rng(9).uniform(0.5, 2, (3, 20)).astype(dt.np) * np.array([1, -1] * 10, dt.np)
  got = f64(exec_reduce(Ops.MUL, dt, x, 1)[:, 0])
  gamma = 20 * unit_roundoff(dt) / (1 - 20 * unit_roundoff(dt))
  for row, r in zip(f64(x).tolist(), got.tolist()):
    exact = math.prod(Fraction(v) for v in row)
    assert abs(Fraction(r) - exact) <= Fraction(gamma) * abs(exact)


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_reduce_float_max_and_specials(dt: DType):
  rows = [[1.0, np.nan, 3.0], [-0.0, 0.0, -0.0], [-0.0, -0.0, -0.0], [-np.inf, -np.inf, -np.inf], [2.0, -5.0, 7.0]]
  got = f64(exec_reduce(Ops.MAX, dt, to_dtype(rows, dt), 1)[:, 0]).tolist()
  assert [same(g, w) for g, w in zip(got, [math.nan, 0.0, -0.0, -math.inf, 7.0])] == [True] * 5
  sums = exec_reduce(Ops.ADD, dt, np.array([[1.0, np.nan], [np.inf, -np.inf], [np.inf, 1.0]]).astype(dt.np), 1)
  assert [same(g, w) for g, w in zip(f64(sums[:, 0]).tolist(), [math.nan, math.nan, math.inf])] == [True] * 3


def test_reduce_rejects_bad_calls():
  with pytest.raises(TypeError):
    exec_reduce(Ops.ADD, dtypes.int32, np.zeros(3, np.int64), 0)
  with pytest.raises(TypeError):
    exec_reduce(Ops.FDIV, dtypes.float32, np.zeros(3, np.float32), 0)
  with pytest.raises(TypeError):
    alu.reduce_identity(Ops.AND, dtypes.int32)


# ---- float MOD: C fmod, exact
FMOD_VALUES = [0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 2.5, -7.0, 3.0, 1e-3, 65504.0, math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("dt", FLOATS, ids=ids(FLOATS))
def test_float_mod_is_fmod(dt: DType):
  """Float MOD is math.fmod of the two dtype values, with no rounding at all (fmod is exact in IEEE)."""
  vals = np.array(FMOD_VALUES, np.float64).astype(dt.np)
  a, b = np.meshgrid(vals, vals)
  got = exec_alu(Ops.MOD, dt, a, b)
  for x, y, r in zip(a.astype(np.float64).ravel(), b.astype(np.float64).ravel(), got.astype(np.float64).ravel()):
    want = math.nan if math.isnan(x) or math.isnan(y) or math.isinf(x) or y == 0 else math.fmod(x, y)
    assert (math.isnan(r) and math.isnan(want)) or (r == want and math.copysign(1, r) == math.copysign(1, want)), \
      (x, y, r, want)
  assert undefined_lanes(Ops.MOD, dt, a, b) is None


def test_float_mod_exact_where_division_rounds():
  # 1.0 / 0.1 rounds to 10, but 0.1 (float) is a little more than 1/10, so 9 * 0.1 fits into 1.0 and fmod is ~0.1
  got = exec_alu(Ops.MOD, dtypes.float64, np.array([1.0]), np.array([0.1]))
  assert got[0] == math.fmod(1.0, 0.1) and got[0] > 0.09
