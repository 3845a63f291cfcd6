"""CAST with SPEC.md's single rounding, in ONNX operators.

onnxruntime's Cast converts float64 to float16 and bfloat16, and 32- and 64-bit ints to bfloat16, through float32,
rounding twice (measured with 1.32: float64 `1 + 2**-11 + 2**-40` became float16 1.0, not `1 + 2**-10`; float64
`65520 - 2**-30` became float16 inf, not 65504; int32 `2**24 + 2**16 + 1` became bfloat16 `2**24`, not
`2**24 + 2**17`). ONNX's Cast says only that "a 64-bit float 3.1415926459 may be round to a 32-bit float", so these
casts take alu.py's way instead: to float64 exactly (64-bit ints keep their top 53 bits and a sticky bit), to float32
rounded to odd, then one rounding to the 16-bit float. Every other cast is onnxruntime's own Cast, which rounds once.
"""
from __future__ import annotations

from refgrad.dtype import DType, dtypes
from refgrad_onnx.builder import Builder

HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


def rounds_twice(src: DType, to: DType) -> bool:
  """Whether onnxruntime's own Cast src -> to may round twice (through float32). int -> float16 cannot: every int
  that float32 rounds is past float16's range."""
  if to not in HALF_FLOATS:
    return False
  return src == dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4 and to == dtypes.bfloat16)


def _wide_int_to_f64(g: Builder, x: str, src: DType) -> str:
  """int64/uint64 -> float64 keeping the top 53 bits exactly and ORing the rest into a sticky bit, so that one more
  rounding to <= 24 bits is right (a plain conversion rounds at 53 bits first, which can make a false tie)."""
  u64 = dtypes.uint64
  if src == dtypes.int64:
    negative = g.op("Less", x, g.const(0, src))
    magnitude = g.cast(g.op("Where", negative, g.op("Neg", x), x), u64)  # -MIN wraps to MIN: 2**63 as unsigned
  else:
    magnitude = x
  low = g.op("BitwiseAnd", magnitude, g.const(0x7FF, u64))
  sticky = g.cast(g.op("Not", g.op("Equal", low, g.const(0, u64))), u64)
  top = g.op("BitwiseOr", g.op("BitShift", magnitude, g.const(11, u64), direction="RIGHT"), sticky)
  squeezed = g.op("Mul", g.cast(top, dtypes.float64), g.const(2.0 ** 11, dtypes.float64))
  small = g.op("Less", magnitude, g.const(1 << 53, u64))
  wide = g.op("Where", small, g.cast(magnitude, dtypes.float64), squeezed)
  return g.op("Where", negative, g.op("Neg", wide), wide) if src == dtypes.int64 else wide


def _f32_round_to_odd(g: Builder, x: str) -> str:
  """float64 -> float32 rounded to odd: truncated, the last bit set if anything was cut off."""
  near = g.cast(x, dtypes.float32)
  back = g.cast(near, dtypes.float64)
  inexact = g.op("And", g.op("Not", g.op("Equal", back, x)), g.op("Equal", x, x))  # NaN is never inexact
  away = g.op("And", inexact, g.op("Less", g.op("Abs", x), g.op("Abs", back)))  # rounded away from zero: step back
  bits = g.op("Sub", g.bitcast(near, dtypes.int32), g.cast(away, dtypes.int32))
  return g.bitcast(g.op("BitwiseOr", bits, g.cast(inexact, dtypes.int32)), dtypes.float32)


def cast(g: Builder, x: str, src: DType, to: DType) -> str:
  """CAST src -> to as alu.exec_cast: bool is `x != 0` (NaN is True), ints keep their low bits, floats round once
  to nearest-even (ONNX's Cast rules). float -> int lanes out of range are UNDEFINED in SPEC and in ONNX alike."""
  if not rounds_twice(src, to):
    return g.cast(x, to)
  if src in (dtypes.int64, dtypes.uint64):
    wide = _wide_int_to_f64(g, x, src)
  else:
    wide = x if src == dtypes.float64 else g.cast(x, dtypes.float64)  # int32 and uint32 are exact in float64
  return g.cast(_f32_round_to_odd(g, wide), to)
