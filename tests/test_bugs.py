"""The upstream bugs recorded in bugs/: each standalone reproducer runs against the installed toolchain, in a child
process, and its status ("still present" or "fixed here") is reported as a warning and a test property, never as a
failure: whether PoCL or LLVM still has the bug is their business. The test fails only when a reproducer is broken:
it does not run, or its output is neither the buggy answer nor the correct one."""
import signal
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from refgrad import Device

BUGS_DIR = Path(__file__).resolve().parent.parent / "bugs"
TIMEOUT = 300  # seconds; each reproducer takes about one under no load


@dataclass(frozen=True)
class Reproducer:
  folder: str
  device: str  # the refgrad device whose toolchain the reproducer needs (it does not import refgrad itself)
  present: Callable[[subprocess.CompletedProcess], bool]
  fixed: Callable[[subprocess.CompletedProcess], bool]


BUGS = [
  Reproducer("pocl-nan-store-dropped", "OPENCL",
             present=lambda run: run.returncode == 1 and "STORE DROPPED" in run.stdout,
             fixed=lambda run: run.returncode == 0 and run.stdout.count(": ok") == 2),
  Reproducer("gcc-narrow-int-sum-vectorizer", "GCC",
             present=lambda run: run.returncode == 1 and "got 96" not in run.stdout and "expected 96" in run.stdout,
             fixed=lambda run: run.returncode == 0 and "got 96, expected 96" in run.stdout),
  Reproducer("llvm-vplan-cost-model-assert", "LLVM",
             present=lambda run: run.returncode == -signal.SIGABRT and "legacy cost model disagreed" in run.stderr,
             fixed=lambda run: run.returncode == 0 and "optimized without an assertion" in run.stdout),
  Reproducer("inductor-int8-partial-vector-reduction", "INDUCTOR",
             present=lambda run: run.returncode == 1 and "got 1, expected -128" in run.stdout,
             fixed=lambda run: run.returncode == 0 and "got -128, expected -128" in run.stdout),
  Reproducer("llvm-loop-vectorizer-compile-time", "LLVM",
             present=lambda run: run.returncode == 1 and "still optimizing after" in run.stdout,
             fixed=lambda run: run.returncode == 0 and "with loop vectorization: optimized in" in run.stdout),
  Reproducer("xla-constant-integer-division-sigfpe", "XLA",
             present=lambda run: run.returncode == 1 and "with constants: got SIGFPE" in run.stdout,
             fixed=lambda run: run.returncode == 0 and run.stdout.count("with constants: got") == 2
             and "SIGFPE" not in run.stdout),
  Reproducer("xla-narrowing-convert-or-segv", "XLA",
             present=lambda run: run.returncode == 1 and "with jax.jit: got SIGSEGV" in run.stdout,
             fixed=lambda run: run.returncode == 0 and run.stdout.count("with jax.jit: got [") == 2
             and "SIGSEGV" not in run.stdout),
  Reproducer("inductor-narrow-int-truncdiv-max", "INDUCTOR",
             present=lambda run: run.returncode == 1 and "max_propagate_nan(int16_t&, int&)" in run.stdout,
             fixed=lambda run: run.returncode == 0 and "got 3, expected 3" in run.stdout),
  Reproducer("inductor-int-compare-pad-vecmask", "INDUCTOR",
             present=lambda run: run.returncode == 1 and "have different types" in run.stdout
             and "VecMask<int, 1>" in run.stdout,
             fixed=lambda run: run.returncode == 0
             and run.stdout.count("got [[False, False, False], [True, False, True]], expected") == 2),
]


def test_every_bug_folder_has_a_readme_and_a_reproducer_here():
  folders = sorted(p.name for p in BUGS_DIR.iterdir() if p.is_dir())
  assert folders == sorted(bug.folder for bug in BUGS)
  for folder in folders:
    assert (BUGS_DIR / folder / "README.md").is_file() and (BUGS_DIR / folder / "run.py").is_file()


@pytest.mark.parametrize("bug", BUGS, ids=[bug.folder for bug in BUGS])
def test_reproducer_still_fails_or_the_bug_is_fixed_here(bug, record_property):
  if bug.device not in Device.available():
    pytest.skip(f"{bug.device}'s toolchain is not installed here")
  run = subprocess.run([sys.executable, str(BUGS_DIR / bug.folder / "run.py")], capture_output=True, text=True,
                       timeout=TIMEOUT)
  output = f"exit status {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-2000:]}"
  assert bug.present(run) or bug.fixed(run), f"the reproducer of {bug.folder} is broken:\n{output}"
  status = "still present" if bug.present(run) else "fixed here"
  record_property("status", status)
  warnings.warn(f"bugs/{bug.folder}: {status} ({run.stdout.splitlines()[0]})", UserWarning, stacklevel=1)
