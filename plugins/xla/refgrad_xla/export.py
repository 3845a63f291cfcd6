"""refgrad's tensor-level graph as jax/XLA ops: one rule per op (RULES), the XLA counterpart of the graph evaluator's
EVALUATORS (refgrad/interp/graph.py), each with the dtype semantics of refgrad/alu.py.

A rule takes a graph node and returns a *step*: a function of the node's sources' arrays that computes the node with
jax.lax ops, closing over plain data only, so that jax.jit traces the whole graph as one function. The ops are
lax's, not jax.numpy's: lax never promotes a dtype, so every value keeps the dtype its node has. 64-bit types are
turned on for the whole process (jax_enable_x64), else int64, uint64 and float64 would silently be 32-bit.

The translation is straightforward on purpose: the device puts XLA's compiler, as jax.jit runs it by default, under
the oracle. CONSTs are constants of the traced function (closed-over arrays of their exact dtype), which XLA sees and
may fold; no op is hidden from XLA's algebraic simplifier (no optimization barriers). Where XLA's rewrites change a
result SPEC.md defines, the cell fails and is a finding (README.md, "Disagreements found"; the tests pin them in
XLA_DIFFERS). The rules compose only what an op *means*: single-rounding casts, EXP2/LOG2 within SPEC's ULP bounds,
NaN-propagating max reductions.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from refgrad.alu import reduce_identity
from refgrad.dtype import DType, dtypes
from refgrad.graph_device import SHARDED, operand_dtype, rule_gap, step_function
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_xla.casts import cast

jax.config.update("jax_enable_x64", True)

Array = jax.Array
Step = Callable[..., Array]
Rule = Callable[[UOp], Step]

# Sharded graphs span several devices; an exported graph runs on one XLA CPU device.
NOT_EXPORTED = SHARDED
# (op, operand dtype) -> why XLA cannot compute it as SPEC.md says; none found so far (README.md, "Unsupported")
UNSUPPORTED: dict[tuple[Ops, DType], str] = {}


def unsupported_reason(u: UOp) -> str | None:
  """Why XLA cannot compute node `u` as SPEC.md says, or None if it can."""
  return rule_gap(u, RULES, UNSUPPORTED)


# ---- ALU ops
def _bool_or_number(on_bool: Step, on_number: Step) -> Callable[[DType], Step]:
  return lambda dt: on_bool if dt == dtypes.bool else on_number


def _recip(x: Array) -> Array:
  return lax.div(jnp.ones_like(x), x)


def _in_float64(fn: Step, dt: DType) -> Step:
  """A transcendental of a float16/bfloat16/float32 value computed in float64 and rounded once (SPEC's reference is
  numpy's float64 result rounded once): XLA's own float32 exp2 is 18 ULP off at 100.0, its float16 exp2(1.5) 2.83."""
  if dt == dtypes.float64:
    return fn
  return lambda x: cast(fn(lax.convert_element_type(x, jnp.float64)), dtypes.float64, dt)


def _log2(x: Array) -> Array:
  return lax.div(lax.log(x), jnp.full_like(x, np.log(2.0)))  # lax has no log2


def _exp2(x: Array) -> Array:
  """2**x as 2**n * 2**f with n = round(x), |f| <= 0.5: XLA's float64 exp2 is exp(x * ln 2), whose product's
  rounding error grows with x (8 ULP at 100.0); exp(f * ln 2) is within an ULP, and the powers of two are exact
  (two factors, so that 2**n neither overflows nor underflows where the result does not)."""
  n = lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
  finite = lax.is_finite(x)
  n = jnp.where(finite, lax.clamp(-2200.0, n, 2200.0), jnp.zeros_like(x))
  f = jnp.where(finite, x - n, x)  # inf and NaN go through exp: exp2(-inf) is +0, exp2(inf) inf
  whole = lax.convert_element_type(n, jnp.int64)
  half = lax.shift_right_arithmetic(whole, jnp.int64(1))
  return lax.exp(f * np.log(2.0)) * _power_of_two(half) * _power_of_two(whole - half)


def _power_of_two(k: Array) -> Array:
  """2**k as a float64 for -1100 < k < 1100 (0 and inf past the range), from its exponent bits."""
  biased = lax.clamp(jnp.int64(0), k + 1023, jnp.int64(2047))
  return lax.bitcast_convert_type(biased << 52, jnp.float64)


def _shr(dt: DType) -> Step:
  return lax.shift_right_arithmetic if dt.kind == "i" else lax.shift_right_logical  # sign-filling on signed only


# each entry: operand dtype -> step over the sources' arrays. XLA defines what C leaves undefined (its operation
# semantics): integer x / 0 is -1 and x % 0 is x, MIN / -1 is MIN and MIN % -1 is 0, shifts by >= the width give 0
# (or the sign): no trap, and those lanes are UNDEFINED in SPEC, so the plain ops stand.
_ALU: dict[Ops, Callable[[DType], Step]] = {
  Ops.NEG: lambda dt: lax.neg,  # ints wrap (-MIN == MIN); floats flip the sign bit
  Ops.RECIP: lambda dt: _recip,
  Ops.SQRT: lambda dt: lax.sqrt,
  Ops.EXP2: lambda dt: _in_float64(_exp2, dt),
  Ops.LOG2: lambda dt: _in_float64(_log2, dt),
  Ops.SIN: lambda dt: lax.sin,
  Ops.TRUNC: lambda dt: jnp.trunc,  # keeps -0.0 (trunc(-0.5) is -0.0), inf and NaN
  Ops.ADD: _bool_or_number(lax.bitwise_or, lax.add),  # ints wrap modulo 2**bits
  Ops.MUL: _bool_or_number(lax.bitwise_and, lax.mul),
  Ops.FDIV: lambda dt: lax.div,
  Ops.IDIV: lambda dt: lax.div,  # C's quotient, truncated toward zero
  Ops.MOD: lambda dt: lax.rem,  # C's % on ints, C fmod on floats: the sign of the dividend
  Ops.MAX: _bool_or_number(lax.bitwise_or, lax.max),  # NaN-propagating; max(-0.0, +0.0) is +0.0 in both orders
  Ops.CMPLT: lambda dt: lax.lt,
  Ops.CMPNE: lambda dt: lax.ne,
  Ops.AND: lambda dt: lax.bitwise_and,
  Ops.OR: lambda dt: lax.bitwise_or,
  Ops.XOR: lambda dt: lax.bitwise_xor,
  Ops.SHL: lambda dt: lax.shift_left,  # shifts the bit pattern: signed values wrap
  Ops.SHR: _shr,
  Ops.WHERE: lambda dt: lax.select,
}


def _alu(u: UOp) -> Step:
  return _ALU[u.op](operand_dtype(u))


# ---- casts and leaves
def _cast(u: UOp) -> Step:
  src, to = u.src[0].dtype, u.dtype
  if u.op is Ops.BITCAST:
    return lambda x: lax.bitcast_convert_type(x, to.np)  # same item size (alu.exec_bitcast); NaN lanes UNDEFINED
  return lambda x: cast(x, src, to)


def _const(u: UOp) -> Step:
  """A CONST's value, by numpy's conversion as the graph evaluator's, closed over as a jax array of its exact dtype:
  a constant of the traced function, which XLA sees (and may fold)."""
  value = np.array(u.arg, dtype=u.dtype.np)
  return lambda *srcs: jnp.asarray(value, dtype=value.dtype)


# ---- movement
def _pad(u: UOp) -> Step:
  widths = [(before, after, 0) for before, after in u.arg]
  return lambda x: lax.pad(x, jnp.zeros((), x.dtype), widths)  # zeros (+0.0, False) outside, as np.pad


def _shrink(u: UOp) -> Step:
  starts, ends = [start for start, _ in u.arg], [end for _, end in u.arg]
  return lambda x: lax.slice(x, starts, ends)


def _flip(u: UOp) -> Step:
  dims = tuple(i for i, flipped in enumerate(u.arg) if flipped)
  return lambda x: lax.rev(x, dims)


def _expand(u: UOp) -> Step:
  shape = tuple(u.arg)
  return lambda x: jnp.broadcast_to(x, shape)


def _float_max_reduce(x: Array, axes: tuple[int, ...]) -> Array:
  """XLA's float16 reduce_max dropped a NaN (a row of a conformance batch gave -inf): NaN where any term is NaN."""
  return jnp.where(lax.reduce_or(lax.ne(x, x), axes), jnp.full((), np.nan, x.dtype), lax.reduce_max(x, axes))


# ---- reductions: lax's reductions keep the dtype (sums and products of ints wrap), max propagates NaN and takes
# +0.0 over -0.0, bools are any / all
_REDUCE: dict[tuple[Ops, str], Callable[[Array, tuple[int, ...]], Array]] = {
  (Ops.ADD, "b"): lax.reduce_or,
  (Ops.MAX, "b"): lax.reduce_or,
  (Ops.MUL, "b"): lax.reduce_and,
  **{(Ops.ADD, kind): lax.reduce_sum for kind in "iuf"},
  **{(Ops.MUL, kind): lax.reduce_prod for kind in "iuf"},
  (Ops.MAX, "i"): lax.reduce_max,
  (Ops.MAX, "u"): lax.reduce_max,
  (Ops.MAX, "f"): _float_max_reduce,
}


def _reduce(u: UOp) -> Step:
  op, axes = u.arg
  shape = u.shape
  if any(u.src[0].shape[a] == 0 for a in axes):  # an empty reduction is its identity
    value = np.full(shape, reduce_identity(op, u.dtype), u.dtype.np)
    return lambda x: jnp.asarray(value)
  fold = _REDUCE[(op, u.dtype.kind)]
  return lambda x: lax.reshape(fold(x, tuple(axes)), shape)  # keeps the reduced dims as size 1


def _same(u: UOp) -> Step:
  return lambda x, *rest: x


RULES: dict[Ops, Rule] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast,
  Ops.CONST: _const,
  Ops.DEVICE: lambda u: lambda: None,  # only names where a CONST lives; the CONST's rule does not read it
  Ops.RESHAPE: lambda u: lambda x: lax.reshape(x, tuple(u.arg)),
  Ops.PERMUTE: lambda u: lambda x: lax.transpose(x, tuple(u.arg)),
  Ops.EXPAND: _expand,
  Ops.PAD: _pad,
  Ops.SHRINK: _shrink,
  Ops.FLIP: _flip,
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: _same,  # values, not layouts: XLA decides its own
  Ops.DETACH: _same,
  Ops.CUSTOM_GRAD: _same,  # its value is src[0]; the others are its gradient's inputs
  Ops.COPY: _same,  # one XLA device holds the whole graph
}


# ---- the whole graph
def xla_function(outputs: Sequence[UOp], leaves: Sequence[UOp]) -> Callable[..., tuple[Array, ...]]:
  """A function computing `outputs` with lax ops from the arrays of `leaves` (a graph's input PARAMs, flat, in that
  order); CONSTs are constants inside it. The caller has asked unsupported_reason of every node."""
  return step_function(outputs, leaves, lambda u: RULES[u.op](u))
