"""refgrad's tensor-level graph as tinygrad ops: one rule per op (RULES), the tinygrad counterpart of the graph
evaluator's EVALUATORS (refgrad/interp/graph.py), each with the dtype semantics of refgrad/alu.py (docs/SPEC.md).

A rule takes a graph node and the target device and returns a *step*: a function of the node's sources' tinygrad
Tensors that builds the node with tinygrad's own primitives. Most steps are one `Tensor.alu(op, ...)` on tinygrad's
UOp of the same meaning (alu never promotes a dtype, so every value keeps its node's dtype) or one movement op; CONSTs
are tinygrad constants, which its simplifier sees and may fold. tinygrad then schedules, fuses, renders and compiles
the whole graph its own way. The steps only call Tensor methods, so the same rules also write the graph out as a
tinygrad program (program.py).

Where tinygrad's op means something else than SPEC.md, the rule composes SPEC's meaning from tinygrad ops (README.md,
"Where the rules compose"): a guarded integer division (a zero divisor kills the process with SIGFPE), a
NaN-propagating MAX with signed zeros, casts that round once. A node no composition can give is unsupported with the
reason (UNSUPPORTED), never a wrong answer. Where tinygrad's compilers change a result the rules would give, the cell
fails: a finding (README.md, "Disagreements found").
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tinygrad.uop import Ops as TgOps

from refgrad.alu import reduce_identity
from refgrad.dtype import DType, dtypes
from refgrad.graph_device import SHARDED, operand_dtype, rule_gap, step_function
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_tinygrad.casts import SIGNED_OF_SIZE, UNSIGNED_OF_SIZE, cast, equal, logical_not, tg_dtype
from refgrad_tinygrad.targets import Target

Tensor = Any  # a tinygrad Tensor, or program.py's recorder of one
Step = Callable[..., Tensor]
Rule = Callable[[UOp, Target], Step]

# Sharded graphs span several devices; an exported graph runs on one tinygrad device.
NOT_EXPORTED = SHARDED
_NO_FMOD = ("tinygrad has no float remainder: its Ops.CMOD is integer-only (a float CMOD fails tinygrad's UOp "
            "verification), and Tensor.fmod is documented as 'C-style remainder [...] using truncating division', "
            "a - trunc(a / b) * b in tinygrad/mixin/elementwise.py, which is not C's exact fmod once a / b rounds")
# (op, operand dtype) -> why tinygrad cannot compute it as SPEC.md says (README.md, "Unsupported")
UNSUPPORTED: dict[tuple[Ops, DType], str] = {(Ops.MOD, dt): _NO_FMOD for dt in dtypes.floats}


def unsupported_reason(u: UOp) -> str | None:
  """Why tinygrad cannot compute node `u` as SPEC.md says, or None if it can."""
  return rule_gap(u, RULES, UNSUPPORTED)


# ---- small compositions, tinygrad ops only
def _is_nan(x: Tensor) -> Tensor:
  return x.alu(TgOps.CMPNE, x)


def _bits_of(dt: DType) -> Any:
  return tg_dtype(UNSIGNED_OF_SIZE[dt.itemsize])


# ---- ALU ops
def _direct(op: TgOps) -> Callable[[DType, Target], Step]:
  return lambda dt, target: lambda *xs: xs[0].alu(op, *xs[1:])


def _bool_or(bool_op: TgOps, op: TgOps) -> Callable[[DType, Target], Step]:
  """bool ADD is OR and bool MUL AND in SPEC: tinygrad's own bool arithmetic is left out of it."""
  return lambda dt, target: _direct(bool_op if dt == dtypes.bool else op)(dt, target)


def _neg(dt: DType, target: Target) -> Step:
  """tinygrad's own negation, Tensor.neg: `self * (-1)` (its LLVM renderer has no NEG: 'failed to render Ops.NEG')."""
  return lambda x: x.neg()


def _fdiv(dt: DType, target: Target) -> Step:
  """Ops.FDIV where the renderer computes it; the PYTHON emulator has none (KeyError: Ops.FDIV), so there the step is
  tinygrad's own Tensor.div, `a * reciprocal(b)`, what a tinygrad program dividing on PYTHON runs."""
  if target.fdiv:
    return lambda a, b: a.alu(TgOps.FDIV, b)
  return lambda a, b: a.alu(TgOps.MUL, b.alu(TgOps.RECIPROCAL))


def _divisor(a: Tensor, b: Tensor, dt: DType) -> Tensor:
  """b, with 1 in SPEC's UNDEFINED lanes of IDIV and MOD: tinygrad's CPU kernels divide with x86's idiv, which kills
  the process with SIGFPE on a zero divisor and on MIN / -1 (README.md, "Bugs"). a / 1 and a % 1 there are what the
  reference gives (MIN and 0; a zero divisor's lanes are not compared)."""
  bad = equal(b, b.const_like(0))
  if dt.kind == "i":
    bad = bad.alu(TgOps.OR, equal(a, a.const_like(dtypes.min(dt))).alu(TgOps.AND, equal(b, b.const_like(-1))))
  return bad.alu(TgOps.WHERE, b.const_like(1), b)


def _integer_division(op: TgOps) -> Callable[[DType, Target], Step]:
  """CDIV and CMOD are C's `/` and `%`: truncated toward zero, the remainder with the dividend's sign."""
  return lambda dt, target: lambda a, b: a.alu(op, _divisor(a, b, dt))


def _float_max(dt: DType) -> Step:
  """SPEC's MAX on floats from tinygrad's: its MAX is `a < b ? b : a` (so max(1, NaN) is 1, and max(-0.0, 0.0) is
  -0.0); NaN if either is NaN, and of two equal values the bitwise AND of their bits (+0.0 over -0.0)."""
  bits = _bits_of(dt)

  def maximum(a: Tensor, b: Tensor) -> Tensor:
    larger = _is_nan(a).alu(TgOps.WHERE, a, _is_nan(b).alu(TgOps.WHERE, b, a.alu(TgOps.MAX, b)))
    both = a.bitcast(bits).alu(TgOps.AND, b.bitcast(bits)).bitcast(tg_dtype(dt))
    return a.alu(TgOps.CMPNE, b).alu(TgOps.WHERE, larger, both)
  return maximum


def _max(dt: DType, target: Target) -> Step:
  if dt == dtypes.bool:
    return _direct(TgOps.OR)(dt, target)
  return _float_max(dt) if dtypes.is_float(dt) else _direct(TgOps.MAX)(dt, target)


_ALU: dict[Ops, Callable[[DType, Target], Step]] = {
  Ops.NEG: _neg,
  Ops.RECIP: _direct(TgOps.RECIPROCAL),
  Ops.SQRT: _direct(TgOps.SQRT),
  Ops.EXP2: _direct(TgOps.EXP2),
  Ops.LOG2: _direct(TgOps.LOG2),
  Ops.SIN: _direct(TgOps.SIN),
  Ops.TRUNC: _direct(TgOps.TRUNC),
  Ops.ADD: _bool_or(TgOps.OR, TgOps.ADD),
  Ops.MUL: _bool_or(TgOps.AND, TgOps.MUL),
  Ops.FDIV: _fdiv,
  Ops.IDIV: _integer_division(TgOps.CDIV),
  Ops.MOD: _integer_division(TgOps.CMOD),  # floats are UNSUPPORTED
  Ops.MAX: _max,
  Ops.CMPLT: _direct(TgOps.CMPLT),
  Ops.CMPNE: _direct(TgOps.CMPNE),
  Ops.AND: _direct(TgOps.AND),
  Ops.OR: _direct(TgOps.OR),
  Ops.XOR: _direct(TgOps.XOR),
  Ops.SHL: _direct(TgOps.SHL),  # shifts the bit pattern; counts past the width are UNDEFINED in SPEC
  Ops.SHR: _direct(TgOps.SHR),  # arithmetic on signed, logical on unsigned, as C's >>
  Ops.WHERE: _direct(TgOps.WHERE),
}


def _alu(u: UOp, target: Target) -> Step:
  return _ALU[u.op](operand_dtype(u), target)


# ---- casts and leaves
def _cast(u: UOp, target: Target) -> Step:
  src, to = u.src[0].dtype, u.dtype
  if u.op is Ops.BITCAST:
    return lambda x: x.bitcast(tg_dtype(to))  # same item size (alu.exec_bitcast); NaN lanes UNDEFINED
  return lambda x: cast(x, src, to)


def _const(u: UOp, target: Target) -> Step:
  """A CONST as a tinygrad constant of its exact dtype (numpy's conversion, as the graph evaluator's), made by the
  DEVICE step's `scalars`."""
  value, dt = np.array(u.arg, dtype=u.dtype.np).item(), tg_dtype(u.dtype)
  return lambda scalars: scalars.scalar(value, dt)


# ---- movement
def _flip(u: UOp, target: Target) -> Step:
  axes = tuple(i for i, flipped in enumerate(u.arg) if flipped)
  return lambda x: x.flip(axes) if axes else x


def _movement(method: str) -> Rule:
  return lambda u, target: lambda x: getattr(x, method)(tuple(u.arg))


# ---- reductions
def _order_key(x: Tensor, dt: DType) -> Tensor:
  """A float's bits as a signed integer ordered as the float is (-0.0 just below +0.0): a negative float's bits with
  all but the sign flipped. Its own inverse."""
  signed = SIGNED_OF_SIZE[dt.itemsize]
  bits = x.bitcast(tg_dtype(signed))
  flip = bits.alu(TgOps.SHR, bits.const_like(8 * dt.itemsize - 1)).alu(TgOps.AND, bits.const_like(dtypes.max(signed)))
  return bits.alu(TgOps.XOR, flip)


def _float_max_reduce(dt: DType) -> Callable[[Tensor, tuple[int, ...], tuple[int, ...]], Tensor]:
  """SPEC's max reduction of floats: tinygrad's drops a NaN after the first term and keeps a -0.0 over a later +0.0
  (its MAX), so the maximum is taken of the order keys (an exact integer max) and NaN put where any term is NaN."""
  def reduce(x: Tensor, axes: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
    key = _order_key(x, dt)._rop(TgOps.MAX, axes).reshape(shape)
    top = _order_key(key.bitcast(tg_dtype(dt)), dt).bitcast(tg_dtype(dt))  # key's bits are a float's
    any_nan = _is_nan(x)._rop(TgOps.MAX, axes).reshape(shape)
    return any_nan.alu(TgOps.WHERE, top.const_like(float("nan")), top)
  return reduce


def _plain_reduce(op: TgOps) -> Callable[[Tensor, tuple[int, ...], tuple[int, ...]], Tensor]:
  return lambda x, axes, shape: x._rop(op, axes).reshape(shape)


def _all_reduce(x: Tensor, axes: tuple[int, ...], shape: tuple[int, ...]) -> Tensor:
  """bool MUL (all): no term False."""
  return logical_not(logical_not(x)._rop(TgOps.MAX, axes).reshape(shape))


def _reducer(op: Ops, dt: DType) -> Callable[[Tensor, tuple[int, ...], tuple[int, ...]], Tensor]:
  if dt == dtypes.bool:
    return _all_reduce if op is Ops.MUL else _plain_reduce(TgOps.MAX)  # ADD and MAX are any
  if op is Ops.MAX and dtypes.is_float(dt):
    return _float_max_reduce(dt)
  return _plain_reduce({Ops.ADD: TgOps.ADD, Ops.MUL: TgOps.MUL, Ops.MAX: TgOps.MAX}[op])  # ints wrap in their dtype


def _reduce(u: UOp, target: Target) -> Step:
  op, axes = u.arg
  shape = tuple(u.shape)
  if any(u.src[0].shape[a] == 0 for a in axes):  # an empty reduction is its identity, of the reduction's shape
    value = np.array(reduce_identity(op, u.dtype), u.dtype.np).item()
    return lambda x: x._rop(TgOps.MAX, tuple(axes)).reshape(shape).const_like(value)
  fold = _reducer(op, u.dtype)
  return lambda x: fold(x, tuple(axes), shape)  # keeps the reduced dims as size 1


def _same(u: UOp, target: Target) -> Step:
  return lambda x, *rest: x


RULES: dict[Ops, Rule] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast,
  Ops.CONST: _const,
  Ops.DEVICE: lambda u, target: None,  # replaced by the scalars factory when the function is built
  Ops.RESHAPE: _movement("reshape"),
  Ops.PERMUTE: _movement("permute"),
  Ops.EXPAND: _movement("expand"),
  Ops.PAD: _movement("pad"),  # zeros (+0.0, False) outside
  Ops.SHRINK: _movement("shrink"),
  Ops.FLIP: _flip,
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: _same,  # values, not layouts: tinygrad schedules and fuses its own way
  Ops.DETACH: _same,
  Ops.CUSTOM_GRAD: _same,  # its value is src[0]; the others are its gradient's inputs
  Ops.COPY: _same,  # one tinygrad device holds the whole graph
}


# ---- the whole graph
def tinygrad_function(outputs: Sequence[UOp], leaves: Sequence[UOp], target: Target,
                      scalars: Any) -> Callable[..., tuple[Tensor, ...]]:
  """A function building `outputs` from tinygrad Tensors of `leaves` (a graph's input PARAMs, reshaped by the graph
  itself, in that order); `scalars.scalar(value, dtype)` makes each CONST. The caller has asked unsupported_reason
  of every node."""
  def step_of(u: UOp) -> Step:
    return (lambda: scalars) if u.op is Ops.DEVICE else RULES[u.op](u, target)
  return step_function(outputs, leaves, step_of)
