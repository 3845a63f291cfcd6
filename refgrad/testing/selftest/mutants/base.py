"""What every mutant family shares: the `Mutant` record, the witness programs' building blocks, bit-exact comparison,
and the per-device `Backend` a family plants its mutants in."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from refgrad.codegen.contract import Program
from refgrad.device import DeviceImpl
from refgrad.dtype import DType, dtypes
from refgrad.registry import Device
from refgrad.uop import Ops, UOp

WitnessCase = tuple[Callable[..., Any], list[np.ndarray]]  # fn(*tensors) and its inputs, for check_against_reference
Witness = Callable[[], WitnessCase]
MethodPatch = Callable[..., str]  # (render, the original bound method, *the method's arguments) -> expression
OptRule = tuple[str, Callable[..., Any]]  # (opt kind, rule), as Capabilities.opt_rules holds them


class MutantNotPlanted(RuntimeError):
  """A mutant's edit found nothing to change: running it would measure nothing."""


@dataclass(frozen=True, eq=False)
class Mutant:
  """One planted bug in a copy of device `base`. `witness` builds a small program that the bug gets wrong (it proves
  the mutant live)."""
  name: str
  bug_class: str     # the family of mistake: comparison, NaN, signed zero, rounding, reduction, fast-math, ...
  description: str
  witness: Witness
  base: str = "CLANG"
  prelude: tuple[tuple[str, str], ...] = ()        # exact (old, new) edits of the rendered prelude; old occurs once
  source: Callable[[str], str] | None = None        # a rewrite of each rendered program (C, OpenCL C or LLVM IR)
  rules: dict[Ops, Callable[..., str]] = field(default_factory=dict)  # replaced entries of the render class's rules
  methods: dict[str, MethodPatch] = field(default_factory=dict)  # replaced methods of the backend's render class
  add_flags: tuple[str, ...] = ()     # compiler flags (CLANG) or build options (OPENCL)
  remove_flags: tuple[str, ...] = ()
  opt_rules: tuple[OptRule, ...] = ()  # kernel optimizer transformations replaced, by opt kind
  machines: tuple[str, ...] = ()  # platform.machine() values it can run on (empty: any)
  # why the base device computes the same as the mutant (an equivalent mutant there, not scored): a bug on other
  # implementations of the device (a GPU's OpenCL), not on the one measured here (PoCL)
  equivalent: str = ""
  racy: bool = False  # a data race: its witness goes wrong on some runs only, so liveness tries it several times

  @property
  def in_source(self) -> bool:
    return bool(self.prelude or self.source or self.rules or self.methods)

  @property
  def kind(self) -> str:
    """Where the bug is planted: 'source', 'flags', 'opt' or a combination ('source+flags')."""
    planted = (("source", self.in_source), ("flags", self.add_flags or self.remove_flags), ("opt", self.opt_rules))
    return "+".join(k for k, on in planted if on)

  @property
  def family(self) -> str:
    """What the score is reported per: the optimizer's mutants, or the backend's own (named by the device)."""
    return "optimizer" if self.opt_rules else self.base

  @property
  def device(self) -> str:
    return f"{self.base}~{self.name.upper()}"

  @property
  def sets_process_fp_mode(self) -> bool:
    """clang links crtfastmath.o into a -ffast-math shared library: loading it turns on flush-to-zero for the
    whole process, the reference's numpy included. Run such a mutant only in a process of its own."""
    return "-ffast-math" in self.add_flags


@dataclass(frozen=True)
class Backend:
  """How mutants are planted in one base device."""
  name: str
  probe: Callable[[], str | None]              # None if the base device can run here, else why not
  flags: Callable[[], tuple[str, ...]]         # its real compiler flags or build options
  prelude: Callable[[], str]                   # the text its prelude edits must find exactly once
  renderers: Callable[[Mutant], tuple[Any, Any]]  # (its real renderer, the mutant's): nothing compiled
  make_device: Callable[[Mutant], DeviceImpl]  # a copy of the device with the mutant planted


def device_probe(device: str) -> str | None:
  """None if the base device is registered and can run here, else why not (its plugin's probe says)."""
  spec = next((s for s in Device.specs() if s.name == device), None)
  if spec is None:
    return f"the {device} backend the mutants are planted in is not installed (no plugin registers {device})"
  return spec.unavailable_reason


def planted_flags(real: tuple[str, ...], mutant: Mutant) -> tuple[str, ...]:
  """Flags with the mutant's removed and added (added last, so they win over earlier ones)."""
  return tuple(f for f in real if f not in mutant.remove_flags) + mutant.add_flags


class OptRulesRenderer:
  """A renderer whose device runs the kernel optimizer with some of its rules replaced (Capabilities.opt_rules)."""

  def __init__(self, renderer: Any, rules: tuple[OptRule, ...]):
    self.renderer = renderer
    self.caps = dataclasses.replace(renderer.caps, opt_rules=renderer.caps.opt_rules + rules)

  def render(self, program: Program) -> str:
    return self.renderer.render(program)

  def code_paths(self, program: Program) -> list[str]:
    return self.renderer.code_paths(program)


# ---- witnesses: tiny programs built from primitive UOps, below the Tensor API (as refgrad check builds its cases)
def arr(dtype: DType, *values: Any) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.array(values, dtype=np.float64 if dtype.kind == "f" else object).astype(dtype.np)


def alu(op: Ops, *ts: Any) -> Any:
  return ts[0]._from(ts[0].uop.alu(op, *(t.uop for t in ts[1:])))


def op(op: Ops) -> Callable[..., Any]:
  return lambda *ts: alu(op, *ts)


def cast(dst: DType) -> Callable[[Any], Any]:
  return lambda t: t._from(UOp(Ops.CAST, dst, (t.uop,)))


def reduce(op: Ops) -> Callable[[Any], Any]:
  """A reduction over the last axis."""
  return lambda t: t._from(UOp(Ops.REDUCE_AXIS, t.dtype, (t.uop,), (op, (t.ndim - 1,))))


def twice(op: Ops) -> Callable[[Any, Any], Any]:
  """(a op b) op b in one fused kernel: a chain whose intermediate result must be rounded to the dtype."""
  return lambda a, b: alu(op, alu(op, a, b), b)


def witness(fn: Callable[..., Any], *inputs: np.ndarray) -> Witness:
  return lambda: (fn, list(inputs))


F32, F64, F16, BF16 = dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16
TINY_F32 = float(ml_dtypes.finfo(np.float32).smallest_subnormal)


def regex(pattern: str, replacement: str | Callable[[re.Match], str]) -> Callable[[str], str]:
  """A source rewrite: every match of a multi-line pattern replaced."""
  compiled = re.compile(pattern, re.M)
  return lambda source: compiled.sub(replacement, source)


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
