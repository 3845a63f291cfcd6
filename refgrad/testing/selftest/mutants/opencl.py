"""The OPENCL family: bugs of an OpenCL backend, planted in a copy of OPENCL as build options (the -cl-* shortcuts
a backend chasing speed turns on) or as edits of the OpenCL C it renders (a native_ builtin, a half conversion that
truncates, a grouped reduction without its barrier). The C-style planting is clang.py's, with the OpenCL dialect."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from refgrad.device import DeviceImpl
from refgrad.testing.selftest.mutants.base import (
  F16,
  F32,
  TINY_F32,
  Backend,
  Mutant,
  arr,
  cast,
  op,
  planted_flags,
  plugin_probe,
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


def _dialect() -> Any:
  from refgrad_opencl import find_device
  from refgrad_opencl.dialect import DeviceLimits, opencl_dialect
  return opencl_dialect(DeviceLimits.of(find_device()[0]))


def build_options(mutant: Mutant | None = None) -> tuple[str, ...]:
  """OPENCL's build options, with the mutant's removed and added."""
  from refgrad_opencl.runtime import BUILD_OPTIONS
  return BUILD_OPTIONS if mutant is None else planted_flags(BUILD_OPTIONS, mutant)


def make_device(mutant: Mutant) -> DeviceImpl:
  """A copy of OPENCL with the mutant planted: its renderer, and its build options (which the compiler's cache key
  names, with the mutant)."""
  import refgrad_opencl
  from refgrad_opencl.runtime import CLCompiler, CLRuntime
  base = refgrad_opencl.make_device()
  options = build_options(mutant)
  compiler = CLCompiler(base.compiler.context, base.compiler.device, options)
  compiler.cache_key += f"|mutant {mutant.name}"
  runtime = CLRuntime(base.runtime.context, base.runtime.queue, base.runtime.device, base.runtime.limits, options)
  return DeviceImpl(mutant.device, base.allocator, renderer=MutantRenderer(base.renderer.d, mutant),
                    compiler=compiler, runtime=runtime, runner_cache=base.runner_cache)


def probe() -> str | None:
  return plugin_probe("refgrad_opencl", "OPENCL")


def _renderers(mutant: Mutant) -> tuple[Any, Any]:
  from refgrad.codegen.cstyle import CStyleRenderer
  dialect = _dialect()
  return CStyleRenderer(dialect), MutantRenderer(dialect, mutant)


def _prelude() -> str:
  from refgrad_opencl.dialect import OPENCL_HEADER
  return OPENCL_HEADER + C_PRELUDE


BACKEND = Backend(BASE, probe, build_options, _prelude, _renderers, make_device)
