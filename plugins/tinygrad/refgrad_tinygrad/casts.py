"""CAST with SPEC.md's single rounding, in tinygrad ops.

tinygrad lowers float64 -> float16 and float64 -> bfloat16 through float32 on purpose (tinygrad/renderer/cstyle.py,
ClangRenderer: "LLVM legalizes double => half/bf16 cast on systems that don't support it natively [...] into a
compiler-rt libcall"), and converts 32- and 64-bit ints to bfloat16 through float32 too (its bfloat16 is a float32
rounded by bit arithmetic), on every device: each rounds twice (float64 `1 + 2**-11 + 2**-40` became float16 1.0, not
`1 + 2**-10`; float64 `1 + 2**-8 + 2**-30` bfloat16 1.0; int32 `2**24 + 2**16 + 1` bfloat16 `2**24`). These casts take
alu.py's way instead: to float64 exactly (64-bit ints keep their top bits and a sticky bit), to float32 rounded to
odd, then one rounding to the 16-bit float. Every other cast is tinygrad's own.
"""
from __future__ import annotations

from typing import Any

from tinygrad import dtypes as tg
from tinygrad.uop import Ops as TgOps

from refgrad.dtype import DType, dtypes

Tensor = Any
HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)
SIGNED_OF_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
UNSIGNED_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def tg_dtype(dt: DType) -> Any:
  """tinygrad's dtype of the same name."""
  return getattr(tg, dt.name)


def _where(c: Tensor, a: Tensor, b: Tensor) -> Tensor:
  return c.alu(TgOps.WHERE, a, b)


def _less(a: Tensor, b: Tensor) -> Tensor:
  return a.alu(TgOps.CMPLT, b)


def logical_not(c: Tensor) -> Tensor:
  """NOT of a bool tensor, as SPEC spells it: c XOR True."""
  return c.alu(TgOps.XOR, c.const_like(True))


def equal(a: Tensor, b: Tensor) -> Tensor:
  return logical_not(a.alu(TgOps.CMPNE, b))


def _wide_int_to_f64(x: Tensor, signed: bool) -> Tensor:
  """int64/uint64 -> float64 keeping the top 53 bits exactly and ORing the rest into a sticky bit, so that one more
  rounding to <= 24 bits is right (a plain conversion rounds at 53 bits first, which can make a false tie)."""
  bits = x.bitcast(tg.uint64)
  mag = bits
  if signed:  # |x| as uint64: two's complement negation wraps -MIN to MIN, whose bits are 2**63
    negated = bits.alu(TgOps.XOR, bits.const_like(2 ** 64 - 1)).alu(TgOps.ADD, bits.const_like(1))
    mag = _where(_less(x, x.const_like(0)), negated, bits)
  sticky = mag.alu(TgOps.AND, mag.const_like(0x7FF)).alu(TgOps.CMPNE, mag.const_like(0)).cast(tg.uint64)
  squeezed = mag.alu(TgOps.SHR, mag.const_like(11)).alu(TgOps.OR, sticky).cast(tg.float64)
  squeezed = squeezed.alu(TgOps.MUL, squeezed.const_like(2.0 ** 11))
  wide = _where(_less(mag, mag.const_like(1 << 53)), mag.cast(tg.float64), squeezed)
  if not signed:
    return wide
  return _where(_less(x, x.const_like(0)), wide.alu(TgOps.MUL, wide.const_like(-1.0)), wide)


def _f32_round_to_odd(x: Tensor) -> Tensor:
  """float64 -> float32 rounded to odd: truncated, the last bit set if anything was cut off."""
  near = x.cast(tg.float32)
  back = near.cast(tg.float64)
  inexact = back.alu(TgOps.CMPNE, x).alu(TgOps.AND, equal(x, x))  # NaN is exact
  away = equal(_less(x, back), _less(x.const_like(0.0), x))  # rounded away from zero
  bits = near.bitcast(tg.int32)
  bits = _where(inexact.alu(TgOps.AND, away), bits.alu(TgOps.ADD, bits.const_like(-1)), bits)  # rounded away: back
  return _where(inexact, bits.alu(TgOps.OR, bits.const_like(1)), bits).bitcast(tg.float32)


def rounds_twice(src: DType, to: DType) -> bool:
  """Whether tinygrad's own conversion src -> to rounds twice (through float32). int -> float16 cannot: every int
  float32 rounds is past float16's range."""
  if to not in HALF_FLOATS:
    return False
  return src == dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4 and to == dtypes.bfloat16)


def _finite_or_zero(x: Tensor, src: DType) -> Tensor:
  """x with 0 in its NaN and infinite lanes: a float -> int cast is UNDEFINED there in SPEC, and tinygrad's PYTHON
  emulator raises on them ("ValueError: cannot convert float NaN to integer", its int() of each lane). By bits, not
  by a WHERE: tinygrad moves a cast into both sides of a WHERE, and the emulator computes both."""
  bits = tg_dtype(UNSIGNED_OF_SIZE[src.itemsize])
  finite = _less(x, x.const_like(float("inf"))).alu(TgOps.AND, _less(x.const_like(float("-inf")), x))  # NaN: False
  keep = finite.cast(bits).alu(TgOps.MUL, x.bitcast(bits).const_like(2 ** (8 * src.itemsize) - 1))
  return x.bitcast(bits).alu(TgOps.AND, keep).bitcast(tg_dtype(src))


def cast(x: Tensor, src: DType, to: DType) -> Tensor:
  """CAST src -> to as alu.exec_cast: tinygrad's own cast, except where it rounds twice. float -> int lanes out of
  range are UNDEFINED in SPEC, so whatever tinygrad gives there is as good as any (NaN and inf become 0 first)."""
  if dtypes.is_float(src) and (dtypes.is_int(to)):
    return _finite_or_zero(x, src).cast(tg_dtype(to))
  if not rounds_twice(src, to):
    return x.cast(tg_dtype(to))
  wide = _wide_int_to_f64(x, src.kind == "i") if dtypes.is_int(src) and src.itemsize == 8 else x.cast(tg.float64)
  return _f32_round_to_odd(wide).cast(tg_dtype(to))
