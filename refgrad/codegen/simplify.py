"""Symbolic rules: constant folding, algebraic identities, and integer index simplification.

Index expressions come out of the lowering as sums of products of loop and thread indices with `//` and `%`
from reshapes. These rules, driven by value ranges, fold them back to small affine forms, e.g.
`(x//4)*4 + x%4 -> x`. Folding uses refgrad/alu.py, so constants fold exactly as the spec says.
"""
from __future__ import annotations

import functools

import numpy as np

from refgrad.alu import exec_alu, exec_cast, undefined_cast_lanes, undefined_lanes
from refgrad.dtype import dtypes
from refgrad.rewrite import PatternMatcher, UPat, graph_rewrite
from refgrad.uop import GroupOp, Ops, UOp
from refgrad.value_ranges import INDEX_DTYPES, never_wraps


# ---- constant folding through the spec
def fold_constants(root: UOp) -> UOp | None:
  srcs = [np.array(s.arg, dtype=s.dtype.np) for s in root.src]
  if undefined_lanes(root.op, root.dtype, *srcs) is not None and undefined_lanes(root.op, root.dtype, *srcs).any():
    return None  # leave undefined operations to the device
  return UOp.const(root.dtype, exec_alu(root.op, root.dtype, *srcs).item())


def fold_cast(x: UOp, c: UOp) -> UOp | None:
  value = np.array(c.arg, dtype=c.dtype.np)
  undefined = undefined_cast_lanes(value, x.dtype)
  if undefined is not None and undefined.any():
    return None
  return UOp.const(x.dtype, exec_cast(value, x.dtype).item())


def fold_by_range(x: UOp) -> UOp | None:
  if x.op is not Ops.CONST and (x.dtype in INDEX_DTYPES or x.dtype == dtypes.bool) and x.vmin == x.vmax:
    return UOp.const(x.dtype, x.vmin)
  return None


# ---- integer sums as linear forms: {term: coefficient} + constant
# Every integer ADD of a kernel is put in canonical form, so a chain of n additions asks for the forms of all its
# prefixes: memoized, each is one step from the one below (not n), and a pass that meets the sum again (the lowering
# simplifies a kernel several times) finds it done. Nodes are immutable, so a node's form never changes; the forms
# are shared, so callers never modify them. 2**15 entries each (measured: the 50 kernels of an MLP's first training
# step ask for 98,000 forms and 53,000 canonical sums, most of them once; a full cache holds about 15 MB of forms).
MEMO_SIZE = 1 << 15


@functools.lru_cache(maxsize=MEMO_SIZE)
def linear_form(u: UOp, exact: bool = False) -> tuple[dict[UOp, int], int]:
  """u as a sum of terms times integers plus a constant. The sum equals u modulo 2**bits: wraparound commutes with
  ADD, MUL and NEG. With `exact`, a sum, product or negation that may wrap around is kept as a term, so the form
  equals u as an unbounded integer, which quotients and remainders need ((a*2)//2 is not a in uint8: 200*2 wraps).
  Memoized (see above): do not modify the dict it returns."""
  if u.op is Ops.CONST:
    return {}, u.arg
  if exact and u.op in (Ops.ADD, Ops.MUL, Ops.NEG) and not never_wraps(u):
    return {u: 1}, 0
  if u.op is Ops.ADD:
    (ta, ca), (tb, cb) = linear_form(u.src[0], exact), linear_form(u.src[1], exact)
    merged = dict(ta)
    for t, k in tb.items():
      merged[t] = merged.get(t, 0) + k
    return {t: k for t, k in merged.items() if k != 0}, ca + cb
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
    terms, c = linear_form(u.src[0], exact)
    k = u.src[1].arg
    return ({t: v * k for t, v in terms.items()} if k != 0 else {}), c * k
  if u.op is Ops.NEG:
    terms, c = linear_form(u.src[0], exact)
    return {t: -v for t, v in terms.items()}, -c
  return {u: 1}, 0


def _term_order(t: UOp) -> tuple:
  """Loops last, then by op and arg and the ops and args of the sources (an index's x//4 before y//4 when x is the
  outer loop: mostly the order the lowering built them in, so few sums are rebuilt); ties by the structure's digest,
  never by object id: the order is in the rendered source, whose text keys the compile cache across processes."""
  return (t.op is Ops.RANGE, t.op.value, _arg_order(t.arg), tuple((s.op.value, _arg_order(s.arg)) for s in t.src),
          t.digest)


def _arg_order(arg) -> tuple:
  """Args compared only with args of their own kind: numbers as numbers, tuples of ints (a loop's) as tuples, anything
  else by its text."""
  if type(arg) in (int, float):
    return ("", arg)
  if type(arg) is tuple and all(type(a) is int for a in arg):
    return ("tuple", arg)
  return (type(arg).__name__, repr(arg))


def build_sum(terms: dict[UOp, int], const: int, dtype) -> UOp:
  """The sum of terms times their coefficients plus const, terms in _term_order. Every term has the sum's dtype, so
  the nodes are made directly (what `+` and `*` would make, without their dtype rules)."""
  out: UOp | None = None
  for t in sorted(terms, key=_term_order):
    k = terms[t]
    piece = t if k == 1 else UOp(Ops.MUL, dtype, (t, UOp.const(dtype, k)))
    out = piece if out is None else UOp(Ops.ADD, dtype, (out, piece))
  if out is None:
    return UOp.const(dtype, const)
  return UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const))) if const != 0 else out


def _merge_one_pair(terms: dict[UOp, int]) -> dict[UOp, int] | None:
  """Merge the first pair that unflattening an index and flattening it again leaves behind:
  (x//c)*c*k + (x%c)*k -> x*k   and   ((x//c)%m)*c*k + (x%c)*k -> (x%(c*m))*k   (x >= 0; just x*k when c*m is
  beyond the dtype, which x cannot reach)."""
  for t, k in terms.items():
    if t.op is not Ops.MOD or t.src[1].op is not Ops.CONST or t.src[0].vmin < 0:
      continue
    x, c = t.src[0], t.src[1]
    div = UOp(Ops.IDIV, t.dtype, (x, c))
    candidates = [(div, x)]
    candidates += [(u, x if abs(c.arg * u.src[1].arg) > dtypes.max(x.dtype) else x % (c.arg * u.src[1].arg))
                   for u in terms if u.op is Ops.MOD and u.src[0] is div and u.src[1].op is Ops.CONST]
    for partner, merged_term in candidates:
      if terms.get(partner) == k * c.arg:
        merged = {u: v for u, v in terms.items() if u is not t and u is not partner}
        merged[merged_term] = merged.get(merged_term, 0) + k
        return {u: v for u, v in merged.items() if v != 0}
  return None


def _merge_div_mod_pairs(terms: dict[UOp, int]) -> dict[UOp, int]:
  while (merged := _merge_one_pair(terms)) is not None:
    terms = merged
  return terms


@functools.lru_cache(maxsize=MEMO_SIZE)
def canonicalize_sum(root: UOp) -> UOp | None:
  """root in canonical form (build_sum of its linear form, index pairs merged), or None if it is already."""
  terms, const = linear_form(root)
  terms = _merge_div_mod_pairs(terms)
  rebuilt = build_sum(terms, const, root.dtype)
  return rebuilt if rebuilt is not root else None


def _split_divisible(x: UOp, c: int) -> tuple[UOp, UOp] | None:
  """x = c*quotient + rest with x >= 0, rest >= 0 and a non-empty quotient, or None."""
  if x.vmin < 0:
    return None
  terms, const = linear_form(x, exact=True)
  quotient_terms = {t: k // c for t, k in terms.items() if k % c == 0}
  quotient_const, rest_const = divmod(const, c)
  if not quotient_terms and not quotient_const:
    return None
  rest = build_sum({t: k for t, k in terms.items() if k % c != 0}, rest_const, x.dtype)
  if rest.vmin < 0:
    return None
  return build_sum(quotient_terms, quotient_const, x.dtype), rest


def _split_remainders(x: UOp, c: int) -> tuple[UOp, UOp] | None:
  """x = c*quotient + rest with every coefficient and the constant split as k = (k//c)*c + k%c, or None unless
  0 <= rest < c. Then x//c is quotient and x%c is rest exactly (x >= 0, so C's truncation is flooring)."""
  if x.vmin < 0:
    return None
  terms, const = linear_form(x, exact=True)
  if not terms:
    return None
  rest = build_sum({t: k % c for t, k in terms.items() if k % c}, const % c, x.dtype)
  if rest.vmin < 0 or rest.vmax >= c:
    return None
  return build_sum({t: k // c for t, k in terms.items() if k // c}, const // c, x.dtype), rest


def simplify_idiv(x: UOp, c: UOp) -> UOp | None:
  if c.arg <= 0 or x.vmin < 0:
    return None
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
    divisor = x.src[1].arg * c.arg  # (y//a)//c is y//(a*c); beyond the dtype, y//a < c and both are 0
    return x.src[0] // divisor if divisor <= dtypes.max(x.dtype) else UOp.const(x.dtype, 0)
  if (exact := _split_remainders(x, c.arg)) is not None:
    return exact[0]
  if (split := _split_divisible(x, c.arg)) is None:
    return None
  quotient, rest = split
  return quotient if rest.vmax < c.arg else quotient + rest // c


def simplify_mod(x: UOp, c: UOp) -> UOp | None:
  if c.arg <= 0 or x.vmin < 0:
    return None
  if x.vmax < c.arg:
    return x
  if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c.arg == 0:
    return x.src[0] % c
  if (exact := _split_remainders(x, c.arg)) is not None:
    return exact[1]
  if (split := _split_divisible(x, c.arg)) is None:
    return None
  rest = split[1]
  return rest if rest.vmax < c.arg else rest % c


ints = tuple(INDEX_DTYPES)
x_, y_ = UPat.var("x"), UPat.var("y")

symbolic_rules = PatternMatcher([
  # constants: fold every ALU op with constant sources through alu.py
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="root"), fold_constants),
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="x"), fold_cast),
  # identities that hold for every dtype (x*1 is exact for floats too)
  (UPat(Ops.MUL, src=[x_, UPat.const(1)]), lambda x: x),
  (UPat(Ops.MUL, src=[x_, UPat.const(1.0)]), lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.const(True), x_, y_)), lambda x, y: x),
  (UPat(Ops.WHERE, src=(UPat.const(False), x_, y_)), lambda x, y: y),
  (UPat(Ops.WHERE, src=(UPat.var(), x_, x_)), lambda x: x),
  (UPat(Ops.AND, src=[x_, UPat.const(True)]), lambda x: x),
  (UPat(Ops.AND, src=[x_, UPat.const(False)]), lambda x: UOp.const(dtypes.bool, False)),
  (UPat(Ops.CAST, src=(x_,), name="c"), lambda x, c: x if x.dtype == c.dtype else None),
  # integer identities
  (UPat(Ops.MUL, dtype=ints, src=[x_, UPat.const(0)]), lambda x: UOp.const(x.dtype, 0)),
  (UPat(Ops.ADD, dtype=ints, src=[x_, UPat.const(0)]), lambda x: x),
  (UPat(Ops.IDIV, dtype=ints, src=(x_, UPat.const(1))), lambda x: x),
  (UPat(Ops.MOD, dtype=ints, src=(x_, UPat.const(1))), lambda x: UOp.const(x.dtype, 0)),
  # index simplification driven by value ranges
  (UPat(GroupOp.ALU, dtype=ints + (dtypes.bool,), name="x"), fold_by_range),
  (UPat(Ops.ADD, dtype=ints, name="root"), canonicalize_sum),
  (UPat(Ops.MUL, dtype=ints, src=(UPat(Ops.ADD), UPat.cvar()), name="root"), canonicalize_sum),
  (UPat(Ops.IDIV, dtype=ints, src=(x_, UPat.cvar("c"))), simplify_idiv),
  (UPat(Ops.MOD, dtype=ints, src=(x_, UPat.cvar("c"))), simplify_mod),
])


def simplify(root: UOp) -> UOp:
  """Apply the symbolic rules to a whole graph."""
  return graph_rewrite(root, symbolic_rules)


# Measured on the PYTHON runs of tests/test_movement.py and test_indexing.py: 1751 distinct expressions, 5189 hits
# unbounded, 5028 with only 256 entries (the repeats are close together).
@functools.lru_cache(maxsize=1 << 12)
def simplify_index(root: UOp) -> UOp:
  """simplify, memoized: the lowering simplifies the same index expressions many times."""
  return graph_rewrite(root, symbolic_rules)


# ---- index simplification under a load's gate
def conjuncts(cond: UOp) -> list[UOp]:
  """The terms of an AND tree of bools."""
  return conjuncts(cond.src[0]) + conjuncts(cond.src[1]) if cond.op is Ops.AND else [cond]


def bounds_given(cond: UOp) -> dict[UOp, tuple[int, int]]:
  """What a gate says about the integer expressions it compares with constants: expr -> (lowest, highest) wherever
  the gate holds (`e < c` caps e at c - 1, `c < e` raises it to c + 1), tighter than their value ranges."""
  bounds: dict[UOp, tuple[int, int]] = {}
  for term in conjuncts(cond):
    if term.op is not Ops.CMPLT or term.src[0].dtype not in INDEX_DTYPES:
      continue
    (a, b), low, high = term.src, None, None
    if b.op is Ops.CONST and a.op is not Ops.CONST:
      expr, high = a, b.arg - 1
    elif a.op is Ops.CONST and b.op is not Ops.CONST:
      expr, low = b, a.arg + 1
    else:
      continue
    lo, hi = bounds.get(expr, (expr.vmin, expr.vmax))
    bounds[expr] = (max(lo, low) if low is not None else lo, min(hi, high) if high is not None else hi)
  return {e: (lo, hi) for e, (lo, hi) in bounds.items() if (lo, hi) != (e.vmin, e.vmax) and lo <= hi}


def simplify_given(index: UOp, cond: UOp) -> UOp:
  """`index` simplified assuming `cond` holds: each expression the gate bounds stands in for a variable of just
  those bounds (a RANGE no kernel has, offset by the lowest value) while the rules run, then comes back. Where a
  load's gate is false it reads nothing, so its index only has to be right where the gate holds (a convolution's
  gradient divides by the window size under `0 <= x < size`: the quotient is then 0)."""
  variables: dict[UOp, tuple[UOp, int]] = {}  # expr -> (its stand-in variable, its lowest value)
  for n, (expr, (lo, hi)) in enumerate(bounds_given(cond).items()):
    if expr in index.toposort:
      variables[expr] = (UOp(Ops.RANGE, expr.dtype, (), (-1 - n, hi - lo + 1)), lo)
  if not variables:
    return index
  offset = {expr: UOp(Ops.ADD, expr.dtype, (var, UOp.const(expr.dtype, lo))) for expr, (var, lo) in variables.items()}
  simplified = simplify(index.substitute(offset))
  back = {var: UOp(Ops.ADD, expr.dtype, (expr, UOp.const(expr.dtype, -lo))) for expr, (var, lo) in variables.items()}
  return simplify(simplified.substitute(back))


def simplify_gated_loads(sink: UOp) -> UOp:
  """Every gated load's index simplified under its gate (simplify_given)."""
  mapping = {}
  for u in sink.toposort:
    if u.op is Ops.LOAD and len(u.src) > 2 and u.src[1].op is not Ops.CONST:
      index = simplify_given(u.src[1], u.src[2])
      if index is not u.src[1]:
        mapping[u] = u.replace(src=(u.src[0], index, u.src[2]))
  return sink.substitute(mapping) if mapping else sink
