"""The rewrite engine: UPat matching, PatternMatcher dispatch, graph_rewrite to a fixed point."""
import pytest

from refgrad.dtype import dtypes
from refgrad.rewrite import PatternMatcher, RewriteLoopError, UPat, graph_rewrite
from refgrad.uop import Ops, UOp

i32 = dtypes.int32


def var(name: str, size: int = 16) -> UOp:
  return UOp(Ops.SPECIAL, i32, (), (name, size))


def test_hash_consing_makes_equal_nodes_identical():
  a, b = var("a"), var("a")
  assert a is b
  assert (a + 1) is (b + 1)
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  assert UOp.const(dtypes.float32, float("nan")).arg != UOp.const(dtypes.float32, float("nan")).arg


def test_upat_binds_names_and_checks_consistency():
  x = var("x")
  pat = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
  assert pat.match(x + x, {}) == [{"a": x}]
  assert pat.match(x + var("y"), {}) == []


def test_upat_commutative_tries_both_orders():
  x = var("x")
  pat = UPat(Ops.ADD, src=[UPat.var("v"), UPat.cvar("c")])
  assert pat.match(x + 3, {})[0]["v"] is x
  three_plus_x = UOp(Ops.ADD, i32, (UOp.const(i32, 3), x))
  assert pat.match(three_plus_x, {})[0]["c"].arg == 3


def test_upat_any_length_and_repeated_sources():
  a, b, c = var("a"), var("b"), var("c")
  sink = UOp(Ops.SINK, dtypes.void, (a, b, c))
  assert UPat(Ops.SINK, src=UPat(Ops.SPECIAL)).match(sink, {})
  assert UPat(Ops.SINK, src=(UPat.var("first"),), allow_any_len=True).match(sink, {})[0]["first"] is a
  assert not UPat(Ops.SINK, src=(UPat.var("first"),)).match(sink, {})


def test_upat_matches_dtype_and_arg():
  x = var("x")
  assert UPat(Ops.SPECIAL, dtype=dtypes.int32).match(x, {})
  assert not UPat(Ops.SPECIAL, dtype=dtypes.int64).match(x, {})
  assert UPat(Ops.SPECIAL, arg=("x", 16)).match(x, {})
  assert not UPat(Ops.SPECIAL, arg=("y", 16)).match(x, {})


def test_graph_rewrite_reaches_a_fixed_point():
  # x*2 -> x+x, and x+x+... chains keep rewriting until no rule applies
  rules = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(2))), lambda x: x + x)])
  x = var("x")
  out = graph_rewrite((x * 2) * 2, rules)
  assert out is (x + x) + (x + x)


def test_graph_rewrite_passes_ctx_and_memoizes():
  calls = []

  def count(ctx, x):
    ctx.append(x)
    return None

  rules = PatternMatcher([(UPat(Ops.SPECIAL, name="x"), count)])
  x = var("x")
  graph_rewrite((x + 1) * (x + 1), rules, ctx=calls)
  assert calls == [x]  # a shared node is visited once


def test_substitute_and_toposort():
  x, y = var("x"), var("y")
  expr = (x + 1) * x
  assert expr.toposort[-1] is expr and expr.toposort.index(x) < expr.toposort.index(x + 1)
  assert expr.substitute({x: y}) is (y + 1) * y


def test_printed_form_is_readable():
  text = repr(var("x") + 1)
  assert "ADD:int32(%0, %1)" in text and "SPECIAL" in text


def add_to_mul(x, c):
  return x.alu(Ops.MUL, c)


def mul_to_add(x, c):
  return x.alu(Ops.ADD, c)


def test_rules_that_undo_each_other_raise_naming_both():
  """A -> B and B -> A would spin forever: graph_rewrite stops and names the rules."""
  loop = PatternMatcher([
    (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), add_to_mul),
    (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c"))), mul_to_add),
  ])
  with pytest.raises(RewriteLoopError, match="add_to_mul.*mul_to_add"):
    graph_rewrite(var("x") + 3, loop)


def test_a_rule_whose_results_grow_forever_raises():
  grow = PatternMatcher([(UPat.cvar("c"), lambda c: UOp.const(c.dtype, c.arg + 1))])
  with pytest.raises(RewriteLoopError, match="test_rewrite.py"):
    graph_rewrite(UOp.const(i32, 0), grow)
