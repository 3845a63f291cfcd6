"""The failing kernel of a program as a StandaloneCase (refgrad/standalone.py), and its reproducer written by the
device's hook (`DeviceImpl.standalone`): what `refgrad fuzz` and `refgrad check` write beside their findings, and
what the plugins' tests build their reproducers from. The cases are check_against_reference's (its `on_case`: made
of what it computes for each kernel anyway, reference.kernel_case).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from refgrad.codegen.contract import OptList
from refgrad.registry import Device
from refgrad.standalone import RUN_SCRIPT, StandaloneCase, write_reproducer
from refgrad.testing.oracle.reference import check_against_reference, raised_by_device
from refgrad.uop import UOp

# what a folder beside a finding holds besides the hook's files, when the device raised instead of running the kernel
ERROR_FILE = "device_error.txt"


def cases_on(device: str, fn: Callable[..., Any], *inputs: Any,
             opts: Callable[[UOp], OptList | None] | None = None) -> list[StandaloneCase]:
  """A case per kernel of fn(*inputs) checked on `device` (each run with opts(ast), None: its own choice); raises
  ReferenceMismatch if the device gets one wrong."""
  cases: list[StandaloneCase] = []
  check_against_reference(fn, *inputs, device=device, opts=opts, on_case=lambda _, case: cases.append(case))
  return cases


class _Reached(Exception):
  """The kernel a crash or hang was in has its case: stop before the device runs it."""


def failing_case(fn: Callable[..., Any], *inputs: Any, device: str,
                 opts: Callable[[UOp], OptList | None] | None = None,
                 crashed_in: int | None = None) -> StandaloneCase | None:
  """The case of the kernel of fn(*inputs) that fails on `device`: the first whose output differs from the
  reference, or whose compile (or load) raises (the case then carries the error, `device_error`). With
  `crashed_in` (the schedule item a worker process died or hung in), that kernel's case, which the device never runs
  here. None if nothing fails again (a flaky failure, a bug outside any kernel) or the kernel cannot be rendered."""
  cases: dict[int, StandaloneCase] = {}

  def keep(index: int, case: StandaloneCase) -> None:
    cases[index] = case
    if index == crashed_in:
      raise _Reached
  try:
    report = check_against_reference(fn, *inputs, device=device, opts=opts, raise_on_mismatch=False, on_case=keep)
  except _Reached:
    return cases[crashed_in]
  except Exception as e:
    if not raised_by_device(e) or not cases:
      raise
    last = max(cases)
    return StandaloneCase(**{**cases[last].__dict__, "device_error": f"{type(e).__name__}: {e}"})
  return next((cases[i] for i, kernel in enumerate(report.kernels) if not kernel.comparison.ok and i in cases), None)


def write_standalone(folder: Path, case: StandaloneCase | None) -> str:
  """Write the case's reproducer into `folder` with its device's hook; one line saying where it is, or why there is
  none (the device has no hook, or no kernel failed again)."""
  if case is None:
    return "no standalone reproducer: no kernel failed again when the finding was replayed to write one"
  impl = Device[case.device]
  if impl.standalone is None:
    return f"no standalone reproducer: {impl.name} has no standalone hook (DeviceImpl.standalone)"
  files = impl.standalone(case, impl)
  if case.device_error:
    files = {**files, ERROR_FILE: case.device_error + "\n"}
  write_reproducer(folder, files)
  # device_error is whatever the device raised: in its compile, its load or the kernel's run
  how = f"it fails as the device did, {ERROR_FILE}" if case.device_error else "it exits 1 on the wrong lanes"
  return f"standalone reproducer of kernel {case.program.name} (no refgrad needed; sh {RUN_SCRIPT}: {how}): {folder}"
