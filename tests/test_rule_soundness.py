"""Every rewrite rule is sound against alu.py (refgrad/testing/rules.py), and the rules it found wrong stay fixed.

The prover's verdicts are checked here against independent oracles: numpy for the counterexamples it reports on
rules planted wrong on purpose, numpy and Python integers for the values of the fixed rules on every device."""
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import INT_DTYPES, NP_DTYPE, check, ids

from refgrad import Tensor, dtypes
from refgrad.codegen import simplify
from refgrad.codegen.pipeline import forget_compiled
from refgrad.codegen.simplify import symbolic_rules
from refgrad.device import LRU, RUNNER_CACHE_SIZE
from refgrad.registry import Device
from refgrad.rewrite import PatternMatcher, UPat
from refgrad.testing.conformance.results import FAIL, PASS
from refgrad.testing.conformance.run import run_conformance
from refgrad.testing.fuzz.driver import fuzz
from refgrad.testing.oracle.reference import RewriteMismatch, check_against_reference
from refgrad.testing.oracle.rules import check_rewrite, evaluate, leaf, points, prove_rule, prove_rules
from refgrad.uop import Ops, UOp
from refgrad.value_ranges import INDEX_DTYPES

x_, c_ = UPat.var("x"), UPat.cvar("c")


@pytest.mark.parametrize("index", range(len(symbolic_rules.rules)), ids=lambda i: f"symbolic rule {i}")
def test_symbolic_rule_is_sound_on_every_dtype_it_matches(index):
  verdict = prove_rule(index, symbolic_rules.rules[index])
  assert verdict.domain, f"{verdict.name} {verdict.pattern}: no left side could be built for any dtype"
  assert not verdict.unexercised, f"{verdict.name} never fired on {[d.name for d in verdict.unexercised]}"
  assert verdict.sound, "\n".join(str(c) for c in verdict.counterexamples[:3])


def test_integer_rules_cover_every_integer_dtype():
  """A rule filtered to the integer dtypes is proven on all eight of them, signed and unsigned."""
  for verdict in prove_rules(symbolic_rules, draws=2):
    if symbolic_rules.rules[verdict.index][0].dtypes == INDEX_DTYPES:
      assert set(verdict.domain) == set(INDEX_DTYPES), verdict.name


# ---- the prover finds rules planted wrong, with counterexamples numpy confirms
def _first_counterexample(rule):
  verdict = prove_rule(0, rule, draws=20)
  assert not verdict.sound, f"the prover missed {verdict.pattern}"
  return verdict.counterexamples


def test_prover_finds_the_wrapping_quotient():
  """(a*c)//c -> a, the rule this prover was written for: wrong wherever a*c wraps."""
  wrong = (UPat(Ops.IDIV, src=(UPat(Ops.MUL, src=(UPat(Ops.DEFINE_VAR, name="x"), c_)), c_)), lambda x, c: x)
  found = _first_counterexample(wrong)
  assert {dtypes.uint8, dtypes.int8} <= {c.dtype for c in found}
  for c in found:  # recompute the left side with numpy, which wraps like SPEC.md
    (a,) = c.inputs.values()
    divisor = c.before.src[1].arg
    product = np.array([a], NP_DTYPE[c.dtype]) * NP_DTYPE[c.dtype].type(divisor)
    assert c.got == a and c.expected == _c_quotient(product, divisor)[0] != a


def test_prover_finds_a_float_identity_that_drops_negative_zero():
  wrong = (UPat(Ops.ADD, src=[UPat(Ops.DEFINE_VAR, name="x"), UPat.const(0.0)]), lambda x: x)
  found = _first_counterexample(wrong)
  for c in found:
    (a,) = c.inputs.values()
    assert np.signbit(c.got) != np.signbit(np.float64(a) + 0.0) and a == 0


def test_prover_finds_a_rewrite_that_makes_defined_lanes_undefined():
  wrong = (UPat(Ops.MOD, dtype=INDEX_DTYPES, src=(x_, UPat.const(1))), lambda x: x % (x * 0))
  assert all(c.got == "undefined" and c.expected == 0 for c in _first_counterexample(wrong))


def test_a_rewrite_may_define_an_undefined_lane():
  """x//0 is undefined; folding x*(y//0)*0 to 0 is allowed (SPEC.md), so no counterexample."""
  a = leaf("a", dtypes.int8)
  before = (a // UOp.const(dtypes.int8, 0)) * UOp.const(dtypes.int8, 0)
  assert check_rewrite(before, UOp.const(dtypes.int8, 0), points([a], np.random.default_rng(0))) is None


def test_eight_bit_leaves_take_every_value():
  a, b = leaf("a", dtypes.uint8), leaf("b", dtypes.int8)
  inputs = points([a, b], np.random.default_rng(0))
  assert len(inputs[a]) == 256 * 256 and set(zip(inputs[a].tolist(), inputs[b].tolist())) == \
    {(p, q) for p in range(256) for q in range(-128, 128)}


# ---- the rules found wrong, as rules: each applied once, the way the prover applies it
def _applied(rule_index: int, before: UOp) -> UOp:
  pat, fn = symbolic_rules.rules[rule_index]
  (bindings,) = pat.match(before, {})[:1]
  return fn(**bindings)


def _rule_index(name: str) -> int:
  return next(i for i, (_, fn) in enumerate(symbolic_rules.rules) if fn.__name__ == name)


def test_nested_quotients_whose_divisors_multiply_past_the_dtype_are_zero():
  """(y//16)//16 in int8 was y//(16*16), and 256 wraps to 0: a division by zero. graph_rewrite never got there
  (the value range folds the quotient to 0 first), but the rule on its own was wrong."""
  y = leaf("y", dtypes.int8, 0, 127)
  before = (y // UOp.const(dtypes.int8, 16)) // UOp.const(dtypes.int8, 16)
  after = _applied(_rule_index("simplify_idiv"), before)
  assert after.op is Ops.CONST and after.arg == 0


def test_merged_remainders_whose_moduli_multiply_past_the_dtype_are_the_index():
  """((x//c)%m)*c + x%c is x%(c*m), and just x when c*m is beyond the dtype (it was x%(c*m wrapped))."""
  big = 2 ** 62
  x = leaf("x", dtypes.int64, 0, big)
  c, m = UOp.const(dtypes.int64, big), UOp.const(dtypes.int64, 16)
  before = ((x // c) % m) * c + x % c
  after = _applied(_rule_index("canonicalize_sum"), before)
  values = np.array([0, 1, 2, big - 1, big], np.int64)
  got, undefined = evaluate(after, {x: values})  # alu.py's meaning of the rewritten graph
  assert not undefined.any()
  np.testing.assert_array_equal(got, values)  # x < 2**62 * 16: the sum is x itself


# ---- the reachable one, on every device: a product that wraps, then a quotient or a remainder
def _c_quotient(p: np.ndarray, d: int) -> list[int]:
  """C's truncating quotient, in Python integers."""
  return [abs(int(v)) // abs(d) * (1 if (v >= 0) == (d > 0) else -1) for v in p.tolist()]


def _operands(dtype) -> np.ndarray:
  info = np.iinfo(NP_DTYPE[dtype])
  values = [0, 1, 2, 63, 64, 100, 127, 128, 200, 255, info.max // 2, info.max // 2 + 1, info.max - 1, info.max]
  return np.array(sorted({v for v in values if v <= info.max}), dtype=NP_DTYPE[dtype])


@pytest.mark.usefixtures("refgrad_device")
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=ids(INT_DTYPES))
def test_product_then_quotient_wraps_first(dtype):
  """(a*2)//2 is a only where a*2 does not wrap: uint8 200 gives 72 (SPEC.md, numpy); it gave 200 everywhere."""
  a = _operands(dtype)
  t = Tensor(a).maximum(0) if dtype.kind == "i" else Tensor(a)  # a known non-negative range, as an index has
  product = a * NP_DTYPE[dtype].type(2)  # numpy wraps
  check((t * 2).idiv(2), np.array(_c_quotient(product, 2), dtype=NP_DTYPE[dtype]))
  if dtype == dtypes.uint8:
    assert (Tensor([200, 100, 255], dtype=dtypes.uint8) * 2 // 2).tolist() == [72, 100, 127]


@pytest.mark.usefixtures("refgrad_device")
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=ids(INT_DTYPES))
def test_product_then_remainder_wraps_first(dtype):
  a = _operands(dtype)
  t = Tensor(a).maximum(0) if dtype.kind == "i" else Tensor(a)
  one, three = NP_DTYPE[dtype].type(1), NP_DTYPE[dtype].type(3)
  check((t * 3 + 1) % 3, np.remainder(a * three + one, three))  # it was 1: 255*3+1 wraps to 254 in uint8
  check((t * 4 + 1).idiv(4), np.array(_c_quotient(a * NP_DTYPE[dtype].type(4) + NP_DTYPE[dtype].type(1), 4),
                                      dtype=NP_DTYPE[dtype]))


# ---- a wrong shared rewrite planted on purpose: the kernel path against the graph evaluator names it
def by_reciprocal(x, c):
  """x / c as x * (1/c): the fast-math rewrite, wrong wherever 1/c is inexact (x/3 in float32)."""
  return x * UOp.const(x.dtype, 1 / c.arg) if c.arg != 0 else None


def wrapping_quotient(x, c):
  """(a*c)//c as a, assuming the product does not wrap: the rule issue 26 found."""
  return x.src[0] if x.op is Ops.MUL and x.src[1] is c else None


RECIPROCAL = (UPat(Ops.FDIV, src=(x_, c_)), by_reciprocal)
WRAPPING_QUOTIENT = (UPat(Ops.IDIV, src=(x_, c_)), wrapping_quotient)


@pytest.fixture
def planted(monkeypatch):
  """plant(rule): the rule goes first in the symbolic rules until the test ends; compiled kernels are forgotten, and
  the reference's loaded ones (its runner caches key programs by their kernel graph, which the rules do not change)."""
  def plant(rule):
    monkeypatch.setattr(simplify, "symbolic_rules", PatternMatcher([rule] + simplify.symbolic_rules.rules))
    forget_compiled()
    for instance in ("PYTHON", "PYTHON:1"):
      monkeypatch.setattr(Device[instance], "_runners", LRU(RUNNER_CACHE_SIZE))
  yield plant
  monkeypatch.undo()
  forget_compiled()


def test_check_against_reference_names_the_wrong_rule(planted):
  """The issue's program: every device agrees with the reference, and the reference is wrong."""
  a = np.array([200, 100, 255], np.uint8)
  planted(WRAPPING_QUOTIENT)
  with pytest.raises(RewriteMismatch) as caught:
    check_against_reference(lambda t: (t * 2).idiv(2), a, device="PYTHON")
  text = str(caught.value)
  assert "the rule to blame" in text and "wrapping_quotient" in text and "proven wrong" in text
  expected = a * np.uint8(2) // np.uint8(2)  # numpy wraps: [72, 100, 127]
  assert expected.tolist() == [72, 100, 127] and "graph evaluator 72" in text


def test_undefined_inputs_of_a_kernel_are_no_finding():
  """0//0 in one kernel, a cast of it in the next: the second kernel's lane is undefined because its input's is, and
  the graph evaluator knows it too (a fuzz campaign reported this as a rewrite making a lane undefined)."""
  a, b = np.array([0, 7, 0], np.int32), np.array([0, 2, 5], np.int32)
  report = check_against_reference(lambda x, y: x.idiv(y).contiguous().cast(dtypes.int16), a, b, device="PYTHON")
  assert len(report.kernels) == 2 and report.ok
  assert report.undefined == 2 and report.checked == 4  # lane 0 of each kernel divides by zero (SPEC.md)


def test_refgrad_check_reports_a_planted_wrong_rewrite_with_its_rule(planted):
  values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  assert np.any(values / np.float32(3) != values * np.float32(1 / 3))  # the planted rule is wrong (numpy)
  honest = run_conformance("PYTHON", only="chain: a/3")
  assert honest.results and all(r.status == PASS for r in honest.results)
  planted(RECIPROCAL)
  failed = [r for r in run_conformance("PYTHON", only="chain: a/3").results if r.status == FAIL]
  assert {r.row for r in failed} <= {"chain: a/3", "chain: a/10"}
  assert ("chain: a/3", "float32") in {(r.row, r.column) for r in failed}
  assert all("graph evaluator" in r.detail and "by_reciprocal" in r.detail for r in failed)


PLANTING_PLUGIN = '''"""Plants x / c -> x * (1/c) first in the symbolic rules of fuzz workers, not of the test's."""
import multiprocessing

from refgrad.codegen import simplify
from refgrad.device import LRU, RUNNER_CACHE_SIZE
from refgrad.registry import Device
from refgrad.rewrite import PatternMatcher
from test_rule_soundness import RECIPROCAL

if multiprocessing.parent_process() is not None:
  simplify.symbolic_rules = PatternMatcher([RECIPROCAL] + simplify.symbolic_rules.rules)
'''


def test_a_fuzz_campaign_finds_a_planted_wrong_rewrite(tmp_path, monkeypatch):
  plugin = tmp_path / "plant_rule.py"
  plugin.write_text(PLANTING_PLUGIN)
  monkeypatch.syspath_prepend(str(Path(__file__).parent))  # workers import this module for the rule
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
  report = fuzz("PYTHON", 90, findings_dir=str(tmp_path / "findings"), plugin_files=[str(plugin)], max_findings=1)
  details = [f.detail for f in report.signatures.values()]
  assert details and all("graph evaluator" in d and "by_reciprocal" in d and "proven wrong" in d for d in details)
  assert simplify.symbolic_rules.rules[0] is not RECIPROCAL  # the campaign's process kept the honest rules
