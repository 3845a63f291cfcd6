"""CAST with SPEC.md's single rounding, in jax ops.

XLA converts float64 to float16/bfloat16 and 32/64-bit ints to bfloat16 through float32, rounding twice (float64
`1 + 2**-8 + 2**-30` became bfloat16 1.0, not `1 + 2**-7`; int32 `2**24 + 2**16 + 1` became `2**24`, not
`2**24 + 2**17`; float64 `1 + 2**-11 + 2**-40` became float16 1.0). These casts take alu.py's way instead: to
float64 exactly (64-bit ints keep their top bits and a sticky bit), to float32 rounded to odd, then one rounding to
the 16-bit float.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from refgrad.dtype import DType, dtypes

Array = jax.Array
HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


def _wide_int_to_f64(x: Array, signed: bool) -> Array:
  """int64/uint64 -> float64 keeping the top 53 bits exactly and ORing the rest into a sticky bit, so that one more
  rounding to <= 24 bits is right (a plain conversion rounds at 53 bits first, which can make a false tie)."""
  bits = lax.bitcast_convert_type(x, jnp.uint64)
  neg = lax.lt(x, jnp.zeros_like(x)) if signed else jnp.zeros(x.shape, bool)
  mag = jnp.where(neg, lax.neg(bits), bits)  # -MIN wraps to MIN, whose bits are 2**63 as unsigned
  sticky = lax.ne(mag & jnp.uint64(0x7FF), jnp.uint64(0)).astype(jnp.uint64)
  squeezed = lax.convert_element_type((mag >> jnp.uint64(11)) | sticky, jnp.float64) * 2.0 ** 11
  wide = jnp.where(mag >= jnp.uint64(1 << 53), squeezed, lax.convert_element_type(mag, jnp.float64))
  return jnp.where(neg, -wide, wide)


def _f32_round_to_odd(x: Array) -> Array:
  """float64 -> float32 rounded to odd: truncated, the last bit set if anything was cut off."""
  near = lax.convert_element_type(x, jnp.float32)
  back = lax.convert_element_type(near, jnp.float64)
  inexact = lax.ne(back, x) & lax.eq(x, x)
  bits = lax.bitcast_convert_type(near, jnp.int32)
  bits = jnp.where(inexact & (lax.abs(back) > lax.abs(x)), bits - 1, bits)  # rounded away from zero: step back
  return lax.bitcast_convert_type(jnp.where(inexact, bits | 1, bits), jnp.float32)


def _rounds_twice(src: DType, to: DType) -> bool:
  """Whether XLA's own conversion src -> to may round twice (through float32). int -> float16 cannot: every int
  float32 rounds is past float16's range."""
  if to not in HALF_FLOATS:
    return False
  return src == dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4 and to == dtypes.bfloat16)


def cast(x: Array, src: DType, to: DType) -> Array:
  """CAST src -> to as alu.exec_cast: bool is `x != 0` (NaN is True), ints keep their low bits, floats round once to
  nearest-even. float -> int lanes out of range are UNDEFINED in SPEC: XLA's saturated value there is as good as any."""
  if to == dtypes.bool:
    return lax.ne(x, jnp.zeros_like(x))
  if not _rounds_twice(src, to):
    return lax.convert_element_type(x, to.np)
  wide = _wide_int_to_f64(x, src.kind == "i") if dtypes.is_int(src) and src.itemsize == 8 else \
    lax.convert_element_type(x, jnp.float64)
  return lax.convert_element_type(_f32_round_to_odd(wide), to.np)
