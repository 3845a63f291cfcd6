"""The CLANG family: bugs of a C backend planted in a copy of CLANG, and the C-style planting OPENCL shares.

A mutant is planted in one or both of two places:
- the C source: an exact edit of the shared prelude (cstyle_prelude.py), a rewrite of every rendered translation
  unit, a replaced entry of the renderer's rule table (`C_RULES`), or a replaced method of its `_Render`;
- the compiler flags of the registered CLANG device (its compiler's `flags`): flags added or removed.

Each is one mistake that real backends ship (fast-math shortcuts, conversions with the wrong rounding mode, "compute
in float and round at the store", a dropped lane of a vectorized reduction, ...) and that docs/SPEC.md forbids.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from refgrad.codegen.cstyle import C_RULES, CDialect, CStyleRenderer, _Render, c_literal
from refgrad.codegen.cstyle_prelude import DOUBLE_PRELUDE, PRELUDE, WIDE_INT_PRELUDE
from refgrad.device import DeviceImpl
from refgrad.dtype import DType, dtypes
from refgrad.registry import Device
from refgrad.testing.selftest.mutants.base import (
  BF16,
  F16,
  F32,
  F64,
  TINY_F32,
  Backend,
  MethodPatch,
  Mutant,
  alu,
  arr,
  cast,
  device_probe,
  op,
  planted_flags,
  reduce,
  regex,
  twice,
  witness,
)
from refgrad.uop import Ops

BinaryRule = Callable[[_Render, DType, str, str], str]
LANES = CDialect().reduce_lanes  # accumulators of a split reduction


def _compute_type(dt: DType) -> DType:
  """The C type a float dtype is computed in: half and bfloat16 are emulated in float."""
  return F64 if dt == F64 else F32


def _unary(op: Ops, expr: Callable[[_Render, DType, str], str]) -> dict[Ops, Callable[..., str]]:
  """Replace how one unary op is written on floats (the result is still rounded to half/bfloat16)."""
  def unary(r: _Render, dt: DType, a: str) -> str:
    return r.round16(expr(r, dt, a), dt) if dtypes.is_float(dt) else C_RULES[op](r, dt, a)
  return {op: unary}


def _off_by_ulps(fn: str) -> dict[Ops, Callable[..., str]]:
  """A libm call whose result is scaled by (1 + 4 eps): a few ULP off, like a fast vector approximation."""
  def expr(r: _Render, dt: DType, a: str) -> str:
    wide = _compute_type(dt)
    eps = 2.0 ** -52 if wide == F64 else 2.0 ** -23
    return f"({r.math(fn, dt)}({a}) * {c_literal(1 + 4 * eps, wide, r.d)})"
  return _unary({"sqrt": Ops.SQRT, "exp2": Ops.EXP2, "log2": Ops.LOG2, "sin": Ops.SIN}[fn], expr)


def _exp2_via_exp(r: _Render, dt: DType, a: str) -> str:
  wide = _compute_type(dt)
  return f"{'exp' if wide == F64 else 'expf'}({a} * {c_literal(math.log(2), wide, r.d)})"


def _cast_patch(applies: Callable[[DType, DType], bool], expr: Callable[[_Render, str, DType, DType], str]) \
    -> dict[str, MethodPatch]:
  """Replace how some casts (those `applies(src, dst)` selects) are written."""
  def patched(r: _Render, original: Callable[..., str], a: str, src: DType, dst: DType) -> str:
    return expr(r, a, src, dst) if applies(src, dst) else original(a, src, dst)
  return {"cast": patched}


def _saturate(r: _Render, a: str, src: DType, dst: DType) -> str:
  lo, hi = c_literal(max(dtypes.min(dst), dtypes.min(src)), src, r.d), c_literal(dtypes.max(dst), src, r.d)
  return f"({r.ctype(dst)})({a} < {lo} ? {lo} : {a} > {hi} ? {hi} : {a})"


def _narrowing(src: DType, dst: DType) -> bool:
  return dtypes.is_int(src) and dtypes.is_int(dst) and dst.bits < src.bits


def _float_to_int(src: DType, dst: DType) -> bool:
  return dtypes.is_float(src) and dtypes.is_int(dst)


def _rounded(r: _Render, a: str, src: DType, dst: DType) -> str:
  return f"({r.ctype(dst)})({'round' if src == F64 else 'roundf'}({a}))"


def _wide_unsigned_to_float(src: DType, dst: DType) -> bool:
  return dtypes.is_unsigned(src) and src.bits >= 32 and dst in (F32, F64)


def _signed_of(dt: DType) -> DType:
  return {32: dtypes.int32, 64: dtypes.int64}[dt.bits]


def _for(kinds: Callable[[DType], bool], rule: BinaryRule, op: Ops) -> BinaryRule:
  """`rule` for the dtypes `kinds` selects, the real rule of `op` for the others."""
  return lambda r, dt, a, b: rule(r, dt, a, b) if kinds(dt) else C_RULES[op](r, dt, a, b)


def _signed(dt: DType) -> bool:
  return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)


def _floor_division(r: _Render, dt: DType, a: str, b: str) -> str:
  """C's truncating quotient, then one less when the signs differ and the division is inexact: Python's //."""
  truncated = C_RULES[Ops.IDIV](r, dt, a, b)
  inexact = f"({b} != 0 && {b} != -1 && ({a} % {b}) != 0 && (({a} < 0) != ({b} < 0)))"
  return f"({r.ctype(dt)})({truncated} - {inexact})"


def _remainder_sign_of_divisor(r: _Render, dt: DType, a: str, b: str) -> str:
  """Python's %: the remainder takes the divisor's sign."""
  rem = C_RULES[Ops.MOD](r, dt, a, b)
  return f"({r.ctype(dt)})(({rem} != 0 && ({rem} < 0) != ({b} < 0)) ? {rem} + {b} : {rem})"


def _naive_fmod(r: _Render, dt: DType, a: str, b: str) -> str:
  return r.round16(f"({a} - {r.math('trunc', dt)}({a} / {b}) * {b})", dt)


def _shift_guard_short(r: _Render, dt: DType, a: str, b: str) -> str:
  """SHL guarded against shifting into the sign bit as well: `x << (bits - 1)` gives 0."""
  guard = f"{b} >= {dt.bits - 1}" + ("" if dtypes.is_unsigned(dt) else f" || {b} < 0")
  return f"(({guard}) ? {c_literal(0, dt, r.d)} : ({r.ctype(dt)})(({r.unsigned_of(dt)}){a} << {b}))"


def _logical_shr(r: _Render, dt: DType, a: str, b: str) -> str:
  """SHR done on the unsigned type of the same width: zero-filling where signed values must fill with the sign."""
  unsigned = r.ctype({8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}[dt.bits])
  guard = f"{b} >= {dt.bits} || {b} < 0"
  return f"(({guard}) ? {c_literal(0, dt, r.d)} : ({r.ctype(dt)})(({unsigned}){a} >> {b}))"


def _in_signed_type(symbol: str, op: Ops) -> BinaryRule:
  """Integer + or * in the signed C type: overflow is undefined behaviour once -fwrapv is gone."""
  return _for(_signed, lambda r, dt, a, b: f"({r.ctype(dt)})({a} {symbol} {b})", op)


def _mask_bool(r: _Render, original: Callable[..., str], expr: str, dt: DType) -> str:
  """Bools stored as SIMD compare masks: all bits set (255) for True."""
  return f"({r.d.storage[dt]})(0u - (unsigned)({expr}))" if dt == dtypes.bool else original(expr, dt)


def _flush_subnormals(source: str) -> str:
  """Set the x86 FTZ and DAZ bits (MXCSR 0x8040) for the kernel's duration, as a backend chasing speed might."""
  head = re.compile(r"^((?:\w+ )*void \w+\([^)]*\) \{\n)", re.M)
  source = head.sub(r"\1  const unsigned rg_csr = __builtin_ia32_stmxcsr();\n"
                    r"  __builtin_ia32_ldmxcsr(rg_csr | 0x8040u);\n", source, count=1)
  end = source.rstrip().rfind("}")
  return source[:end] + "  __builtin_ia32_ldmxcsr(rg_csr);\n}\n"


# ---- the table
CLANG_MUTANTS: tuple[Mutant, ...] = (
  # comparisons, NaN and signed zeros
  Mutant("cmplt_le", "comparison", "CMPLT rendered as <=",
         witness(op(Ops.CMPLT), arr(F32, 1.0), arr(F32, 1.0)),
         rules={Ops.CMPLT: lambda r, dt, a, b: f"({r.ctype(dtypes.bool)})({a} <= {b})"}),
  Mutant("cmpne_ordered", "NaN", "CMPNE as (a < b || a > b): False for NaN operands",
         witness(op(Ops.CMPNE), arr(F32, math.nan), arr(F32, 1.0)),
         rules={Ops.CMPNE: lambda r, dt, a, b: f"({r.ctype(dtypes.bool)})({a} < {b} || {a} > {b})"}),
  Mutant("max_drops_nan", "NaN", "float MAX like C fmax: a NaN operand is dropped",
         witness(op(Ops.MAX), arr(F32, 1.0), arr(F32, math.nan)),
         prelude=(("  float m = a == b ? tie : larger;\n  return (a != a || b != b) ? a + b : m;",
                   "  float m = a == b ? tie : larger;\n  return a != a ? b : b != b ? a : m;"),)),
  Mutant("max_zero_order", "signed zero", "float MAX of equal operands returns the second: max(+0.0, -0.0) = -0.0",
         witness(op(Ops.MAX), arr(F32, 0.0), arr(F32, -0.0)),
         prelude=(("  float tie = (rg_f32_bits(a) >> 31) ? b : a;", "  float tie = b;"),)),
  Mutant("neg_as_sub", "signed zero", "float NEG as 0 - x: -(+0.0) gives +0.0",
         witness(op(Ops.NEG), arr(F32, 0.0)),
         rules=_unary(Ops.NEG, lambda r, dt, a: f"({c_literal(0.0, _compute_type(dt), r.d)} - {a})")),
  Mutant("bool_store_mask", "storage", "bools stored as compare masks (255 for True)",
         witness(op(Ops.CMPLT), arr(F32, 1.0), arr(F32, 2.0)), methods={"to_storage": _mask_bool}),
  # conversions: rounding, saturation, double rounding
  Mutant("f16_ties_away", "conversion rounding", "float -> half rounds ties away from zero (normal range)",
         witness(cast(F16), arr(F32, 1 + 2.0 ** -11)),
         prelude=(("((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13)", "((ax + 0xc8001000u) >> 13)"),)),
  Mutant("f16_subnormal_ties_away", "conversion rounding", "float -> half rounds ties away in the subnormal range",
         witness(cast(F16), arr(F32, 2.0 ** -25, 5 * 2.0 ** -25)),
         prelude=(("if (rem > halfway || (rem == halfway && (q & 1u))) q++;", "if (rem >= halfway) q++;"),)),
  Mutant("f16_subnormal_flush", "conversion rounding", "float -> half flushes subnormal results to zero",
         witness(cast(F16), arr(F32, 2.0 ** -20)),
         prelude=(("if (e < 102u) return (ushort_t)sign;", "if (e < 113u) return (ushort_t)sign;"),)),
  Mutant("f16_overflow_saturates", "conversion rounding", "float -> half overflow gives +-65504 instead of +-inf",
         witness(cast(F16), arr(F32, 1e5)),
         prelude=(("if (ax >= 0x477ff000u) return (ushort_t)(sign | 0x7c00u);",
                   "if (ax >= 0x477ff000u) return (ushort_t)(sign | 0x7bffu);"),)),
  Mutant("bf16_truncates", "conversion rounding", "float -> bfloat16 truncates",
         witness(cast(BF16), arr(F32, 1 + 0.75 * 2.0 ** -7)),
         prelude=(("return (ushort_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);", "return (ushort_t)(x >> 16);"),)),
  Mutant("bf16_ties_away", "conversion rounding", "float -> bfloat16 rounds ties away from zero",
         witness(cast(BF16), arr(F32, 1 + 2.0 ** -8)),
         prelude=(("return (ushort_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);",
                   "return (ushort_t)((x + 0x8000u) >> 16);"),)),
  Mutant("f64_narrowing_double_rounds", "conversion rounding",
         "float64 -> half/bfloat16 through a plain float (round to nearest twice, not to odd first)",
         witness(cast(BF16), arr(F64, 1 + 2.0 ** -8 + 2.0 ** -30)),
         prelude=(("  float f = (float)d;\n  if ((double)f == d || d != d) return f;",
                   "  float f = (float)d;\n  return f;"),)),
  Mutant("wide_int_sticky_dropped", "conversion rounding",
         "int64 -> half/bfloat16 truncates the low bits without a sticky bit (false ties)",
         witness(cast(BF16), arr(dtypes.int64, 2 ** 62 + 2 ** 54 + 1)),
         prelude=(("  if (shift != 0u && (u & ((1ull << shift) - 1ull)) != 0ull) v |= 1ull;\n", ""),)),
  Mutant("narrowing_saturates", "conversion", "narrowing integer casts saturate instead of keeping the low bits",
         witness(cast(dtypes.int8), arr(dtypes.int32, 300, -300)), methods=_cast_patch(_narrowing, _saturate)),
  Mutant("float_to_int_rounds", "conversion", "float -> int casts round to nearest instead of truncating",
         witness(cast(dtypes.int32), arr(F32, 2.5, -0.7)),
         methods=_cast_patch(_float_to_int, _rounded)),
  Mutant("unsigned_to_float_signed", "conversion", "uint32/uint64 -> float converts through the signed type",
         witness(cast(F32), arr(dtypes.uint32, 2 ** 32 - 1)),
         methods=_cast_patch(_wide_unsigned_to_float,
                             lambda r, a, src, dst: f"({r.ctype(dst)})(({r.ctype(_signed_of(src))}){a})")),
  # half and bfloat16 arithmetic
  Mutant("f16_unrounded_chain", "low-precision chain", "half ops computed in float, rounded only at the store",
         witness(twice(Ops.ADD), arr(F16, 1.0), arr(F16, 2.0 ** -11)),
         prelude=(("RG_FN float rg_round_f16(float f) { return rg_f16_to_f32(rg_f32_to_f16(f)); }",
                   "RG_FN float rg_round_f16(float f) { return f; }"),)),
  Mutant("bf16_unrounded_chain", "low-precision chain", "bfloat16 ops computed in float, rounded only at the store",
         witness(twice(Ops.ADD), arr(BF16, 1.0), arr(BF16, 2.0 ** -8)),
         prelude=(("RG_FN float rg_round_bf16(float f) { return rg_bf16_to_f32(rg_f32_to_bf16(f)); }",
                   "RG_FN float rg_round_bf16(float f) { return f; }"),)),
  # reductions: split accumulators and identities
  Mutant("split_combine_drops_lane", "reduction", f"a split reduction's final combine leaves out lane {LANES - 1}",
         witness(reduce(Ops.ADD), np.ones((2, 64), np.int32)),
         source=regex(rf"^[ ]*(acc\d+) = [^\n]*\b\1_{LANES - 1}\b[^\n]*\n", "")),
  Mutant("split_remainder_short", "reduction", "a split reduction's remainder loop skips its last iteration",
         witness(reduce(Ops.ADD), np.ones((2, 19), np.int32)),
         source=regex(r"\b(ridx\d+_rest < )(\d+);", lambda m: f"{m[1]}{int(m[2]) - 1};")),
  Mutant("max_identity_finite", "reduction identity", "float MAX reductions start from -FLT_MAX/-DBL_MAX, not -inf",
         witness(reduce(Ops.MAX), arr(F32, -math.inf, -math.inf)),
         source=regex(r"\b(acc\d+(?:_\d+)? = )\(-\((float|double)\)INFINITY\)",
                       lambda m: m[1] + ("-0x1.fffffffffffffp+1023" if m[2] == "double" else "-0x1.fffffep+127f"))),
  Mutant("int_max_identity_zero", "reduction identity", "signed integer MAX reductions start from 0, not MIN",
         witness(reduce(Ops.MAX), arr(dtypes.int32, -5, -3)),
         source=regex(r"\b(acc\d+(?:_\d+)? = )\((int(?:8|16|32|64)_t)\)\(-\d+(?:LL)? - 1\)", r"\1(\2)0")),
  # float arithmetic and transcendentals
  Mutant("fdiv_reciprocal", "float arithmetic", "FDIV as a * (1 / b): two roundings",
         witness(op(Ops.FDIV), arr(F32, 3.0), arr(F32, 7.0)),
         rules={Ops.FDIV: lambda r, dt, a, b: r.round16(f"({a} * ({c_literal(1.0, _compute_type(dt), r.d)} / {b}))",
                                                         dt)}),
  Mutant("fmod_naive", "float arithmetic", "float MOD as a - trunc(a / b) * b",
         witness(op(Ops.MOD), arr(F32, -3.0), arr(F32, math.inf)),
         rules={Ops.MOD: _for(dtypes.is_float, _naive_fmod, Ops.MOD)}),
  Mutant("trunc_via_int64", "float arithmetic", "TRUNC through an int64 cast: loses -0.0, inf, NaN and large values",
         witness(op(Ops.TRUNC), arr(F32, -0.5, 1e30)),
         rules=_unary(Ops.TRUNC, lambda r, dt, a: f"(({r.ctype(dt)})({r.ctype(dtypes.int64)})({a}))")),
  Mutant("sqrt_4ulp", "transcendental", "SQRT 4 eps too large (SQRT must be correctly rounded)",
         witness(op(Ops.SQRT), arr(F32, 4.0)), rules=_off_by_ulps("sqrt")),
  Mutant("exp2_4ulp", "transcendental", "EXP2 4 eps too large", witness(op(Ops.EXP2), arr(F32, 3.0)),
         rules=_off_by_ulps("exp2")),
  Mutant("log2_4ulp", "transcendental", "LOG2 4 eps too large", witness(op(Ops.LOG2), arr(F32, 8.0)),
         rules=_off_by_ulps("log2")),
  Mutant("sin_4ulp", "transcendental", "SIN 4 eps too large", witness(op(Ops.SIN), arr(F32, 1.0)),
         rules=_off_by_ulps("sin")),
  Mutant("exp2_via_exp", "transcendental", "EXP2 as exp(x * ln2): the rounded product costs ULPs for large x",
         witness(op(Ops.EXP2), arr(F32, 100.0)), rules=_unary(Ops.EXP2, _exp2_via_exp)),
  Mutant("ftz_daz", "subnormals", "kernels run with flush-to-zero and denormals-are-zero set (x86 MXCSR)",
         witness(op(Ops.ADD), arr(F32, TINY_F32), arr(F32, 0.0)), source=_flush_subnormals,
         machines=("x86_64", "AMD64", "i686")),
  # integers
  Mutant("idiv_floors", "integer", "signed IDIV floors (Python //) instead of truncating",
         witness(op(Ops.IDIV), arr(dtypes.int32, -7), arr(dtypes.int32, 2)),
         rules={Ops.IDIV: _for(_signed, _floor_division, Ops.IDIV)}),
  Mutant("mod_sign_of_divisor", "integer", "signed MOD takes the divisor's sign (Python %), not the dividend's",
         witness(op(Ops.MOD), arr(dtypes.int32, -7), arr(dtypes.int32, 3)),
         rules={Ops.MOD: _for(_signed, _remainder_sign_of_divisor, Ops.MOD)}),
  Mutant("shl_guard_off_by_one", "integer", "SHL guard at bits - 1: x << (bits - 1) gives 0",
         witness(op(Ops.SHL), arr(dtypes.int32, 1), arr(dtypes.int32, 31)), rules={Ops.SHL: _shift_guard_short}),
  Mutant("shr_logical_signed", "integer", "SHR of signed values shifts in zeros",
         witness(op(Ops.SHR), arr(dtypes.int32, -8), arr(dtypes.int32, 1)),
         rules={Ops.SHR: _for(_signed, _logical_shr, Ops.SHR)}),
  Mutant("signed_overflow_ub", "integer", "signed + and * in the signed C type without -fwrapv (overflow is UB)",
         witness(lambda t: alu(Ops.CMPLT, t, t + 1), arr(dtypes.int32, 2 ** 31 - 1)),
         rules={Ops.ADD: _in_signed_type("+", Ops.ADD), Ops.MUL: _in_signed_type("*", Ops.MUL)},
         remove_flags=("-fwrapv",)),
  # fast-math style compiler flags
  Mutant("ffast_math", "fast-math", "-ffast-math", witness(op(Ops.MAX), arr(F32, math.nan), arr(F32, 1.0)),
         add_flags=("-ffast-math",), remove_flags=("-fno-fast-math",)),
  Mutant("ffinite_math_only", "fast-math", "-ffinite-math-only: NaN tests fold away",
         witness(op(Ops.MAX), arr(F32, math.nan), arr(F32, 1.0)), add_flags=("-ffinite-math-only",)),
  Mutant("freciprocal_math", "fast-math", "-freciprocal-math: x / c becomes x * (1 / c)",
         witness(lambda t: t / 3, np.arange(1, 65, dtype=np.float32) * np.float32(1.1)),
         add_flags=("-freciprocal-math",)),
  Mutant("fno_signed_zeros", "fast-math", "-fno-signed-zeros: x + 0.0 folds to x",
         witness(lambda t: t + 0.0, arr(F32, -0.0)), add_flags=("-fno-signed-zeros",)),
  Mutant("fassociative_math", "fast-math", "-fassociative-math -fno-signed-zeros -fno-trapping-math: reassociation",
         witness(lambda t: (t + 1) + 2, arr(F32, 2.0 ** 24)),
         add_flags=("-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math")),
  Mutant("ffp_contract_fast", "fast-math", "-ffp-contract=fast: a * b + c fused into one rounding",
         witness(lambda a, b, c: a * b + c, arr(F32, 1 + 2.0 ** -12), arr(F32, 1 + 2.0 ** -12), arr(F32, -1.0)),
         add_flags=("-ffp-contract=fast",), remove_flags=("-ffp-contract=off",)),
)


# ---- planting
def render_class(base: type, mutant: Mutant) -> type:
  """A subclass of the C-style render class (`_Render`) whose patched methods receive the original bound method as
  their second argument."""
  namespace: dict[str, Any] = {}
  for name, patch in mutant.methods.items():
    original = getattr(base, name)
    namespace[name] = lambda self, *args, _patch=patch, _original=original: _patch(self, _original.__get__(self), *args)
  if mutant.rules:
    namespace["rules"] = {**base.rules, **mutant.rules}
  return type(f"{base.__name__}_{mutant.name}", (base,), namespace)


def apply_text_edits(mutant: Mutant, source: str) -> str:
  """The mutant's prelude edits, then its source rewrite, of one rendered program."""
  for old, new in mutant.prelude:
    source = source.replace(old, new, 1)
  return mutant.source(source) if mutant.source else source


class MutantRenderer(CStyleRenderer):
  """The C-style renderer (any dialect: C, OpenCL C) with one mutant's edits: replaced rules and methods, then the
  text rewrites."""

  def __init__(self, dialect: CDialect, mutant: Mutant):
    super().__init__(dialect)
    self.mutant = mutant
    self.render_class = render_class(_Render, mutant)

  def render(self, program: Any) -> str:
    return apply_text_edits(self.mutant, self.render_class(self.d, program).source())


C_PRELUDE = PRELUDE + DOUBLE_PRELUDE + WIDE_INT_PRELUDE


def clang_flags(mutant: Mutant | None = None) -> tuple[str, ...]:
  """The registered CLANG device's compiler flags, with the mutant's removed and added."""
  flags = Device["CLANG"].compiler.flags
  return flags if mutant is None else planted_flags(flags, mutant)


def make_device(mutant: Mutant) -> DeviceImpl:
  """The registered CLANG device's parts with the mutant planted: its renderer's dialect with the mutant's edits, its
  compiler with the mutant's flags (`with_flags`), its allocator and runtime."""
  base = Device["CLANG"]
  flags = clang_flags(mutant)
  compiler = base.compiler if flags == base.compiler.flags else base.compiler.with_flags(flags)
  return DeviceImpl(mutant.device, base.allocator, renderer=MutantRenderer(base.renderer.d, mutant),
                    compiler=compiler, runtime=base.runtime, standalone=base.standalone)


def probe() -> str | None:
  return device_probe("CLANG")


def _renderers(mutant: Mutant) -> tuple[Any, Any]:
  """CLANG's dialect (its capabilities choose the opts) where CLANG is installed; the C text is the same without."""
  dialect = Device["CLANG"].renderer.d if probe() is None else CDialect()
  return CStyleRenderer(dialect), MutantRenderer(dialect, mutant)


BACKEND = Backend("CLANG", probe, clang_flags, lambda: C_PRELUDE, _renderers, make_device)
