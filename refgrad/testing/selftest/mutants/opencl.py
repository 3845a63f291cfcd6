"""The OPENCL family: bugs of an OpenCL backend, planted in a copy of OPENCL as build options (the -cl-* shortcuts
a backend chasing speed turns on) or as edits of the OpenCL C it renders (a native_ builtin, a half conversion that
truncates, a grouped reduction without its barrier). The C-style planting is clang.py's, with the OpenCL dialect."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from refgrad.codegen.cstyle import CStyleRenderer
from refgrad.device import DeviceImpl
from refgrad.registry import Device
from refgrad.testing.selftest.mutants.base import (
  F16,
  F32,
  TINY_F32,
  Backend,
  Mutant,
  arr,
  cast,
  device_probe,
  op,
  planted_flags,
  reduce,
  regex,
  witness,
)
from refgrad.testing.selftest.mutants.clang import C_PRELUDE, MutantRenderer
from refgrad.uop import Ops

BASE = "OPENCL"
NAN = math.nan
# a row long enough that refgrad reduces it in work-groups, through local memory (codegen/gpu.py)
LONG_ROW = np.arange(4096, dtype=np.int32).reshape(1, 4096) % 7


def _build_option(name: str, option: str, bug_class: str, description: str, fn: Any, *inputs: np.ndarray,
                  equivalent: str = "") -> Mutant:
  return Mutant(name, bug_class, description, witness(fn, *inputs), base=BASE, add_flags=(option,),
                equivalent=equivalent)


OPENCL_MUTANTS: tuple[Mutant, ...] = (
  _build_option("cl_fast_relaxed_math", "-cl-fast-relaxed-math", "fast-math", "-cl-fast-relaxed-math",
                op(Ops.MAX), arr(F32, NAN, 1.0), arr(F32, 1.0, NAN)),
  _build_option("cl_finite_math_only", "-cl-finite-math-only", "fast-math", "-cl-finite-math-only: NaN tests fold",
                op(Ops.MAX), arr(F32, NAN, 1.0), arr(F32, 1.0, NAN)),
  _build_option("cl_unsafe_math", "-cl-unsafe-math-optimizations", "fast-math",
                "-cl-unsafe-math-optimizations: reassociation, reciprocals", lambda t: (t + 1) + 2,
                arr(F32, 2.0 ** 24)),
  _build_option("cl_no_signed_zeros", "-cl-no-signed-zeros", "fast-math", "-cl-no-signed-zeros: x + 0.0 folds to x",
                lambda t: t + 0.0, arr(F32, -0.0)),
  _build_option("cl_mad_enable", "-cl-mad-enable", "fast-math", "-cl-mad-enable: a * b + c may become a mad",
                lambda a, b, c: a * b + c, arr(F32, 1 + 2.0 ** -12), arr(F32, 1 + 2.0 ** -12), arr(F32, -1.0),
                equivalent="PoCL keeps the source's FP_CONTRACT OFF under -cl-mad-enable: no mad is formed"),
  _build_option("cl_denorms_are_zero", "-cl-denorms-are-zero", "subnormals", "-cl-denorms-are-zero",
                op(Ops.ADD), arr(F32, TINY_F32), arr(F32, 0.0)),
  Mutant("cl_native_exp2", "transcendental", "EXP2 as native_exp2 (implementation-defined accuracy)",
         witness(op(Ops.EXP2), np.linspace(-20, 20, 257, dtype=np.float32)), base=BASE,
         equivalent="PoCL's native_exp2 is its exp2 (measured: the same bits on 4001 points of [-20, 20])",
         prelude=(("RG_FN float rg_exp2_f32(float x) { return isnan(x) ? x : exp2(x); }",
                   "RG_FN float rg_exp2_f32(float x) { return isnan(x) ? x : native_exp2(x); }"),)),
  Mutant("cl_f16_truncates", "conversion rounding", "float -> half truncates (normal range)",
         witness(cast(F16), arr(F32, 1 + 0.75 * 2.0 ** -10)), base=BASE,
         prelude=(("((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13)", "((ax + 0xc8000000u) >> 13)"),)),
  Mutant("cl_group_combine_short", "grouped reduction", "a grouped reduction combines the work-items' partial sums "
         "one vector short: the last 8 items' sums are left out", witness(reduce(Ops.ADD), LONG_ROW), base=BASE,
         source=regex(r"(for \(long (ridx\d+)_base = 0; \2_base < )(\d+)(?=; \2_base \+= 8\) \{\n"
                      r"    const long \2_0 = \2_base \+ 0;\n    const \w+ v\d+_0 = local)",
                      lambda m: f"{m[1]}{int(m[3]) - 8}")),
  Mutant("cl_no_barrier", "grouped reduction", "a grouped reduction reads the other work-items' partial sums "
         "from local memory without waiting for them (the barrier left out)",
         witness(reduce(Ops.ADD), LONG_ROW), base=BASE, source=regex(r"^[ ]*barrier\(CLK_LOCAL_MEM_FENCE\);\n", ""),
         racy=True),
)


def build_options(mutant: Mutant | None = None) -> tuple[str, ...]:
  """The registered OPENCL device's build options, with the mutant's removed and added."""
  options = Device[BASE].compiler.options
  return options if mutant is None else planted_flags(options, mutant)


def make_device(mutant: Mutant) -> DeviceImpl:
  """The registered OPENCL device's parts with the mutant planted: its renderer's dialect with the mutant's edits, and
  its compiler and runtime building with the mutant's options (`with_options`; the compiler's cache key names
  them)."""
  base = Device[BASE]
  options = build_options(mutant)
  return DeviceImpl(mutant.device, base.allocator, renderer=MutantRenderer(base.renderer.d, mutant),
                    compiler=base.compiler.with_options(options),
                    runtime=base.runtime.with_options(options), runner_cache=base.runner_cache,
                    standalone=base.standalone)


def probe() -> str | None:
  return device_probe(BASE)


def _renderers(mutant: Mutant) -> tuple[Any, Any]:
  dialect = Device[BASE].renderer.d
  return CStyleRenderer(dialect), MutantRenderer(dialect, mutant)


def _prelude() -> str:
  return Device[BASE].renderer.d.header + C_PRELUDE


BACKEND = Backend(BASE, probe, build_options, _prelude, _renderers, make_device)
