"""Fixtures the plugins' tests share: standalone reproducer cases as the oracle kit builds them
(refgrad/testing/oracle/standalone_cases.py), and the check that a reproducer runs without refgrad, passes, and fails
on a wrong expected lane (refgrad/standalone.py)."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from refgrad.standalone import StandaloneCase
from refgrad.testing.oracle.standalone_cases import cases_on

# runs driver.py in its folder in a Python where refgrad and its plugins cannot be imported
WITHOUT_REFGRAD = ("import runpy, sys\n"
                   "sys.modules.update(dict.fromkeys(['refgrad', 'refgrad_clang', 'refgrad_llvm', 'refgrad_opencl']))\n"
                   "runpy.run_path('driver.py', run_name='__main__')")


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
  return dataclasses.replace(case, expected=wrong), lane


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
