"""Elementwise methods of Tensor: arithmetic with broadcasting and promotion, math, comparisons, bitwise, casts.

Each method is a short composition of primitive ops (docs/SPEC.md); what a primitive means is defined only
in refgrad/alu.py.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from refgrad.dtype import (
  DType,
  compute_dtype,
  dtypes,
  least_upper_dtype,
  least_upper_float,
  scalar_dtype_with,
  short_int,
  to_dtype,
)
from refgrad.frontend import special
from refgrad.frontend.base import Self, TensorBase, half_in_float32
from refgrad.frontend.bitcast import UNSIGNED_OF_SIZE, check_bitcast, resized_bitcast
from refgrad.frontend.shapes import ShapeError, broadcast_shape
from refgrad.frontend.templates import graph_template
from refgrad.gradient import custom_gradient
from refgrad.symbolic_shapes import is_size_expression
from refgrad.uop import Ops, UOp

LOG2_E = math.log2(math.e)
_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2}  # an in-place result may not be of a higher kind than its target
LN_2 = math.log(2)
# pi/2 as hi + lo in each float dtype cos computes in: hi the dtype's nearest value, lo the rest (rounded)
HALF_PI = {dtypes.float32: (1.5707963705062866, -4.371139000186243e-08),
           dtypes.float64: (1.5707963267948966, 6.123233995736766e-17)}


class BitwiseDTypeError(TypeError, NotImplementedError):
  """A bitwise op or shift on a dtype it does not take (floats; bool for shifts). A TypeError, and like torch's
  error a NotImplementedError, so a RuntimeError too."""


class IntOverflowError(OverflowError, RuntimeError):
  """A Python int an op would have to wrap to use (a RuntimeError, as torch's "cannot be converted ... without
  overflow", and an OverflowError)."""


# what a comparison of an integer tensor with an int outside its dtype's range gives, for every element
COMPARED_OUTSIDE: dict[str, dict[str, bool]] = {
  "lt": {"below": False, "above": True}, "le": {"below": False, "above": True},
  "gt": {"below": True, "above": False}, "ge": {"below": True, "above": False},
  "eq": {"below": False, "above": False}, "ne": {"below": True, "above": True}}


def _side_outside(value: Any, dt: DType) -> str | None:
  """"below" or "above" when value is a Python int outside the range of the integer dtype dt, else None."""
  if not isinstance(value, int) or isinstance(value, bool) or dt.kind not in "iu":
    return None
  return "below" if value < dtypes.min(dt) else "above" if value > dtypes.max(dt) else None


def _same_device(x: Any, y: Any) -> None:
  if x.device != y.device:  # as torch: no implicit copies between devices
    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                       f"{x.device} and {y.device} (move one with .to(device))")


class ElementwiseMixin(TensorBase):
  __slots__ = ()

  # ---- plumbing
  def _alu(self, op: Ops, *others: Any) -> Self:
    return self._from(self.uop.alu(op, *(o.uop for o in others)))

  def _to_tensor(self, y: Any, dtype: DType | None = None, wraps: bool = False) -> Self:
    """y as a tensor next to self: a Python scalar takes self's dtype when it fits its kind. An int the integer dtype
    does not hold wraps modulo 2**bits where it is stored (a where branch) or where wrapping is exact (+, -, *, &, |,
    ^): `wraps`; other ops (division, modulo, pow, shifts, max and min) refuse it (docs/SPEC.md)."""
    if isinstance(y, type(self)):
      return y
    if isinstance(y, (bool, int, float)):
      dt = dtype or scalar_dtype_with(self.dtype, y)
      if not wraps and _side_outside(y, dt) is not None:
        raise IntOverflowError(f"value {short_int(y)} cannot be converted to {dt.name} without overflow (only +, -, "
                               f"*, &, |, ^ and stores wrap it modulo 2**{dt.bits}; cast the tensor to a wider dtype)")
      return self._const(y, dt)
    if is_size_expression(y):  # a bound Variable's value: an int, like a Python int
      return type(self)(y, device=self.device, dtype=dtype or scalar_dtype_with(self.dtype, 1))
    return type(self)(y, device=self.device)

  def _broadcasted(self, y: Any, reverse: bool = False, match_dtype: bool = True,
                   wraps: bool = False) -> tuple[Self, Self]:
    """self and y with one shape and (if match_dtype) one dtype; reverse swaps them for r-ops."""
    x, y = self, self._to_tensor(y, wraps=wraps)
    if reverse:
      x, y = y, x
    _same_device(x, y)
    if match_dtype and x.dtype != y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if x.shape != y.shape:
      shape = broadcast_shape(x.shape, y.shape)
      x, y = x._broadcast_to(shape), y._broadcast_to(shape)
    return x, y

  def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
    """self broadcast to a shape it broadcasts to: a tensor of its own, not a view of self (views.py), like the
    results of torch's elementwise ops; every binary op of two shapes comes here, so it makes the nodes directly."""
    if self.shape == shape:
      return self
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    node = self.uop if padded == self.shape else UOp(Ops.RESHAPE, self.dtype, (self.uop,), padded)
    return self._from(node if padded == shape else UOp(Ops.EXPAND, self.dtype, (node,), shape))

  def _compared_outside(self, op: str, y: Any) -> Self | None:
    """The answer of comparison `op` with a Python int outside this tensor's integer dtype (the same for every
    element), else None."""
    side = _side_outside(y, self.dtype)
    return None if side is None else self._const(COMPARED_OUTSIDE[op][side], dtypes.bool)._broadcast_to(self.shape)

  def _require(self, kinds: str, what: str) -> None:
    if self.dtype.kind not in kinds:
      raise TypeError(f"{what} is not supported for dtype {self.dtype.name}")

  # ---- arithmetic
  def add(self, y: Any, reverse: bool = False) -> Self:
    x, y = self._broadcasted(y, reverse, wraps=True)
    return x._alu(Ops.OR, y) if x.dtype == dtypes.bool else x._alu(Ops.ADD, y)

  def sub(self, y: Any, reverse: bool = False) -> Self:
    x, y = self._broadcasted(y, reverse, wraps=True)
    if x.dtype == dtypes.bool:
      raise TypeError("subtraction of bool tensors is not supported; use logical_xor or ^")
    return x._alu(Ops.ADD, y.neg())

  def mul(self, y: Any, reverse: bool = False) -> Self:
    x, y = self._broadcasted(y, reverse, wraps=True)
    return x._alu(Ops.AND, y) if x.dtype == dtypes.bool else x._alu(Ops.MUL, y)

  def div(self, y: Any, reverse: bool = False, rounding_mode: str | None = None) -> Self:
    """True division (ints promote to the default float); rounding_mode 'trunc' or 'floor' as in torch."""
    if rounding_mode == "trunc":
      return self.idiv(y, reverse) if self._int_pair(y) else self.div(y, reverse).trunc()
    if rounding_mode == "floor":
      return self.floordiv(y, reverse)
    if rounding_mode is not None:
      raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor', but found "
                         f"{rounding_mode!r}")
    x, y = self._broadcasted(y, reverse)
    out = least_upper_float(x.dtype)
    return x.cast(out)._alu(Ops.FDIV, y.cast(out))

  def _int_pair(self, y: Any) -> bool:
    other = self._to_tensor(y)
    return dtypes.is_int(least_upper_dtype(self.dtype, other.dtype)) or \
      least_upper_dtype(self.dtype, other.dtype) == dtypes.bool

  def idiv(self, y: Any, reverse: bool = False) -> Self:
    """Integer division truncating toward zero, like C."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      return x.div(y).trunc()
    x._require("iu", "idiv")
    return _int_quotient(x, y)

  def floordiv(self, y: Any, reverse: bool = False) -> Self:
    """Floor division, like Python's // and torch.floor_divide."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      return _float_floordiv(x, y)
    x._require("iu", "floor division")
    q = _int_quotient(x, y)
    if dtypes.is_unsigned(x.dtype):
      return q
    inexact = _int_remainder(x, y)._alu(Ops.CMPNE, x._const(0))
    signs_differ = x.lt(0)._alu(Ops.CMPNE, y.lt(0))
    return (inexact & signs_differ).where(q - 1, q)

  def mod(self, y: Any, reverse: bool = False) -> Self:
    """Remainder with the sign of the divisor, like Python's % and torch.remainder."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      r = x._alu(Ops.MOD, y)
      return _remainder_needs_fix(r, y).where(r + y, r)
    x._require("iu", "mod")
    r = _int_remainder(x, y)
    if dtypes.is_unsigned(x.dtype):
      return r
    fix = r._alu(Ops.CMPNE, x._const(0)) & r.lt(0)._alu(Ops.CMPNE, y.lt(0))
    return fix.where(r + y, r)

  def neg(self) -> Self:
    return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

  def reciprocal(self) -> Self:
    x = self.cast(least_upper_float(self.dtype))
    return x._alu(Ops.RECIP)

  def pow(self, y: Any, reverse: bool = False) -> Self:
    """x ** y. Integer exponents given as Python ints use exact repeated multiplication."""
    if not reverse and isinstance(y, int) and not isinstance(y, bool) and 0 <= y <= 64:
      return self._int_power(y)
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_int(x.dtype):
      return _int_pow(x, y)
    if x.dtype == dtypes.bool:  # 0 and 1: float32 is exact
      return x.cast(dtypes.float32).pow(y.cast(dtypes.float32)).cast(dtypes.bool)
    return custom_gradient(_float_pow(x, y), ("pow",), x, y)

  def _int_power(self, n: int) -> Self:
    if n == 0:  # ones, yet still a function of self: its gradient is zeros (torch, tinygrad), not missing
      return custom_gradient(self.ones_like(), ("constant",), self)
    result, base = self.ones_like(), self
    while n:
      if n & 1:
        result = result * base
      base, n = base * base, n >> 1
    return result

  def maximum(self, y: Any) -> Self:
    if _side_outside(y, self.dtype) == "below":  # every element is larger: exact without the value
      return self
    x, y = self._broadcasted(y)
    return x._alu(Ops.MAX, y) if x.dtype != dtypes.bool else x._alu(Ops.OR, y)

  def minimum(self, y: Any) -> Self:
    if _side_outside(y, self.dtype) == "above":
      return self
    x, y = self._broadcasted(y)
    if dtypes.is_float(x.dtype):
      return x.neg()._alu(Ops.MAX, y.neg()).neg()  # exact, NaN-propagating, min(-0, +0) = -0
    if x.dtype == dtypes.bool:
      return x._alu(Ops.AND, y)
    return x.bitwise_not()._alu(Ops.MAX, y.bitwise_not()).bitwise_not()  # ~ reverses the order of any int

  def abs(self) -> Self:
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
      return self
    return self._alu(Ops.MAX, self.neg())

  def sign(self) -> Self:
    """-1, 0 or 1 by the sign of each element; zeros and NaN give 0, as torch.sign.

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
    [-1.0, 0.0, 1.0]
    """
    if self.dtype == dtypes.bool:
      return self
    return self.gt(0).where(self._const(1), self.lt(0).where(self._const(-1), self._const(0)))

  def signbit(self) -> Self:
    """True where the sign bit is set: negative numbers, -0.0, -inf and NaNs with the bit set, as torch.signbit.

    >>> Tensor([-0.0, 0.0, -1.0]).signbit().tolist()
    [True, False, True]
    """
    if dtypes.is_float(self.dtype):
      return self.detach().bitcast(UNSIGNED_OF_SIZE[self.dtype.itemsize]).rshift(self.dtype.bits - 1).ne(0)
    return self.lt(0)  # all False for unsigned and bool

  def copysign(self, other: Any) -> Self:
    """|self| with the sign bit of other (so -0.0 and a negative NaN count as negative), as torch.copysign; the
    result has the broadcast dtype, as in tinygrad (torch makes ints float). The gradient is torch's: +-1 to self
    (0 at 0), zeros to other.

    >>> Tensor([2.0, -3.0, 1.0]).copysign(Tensor([-0.0, 1.0, -5.0])).tolist()
    [-2.0, 3.0, -1.0]
    """
    x, y = self._broadcasted(other)
    magnitude = x.abs()
    return custom_gradient(y.signbit().where(-magnitude, magnitude), ("copysign",), x, y)

  def square(self) -> Self:
    """self * self.

    >>> Tensor([-3, 2]).square().tolist()
    [9, 4]
    """
    return self * self

  def clamp(self, min_: Any = None, max_: Any = None) -> Self:
    """Limit to [min_, max_] (either may be None); NaN stays NaN, and min_ > max_ gives max_, like torch.clamp.

    >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
    [-1.0, 0.5, 1.0]
    """
    if min_ is None and max_ is None:
      raise RuntimeError("clamp: at least one of 'min_' or 'max_' must not be None")
    out = self if min_ is None else self.maximum(min_)
    out = out if max_ is None else out.minimum(max_)
    if not dtypes.is_float(out.dtype):
      return out
    inputs = [self] + [self._to_tensor(b) for b in (min_, max_) if b is not None]
    inputs = [t.cast(out.dtype)._broadcast_to(out.shape) for t in inputs]  # the rule sees one shape and dtype
    return custom_gradient(out, ("clamp", min_ is not None, max_ is not None), *inputs)

  def clip(self, min_: Any = None, max_: Any = None) -> Self:
    """Alias of clamp.

    >>> Tensor([-2, 5]).clip(0, 3).tolist()
    [0, 3]
    """
    return self.clamp(min_, max_)

  def lerp(self, end: Any, weight: Any) -> Self:
    """self + weight * (end - self), computed from the nearer end as torch does (exact at weight 0 and 1).

    >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist()
    [2.5, 12.5]
    """
    x, end = self._broadcasted(end)
    if not dtypes.is_float(x.dtype):
      raise TypeError(f"lerp needs float tensors, got {x.dtype.name}")
    if (wide := compute_dtype(x.dtype)) != x.dtype:  # as torch: in half, end - x overflowed (lerp(-65504, 20, .3): inf)
      w = weight.cast(wide) if isinstance(weight, TensorBase) and weight.dtype == x.dtype else weight
      return x.cast(wide).lerp(end.cast(wide), w).cast(x.dtype)
    w = x._to_tensor(weight)
    diff = end - x
    return w.abs().lt(0.5).where(x + w * diff, end - diff * (1 - w))

  # ---- math (float results; ints are cast to the default float first)
  def _float(self) -> Self:
    return self.cast(least_upper_float(self.dtype))

  def exp2(self) -> Self:
    return self._float()._alu(Ops.EXP2)

  def log2(self) -> Self:
    return self._float()._alu(Ops.LOG2)

  @half_in_float32
  def exp(self) -> Self:
    return (self._float() * LOG2_E)._alu(Ops.EXP2)

  @half_in_float32
  def log(self) -> Self:
    return self._float()._alu(Ops.LOG2) * LN_2

  def sqrt(self) -> Self:
    return self._float()._alu(Ops.SQRT)

  def sin(self) -> Self:
    return self._float()._alu(Ops.SIN)

  @half_in_float32
  def cos(self) -> Self:
    """sin(pi/2 - x), with pi/2 - x carried exactly as s + t (pi/2 as hi + lo, TwoSum for hi - x): sin(s + t) is
    sin(s) + t cos(s), and cos(s) = sin(x + t) ~ sin(x). The rounding of pi/2 - x alone made cos(1e4) 1.5e-4 off and
    gave cos and tan the wrong sign near pi/2 + k pi (tan(float32(pi/2)) was inf, torch's -2.3e7).

    >>> Tensor([0.0]).cos().tolist()
    [1.0]
    """
    x = self._float()
    hi, lo = HALF_PI[x.dtype]
    s = hi - x
    back = s - hi  # TwoSum: hi + (-x) == s + err exactly
    err = (hi - (s - back)) + (-x - back)
    out = (s.sin() + (err + lo) * x.sin()).clip(-1.0, 1.0)  # past 1e4 the correction is not small: keep the range
    return custom_gradient(out, ("cos",), x)

  @half_in_float32
  def tan(self) -> Self:
    return self.sin() / self.cos()

  def rsqrt(self) -> Self:
    """1 / sqrt(x).

    >>> Tensor([4.0, 0.25]).rsqrt().tolist()
    [0.5, 2.0]
    """
    return self.sqrt().reciprocal()

  @half_in_float32
  def atan(self) -> Self:
    """Inverse tangent, in (-pi/2, pi/2).

    >>> round(Tensor(1.0).atan().item(), 6)
    0.785398
    """
    x = self._float()
    return custom_gradient(special.with_sign_of(x, special.atan_of_magnitude(x.abs())), ("atan",), x)

  @half_in_float32
  def asin(self) -> Self:
    """Inverse sine, as atan(x / sqrt((1-x)(1+x))): the factored form keeps precision near |x| = 1.

    >>> round(Tensor(0.5).asin().item(), 6)
    0.523599
    """
    x = self._float()
    return custom_gradient((x / ((1.0 - x) * (1.0 + x)).sqrt()).atan(), ("asin",), x)

  @half_in_float32
  def acos(self) -> Self:
    """Inverse cosine, as 2 atan(sqrt((1-x)/(1+x))): accurate relative to the result even near x = 1.

    >>> round(Tensor(0.5).acos().item(), 6)
    1.047198
    """
    x = self._float()
    return custom_gradient(((1.0 - x) / (1.0 + x)).sqrt().atan() * 2.0, ("acos",), x)

  @half_in_float32
  def sinh(self) -> Self:
    """Hyperbolic sine: from expm1 below |x| = 1 (no cancellation), else e^|x|/2 - e^-|x|/2 (no early overflow).

    >>> Tensor([0.0, -0.0]).sinh().tolist()
    [0.0, -0.0]
    """
    x = self._float()
    a = x.abs()
    t = special.expm1(a)
    half_exp = _half_exp(a)
    large = half_exp - 0.25 / half_exp
    return custom_gradient(special.with_sign_of(x, a.lt(1.0).where((t + t / (t + 1.0)) * 0.5, large)), ("sinh",), x)

  @half_in_float32
  def cosh(self) -> Self:
    """Hyperbolic cosine, e^|x|/2 + e^-|x|/2 with e^|x|/2 computed without overflowing early.

    >>> Tensor([0.0]).cosh().tolist()
    [1.0]
    """
    x = self._float()
    half_exp = _half_exp(x.abs())
    return custom_gradient(half_exp + 0.25 / half_exp, ("cosh",), x)

  @half_in_float32
  def asinh(self) -> Self:
    """Inverse hyperbolic sine: log1p form below 2, log(a) + log(1 + sqrt(1 + 1/a^2)) above (no overflow).

    >>> Tensor([0.0]).asinh().tolist()
    [0.0]
    """
    x = self._float()
    a = x.abs()
    small = special.log1p(a + a * a / (1.0 + (1.0 + a * a).sqrt()))
    large = a.log() + (1.0 + (1.0 + (a * a).reciprocal()).sqrt()).log()
    return custom_gradient(special.with_sign_of(x, a.lt(2.0).where(small, large)), ("asinh",), x)

  @half_in_float32
  def acosh(self) -> Self:
    """Inverse hyperbolic cosine (NaN below 1): log1p(t + sqrt(2t + t^2)) with t = x - 1 below 2, else
    log(x) + log(1 + sqrt(1 - 1/x^2)).

    >>> Tensor([1.0]).acosh().tolist()
    [0.0]
    """
    x = self._float()
    t = x - 1.0
    small = special.log1p(t + (t * 2.0 + t * t).sqrt())
    large = x.log() + (1.0 + (1.0 - (x * x).reciprocal()).sqrt()).log()
    return custom_gradient(x.lt(1.0).where(math.nan, x.lt(2.0).where(small, large)), ("acosh",), x)

  @half_in_float32
  def atanh(self) -> Self:
    """Inverse hyperbolic tangent, 0.5 * log1p(2|x| / (1 - |x|)) with the sign of x.

    >>> Tensor([0.0, 1.0]).atanh().tolist()
    [0.0, inf]
    """
    x = self._float()
    a = x.abs()
    return custom_gradient(special.with_sign_of(x, special.log1p(a * 2.0 / (1.0 - a)) * 0.5), ("atanh",), x)

  @half_in_float32
  def erf(self) -> Self:
    """The error function (polynomial and exp(-x^2)-scaled fits; see frontend/special.py).

    >>> Tensor([0.0, 10.0, -10.0]).erf().tolist()
    [0.0, 1.0, -1.0]
    """
    x = self._float()
    return custom_gradient(special.with_sign_of(x, special.erf_of_magnitude(x.abs())), ("erf",), x)

  @half_in_float32
  def tanh(self) -> Self:
    """Hyperbolic tangent, as -t / (t + 2) with t = expm1(-2|x|): no cancellation near 0, exactly 1 far out.

    >>> Tensor([0.0, 20.0]).tanh().tolist()
    [0.0, 1.0]
    """
    x = self._float()
    t = special.expm1(x.abs() * -2.0)
    return custom_gradient(special.with_sign_of(x, -t / (t + 2.0)), ("tanh",), x)

  @half_in_float32
  def sigmoid(self) -> Self:
    x = self._float()
    return custom_gradient((1.0 + (-x).exp()).reciprocal(), ("sigmoid",), x)

  @graph_template
  def relu(self) -> Self:
    """max(x, 0) like torch.relu: NaN stays NaN, -0.0 stays -0.0, and the gradient at 0 is 0."""
    out = self.lt(0).where(self._const(0), self)
    return custom_gradient(out, ("relu",), self) if dtypes.is_float(self.dtype) else out

  def trunc(self) -> Self:
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

  def floor(self) -> Self:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self.lt(t)).where(t - 1, t)

  def ceil(self) -> Self:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (t.lt(self)).where(t + 1, t)

  def round(self) -> Self:
    """Round half to even, like torch.round."""
    if not dtypes.is_float(self.dtype):
      return self
    down = self.floor()
    diff = self - down
    half_up = diff.gt(0.5) | (diff.eq(0.5) & (down * 0.5).floor().ne(down * 0.5))
    out = half_up.where(down + 1, down)
    return out.eq(0).where(self * 0.0, out)  # a zero result keeps the sign of the input, like torch

  # ---- comparisons (NaN-correct: only CMPLT and CMPNE are primitive)
  def lt(self, y: Any) -> Self:
    if (known := self._compared_outside("lt", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPLT, y)

  def gt(self, y: Any) -> Self:
    if (known := self._compared_outside("gt", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return y._alu(Ops.CMPLT, x)

  def eq(self, y: Any) -> Self:
    if (known := self._compared_outside("eq", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPNE, y).logical_not()

  def ne(self, y: Any) -> Self:
    if (known := self._compared_outside("ne", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPNE, y)

  def le(self, y: Any) -> Self:
    if (known := self._compared_outside("le", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPLT, y) | x.eq(y)

  def ge(self, y: Any) -> Self:
    if (known := self._compared_outside("ge", y)) is not None:
      return known
    x, y = self._broadcasted(y)
    return y._alu(Ops.CMPLT, x) | x.eq(y)

  def where(self, x: Any, y: Any) -> Self:
    """self ? x : y, lanewise; self is the condition."""
    cond = self.cast(dtypes.bool) if self.dtype != dtypes.bool else self
    if not isinstance(x, type(self)):  # a Python scalar takes the other branch's dtype when it fits its kind
      x = y._to_tensor(x, wraps=True) if isinstance(y, type(self)) else self._const(x, dtypes.from_py(x))
    x, y = x._broadcasted(y, wraps=True)  # a branch value is stored, as by masked_fill: an int wraps into the dtype
    _same_device(cond, x)
    shape = broadcast_shape(cond.shape, x.shape)
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return cond._alu(Ops.WHERE, x, y)

  def isnan(self) -> Self:
    """True where NaN.

    >>> Tensor([1.0, float("nan")]).isnan().tolist()
    [False, True]
    """
    return self.ne(self)

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
    """True where +inf (if detect_positive) or -inf (if detect_negative).

    >>> Tensor([1.0, float("inf"), -float("inf")]).isinf(detect_negative=False).tolist()
    [False, True, False]
    """
    if not dtypes.is_float(self.dtype):
      return self._const(False, dtypes.bool)._broadcast_to(self.shape)
    hits = [self.eq(v) for v, wanted in ((math.inf, detect_positive), (-math.inf, detect_negative)) if wanted]
    return functools.reduce(lambda a, b: a | b, hits) if hits else self.ne(self) & self.eq(self)

  def isfinite(self) -> Self:
    """True where neither inf nor NaN.

    >>> Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist()
    [True, False, False]
    """
    if not dtypes.is_float(self.dtype):
      return self._const(True, dtypes.bool)._broadcast_to(self.shape)
    return (self - self).eq(0)  # inf - inf and NaN - NaN are NaN

  def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Self:
    """|self - other| <= atol + rtol * |other|, elementwise; equal infinities are close; NaN only with equal_nan.

    >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-7, 2.1])).tolist()
    [True, False]
    """
    x, y = self._broadcasted(other)
    close = x.eq(y)
    if equal_nan:
      close = close | (x.isnan() & y.isnan())
    if x.dtype == dtypes.bool:
      return close
    fx, fy = x._float(), y._float()
    diff = (fx - fy).abs()
    return close | (diff.isfinite() & diff.le((fy * rtol).abs() + atol))

  def logical_not(self) -> Self:
    return self.cast(dtypes.bool)._alu(Ops.XOR, self._const(True, dtypes.bool))

  # ---- bitwise
  def _bitwise(self, op: Ops, y: Any, reverse: bool = False) -> Self:
    x, y = self._broadcasted(y, reverse, wraps=True)
    if dtypes.is_float(x.dtype):
      raise BitwiseDTypeError(f"bitwise {op.name.lower()} is not supported for float dtype {x.dtype.name}")
    return x._alu(op, y)

  def bitwise_and(self, y: Any, reverse: bool = False) -> Self:
    return self._bitwise(Ops.AND, y, reverse)

  def bitwise_or(self, y: Any, reverse: bool = False) -> Self:
    return self._bitwise(Ops.OR, y, reverse)

  def bitwise_xor(self, y: Any, reverse: bool = False) -> Self:
    return self._bitwise(Ops.XOR, y, reverse)

  def xor(self, y: Any, reverse: bool = False) -> Self:
    return self._bitwise(Ops.XOR, y, reverse)

  def bitwise_not(self) -> Self:
    if dtypes.is_float(self.dtype):
      raise BitwiseDTypeError(f"bitwise not is not supported for float dtype {self.dtype.name}")
    return self._alu(Ops.XOR, self._const(True if self.dtype == dtypes.bool else -1))

  def _shift(self, op: Ops, y: Any, reverse: bool = False) -> Self:
    """Shift by a Python int (keeps the dtype) or an int tensor (promotes like other binary ops)."""
    if self.dtype == dtypes.bool:
      raise BitwiseDTypeError("shifts need integer tensors, got bool")
    if isinstance(y, (bool, float)) or (isinstance(y, type(self)) and not dtypes.is_int(y.dtype)):
      raise BitwiseDTypeError(f"shift amount must be an integer, got "
                              f"{y.dtype.name if isinstance(y, type(self)) else y!r}")
    x, amount = self._broadcasted(y, reverse)
    if not dtypes.is_int(x.dtype):
      raise BitwiseDTypeError(f"shifts need integer tensors, got {x.dtype.name}")
    bits = x.dtype.bits
    if isinstance(y, int) and not reverse:  # a Python amount: decided now, no extra ops (threefry's rotations)
      return x._alu(op, amount) if 0 <= y < bits else x._shifted_out(op)
    # SHL and SHR leave an amount below 0 or from the width on UNDEFINED (x86 masks it, C may do anything): such
    # lanes shift by 0 and take torch's answer instead, on every device
    inside = amount.lt(bits) if dtypes.is_unsigned(amount.dtype) else amount.ge(0) & amount.lt(bits)
    return inside.where(x._alu(op, inside.where(amount, 0)), x._shifted_out(op))

  def _shifted_out(self, op: Ops) -> Self:
    """torch's shift by a negative amount or by the width or more: 0, but a signed right shift fills with the sign."""
    if op is Ops.SHR and not dtypes.is_unsigned(self.dtype):
      return self._alu(op, self._const(self.dtype.bits - 1))
    return self.zeros_like()

  def lshift(self, y: Any, reverse: bool = False) -> Self:
    """Shift left; bits shifted out are lost. A shift by less than 0 or by the width or more gives 0, as in torch.

    >>> (Tensor([1, 3], dtype="int8") << 2).tolist()
    [4, 12]
    """
    return self._shift(Ops.SHL, y, reverse)

  def rshift(self, y: Any, reverse: bool = False) -> Self:
    """Shift right: arithmetic (sign-filling) on signed dtypes, logical on unsigned. A shift by less than 0 or by the
    width or more gives 0, or -1 for a negative signed value, as in torch.

    >>> (Tensor([-8, 8]) >> Tensor([1, 2])).tolist()
    [-4, 2]
    """
    return self._shift(Ops.SHR, y, reverse)

  # ---- casts
  def cast(self, dtype: DType | str) -> Self:
    dt = to_dtype(dtype)
    return self if dt == self.dtype else self._from(UOp(Ops.CAST, dt, (self.uop,)))

  def bitcast(self, dtype: DType | str) -> Self:
    """The same bytes read as dtype, like torch's view(dtype). Between item sizes the last axis scales by their
    ratio, bytes in little-endian order (refgrad/frontend/bitcast.py).

    >>> Tensor([1, 256], dtype=dtypes.int32).bitcast(dtypes.int8).tolist()
    [1, 0, 0, 0, 0, 1, 0, 0]
    """
    dt = to_dtype(dtype)
    check_bitcast(self, dt)
    if dt.itemsize != self.dtype.itemsize:
      return resized_bitcast(self, dt)
    return self if dt == self.dtype else self._from(UOp(Ops.BITCAST, dt, (self.uop,)))

  def float(self) -> Self:
    return self.cast(dtypes.float32)

  def half(self) -> Self:
    return self.cast(dtypes.float16)

  def int(self) -> Self:
    return self.cast(dtypes.int32)

  def bool(self) -> Self:
    return self.cast(dtypes.bool)

  def double(self) -> Self:
    return self.cast(dtypes.float64)

  def long(self) -> Self:
    return self.cast(dtypes.int64)

  # ---- operators
  def __add__(self, y: Any) -> Self: return self.add(y)  # noqa: E704
  def __radd__(self, y: Any) -> Self: return self.add(y, True)  # noqa: E704
  def __sub__(self, y: Any) -> Self: return self.sub(y)  # noqa: E704
  def __rsub__(self, y: Any) -> Self: return self.sub(y, True)  # noqa: E704
  def __mul__(self, y: Any) -> Self: return self.mul(y)  # noqa: E704
  def __rmul__(self, y: Any) -> Self: return self.mul(y, True)  # noqa: E704
  def __truediv__(self, y: Any) -> Self: return self.div(y)  # noqa: E704
  def __rtruediv__(self, y: Any) -> Self: return self.div(y, True)  # noqa: E704
  def __floordiv__(self, y: Any) -> Self: return self.floordiv(y)  # noqa: E704
  def __rfloordiv__(self, y: Any) -> Self: return self.floordiv(y, True)  # noqa: E704
  def __mod__(self, y: Any) -> Self: return self.mod(y)  # noqa: E704
  def __rmod__(self, y: Any) -> Self: return self.mod(y, True)  # noqa: E704
  def __pow__(self, y: Any) -> Self: return self.pow(y)  # noqa: E704
  def __rpow__(self, y: Any) -> Self: return self.pow(y, True)  # noqa: E704
  def __neg__(self) -> Self: return self.neg()  # noqa: E704
  def __abs__(self) -> Self: return self.abs()  # noqa: E704
  def __and__(self, y: Any) -> Self: return self.bitwise_and(y)  # noqa: E704
  def __rand__(self, y: Any) -> Self: return self.bitwise_and(y, True)  # noqa: E704
  def __or__(self, y: Any) -> Self: return self.bitwise_or(y)  # noqa: E704
  def __ror__(self, y: Any) -> Self: return self.bitwise_or(y, True)  # noqa: E704
  def __xor__(self, y: Any) -> Self: return self.bitwise_xor(y)  # noqa: E704
  def __rxor__(self, y: Any) -> Self: return self.bitwise_xor(y, True)  # noqa: E704
  def __invert__(self) -> Self: return self.bitwise_not()  # noqa: E704
  def __lshift__(self, y: Any) -> Self: return self.lshift(y)  # noqa: E704
  def __rshift__(self, y: Any) -> Self: return self.rshift(y)  # noqa: E704
  def __rlshift__(self, y: Any) -> Self: return self.lshift(y, True)  # noqa: E704
  def __rrshift__(self, y: Any) -> Self: return self.rshift(y, True)  # noqa: E704
  # in-place forms update this tensor (t += 1); the result must keep its shape and be castable to its dtype
  def __iadd__(self, y: Any) -> Self: return self._inplace(self.add(y))  # noqa: E704
  def __isub__(self, y: Any) -> Self: return self._inplace(self.sub(y))  # noqa: E704
  def __imul__(self, y: Any) -> Self: return self._inplace(self.mul(y))  # noqa: E704
  def __itruediv__(self, y: Any) -> Self: return self._inplace(self.div(y))  # noqa: E704
  def __ifloordiv__(self, y: Any) -> Self: return self._inplace(self.floordiv(y))  # noqa: E704
  def __imod__(self, y: Any) -> Self: return self._inplace(self.mod(y))  # noqa: E704
  def __ipow__(self, y: Any) -> Self: return self._inplace(self.pow(y))  # noqa: E704
  def __iand__(self, y: Any) -> Self: return self._inplace(self.bitwise_and(y))  # noqa: E704
  def __ior__(self, y: Any) -> Self: return self._inplace(self.bitwise_or(y))  # noqa: E704
  def __ixor__(self, y: Any) -> Self: return self._inplace(self.bitwise_xor(y))  # noqa: E704
  def __ilshift__(self, y: Any) -> Self: return self._inplace(self.lshift(y))  # noqa: E704
  def __irshift__(self, y: Any) -> Self: return self._inplace(self.rshift(y))  # noqa: E704
  def __imatmul__(self, y: Any) -> Self: return self._inplace(self.matmul(y))  # noqa: E704

  def _inplace(self, result: Any) -> Self:
    """Make this tensor hold `result`, as torch's in-place ops do: same shape, and a result dtype of a kind this
    tensor can hold (float into int is a RuntimeError, as in torch)."""
    if result.shape != self.shape:
      raise ShapeError(f"output with shape {self.shape} doesn't match the broadcast shape {result.shape}")
    if _KIND_RANK[result.dtype.kind] > _KIND_RANK[self.dtype.kind]:
      raise RuntimeError(f"result type {result.dtype.name} can't be cast to the desired output type {self.dtype.name}")
    return self.assign(result.cast(self.dtype))
  def __lt__(self, y: Any) -> Self: return self.lt(y)  # noqa: E704
  def __gt__(self, y: Any) -> Self: return self.gt(y)  # noqa: E704
  def __le__(self, y: Any) -> Self: return self.le(y)  # noqa: E704
  def __ge__(self, y: Any) -> Self: return self.ge(y)  # noqa: E704
  def __eq__(self, y: Any) -> Self: return self.eq(y)  # type: ignore[override]  # noqa: E704
  def __ne__(self, y: Any) -> Self: return self.ne(y)  # type: ignore[override]  # noqa: E704


def _half_exp(a: Any) -> Any:
  """e^a / 2 as exp2(a*log2(e) - 1): finite wherever the result is, unlike exp(a) / 2."""
  return (a * LOG2_E - 1.0)._alu(Ops.EXP2)


def _int_quotient(x: Any, y: Any) -> Any:
  """x IDIV y, and -x (wrapped: MIN) where a signed y is -1: IDIV's MIN / -1 lane is UNDEFINED (docs/SPEC.md), so
  int8 -128 // -1 was -128 on PYTHON and 0 on CLANG (torch: -128)."""
  q = x._alu(Ops.IDIV, y)
  return q if dtypes.is_unsigned(x.dtype) else y.eq(-1).where(x.neg(), q)


def _int_remainder(x: Any, y: Any) -> Any:
  """x MOD y, and 0 where a signed y is -1 (MOD's UNDEFINED MIN % -1 lane; torch: 0)."""
  r = x._alu(Ops.MOD, y)
  return r if dtypes.is_unsigned(x.dtype) else y.eq(-1).where(0, r)


def _remainder_needs_fix(r: Any, y: Any) -> Any:
  """Where a C remainder (sign of the dividend) must move by one divisor to take the divisor's sign."""
  return r.ne(0) & y.lt(0).ne(r.lt(0))


def _float_floordiv(x: Any, y: Any) -> Any:
  """torch's floor division of floats: the exact quotient (x - fmod(x, y)) / y, moved down when the remainder's sign
  differs from y's, then rounded to the nearest integer (it is one up to rounding); y == 0 gives x / y."""
  r = x._alu(Ops.MOD, y)
  q = (x - r).div(y)
  q = _remainder_needs_fix(r, y).where(q - 1, q)
  floor = q.floor()
  nearest = (q - floor).gt(0.5).where(floor + 1, floor)
  zero = x.div(y) * 0.0  # a zero quotient takes the sign of x / y
  return y.eq(0).where(x.div(y), q.ne(0).where(nearest, zero))


def _int_pow(x: Any, y: Any) -> Any:
  """x ** y for int tensors as torch computes it: square and multiply over y's bits, so the result wraps modulo
  2^bits like any int product; a negative y gives 1 for x = 1, +-1 for x = -1 (by y's parity) and 0 otherwise."""
  result, square = x.ones_like(), x
  for bit in range(y.dtype.bits - (y.dtype.kind == "i")):  # a signed y's sign bit: the negative case below
    # times square where the bit is set, as a 0/1 factor: LLVM compiled a chain of 31 or more wheres for minutes
    result = result * ((y >> bit & 1) * (square - 1) + 1)
    square = square * square
  if y.dtype.kind != "i":
    return result
  odd = (y & 1).ne(0)
  negative_power = x.eq(1).where(1, (x.eq(-1) & odd).where(-1, x.eq(-1).where(1, 0)))
  return y.lt(0).where(negative_power.cast(x.dtype), result)


def _float_pow(x: Any, y: Any) -> Any:
  """x ** y for floats via exp2(y * log2|x|), with the sign, zero and infinity rules of C's pow (as torch)."""
  if (wide := compute_dtype(x.dtype)) != x.dtype:  # the log2/mul/exp2 chain would round three times in half
    return _float_pow(x.cast(wide), y.cast(wide)).cast(x.dtype)
  magnitude = (y * x.abs().log2()).exp2()
  y_is_int = y.trunc().eq(y)  # True for +-inf, False for NaN
  y_is_odd = y_is_int & (y * 0.5).trunc().ne(y * 0.5)
  sign_bit = x.lt(0) | (x.eq(0) & x.reciprocal().lt(0))  # includes -0.0
  result = (sign_bit & y_is_odd).where(-magnitude, magnitude)
  result = (x.lt(0) & x.ne(float("-inf")) & y_is_int.logical_not()).where(float("nan"), result)
  one = y.eq(0) | x.eq(1) | (x.eq(-1) & y.abs().eq(float("inf")))
  return one.where(1.0, result)
