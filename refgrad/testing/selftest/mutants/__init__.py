"""Realistic bugs, planted one at a time in a copy of a compiled backend, to measure the oracle kit (refgrad selftest).

A conformance suite that passes proves little until it is seen failing on wrong backends. Each `Mutant` is one
mistake that real backends ship and that docs/SPEC.md forbids: none of them only changes what the spec leaves
UNDEFINED or free (shift amounts >= the width, the sign of a zero sum, reduction order). The families, one module
each, plant them the way such a bug would appear in that backend:
- clang.py: CLANG's C source (prelude, rules, renderer methods) and compiler flags;
- llvm.py: LLVM IR instruction flags, predicates and conversions, in the text or in the IR renderer's methods;
- opencl.py: OPENCL's build options and OpenCL C source (the C-style planting of clang.py, with the OpenCL dialect);
- optimizer.py: a wrong rule of the kernel optimizer (codegen/opt.py) on a real compiled device.

A mutant that does not apply is a silent no-op that would count as an escape (or, worse, prove nothing while caught
by accident), so planting is checked (`check_planted`, run before a mutant device is made): every prelude edit must
find its text exactly once, every removed flag must be there and every added one absent, and the mutant must change
the rendered source of its `witness`, a small program that the bug gets wrong. The witness also proves the mutant is
live: the mutant device computes it differently from the reference, bit for bit (`witness_deviation`, which does not
use the kit being measured; tests/test_selftest.py runs every one).

Each mutant is the device `<BASE>~<NAME>`, registered by this package's `refgrad_devices` hook: register the module
(`refgrad.plugin_loader.register`), or load a plugin file that imports the hook
(`from refgrad.testing.selftest.mutants import refgrad_devices`; selftest writes one for its fuzz workers). A mutant
device is made of the registered base device's parts (`Device[base]`: its renderer's dialect, its compiler with
other flags or options through `with_flags`/`with_options`, its runtime), never of a plugin's modules. A binary is
a function of the source it is compiled from and of the compiler's cache key (its version and flags or options), and
the compile cache keys it by both: a mutated source or flag is a key of its own, so the real device never gets a
mutant's binary, while a kernel whose source a mutant leaves as it is (most of them: a mutant edits one construct)
is compiled once for the real device and every mutant of the same flags.
"""
from __future__ import annotations

import functools
import platform

import numpy as np

from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec
from refgrad.testing.selftest.mutants import clang, llvm, opencl, optimizer
from refgrad.testing.selftest.mutants.base import Backend, Mutant, MutantNotPlanted, OptRulesRenderer, same_bits
from refgrad.testing.selftest.mutants.clang import clang_flags

__all__ = ["BACKENDS", "BY_NAME", "MUTANTS", "Mutant", "MutantNotPlanted", "check_planted", "clang_flags",
           "make_device", "probe", "refgrad_devices", "rendered_witness", "run_witness", "same_bits", "select",
           "table_text", "witness_deviation"]

BACKENDS: dict[str, Backend] = {b.name: b for b in (clang.BACKEND, llvm.BACKEND, opencl.BACKEND)}
MUTANTS: tuple[Mutant, ...] = clang.CLANG_MUTANTS + optimizer.OPTIMIZER_MUTANTS + llvm.LLVM_MUTANTS + \
  opencl.OPENCL_MUTANTS
BY_NAME: dict[str, Mutant] = {m.name: m for m in MUTANTS}


def select(names: list[str] | None, base: str | None = None) -> list[Mutant]:
  """The mutants named (all of them for None), in table order, planted in `base` (any for None); unknown names
  raise ValueError listing the known."""
  unknown = [n for n in names or () if n not in BY_NAME]
  if unknown:
    raise ValueError(f"unknown mutant(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
  return [m for m in MUTANTS if (not names or m.name in names) and base in (None, m.base)]


def table_text(mutants: list[Mutant] | None = None) -> str:
  """What `refgrad selftest --list` prints: one line per mutant."""
  def described(m: Mutant) -> str:
    return f"{m.description} (not scored: {m.equivalent})" if m.equivalent else m.description
  rows = [(m.name, m.family, m.kind, m.bug_class, described(m)) for m in (mutants or MUTANTS)]
  width = max(len(r[0]) for r in rows)
  lines = [f"{'mutant':{width}s}  {'family':9s}  {'kind':12s}  {'class':20s}  description"]
  lines += [f"{name:{width}s}  {family:9s}  {kind:12s}  {bug:20s}  {text}" for name, family, kind, bug, text in rows]
  return "\n".join(lines + [f"{len(rows)} mutants"])


def _renderers(mutant: Mutant) -> tuple[object, object]:
  """(the base device's renderer, the mutant's), the mutant's with its optimizer rules."""
  real, mutated = BACKENDS[mutant.base].renderers(mutant)
  return real, OptRulesRenderer(mutated, mutant.opt_rules) if mutant.opt_rules else mutated


def rendered_witness(mutant: Mutant) -> list[tuple[str, str]]:
  """(real source, mutant source) of each kernel of the mutant's witness, each optimized for its own renderer's
  capabilities (nothing compiled)."""
  from refgrad.codegen.pipeline import compile_ast
  from refgrad.schedule import create_schedule
  from refgrad.tensor import Tensor
  fn, inputs = mutant.witness()
  outputs = fn(*(Tensor(x, device="PYTHON") for x in inputs))
  items, _ = create_schedule([outputs.uop])
  real, mutated = _renderers(mutant)
  asts = [item.ast for item in items if not item.is_transfer]
  return [(real.render(compile_ast(ast, real.caps)), mutated.render(compile_ast(ast, mutated.caps))) for ast in asts]


def run_witness(mutant: Mutant, device: str) -> np.ndarray:
  """The mutant's witness program computed on `device`."""
  from refgrad.tensor import Tensor
  fn, inputs = mutant.witness()
  return np.asarray(fn(*(Tensor(x, device=device) for x in inputs)).numpy())


RACY_TRIES = 16  # runs of a racy mutant's witness, of which one must go wrong (measured: 1 to 3 in 5 do on PoCL)


def witness_deviation(mutant: Mutant) -> str | None:
  """How the mutant computes its witness differently from the reference (PYTHON), compared bit for bit and
  independently of the kit under measurement; None if it does not (the mutant would be inert). A racy mutant's
  witness runs until it goes wrong, at most RACY_TRIES times."""
  expected = run_witness(mutant, "PYTHON")
  for _ in range(RACY_TRIES if mutant.racy else 1):
    actual = run_witness(mutant, mutant.device)
    if not same_bits(actual, expected):
      return f"{mutant.device} gives {actual!r}, the reference {expected!r}"
  return None


@functools.cache
def check_planted(mutant: Mutant) -> None:
  """Raise MutantNotPlanted unless every edit of `mutant` applies (once per process: the table is constant)."""
  backend = BACKENDS[mutant.base]
  if mutant.prelude:
    everything = backend.prelude()
    for old, new in mutant.prelude:
      if everything.count(old) != 1 or old == new:
        raise MutantNotPlanted(f"{mutant.name}: the prelude text to replace occurs {everything.count(old)} times, "
                               f"not once (the {mutant.base} prelude changed?): {old!r}")
  if mutant.add_flags or mutant.remove_flags:
    real = backend.flags()
    missing = [f for f in mutant.remove_flags if f not in real] + [f for f in mutant.add_flags if f in real]
    if missing:
      raise MutantNotPlanted(f"{mutant.name}: {mutant.base}'s flags {' '.join(real)} already decide "
                             f"{' '.join(missing)}")
  if (mutant.in_source or mutant.opt_rules) and all(real == mutated for real, mutated in rendered_witness(mutant)):
    raise MutantNotPlanted(f"{mutant.name}: the mutant renders its witness exactly as {mutant.base} does "
                           "(pattern not found, or the optimizer never applies the rule)")


def make_device(mutant: Mutant) -> DeviceImpl:
  """A copy of the base device with the mutant planted (checked first: see check_planted)."""
  check_planted(mutant)
  device = BACKENDS[mutant.base].make_device(mutant)
  if mutant.opt_rules:
    device.renderer = OptRulesRenderer(device.renderer, mutant.opt_rules)
  return device


def probe(mutant: Mutant) -> str | None:
  """None if the mutant can run here, else why not."""
  if mutant.machines and platform.machine() not in mutant.machines:
    return f"mutant {mutant.name} needs a {' or '.join(mutant.machines)} machine, this is {platform.machine()}"
  return BACKENDS[mutant.base].probe()


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(m.device, functools.partial(make_device, m), plugin="refgrad.testing.selftest.mutants",
                     probe=functools.partial(probe, m)) for m in MUTANTS]
