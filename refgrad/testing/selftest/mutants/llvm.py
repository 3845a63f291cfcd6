"""The LLVM family: bugs of an LLVM IR backend, planted in a copy of LLVM as a wrong instruction flag, predicate,
conversion or constant in the IR text (render.py prints what it should; these print what a careless renderer would),
or as an LLVM function attribute that turns on unsafe floating-point codegen.

Every flag below lets LLVM assume something (no signed or unsigned wrap, no NaN, free reassociation or
contraction) that the spec's wrapping integers and IEEE floats do not promise, so the optimizer's folds change
results; each witness is a program LLVM folds that way.
"""
from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np

from refgrad.codegen.contract import Program
from refgrad.device import DeviceImpl
from refgrad.dtype import dtypes
from refgrad.registry import Device
from refgrad.testing.selftest.mutants.base import (
  F32,
  F64,
  Backend,
  Mutant,
  alu,
  arr,
  cast,
  device_probe,
  op,
  regex,
  witness,
)
from refgrad.testing.selftest.mutants.clang import apply_text_edits
from refgrad.uop import Ops

BASE = "LLVM"


def _flag(instruction: str, flags: str) -> Any:
  """Every `instruction <type>` (an integer or float instruction of the kernel) printed with `flags`."""
  return regex(rf"= {instruction} (?=i\d+ |float |double )", f"= {instruction} {flags} ")


def _all_float_ops(flags: str) -> Any:
  """Every float arithmetic instruction printed with `flags`: a renderer that sets fast-math flags globally."""
  return regex(r"= (fadd|fsub|fmul|fdiv|frem) (?=float |double )", rf"= \1 {flags} ")


def _via_double(match: re.Match) -> str:
  """int64 -> float32 as sitofp to double, then fptrunc: two roundings where sitofp to float does one."""
  indent, name, value = match[1], match[2], match[3]
  return f"{indent}{name}.d = sitofp i64 {value} to double\n{indent}{name} = fptrunc double {name}.d to float"


def _flush_exp2(match: re.Match) -> str:
  """exp2's result replaced by +0.0 below the smallest normal (a flush-to-zero exp2, like some vector libraries)."""
  indent, name, ty, suffix, arg = match[1], match[2], match[3], match[4], match[5]
  smallest_normal = "0x3810000000000000" if ty == "float" else "0x0010000000000000"
  return (f"{indent}{name}.raw = call {ty} @llvm.exp2.{suffix}({ty} {arg})\n"
          f"{indent}{name}.tiny = fcmp olt {ty} {name}.raw, {smallest_normal}\n"
          f"{indent}{name} = select i1 {name}.tiny, {ty} 0.0, {ty} {name}.raw")


def _float32_precision(match: re.Match) -> str:
  """A double constant printed through float32 (a renderer that formats every constant as a C float)."""
  value = struct.unpack("<d", bytes.fromhex(match[1])[::-1])[0]
  with np.errstate(over="ignore"):
    rounded = float(np.float32(value))
  return f"0x{struct.unpack('<Q', struct.pack('<d', rounded))[0]:016X}"


UNSAFE_FP_ATTRIBUTES = ('"unsafe-fp-math"="true" "no-nans-fp-math"="true" "no-infs-fp-math"="true" '
                        '"no-signed-zeros-fp-math"="true"')
# a 16-long dot product whose lane 0 computes -1 * 1 + x * x: x * x rounds down (a tie to even) unless fused
X = 1 + 2.0 ** -12
DOT = tuple(np.array([[first] + [0.0] * 7 + [X] + [0.0] * 7], np.float32) for first in (-1.0, 1.0))
WIDE = 2 ** 53 + 2 ** 29 + 1  # just above a float32 tie: through double it rounds to the tie, then to even


LLVM_MUTANTS: tuple[Mutant, ...] = (
  Mutant("llvm_mul_nsw", "integer", "integer mul printed as `mul nsw`: signed wrap becomes poison, (x*2)/2 folds to x",
         witness(lambda t: (t * 2) // 2, arr(dtypes.int32, 2 ** 30)),
         base=BASE, source=_flag("mul", "nsw")),
  Mutant("llvm_mul_nuw", "integer", "integer mul printed as `mul nuw`: (uint8 200 * 2) // 2 folds to 200, not 72",
         witness(lambda t: (t * 2) // 2, arr(dtypes.uint8, 200)),
         base=BASE, source=_flag("mul", "nuw")),
  Mutant("llvm_add_nsw", "integer", "integer add printed as `add nsw`: x < x + 1 folds to true at INT_MAX",
         witness(lambda t: alu(Ops.CMPLT, t, t + 1), arr(dtypes.int32, 2 ** 31 - 1)),
         base=BASE, source=_flag("add", "nsw")),
  Mutant("llvm_fcmp_ult", "NaN", "CMPLT as `fcmp ult`: true when an operand is NaN",
         witness(op(Ops.CMPLT), arr(F32, float("nan")), arr(F32, 1.0)),
         base=BASE, source=regex(r"= fcmp olt ", "= fcmp ult ")),
  Mutant("llvm_fcmp_one", "NaN", "CMPNE as `fcmp one`: false when an operand is NaN",
         witness(op(Ops.CMPNE), arr(F32, float("nan")), arr(F32, 1.0)),
         base=BASE, source=regex(r"= fcmp une ", "= fcmp one ")),
  Mutant("llvm_fcmp_nnan", "NaN", "float compares printed with `nnan ninf`: x != x folds to false",
         witness(lambda t: alu(Ops.CMPNE, t, t), arr(F32, float("nan"))),
         base=BASE, source=regex(r"= fcmp (?=\w+ (float|double) )", "= fcmp nnan ninf ")),
  Mutant("llvm_fast_flags", "fast-math", "float arithmetic printed with `fast`: (x + 1) + 2 reassociates to x + 3",
         witness(lambda t: (t + 1) + 2, arr(F32, 2.0 ** 24)), base=BASE, source=_all_float_ops("fast")),
  Mutant("llvm_contract", "fast-math", "float arithmetic printed with `contract`: a * b + c fused into one rounding",
         witness(lambda a, b, c: a * b + c, arr(F32, 1 + 2.0 ** -12), arr(F32, 1 + 2.0 ** -12), arr(F32, -1.0)),
         base=BASE, source=_all_float_ops("contract")),
  Mutant("llvm_reduce_contract", "fast-math", "`contract` on the float ops of a split reduction's body: a dot "
         "product's a * b + acc fused into one rounding", witness(lambda a, b: (a * b).sum(1), *DOT), base=BASE,
         source=regex(r"^(  %v\d+\.(?:l\d+|rest)\.\d+) = (fadd|fmul) (?=float |double )", r"\1 = \2 contract ")),
  Mutant("llvm_arcp", "fast-math", "fdiv printed with `arcp`: x / 3 becomes x * (1 / 3)",
         witness(lambda t: t / 3, np.arange(1, 65, dtype=np.float32) * np.float32(1.1)),
         base=BASE, source=_flag("fdiv", "arcp")),
  Mutant("llvm_unsafe_fp_attributes", "fast-math", "the kernel's function attributes turn on unsafe-fp-math, "
         "no-nans, no-infs and no-signed-zeros codegen (the TargetOptions of a -ffast-math build)",
         witness(op(Ops.MAX), arr(F32, float("nan"), 1.0, 0.0), arr(F32, 1.0, float("nan"), -0.0)),
         base=BASE, source=regex(r"^(define void @\w+\([^)]*\)) nounwind \{",
                                 rf"\1 nounwind {UNSAFE_FP_ATTRIBUTES} {{")),
  Mutant("llvm_i64_to_f32_via_double", "conversion rounding", "int64 -> float32 as sitofp to double then fptrunc",
         witness(cast(F32), arr(dtypes.int64, WIDE)),
         base=BASE, source=regex(r"^([ ]+)(%\S+) = sitofp i64 (\S+) to float$", _via_double)),
  Mutant("llvm_fptosi_for_unsigned", "conversion", "float -> unsigned int with fptosi: 3e9 -> uint32 overflows",
         witness(cast(dtypes.uint32), arr(F32, 3e9)), base=BASE, source=regex(r"= fptoui ", "= fptosi ")),
  Mutant("llvm_exp2_flushes", "subnormals", "EXP2 flushes subnormal results to +0.0",
         witness(op(Ops.EXP2), arr(F32, -140.0)), base=BASE,
         source=regex(r"^([ ]+)(%\S+) = call (float|double) @llvm\.exp2\.(f32|f64)\(\3 (\S+)\)$", _flush_exp2)),
  Mutant("llvm_f64_const_f32", "constants", "float64 constants printed with float32 precision",
         witness(lambda t: t + 0.1, arr(F64, 1.0)), base=BASE,
         source=regex(r"\b0x([0-9A-F]{16})\b", _float32_precision)),
)


class EditedIRRenderer:
  """The LLVM device's IR renderer, each program's IR edited by the mutant (LLVM's mutants edit the text only)."""

  def __init__(self, renderer: Any, mutant: Mutant):
    self.renderer, self.mutant, self.caps = renderer, mutant, renderer.caps

  def render(self, program: Program) -> str:
    return apply_text_edits(self.mutant, self.renderer.render(program))

  def code_paths(self, program: Program) -> list[str]:
    return self.renderer.code_paths(program)


def make_device(mutant: Mutant) -> DeviceImpl:
  """The registered LLVM device's parts with the mutant planted in the IR its renderer writes; its compiler is the
  device's own (the compile cache keys each binary by the IR it is compiled from)."""
  base = Device[BASE]
  return DeviceImpl(mutant.device, base.allocator, renderer=EditedIRRenderer(base.renderer, mutant),
                    compiler=base.compiler, runtime=base.runtime, standalone=base.standalone)


def probe() -> str | None:
  return device_probe(BASE)


def _renderers(mutant: Mutant) -> tuple[Any, Any]:
  renderer = Device[BASE].renderer
  return renderer, EditedIRRenderer(renderer, mutant)


BACKEND = Backend(BASE, probe, lambda: (), lambda: "", _renderers, make_device)
