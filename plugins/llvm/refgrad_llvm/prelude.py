"""LLVM IR helper functions: half and bfloat16 emulation and the exact conversions that need rounding to odd.

half and bfloat16 values are computed in `float` and stored as 16-bit patterns; each op rounds its float result
once to the 16-bit format (float has at least 2p+2 significand bits for both, so that single rounding is the
correctly rounded result docs/SPEC.md asks for). Everything is integer bit manipulation plus plain float ops, so
no target support for `half`/`bfloat` and no runtime library call is needed. Conversions from float64 or 64-bit
integers round to float "to odd" first, which makes the final rounding to 16 bits exact.

A kernel includes only the helpers it calls (`needed_helpers`); they are `internal` and `alwaysinline`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Helper:
  text: str
  needs: tuple[str, ...] = ()  # other helpers, or intrinsic declarations (lines starting with "declare")


F16_TO_F32 = """define internal float @rg_f16_to_f32(i16 %h) alwaysinline nounwind {
  %x = zext i16 %h to i32
  %sign.lo = and i32 %x, 32768
  %sign = shl i32 %sign.lo, 16
  %abs = and i32 %x, 32767
  %moved = shl i32 %abs, 13
  %normal = add i32 %moved, 939524096           ; rebias the exponent from 15 to 127: + (112 << 23)
  %special = or i32 %moved, 2139095040          ; inf and NaN: all-ones exponent, payload kept
  %mant = and i32 %x, 1023
  %mant.f = uitofp i32 %mant to float
  %tiny.f = fmul float %mant.f, 0x3E70000000000000  ; zero and subnormals: mant * 2^-24, exact in float
  %tiny = bitcast float %tiny.f to i32
  %exp = and i32 %x, 31744
  %is.special = icmp eq i32 %exp, 31744
  %is.tiny = icmp eq i32 %exp, 0
  %big = select i1 %is.special, i32 %special, i32 %normal
  %mag = select i1 %is.tiny, i32 %tiny, i32 %big
  %bits = or i32 %mag, %sign
  %f = bitcast i32 %bits to float
  ret float %f
}
"""

F32_TO_F16 = """define internal i16 @rg_f32_to_f16(float %f) alwaysinline nounwind {
  %x = bitcast float %f to i32
  %ax = and i32 %x, 2147483647
  %sign.hi = lshr i32 %x, 16
  %sign = and i32 %sign.hi, 32768
  ; NaN: keep the payload's top bits (quieted if they are all zero), so bitcasts through half round-trip
  %dropped = lshr i32 %ax, 13
  %payload = and i32 %dropped, 1023
  %payload.zero = icmp eq i32 %payload, 0
  %payload.nan = select i1 %payload.zero, i32 512, i32 %payload
  %nan = or i32 %payload.nan, 31744
  ; normal: rebias, then round to nearest even on the 13 dropped bits (adding 0xfff plus the kept lsb)
  %lsb = and i32 %dropped, 1
  %rebiased = add i32 %ax, -939520001           ; - (112 << 23) + 0xfff
  %rounded = add i32 %rebiased, %lsb
  %normal = lshr i32 %rounded, 13
  ; subnormal: |f| * 2^24 (exact) plus 2^23 makes the float adder round it to an integer, to nearest even
  %af = bitcast i32 %ax to float
  %scaled = fmul float %af, 0x4170000000000000
  %shifted = fadd float %scaled, 0x4160000000000000
  %shifted.bits = bitcast float %shifted to i32
  %tiny = sub i32 %shifted.bits, 1258291200    ; minus the bits of 2^23
  %is.nan = icmp ugt i32 %ax, 2139095040
  %is.inf = icmp uge i32 %ax, 1199566848        ; 65520 and above round to inf
  %is.normal = icmp uge i32 %ax, 947912704      ; 2^-14, the smallest normal half
  %m.normal = select i1 %is.normal, i32 %normal, i32 %tiny
  %m.inf = select i1 %is.inf, i32 31744, i32 %m.normal
  %m.nan = select i1 %is.nan, i32 %nan, i32 %m.inf
  %bits = or i32 %m.nan, %sign
  %h = trunc i32 %bits to i16
  ret i16 %h
}
"""

BF16_TO_F32 = """define internal float @rg_bf16_to_f32(i16 %h) alwaysinline nounwind {
  %x = zext i16 %h to i32
  %bits = shl i32 %x, 16
  %f = bitcast i32 %bits to float
  ret float %f
}
"""

F32_TO_BF16 = """define internal i16 @rg_f32_to_bf16(float %f) alwaysinline nounwind {
  %x = bitcast float %f to i32
  %hi = lshr i32 %x, 16
  %lsb = and i32 %hi, 1
  %biased = add i32 %x, 32767
  %rounded = add i32 %biased, %lsb
  %near = lshr i32 %rounded, 16                 ; nearest even; overflows into inf correctly
  %payload = and i32 %hi, 127
  %payload.zero = icmp eq i32 %payload, 0
  %quiet = select i1 %payload.zero, i32 64, i32 0
  %nan = or i32 %hi, %quiet                     ; NaN: truncate, and stay a NaN
  %ax = and i32 %x, 2147483647
  %is.nan = icmp ugt i32 %ax, 2139095040
  %bits = select i1 %is.nan, i32 %nan, i32 %near
  %h = trunc i32 %bits to i16
  ret i16 %h
}
"""

ROUND_F16 = """define internal float @rg_round_f16(float %f) alwaysinline nounwind {
  %h = call i16 @rg_f32_to_f16(float %f)
  %r = call float @rg_f16_to_f32(i16 %h)
  ret float %r
}
"""

ROUND_BF16 = """define internal float @rg_round_bf16(float %f) alwaysinline nounwind {
  %h = call i16 @rg_f32_to_bf16(float %f)
  %r = call float @rg_bf16_to_f32(i16 %h)
  ret float %r
}
"""

F64_TO_F32_ODD = """define internal float @rg_f64_to_f32_odd(double %d) alwaysinline nounwind {
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %exact = fcmp ueq double %back, %d            ; exact, or NaN
  %bits = bitcast float %f to i32
  %abs.back = call double @llvm.fabs.f64(double %back)
  %abs.d = call double @llvm.fabs.f64(double %d)
  %away = fcmp ogt double %abs.back, %abs.d     ; rounded away from zero: step back toward it
  %step = zext i1 %away to i32
  %toward = sub i32 %bits, %step
  %odd.bits = or i32 %toward, 1
  %odd = bitcast i32 %odd.bits to float
  %r = select i1 %exact, float %f, float %odd
  ret float %r
}
"""

U64_TO_F32_ODD = """define internal float @rg_u64_to_f32_odd(i64 %u) alwaysinline nounwind {
  ; from 2^53 up, fold the 11 lowest bits into a sticky bit: the rest converts to double exactly
  %hi = lshr i64 %u, 11
  %low = and i64 %u, 2047
  %inexact = icmp ne i64 %low, 0
  %sticky = zext i1 %inexact to i64
  %squeezed = or i64 %hi, %sticky
  %squeezed.d = uitofp i64 %squeezed to double
  %big = fmul double %squeezed.d, 2048.0
  %small = uitofp i64 %u to double
  %is.big = icmp uge i64 %u, 9007199254740992
  %d = select i1 %is.big, double %big, double %small
  %f = call float @rg_f64_to_f32_odd(double %d)
  ret float %f
}
"""

I64_TO_F32_ODD = """define internal float @rg_i64_to_f32_odd(i64 %x) alwaysinline nounwind {
  %neg = icmp slt i64 %x, 0
  %minus = sub i64 0, %x                        ; MIN wraps to itself, which is 2^63 unsigned
  %mag = select i1 %neg, i64 %minus, i64 %x
  %f = call float @rg_u64_to_f32_odd(i64 %mag)
  %nf = fneg float %f
  %r = select i1 %neg, float %nf, float %f
  ret float %r
}
"""

HELPERS: dict[str, Helper] = {
  "rg_f16_to_f32": Helper(F16_TO_F32),
  "rg_f32_to_f16": Helper(F32_TO_F16),
  "rg_bf16_to_f32": Helper(BF16_TO_F32),
  "rg_f32_to_bf16": Helper(F32_TO_BF16),
  "rg_round_f16": Helper(ROUND_F16, ("rg_f32_to_f16", "rg_f16_to_f32")),
  "rg_round_bf16": Helper(ROUND_BF16, ("rg_f32_to_bf16", "rg_bf16_to_f32")),
  "rg_f64_to_f32_odd": Helper(F64_TO_F32_ODD, ("declare double @llvm.fabs.f64(double)",)),
  "rg_u64_to_f32_odd": Helper(U64_TO_F32_ODD, ("rg_f64_to_f32_odd",)),
  "rg_i64_to_f32_odd": Helper(I64_TO_F32_ODD, ("rg_u64_to_f32_odd",)),
}


def needed_helpers(names: set[str]) -> tuple[list[str], set[str]]:
  """The helper definitions `names` need (dependencies included, in a stable order) and their declarations."""
  wanted: set[str] = set()
  declarations: set[str] = set()
  stack = list(names)
  while stack:
    name = stack.pop()
    if name.startswith("declare"):
      declarations.add(name)
    elif name not in wanted:
      wanted.add(name)
      stack.extend(HELPERS[name].needs)
  return [HELPERS[n].text for n in HELPERS if n in wanted], declarations
