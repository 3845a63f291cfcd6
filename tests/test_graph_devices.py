"""The graph-device contract (refgrad/graph_device.py, refgrad/graph_batches.py) on test devices that compile a graph
into the graph evaluator (tests/graph_devices.py): programs realized whole, assignments, a jit's replay, unsupported
ops named per cell, a wrong answer and a wrong output caught, the listing, declared differences (ULPs, flushed
subnormals) allowed and nothing more."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from graph_devices import COMPILED, registered

from refgrad import Device, Tensor, TinyJit, Variable
from refgrad.cli import main
from refgrad.codegen.contract import Allowance, Difference, UnsupportedOpError, declared_allowances
from refgrad.dtype import dtypes
from refgrad.graph_device import GraphOutputError
from refgrad.jit import tensors_in
from refgrad.testing.conformance.batches import all_batches
from refgrad.testing.conformance.corpus import _other_inputs, _stateful_case
from refgrad.testing.conformance.results import PASS, UNSUPPORTED
from refgrad.testing.conformance.run import run_unit
from refgrad.testing.oracle.bounds import (
  kernel_error_bounds,
  subnormal_partial_products,
  subnormal_partial_sums,
  ulp_of,
)
from refgrad.testing.oracle.graph_check import (
  GraphMismatch,
  check_graph_against_reference,
  plain_graph,
  reference_bounds,
)
from refgrad.testing.oracle.jit_replay import ReplayMismatch, check_jit_state
from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
from refgrad.uop import GroupOp, Ops, UOp


@pytest.fixture(scope="module", autouse=True)
def graph_devices():
  with registered():
    yield


def _softmax_loss(x: Tensor, w: Tensor) -> Tensor:
  return ((x @ w).softmax(1) * w.sum(0)).sum()


def test_a_program_realizes_as_one_graph_with_the_reference_values():
  """softmax over a matmul is several kernels on a kernel device; the graph device gets them as one graph, which
  stores every buffer they write, and computes what PYTHON computes."""
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
  kernels = len(_softmax_loss(Tensor(x), Tensor(w)).schedule())
  assert kernels > 1
  COMPILED.pop("GRAPHEVAL", None)
  out = _softmax_loss(Tensor(x, device="GRAPHEVAL"), Tensor(w, device="GRAPHEVAL")).numpy()
  assert COMPILED["GRAPHEVAL"] == [kernels]
  np.testing.assert_array_equal(out, _softmax_loss(Tensor(x), Tensor(w)).numpy())


def test_an_assignment_reads_the_old_value_and_later_reads_the_new():
  """w.assign(w * 2 + 1) then w + w: the graph reads w's buffer before it writes it, and a later kernel of the same
  graph reads what was written."""
  for device in ("PYTHON", "GRAPHEVAL"):
    w = Tensor(np.arange(6, dtype=np.float32), device=device).contiguous().realize()
    old = w * 1
    w.assign(w * 2 + 1)
    both = (old + 0).realize(w, w2 := (w + w))
    assert both.tolist() == list(np.arange(6.0)), device
    assert w2.tolist() == list((np.arange(6.0) * 2 + 1) * 2), device
    assert w.tolist() == list(np.arange(6.0) * 2 + 1), device


def test_integers_signed_zeros_and_empty_tensors_as_on_the_reference():
  ints = np.array([7, -7, -2 ** 31, 0, 5], np.int32)
  zeros = np.array([-0.0, 0.0, np.nan, np.inf], np.float32)
  for fn, data in ((lambda t: (t // 3, t % -3, t * t), ints), (lambda t: (t.maximum(-t), t.relu(), t.max()), zeros),
                   (lambda t: (t.sum(), t.max(0) if t.numel() else t.sum()), np.zeros((0,), np.float32))):
    expected = [e.numpy() for e in fn(Tensor(data))]
    actual = [a.numpy() for a in fn(Tensor(data, device="GRAPHEVAL"))]
    for a, e in zip(actual, expected):
      assert a.tobytes() == e.tobytes(), (a, e)


def test_a_jit_replays_the_graph_on_new_inputs():
  step = TinyJit(lambda a, b: ((a * b).sum(1) + a.max()).realize())
  rng = np.random.default_rng(1)
  for i in range(4):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    got = step(Tensor(a, device="GRAPHEVAL"), Tensor(b, device="GRAPHEVAL")).numpy()
    np.testing.assert_array_equal(got, ((Tensor(a) * Tensor(b)).sum(1) + Tensor(a).max()).numpy(), f"call {i}")


def test_a_jitted_step_with_state_replays_on_a_device_that_fuses_each_graph_its_own_way():
  """A jit realizes a step's results and state in other pieces than the plain step, and a graph device compiles each
  piece its own way (GRAPHEVAL_FUSING's sums differ in their last bits between the two, GRAPHEVAL's do not): there
  the jitted values are checked against the reference's bounds over their whole lazy graphs, which a right device
  meets and a wrong one does not."""
  make_step, inputs, state = _stateful_case()
  calls = [inputs] + _other_inputs(inputs, 3)
  lazily = {device: _lazy_chain_outputs(make_step, state, calls, device) for device in ("GRAPHEVAL", "PYTHON")}
  assert lazily["GRAPHEVAL"] == lazily["PYTHON"] != _lazy_chain_outputs(make_step, state, calls, "GRAPHEVAL_FUSING")
  assert check_jit_state(make_step, state, calls, "GRAPHEVAL_FUSING") == (2, 40)
  with pytest.raises(ReplayMismatch, match="outside the reference's bounds"):
    check_jit_state(make_step, state, calls, "GRAPHEVAL_SUB")


def _lazy_chain_outputs(make_step, state, calls, device) -> list[bytes]:
  """Each call's outputs of the plain step with its state left lazy between calls."""
  step = make_step(*(Tensor(x.copy(), device=device) for x in state))
  return [b"".join(t.numpy().tobytes() for t in tensors_in(step(*(Tensor(x, device=device) for x in call))))
          for call in calls]


def test_an_unsupported_op_names_op_dtype_and_device_and_runs_nothing():
  """b and c are one graph: c's ADD makes the whole graph unsupported, and nothing of it runs."""
  a = Tensor([1.0, 2.0], device="GRAPHEVAL_NOADD").contiguous().realize()
  b, c = a * 3, a + 1
  with pytest.raises(UnsupportedOpError, match="GRAPHEVAL_NOADD cannot compute ADD on float32: planted") as raised:
    b.realize(c)
  assert isinstance(raised.value, NotImplementedError) and raised.value.op is Ops.ADD
  assert b.uop.op is not Ops.BUFFER and a.tolist() == [1.0, 2.0]
  assert b.tolist() == [3.0, 6.0]  # on its own, b has no ADD


def test_a_symbolic_kernel_is_unsupported_not_wrong():
  n = Variable("n", 1, 8).bind(3)
  with pytest.raises(UnsupportedOpError, match="symbolic sizes"):
    Tensor.ones(8, device="GRAPHEVAL").contiguous().shrink(((0, n),)).sum().item()


def test_a_conformance_batch_marks_only_the_unsupported_op():
  batch = next(b for b in all_batches([dtypes.float32]) if {"ADD", "MUL"} <= b.rows)
  outcome = run_unit(batch, "GRAPHEVAL_NOADD")
  status = {r.row: r.status for r in outcome.results}
  assert status["ADD"] == UNSUPPORTED and status["MUL"] == PASS
  assert {s for row, s in status.items() if row != "ADD"} == {PASS}


def test_the_oracle_catches_a_wrong_graph_device():
  x = np.array([1.5, -2.0, 0.0], np.float32)
  check_against_reference(lambda t: t + 1, x, device="GRAPHEVAL")
  with pytest.raises(ReferenceMismatch, match="GRAPHEVAL_SUB differs from the reference"):
    check_against_reference(lambda t: t + 1, x, device="GRAPHEVAL_SUB")


def test_a_device_returning_another_dtype_is_an_error_not_a_value():
  with pytest.raises(GraphOutputError, match="returned float64.*stores float32"):
    (Tensor([1.0, 2.0], device="GRAPHEVAL_WIDE") + 1).tolist()


def test_devices_lists_the_kind(capsys):
  assert main(["devices"]) == 0
  lines = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
  assert lines["GRAPHEVAL"] == "graph" and lines["PYTHON"] == "kernel"
  assert "GRAPHEVAL" in Device.available("graph") and "GRAPHEVAL" not in Device.available("kernel")


def test_a_whole_graph_check_passes_on_a_right_device_and_shrinks_a_wrong_one():
  """Over the whole graph, bounds carried through exp and both sums; on the device that computes float32 ADD as a
  subtraction the graph is shrunk to the one ADD and its inputs."""
  x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
  program = lambda t: (((t * 3).exp() + 1).sum(1) * 2).relu().log2().sum()  # noqa: E731
  report = check_graph_against_reference(program, x, device="GRAPHEVAL")
  assert report.ok and report.outputs[0].checked == 1
  with pytest.raises(GraphMismatch, match="GRAPHEVAL_SUB differs from the reference in output 0 of the whole graph"):
    check_graph_against_reference(program, x, device="GRAPHEVAL_SUB")
  report = check_graph_against_reference(program, x, device="GRAPHEVAL_SUB", raise_on_mismatch=False)
  small = report.shrunk.graph
  assert [u.op for u in small.toposort if u.op in GroupOp.ALU] == [Ops.ADD], small
  expected = np.exp(np.float32(3) * x) + 1  # the cut input holds the reference's exp(3x): the ADD's inputs
  np.testing.assert_allclose(report.shrunk.actual.reshape(3, 4), expected - 2, rtol=1e-6)


def test_a_graph_that_differs_only_fused_keeps_what_it_needs():
  """A planted difference that needs two ops together (float32 ADD feeding a MUL, on GRAPHEVAL_SUB only the ADD is
  wrong): the shrink keeps the ADD under the output and cuts the rest."""
  x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  report = check_graph_against_reference(lambda t: ((t.exp() + t) * t).sum(1), x, device="GRAPHEVAL_SUB",
                                         raise_on_mismatch=False)
  kept = {u.op for u in report.shrunk.graph.toposort}
  assert Ops.ADD in kept and Ops.EXP2 not in kept and report.shrunk.nodes < report.shrunk.nodes_before


def test_a_fuzz_campaign_on_a_graph_device_writes_whole_graph_findings(tmp_path):
  """refgrad fuzz on the graph device with a planted wrong ADD, up to its first finding: each program is checked
  whole, and the finding's pytest file replays it with the whole-graph check (and fails)."""
  plugin = Path(__file__).with_name("graph_devices.py")
  findings = tmp_path / "findings"
  run = subprocess.run([sys.executable, "-m", "refgrad.cli", "fuzz", "--plugin", str(plugin), "--device",
                        "GRAPHEVAL_SUB", "--seconds", "60", "--max-findings", "1", "--findings", str(findings)],
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 1 and "finding (mismatch)" in run.stdout, run.stdout + run.stderr
  written = sorted(findings.glob("test_finding_grapheval_sub_mismatch_*.py"))
  assert written and "check_graph_against_reference(program, *inputs, device='GRAPHEVAL_SUB')" in written[0].read_text()
  replay = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(written[0])],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert replay.returncode == 1 and "GraphMismatch" in replay.stdout, replay.stdout[-3000:]


def test_a_lane_without_a_bound_is_skipped_not_checked_bit_exact():
  """0 * inf in the bounds walk is NaN, which is no bound: the lane is skipped (an XLA campaign's false alarm: a
  product over fmod(x, 5e-324), NaN with the divisor flushed, was checked bit for bit against the reference's 0.0)."""
  a, b = np.array([1.0, 0.0, 2.0]), np.array([5e-324, 1.0, 3.0])
  program = lambda x, y: (x % y).prod()  # noqa: E731
  _, bound, _ = reference_bounds(plain_graph(program(Tensor(a), Tensor(b)).uop), "GRAPHEVAL_FTZ")
  assert np.isinf(bound).all()
  report = check_graph_against_reference(program, a, b, device="GRAPHEVAL_FTZ")
  assert report.outputs[0].unbounded == 1 and report.outputs[0].checked == 0


def test_a_sum_or_product_with_an_exact_nan_term_is_nan_exactly():
  """A NaN term with no error makes a float sum or product NaN in every order: checked (bound 0), not skipped, even
  where the walk's own arithmetic meets inf * 0 (an INDUCTOR campaign's finding: a float16 inf / inf in a product,
  which Inductor keeps finite in float32, was skipped once NaN bounds became unbounded)."""
  nan_term = np.array([np.nan, 1.5, 65504.0], np.float16)
  for program in (lambda t: (t * 3).prod(), lambda t: (t / 3).sum(), lambda t: ((t * 2) * t).prod()):
    _, bound, _ = reference_bounds(plain_graph(program(Tensor(nan_term)).uop))
    assert bound.tolist() == [0.0], bound


def test_a_graph_device_gets_longer_before_a_program_is_a_hang():
  """A graph device compiles each program as it runs it (INDUCTOR's first graph in a new worker took over 30 s on a
  loaded machine: a false hang), a kernel device compiles ahead: the default --timeout follows the device's kind."""
  from refgrad.testing.fuzz.campaign import hang_seconds
  assert hang_seconds("GRAPHEVAL") == 120.0 and hang_seconds("PYTHON") == 30.0


def test_a_declared_difference_widens_the_bound_by_its_ulps_and_carries_it():
  """A device's Difference on float16 MUL allows one ULP of each product's result, and the ADD after it inherits
  that slack; float32, not declared, stays exact."""
  x = np.array([1.5, 3.0, 100.0, -7.25], np.float16)
  program = lambda t: (t * t + 1, t.cast("float32") * 3)  # noqa: E731
  roots = [plain_graph(out.uop) for out in program(Tensor(x))]
  declared = {(Ops.MUL, dtypes.float16): Allowance(ulp=1.0)}
  square = x.astype(np.float64) ** 2
  out = UOp(Ops.PARAM, dtypes.float16, (), (0, 4))
  sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, roots[0])),))
  _, strict, _ = kernel_error_bounds(sink, {})
  _, allowed, _ = kernel_error_bounds(sink, {}, None, declared)
  assert not strict.any()
  np.testing.assert_array_equal(allowed >= ulp_of(square, dtypes.float16), True)
  out32 = UOp(Ops.PARAM, dtypes.float32, (), (0, 4))
  sink32 = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out32, roots[1])),))
  assert not kernel_error_bounds(sink32, {}, None, declared)[1].any()
  assert declared_allowances([Difference(frozenset({Ops.MUL}), frozenset({dtypes.float16}), 1.0, "a"),
                              Difference(frozenset({Ops.MUL, Ops.ADD}), frozenset({dtypes.float16}), 2.0, "b"),
                              Difference(frozenset({Ops.ADD}), frozenset({dtypes.float16}), 0.0, "c", True)]) == \
    {(Ops.MUL, dtypes.float16): Allowance(2.0), (Ops.ADD, dtypes.float16): Allowance(2.0, flushes_subnormals=True)}


HIDE_FRAMEWORKS = """
import importlib.util
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in ("torch", "jax", "jaxlib") \\
  else found(name, package)
from refgrad.cli import main
main(["devices"])
"""


@pytest.mark.skipif(any(importlib.util.find_spec(p) is None for p in ("refgrad_torch", "refgrad_xla")),
                    reason="the graph-device plugins are not installed")
def test_without_torch_or_jax_the_graph_devices_are_listed_unavailable_with_the_reason():
  run = subprocess.run([sys.executable, "-c", HIDE_FRAMEWORKS], capture_output=True, text=True, timeout=120)
  lines = {line.split()[0]: line for line in run.stdout.splitlines()}
  for device, reason in (("TORCH", "torch is not installed"), ("INDUCTOR", "torch is not installed"),
                         ("XLA", "jax and jaxlib not installed")):
    assert "unavailable" in lines[device] and reason in lines[device], run.stdout + run.stderr
  assert "available" in lines["PYTHON"]


# ---- flushed subnormals (FTZ/DAZ) declared by a graph device (codegen/contract.py's Difference.flushes_subnormals)
F32 = np.finfo(np.float32)
# 0.0, -0.0, the smallest and the largest subnormal (both signs), 1e-40, tiny (both signs), the float after tiny, and
# normal numbers: the lanes with a subnormal are 2, 3, 4, 5 and 9
EDGES = np.array([0.0, -0.0, F32.smallest_subnormal, -F32.smallest_subnormal, F32.tiny - F32.smallest_subnormal,
                  -(F32.tiny - F32.smallest_subnormal), F32.tiny, -F32.tiny, np.nextafter(F32.tiny, np.float32(1)),
                  1e-40, 0.5, 1.0, 3.0, -7.25], np.float32)
SUBNORMAL = np.array([i in (2, 3, 4, 5, 9) for i in range(len(EDGES))])
FLUSHED_PROGRAMS = {  # each differs on a device that flushes
  "t * 1 + t": lambda t: t * 1.0 + t,
  "t / 3": lambda t: t / 3,
  "t < 0": lambda t: t < 0,
  "t != 0, max(t, -t)": lambda t: (t != 0, t.maximum(-t)),
  "sqrt(|t|), log2(|t|), 1 / t": lambda t: (t.abs().sqrt(), t.abs().log2(), 1 / t),
  "casts": lambda t: (t.cast(dtypes.float64), t.cast(dtypes.float16), t.cast(dtypes.bool), t.cast(dtypes.int32)),
  "t / 1000, via float64 to float32": lambda t: (t / 1000, (t.cast(dtypes.float64) / 1000).cast(dtypes.float32)),
  "sums of subnormals": lambda t: (t[2:6].sum(), t[2:6].reshape(2, 2).sum(1), t[2:6].max(), (t[2:6] * 2).prod()),
  "(t + -t[::-1]) * 0, trunc(t - t[::-1])": lambda t: ((t + -t.flip(0)) * 0.0, (t - t.flip(0)).trunc()),
  "(0 / t) * 0": lambda t: (0 / t) * 0.0,  # 0 / a subnormal read as 0 is NaN: no bound, however it is used
}


def _checks(device: str, fn, *inputs) -> tuple[bool, bool]:
  """Whether the whole-graph check and the kernel-by-kernel check pass `fn` on `device`."""
  with np.errstate(all="ignore"):
    whole = check_graph_against_reference(fn, *inputs, device=device, shrink=False, raise_on_mismatch=False).ok
    kernels = check_against_reference(fn, *inputs, device=device, raise_on_mismatch=False).ok
  return whole, kernels


@pytest.mark.parametrize("name", FLUSHED_PROGRAMS)
def test_a_declared_flush_passes_a_flushing_device_and_an_undeclared_one_fails(name):
  """GRAPHEVAL_FTZ flushes every float32/float64 subnormal operand and result and declares it: both checks pass, on
  float32 and float64 lanes; GRAPHEVAL_FTZ_UNDECLARED flushes the same without the declaration and fails both."""
  fn = FLUSHED_PROGRAMS[name]
  for x in (EDGES, EDGES.astype(np.float64) * 2.0 ** -896):  # float32's tiny times 2**-896 is float64's
    assert _checks("GRAPHEVAL_FTZ", fn, x) == (True, True), x.dtype
    assert _checks("GRAPHEVAL_FTZ_UNDECLARED", fn, x) == (False, False), x.dtype


def _declared_bound(fn, x: np.ndarray, device: str = "GRAPHEVAL_FTZ") -> tuple[np.ndarray, np.ndarray]:
  root = plain_graph(fn(Tensor(x)).uop)
  with np.errstate(all="ignore"):
    return reference_bounds(root)[1], reference_bounds(root, device)[1]


def test_a_declared_flush_loosens_only_lanes_that_can_be_subnormal():
  """Exact zeros, tiny and the normal numbers keep a zero bound; a subnormal operand of a comparison makes its lane
  unbounded (skipped, never passed); a subnormal result may be its zero, |x| away; a result that rounds to tiny may
  have been below it before rounding, so it may be zero too (x86 flushes float32 tiny * (1 - 2**-24) to 0)."""
  for fn in (lambda t: t < 0, lambda t: t != 0, lambda t: t.cast(dtypes.bool)):
    strict, declared = _declared_bound(fn, EDGES)
    assert not strict.any()
    np.testing.assert_array_equal(declared, np.where(SUBNORMAL, np.inf, 0.0))
  strict, declared = _declared_bound(lambda t: t + t, EDGES)
  assert not strict.any() and not declared[~SUBNORMAL].any()
  assert (declared[SUBNORMAL] >= 2 * np.abs(EDGES[SUBNORMAL].astype(np.float64))).all()
  below = np.array([F32.tiny, 1.0, 0.0], np.float32)  # times 1 - 2**-24: tiny rounded up from below, 1 - 2**-24, 0
  _, declared = _declared_bound(lambda t: t * np.float32(1 - 2 ** -24), below)
  np.testing.assert_array_equal(declared, [F32.tiny, 0.0, 0.0])
  _, declared = _declared_bound(lambda t: t.cast(dtypes.float32), EDGES.astype(np.float64))  # float32 -> float64 -> 32
  np.testing.assert_array_equal(declared != 0, SUBNORMAL | (np.abs(EDGES) == F32.tiny))


def test_a_flushed_partial_sum_is_allowed_only_where_one_can_happen():
  """1.5 tiny - tiny is subnormal: summed one by one with every partial sum flushed, [1.5t, -t, 1.5t, -t, 4t] gives
  4t where SPEC gives 5t, though every term is normal. Terms that are multiples of a power of two >= tiny have no
  subnormal partial sum in any order, and keep the exact bound."""
  rows = np.array([[1.5, -1.0, 1.5, -1.0, 4.0], [4.0, -2.0, 1.0, 1.0, 8.0]], np.float32) * np.float32(F32.tiny)
  fn = lambda t: t.sum(1)  # noqa: E731
  assert _checks("GRAPHEVAL_FTZ", fn, rows) == (True, True)
  assert _checks("GRAPHEVAL_FTZ_UNDECLARED", fn, rows) == (False, False)
  strict, declared = _declared_bound(fn, rows)
  assert not strict.any() and declared[0] > 0 and declared[1] == 0


def test_a_flushing_device_that_gets_a_normal_lane_wrong_still_fails():
  """The declaration allows flushed subnormals and nothing more: a flushing device whose ADD gives the float after
  1.0 for 0.5 * 1 + 0.5, or the smallest subnormal for 0.0 * 1 + 0.0, fails on that lane alone."""
  fn = FLUSHED_PROGRAMS["t * 1 + t"]
  for device, lane in (("GRAPHEVAL_FTZ_ULP", 10), ("GRAPHEVAL_FTZ_ZERO", 0)):
    report = check_graph_against_reference(fn, EDGES, device=device, shrink=False, raise_on_mismatch=False)
    assert report.outputs[0].mismatches == [lane], device
    with pytest.raises(ReferenceMismatch, match=f"{device} differs from the reference"):
      check_against_reference(fn, EDGES, device=device)


def test_a_declared_flush_on_empty_and_zero_dimensional_tensors():
  fn = lambda t: (t * 1.0 + t, t.sum(), t.max(), t.cast(dtypes.float64))  # noqa: E731
  assert _checks("GRAPHEVAL_FTZ", fn, np.zeros((0, 3), np.float32)) == (True, True)
  for x in (np.array(1e-45, np.float32), np.array(-1e-40, np.float32), np.array(-5e-324)):
    assert _checks("GRAPHEVAL_FTZ", fn, x) == (True, True), x
    assert _checks("GRAPHEVAL_FTZ_UNDECLARED", fn, x) == (False, False), x


def test_partial_sums_and_products_that_may_be_subnormal():
  """Where a sum's or a product's partial results may be nonzero subnormals in some order, with each term anywhere
  within its bound: a sum of exact multiples of tiny has none, unless a term may move; a product has one where its
  factors below one, at their smallest, multiply to less than tiny (an exact zero factor makes every product with it
  zero)."""
  t = float(F32.tiny)
  sums = np.array([[2 * t, -t], [2 * t, -t], [1.5 * t, -t]])
  moved = np.array([[0.0, 0.0], [t / 2, 0.0], [0.0, 0.0]])
  np.testing.assert_array_equal(subnormal_partial_sums(sums, moved, (1,), t).reshape(-1), [False, True, True])
  products = np.array([[2 * t, 0.75], [2 * t, 0.75], [0.0, 0.5]])
  moved = np.array([[0.0, 0.0], [t, 0.0], [0.0, 0.0]])
  np.testing.assert_array_equal(subnormal_partial_products(products, moved, (1,), 0.0, t).reshape(-1),
                                [False, True, False])
