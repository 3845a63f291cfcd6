"""What every primitive op means, for every dtype, computed with numpy: the reference all backends are checked against.

docs/SPEC.md states the same rules in prose; the two must agree. The facts about each op (dtype kinds, arity, ULP
bound, cost) are its record in refgrad/ops.py's OP_FACTS. Every function here is vectorized, never raises or
warns for any input *values* (only for ill-typed calls), and returns arrays of the output dtype's numpy type
(possibly sharing memory with an input: callers never write to them).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from refgrad.dtype import DType, as_python_scalar, dtypes, from_numpy
from refgrad.ops import OP_FACTS, GroupOp, Ops


# ---- typing
def result_dtype(op: Ops, src_dtypes: tuple[DType, ...]) -> DType:
  """The dtype an ALU op produces: bool for comparisons, else its value operands' (WHERE's are the last two)."""
  return dtypes.bool if op in GroupOp.Comparison else src_dtypes[-1]


@functools.cache
def check_alu_types(op: Ops, dtype: DType, src_dtypes: tuple[DType, ...]) -> DType:
  """Validate an ALU op's typing once; return its operand dtype. TypeError names what is wrong."""
  if op not in OP_FACTS:
    raise TypeError(f"{op!r} is not an ALU op")
  if len(src_dtypes) != OP_FACTS[op].arity:
    raise TypeError(f"{op!r} takes {OP_FACTS[op].arity} sources, got {len(src_dtypes)}")
  operand = src_dtypes[0] if op in GroupOp.Comparison else dtype
  want = (dtypes.bool, operand, operand) if op is Ops.WHERE else (operand,) * len(src_dtypes)
  if src_dtypes != want or dtype != result_dtype(op, src_dtypes):
    raise TypeError(f"{op!r} -> {dtype} cannot take sources of dtypes {src_dtypes}")
  if operand.kind not in OP_FACTS[op].kinds:
    raise TypeError(f"{op!r} is not defined for {operand}")
  return operand


def _check(op: Ops, dtype: DType, srcs: tuple) -> tuple[DType, list[np.ndarray]]:
  """Validate an ALU call; return the operand dtype and the sources as arrays."""
  arrs = [np.asarray(s) for s in srcs]
  return check_alu_types(op, dtype, tuple(from_numpy(a.dtype) for a in arrs)), arrs


# ---- integer (and bool) ops
def _div_undefined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Division by zero, and signed MIN / -1 (its quotient does not fit): C leaves both undefined."""
  bad = b == 0
  if a.dtype.kind == "i":
    bad = bad | ((a == np.iinfo(a.dtype).min) & (b == -1))
  return bad


def _trunc_divmod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """C's truncating quotient and remainder in exact integer math; undefined lanes divide by 1 instead."""
  safe = np.where(_div_undefined(a, b), b.dtype.type(1), b)
  rem = np.fmod(a, safe)  # on integers numpy's fmod is C's %: the sign of the dividend
  quo = (a - rem) // safe  # a - rem is an exact multiple of safe and no larger than |a|, so flooring is exact
  return quo, rem


def _idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  quo, _ = _trunc_divmod(a, b)  # MIN / -1 lanes divided by 1 and stay MIN: the wrapped quotient
  return np.where(b == 0, a.dtype.type(0), quo)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  _, rem = _trunc_divmod(a, b)
  return np.where(_div_undefined(a, b), a.dtype.type(0), rem)


def _shift_undefined(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return (b < 0) | (b >= a.dtype.itemsize * 8)


def _unsigned(dt: np.dtype) -> np.dtype:
  return np.dtype(f"u{dt.itemsize}")


def _shl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  bad = _shift_undefined(a, b)
  u = _unsigned(a.dtype)  # shift the bit pattern unsigned, so signed values wrap instead of overflowing
  out = np.left_shift(a.astype(u), np.where(bad, 0, b).astype(u)).astype(a.dtype)
  return np.where(bad, a.dtype.type(0), out)


def _shr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  bad = _shift_undefined(a, b)
  out = np.right_shift(a, np.where(bad, b.dtype.type(0), b))  # numpy: arithmetic on signed, logical on unsigned
  return np.where(bad, a.dtype.type(0), out)


_INT_FNS: dict[Ops, Callable[..., np.ndarray]] = {
  Ops.NEG: np.negative, Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum,  # numpy ints wrap around
  Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.SHL: _shl, Ops.SHR: _shr,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
}


# ---- float ops
def _float_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """NaN if either is NaN; max(-0.0, +0.0) is +0.0 in both orders (IEEE 754-2019 maximum)."""
  equal_pick = np.where(np.signbit(a), b, a)  # equal non-NaN inputs are identical or a pair of zeros
  return np.where(a == b, equal_pick, np.maximum(a, b))


def _recip(x: np.ndarray) -> np.ndarray:
  return np.divide(x.dtype.type(1), x)


_FLOAT_FNS: dict[Ops, Callable[..., np.ndarray]] = {
  Ops.NEG: np.negative, Ops.RECIP: _recip, Ops.SQRT: np.sqrt, Ops.TRUNC: np.trunc,
  Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin,
  Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.MAX: _float_max,
  Ops.MOD: np.fmod,  # C fmod: exact in IEEE arithmetic, sign of the dividend; fmod(x, 0) and fmod(inf, y) are NaN
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
}
# Exact ops run in a type with >= 2p+2 significand bits, so the one rounding back to the dtype is the correctly
# rounded result (float32 has 24 >= 2*11+2). Transcendentals are defined as numpy's float64 result rounded once.
_COMPUTE_IN: dict[DType, type] = {dtypes.float16: np.float32, dtypes.bfloat16: np.float32,
                                  dtypes.float32: np.float32, dtypes.float64: np.float64}


def _float_alu(op: Ops, dt: DType, arrs: list[np.ndarray]) -> np.ndarray:
  wide = np.float64 if OP_FACTS[op].transcendental else _COMPUTE_IN[dt]
  out = _FLOAT_FNS[op](*(a.astype(wide, copy=False) for a in arrs))
  return out if out.dtype == np.bool_ else _round_float(out, dt)


def _f32_round_to_odd(x: np.ndarray) -> np.ndarray:
  """float64 -> float32 rounding to odd: truncate, then set the last bit if anything was cut off. Rounding that to
  nearest-even at p <= 22 bits equals rounding x directly (a plain float32 step could create a false tie)."""
  near = x.astype(np.float32)
  back = near.astype(np.float64)
  inexact = (back != x) & ~np.isnan(x)
  bits = near.view(np.uint32)
  bits = np.where(inexact & (np.abs(back) > np.abs(x)), bits - np.uint32(1), bits)  # rounded away: step back
  return np.where(inexact, bits | np.uint32(1), bits).astype(np.uint32).view(np.float32)


def _round_float(x: np.ndarray, to: DType) -> np.ndarray:
  """A float32/float64 array rounded once, to nearest-even, to the float dtype `to`."""
  if x.dtype == np.float64 and to.itemsize < 4:
    x = _f32_round_to_odd(x)  # ml_dtypes rounds float64 -> bfloat16 through float32: twice
  return x.astype(to.np, copy=False)


# ---- the ALU
def exec_alu(op: Ops, dtype: DType, *srcs: np.ndarray) -> np.ndarray:
  """The result of ALU op `op` whose output dtype is `dtype` (bool for comparisons) on broadcastable sources."""
  operand, arrs = _check(op, dtype, srcs)
  return compute_alu(op, operand, dtype, arrs)


def compute_alu(op: Ops, operand: DType, dtype: DType, arrs: list[np.ndarray]) -> np.ndarray:
  """exec_alu without the type checks, for callers that ran check_alu_types once (the kernel interpreter)."""
  with np.errstate(all="ignore"):
    if op is Ops.WHERE:
      out = np.where(*arrs)  # selection only: nothing to round
    elif operand.kind == "f":
      out = _float_alu(op, operand, arrs)
    else:
      out = _INT_FNS[op](*arrs)
  return np.asarray(out, dtype.np)


_UNDEFINED_RULES: dict[Ops, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
  Ops.IDIV: _div_undefined, Ops.MOD: _div_undefined, Ops.SHL: _shift_undefined, Ops.SHR: _shift_undefined,
}


def undefined_lanes(op: Ops, dtype: DType, *srcs: np.ndarray) -> np.ndarray | None:
  """Bool mask (broadcast shape) of the lanes whose result SPEC leaves undefined; None if there can be none."""
  operand, arrs = _check(op, dtype, srcs)
  if (rule := _UNDEFINED_RULES.get(op)) is None or operand.kind == "f":  # float MOD is defined everywhere
    return None
  shape = np.broadcast_shapes(*(a.shape for a in arrs))
  return np.array(np.broadcast_to(rule(*arrs), shape))


def _either(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
  return b if a is None else (a if b is None else a | b)


def propagate_undefined(op: Ops, dtype: DType, srcs: list[np.ndarray],
                        masks: list[np.ndarray | None]) -> np.ndarray | None:
  """Undefined lanes of an ALU result: its sources' (for WHERE, only the chosen side's) plus the op's own."""
  if op not in _UNDEFINED_RULES and all(m is None for m in masks):
    return None  # the common case, kept cheap: the interpreter calls this for every ALU op
  if op is Ops.WHERE and (masks[1] is not None or masks[2] is not None):
    chosen = np.where(srcs[0], False if masks[1] is None else masks[1], False if masks[2] is None else masks[2])
    inherited = _either(masks[0], chosen)
  else:
    inherited = None
    for m in masks:
      inherited = _either(inherited, m)
  return _either(inherited, undefined_lanes(op, dtype, *srcs))


# ---- casts
def _to_bool(x: np.ndarray, to: DType) -> np.ndarray:
  return x != x.dtype.type(0)  # NaN != 0, so NaN is True


def _astype(x: np.ndarray, to: DType) -> np.ndarray:
  return x.astype(to.np)  # bool -> 0/1; int -> int keeps the low bits (wraparound, sign extension)


def _sticky_f64(x: np.ndarray) -> np.ndarray:
  """int64/uint64 -> float64 keeping the top >= 43 bits and a sticky bit for the rest below them. One more rounding
  to <= 24 bits is then correct, where a plain float64 conversion could round to a false tie first."""
  neg = x < 0
  mag = np.where(neg, np.negative(x), x).astype(np.uint64)  # -MIN wraps to MIN, which is 2**63 as uint64
  squeezed = (mag >> np.uint64(11)) | ((mag & np.uint64(0x7FF)) != 0)  # < 2**53: exact in float64
  wide = np.where(mag >= np.uint64(1 << 53), squeezed.astype(np.float64) * 2.0 ** 11, mag.astype(np.float64))
  return np.where(neg, -wide, wide)


def _int_to_float(x: np.ndarray, to: DType) -> np.ndarray:
  exact_in_f64 = x.dtype.itemsize < 8 or to == dtypes.float64  # float64 itself: numpy's one rounding
  return _round_float(x.astype(np.float64) if exact_in_f64 else _sticky_f64(x), to)


def _float_to_float(x: np.ndarray, to: DType) -> np.ndarray:
  return _round_float(x.astype(np.float64), to)  # widening to float64 is exact for every float dtype


def _truncated_in_range(x: np.ndarray, to: DType) -> tuple[np.ndarray, np.ndarray]:
  """trunc(x) as float64, and where it fits `to` (the bounds MIN and MAX+1 are powers of two, exact in float64)."""
  t = np.trunc(x.astype(np.float64))
  return t, (t >= float(dtypes.min(to))) & (t < float(dtypes.max(to)) + 1.0)  # NaN fails both


def _float_to_int(x: np.ndarray, to: DType) -> np.ndarray:
  """Lanes out of range are UNDEFINED (undefined_cast_lanes); there the reference gives trunc(x) as int64 wrapped
  into `to` (-1.0 -> 255 for uint8, as numpy on x86 for values within int32's range), 0 past int64 and for NaN."""
  t, ok = _truncated_in_range(x, to)
  wide, in_int64 = _truncated_in_range(x, dtypes.int64)
  wrapped = np.where(in_int64, wide, 0.0).astype(np.int64).astype(to.np)
  return np.where(ok, np.where(ok, t, 0.0).astype(to.np), wrapped)


_KIND_CLASS = {"b": "b", "i": "n", "u": "n", "f": "f"}
_CAST_RULES: dict[tuple[str, str], Callable[[np.ndarray, DType], np.ndarray]] = {
  ("b", "b"): _to_bool, ("n", "b"): _to_bool, ("f", "b"): _to_bool,
  ("b", "n"): _astype, ("b", "f"): _astype, ("n", "n"): _astype,
  ("n", "f"): _int_to_float, ("f", "f"): _float_to_float, ("f", "n"): _float_to_int,
}


def _cast_classes(x: np.ndarray, to: DType) -> tuple[str, str]:
  return _KIND_CLASS[from_numpy(x.dtype).kind], _KIND_CLASS[to.kind]


def exec_cast(x: np.ndarray, to: DType) -> np.ndarray:
  """Convert values of x (of refgrad dtype from_numpy(x.dtype)) to dtype `to`."""
  x = np.asarray(x)
  with np.errstate(all="ignore"):
    out = _CAST_RULES[_cast_classes(x, to)](x, to)
  return np.array(out, to.np)


def cast_python_int(value: int, to: DType) -> float:
  """A Python int of any size CAST to the float dtype `to`: rounded once, as an int64 lane is. float(value) rounds
  at 53 bits first, a false tie for float32 and bfloat16 (2**62 + 2**38 + 1 became 2**62, not 2**62 + 2**39)."""
  mag = abs(value)
  shift = max(0, mag.bit_length() - 62)
  kept = (mag >> shift) | int(mag & ((1 << shift) - 1) != 0)  # the top 62 bits and a sticky bit: fits int64
  rounded = float(exec_cast(np.array(kept, np.int64), to))
  try:
    scaled = math.ldexp(math.copysign(rounded, value), shift)  # exact: a power of two times a value of `to`
  except OverflowError:
    scaled = math.copysign(math.inf, value)
  return float(exec_cast(np.array(scaled), to))  # only an overflow of `to`'s range changes it (to inf)


def undefined_cast_lanes(x: np.ndarray, to: DType) -> np.ndarray | None:
  """Float -> int lanes that are NaN, infinite, or truncate out of range; None for the casts that are always defined."""
  x = np.asarray(x)
  if _cast_classes(x, to) != ("f", "n"):
    return None
  with np.errstate(all="ignore"):
    return ~_truncated_in_range(x, to)[1]


def undefined_bitcast_lanes(x: np.ndarray) -> np.ndarray | None:
  """NaN lanes of a float source: their bits are unspecified once an op made them (SPEC.md, Casts)."""
  x = np.asarray(x)
  if x.dtype.kind != "f" and x.dtype != dtypes.bfloat16.np:
    return None
  with np.errstate(invalid="ignore"):  # a signalling NaN is a NaN too
    return np.isnan(x)


def exec_bitcast(x: np.ndarray, to: DType) -> np.ndarray:
  """Reinterpret the bits of x as `to`: same itemsize, no bool (a bool byte other than 0/1 has no meaning)."""
  x = np.asarray(x)
  src = from_numpy(x.dtype)
  if src.itemsize != to.itemsize or dtypes.bool in (src, to):
    raise TypeError(f"cannot bitcast {src} to {to}: bitcast needs two non-bool dtypes of the same itemsize")
  return x.view(to.np).copy()


# ---- reductions
_IDENTITY: dict[Ops, Callable[[DType], Any]] = {Ops.ADD: lambda dt: 0, Ops.MUL: lambda dt: 1, Ops.MAX: dtypes.min}


def reduce_identity(op: Ops, dtype: DType) -> Any:
  """The value of an empty reduction, as a Python bool, int or float."""
  if op not in _IDENTITY:
    raise TypeError(f"{op!r} is not a reduce op")
  return as_python_scalar(dtype, _IDENTITY[op](dtype))


def _normalize_axes(axis: int | tuple[int, ...], ndim: int) -> tuple[int, ...]:
  axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
  if any(not -ndim <= a < ndim for a in axes):
    raise ValueError(f"axis {axis} out of range for {ndim} dimensions")
  return tuple(sorted({int(a) % ndim for a in axes}))


_BOOL_REDUCE = {Ops.ADD: np.logical_or, Ops.MAX: np.logical_or, Ops.MUL: np.logical_and}
_NUMBER_REDUCE = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}


def _float_max_reduce(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
  """np.maximum propagates NaN like MAX; only the sign of a zero maximum needs fixing (+0 wins over -0)."""
  out = np.maximum.reduce(x, axis=axes, keepdims=True)
  zero = out == 0
  if zero.any():
    has_positive_zero = ((x == 0) & ~np.signbit(x)).any(axis=axes, keepdims=True)
    out = np.where(zero, np.where(has_positive_zero, 0.0, -0.0).astype(x.dtype), out)
  return out


def exec_reduce(op: Ops, dtype: DType, x: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
  """Reduce x over `axis` with the binary ALU op `op` (ADD, MUL or MAX), keeping the reduced dims as size 1.
  Each step means what exec_alu means (wraparound ints, NaN-propagating MAX with +0 > -0, OR/AND on bool);
  the order of float ADD/MUL steps is free (SPEC.md), so numpy's pairwise order is used."""
  x = np.asarray(x)
  if op not in _IDENTITY or from_numpy(x.dtype) != dtype:
    raise TypeError(f"cannot reduce {from_numpy(x.dtype)} with {op!r} -> {dtype}")
  axes = _normalize_axes(axis, x.ndim)
  if any(x.shape[a] == 0 for a in axes):
    return np.full(tuple(1 if i in axes else s for i, s in enumerate(x.shape)), reduce_identity(op, dtype), dtype.np)
  with np.errstate(all="ignore"):
    if dtype == dtypes.bool:
      return _BOOL_REDUCE[op].reduce(x, axis=axes, keepdims=True)
    if op is Ops.MAX and dtype.kind == "f":
      return _float_max_reduce(x, axes)
    return _NUMBER_REDUCE[op].reduce(x, axis=axes, keepdims=True, dtype=x.dtype)


# ---- measuring transcendental error
def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """uint64 count of representable steps between two float arrays of one dtype: +0.0 and -0.0 are one point, inf is
  one step past the largest finite value; 0 for two NaNs and the uint64 maximum for a NaN against a number."""
  a, b = np.asarray(a), np.asarray(b)
  if a.dtype != b.dtype or from_numpy(a.dtype).kind != "f":
    raise TypeError(f"ulp_distance needs two arrays of one float dtype, got {a.dtype} and {b.dtype}")
  sign = np.uint64(1 << (a.dtype.itemsize * 8 - 1))
  ua, ub = (v.view(_unsigned(a.dtype)).astype(np.uint64) for v in (a, b))
  ma, mb = ua & (sign - np.uint64(1)), ub & (sign - np.uint64(1))
  same_side = (ua >= sign) == (ub >= sign)
  dist = np.where(same_side, np.maximum(ma, mb) - np.minimum(ma, mb), ma + mb)  # < 2**64 even for float64
  with np.errstate(invalid="ignore"):  # ml_dtypes may flag signaling NaNs
    nan_a, nan_b = np.isnan(a), np.isnan(b)
  return np.where(nan_a | nan_b, np.where(nan_a & nan_b, np.uint64(0), np.uint64(2 ** 64 - 1)), dist)
