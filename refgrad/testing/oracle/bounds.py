"""How far a correct device may be from the reference, lane by lane, for one kernel.

docs/SPEC.md makes most ops bit-exact, bounds transcendentals in ULPs, and lets float reductions sum in any
order. Inside a kernel those allowances compound: an inexact sum feeding a multiply can move the product.
`kernel_error_bounds` walks the kernel's graph once, beside the reference values, and gives each node an
absolute error bound (float64): 0 where the result must match bit for bit, a finite bound where the spec
allows slack, and inf where no bound can be given (a comparison or cast whose input may straddle the
decision point); callers skip inf lanes and count them. The bounds are first-principles: interval corners
for monotonic ops, gamma_n * sum|x| for sums (twice: both the reference and the device round), one unit in
the last place for every rounding that an inexact input can move.

A graph device may declare documented differences from SPEC.md (codegen/contract.py's Difference): more ULPs on some
ops' results, added where each such op rounds, or flushed subnormals (FTZ/DAZ), modelled as error too: an operand or
result that may be a nonzero subnormal may read or be written as a zero, |x| from the reference's x, and a sum's or
product's partial results may be flushed on the way. Values that cannot be subnormal keep their bound, so nothing
else loosens; what the zeros make of later ops (a division by one, a comparison with one) is carried as any error.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

import ml_dtypes
import numpy as np

from refgrad.codegen.contract import Allowance
from refgrad.dtype import DType, dtypes
from refgrad.interp.graph import evaluate_nodes
from refgrad.ops import OP_FACTS
from refgrad.uop import GroupOp, Ops, UOp

Bound = np.ndarray  # float64, broadcastable to the node's shape; 0 exact, inf unknown


def ulp_of(x: np.ndarray, dtype: DType) -> np.ndarray:
  """Size of one unit in the last place of |x| in a float dtype (the subnormal step near zero)."""
  info = ml_dtypes.finfo(dtype.np)
  mag = np.abs(np.asarray(x, dtype=np.float64))
  with np.errstate(divide="ignore", invalid="ignore"):
    exponent = np.floor(np.log2(np.maximum(mag, float(info.tiny))))
  return np.where(np.isfinite(mag), np.exp2(exponent - (info.nmant)), np.inf)


def _f64(x: np.ndarray) -> np.ndarray:
  with np.errstate(invalid="ignore"):  # a signalling NaN widens to a quiet one: that is the point
    return np.asarray(x).astype(np.float64)


def flush_widened(x: np.ndarray, e: Bound, dtype: DType, result: bool = False) -> Bound:
  """Bound `e` of a value of a float dtype whose reference value is `x` (float64), widened by what flushing subnormals
  may do to it: where the device's value may be a nonzero subnormal (within e of x and below the smallest normal,
  tiny, in magnitude), it may become a zero, |x| from the reference. Exact zeros and values further than e from the
  subnormal range keep their bound. An operand of tiny itself is normal; a `result` that rounds to tiny may be below
  it with the exponent unbounded, which is how IEEE 754 decides that a result is tiny, and be flushed (XLA gives 0.0
  for float32 tiny * (1 - 2**-24) and for float64 1.1754942807573643e-38 cast to float32)."""
  tiny = float(ml_dtypes.finfo(dtype.np).tiny)
  magnitude = np.abs(x)
  near = magnitude - e <= tiny if result else magnitude - e < tiny
  return np.where(near, np.maximum(e, magnitude), e)


def _spread(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray, e: Bound) -> np.ndarray:
  """max |fn(x +- e) - fn(x)| for a function monotonic on [x-e, x+e]."""
  with np.errstate(all="ignore"):
    center = fn(x)
    return np.maximum(np.abs(fn(x - e) - center), np.abs(fn(x + e) - center))


UNARY_F64: dict[Ops, Callable[[np.ndarray], np.ndarray]] = {
  Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.RECIP: np.reciprocal,
}


def _unary_float(u: UOp, x: np.ndarray, e: Bound) -> Bound:
  if u.op is Ops.SIN:
    moved = e  # |sin'| <= 1
  elif u.op is Ops.TRUNC:
    moved = np.where(np.trunc(x - e) == np.trunc(x + e), 0.0, e + 1.0)
  else:
    lo, hi = x - e, x + e
    inside_domain = {Ops.SQRT: lo >= 0, Ops.LOG2: lo > 0, Ops.RECIP: (lo > 0) | (hi < 0)}.get(u.op, True)
    moved = np.where(inside_domain, _spread(UNARY_F64[u.op], x, e), np.inf)
  return moved


def _scaled(magnitude: np.ndarray, e: Bound) -> Bound:
  """magnitude * e, 0 where e is 0 (whatever the magnitude)."""
  return np.where(e > 0, magnitude * e, 0.0)


def _binary_float(u: UOp, a: np.ndarray, b: np.ndarray, ea: Bound, eb: Bound) -> Bound:
  if u.op is Ops.ADD:
    return ea + eb
  if u.op is Ops.MUL:  # an exact operand adds nothing, even an infinite one (inf * 0 would be a NaN "bound")
    return _scaled(np.abs(a), eb) + _scaled(np.abs(b), ea) + ea * eb
  if u.op is Ops.MAX:
    return np.maximum(ea, eb)
  if u.op is Ops.FDIV:
    with np.errstate(all="ignore"):
      corners = [(a + sa * ea) / (b + sb * eb) for sa in (-1, 1) for sb in (-1, 1)]
      moved = np.max([np.abs(c - a / b) for c in corners], axis=0)
    return np.where((b - eb > 0) | (b + eb < 0), moved, np.inf)
  return np.full(np.broadcast_shapes(np.shape(a), np.shape(b)), np.inf)


def _zero_sign_may_flip(u: UOp, srcs: list[np.ndarray], errs: list[Bound]) -> np.ndarray | bool:
  """Lanes where an operand that moved may change the sign of u's result but not its magnitude, zero: a product with
  an exact zero factor whose other factor may have either sign ((0.0 + -1e-45) * 0.0 is -0.0, and +0.0 where the
  subnormal reads as -0.0), the truncation of a value that may have either sign."""
  if u.op is Ops.MUL:
    return functools.reduce(np.logical_or, [(e > 0) & (np.abs(x) <= e) for x, e in zip(srcs, errs)])
  if u.op is Ops.TRUNC:
    return (errs[0] > 0) & (np.abs(srcs[0]) <= errs[0])
  return False


def lowest_bit(x: np.ndarray) -> np.ndarray:
  """The value of the lowest set bit of each finite nonzero float64 (inf for zeros, infinities and NaNs)."""
  finite = np.isfinite(x) & (x != 0)
  mantissa, exponent = np.frexp(np.where(finite, x, 1.0))
  digits = np.abs(mantissa * 2.0 ** 53).astype(np.int64)  # the 53-bit significand as an integer
  return np.where(finite, np.ldexp((digits & -digits).astype(np.float64), exponent - 53), np.inf)


def exact_in_every_order(x: np.ndarray, axes: tuple[int, ...], dtype: DType) -> np.ndarray:
  """Lanes whose sum is exact whatever the order: every term a multiple of the smallest lowest bit g among them,
  and the sum of magnitudes below g * 2^p (p the dtype's significand bits), so every partial sum is a multiple of g
  that the dtype holds. There a correct device gives the reference's bits (a multiply-add fused into the sum does
  not: its unrounded product moves the result)."""
  if x.size == 0:
    return np.zeros((), dtype=bool)
  grain = lowest_bit(x).min(axis=axes, keepdims=True)
  digits = int(ml_dtypes.finfo(dtype.np).nmant) + 1
  return np.abs(x).sum(axis=axes, keepdims=True) < grain * 2.0 ** digits


def subnormal_partial_sums(x: np.ndarray, e: np.ndarray, axes: tuple[int, ...], tiny: float) -> np.ndarray:
  """Rows of a sum (terms x within e) whose partial sums may be nonzero subnormals in some order: all but rows of
  exact terms that are multiples of a power of two g >= tiny (the smallest lowest bit among them), whose every partial
  sum, rounded or not, is a multiple of g: zero or normal."""
  return e.any(axis=axes, keepdims=True) | (lowest_bit(x).min(axis=axes, keepdims=True, initial=np.inf) < tiny)


def subnormal_partial_products(x: np.ndarray, e: np.ndarray, axes: tuple[int, ...], gamma: float,
                               tiny: float) -> np.ndarray:
  """Rows of a product (magnitudes x within e) where a partial product may be a nonzero subnormal in some order: the
  factors below one, at their smallest, may multiply to less than tiny (with every rounding down on the way). Exact
  zeros are left out: a partial product with one is zero."""
  smallest = np.where((x == 0) & (e == 0), 1.0, np.maximum(x - e, 0.0))
  shrinks = np.where(smallest < 1, smallest, 1.0).prod(axis=axes, keepdims=True)
  return shrinks * (1 - gamma) < tiny


def _comparison(a: np.ndarray, b: np.ndarray, ea: Bound, eb: Bound) -> Bound:
  """A comparison is exact unless the inputs' intervals overlap, where the answer could flip."""
  apart = (a + ea < b - eb) | (b + eb < a - ea)
  return np.where(apart, 0.0, np.inf)


class _Bounds:
  def __init__(self, values: dict[UOp, tuple[np.ndarray, np.ndarray | None]],
               declared: Mapping[tuple[Ops, DType], Allowance] | None = None):
    self.values = values
    # (op, dtype) -> what a device declares on top of SPEC.md (contract.Difference): ULPs, flushed subnormals
    self.declared = declared or {}
    self.err: dict[UOp, Bound] = {}

  def value(self, u: UOp) -> np.ndarray:
    return self.values[u][0]

  def bound(self, u: UOp) -> Bound:
    return self.err[u]

  def compute(self, root: UOp) -> Bound:
    for node in root.toposort:
      self.err[node] = self.flushed_result(node, self.rule(node))
    return self.err[root]

  def flushes(self, op: Ops, dtype: DType) -> bool:
    """The device declares that `op` flushes subnormals of `dtype` (its operands' or its result's)."""
    return dtypes.is_float(dtype) and self.declared.get((op, dtype), Allowance()).flushes_subnormals

  def operand(self, u: UOp, s: UOp) -> Bound:
    """The bound of source s as op u reads it: widened where u flushes a subnormal operand of s's dtype."""
    e = self.bound(s)
    return flush_widened(_f64(self.value(s)), e, s.dtype) if self.flushes(u.op, s.dtype) else e

  def flushed_result(self, u: UOp, e: Bound) -> Bound:
    """u's bound, widened where u may write a subnormal result as zero."""
    return flush_widened(_f64(self.value(u)), e, u.dtype, result=True) if self.flushes(u.op, u.dtype) else e

  def rule(self, u: UOp) -> Bound:
    if u.op in (Ops.PARAM, Ops.BUFFER, Ops.CONST, Ops.DEVICE):
      return np.zeros(())
    if u.op in GroupOp.Movement:
      return self.move(u)
    if u.op in (Ops.CONTIGUOUS, Ops.COPY):
      return self.bound(u.src[0])
    if u.op is Ops.REDUCE_AXIS:
      return self.reduce(u)
    if u.op in (Ops.CAST, Ops.BITCAST):
      return self.cast(u)
    return self.alu(u)

  def move(self, u: UOp) -> Bound:
    e = self.bound(u.src[0])
    if not np.any(e):
      return np.zeros(())
    full = np.broadcast_to(e, u.src[0].shape)
    moved = {Ops.RESHAPE: lambda x: x.reshape(u.arg), Ops.PERMUTE: lambda x: x.transpose(u.arg),
             Ops.EXPAND: lambda x: np.broadcast_to(x, u.arg), Ops.PAD: lambda x: np.pad(x, u.arg),
             Ops.SHRINK: lambda x: x[tuple(slice(s, t) for s, t in u.arg)],
             Ops.FLIP: lambda x: np.flip(x, tuple(i for i, f in enumerate(u.arg) if f))}
    return moved[u.op](full)

  def own_rounding(self, u: UOp, moved: Bound) -> Bound:
    """An input that moved can move the rounding of a float result by one more ulp."""
    top = np.abs(_f64(self.value(u))) + moved  # the larger magnitude has the larger ulp
    return np.where(moved > 0, moved + ulp_of(top, u.dtype), 0.0)

  def declared_error(self, u: UOp) -> Bound | float:
    """What a device's declared difference allows on u's own result: its ULPs of the result (finite results only)."""
    if not (extra := self.declared.get((u.op, u.dtype), Allowance()).ulp):
      return 0.0
    result = _f64(self.value(u))
    return np.where(np.isfinite(result), extra * ulp_of(result, u.dtype), 0.0)

  def alu(self, u: UOp) -> Bound:
    errs = [self.operand(u, s) for s in u.src]
    srcs = [_f64(self.value(s)) if s.dtype != dtypes.bool else self.value(s) for s in u.src]
    own = self.declared_error(u)
    if (facts := OP_FACTS[u.op]).transcendental:
      result = _f64(self.value(u))
      allowed = facts.ulp_bound[u.dtype] * ulp_of(result, u.dtype)
      own = own + np.where(np.isfinite(result), allowed, 0.0)  # inf and NaN results are exact
      if facts.ulp_range < math.inf:  # beyond it any number in the op's range will do
        own = np.where(np.abs(srcs[0]) <= facts.ulp_range, own, np.inf)
    if not any(np.any(e) for e in errs):
      return np.asarray(own, dtype=np.float64)
    # the op is elementwise: a lane whose operands are exact is exact as above, whatever moved in other lanes (a
    # flushed subnormal)
    exact = functools.reduce(np.logical_and, [np.asarray(e) == 0 for e in errs])
    return np.where(exact, own, self.moved(u, srcs, errs, own))

  def moved(self, u: UOp, srcs: list[np.ndarray], errs: list[Bound], own: Bound | float) -> Bound:
    """The bound of ALU op u's result where an operand may have moved."""
    if u.op is Ops.WHERE:
      cond_err, ea, eb = errs
      return np.where(np.asarray(cond_err) > 0, np.inf, np.where(self.value(u.src[0]), ea, eb))
    if u.op in GroupOp.Comparison:
      return _comparison(*srcs, *errs)
    if not dtypes.is_float(u.dtype):
      return np.where(sum(np.asarray(e) for e in errs) > 0, np.inf, 0.0)
    moved = _unary_float(u, srcs[0], errs[0]) if u.op in GroupOp.Unary else _binary_float(u, *srcs, *errs)
    moved = np.where(np.isnan(moved), np.inf, moved)  # 0 * inf, inf - inf: no bound (0 / a flushed x, times 0)
    # a zero whose sign may flip: the smallest step lets either zero pass (and tells later ops that it may move)
    flips = _zero_sign_may_flip(u, srcs, errs) & (_f64(self.value(u)) == 0)
    moved = np.where(flips, np.maximum(moved, float(ml_dtypes.finfo(u.dtype.np).smallest_subnormal)), moved)
    finite = np.isfinite(_f64(self.value(u)))
    return np.where(finite, self.own_rounding(u, moved) + own, np.where(moved > 0, np.inf, own))

  def cast(self, u: UOp) -> Bound:
    src = u.src[0]
    e = self.operand(u, src) if u.op is Ops.CAST else self.bound(src)  # BITCAST keeps the bits, subnormal or not
    if not np.any(e):
      return np.asarray(self.declared_error(u), dtype=np.float64) if u.op is Ops.CAST else np.zeros(())
    if u.op is Ops.BITCAST:
      return np.where(e > 0, np.inf, 0.0)
    x = _f64(self.value(src))
    if u.dtype == dtypes.bool:
      return np.where((e == 0) | (x - e > 0) | (x + e < 0), 0.0, np.inf)
    if not dtypes.is_float(u.dtype):
      return np.where(np.trunc(x - e) == np.trunc(x + e), 0.0, np.inf)
    return self.own_rounding(u, e) + self.declared_error(u)

  def reduce(self, u: UOp) -> Bound:
    op, axes = u.arg
    src = u.src[0]
    e = np.broadcast_to(self.operand(u, src), src.shape)
    if not dtypes.is_float(u.dtype):
      return np.where(e.any(axis=axes, keepdims=True), np.inf, 0.0) if e.size else np.zeros(())
    x = np.abs(_f64(self.value(src)))
    n = int(np.prod([src.shape[a] for a in axes]))
    if op is Ops.MAX:
      return e.max(axis=axes, keepdims=True) if e.size else np.zeros(())
    info = ml_dtypes.finfo(u.dtype.np)
    eps, largest, tiny = float(info.eps) / 2, float(info.max), float(info.tiny)
    gamma = n * eps / (1 - n * eps) if n * eps < 1 else np.inf
    with np.errstate(all="ignore"):
      if op is Ops.ADD:  # both the reference and the device are within gamma_n * sum|x| of the exact sum
        magnitude = (x + e).sum(axis=axes, keepdims=True)
        bound = 2 * gamma * magnitude + e.sum(axis=axes, keepdims=True)
        # a sum of zeros is exact but its sign is unspecified: the smallest step lets either zero pass, and
        # tells every later op that this input may move (so nothing downstream relies on the sign)
        bound = np.where(magnitude == 0, float(info.smallest_subnormal), bound)
        if not np.any(e):  # exact terms whose every partial sum is exact: the sum is exact in every order
          bound = np.where(exact_in_every_order(_f64(self.value(src)), axes, u.dtype) & (magnitude > 0), 0.0, bound)
        if self.flushes(u.op, u.dtype):  # a flushed partial sum loses less than tiny: n * tiny covers the n - 1
          # partial sums and what later roundings make of the loss
          bound = bound + np.where(subnormal_partial_sums(_f64(self.value(src)), e, axes, tiny), n * tiny, 0.0)
        bound = np.where(magnitude <= largest, bound, np.inf)  # a partial sum may overflow in some orders
      else:
        widest = (x + e).prod(axis=axes, keepdims=True)
        bound = 2 * gamma * widest + (widest - x.prod(axis=axes, keepdims=True))
        # partial products may overflow or underflow in some orders (then 0 * inf, or lost digits)
        nonzero = np.where(x > 0, x + e, 1.0)
        grows = np.where(nonzero > 1, nonzero, 1.0).prod(axis=axes, keepdims=True)
        shrinks = np.where(nonzero < 1, nonzero, 1.0).prod(axis=axes, keepdims=True)
        if self.flushes(u.op, u.dtype):  # a partial product below tiny flushed: the product is a zero, |x| away
          bound = np.where(subnormal_partial_products(x, e, axes, gamma, tiny), np.maximum(bound, widest), bound)
        bound = np.where((grows <= largest) & (shrinks >= tiny), bound, np.inf)
    # a term that is exactly NaN makes the sum or product NaN in every order (the walk's own arithmetic says NaN)
    exact_nan = (np.isnan(_f64(self.value(src))) & (e == 0)).any(axis=axes, keepdims=True)
    return np.where(exact_nan, 0.0, bound)


def kernel_error_bounds(ast: UOp, inputs: dict[int, np.ndarray], undefined_inputs: dict[int, np.ndarray | None] | None
                        = None, declared: Mapping[tuple[Ops, DType], Allowance] | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """(reference value, error bound, undefined lanes) of a scheduled kernel's output, flat.

  `ast` is SINK(STORE(PARAM 0, value)); `inputs[i]` holds the flat contents of PARAM i, `undefined_inputs[i]` (if
  given) its undefined lanes, which the output's inherit. `declared`: (op, dtype) -> the Allowance a device declares
  on top of SPEC.md's bounds (codegen/contract.py's Difference, declared_allowances): its ULPs on each such op's
  result, and flushed subnormal operands and results."""
  value_node = ast.src[0].src[1]
  masks = undefined_inputs or {}
  leaves = {u: (inputs[u.arg[0]], masks.get(u.arg[0])) for u in value_node.toposort if u.op is Ops.PARAM}
  values = evaluate_nodes(value_node, leaves)
  with np.errstate(all="ignore"):  # inf - inf and 0 * inf are NaN: no bound, made inf (skipped) below
    bound = _Bounds(values, declared).compute(value_node)
  bound = np.where(np.isnan(bound), np.inf, bound)  # compare skips inf lanes; a NaN bound would be checked bit-exact
  value, undefined = values[value_node]
  flat = lambda x: np.broadcast_to(x, value_node.shape).reshape(-1)  # noqa: E731
  return flat(value), flat(bound).astype(np.float64), (flat(undefined) if undefined is not None else None)
