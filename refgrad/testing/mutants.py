"""Realistic bugs, planted one at a time in a copy of the CLANG backend, to measure the oracle kit (`refgrad selftest`).

A conformance suite that passes proves little until it is seen failing on wrong backends. Each `Mutant` below is one
mistake that real backends ship (fast-math shortcuts, conversions with the wrong rounding mode, "compute in float and
round at the store", a dropped lane of a vectorized reduction, ...) and that docs/SPEC.md forbids: none of them only
changes what the spec leaves UNDEFINED or free (shift amounts >= the width, the sign of a zero sum, reduction order).

A mutant is planted in one or both of two places:
- the C source: an exact edit of the shared prelude (cstyle_prelude.py), a rewrite of every rendered translation
  unit, a replaced `BINARY_RULES` entry, or a replaced method of the renderer's `_Render`;
- the compiler flags of CLANG (`refgrad_clang.FLAGS`): flags added or removed.

A mutant that does not apply is a silent no-op that would count as an escape (or, worse, prove nothing while caught
by accident), so planting is checked (`check_planted`, run before a mutant device is made): every prelude edit must
find its text exactly once, every removed flag must be there and every added one absent, and the mutant must change
the rendered source of its `witness`, a small program that the bug gets wrong. The witness also proves the mutant is
live: the mutant device computes it differently from the reference, bit for bit (`witness_deviation`, which does not
use the kit being measured; tests/test_selftest.py runs every one).

Each mutant is the device `CLANG~<NAME>`, registered by this module's `refgrad_devices` hook: register the module
(`refgrad.plugins.register`), or load a plugin file that imports the hook (`from refgrad.testing.mutants import
refgrad_devices`; selftest writes one for its fuzz workers). Its compiler's cache key names the mutant and its flags,
so the compile cache never hands a mutant's binary to the real CLANG or back.
"""
from __future__ import annotations

import functools
import math
import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from refgrad.codegen.cstyle import BINARY_RULES, CDialect, CStyleRenderer, _Render, c_literal
from refgrad.codegen.cstyle_prelude import DOUBLE_PRELUDE, PRELUDE, WIDE_INT_PRELUDE
from refgrad.device import DeviceImpl, DeviceSpec, numbered_source
from refgrad.dtype import DType, dtypes
from refgrad.hookspecs import hookimpl
from refgrad.uop import Ops, UOp

BASE_DEVICE = "CLANG"
Program = tuple[Callable[..., Any], list[np.ndarray]]  # fn(*tensors) and its inputs, for check_against_reference
Witness = Callable[[], Program]
BinaryRule = Callable[[_Render, DType, str, str], str]
MethodPatch = Callable[..., str]  # (render, the original bound method, *the method's arguments) -> C expression
LANES = CDialect().reduce_lanes  # accumulators of a split reduction


class MutantNotPlanted(RuntimeError):
  """A mutant's edit found nothing to change: running it would measure nothing."""


@dataclass(frozen=True, eq=False)
class Mutant:
  """One planted bug. `witness` builds a small program that the bug gets wrong (it proves the mutant live)."""
  name: str
  bug_class: str     # the family of mistake: comparison, NaN, signed zero, rounding, reduction, fast-math, ...
  description: str
  witness: Witness
  prelude: tuple[tuple[str, str], ...] = ()        # exact (old, new) edits of the C prelude; old occurs once
  source: Callable[[str], str] | None = None        # a rewrite of each rendered translation unit
  binary: dict[Ops, BinaryRule] = field(default_factory=dict)   # replaced BINARY_RULES entries
  methods: dict[str, MethodPatch] = field(default_factory=dict)  # replaced _Render methods
  add_flags: tuple[str, ...] = ()
  remove_flags: tuple[str, ...] = ()
  machines: tuple[str, ...] = ()  # platform.machine() values it can run on (empty: any)

  @property
  def in_source(self) -> bool:
    return bool(self.prelude or self.source or self.binary or self.methods)

  @property
  def kind(self) -> str:
    """Where the bug is planted: 'source', 'flags' or 'source+flags'."""
    return "+".join(k for k, planted in (("source", self.in_source), ("flags", self.add_flags or self.remove_flags))
                    if planted)

  @property
  def device(self) -> str:
    return f"{BASE_DEVICE}~{self.name.upper()}"

  @property
  def sets_process_fp_mode(self) -> bool:
    """clang links crtfastmath.o into a -ffast-math shared library: loading it turns on flush-to-zero for the
    whole process, the reference's numpy included. Run such a mutant only in a process of its own."""
    return "-ffast-math" in self.add_flags


# ---- witnesses: tiny programs built from primitive UOps, below the Tensor API (as refgrad check builds its cases)
def _arr(dtype: DType, *values: Any) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.array(values, dtype=np.float64 if dtype.kind == "f" else object).astype(dtype.np)


def _alu(op: Ops, *ts: Any) -> Any:
  return ts[0]._from(ts[0].uop.alu(op, *(t.uop for t in ts[1:])))


def _op(op: Ops) -> Callable[..., Any]:
  return lambda *ts: _alu(op, *ts)


def _cast(dst: DType) -> Callable[[Any], Any]:
  return lambda t: t._from(UOp(Ops.CAST, dst, (t.uop,)))


def _reduce(op: Ops) -> Callable[[Any], Any]:
  """A reduction over the last axis."""
  return lambda t: t._from(UOp(Ops.REDUCE_AXIS, t.dtype, (t.uop,), (op, (t.ndim - 1,))))


def _twice(op: Ops) -> Callable[[Any, Any], Any]:
  """(a op b) op b in one fused kernel: a chain whose intermediate result must be rounded to the dtype."""
  return lambda a, b: _alu(op, _alu(op, a, b), b)


def _witness(fn: Callable[..., Any], *inputs: np.ndarray) -> Witness:
  return lambda: (fn, list(inputs))


F32, F64, F16, BF16 = dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16
TINY_F32 = float(ml_dtypes.finfo(np.float32).smallest_subnormal)


# ---- planting helpers
def _regex(pattern: str, replacement: str | Callable[[re.Match], str]) -> Callable[[str], str]:
  compiled = re.compile(pattern, re.M)
  return lambda source: compiled.sub(replacement, source)


def _compute_type(dt: DType) -> DType:
  """The C type a float dtype is computed in: half and bfloat16 are emulated in float."""
  return F64 if dt == F64 else F32


def _unary(op: Ops, expr: Callable[[_Render, DType, str], str]) -> dict[str, MethodPatch]:
  """Replace how one float unary op is written (the result is still rounded to half/bfloat16)."""
  def unary(r: _Render, original: Callable[..., str], uop: Ops, dt: DType, a: str) -> str:
    return r.round16(expr(r, dt, a), dt) if uop is op and dtypes.is_float(dt) else original(uop, dt, a)
  return {"unary": unary}


def _off_by_ulps(fn: str) -> dict[str, MethodPatch]:
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
  def cast(r: _Render, original: Callable[..., str], a: str, src: DType, dst: DType) -> str:
    return expr(r, a, src, dst) if applies(src, dst) else original(a, src, dst)
  return {"cast": cast}


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
  return lambda r, dt, a, b: rule(r, dt, a, b) if kinds(dt) else BINARY_RULES[op](r, dt, a, b)


def _signed(dt: DType) -> bool:
  return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)


def _floor_division(r: _Render, dt: DType, a: str, b: str) -> str:
  """C's truncating quotient, then one less when the signs differ and the division is inexact: Python's //."""
  truncated = BINARY_RULES[Ops.IDIV](r, dt, a, b)
  inexact = f"({b} != 0 && {b} != -1 && ({a} % {b}) != 0 && (({a} < 0) != ({b} < 0)))"
  return f"({r.ctype(dt)})({truncated} - {inexact})"


def _remainder_sign_of_divisor(r: _Render, dt: DType, a: str, b: str) -> str:
  """Python's %: the remainder takes the divisor's sign."""
  rem = BINARY_RULES[Ops.MOD](r, dt, a, b)
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
MUTANTS: tuple[Mutant, ...] = (
  # comparisons, NaN and signed zeros
  Mutant("cmplt_le", "comparison", "CMPLT rendered as <=",
         _witness(_op(Ops.CMPLT), _arr(F32, 1.0), _arr(F32, 1.0)),
         binary={Ops.CMPLT: lambda r, dt, a, b: f"({r.ctype(dtypes.bool)})({a} <= {b})"}),
  Mutant("cmpne_ordered", "NaN", "CMPNE as (a < b || a > b): False for NaN operands",
         _witness(_op(Ops.CMPNE), _arr(F32, math.nan), _arr(F32, 1.0)),
         binary={Ops.CMPNE: lambda r, dt, a, b: f"({r.ctype(dtypes.bool)})({a} < {b} || {a} > {b})"}),
  Mutant("max_drops_nan", "NaN", "float MAX like C fmax: a NaN operand is dropped",
         _witness(_op(Ops.MAX), _arr(F32, 1.0), _arr(F32, math.nan)),
         prelude=(("  float m = a == b ? tie : larger;\n  return (a != a || b != b) ? a + b : m;",
                   "  float m = a == b ? tie : larger;\n  return a != a ? b : b != b ? a : m;"),)),
  Mutant("max_zero_order", "signed zero", "float MAX of equal operands returns the second: max(+0.0, -0.0) = -0.0",
         _witness(_op(Ops.MAX), _arr(F32, 0.0), _arr(F32, -0.0)),
         prelude=(("  float tie = (rg_f32_bits(a) >> 31) ? b : a;", "  float tie = b;"),)),
  Mutant("neg_as_sub", "signed zero", "float NEG as 0 - x: -(+0.0) gives +0.0",
         _witness(_op(Ops.NEG), _arr(F32, 0.0)),
         methods=_unary(Ops.NEG, lambda r, dt, a: f"({c_literal(0.0, _compute_type(dt), r.d)} - {a})")),
  Mutant("bool_store_mask", "storage", "bools stored as compare masks (255 for True)",
         _witness(_op(Ops.CMPLT), _arr(F32, 1.0), _arr(F32, 2.0)), methods={"to_storage": _mask_bool}),
  # conversions: rounding, saturation, double rounding
  Mutant("f16_ties_away", "conversion rounding", "float -> half rounds ties away from zero (normal range)",
         _witness(_cast(F16), _arr(F32, 1 + 2.0 ** -11)),
         prelude=(("((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13)", "((ax + 0xc8001000u) >> 13)"),)),
  Mutant("f16_subnormal_ties_away", "conversion rounding", "float -> half rounds ties away in the subnormal range",
         _witness(_cast(F16), _arr(F32, 2.0 ** -25, 5 * 2.0 ** -25)),
         prelude=(("if (rem > halfway || (rem == halfway && (q & 1u))) q++;", "if (rem >= halfway) q++;"),)),
  Mutant("f16_subnormal_flush", "conversion rounding", "float -> half flushes subnormal results to zero",
         _witness(_cast(F16), _arr(F32, 2.0 ** -20)),
         prelude=(("if (e < 102u) return (ushort_t)sign;", "if (e < 113u) return (ushort_t)sign;"),)),
  Mutant("f16_overflow_saturates", "conversion rounding", "float -> half overflow gives +-65504 instead of +-inf",
         _witness(_cast(F16), _arr(F32, 1e5)),
         prelude=(("if (ax >= 0x477ff000u) return (ushort_t)(sign | 0x7c00u);",
                   "if (ax >= 0x477ff000u) return (ushort_t)(sign | 0x7bffu);"),)),
  Mutant("bf16_truncates", "conversion rounding", "float -> bfloat16 truncates",
         _witness(_cast(BF16), _arr(F32, 1 + 0.75 * 2.0 ** -7)),
         prelude=(("return (ushort_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);", "return (ushort_t)(x >> 16);"),)),
  Mutant("bf16_ties_away", "conversion rounding", "float -> bfloat16 rounds ties away from zero",
         _witness(_cast(BF16), _arr(F32, 1 + 2.0 ** -8)),
         prelude=(("return (ushort_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);",
                   "return (ushort_t)((x + 0x8000u) >> 16);"),)),
  Mutant("f64_narrowing_double_rounds", "conversion rounding",
         "float64 -> half/bfloat16 through a plain float (round to nearest twice, not to odd first)",
         _witness(_cast(BF16), _arr(F64, 1 + 2.0 ** -8 + 2.0 ** -30)),
         prelude=(("  float f = (float)d;\n  if ((double)f == d || d != d) return f;",
                   "  float f = (float)d;\n  return f;"),)),
  Mutant("wide_int_sticky_dropped", "conversion rounding",
         "int64 -> half/bfloat16 truncates the low bits without a sticky bit (false ties)",
         _witness(_cast(BF16), _arr(dtypes.int64, 2 ** 62 + 2 ** 54 + 1)),
         prelude=(("  if (shift != 0u && (u & ((1ull << shift) - 1ull)) != 0ull) v |= 1ull;\n", ""),)),
  Mutant("narrowing_saturates", "conversion", "narrowing integer casts saturate instead of keeping the low bits",
         _witness(_cast(dtypes.int8), _arr(dtypes.int32, 300, -300)), methods=_cast_patch(_narrowing, _saturate)),
  Mutant("float_to_int_rounds", "conversion", "float -> int casts round to nearest instead of truncating",
         _witness(_cast(dtypes.int32), _arr(F32, 2.5, -0.7)),
         methods=_cast_patch(_float_to_int, _rounded)),
  Mutant("unsigned_to_float_signed", "conversion", "uint32/uint64 -> float converts through the signed type",
         _witness(_cast(F32), _arr(dtypes.uint32, 2 ** 32 - 1)),
         methods=_cast_patch(_wide_unsigned_to_float,
                             lambda r, a, src, dst: f"({r.ctype(dst)})(({r.ctype(_signed_of(src))}){a})")),
  # half and bfloat16 arithmetic
  Mutant("f16_unrounded_chain", "low-precision chain", "half ops computed in float, rounded only at the store",
         _witness(_twice(Ops.ADD), _arr(F16, 1.0), _arr(F16, 2.0 ** -11)),
         prelude=(("RG_FN float rg_round_f16(float f) { return rg_f16_to_f32(rg_f32_to_f16(f)); }",
                   "RG_FN float rg_round_f16(float f) { return f; }"),)),
  Mutant("bf16_unrounded_chain", "low-precision chain", "bfloat16 ops computed in float, rounded only at the store",
         _witness(_twice(Ops.ADD), _arr(BF16, 1.0), _arr(BF16, 2.0 ** -8)),
         prelude=(("RG_FN float rg_round_bf16(float f) { return rg_bf16_to_f32(rg_f32_to_bf16(f)); }",
                   "RG_FN float rg_round_bf16(float f) { return f; }"),)),
  # reductions: split accumulators and identities
  Mutant("split_combine_drops_lane", "reduction", f"a split reduction's final combine leaves out lane {LANES - 1}",
         _witness(_reduce(Ops.ADD), np.ones((2, 64), np.int32)),
         source=_regex(rf"^[ ]*(acc\d+) = [^\n]*\b\1_{LANES - 1}\b[^\n]*\n", "")),
  Mutant("split_remainder_short", "reduction", "a split reduction's remainder loop skips its last iteration",
         _witness(_reduce(Ops.ADD), np.ones((2, 19), np.int32)),
         source=_regex(r"\b(ridx\d+_rest < )(\d+);", lambda m: f"{m[1]}{int(m[2]) - 1};")),
  Mutant("max_identity_finite", "reduction identity", "float MAX reductions start from -FLT_MAX/-DBL_MAX, not -inf",
         _witness(_reduce(Ops.MAX), _arr(F32, -math.inf, -math.inf)),
         source=_regex(r"\b(acc\d+(?:_\d+)? = )\(-\((float|double)\)INFINITY\)",
                       lambda m: m[1] + ("-0x1.fffffffffffffp+1023" if m[2] == "double" else "-0x1.fffffep+127f"))),
  Mutant("int_max_identity_zero", "reduction identity", "signed integer MAX reductions start from 0, not MIN",
         _witness(_reduce(Ops.MAX), _arr(dtypes.int32, -5, -3)),
         source=_regex(r"\b(acc\d+(?:_\d+)? = )\((int(?:8|16|32|64)_t)\)\(-\d+(?:LL)? - 1\)", r"\1(\2)0")),
  # float arithmetic and transcendentals
  Mutant("fdiv_reciprocal", "float arithmetic", "FDIV as a * (1 / b): two roundings",
         _witness(_op(Ops.FDIV), _arr(F32, 3.0), _arr(F32, 7.0)),
         binary={Ops.FDIV: lambda r, dt, a, b: r.round16(f"({a} * ({c_literal(1.0, _compute_type(dt), r.d)} / {b}))",
                                                         dt)}),
  Mutant("fmod_naive", "float arithmetic", "float MOD as a - trunc(a / b) * b",
         _witness(_op(Ops.MOD), _arr(F32, -3.0), _arr(F32, math.inf)),
         binary={Ops.MOD: _for(dtypes.is_float, _naive_fmod, Ops.MOD)}),
  Mutant("trunc_via_int64", "float arithmetic", "TRUNC through an int64 cast: loses -0.0, inf, NaN and large values",
         _witness(_op(Ops.TRUNC), _arr(F32, -0.5, 1e30)),
         methods=_unary(Ops.TRUNC, lambda r, dt, a: f"(({r.ctype(dt)})({r.ctype(dtypes.int64)})({a}))")),
  Mutant("sqrt_4ulp", "transcendental", "SQRT 4 eps too large (SQRT must be correctly rounded)",
         _witness(_op(Ops.SQRT), _arr(F32, 4.0)), methods=_off_by_ulps("sqrt")),
  Mutant("exp2_4ulp", "transcendental", "EXP2 4 eps too large", _witness(_op(Ops.EXP2), _arr(F32, 3.0)),
         methods=_off_by_ulps("exp2")),
  Mutant("log2_4ulp", "transcendental", "LOG2 4 eps too large", _witness(_op(Ops.LOG2), _arr(F32, 8.0)),
         methods=_off_by_ulps("log2")),
  Mutant("sin_4ulp", "transcendental", "SIN 4 eps too large", _witness(_op(Ops.SIN), _arr(F32, 1.0)),
         methods=_off_by_ulps("sin")),
  Mutant("exp2_via_exp", "transcendental", "EXP2 as exp(x * ln2): the rounded product costs ULPs for large x",
         _witness(_op(Ops.EXP2), _arr(F32, 100.0)), methods=_unary(Ops.EXP2, _exp2_via_exp)),
  Mutant("ftz_daz", "subnormals", "kernels run with flush-to-zero and denormals-are-zero set (x86 MXCSR)",
         _witness(_op(Ops.ADD), _arr(F32, TINY_F32), _arr(F32, 0.0)), source=_flush_subnormals,
         machines=("x86_64", "AMD64", "i686")),
  # integers
  Mutant("idiv_floors", "integer", "signed IDIV floors (Python //) instead of truncating",
         _witness(_op(Ops.IDIV), _arr(dtypes.int32, -7), _arr(dtypes.int32, 2)),
         binary={Ops.IDIV: _for(_signed, _floor_division, Ops.IDIV)}),
  Mutant("mod_sign_of_divisor", "integer", "signed MOD takes the divisor's sign (Python %), not the dividend's",
         _witness(_op(Ops.MOD), _arr(dtypes.int32, -7), _arr(dtypes.int32, 3)),
         binary={Ops.MOD: _for(_signed, _remainder_sign_of_divisor, Ops.MOD)}),
  Mutant("shl_guard_off_by_one", "integer", "SHL guard at bits - 1: x << (bits - 1) gives 0",
         _witness(_op(Ops.SHL), _arr(dtypes.int32, 1), _arr(dtypes.int32, 31)), binary={Ops.SHL: _shift_guard_short}),
  Mutant("shr_logical_signed", "integer", "SHR of signed values shifts in zeros",
         _witness(_op(Ops.SHR), _arr(dtypes.int32, -8), _arr(dtypes.int32, 1)),
         binary={Ops.SHR: _for(_signed, _logical_shr, Ops.SHR)}),
  Mutant("signed_overflow_ub", "integer", "signed + and * in the signed C type without -fwrapv (overflow is UB)",
         _witness(lambda t: _alu(Ops.CMPLT, t, t + 1), _arr(dtypes.int32, 2 ** 31 - 1)),
         binary={Ops.ADD: _in_signed_type("+", Ops.ADD), Ops.MUL: _in_signed_type("*", Ops.MUL)},
         remove_flags=("-fwrapv",)),
  # fast-math style compiler flags
  Mutant("ffast_math", "fast-math", "-ffast-math", _witness(_op(Ops.MAX), _arr(F32, math.nan), _arr(F32, 1.0)),
         add_flags=("-ffast-math",), remove_flags=("-fno-fast-math",)),
  Mutant("ffinite_math_only", "fast-math", "-ffinite-math-only: NaN tests fold away",
         _witness(_op(Ops.MAX), _arr(F32, math.nan), _arr(F32, 1.0)), add_flags=("-ffinite-math-only",)),
  Mutant("freciprocal_math", "fast-math", "-freciprocal-math: x / c becomes x * (1 / c)",
         _witness(lambda t: t / 3, np.arange(1, 65, dtype=np.float32) * np.float32(1.1)),
         add_flags=("-freciprocal-math",)),
  Mutant("fno_signed_zeros", "fast-math", "-fno-signed-zeros: x + 0.0 folds to x",
         _witness(lambda t: t + 0.0, _arr(F32, -0.0)), add_flags=("-fno-signed-zeros",)),
  Mutant("fassociative_math", "fast-math", "-fassociative-math -fno-signed-zeros -fno-trapping-math: reassociation",
         _witness(lambda t: (t + 1) + 2, _arr(F32, 2.0 ** 24)),
         add_flags=("-fassociative-math", "-fno-signed-zeros", "-fno-trapping-math")),
  Mutant("ffp_contract_fast", "fast-math", "-ffp-contract=fast: a * b + c fused into one rounding",
         _witness(lambda a, b, c: a * b + c, _arr(F32, 1 + 2.0 ** -12), _arr(F32, 1 + 2.0 ** -12), _arr(F32, -1.0)),
         add_flags=("-ffp-contract=fast",), remove_flags=("-ffp-contract=off",)),
)
BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}


def select(names: list[str] | None) -> list[Mutant]:
  """The mutants named (all of them for None), in table order; unknown names raise ValueError listing the known."""
  if not names:
    return list(MUTANTS)
  unknown = [n for n in names if n not in BY_NAME]
  if unknown:
    raise ValueError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
  return [m for m in MUTANTS if m.name in names]


def table_text(mutants: list[Mutant] | None = None) -> str:
  """What `refgrad selftest --list` prints: one line per mutant."""
  rows = [(m.name, m.kind, m.bug_class, m.description) for m in (mutants or MUTANTS)]
  width = max(len(r[0]) for r in rows)
  lines = [f"{'mutant':{width}s}  {'kind':12s}  {'class':20s}  description"]
  lines += [f"{name:{width}s}  {kind:12s}  {bug:20s}  {text}" for name, kind, bug, text in rows]
  return "\n".join(lines + [f"{len(rows)} mutants"])


# ---- planting
class MutantRenderer(CStyleRenderer):
  """The C-style renderer with one mutant's edits: replaced rules and methods, then the text rewrites."""

  def __init__(self, dialect: CDialect, mutant: Mutant):
    super().__init__(dialect)
    self.mutant = mutant
    self.render_class = _render_class(mutant)

  def render(self, program: Any) -> str:
    source = self.render_class(self.d, program).source()
    for old, new in self.mutant.prelude:
      source = source.replace(old, new, 1)
    return self.mutant.source(source) if self.mutant.source else source


def _render_class(mutant: Mutant) -> type[_Render]:
  """A `_Render` subclass whose patched methods receive the original bound method as their second argument."""
  namespace: dict[str, Any] = {}
  for name, patch in mutant.methods.items():
    original = getattr(_Render, name)
    namespace[name] = lambda self, *args, _patch=patch, _original=original: _patch(self, _original.__get__(self), *args)
  if mutant.binary:
    rules = {**BINARY_RULES, **mutant.binary}
    namespace["binary"] = lambda self, op, dt, a, b: rules[op](self, dt, a, b)
  return type(f"_Render_{mutant.name}", (_Render,), namespace)


def clang_flags(mutant: Mutant | None = None) -> tuple[str, ...]:
  """CLANG's compiler flags, with the mutant's removed and added (added last, so they win over earlier ones)."""
  from refgrad_clang import FLAGS
  if mutant is None:
    return FLAGS
  return tuple(f for f in FLAGS if f not in mutant.remove_flags) + mutant.add_flags


def rendered_witness(mutant: Mutant) -> list[tuple[str, str]]:
  """(real source, mutant source) of each kernel of the mutant's witness, rendered for CLANG (nothing compiled)."""
  from refgrad.codegen.linearize import compile_ast
  from refgrad.schedule import create_schedule
  from refgrad.tensor import Tensor
  fn, inputs = mutant.witness()
  outputs = fn(*(Tensor(x, device="PYTHON") for x in inputs))
  items, _ = create_schedule([outputs.uop])
  dialect = CDialect()
  programs = [compile_ast(item.ast, dialect.caps) for item in items if not item.is_transfer]
  real, mutated = CStyleRenderer(dialect), MutantRenderer(dialect, mutant)
  return [(real.render(p), mutated.render(p)) for p in programs]


def run_witness(mutant: Mutant, device: str) -> np.ndarray:
  """The mutant's witness program computed on `device`."""
  from refgrad.tensor import Tensor
  fn, inputs = mutant.witness()
  return np.asarray(fn(*(Tensor(x, device=device) for x in inputs)).numpy())


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
  """Bit-exact equality as docs/SPEC.md means it: any two NaNs are equal, -0.0 and +0.0 are not."""
  if a.dtype != b.dtype or a.shape != b.shape:
    return False
  nan = np.zeros(a.shape, bool)
  if a.dtype.kind == "f" or a.dtype == BF16.np:
    with np.errstate(invalid="ignore"):
      nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
  bits = f"u{a.dtype.itemsize}"
  return bool(np.all((a.view(bits) == b.view(bits)) | nan))


def witness_deviation(mutant: Mutant) -> str | None:
  """How the mutant computes its witness differently from the reference (PYTHON), compared bit for bit and
  independently of the kit under measurement; None if it does not (the mutant would be inert)."""
  expected, actual = run_witness(mutant, "PYTHON"), run_witness(mutant, mutant.device)
  return None if same_bits(actual, expected) else f"{mutant.device} gives {actual!r}, the reference {expected!r}"


@functools.cache
def check_planted(mutant: Mutant) -> None:
  """Raise MutantNotPlanted unless every edit of `mutant` applies (once per process: the table is constant)."""
  everything = PRELUDE + DOUBLE_PRELUDE + WIDE_INT_PRELUDE
  for old, new in mutant.prelude:
    if everything.count(old) != 1 or old == new:
      raise MutantNotPlanted(f"{mutant.name}: the prelude text to replace occurs {everything.count(old)} times, "
                             f"not once (cstyle_prelude.py changed?): {old!r}")
  if mutant.add_flags or mutant.remove_flags:
    real = clang_flags()
    missing = [f for f in mutant.remove_flags if f not in real] + [f for f in mutant.add_flags if f in real]
    if missing:
      raise MutantNotPlanted(f"{mutant.name}: CLANG's flags {' '.join(real)} already decide {' '.join(missing)}")
  if mutant.in_source and all(real == mutated for real, mutated in rendered_witness(mutant)):
    raise MutantNotPlanted(f"{mutant.name}: the mutant renders its witness exactly as CLANG does (pattern not found)")


class MutantCompiler:
  """CLANG's compiler with the mutant's flags. Its cache key names the mutant: no binary is shared with CLANG."""

  def __init__(self, base: Any, mutant: Mutant):
    self.path, self.flags = base.path, clang_flags(mutant)
    self.cache_key = f"{base.cache_key}|mutant {mutant.name}|{' '.join(self.flags)}"

  def compile(self, source: str) -> bytes:
    import refgrad_clang as clang
    with tempfile.TemporaryDirectory(prefix="refgrad-mutant-") as tmp:
      out = os.path.join(tmp, "kernel.so")
      result = subprocess.run([self.path, *self.flags, "-", "-o", out, *clang.LIBRARIES], input=source,
                              capture_output=True, text=True)
      if result.returncode != 0:
        raise clang.CompileError(f"{os.path.basename(self.path)} failed to compile this mutant program:\n"
                                 f"{numbered_source(source)}\n\ncompiler stderr:\n{result.stderr.strip()}")
      return Path(out).read_bytes()


def make_device(mutant: Mutant) -> DeviceImpl:
  """A copy of the CLANG device with the mutant planted (checked first: see check_planted)."""
  import refgrad_clang as clang
  check_planted(mutant)
  base = clang.make_device()
  return DeviceImpl(mutant.device, base.allocator, renderer=MutantRenderer(base.renderer.d, mutant),
                    compiler=MutantCompiler(base.compiler, mutant), runtime=base.runtime)


def probe(mutant: Mutant) -> str | None:
  """None if the mutant can run here, else why not."""
  if mutant.machines and platform.machine() not in mutant.machines:
    return f"mutant {mutant.name} needs a {' or '.join(mutant.machines)} machine, this is {platform.machine()}"
  try:
    import refgrad_clang as clang
  except ImportError as e:
    return f"the CLANG backend the mutants are planted in is not installed ({e})"
  return clang.probe()


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(m.device, functools.partial(make_device, m), plugin="refgrad.testing.mutants",
                     probe=functools.partial(probe, m)) for m in MUTANTS]
