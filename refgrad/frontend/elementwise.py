"""Elementwise methods of Tensor: arithmetic with broadcasting and promotion, math, comparisons, bitwise, casts.

Each method is a short composition of primitive ops (docs/SPEC.md); what a primitive means is defined only
in refgrad/interp/alu.py.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from refgrad.dtype import DType, dtypes, least_upper_dtype, least_upper_float, scalar_dtype_with, to_dtype
from refgrad.uop import Ops, UOp

LOG2_E = math.log2(math.e)
LN_2 = math.log(2)


def _half_in_float32(fn: Any) -> Any:
  """Composite math on float16/bfloat16 runs in float32 and rounds once at the end, as torch does: rounding its
  intermediates (x * log2(e), pi/2 - x, ...) in half precision would cost many ULP."""
  @functools.wraps(fn)
  def wrapper(self: Any) -> Any:
    if self.dtype in (dtypes.float16, dtypes.bfloat16):
      return fn(self.cast(dtypes.float32)).cast(self.dtype)
    return fn(self)
  return wrapper


class ElementwiseMixin:
  __slots__ = ()

  # ---- plumbing
  def _alu(self, op: Ops, *others: Any) -> Any:
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else (others[-1].dtype if op is Ops.WHERE else self.dtype)
    return self._from(UOp(op, out_dtype, (self.uop, *(o.uop for o in others))))

  def _to_tensor(self, y: Any, dtype: DType | None = None) -> Any:
    if isinstance(y, type(self)):
      return y
    if isinstance(y, (bool, int, float)):
      return self._const(y, dtype or scalar_dtype_with(self.dtype, y))
    return type(self)(y, device=self.device)

  def _broadcasted(self, y: Any, reverse: bool = False, match_dtype: bool = True) -> tuple[Any, Any]:
    """self and y with one shape and (if match_dtype) one dtype; reverse swaps them for r-ops."""
    x, y = self, self._to_tensor(y)
    if reverse:
      x, y = y, x
    if match_dtype and x.dtype != y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if x.shape != y.shape:
      from refgrad.tensor import broadcast_shape
      shape = broadcast_shape(x.shape, y.shape)
      x, y = x._broadcast_to(shape), y._broadcast_to(shape)
    return x, y

  def _broadcast_to(self, shape: tuple[int, ...]) -> Any:
    if self.shape == shape:
      return self
    return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

  def _require(self, kinds: str, what: str) -> None:
    if self.dtype.kind not in kinds:
      raise TypeError(f"{what} is not supported for dtype {self.dtype.name}")

  # ---- arithmetic
  def add(self, y: Any, reverse: bool = False) -> Any:
    x, y = self._broadcasted(y, reverse)
    return x._alu(Ops.OR, y) if x.dtype == dtypes.bool else x._alu(Ops.ADD, y)

  def sub(self, y: Any, reverse: bool = False) -> Any:
    x, y = self._broadcasted(y, reverse)
    if x.dtype == dtypes.bool:
      raise TypeError("subtraction of bool tensors is not supported; use logical_xor or ^")
    return x._alu(Ops.ADD, y.neg())

  def mul(self, y: Any, reverse: bool = False) -> Any:
    x, y = self._broadcasted(y, reverse)
    return x._alu(Ops.AND, y) if x.dtype == dtypes.bool else x._alu(Ops.MUL, y)

  def div(self, y: Any, reverse: bool = False, rounding_mode: str | None = None) -> Any:
    """True division (ints promote to the default float); rounding_mode 'trunc' or 'floor' as in torch."""
    if rounding_mode == "trunc":
      return self.idiv(y, reverse) if self._int_pair(y) else self.div(y, reverse).trunc()
    if rounding_mode == "floor":
      return self.floordiv(y, reverse)
    x, y = self._broadcasted(y, reverse)
    out = least_upper_float(x.dtype)
    return x.cast(out)._alu(Ops.FDIV, y.cast(out))

  def _int_pair(self, y: Any) -> bool:
    other = self._to_tensor(y)
    return dtypes.is_int(least_upper_dtype(self.dtype, other.dtype)) or \
      least_upper_dtype(self.dtype, other.dtype) == dtypes.bool

  def idiv(self, y: Any, reverse: bool = False) -> Any:
    """Integer division truncating toward zero, like C."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      return x.div(y).trunc()
    x._require("iu", "idiv")
    return x._alu(Ops.IDIV, y)

  def floordiv(self, y: Any, reverse: bool = False) -> Any:
    """Floor division, like Python's // and torch.floor_divide."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      return x.div(y).floor()
    x._require("iu", "floor division")
    q = x._alu(Ops.IDIV, y)
    if dtypes.is_unsigned(x.dtype):
      return q
    inexact = x._alu(Ops.MOD, y)._alu(Ops.CMPNE, x._const(0))
    signs_differ = x.lt(0)._alu(Ops.CMPNE, y.lt(0))
    return (inexact & signs_differ).where(q - 1, q)

  def mod(self, y: Any, reverse: bool = False) -> Any:
    """Remainder with the sign of the divisor, like Python's % and torch.remainder."""
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      return x - x.div(y).floor() * y
    x._require("iu", "mod")
    r = x._alu(Ops.MOD, y)
    if dtypes.is_unsigned(x.dtype):
      return r
    fix = r._alu(Ops.CMPNE, x._const(0)) & r.lt(0)._alu(Ops.CMPNE, y.lt(0))
    return fix.where(r + y, r)

  def neg(self) -> Any:
    return self.logical_not() if self.dtype == dtypes.bool else self._alu(Ops.NEG)

  def reciprocal(self) -> Any:
    x = self.cast(least_upper_float(self.dtype))
    return x._alu(Ops.RECIP)

  def pow(self, y: Any, reverse: bool = False) -> Any:
    """x ** y. Integer exponents given as Python ints use exact repeated multiplication."""
    if not reverse and isinstance(y, int) and not isinstance(y, bool) and 0 <= y <= 64:
      return self._int_power(y)
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_int(x.dtype) or x.dtype == dtypes.bool:
      out = x.dtype
      return x.cast(dtypes.float32).pow(y.cast(dtypes.float32)).round().cast(out)
    return _float_pow(x, y)

  def _int_power(self, n: int) -> Any:
    result, base = self.ones_like(), self
    while n:
      if n & 1:
        result = result * base
      base, n = base * base, n >> 1
    return result

  def maximum(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return x._alu(Ops.MAX, y) if x.dtype != dtypes.bool else x._alu(Ops.OR, y)

  def minimum(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    if dtypes.is_float(x.dtype):
      return x.neg()._alu(Ops.MAX, y.neg()).neg()  # exact, NaN-propagating, min(-0, +0) = -0
    if x.dtype == dtypes.bool:
      return x._alu(Ops.AND, y)
    return x.bitwise_not()._alu(Ops.MAX, y.bitwise_not()).bitwise_not()  # ~ reverses the order of any int

  def abs(self) -> Any:
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
      return self
    return self._alu(Ops.MAX, self.neg())

  def sign(self) -> Any:
    zero = self._const(0)
    return self.lt(0).where(-1, self._alu(Ops.CMPNE, zero).cast(self.dtype)) if not dtypes.is_float(self.dtype) \
      else self.lt(0).where(-1.0, self.gt(0).where(1.0, self * 0))

  # ---- math (float results; ints are cast to the default float first)
  def _float(self) -> Any:
    return self.cast(least_upper_float(self.dtype))

  def exp2(self) -> Any:
    return self._float()._alu(Ops.EXP2)

  def log2(self) -> Any:
    return self._float()._alu(Ops.LOG2)

  @_half_in_float32
  def exp(self) -> Any:
    return (self._float() * LOG2_E)._alu(Ops.EXP2)

  @_half_in_float32
  def log(self) -> Any:
    return self._float()._alu(Ops.LOG2) * LN_2

  def sqrt(self) -> Any:
    return self._float()._alu(Ops.SQRT)

  def sin(self) -> Any:
    return self._float()._alu(Ops.SIN)

  @_half_in_float32
  def cos(self) -> Any:
    return (math.pi / 2 - self._float()).sin()

  @_half_in_float32
  def tan(self) -> Any:
    return self.sin() / self.cos()

  @_half_in_float32
  def tanh(self) -> Any:
    return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

  @_half_in_float32
  def sigmoid(self) -> Any:
    return (1.0 + (-self._float()).exp()).reciprocal()

  def relu(self) -> Any:
    """max(x, 0) like torch.relu: NaN stays NaN and -0.0 stays -0.0."""
    return self.lt(0).where(self._const(0), self)

  def trunc(self) -> Any:
    return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self

  def floor(self) -> Any:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (self.lt(t)).where(t - 1, t)

  def ceil(self) -> Any:
    if not dtypes.is_float(self.dtype):
      return self
    t = self.trunc()
    return (t.lt(self)).where(t + 1, t)

  def round(self) -> Any:
    """Round half to even, like torch.round."""
    if not dtypes.is_float(self.dtype):
      return self
    down = self.floor()
    diff = self - down
    half_up = diff.gt(0.5) | (diff.eq(0.5) & (down * 0.5).floor().ne(down * 0.5))
    return half_up.where(down + 1, down)

  # ---- comparisons (NaN-correct: only CMPLT and CMPNE are primitive)
  def lt(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPLT, y)

  def gt(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return y._alu(Ops.CMPLT, x)

  def eq(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPNE, y).logical_not()

  def ne(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPNE, y)

  def le(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return x._alu(Ops.CMPLT, y) | x.eq(y)

  def ge(self, y: Any) -> Any:
    x, y = self._broadcasted(y)
    return y._alu(Ops.CMPLT, x) | x.eq(y)

  def where(self, x: Any, y: Any) -> Any:
    """self ? x : y, lanewise; self is the condition."""
    cond = self.cast(dtypes.bool) if self.dtype != dtypes.bool else self
    if not isinstance(x, type(self)):  # a Python scalar takes the other branch's dtype when it fits its kind
      x = y._to_tensor(x) if isinstance(y, type(self)) else self._const(x, dtypes.from_py(x))
    x, y = x._broadcasted(y)
    from refgrad.tensor import broadcast_shape
    shape = broadcast_shape(cond.shape, x.shape)
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return cond._alu(Ops.WHERE, x, y)

  def isnan(self) -> Any:
    return self.ne(self)

  def logical_not(self) -> Any:
    return self.cast(dtypes.bool)._alu(Ops.XOR, self._const(True, dtypes.bool))

  # ---- bitwise
  def _bitwise(self, op: Ops, y: Any, reverse: bool = False) -> Any:
    x, y = self._broadcasted(y, reverse)
    if dtypes.is_float(x.dtype):
      raise TypeError(f"bitwise {op.name.lower()} is not supported for float dtype {x.dtype.name}")
    return x._alu(op, y)

  def bitwise_and(self, y: Any, reverse: bool = False) -> Any:
    return self._bitwise(Ops.AND, y, reverse)

  def bitwise_or(self, y: Any, reverse: bool = False) -> Any:
    return self._bitwise(Ops.OR, y, reverse)

  def bitwise_xor(self, y: Any, reverse: bool = False) -> Any:
    return self._bitwise(Ops.XOR, y, reverse)

  def xor(self, y: Any, reverse: bool = False) -> Any:
    return self._bitwise(Ops.XOR, y, reverse)

  def bitwise_not(self) -> Any:
    if dtypes.is_float(self.dtype):
      raise TypeError(f"bitwise not is not supported for float dtype {self.dtype.name}")
    return self._alu(Ops.XOR, self._const(True if self.dtype == dtypes.bool else -1))

  def _shift(self, op: Ops, y: Any) -> Any:
    if not dtypes.is_int(self.dtype):
      raise TypeError(f"shifts need an integer tensor, got {self.dtype.name}")
    other = self._to_tensor(y, self.dtype)
    if not dtypes.is_int(other.dtype):
      raise TypeError(f"shift amount must be an integer, got {other.dtype.name}")
    x, amount = self._broadcasted(other.cast(self.dtype), match_dtype=False)
    return x._alu(op, amount)

  def lshift(self, y: Any) -> Any:
    return self._shift(Ops.SHL, y)

  def rshift(self, y: Any) -> Any:
    return self._shift(Ops.SHR, y)

  # ---- casts
  def cast(self, dtype: DType | str) -> Any:
    dt = to_dtype(dtype)
    return self if dt == self.dtype else self._from(UOp(Ops.CAST, dt, (self.uop,)))

  def bitcast(self, dtype: DType | str) -> Any:
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize:
      raise TypeError(f"bitcast from {self.dtype.name} to {dt.name}: itemsizes differ "
                      f"({self.dtype.itemsize} vs {dt.itemsize})")
    return self if dt == self.dtype else self._from(UOp(Ops.BITCAST, dt, (self.uop,)))

  def float(self) -> Any:
    return self.cast(dtypes.float32)

  def half(self) -> Any:
    return self.cast(dtypes.float16)

  def int(self) -> Any:
    return self.cast(dtypes.int32)

  def bool(self) -> Any:
    return self.cast(dtypes.bool)

  def double(self) -> Any:
    return self.cast(dtypes.float64)

  def long(self) -> Any:
    return self.cast(dtypes.int64)

  # ---- operators
  def __add__(self, y: Any) -> Any: return self.add(y)  # noqa: E704
  def __radd__(self, y: Any) -> Any: return self.add(y, True)  # noqa: E704
  def __sub__(self, y: Any) -> Any: return self.sub(y)  # noqa: E704
  def __rsub__(self, y: Any) -> Any: return self.sub(y, True)  # noqa: E704
  def __mul__(self, y: Any) -> Any: return self.mul(y)  # noqa: E704
  def __rmul__(self, y: Any) -> Any: return self.mul(y, True)  # noqa: E704
  def __truediv__(self, y: Any) -> Any: return self.div(y)  # noqa: E704
  def __rtruediv__(self, y: Any) -> Any: return self.div(y, True)  # noqa: E704
  def __floordiv__(self, y: Any) -> Any: return self.floordiv(y)  # noqa: E704
  def __rfloordiv__(self, y: Any) -> Any: return self.floordiv(y, True)  # noqa: E704
  def __mod__(self, y: Any) -> Any: return self.mod(y)  # noqa: E704
  def __rmod__(self, y: Any) -> Any: return self.mod(y, True)  # noqa: E704
  def __pow__(self, y: Any) -> Any: return self.pow(y)  # noqa: E704
  def __rpow__(self, y: Any) -> Any: return self.pow(y, True)  # noqa: E704
  def __neg__(self) -> Any: return self.neg()  # noqa: E704
  def __abs__(self) -> Any: return self.abs()  # noqa: E704
  def __and__(self, y: Any) -> Any: return self.bitwise_and(y)  # noqa: E704
  def __rand__(self, y: Any) -> Any: return self.bitwise_and(y, True)  # noqa: E704
  def __or__(self, y: Any) -> Any: return self.bitwise_or(y)  # noqa: E704
  def __ror__(self, y: Any) -> Any: return self.bitwise_or(y, True)  # noqa: E704
  def __xor__(self, y: Any) -> Any: return self.bitwise_xor(y)  # noqa: E704
  def __rxor__(self, y: Any) -> Any: return self.bitwise_xor(y, True)  # noqa: E704
  def __invert__(self) -> Any: return self.bitwise_not()  # noqa: E704
  def __lshift__(self, y: Any) -> Any: return self.lshift(y)  # noqa: E704
  def __rshift__(self, y: Any) -> Any: return self.rshift(y)  # noqa: E704
  def __lt__(self, y: Any) -> Any: return self.lt(y)  # noqa: E704
  def __gt__(self, y: Any) -> Any: return self.gt(y)  # noqa: E704
  def __le__(self, y: Any) -> Any: return self.le(y)  # noqa: E704
  def __ge__(self, y: Any) -> Any: return self.ge(y)  # noqa: E704
  def __eq__(self, y: Any) -> Any: return self.eq(y)  # type: ignore[override]  # noqa: E704
  def __ne__(self, y: Any) -> Any: return self.ne(y)  # type: ignore[override]  # noqa: E704


def _float_pow(x: Any, y: Any) -> Any:
  """x ** y for floats via exp2(y * log2|x|), with the sign, zero and infinity rules of C's pow (as torch)."""
  if x.dtype in (dtypes.float16, dtypes.bfloat16):  # the log2/mul/exp2 chain would round three times in half
    return _float_pow(x.cast(dtypes.float32), y.cast(dtypes.float32)).cast(x.dtype)
  magnitude = (y * x.abs().log2()).exp2()
  y_is_int = y.trunc().eq(y)  # True for +-inf, False for NaN
  y_is_odd = y_is_int & (y * 0.5).trunc().ne(y * 0.5)
  sign_bit = x.lt(0) | (x.eq(0) & x.reciprocal().lt(0))  # includes -0.0
  result = (sign_bit & y_is_odd).where(-magnitude, magnitude)
  result = (x.lt(0) & x.ne(float("-inf")) & y_is_int.logical_not()).where(float("nan"), result)
  one = y.eq(0) | x.eq(1) | (x.eq(-1) & y.abs().eq(float("inf")))
  return one.where(1.0, result)
