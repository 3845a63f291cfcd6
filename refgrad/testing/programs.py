"""Random tensor programs: a list of steps over numbered values, replayable on any device.

A program is data (so hypothesis can shrink it and print it readably): `inputs` are numpy arrays, each step
applies one Tensor method to earlier values and appends the result. `build()` replays it with refgrad.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes


@dataclass(frozen=True)
class Step:
  method: str            # a Tensor method name, e.g. "add", "reshape", "sum"
  args: tuple[Any, ...]  # ints refer to earlier values when the matching entry of `refs` is True
  refs: tuple[bool, ...] = ()
  kwargs: tuple[tuple[str, Any], ...] = ()

  def __repr__(self) -> str:
    shown = [f"v{a}" if (i < len(self.refs) and self.refs[i]) else repr(a) for i, a in enumerate(self.args)]
    shown += [f"{k}={v!r}" for k, v in self.kwargs]
    return f"{self.method}({', '.join(shown)})"


@dataclass
class TensorProgram:
  inputs: list[np.ndarray]
  steps: list[Step] = field(default_factory=list)

  def build(self, device: str | None = None) -> Any:
    """Replay the program with refgrad on `device`; returns the last value's Tensor."""
    from refgrad.tensor import Tensor
    values = [Tensor(x, device=device) for x in self.inputs]
    for step in self.steps:
      args = [values[a] if (i < len(step.refs) and step.refs[i]) else a for i, a in enumerate(step.args)]
      receiver, rest = args[0], args[1:]
      values.append(getattr(receiver, step.method)(*rest, **dict(step.kwargs)))
    return values[-1]

  def __repr__(self) -> str:
    lines = [f"v{i} = Tensor({x.tolist()!r}, dtype={x.dtype})" for i, x in enumerate(self.inputs)]
    first = len(self.inputs)
    lines += [f"v{first + i} = {step!r}" for i, step in enumerate(self.steps)]
    return "\n".join(lines)


def dtype_of(x: np.ndarray) -> DType:
  return dtypes.from_np(x.dtype)


@dataclass(frozen=True)
class Expr:
  """A node of a random kernel: an input (`op == "INPUT"`, `index`) or a primitive op over children."""
  op: str
  dtype: DType
  children: tuple[Expr, ...] = ()
  index: int = 0

  def __repr__(self) -> str:
    if self.op == "INPUT":
      return f"in{self.index}"
    inner = ", ".join(repr(c) for c in self.children)
    return f"{self.op}<{self.dtype.name}>({inner})"


@dataclass
class RandomKernel:
  """Primitive ops over 1-D inputs, built as UOps directly (below the Tensor API): one fused kernel."""
  inputs: list[np.ndarray]
  root: Expr

  def build(self, device: str | None = None) -> Any:
    from refgrad.tensor import Tensor
    from refgrad.uop import Ops, UOp
    leaves = [Tensor(x, device=device).uop for x in self.inputs]

    def lower(e: Expr) -> UOp:
      if e.op == "INPUT":
        return leaves[e.index]
      return UOp(Ops[e.op], e.dtype, tuple(lower(c) for c in e.children))
    return Tensor(lower(self.root))

  def __repr__(self) -> str:
    lines = [f"in{i} = np.array({x.tolist()!r}, dtype={x.dtype})" for i, x in enumerate(self.inputs)]
    return "\n".join(lines + [f"out = {self.root!r}"])
