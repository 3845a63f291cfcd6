"""Findings are named by a signature, so the same failure found twice (or by two workers) is one finding."""
from __future__ import annotations

import hashlib
from typing import Any

from refgrad.schedule import ScheduleItem
from refgrad.testing.fuzz.coverage import kernel_pairs
from refgrad.testing.oracle.reference import reference_schedule
from refgrad.uop import UOp


def normalized_form(ast: UOp) -> str:
  """What a kernel computes, without its sizes, layout, constants or order: the (op, dtype) pairs it executes
  (kernel_pairs). Hypothesis shrinks each failing batch to a smallest program, so the same bug found again, by any
  worker, usually fails in a kernel of the same form."""
  return " ".join(f"{op}:{dtype}" for op, dtype in sorted(kernel_pairs(ast))) or "no ops"


def _signature(kind: str, items: list[ScheduleItem]) -> str:
  form = " | ".join(item.ast.op.name if item.is_transfer else normalized_form(item.ast) for item in items)
  return hashlib.sha256(f"{kind}\n{form}".encode()).hexdigest()


def finding_signature(kind: str, program: Any, kernel: int) -> str:
  """sha256 of the kind of failure and the normalized form of the kernel it happened in (the reference's schedule
  item `kernel`, or every kernel of the program when the worker died before naming one)."""
  items = reference_schedule(program.run, *program.inputs)
  return _signature(kind, [items[kernel]] if 0 <= kernel < len(items) else items)


def kernel_of(kind: str, program: Any, signature: str) -> int | None:
  """The kernel a finding happened in (its schedule item), found again from its signature (the first of that form);
  None when it happened in a transfer, or the worker died before naming an item."""
  items = reference_schedule(program.run, *program.inputs)
  return next((i for i, item in enumerate(items) if not item.is_transfer and _signature(kind, [item]) == signature),
              None)
