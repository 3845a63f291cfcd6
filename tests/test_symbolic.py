"""Symbolic rules: value ranges, constant folding through alu.py, and index simplification."""
import itertools

import numpy as np
import pytest

from refgrad.codegen.simplify import simplify
from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp

IDX = dtypes.int64


def var(name: str, size: int) -> UOp:
  return UOp(Ops.SPECIAL, IDX, (), (name, size))


def evaluate(u: UOp, env: dict[UOp, int]) -> int:
  """An independent evaluator with Python integers (non-negative operands only)."""
  if u in env:
    return env[u]
  if u.op is Ops.CONST:
    return u.arg
  a = [evaluate(s, env) for s in u.src]
  ops = {Ops.ADD: lambda p, q: p + q, Ops.MUL: lambda p, q: p * q, Ops.IDIV: lambda p, q: p // q,
         Ops.MOD: lambda p, q: p % q, Ops.NEG: lambda p: -p, Ops.CMPLT: lambda p, q: p < q,
         Ops.AND: lambda p, q: p and q}
  return ops[u.op](*a)


def test_div_mod_pair_folds_to_the_variable():
  x = var("x", 64)
  assert simplify((x // 4) * 4 + x % 4) is x


def test_unflatten_then_flatten_is_identity():
  i, j = var("i", 3), var("j", 12)
  flat = i * 12 + j
  rebuilt = (flat // 6) * 6 + flat % 6
  assert simplify(rebuilt) is simplify(flat)


def test_value_ranges():
  x = var("x", 10)
  assert (x * 3 + 2).vrange == (2, 29)
  assert (x // 4).vrange == (0, 2)
  assert (x % 4).vrange == (0, 3)
  assert simplify(x % 16) is x
  assert simplify(x // 16).op is Ops.CONST and simplify(x // 16).arg == 0
  assert simplify(x.lt(10)).arg is True


def test_constant_folding_uses_the_spec():
  c = UOp.const(dtypes.int8, 127)
  folded = simplify(c + UOp.const(dtypes.int8, 1))
  assert folded.op is Ops.CONST and folded.arg == -128  # wraparound, as alu.py says
  neg7 = UOp.const(dtypes.int32, -7)
  assert simplify(UOp(Ops.IDIV, dtypes.int32, (neg7, UOp.const(dtypes.int32, 2)))).arg == -3  # truncates
  div0 = UOp(Ops.IDIV, dtypes.int32, (neg7, UOp.const(dtypes.int32, 0)))
  assert simplify(div0) is div0  # undefined: left for the device


def test_float_identities_keep_signed_zero():
  x = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.PARAM, dtypes.float32, (), (1, 4)), UOp.const(IDX, 0)))
  assert simplify(x * 1.0) is x
  assert simplify(x + 0.0) is not x  # -0.0 + 0.0 is +0.0: not an identity for floats


@pytest.mark.parametrize("shape", [(2, 3, 4), (4, 6), (5, 1, 7)])
def test_simplified_reshape_indices_agree_with_python(shape):
  """Unflatten a flat index into `shape` and simplify; every point must give the same value."""
  size = int(np.prod(shape))
  g = var("g", size)
  strides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
  parts = [(g // st) % sh for st, sh in zip(strides, shape)]
  flat_again = parts[0] * strides[0]
  for p, st in zip(parts[1:], strides[1:]):
    flat_again = flat_again + p * st
  simple = simplify(flat_again)
  assert simple is g
  for value in range(size):
    assert [evaluate(simplify(p), {g: value}) for p in parts] == list(np.unravel_index(value, shape))


def test_random_affine_div_mod_expressions_keep_their_value():
  rng = np.random.default_rng(0)
  a, b = var("a", 7), var("b", 5)
  for _ in range(60):
    k1, k2, k3, c = (int(v) for v in rng.integers(1, 9, 4))
    e = ((a * k1 + b * k2 + k3) // c) % (k1 + 2) + (a * k1 + b) % c
    s = simplify(e)
    for va, vb in itertools.product(range(7), range(5)):
      assert evaluate(s, {a: va, b: vb}) == evaluate(e, {a: va, b: vb})


# ---- simplification under a load's gate
def gated_expressions():
  """(index, gate) pairs over x in [0, 40) and y in [0, 6), the shapes a padded window's gradient makes."""
  x, y = var("x", 40), var("y", 6)
  shifted = x + y - 3
  return [
    (x // 8, x.lt(8)),                                          # the quotient is 0 where x < 8
    ((x + y) % 16 + (x + y) // 16 * 7, (x + y).lt(16)),         # both fold away under the gate
    (shifted // 5, UOp.const(IDX, -1).lt(shifted).logical_and(shifted.lt(5))),  # 0 <= shifted < 5
    (x % 8 + y * 3, UOp.const(IDX, 7).lt(x).logical_and(x.lt(16))),           # 8 <= x < 16: x % 8 is x - 8
    ((x * 3) // 4, x.lt(y)),                                    # a bound by a variable says nothing: unchanged
  ]


@pytest.mark.parametrize("index, gate", gated_expressions())
def test_a_gated_index_simplifies_to_the_same_values_where_the_gate_holds(index, gate):
  from refgrad.codegen.simplify import simplify_given
  x, y = var("x", 40), var("y", 6)
  simplified = simplify_given(simplify(index), simplify(gate))
  held = [(i, j) for i in range(40) for j in range(6) if evaluate(gate, {x: i, y: j})]
  assert held and all(evaluate(simplified, {x: i, y: j}) == evaluate(index, {x: i, y: j}) for i, j in held)


def test_the_gate_removes_the_divisions_a_bound_makes_trivial():
  from refgrad.codegen.simplify import simplify_given
  x, y = var("x", 40), var("y", 6)
  divisions = lambda u: sum(n.op in (Ops.IDIV, Ops.MOD) for n in u.toposort)  # noqa: E731
  assert divisions(simplify_given(simplify(x // 8 + y), x.lt(8))) == 0
  assert divisions(simplify_given(simplify((x + y) % 16 + (x + y) // 16 * 7), (x + y).lt(16))) == 0
  assert simplify_given(simplify(x // 8), x.lt(y)) is simplify(x // 8)
