"""A graph written out as the tinygrad program the rules build: export.py's steps run on recorders instead of
tinygrad Tensors, and each Tensor method they call becomes one line of Python (`v7 = v5.alu(Ops.ADD, v6)`). What a
failing report shows as the device's code (`render`), and the body of a standalone reproducer (standalone.py)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from refgrad.uop import UOp
from refgrad_tinygrad.export import tinygrad_function
from refgrad_tinygrad.targets import Target


def literal(value: Any) -> str:
  """Python source for an argument of a recorded call: recorders by name, floats exactly (nan and inf too),
  tinygrad's dtypes and Ops by their repr (`dtypes.float`, `Ops.ADD`)."""
  if isinstance(value, Recorder):
    return value.name
  if isinstance(value, float) and not math.isfinite(value):
    return f"float({str(value)!r})"
  if isinstance(value, (tuple, list)):
    inner = ", ".join(literal(v) for v in value)
    return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else \
      (f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
  return repr(value)


class Program:
  """The lines recorded so far."""

  def __init__(self) -> None:
    self.lines: list[str] = []

  def emit(self, expression: str) -> Recorder:
    name = f"v{len(self.lines)}"
    self.lines.append(f"{name} = {expression}")
    return Recorder(self, name)


class Recorder:
  """Stands for a tinygrad Tensor (or the CONSTs' `scalars` maker): every method call is recorded as a line whose
  result is a new recorder."""

  def __init__(self, program: Program, name: str):
    self.program, self.name = program, name

  def __getattr__(self, method: str) -> Any:
    if method.startswith("__"):
      raise AttributeError(method)

    def call(*args: Any, **kwargs: Any) -> Recorder:
      arguments = [literal(a) for a in args] + [f"{k}={literal(v)}" for k, v in kwargs.items()]
      return self.program.emit(f"{self.name}.{method}({', '.join(arguments)})")
    return call


def program_source(outputs: Sequence[UOp], leaves: Sequence[UOp], target: Target, name: str = "program") -> str:
  """`def name(scalars, x0, x1, ...)`: the graph's tinygrad program over its leaves, returning its outputs' Tensors;
  `scalars.scalar(value, dtype)` makes a CONST."""
  program = Program()
  arguments = [Recorder(program, f"x{i}") for i in range(len(leaves))]
  results = tinygrad_function(outputs, leaves, target, Recorder(program, "scalars"))(*arguments)
  body = program.lines + [f"return {', '.join(literal(r) for r in results)},"]
  header = f"def {name}({', '.join(['scalars'] + [a.name for a in arguments])}):"
  return "\n".join([header] + [f"  {line}" for line in body]) + "\n"
