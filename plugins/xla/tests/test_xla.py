"""The graph device XLA against the reference: conformance cells, edge values where XLA's plain ops differ from
SPEC.md and the rules compose the answer, tensor programs realized whole, the compiled function's own checks, and
the disagreements that remain (README.md, "Disagreements"), each required still to differ."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from refgrad_xla.device import FLUSHED_SUBNORMALS
from refgrad_xla.export import NOT_EXPORTED, RULES, unsupported_reason

from refgrad import Device, Tensor
from refgrad.dtype import dtypes
from refgrad.graph_device import graph_inputs
from refgrad.interp.graph import EVALUATORS
from refgrad.testing.conformance.batches import all_batches
from refgrad.testing.conformance.results import FAIL, PASS
from refgrad.testing.conformance.run import run_unit
from refgrad.testing.oracle.graph_check import check_graph_against_reference, write_graph_standalone
from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
from refgrad.uop import GroupOp, Ops, UOp

DIV_CONST = "algebraic simplifier: A / Const => A * (1 / Const), two roundings"
ADD_CONSTS = "algebraic simplifier: (A + C1) + C2 => A + (C1 + C2), one rounding less"
MUL_CONSTS = "algebraic simplifier: (A * C1) * C2 => A * (C1 * C2): (a*2)*0.5 is a, finite where a*2 overflows"
RECIP_RECIP = "algebraic simplifier: A / (B / C) => (A * C) / B makes 1 / (1 / a) a, two roundings less"
SQRT_SQUARE = "algebraic simplifier: sqrt(a * a) => |a|, finite where a*a overflows"
ADD_ZERO = "x + 0.0 => x (keeps -0.0; SPEC's -0.0 + 0.0 is +0.0), not the algebraic simplifier's"
# Where XLA on the CPU gives another answer than SPEC.md, among the cells of float32 and bool, and of float16 (float64
# fails the same rows, bfloat16 only `a+0`: README.md): each must still differ, so an XLA that stops a rewrite makes a
# test fail and the entry go. Flushed subnormals are declared (device.py's FLUSHED_SUBNORMALS), so no cell fails for
# them; test_subnormals_still_flush requires XLA still to flush.
_REWRITTEN = {  # row -> the rewrite that changes it, in float32 and float16 alike
  "chain: a/3": DIV_CONST, "chain: a/10": DIV_CONST, "chain: a/s (s=3 in every lane)": DIV_CONST,
  "chain: (a+1)+2": ADD_CONSTS, "chain: (a*2)*0.5": MUL_CONSTS, "chain: 1/(1/a)": RECIP_RECIP,
  "chain: sqrt(a*a)": SQRT_SQUARE, "chain: a+0": ADD_ZERO}
XLA_DIFFERS = {(row, column): why for row, why in _REWRITTEN.items() for column in ("float32", "float16")}

F32_MAX, TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


def test_rules_cover_the_graph_evaluator() -> None:
  assert set(RULES) | set(NOT_EXPORTED) | {Ops.BUFFER} == set(EVALUATORS)  # BUFFERs are the PARAMs on a device


def test_the_device_is_listed_with_jax_versions() -> None:
  spec = next(s for s in Device.specs() if s.name == "XLA")
  assert spec.kind == "graph" and "XLA" in Device.available("graph")
  assert "jax 0." in spec.version and "jaxlib" in spec.version


def _cells(unit_dtypes: list) -> dict[tuple[str, str], str]:
  return {(r.row, r.column): r.status for batch in all_batches(unit_dtypes) for r in run_unit(batch, "XLA").results}


def _differs(column: str) -> set[tuple[str, str]]:
  return {cell for cell in XLA_DIFFERS if cell[1] == column}


def test_float32_cells_fail_only_where_pinned() -> None:
  cells = _cells([dtypes.float32, dtypes.bool])
  assert {cell for cell, status in cells.items() if status != PASS} == _differs("float32")
  assert all(cells[cell] == FAIL for cell in _differs("float32"))


def test_integer_bool_and_float16_cells_fail_only_where_pinned() -> None:
  cells = _cells([dtypes.int8, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bool])
  assert {cell for cell, status in cells.items() if status != PASS} == _differs("float16") and len(cells) > 150
  assert all(cells[cell] == FAIL for cell in _differs("float16"))


def _check(fn, *inputs) -> None:
  report = check_against_reference(fn, *inputs, device="XLA")
  assert report.ok, report


INT32_MIN = -2 ** 31


def test_integer_division_shifts_and_wrapping_at_their_edges() -> None:
  """C-style truncating IDIV and MOD, MIN / -1 (the frontend defines its lanes: MIN and 0), zero divisors
  (UNDEFINED: skipped, but no trap), shifts past the width, wrapping ADD, MUL and NEG."""
  a = np.array([7, -7, 7, -7, INT32_MIN, INT32_MIN, 5, 2 ** 31 - 1, 0], np.int32)
  b = np.array([2, 2, -2, -2, -1, 1, 0, 2, 0], np.int32)
  _check(lambda x, y: (x // y, x % y, x.idiv(y), x * y, x + y, -x), a, b)
  shifts = np.array([0, 1, 31, 30, 7, 3, 2, 1, 0], np.int32)
  _check(lambda x, s: (x << s, x >> s), a, shifts)
  unsigned = np.array([0, 1, 2 ** 63, 2 ** 64 - 1, 12345], np.uint64)
  _check(lambda x, y: (x // y, x + y, x * y, x.maximum(y), x < y), unsigned, unsigned[::-1].copy())


def test_signed_zeros_nan_inf_and_extremes() -> None:
  """MAX of signed zeros both ways and its reduction, NaN through MAX and max reductions (float16's lost it), a
  multiply-add that an FMA would change."""
  z = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, F32_MAX, -F32_MAX, 1.0], np.float32)
  _check(lambda x: (x.maximum(x.flip(0)), x + 1, x * 3, x.sqrt(), x.reshape(2, 4).max(1)), z)
  _check(lambda x: x.reshape(4, 2).max(1), np.array([-0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 1.0, np.nan], np.float32))
  _check(lambda x: (x.max(), x.min(), x.sum()), np.array([1.0, np.nan, 2.0, 3.0, -1.0], np.float16))
  a, c = np.full(8, 1 + 2 ** -12, np.float32), np.full(8, -(1 + 2 ** -11), np.float32)
  _check(lambda x, y: (x * x + y, (x * x + y).sum()), a, c)


REWRITES = {  # XLA_DIFFERS's rewrites, each on lanes of normal numbers only (README.md, "Disagreements found")
  "x / 3": (lambda t: t / 3, np.array([5.0], np.float32)),
  "(x + 1) + 2": (lambda t: (t + 1) + 2, np.array([2.0 ** 53])),
  "(x * 2) * 0.5": (lambda t: (t * 2) * 0.5, np.array([F32_MAX], np.float32)),
  "1 / (1 / x)": (lambda t: 1 / (1 / t), np.array([100.00000762939453], np.float32)),  # 1/F32_MAX is subnormal
  "sqrt(x * x)": (lambda t: (t * t).sqrt(), np.array([F32_MAX], np.float32)),
  "x + 0": (lambda t: t + 0, np.array([-0.0], np.float32)),
}


@pytest.mark.parametrize("name", REWRITES)
def test_xlas_rewrites_still_differ(name: str) -> None:
  fn, x = REWRITES[name]
  with np.errstate(over="ignore"), pytest.raises(ReferenceMismatch, match="XLA differs from the reference"):
    check_against_reference(fn, x, device="XLA")


def test_casts_round_once() -> None:
  """XLA rounds these twice, through float32; the rules round once."""
  _check(lambda x: (x.cast(dtypes.bfloat16), x.cast(dtypes.float16)),
         np.array([1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, -3.0, 65519.99, np.nan, -0.0]))
  wide = np.array([2 ** 62 + 2 ** 54 + 1, -(2 ** 62 + 2 ** 54 + 1), 2 ** 24 + 2 ** 16 + 1, 3, -2 ** 63], np.int64)
  _check(lambda x: (x.cast(dtypes.bfloat16), x.cast(dtypes.float32), x.cast(dtypes.int32).cast(dtypes.bfloat16)), wide)
  _check(lambda x: (x.cast(dtypes.bool), x.cast(dtypes.int8), x.cast(dtypes.uint8)),
         np.array([0.0, -0.0, np.nan, -0.9, 2.5, -1.5], np.float32))
  _check(lambda x: x.bitcast(dtypes.int32), np.array([1.0, -0.0, np.inf], np.float32))


def test_transcendentals_within_their_bounds() -> None:
  """XLA's exp2 was 18 ULP off at 100.0 in float32 and 8 in float64; the rules compute it in float64 (and as
  2**n * 2**f there)."""
  x = np.array([100.0, -100.3, 0.5, 1.5, 3.001953125, -20.3, 7.7, 1000.5, -1020.25, np.inf, -np.inf, np.nan])
  for dt in (np.float64, np.float32, np.float16):
    with np.errstate(over="ignore"):
      _check(lambda t: (t.exp2(), t.abs().log2(), t.sin()), x.astype(dt))


def test_empty_and_zero_dimensional_tensors() -> None:
  _check(lambda t: (t.sum(), t.max(), t.prod(), t * 2), np.zeros((0, 3), np.float32))
  _check(lambda t: (t.sum(0), t.max(1), t + 1), np.zeros((2, 0), np.int32))
  _check(lambda t: (t * 2, t.exp2(), -t), np.array(-0.0, np.float32))


def _softmax_loss(x: Tensor, w: Tensor) -> Tensor:
  return ((x @ w).softmax(1) * w.sum(0)).sum()


def test_a_program_realizes_whole_and_matches_python() -> None:
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
  _check(_softmax_loss, x, w)
  on_xla = _softmax_loss(Tensor(x, device="XLA"), Tensor(w, device="XLA")).numpy()
  np.testing.assert_allclose(on_xla, _softmax_loss(Tensor(x), Tensor(w)).numpy(), rtol=1e-5)
  ints = Tensor(np.arange(-6, 6, dtype=np.int64), device="XLA")
  assert ((ints * 3) // 4 + (ints << 2)).tolist() == ((np.arange(-6, 6) * 3) // 4 + (np.arange(-6, 6) << 2)).tolist()


def test_the_executable_takes_only_its_graphs_inputs() -> None:
  """Compiled ahead of time per graph: arguments of another shape or dtype raise instead of retracing, and two graphs
  differing only in a constant give each their own answer."""
  compiler = Device["XLA"].graph
  graphs = [(Tensor([1.0, 2.0, 3.0]) * k).schedule()[-1].ast for k in (2.0, 3.0)]
  runs = [compiler.compile(g) for g in graphs]
  arrays = [np.arange(3, dtype=np.float32) for _ in graph_inputs(graphs[0])]
  assert [list(run(*arrays)[0]) for run in runs] == [[0.0, 2.0, 4.0], [0.0, 3.0, 6.0]]
  with pytest.raises(TypeError):
    runs[0](*[np.arange(4, dtype=np.float32) for _ in arrays])
  with pytest.raises(TypeError):
    runs[0](*[np.arange(3, dtype=np.float64) for _ in arrays])


def test_sharded_nodes_are_unsupported_by_name() -> None:
  multi = UOp(Ops.MULTI, dtypes.float32, (Tensor([1.0]).uop,), (None, ((0, 1),)))
  assert "several devices" in unsupported_reason(multi)


def test_subnormals_still_flush(monkeypatch) -> None:
  """XLA's CPU runtime flushes float32/float64/bfloat16 subnormals, not float16's (README.md, "Disagreements found"):
  jax.jit's own results. The device declares it (FLUSHED_SUBNORMALS), so the check passes where the device gives
  signed zeros for subnormals, and fails without the declaration. An XLA that keeps subnormals fails here: then the
  declaration goes."""
  import jax
  Device["XLA"]  # the device sets the XLA flags before jax starts its backend
  f32 = np.float32
  assert np.asarray(jax.jit(lambda a, b: a * b)(f32([1e-30, -1e-30]), f32([1e-10, 1e-10]))).tolist() == [0.0, -0.0]
  assert np.signbit(np.asarray(jax.jit(lambda a, b: a * b)(f32([-1e-30]), f32([1e-10])))).all()
  assert not np.asarray(jax.jit(lambda a: a != 0)(np.array([5e-324]))).any()  # DAZ: SPEC's answer is True
  bf16 = np.array([1e-39], dtypes.bfloat16.np)
  assert np.asarray(jax.jit(lambda a: a + a)(bf16)).astype(np.float64).tolist() == [0.0]
  half = np.asarray(jax.jit(lambda a, b: a * b)(np.float16([6e-5]), np.float16([0.01])))
  assert half.tolist() == [np.float16(6e-5) * np.float16(0.01)] and 0 < half[0] < np.finfo(np.float16).tiny
  assert FLUSHED_SUBNORMALS in Device["XLA"].graph.differences
  x = np.array([1e-45, -1e-40, 1.0, 0.0, -0.0, TINY], np.float32)
  lanes = check_against_reference(lambda t: t * 1.0 + t, x, device="XLA", keep_lanes=True).kernels[0].lanes
  assert lanes.actual.tolist() == [0.0, -0.0, 2.0, 0.0, -0.0, 2 * TINY] and np.signbit(lanes.actual[1])
  monkeypatch.setattr(Device["XLA"].graph, "differences", ())
  with pytest.raises(ReferenceMismatch, match="XLA differs from the reference"):
    check_against_reference(lambda t: t * 1.0 + t, x, device="XLA")


def test_a_rewrite_is_found_in_a_program_shrunk_and_written_as_a_jax_script(tmp_path):
  """XLA's `x / 3.0 => x * (1 / 3.0)` (README, disagreements) inside exp2(x / 3 * 2 + 1): the whole-graph check finds
  it, shrinks it to the division, and writes a script that runs it with jax alone and exits 1."""
  x = np.array([5.0, 1.0, 3.0, -0.0], np.float32)
  report = check_graph_against_reference(lambda t: ((t / 3) * 2 + 1).exp2(), x, device="XLA", raise_on_mismatch=False)
  assert not report.ok and [u.op for u in report.shrunk.graph.toposort if u.op in GroupOp.ALU] == [Ops.FDIV]
  assert report.shrunk.actual[0] == np.float32(5.0) * (np.float32(1.0) / np.float32(3.0))
  assert write_graph_standalone(report, tmp_path) == f"standalone reproducer: {tmp_path}/repro.py"
  assert "refgrad" not in (tmp_path / "repro.py").read_text().split('"""', 2)[2]
  run = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
  assert run.returncode == 1 and "lane 0: got np.float32(1.6666667), expected np.float32(1.6666666)" in run.stdout, \
    run.stdout + run.stderr
