"""Running a schedule: compile each kernel for its device (cached) and launch it."""
from __future__ import annotations

from refgrad.codegen.linearize import compile_ast
from refgrad.device import Device
from refgrad.schedule import ScheduleItem
from refgrad.search import opts_for


def run_schedule(items: list[ScheduleItem]) -> None:
  for item in items:
    if item.is_copy:
      dest, src = item.buffers
      dest.copyin(src.numpy())
      continue
    device = Device[item.buffers[0].device]
    program = compile_ast(item.ast, device.caps, opts_for(item.ast, device.name))
    device.get_runner(program)(*(b.handle for b in item.buffers))
