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
    return _call_source(self)


def array_source(x: np.ndarray) -> str:
  """Python source that rebuilds x: its values, dtype and shape (an empty array's shape is not in its values: a
  (0, 3) array's tolist() is [], which would come back as shape (0,))."""
  if x.dtype.name == "bfloat16":  # numpy has no literal for it: through float32, which holds every bfloat16 value
    text = f"np.array({x.astype('float32').tolist()!r}, dtype=np.float32).astype(ml_dtypes.bfloat16)"
  else:
    text = f"np.array({x.tolist()!r}, dtype=np.dtype({str(x.dtype)!r}))"
  return text + (f".reshape({x.shape!r})" if x.size == 0 else "")


def _call_source(step: Step) -> str:
  """`v0.add(v1)`: a step as Python source (dtypes print as `dtypes.name`)."""
  shown = [f"v{a}" if (i < len(step.refs) and step.refs[i]) else repr(a) for i, a in enumerate(step.args)]
  shown += [f"{k}={v!r}" for k, v in step.kwargs]
  return f"{shown[0]}.{step.method}({', '.join(shown[1:])})"


@dataclass
class TensorProgram:
  """`shard_devices` and `shard_axes`, if given: every input is first sharded over those devices (each along its
  axis, None: copied to each), so every step runs on a tensor over several devices. `symbolic` (a value): every
  input of the first input's shape is first shrunk along dim 0 to Variable("n", 0, size).bind(value), so every step
  runs on a symbolic shape, in kernels compiled for the Variable."""
  inputs: list[np.ndarray]
  steps: list[Step] = field(default_factory=list)
  shard_devices: tuple[str, ...] = ()
  shard_axes: tuple[int | None, ...] = ()
  symbolic: int | None = None

  def build(self, device: str | None = None) -> Any:
    """Replay the program with refgrad on `device`; returns the last value's Tensor."""
    from refgrad.tensor import Tensor
    return self.run(*(Tensor(x, device=device) for x in self.inputs))

  def run(self, *tensors: Any) -> Any:
    """Replay the steps on the given input tensors (for check_against_reference)."""
    values = list(tensors)
    if self.symbolic is not None:
      from refgrad.symbolic_shapes import Variable
      n = Variable("n", 0, self.inputs[0].shape[0]).bind(self.symbolic)
      values = [t.shrink(((0, n),) + (None,) * (t.ndim - 1)) if x.shape == self.inputs[0].shape else t
                for t, x in zip(values, self.inputs)]
    if self.shard_devices:
      values = [t.shard(self.shard_devices, axis=axis) for t, axis in zip(values, self.shard_axes)]
    for step in self.steps:
      args = [values[a] if (i < len(step.refs) and step.refs[i]) else a for i, a in enumerate(step.args)]
      receiver, rest = args[0], args[1:]
      values.append(getattr(receiver, step.method)(*rest, **dict(step.kwargs)))
    return values[-1]

  def to_python(self) -> str:
    """The body of `def program(v0, v1, ...)` that replays this program."""
    first = len(self.inputs)
    lines = self._setup_lines() + [f"v{first + i} = {_call_source(step)}" for i, step in enumerate(self.steps)]
    return "\n".join(lines + [f"return v{first + len(self.steps) - 1}" if self.steps else "return v0"])

  def __repr__(self) -> str:
    lines = [f"v{i} = Tensor({array_source(x)})" for i, x in enumerate(self.inputs)]
    first = len(self.inputs)
    lines += self._setup_lines() + [f"v{first + i} = {step!r}" for i, step in enumerate(self.steps)]
    return "\n".join(lines)

  def _setup_lines(self) -> list[str]:
    lines = []
    if self.symbolic is not None:
      size = self.inputs[0].shape[0]
      lines.append(f"n = Variable('n', 0, {size}).bind({self.symbolic})")
      lines += [f"v{i} = v{i}.shrink(((0, n),) + (None,) * {x.ndim - 1})" for i, x in enumerate(self.inputs)
                if x.shape == self.inputs[0].shape]
    return lines + [f"v{i} = v{i}.shard({self.shard_devices!r}, axis={axis!r})"
                    for i, axis in enumerate(self.shard_axes)]


def dtype_of(x: np.ndarray) -> DType:
  return dtypes.from_np(x.dtype)


def literal(value: Any) -> str:
  """Python source for a scalar, including nan and infinities."""
  if isinstance(value, float) and not np.isfinite(value):
    return f"float('{value}')"
  return repr(value)


@dataclass(frozen=True)
class Expr:
  """A node of a random kernel: an input (`op == "INPUT"`, `index`), a constant (`op == "CONST"`, `value`, the same
  in every lane) or a primitive op over children."""
  op: str
  dtype: DType
  children: tuple[Expr, ...] = ()
  index: int = 0
  value: Any = None

  def __repr__(self) -> str:
    if self.op == "INPUT":
      return f"in{self.index}"
    if self.op == "CONST":
      return f"{literal(self.value)}<{self.dtype.name}>"
    inner = ", ".join(repr(c) for c in self.children)
    return f"{self.op}<{self.dtype.name}>({inner})"


REDUCE_PREFIX = "REDUCE_"  # an Expr op "REDUCE_ADD" reduces its child's lanes to one with ADD


@dataclass
class RandomKernel:
  """Primitive ops over 1-D inputs, built as UOps directly (below the Tensor API): one fused kernel, whose root
  may reduce all lanes to one."""
  inputs: list[np.ndarray]
  root: Expr

  def build(self, device: str | None = None) -> Any:
    from refgrad.tensor import Tensor
    return self.run(*(Tensor(x, device=device) for x in self.inputs))

  def run(self, *tensors: Any) -> Any:
    from refgrad.uop import Ops, UOp

    def lower(e: Expr) -> UOp:
      if e.op == "INPUT":
        return tensors[e.index].uop
      if e.op == "CONST":
        return tensors[0]._const(e.value, e.dtype).reshape(1).expand(tensors[0].shape).uop
      if e.op.startswith(REDUCE_PREFIX):
        return UOp(Ops.REDUCE_AXIS, e.dtype, (lower(e.children[0]),), (Ops[e.op[len(REDUCE_PREFIX):]], (0,)))
      return UOp(Ops[e.op], e.dtype, tuple(lower(c) for c in e.children))
    return tensors[0]._from(lower(self.root))

  def to_python(self) -> str:
    def source(e: Expr) -> str:
      if e.op == "INPUT":
        return f"v{e.index}.uop"
      if e.op == "CONST":
        return f"v0._const({literal(e.value)}, dtypes.{e.dtype.name}).reshape(1).expand(v0.shape).uop"
      if e.op.startswith(REDUCE_PREFIX):
        op = e.op[len(REDUCE_PREFIX):]
        return f"UOp(Ops.REDUCE_AXIS, dtypes.{e.dtype.name}, ({source(e.children[0])},), (Ops.{op}, (0,)))"
      return f"UOp(Ops.{e.op}, dtypes.{e.dtype.name}, ({', '.join(source(c) for c in e.children)},))"
    return f"return v0._from({source(self.root)})"

  def __repr__(self) -> str:
    lines = [f"in{i} = {array_source(x)}" for i, x in enumerate(self.inputs)]
    return "\n".join(lines + [f"out = {self.root!r}"])
