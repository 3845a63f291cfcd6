"""One program checked against the reference in this process: what a worker does with each program it is sent, and
what a finding's pytest file calls to replay it."""
from __future__ import annotations

import hashlib
import random
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from refgrad.codegen.contract import OptList, UnsupportedOpError
from refgrad.codegen.pipeline import random_kernel_opts
from refgrad.registry import Device
from refgrad.schedule import ScheduleItem
from refgrad.testing.fuzz.coverage import kernel_pairs
from refgrad.testing.oracle.compare import add_histogram
from refgrad.testing.oracle.graph_check import GraphMismatch, check_graph_against_reference, raised_by_graph_device
from refgrad.testing.oracle.prepare import (
  Plan,
  PlannedCheck,
  compile_sources,
  kernel_sources,
  plan_checks,
  prepare_checks,
)
from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference, raised_by_device
from refgrad.uop import GroupOp, Ops, UOp


def random_opts_seeded_by(program_text: str, device: str) -> Callable[[UOp], OptList]:
  """The opt lists `refgrad fuzz --opts` runs a program's kernels with on a device: random and legal
  (pipeline.random_kernel_opts), drawn in kernel order from a seed made of the program's text, so a finding
  replays with the same opts."""
  caps = Device[device].caps
  rng = random.Random(hashlib.sha256(program_text.encode()).hexdigest())
  return lambda ast: random_kernel_opts(ast, caps, rng)


def _planned(programs: list[Any], device: str, opts: bool) -> list[PlannedCheck]:
  return [(p.run, tuple(p.inputs), random_opts_seeded_by(p.to_python(), device) if opts else None) for p in programs]


def prepare_programs(programs: list[Any], device: str, opts: bool = False, plan: Plan | None = None) -> Plan | None:
  """Compile at once the kernels run_one(program, device, opts=opts) will run for each of the programs (never
  raises: whatever fails here fails in run_one as it would have). Returns the plan (None on an interpreter), whose
  schedules run_one may be given; `plan`: made already by CompileAhead."""
  return prepare_checks(device, _planned(programs, device, opts), plan)


def compiles_apart(device: str) -> bool:
  """True if the device's compiler says it is `isolated`: it compiles in other processes, so a crash there cannot
  take this one down, and several threads may call it at once. Its next batch compiles while this one runs."""
  return bool(getattr(Device[device].compiler, "isolated", False))


class CompileAhead:
  """A batch's kernels compiled into the compile cache in a background thread while the batch before it runs (on a
  device that compiles apart): `start` plans the batch and starts the compile, `take` waits for it and gives the
  programs and their plan, which prepare_programs then loads (and compiles whatever the background compile did
  not)."""

  def __init__(self):
    self.executor = ThreadPoolExecutor(1, thread_name_prefix="compile-ahead")
    self.pending: tuple[list[Any], Plan, Future] | None = None

  def start(self, programs: list[Any], device: str, opts: bool) -> None:
    self.take()  # one batch ahead at most
    plan = plan_checks(device, _planned(programs, device, opts))
    self.pending = programs, plan, self.executor.submit(compile_sources, kernel_sources(plan))

  def take(self) -> tuple[list[Any], Plan | None]:
    if self.pending is None:
      return [], None
    (programs, plan, compiling), self.pending = self.pending, None
    compiling.exception()  # waited for, and left alone: a kernel that failed there fails again in prepare or run
    return programs, plan


def transcendental_root(program: Any) -> tuple[str, str] | None:
  """(op, dtype) of a random kernel whose root is a transcendental op over exact operands (alu_kernels puts them
  only there), so the output's ULP error is that op's own; None for any other program."""
  root = getattr(program, "root", None)
  if root is None or getattr(Ops, root.op, None) not in GroupOp.Transcendental:
    return None
  return root.op, root.dtype.name


def run_one(program: Any, device: str, coverage: set[tuple[str, str]] | None = None, opts: bool = False,
            ulp: dict[tuple[str, str], dict[int, int]] | None = None,
            on_item: Callable[[int], None] | None = None,
            schedule: list[ScheduleItem] | None = None) -> tuple[str, str]:
  """('ok'|'mismatch'|'error', detail) for one program, in this process. An exception that the device under
  test did not raise is refgrad's own and propagates. The (op, dtype) pairs of a checked program's kernels are
  added to `coverage`, and a transcendental root's ULP errors to `ulp` ((op, dtype) -> {bucket: lanes}). With
  `opts`, the device runs each kernel under a random legal opt list (random_opts_seeded_by). `on_item(index)` is
  told which schedule item runs next (check_against_reference); `schedule`: the program's, planned by
  prepare_programs."""
  if Device[device].graph is not None:
    return run_graph_one(program, device, coverage)
  chooser = random_opts_seeded_by(program.to_python(), device) if opts else None
  measured = transcendental_root(program) if ulp is not None else None
  try:
    report = check_against_reference(program.run, *program.inputs, device=device, opts=chooser,
                                     keep_lanes=measured is not None, on_item=on_item, schedule=schedule)
  except ReferenceMismatch as e:
    return "mismatch", str(e)
  except Exception as e:
    if not raised_by_device(e):
      raise
    return "error", traceback.format_exc(limit=6)
  if coverage is not None:
    for kernel in report.kernels:
      if kernel.ast is not None:  # None: a transfer between devices
        coverage |= kernel_pairs(kernel.ast)
  if measured is not None:
    add_histogram(ulp.setdefault(measured, {}), report.kernels[-1].lanes.verdicts.histogram())
  return "ok", ""


# device runs a graph finding's shrink may take: each compiles a graph (about a second on torch.compile), and the
# campaign's own shrinking (hypothesis) runs a finding's smaller programs again
SHRINK_RUNS = 12


def run_graph_one(program: Any, device: str, coverage: set[tuple[str, str]] | None = None) -> tuple[str, str]:
  """run_one on a graph device: the program computed whole and compared over the whole graph, a difference shrunk
  (graph_check.py). ('unsupported', why) for a program with an op the device declares it cannot compute: not a
  finding."""
  try:
    report = check_graph_against_reference(program.run, *program.inputs, device=device, budget=SHRINK_RUNS)
  except GraphMismatch as e:
    return "mismatch", str(e)
  except UnsupportedOpError as e:
    return "unsupported", str(e)
  except Exception as e:
    if not raised_by_graph_device(e):
      raise
    return "error", traceback.format_exc(limit=6)
  if coverage is not None:
    for root in report.roots:
      coverage |= kernel_pairs(root)
  return "ok", ""
