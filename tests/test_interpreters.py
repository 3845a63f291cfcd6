"""The two oracles of the core agree: the graph evaluator (op by op, numpy) and the kernel interpreter
(scheduled, lowered, linearized, vectorized). Random programs come from refgrad.testing.strategies."""
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from refgrad import Tensor, dtypes
from refgrad.interp import kernel
from refgrad.interp.graph import evaluate_graph
from refgrad.testing.oracle.reference import undefined_lanes
from refgrad.testing.strategies import tensor_programs
from refgrad.uop import Ops


def bits(x: np.ndarray) -> np.ndarray:
  x = np.ascontiguousarray(x).reshape(-1)
  return x.view(f"u{x.dtype.itemsize}") if x.dtype.itemsize in (1, 2, 4, 8) else x


def assert_same_defined_bits(actual: np.ndarray, expected: np.ndarray, undefined: np.ndarray | None) -> None:
  assert actual.shape == expected.shape and actual.dtype == expected.dtype
  a, e = bits(actual).copy(), bits(expected).copy()
  if undefined is not None:
    a[undefined.reshape(-1)] = 0
    e[undefined.reshape(-1)] = 0
  if actual.dtype.kind == "f" or actual.dtype == ml_dtypes.bfloat16:  # a NaN's sign and payload are free (SPEC.md)
    both_nan = np.isnan(actual.astype(np.float64)).reshape(-1) & np.isnan(expected.astype(np.float64)).reshape(-1)
    a[both_nan] = e[both_nan]
  differ = np.flatnonzero(a != e)
  assert differ.size == 0, f"{differ.size} lanes differ, first at {differ[:5]}: {actual.reshape(-1)[differ[:5]]} " \
                           f"vs {expected.reshape(-1)[differ[:5]]}"


def assert_undefined_within(out: Tensor, expected: np.ndarray | None) -> None:
  """The kernel interpreter marks UNDEFINED only lanes the graph evaluator marks: one lane too many would let a device
  get it wrong unseen. It may mark fewer: an undefined value is some fixed value, and the rewrites fold some uses of
  it away (an integer y - y is 0 whatever y is)."""
  undefined = undefined_lanes(out)
  size = out.numpy().size
  got = np.zeros(size, dtype=bool) if undefined is None else undefined.reshape(-1)
  want = np.zeros(size, dtype=bool) if expected is None else np.asarray(expected).reshape(-1)
  extra = np.flatnonzero(got & ~want)
  assert extra.size == 0, f"{extra.size} lanes marked undefined that the graph evaluator finds defined, first at " \
                          f"{extra[:5]}"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor_programs())
def test_kernel_interpreter_agrees_with_graph_evaluator(program):
  """Bit for bit, but for the sign and payload of NaNs (SPEC.md leaves them free; a sum meeting inf, -inf and NaN
  in another order makes another NaN): float sums in these programs are short enough that both evaluate them with
  alu.exec_reduce over the whole row, and a sum of one element is +0.0 + x in both. Not a float sum over a symbolic
  size: its kernel runs to the Variable's maximum with the lanes past its value masked to 0.0, so the pairwise fold
  groups the terms otherwise than over the value's row (a valid order: 10 float32 terms summed to 5.0301504 against
  5.030151); the kit's rewrite check holds those to their error bound in every campaign."""
  out = program.build("PYTHON")
  assume(program.symbolic is None or not has_float_sum(out))
  expected, undefined = evaluate_graph(out.uop)
  assert_same_defined_bits(out.numpy(), expected, undefined)
  assert_undefined_within(out, undefined)


def has_float_sum(t: Tensor) -> bool:
  """Whether a float ADD or MUL reduction is in t's graph: its order is free (SPEC.md), and chunks fold it in another
  order than a whole row does."""
  return any(u.op is Ops.REDUCE_AXIS and u.arg[0] in (Ops.ADD, Ops.MUL) and dtypes.is_float(u.dtype)
             for u in t.uop.toposort)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tensor_programs(max_steps=4))
def test_agreement_survives_tiny_blocks(program):
  """With 4-element blocks every loop and thread space is chunked: chunking must not change results, bit for bit
  where the spec fixes them (float sums are checked against their bound below)."""
  old = kernel.BLOCK_ELEMENTS
  kernel.BLOCK_ELEMENTS = 4
  try:
    out = program.build("PYTHON")
    assume(not has_float_sum(out))
    expected, undefined = evaluate_graph(out.uop)
    assert_same_defined_bits(out.numpy(), expected, undefined)
    assert_undefined_within(out, undefined)
  finally:
    kernel.BLOCK_ELEMENTS = old


def test_large_sum_is_vectorized_and_chunked(monkeypatch):
  """A 4M-element sum must not run a Python step per element: count the interpreter's chunk iterations."""
  calls = []
  original = kernel._accumulate

  def counting(run, u):
    calls.append(1)
    original(run, u)

  monkeypatch.setitem(kernel.HANDLERS, kernel.Ops.ACCUMULATE, counting)
  x = np.arange(1 << 22, dtype=np.int64) % 1000
  got = Tensor(x).sum().item()
  assert got == int(x.sum())
  assert len(calls) <= (1 << 22) // kernel.BLOCK_ELEMENTS + 1


def test_undefined_lanes_are_marked_and_other_lanes_exact():
  a = Tensor(np.array([7, -7, 5, 0], dtype=np.int32))
  b = Tensor(np.array([2, 0, -2, 0], dtype=np.int32))
  q = a.idiv(b)
  expected, undefined = evaluate_graph(q.uop)
  assert undefined is not None and undefined.tolist() == [False, True, False, True]
  got = q.numpy()
  assert got[0] == 3 and got[2] == -2  # C truncation
  assert undefined_lanes(q).tolist() == [False, True, False, True]


def test_the_bit_comparison_frees_only_what_the_spec_frees():
  """NaN against NaN of another sign or payload agrees; NaN against a number, and -0.0 against +0.0, do not."""
  nan, other_nan = np.array([np.nan], np.float32), -np.array([np.nan], np.float32)
  assert np.signbit(other_nan[0]) != np.signbit(nan[0])
  assert_same_defined_bits(other_nan, nan, None)
  with pytest.raises(AssertionError):
    assert_same_defined_bits(np.array([1.0], np.float32), nan, None)
  with pytest.raises(AssertionError):
    assert_same_defined_bits(np.array([-0.0], np.float32), np.array([0.0], np.float32), None)


def out_of_int32(x: np.ndarray) -> np.ndarray:
  """Where casting float32 to int32 is UNDEFINED (docs/SPEC.md): NaN, infinities and values past int32's range."""
  with np.errstate(invalid="ignore"):
    return ~(np.isfinite(x) & (x >= -2.0 ** 31) & (x < 2.0 ** 31))


def test_a_reduction_over_many_blocks_marks_only_its_own_undefined_rows():
  """An accumulator starts defined in every block: a NaN in the first row must not mark rows of later blocks (or crash
  on a last, smaller block)."""
  rows = kernel.BLOCK_ELEMENTS // 2 * 3 + 5
  a = np.zeros((rows, 2), dtype=np.float32)
  a[0, 1], a[rows // 2, 0], a[-1, 1] = np.nan, np.inf, -3e38
  out = Tensor(a).cast("int32").max(1).realize()
  assert undefined_lanes(out).tolist() == out_of_int32(a).any(axis=1).tolist()
  defined = ~out_of_int32(a).any(axis=1)
  assert (out.numpy()[defined] == 0).all()


@pytest.mark.parametrize("axis", [0, None])
def test_undefined_lanes_survive_copies_and_all_reduces_between_devices(axis):
  """A lane undefined on one device stays undefined when a sharded tensor is gathered or all-reduced."""
  a = np.array([[1.5, np.inf, -2.0], [np.nan, 4.0, 3e9], [7.0, -0.0, 8.0], [0.0, 2.0 ** 31, -1.0]], dtype=np.float32)
  devices = ("PYTHON", "PYTHON:1")
  gathered = Tensor(a).shard(devices, axis=axis).cast("int32")
  assert undefined_lanes(gathered).tolist() == out_of_int32(a).tolist()
  summed = Tensor(a).shard(devices, axis=0).cast("int32").sum(0)
  assert undefined_lanes(summed).tolist() == out_of_int32(a).any(axis=0).tolist()


@pytest.mark.parametrize("block", [4, 7, 1 << 18])
def test_float_sums_folded_in_chunks_stay_within_the_spec_bound(block):
  """Chunks of any size fold a float32 sum in another order; every order must stay within SPEC.md's gamma_n bound
  of the exact sum (math.fsum), at the values that round: tiny, huge against small, pi, 1e-3, subnormals."""
  rng = np.random.default_rng(block)
  pool = np.array([1e-3, np.pi, 1.0, -1.0, 3e4, -2.5e4, 1.4e-45, -1.2e-38, 0.1, 7.0, -0.0], dtype=np.float32)
  x = rng.choice(pool, size=(5, 3001)).astype(np.float32)
  old = kernel.BLOCK_ELEMENTS
  kernel.BLOCK_ELEMENTS = block
  try:
    got = Tensor(x).sum(1).numpy().astype(np.float64)
  finally:
    kernel.BLOCK_ELEMENTS = old
  n, eps = x.shape[1], 2.0 ** -24
  gamma = n * eps / (1 - n * eps)
  for row, value in zip(x.astype(np.float64), got):
    exact = math.fsum(row)
    assert abs(value - exact) <= gamma * np.abs(row).sum() + abs(exact) * eps, (value, exact)


def test_a_float_sum_over_a_symbolic_size_passes_the_kits_bounded_check():
  """The program a cold run drew (n = 10 of 16 rows): the kernel folds the Variable's maximum with masked lanes, the
  graph evaluator the value's row, 5.0301504 against 5.030151. The kit's check (the rewrite check holds the kernel
  path to the graph evaluator within the sum's error bound) passes it, and both are within that bound of the exact
  sum."""
  from fractions import Fraction

  from refgrad.testing.fuzz.program_check import run_one
  from refgrad.testing.programs import Step, TensorProgram
  x = np.array([0, 0, 0, 4.355, 0.5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0], np.float16)
  steps = [Step("neg", (0,), (True,)), Step("neg", (1,), (True,)), Step("cast", (2, dtypes.float32), (True,)),
           Step("sqrt", (3,), (True,)), Step("sum", (4, 0), (True,), (("keepdim", False),)), Step("neg", (5,), (True,))]
  program = TensorProgram([x], steps, symbolic=10)
  assert run_one(program, "PYTHON")[0] == "ok"
  terms = np.sqrt(x[:10].astype(np.float32))
  exact = -sum(Fraction(float(t)) for t in terms)
  bound = 10 * float(np.finfo(np.float32).eps) * float(sum(abs(Fraction(float(t))) for t in terms))
  out = program.build("PYTHON")
  graph = evaluate_graph(out.uop)[0]
  for value in (out.numpy(), graph):
    assert abs(Fraction(float(value)) - exact) <= bound, (value, float(exact))
