"""Fixtures the plugins' tests share: standalone reproducer cases judged as the oracle judges them, and the check
that a reproducer runs without refgrad, passes, and fails on a wrong expected lane (refgrad/standalone.py)."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from refgrad.codegen.pipeline import compile_ast
from refgrad.execute import run_schedule
from refgrad.ops import OP_FACTS
from refgrad.registry import Device
from refgrad.standalone import StandaloneCase
from refgrad.testing.oracle.bounds import kernel_error_bounds
from refgrad.testing.oracle.reference import POISON, reference_schedule

# runs driver.py in its folder in a Python where refgrad and its plugins cannot be imported
WITHOUT_REFGRAD = ("import runpy, sys\n"
                   "sys.modules.update(dict.fromkeys(['refgrad', 'refgrad_clang', 'refgrad_llvm', 'refgrad_opencl']))\n"
                   "runpy.run_path('driver.py', run_name='__main__')")


def ulp_bound_of(ast, dtype) -> int:
  """The largest ULP bound of the kernel's transcendental ops for its output dtype (0: none)."""
  facts = [OP_FACTS[u.op] for u in ast.toposort if u.op in OP_FACTS and OP_FACTS[u.op].transcendental]
  return max((f.ulp_bound.get(dtype, 0) for f in facts), default=0)


def cases_on(device: str, fn: Callable, *inputs, opts: Callable | None = None) -> list[StandaloneCase]:
  """A case per kernel of fn(*inputs) (scheduled on the reference), compiled for `device` with opts(ast) (None: its
  heuristic): the inputs the reference saw, the output poisoned as the oracle poisons it, the reference's output,
  the oracle's undefined lanes and error bounds, and the ULP bound of the kernel's transcendentals."""
  impl = Device[device]
  cases = []
  for item in reference_schedule(fn, *inputs):
    if not item.is_transfer:
      out = item.buffers[0]
      before = (np.full(out.nbytes, POISON, np.uint8).view(out.dtype.np),) + tuple(b.numpy().copy()
                                                                                  for b in item.buffers[1:])
    run_schedule([item])
    if item.is_transfer:
      continue
    contents = dict(enumerate(b.numpy() for b in item.buffers))
    _, bound, undefined = kernel_error_bounds(item.ast, contents, {i: b.undefined for i, b in enumerate(item.buffers)
                                                                  if i})
    program = compile_ast(item.ast, impl.caps, opts(item.ast) if opts else None)
    skip = np.zeros(out.size, bool)
    for mask in (undefined, out.undefined):  # the lanes the oracle's bounds, or the reference itself, leave undefined
      if mask is not None:
        skip |= np.reshape(mask, -1)
    cases.append(StandaloneCase(program, impl.render(program), before, contents[0].reshape(-1).copy(), skip,
                                ulp_bound_of(item.ast, out.dtype), bound, device=device))
  return cases


def run_driver(folder: Path) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", WITHOUT_REFGRAD], cwd=folder, capture_output=True, text=True,
                        timeout=300)


def wrong_lane(case: StandaloneCase) -> tuple[StandaloneCase, int]:
  """The case with its last judged expected lane changed (its top exponent or value bit flipped: a NaN becomes a
  number, so never a NaN for a NaN), and that lane."""
  lane = int(np.flatnonzero(~case.skipped)[-1])
  wrong = case.expected.copy()
  bits = wrong.view(np.dtype(f"u{wrong.itemsize}"))
  bits[lane] ^= bits.dtype.type(1 << (8 * wrong.itemsize - 2))
  return StandaloneCase(case.program, case.source, case.buffers, wrong, case.skip, case.ulp_bound, case.abs_bound,
                        case.device), lane


def check_reproducer(files_of: Callable[[StandaloneCase], dict[str, str]], case: StandaloneCase, folder: Path) -> None:
  """The case's files pass when run without refgrad, and with one expected lane changed fail, naming that lane."""
  folder.mkdir()
  for name, text in files_of(case).items():
    (folder / name).write_text(text)
  good = run_driver(folder)
  assert good.returncode == 0, good.stdout + good.stderr
  bad_case, lane = wrong_lane(case)
  (folder / "driver.py").write_text(files_of(bad_case)["driver.py"])
  bad = run_driver(folder)
  assert bad.returncode == 1 and f"lane {lane}: got bits" in bad.stdout, bad.stdout + bad.stderr


@pytest.fixture(scope="session")
def standalone_cases() -> Callable[..., list[StandaloneCase]]:
  return cases_on


@pytest.fixture(scope="session")
def reproduces() -> Callable[..., None]:
  return check_reproducer
