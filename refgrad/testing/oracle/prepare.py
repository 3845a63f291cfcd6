"""Compile ahead, in one batch, the device's kernels that several checks against the reference are about to run, so
that a campaign's programs or a check's cases pay one compiler run for many kernels (DeviceImpl.prepare) instead of
one each."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from refgrad.codegen.contract import OptList
from refgrad.registry import Device
from refgrad.testing.oracle.reference import device_opts, instance_of, reference_schedule
from refgrad.uop import UOp

# What check_against_reference is given: the program, its inputs and its opts chooser (None: the device's own opts).
# The chooser must be a new one, drawing the same opt lists as the one the check will get.
PlannedCheck = tuple[Callable[..., Any], tuple, Callable[[UOp], OptList] | None]


def prepare_checks(device: str, checks: Iterable[PlannedCheck]) -> None:
  """Compile and load at once every kernel `check_against_reference(fn, *inputs, device=device, opts=opts)` will
  run on `device` (on each of its instances) for each planned check. This only saves time and never raises: a
  kernel that fails to compile or load, or a program that fails to schedule, fails in its check as it would
  without this."""
  device = Device.canonicalize(device)
  if Device[device].compiler is None:  # an interpreter has nothing to compile
    return
  kernels: dict[str, list[tuple[UOp, OptList | None]]] = defaultdict(list)
  for fn, inputs, opts in checks:
    try:
      items = reference_schedule(fn, *inputs)
      for item in (i for i in items if not i.is_transfer):
        kernels[instance_of(device, item.buffers[0].device)].append((item.ast, device_opts(item, device, opts)))
    except Exception:  # the check itself raises it, where it is a finding or a failing cell
      continue
  for instance, planned in kernels.items():
    Device[instance].prepare(planned)
