"""uint16, uint32 and uint64 ops that torch has no CPU kernel for, composed from signed ones.

torch documents these dtypes as having "limited support" (its tensor attributes docs), and torch 2.13 has no CPU
kernel for NEG, ADD, IDIV, MOD, MAX, CMPLT, SHL, SHR or the reductions on them ('"add_stub" not implemented for
'UInt32''). Threefry, and so every `Tensor.rand`, adds and shifts uint32. The rules here compute them on the same
bits: wrapping arithmetic and left shifts on the signed type of the same size (two's complement wraps alike), and
what depends on the value (comparisons, division, right shifts, maxima) on uint16 and uint32 widened to int64, on
uint64 with its sign bit flipped (which orders it as int64). uint64 division has no such way (its values do not fit
int64): IDIV and MOD on uint64 stay unsupported.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from refgrad.dtype import DType, dtypes
from refgrad.uop import Ops
from refgrad_torch.casts import SIGNED_OF_SIZE, torch_dtype

Step = Callable[..., torch.Tensor]
WIDE_UNSIGNED = (dtypes.uint16, dtypes.uint32, dtypes.uint64)
INT64_MIN = -2 ** 63


def _signed(x: torch.Tensor) -> torch.Tensor:
  return x.view(SIGNED_OF_SIZE[x.element_size()])


def _widened(x: torch.Tensor) -> torch.Tensor:
  """uint16 or uint32 as int64, the same value."""
  return _signed(x).to(torch.int64) & ((1 << (8 * x.element_size())) - 1)


def _narrowed(x: torch.Tensor, dtype: DType) -> torch.Tensor:
  """An int64 holding a value of `dtype` (uint16, uint32) back as `dtype`: the low bits."""
  return x.to(SIGNED_OF_SIZE[dtype.itemsize]).view(torch_dtype(dtype))


def _ordered(x: torch.Tensor) -> torch.Tensor:
  """A wide unsigned value as an int64 in the same order: widened, or for uint64 its sign bit flipped."""
  return _signed(x) ^ INT64_MIN if x.element_size() == 8 else _widened(x)


def _wrapping(op: Step) -> Callable[[DType], Step]:
  return lambda dt: lambda *xs: op(*(_signed(x) for x in xs)).view(torch_dtype(dt))


def _shr(dt: DType) -> Step:
  if dt != dtypes.uint64:
    return lambda a, b: _narrowed(_widened(a) >> _widened(b), dt)

  def logical(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    shift = _signed(b)
    kept = ~((-1 << (63 - shift)) << 1)  # the low 64 - shift bits (all of them for a shift of 0)
    return ((_signed(a) >> shift) & kept).view(torch.uint64)
  return logical


def _divide(mod: bool) -> Callable[[DType], Step]:
  def rule(dt: DType) -> Step:
    def divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
      x, y = _widened(a), _widened(b)
      y = torch.where(y == 0, torch.ones_like(y), y)  # SPEC: a zero divisor's lane is UNDEFINED; torch would raise
      return _narrowed(torch.remainder(x, y) if mod else torch.div(x, y, rounding_mode="trunc"), dt)
    return divide
  return rule


def _where(dt: DType) -> Step:
  """WHERE on the signed views: torch.compile cannot compile a where over uint16/32/64 values ('Promotion for
  uint16, uint32, uint64 types is not supported, attempted to promote Bool and UInt32', found by an INDUCTOR
  campaign), which eager torch computes."""
  return lambda c, a, b: torch.where(c, _signed(a), _signed(b)).view(torch_dtype(dt))


def _max(dt: DType) -> Step:
  return lambda a, b: _where(dt)(_ordered(a) < _ordered(b), b, a)


# op -> (operand dtype -> step over the operands' tensors)
ALU: dict[Ops, Callable[[DType], Step]] = {
  Ops.NEG: _wrapping(torch.neg),
  Ops.ADD: _wrapping(torch.add),
  Ops.SHL: _wrapping(torch.bitwise_left_shift),
  Ops.SHR: _shr,
  Ops.IDIV: _divide(mod=False),
  Ops.MOD: _divide(mod=True),
  Ops.MAX: _max,
  Ops.WHERE: _where,
  Ops.CMPLT: lambda dt: lambda a, b: _ordered(a) < _ordered(b),
}
NO_WAY = {(Ops.IDIV, dtypes.uint64): "torch has no CPU kernel for uint64 division (div_trunc_cpu not implemented), "
                                     "and its values do not fit int64",
          (Ops.MOD, dtypes.uint64): "torch has no CPU kernel for uint64 remainder (fmod_cpu not implemented), and "
                                    "its values do not fit int64"}


def reduce_step(op: Ops, dt: DType) -> Callable[[torch.Tensor, tuple[int, ...]], torch.Tensor]:
  """A reduction over `axes` of a wide unsigned tensor: sums and products wrap alike in the signed type; a maximum
  is taken in order (_ordered) and mapped back."""
  if op is Ops.ADD:
    return lambda x, axes: torch.sum(_signed(x), axes, keepdim=True, dtype=_signed(x).dtype).view(torch_dtype(dt))

  if op is Ops.MUL:
    def product(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
      x = _signed(x)
      for axis in axes:
        x = torch.prod(x, axis, keepdim=True, dtype=x.dtype)
      return x.view(torch_dtype(dt))
    return product

  def maximum(x: torch.Tensor, axes: tuple[int, ...]) -> torch.Tensor:
    top = torch.amax(_ordered(x), axes, keepdim=True)
    return (top ^ INT64_MIN).view(torch.uint64) if dt == dtypes.uint64 else _narrowed(top, dt)
  return maximum
