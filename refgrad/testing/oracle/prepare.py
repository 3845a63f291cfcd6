"""Compile ahead, in one batch, the device's kernels that several checks against the reference are about to run, so
that a campaign's programs or a check's cases pay one compiler run for many kernels (DeviceImpl.prepare) instead of
one each. The schedules planned for it are the checks' own (check_against_reference(schedule=...)), so no program
is built and scheduled twice."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from refgrad.codegen.contract import OptList
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile_each
from refgrad.registry import Device
from refgrad.schedule import ScheduleItem
from refgrad.testing.oracle.reference import device_opts, instance_of, reference_schedule
from refgrad.uop import UOp

# What check_against_reference is given: the program, its inputs and its opts chooser (None: the device's own opts).
# The chooser must be a new one, drawing the same opt lists as the one the check will get.
PlannedCheck = tuple[Callable[..., Any], tuple, Callable[[UOp], OptList] | None]


@dataclass
class Plan:
  """What the checks will run: each one's schedule (None where building it raised: the check raises it again) and
  the kernels of them all by the device's instance that runs them, with their opts."""
  schedules: list[list[ScheduleItem] | None] = field(default_factory=list)
  kernels: dict[str, list[tuple[UOp, OptList | None]]] = field(default_factory=lambda: defaultdict(list))


def plan_checks(device: str, checks: Iterable[PlannedCheck]) -> Plan:
  """The schedule of each planned check and the kernels it runs on `device` (nothing runs or compiles)."""
  device, plan = Device.canonicalize(device), Plan()
  for fn, inputs, opts in checks:
    try:
      items = reference_schedule(fn, *inputs)
      kernels = [(instance_of(device, item.buffers[0].device), item.ast, device_opts(item, device, opts))
                 for item in items if not item.is_transfer]
    except Exception:  # the check itself raises it, where it is a finding or a failing cell
      plan.schedules.append(None)
      continue
    plan.schedules.append(items)
    for instance, ast, chosen in kernels:
      plan.kernels[instance].append((ast, chosen))
  return plan


def prepare_checks(device: str, checks: Iterable[PlannedCheck], plan: Plan | None = None) -> Plan | None:
  """Compile and load at once every kernel `check_against_reference(fn, *inputs, device=device, opts=opts)` will
  run on `device` (on each of its instances) for each planned check (`plan`: plan_checks' of them, if made
  already); returns the plan, whose schedules the checks may run, or None on an interpreter (nothing to compile,
  nothing planned). This only saves time and never raises: a kernel that fails to compile or load, or a program
  that fails to schedule, fails in its check as it would without this."""
  if Device[device].compiler is None:
    return None
  plan = plan_checks(device, checks) if plan is None else plan
  for instance, planned in plan.kernels.items():
    Device[instance].prepare(planned)
  return plan


def kernel_sources(plan: Plan) -> list[tuple[Any, list[str]]]:
  """The plan's kernels as their compilers take them: (compiler, sources) per instance of the (compiled) device. A
  kernel that does not render is left out (its check raises its error)."""
  compiled = []
  for instance, planned in plan.kernels.items():
    impl, sources = Device[instance], []
    for ast, opts in planned:
      try:
        program = compile_ast(ast, impl.caps, opts)
        impl.check_dtypes(program)
        sources.append(impl.render(program))
      except Exception:
        continue
    compiled.append((impl.compiler, list(dict.fromkeys(sources))))
  return compiled


def compile_sources(compiled: list[tuple[Any, list[str]]]) -> None:
  """kernel_sources' kernels compiled into the compile cache, where DeviceImpl.prepare and run_kernel find them
  (from a thread of its own where the compiler is `isolated`: fuzz/program_check.CompileAhead)."""
  for compiler, sources in compiled:
    cached_compile_each(compiler, sources)


def growing_batches(count: int, largest: int) -> list[range]:
  """range(count) cut into consecutive batches of 1, 2, 4, ... items, then `largest` each. Compiling each batch's
  kernels at once, a run that stops at its first failure has compiled ahead at most about as many as it ran (an
  early failure is found as soon as with no batches), and a long run pays one compiler run per `largest`."""
  batches, start, size = [], 0, 1
  while start < count:
    batches.append(range(start, min(start + size, count)))
    start, size = start + size, min(2 * size, largest)
  return batches
