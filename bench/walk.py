"""The two walks of issue 29, measured: which refgrad modules a path calls into, and how often each of its steps runs.

(a) `Tensor.realize()` of a small elementwise + reduce program down to the device's runner: cold (nothing compiled
in this process, an empty compile cache) and warm (the same program again over new data);
(b) one `refgrad check` cell (a batch of that one segment) down to the comparison, cold and warm.

A module counts when a function of it is called during the walk (module bodies run by an import do not count);
plugins count too (refgrad_clang ...). A step that runs more often than the kernels it serves is work done twice.

  python bench/walk.py [--device CLANG] [--cell EXP2,float32] [--modules]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

os.environ["REFGRAD_CACHE"] = tempfile.mkdtemp(prefix="refgrad-walk-")  # cold: an empty compile cache

import numpy as np  # noqa: E402

from refgrad import Device, Tensor  # noqa: E402
from refgrad.testing.conformance.batches import Batch  # noqa: E402
from refgrad.testing.conformance.run import all_units, prepare_units, run_unit  # noqa: E402

# (step, module, function qualname): the stages a kernel passes through; module "" matches any module and a
# qualname ending there (each backend's compiler)
STEPS = (
  ("schedule", "refgrad.schedule", "create_schedule"),
  ("schedule built (cache miss)", "refgrad.schedule", "schedule_graph"),
  ("lower", "refgrad.codegen.lowering", "lower_kernel"),
  ("optimize", "refgrad.codegen.opt", "apply_opts"),
  ("linearize", "refgrad.codegen.linearize", "linearize"),
  ("check dtypes", "refgrad.device", "DeviceImpl.check_dtypes"),
  ("render", "refgrad.device", "DeviceImpl.render"),
  ("compile", "", "Compiler.compile"),
  ("compile batch", "", "Compiler.compile_batch"),
  ("load", "refgrad.device", "DeviceImpl._build_runner"),
  ("run", "refgrad.device", "DeviceImpl.run_kernel"),
  ("interpret (reference)", "refgrad.interp.kernel", "PythonKernel.__call__"),
  ("graph evaluator", "refgrad.interp.graph", "evaluate_nodes"),
  ("bounds", "refgrad.testing.oracle.bounds", "kernel_error_bounds"),
  ("compare lanes", "refgrad.testing.oracle.compare", "compare_lanes"),
  ("code paths", "refgrad.testing.conformance.run", "code_paths"),
)
ONCE_PER_WALK = {"schedule", "schedule built (cache miss)"}


class Walk:
  """Every refgrad function called while it is active, as (module, qualname) -> calls, in every thread; code an
  import runs (module and class bodies, dataclass methods being made) is left out."""

  def __init__(self) -> None:
    self.calls: Counter[tuple[str, str]] = Counter()
    self.importing = 0

  def _profile(self, frame: Any, event: str, arg: Any) -> None:
    module = frame.f_globals.get("__name__", "")
    if module == "importlib._bootstrap" and frame.f_code.co_name == "_load_unlocked":
      self.importing += {"call": 1, "return": -1}.get(event, 0)
    elif event == "call" and not self.importing and module.startswith("refgrad"):
      self.calls[(module, frame.f_code.co_qualname)] += 1

  def __enter__(self) -> Walk:
    threading.setprofile(self._profile)
    sys.setprofile(self._profile)
    return self

  def __exit__(self, *exc: object) -> None:
    sys.setprofile(None)
    threading.setprofile(None)

  @property
  def modules(self) -> list[str]:
    return sorted({module for module, _ in self.calls})

  def count(self, module: str, name: str) -> int:
    if module:
      return self.calls[(module, name)]
    return sum(n for (_, qualname), n in self.calls.items() if qualname.endswith(name))

  def steps(self) -> list[tuple[str, int]]:
    return [(step, n) for step, module, name in STEPS if (n := self.count(module, name))]


def walked(name: str, fn: Callable[[], Any], show_modules: bool) -> None:
  with Walk() as walk:
    fn()
  launches = walk.count("refgrad.device", "DeviceImpl.run_kernel")
  twice = [step for step, n in walk.steps() if n > (1 if step in ONCE_PER_WALK else launches)]
  print(f"{name}: {len(walk.modules)} modules; steps: {', '.join(f'{step} {n}' for step, n in walk.steps())}")
  print(f"  run more often than the kernels launched ({launches}): {', '.join(twice) or 'none'}")
  if show_modules:
    print("  " + " ".join(walk.modules))


def realize_walk(device: str, show_modules: bool) -> None:
  def program(seed: int) -> Tensor:
    data = np.random.default_rng(seed).standard_normal((64, 32)).astype(np.float32)
    return (Tensor(data, device=device) * 2 + 1).exp2().sum(axis=1)
  for state, seed in (("cold", 1), ("warm", 2)):
    walked(f"(a) realize on {device}, {state}", program(seed).realize, show_modules)


def check_walk(device: str, cell: tuple[str, str], show_modules: bool) -> None:
  unit = next(u for u in all_units() if isinstance(u, Batch) and any((s.row, s.column) == cell for s in u.segments))
  one = Batch(unit.label, unit.inputs, [s for s in unit.segments if (s.row, s.column) == cell], unit.dtypes)
  def check() -> None:  # as run_conformance checks a unit: its kernels compiled ahead, then run and judged
    prepare_units([one], device)
    run_unit(one, device)
  for state in ("cold", "warm"):
    walked(f"(b) check cell {cell[0]} x {cell[1]} on {device}, {state}", check, show_modules)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default="CLANG")
  parser.add_argument("--cell", default="EXP2,float32", help="row,column of the check's matrix")
  parser.add_argument("--modules", action="store_true", help="list the modules each walk visits")
  args = parser.parse_args()
  Device[args.device]  # probe and load the plugin before any walk
  realize_walk(args.device, args.modules)
  row, column = args.cell.split(",")
  check_walk(args.device, (row, column), args.modules)


if __name__ == "__main__":
  main()
