"""Value ranges of integer and bool IR nodes: (lowest, highest) values a node can take, from its op and its sources'
ranges. They sit beside the IR (UOp.vrange) so that index simplification (codegen/simplify.py) and the lowering can
prove bounds without the IR depending on codegen."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refgrad.dtype import dtypes
from refgrad.ops import Ops

if TYPE_CHECKING:
  from refgrad.uop import UOp

INDEX_DTYPES = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
                          dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})


# ---- value ranges: (lowest, highest) of an integer or bool node
def _range_of_products(a: tuple, b: tuple) -> tuple:
  products = [x * y for x in a for y in b]
  return min(products), max(products)


def _trunc_div(a: int, b: int) -> int:
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b > 0) else -q


def _idiv_range(u: UOp) -> tuple | None:
  (lo, hi), (dlo, dhi) = u.src[0].vrange, u.src[1].vrange
  if dlo != dhi or dlo <= 0:
    return None
  return _trunc_div(lo, dlo), _trunc_div(hi, dlo)


def _mod_range(u: UOp) -> tuple | None:
  (lo, hi), (dlo, dhi) = u.src[0].vrange, u.src[1].vrange
  if dlo <= 0:
    return None
  if 0 <= lo and hi < dlo:
    return lo, hi
  return (0 if lo >= 0 else -(dhi - 1)), (dhi - 1 if hi > 0 else 0)


def _cmp_range(u: UOp) -> tuple:
  (alo, ahi), (blo, bhi) = u.src[0].vrange, u.src[1].vrange
  if u.op is Ops.CMPLT:
    return (ahi < blo, alo < bhi)
  never_equal = ahi < blo or bhi < alo
  always_equal = alo == ahi == blo == bhi
  return (never_equal, not always_equal)


RANGE_RULES: dict[Ops, Any] = {
  Ops.CONST: lambda u: (u.arg, u.arg),
  Ops.SPECIAL: lambda u: (0, u.arg[1] - 1),
  Ops.LOCAL_INDEX: lambda u: (0, u.arg[1] - 1),
  Ops.GROUP_INDEX: lambda u: (0, u.arg[1] - 1),
  Ops.RANGE: lambda u: (0, u.arg[1] - 1),
  Ops.ADD: lambda u: (u.src[0].vmin + u.src[1].vmin, u.src[0].vmax + u.src[1].vmax),
  Ops.MUL: lambda u: _range_of_products(u.src[0].vrange, u.src[1].vrange),
  Ops.NEG: lambda u: (-u.src[0].vmax, -u.src[0].vmin),
  Ops.IDIV: _idiv_range,
  Ops.MOD: _mod_range,
  Ops.MAX: lambda u: (max(u.src[0].vmin, u.src[1].vmin), max(u.src[0].vmax, u.src[1].vmax)),
  Ops.WHERE: lambda u: (min(u.src[1].vmin, u.src[2].vmin), max(u.src[1].vmax, u.src[2].vmax)),
  Ops.CMPLT: _cmp_range,
  Ops.CMPNE: _cmp_range,
  Ops.CAST: lambda u: u.src[0].vrange,
  Ops.DEFINE_VAR: lambda u: (u.arg[1], u.arg[2]),
  Ops.BIND: lambda u: u.src[0].vrange,  # what a kernel compiled for the variable must allow: all its values
}


def _exact_range(u: UOp) -> tuple[Any, Any] | None:
  """What u's op gives on unbounded integers over its sources' ranges, None if no rule knows; it may not fit u's
  dtype (a sum that can wrap around)."""
  rule = RANGE_RULES.get(u.op)
  if rule is None or not all(s.dtype in INDEX_DTYPES or s.dtype == dtypes.bool for s in u.src[-2:]):
    return None
  return rule(u)


def never_wraps(u: UOp) -> bool:
  """Whether an integer node's result always equals its op on unbounded integers (no lane wraps around)."""
  if u.dtype not in INDEX_DTYPES or (found := _exact_range(u)) is None:
    return False
  return dtypes.min(u.dtype) <= found[0] and found[1] <= dtypes.max(u.dtype)


def value_range(u: UOp) -> tuple[Any, Any]:
  """Bounds of an integer/bool node; the dtype's full range when nothing better is known."""
  if u.dtype == dtypes.void:
    return None, None
  full = (dtypes.min(u.dtype), dtypes.max(u.dtype))
  if u.dtype not in INDEX_DTYPES and u.dtype != dtypes.bool:
    return full
  found = _exact_range(u)
  if found is None or found[0] < full[0] or found[1] > full[1]:  # may overflow: know nothing
    return full
  return found
