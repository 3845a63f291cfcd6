"""refgrad's tensor-level graph as torch ops: one rule per op (RULES), the torch counterpart of the graph evaluator's
EVALUATORS (refgrad/interp/graph.py), each with the dtype semantics of refgrad/alu.py.

A rule takes a graph node and returns a *step*: a function of the node's sources' tensors that computes the node
with torch ops, closing over plain data only (ints, tuples, torch dtypes, constant tensors), so that torch.compile
traces the whole graph as one function. A node torch cannot compute as SPEC.md says raises Unsupported when the
graph is exported, never a wrong answer when it runs.
"""
from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from refgrad.dtype import DType, dtypes
from refgrad.graph_device import operand_dtype, step_function
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_torch import unsigned
from refgrad_torch.casts import SIGNED_OF_SIZE, cast, from_torch, to_torch, torch_dtype
from refgrad_torch.unsigned import WIDE_UNSIGNED

Step = Callable[..., torch.Tensor]
Rule = Callable[[UOp], Step]


class Unsupported(Exception):
  """torch cannot compute `op` on `dtype` as SPEC.md defines it; `why` says what is missing."""

  def __init__(self, op: Ops, dtype: DType, why: str):
    super().__init__(f"{op.name} on {dtype.name}: {why}")
    self.op, self.dtype, self.why = op, dtype, why


# torch 2.13 has few CPU kernels for uint16/32/64 (unsigned.py composes the missing ones from signed ops); these
# have no such way
UNSUPPORTED: dict[tuple[Ops, DType], str] = dict(unsigned.NO_WAY)
# Sharded graphs span several devices; an exported graph runs on one torch device.
NOT_EXPORTED = {Ops.MULTI: "a tensor over several devices: the graph-device contract has no sharding yet",
                Ops.ALLREDUCE: "a reduction across devices: the graph-device contract has no sharding yet"}


def check_supported(u: UOp) -> None:
  if u.op in NOT_EXPORTED:
    raise Unsupported(u.op, u.dtype, NOT_EXPORTED[u.op])
  if u.op not in RULES:
    raise Unsupported(u.op, u.dtype, "no export rule")
  if (why := UNSUPPORTED.get((u.op, operand_dtype(u)))) is not None:
    raise Unsupported(u.op, operand_dtype(u), why)


# ---- ALU ops
def _div_undefined(a: torch.Tensor, b: torch.Tensor, dtype: DType) -> torch.Tensor:
  """SPEC's UNDEFINED lanes of IDIV and MOD: torch raises ZeroDivisionError on an integer zero divisor, and int32 or
  int64 MIN / -1 kills the process with SIGFPE (x86's idiv traps), so those lanes divide by 1 instead."""
  bad = b == 0
  return bad | ((a == dtypes.min(dtype)) & (b == -1)) if dtype.kind == "i" else bad


def _idiv(a: torch.Tensor, b: torch.Tensor, dtype: DType) -> torch.Tensor:
  safe = torch.where(_div_undefined(a, b, dtype), torch.ones_like(b), b)
  return torch.div(a, safe, rounding_mode="trunc")  # C's quotient; torch's `//` floors


def _mod(a: torch.Tensor, b: torch.Tensor, dtype: DType) -> torch.Tensor:
  if dtype.kind == "f":
    return torch.fmod(a, b)  # C fmod, the sign of the dividend (torch's `%` takes the divisor's)
  return torch.fmod(a, torch.where(_div_undefined(a, b, dtype), torch.ones_like(b), b))


def _float_max(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
  """torch.maximum propagates NaN but returns its first argument for a pair of zeros (maximum(-0.0, +0.0) is -0.0);
  SPEC's MAX (IEEE 754-2019 maximum) is +0.0 in both orders."""
  return torch.where(a == b, torch.where(torch.signbit(a), b, a), torch.maximum(a, b))


def _bool_or_number(on_bool: Step, on_number: Step) -> Callable[[DType], Step]:
  return lambda dtype: on_bool if dtype == dtypes.bool else on_number


# each entry: operand dtype -> step over the sources' tensors
_ALU: dict[Ops, Callable[[DType], Step]] = {
  Ops.NEG: lambda dt: torch.neg,  # ints wrap (-MIN == MIN); floats flip the sign bit
  Ops.RECIP: lambda dt: torch.reciprocal,
  Ops.SQRT: lambda dt: torch.sqrt,
  Ops.EXP2: lambda dt: torch.exp2,
  Ops.LOG2: lambda dt: torch.log2,
  Ops.SIN: lambda dt: torch.sin,
  Ops.TRUNC: lambda dt: torch.trunc,
  Ops.ADD: _bool_or_number(torch.logical_or, torch.add),  # ints wrap modulo 2**bits
  Ops.MUL: _bool_or_number(torch.logical_and, torch.mul),
  Ops.FDIV: lambda dt: torch.div,
  Ops.IDIV: lambda dt: lambda a, b: _idiv(a, b, dt),
  Ops.MOD: lambda dt: lambda a, b: _mod(a, b, dt),
  Ops.MAX: lambda dt: torch.logical_or if dt == dtypes.bool else _float_max if dt.kind == "f" else torch.maximum,
  Ops.CMPLT: lambda dt: torch.lt,
  Ops.CMPNE: lambda dt: torch.ne,
  Ops.AND: lambda dt: torch.bitwise_and,
  Ops.OR: lambda dt: torch.bitwise_or,
  Ops.XOR: lambda dt: torch.bitwise_xor,
  Ops.SHL: lambda dt: torch.bitwise_left_shift,  # shifts the bit pattern: signed values wrap
  Ops.SHR: lambda dt: torch.bitwise_right_shift,  # arithmetic on signed, logical on unsigned
  Ops.WHERE: lambda dt: torch.where,
}


def _alu(u: UOp) -> Step:
  dtype = operand_dtype(u)
  return (unsigned.ALU if dtype in WIDE_UNSIGNED and u.op in unsigned.ALU else _ALU)[u.op](dtype)


# ---- casts and leaves
def _cast(u: UOp) -> Step:
  src, to = u.src[0].dtype, u.dtype
  if u.op is Ops.BITCAST:
    return lambda x: x.view(torch_dtype(to))  # same item size (alu.exec_bitcast); NaN lanes are UNDEFINED
  return lambda x: cast(x, src, to)


def _const(u: UOp) -> Step:
  value = to_torch(np.array(u.arg, dtype=u.dtype.np), u.dtype)  # numpy's conversion, as the graph evaluator's
  return lambda *srcs: value


# ---- movement
def _pad(u: UOp) -> Step:
  widths = [w for before, after in reversed(u.arg) for w in (before, after)]  # torch lists the last dim first
  return lambda x: torch.constant_pad_nd(x, widths)  # zeros (+0.0, False) outside, as np.pad


def _shrink(u: UOp) -> Step:
  region = tuple(slice(start, end) for start, end in u.arg)
  return lambda x: x[region]


def _flip(u: UOp) -> Step:
  dims = [i for i, flipped in enumerate(u.arg) if flipped]
  if u.dtype not in WIDE_UNSIGNED:
    return lambda x: torch.flip(x, dims)
  as_signed, back = SIGNED_OF_SIZE[u.dtype.itemsize], torch_dtype(u.dtype)  # no flip kernel: move the bits
  return lambda x: torch.flip(x.view(as_signed), dims).view(back)


# ---- reductions
def _zero_max_sign(out: torch.Tensor, x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
  """amax keeps whichever zero it met first; SPEC's maximum of zeros is +0.0 if any term is +0.0."""
  positive_zero = ((x == 0) & ~torch.signbit(x)).any(dim=axes, keepdim=True)
  signed_zero = torch.where(positive_zero, torch.zeros_like(out), -torch.zeros_like(out))
  return torch.where(out == 0, signed_zero, out)


def _prod(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
  for axis in axes:  # torch.prod takes one dim at a time
    x = torch.prod(x, axis, keepdim=True, dtype=x.dtype)
  return x


def _float_max_reduce(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
  return _zero_max_sign(torch.amax(x, axes, keepdim=True), x, axes)  # amax propagates NaN


# (reduce op, kind) -> step over (tensor, axes); sums and products stay in their dtype: torch.sum would promote ints
# to int64 (the low bits are the same, but the dtype is not) and dtype= keeps them, wrapping
_REDUCE: dict[tuple[Ops, str], Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]] = {
  (Ops.ADD, "b"): lambda x, axes: torch.any(x, dim=axes, keepdim=True),
  (Ops.MAX, "b"): lambda x, axes: torch.any(x, dim=axes, keepdim=True),
  (Ops.MUL, "b"): lambda x, axes: torch.all(x, dim=axes, keepdim=True),
  **{(Ops.ADD, kind): lambda x, axes: torch.sum(x, axes, keepdim=True, dtype=x.dtype) for kind in "iuf"},
  **{(Ops.MUL, kind): _prod for kind in "iuf"},
  (Ops.MAX, "i"): lambda x, axes: torch.amax(x, axes, keepdim=True),
  (Ops.MAX, "u"): lambda x, axes: torch.amax(x, axes, keepdim=True),
  (Ops.MAX, "f"): _float_max_reduce,
}


def _reduce(u: UOp) -> Step:
  op, axes = u.arg
  if any(u.src[0].shape[a] == 0 for a in axes):  # an empty reduction is its identity (amax of nothing raises)
    from refgrad.alu import reduce_identity
    value = to_torch(np.full(u.shape, reduce_identity(op, u.dtype), u.dtype.np), u.dtype)
    return lambda x: value
  fold = unsigned.reduce_step(op, u.dtype) if u.dtype in WIDE_UNSIGNED else _REDUCE[(op, u.dtype.kind)]
  return lambda x: fold(x, tuple(axes))


def _same(u: UOp) -> Step:
  return lambda x, *rest: x


RULES: dict[Ops, Rule] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast,
  Ops.CONST: _const,
  Ops.DEVICE: lambda u: lambda: None,  # only names where a CONST lives; the CONST's rule does not read it
  Ops.RESHAPE: lambda u: lambda x: x.reshape(u.arg),
  Ops.PERMUTE: lambda u: lambda x: x.permute(u.arg),
  Ops.EXPAND: lambda u: lambda x: x.expand(u.arg),
  Ops.PAD: _pad,
  Ops.SHRINK: _shrink,
  Ops.FLIP: _flip,
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: _same,  # values, not layouts: torch decides its own
  Ops.DETACH: _same,
  Ops.CUSTOM_GRAD: _same,  # its value is src[0]; the others are its gradient's inputs
  Ops.COPY: _same,  # one torch device holds the whole graph
}


# ---- the whole graph (of concrete sizes: the caller binds symbolic ones, as the graph evaluator does first)
def unsupported_reason(u: UOp) -> str | None:
  """Why torch cannot compute node `u` as SPEC.md says, or None if it can."""
  try:
    check_supported(u)
  except Unsupported as e:
    return e.why
  return None


def _checked_step(u: UOp) -> Step:
  check_supported(u)
  return RULES[u.op](u)


def torch_function(outputs: list[UOp], leaves: list[UOp]) -> Callable[..., tuple[torch.Tensor, ...]]:
  """A function computing `outputs` with torch ops from the tensors of `leaves` (nodes the rules do not compute:
  BUFFERs, or a graph's input PARAMs), given in that order. Raises Unsupported for a node torch cannot compute as
  SPEC.md says."""
  return step_function(outputs, leaves, _checked_step)


def to_torch_function(root: UOp) -> tuple[Callable[..., torch.Tensor], list[UOp]]:
  """A function computing `root` with torch ops from its BUFFER leaves' tensors, given in the order of the returned
  list of BUFFER nodes. Raises Unsupported for a node torch cannot compute as SPEC.md says."""
  leaves = [u for u in root.toposort if u.op is Ops.BUFFER]
  function = torch_function([root], leaves)
  return lambda *tensors: function(*tensors)[0], leaves


def inductor(function: Callable[..., Any], name: str, **options: Any) -> Callable[..., Any]:
  """`function` compiled whole by torch.compile (Inductor). Dynamo keeps compiled graphs per code object and, past
  its recompile limit, runs a function eagerly: so each graph gets a code object of its own (named `name`), and
  hitting the limit raises instead of falling back."""
  own = types.FunctionType(function.__code__.replace(co_name=name), function.__globals__, name,
                           function.__defaults__, function.__closure__)
  if hasattr(torch._dynamo.config, "fail_on_recompile_limit_hit"):
    torch._dynamo.config.fail_on_recompile_limit_hit = True
  return torch.compile(own, fullgraph=True, dynamic=False, **options)


def run_on_torch(root: UOp, compile: bool = False) -> np.ndarray:
  """`root`'s value computed by torch on the CPU from its buffers' values: eagerly, or compiled whole by
  torch.compile (Inductor)."""
  fn, leaves = to_torch_function(root)
  inputs = [to_torch(b.arg.numpy(), b.dtype).reshape(b.shape) for b in leaves]
  if compile:
    fn = inductor(fn, f"graph_{root.digest.hex()[:12]}")
  with torch.no_grad():
    out = fn(*inputs)
  return np.broadcast_to(from_torch(out, root.dtype), root.shape)
