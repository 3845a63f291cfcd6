"""The graph devices ORT and ORT_BASIC against the reference: conformance cells, edge values where onnxruntime's
plain operators differ from SPEC.md and the rules compose the answer, tensor programs realized whole, and the
disagreements that remain (README.md, "Disagreements found"), each required still to differ; onnxruntime's own
behaviours the rules compose around are pinned too, so that a fixed onnxruntime shows which composition can go."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from refgrad_onnx.builder import OPSET
from refgrad_onnx.export import NOT_EXPORTED, RULES, unsupported_reason

from refgrad import Device, Tensor
from refgrad.codegen.contract import UnsupportedOpError
from refgrad.dtype import ALL_DTYPES, dtypes
from refgrad.interp.graph import EVALUATORS
from refgrad.testing.conformance.batches import all_batches
from refgrad.testing.conformance.results import FAIL, PASS
from refgrad.testing.conformance.run import run_unit
from refgrad.testing.oracle.graph_check import (
  check_graph_against_reference,
  write_graph_standalone,
  write_program_standalone,
)
from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
from refgrad.uop import GroupOp, Ops, UOp

DEVICES = ("ORT", "ORT_BASIC")
HALF_IN_FLOAT32 = "float16 ops without a CPU float16 kernel run in float32 between Casts onnxruntime inserts, and " \
  "the Casts between two such ops are removed: the intermediate result is not rounded to float16"
SIN_FLOAT64 = "onnxruntime's float64 Sin is up to hundreds of ULPs off near multiples of pi (SPEC allows 2)"
_HALF_ROWS = ("chain: a*b+c", "chain: (a+b)*c", "chain: a*b+c*b", "chain: (a+1)+2", "chain: (a*2)*0.5",
              "chain: (a+b)-b", "chain: 1/(1/a)", "chain: sqrt(a*a)", "chain: (a*b) to float32 + c",
              "REDUCE ADD of products, exact in every order")
# Where onnxruntime 1.32 on the CPU gives another answer than SPEC.md, on both devices alike (its graph optimizations
# change no conformance cell): each must still differ, so an onnxruntime that stops it makes a test fail and the
# entry go
ONNX_DIFFERS = {("SIN", "float64"): SIN_FLOAT64, **{(row, "float16"): HALF_IN_FLOAT32 for row in _HALF_ROWS}}
INT32_MIN = -2 ** 31


def test_rules_cover_the_graph_evaluator() -> None:
  assert set(RULES) | set(NOT_EXPORTED) | {Ops.BUFFER} == set(EVALUATORS)  # BUFFERs are the PARAMs on a device


def test_both_devices_are_listed_as_graph_devices_with_their_versions() -> None:
  for name in DEVICES:
    spec = next(s for s in Device.specs() if s.name == name)
    assert spec.kind == "graph" and name in Device.available("graph")
    assert f"onnxruntime {ort.__version__}" in spec.version and f"onnx {onnx.__version__}" in spec.version


@pytest.mark.parametrize("device", DEVICES)
def test_every_conformance_cell_fails_only_where_pinned(device: str) -> None:
  cells = {(r.row, r.column): r.status for batch in all_batches(list(ALL_DTYPES.values()))
           for r in run_unit(batch, device).results}
  assert len(cells) > 700 and {cell for cell, status in cells.items() if status != PASS} == set(ONNX_DIFFERS)
  assert all(cells[cell] == FAIL for cell in ONNX_DIFFERS)


def _check(fn, *inputs, device: str = "ORT") -> None:
  report = check_against_reference(fn, *inputs, device=device)
  assert report.ok, report


@pytest.mark.parametrize("device", DEVICES)
def test_integer_division_shifts_and_wrapping_at_their_edges(device: str) -> None:
  """C-style truncating IDIV and MOD, MIN // -1 (the frontend defines it: MIN, remainder 0; onnxruntime's Div traps
  there), zero divisors (UNDEFINED: skipped, but no error), shifts of signed values, wrapping ADD, MUL, NEG."""
  a = np.array([7, -7, 7, -7, INT32_MIN, INT32_MIN, 5, 2 ** 31 - 1, 0], np.int32)
  b = np.array([2, 2, -2, -2, -1, 1, 0, 2, 0], np.int32)
  for dt in (np.int32, np.int8, np.int16, np.int64):
    _check(lambda x, y: (x // y, x % y, x.idiv(y), x * y, x + y, -x), a.astype(dt), b.astype(dt), device=device)
  shifts = np.array([0, 1, 31, 30, 7, 3, 2, 1, 0], np.int32)
  _check(lambda x, s: (x << s, x >> s), a, shifts, device=device)
  unsigned = np.array([0, 1, 2 ** 63, 2 ** 64 - 1, 12345], np.uint64)
  _check(lambda x, y: (x // y, x % y, -x, x.maximum(y), x < y, x >> 3), unsigned, unsigned[::-1].copy(), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_signed_zeros_nan_inf_and_extremes(device: str) -> None:
  """MAX of signed zeros both ways and its reduction (onnxruntime returns either zero), NaN anywhere in a max
  reduction (onnxruntime's drops it), -0.0 selected by a where (onnxruntime's Where makes it +0.0), TRUNC's -0.0."""
  z = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 3.4028235e38, -1e-45, -0.5], np.float32)
  _check(lambda x: (x.maximum(x.flip(0)), x.flip(0).maximum(x), x.trunc(), x.reshape(2, 4).max(1), x * 3),
         z, device=device)
  rows = np.array([[1, np.nan, 2], [np.nan, 1, 2], [-0.0, 0.0, -0.0], [-0.0, -0.0, -0.0]])
  for dt in (np.float64, np.float16):
    _check(lambda x: (x.max(1), (x < 1).where(x, -x)), rows.astype(dt), device=device)
  _check(lambda x: x.max(0), np.array([-0.0, np.nan, 1.0]).astype(dtypes.bfloat16.np), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_integer_reductions_wrap(device: str) -> None:
  """onnxruntime's integer ReduceSum and ReduceProd saturate; SPEC's sums and products wrap."""
  big = np.array([[2 ** 31 - 1, 1, 5], [INT32_MIN, -1, 3], [65537, 65539, 7]], np.int32)
  for dt in (np.int32, np.int64, np.uint64, np.int8, np.uint16):
    _check(lambda x: (x.sum(1), x.prod(1), x.max(1), x.sum(0)), big.astype(dt), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_casts_round_once(device: str) -> None:
  """onnxruntime's Cast rounds these twice, through float32; the rules round once."""
  _check(lambda x: (x.cast(dtypes.bfloat16), x.cast(dtypes.float16)),
         np.array([1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, 65520 - 2 ** -30, -3.0, np.nan, -0.0]),
         device=device)
  wide = np.array([2 ** 62 + 2 ** 54 + 1, -(2 ** 62 + 2 ** 54 + 1), 2 ** 24 + 2 ** 16 + 1, 3, -2 ** 63], np.int64)
  _check(lambda x: (x.cast(dtypes.bfloat16), x.cast(dtypes.uint64).cast(dtypes.bfloat16),
                    x.cast(dtypes.int32).cast(dtypes.bfloat16)), wide, device=device)
  _check(lambda x: (x.cast(dtypes.bool), x.cast(dtypes.int8), x.cast(dtypes.uint8), x.bitcast(dtypes.int32)),
         np.array([0.0, -0.0, 1e-45, -0.9, 2.5, -1.5], np.float32), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_zero_dimensional_tensors(device: str) -> None:
  _check(lambda t: (t.sum(), t.max(), t.prod(), t * 2), np.zeros((0, 3), np.float32), device=device)
  _check(lambda t: (t.sum(0), t.max(1), t.prod(1), t + 1), np.zeros((2, 0), np.int32), device=device)
  _check(lambda t: (t.any(1), t.all(0)), np.zeros((2, 0), bool), device=device)
  _check(lambda t: (t * 2, t.exp2(), -t, t.log2()), np.array(-0.0, np.float32), device=device)


def _softmax_loss(x: Tensor, w: Tensor) -> Tensor:
  return ((x @ w).softmax(1) * w.sum(0)).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_a_program_realizes_whole_and_matches_python(device: str) -> None:
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
  report = check_graph_against_reference(_softmax_loss, x, w, device=device)
  assert report.ok, report.explanation
  on_ort = _softmax_loss(Tensor(x, device=device), Tensor(w, device=device)).numpy()
  np.testing.assert_allclose(on_ort, _softmax_loss(Tensor(x), Tensor(w)).numpy(), rtol=1e-5)
  ints = Tensor(np.arange(-6, 6, dtype=np.int64), device=device)
  assert ((ints * 3) // 4 + (ints << 2)).tolist() == ((np.arange(-6, 6) * 3) // 4 + (np.arange(-6, 6) << 2)).tolist()


def test_sharded_nodes_are_unsupported_by_name() -> None:
  multi = UOp(Ops.MULTI, dtypes.float32, (Tensor([1.0]).uop,), (None, ((0, 1),)))
  assert "several devices" in unsupported_reason(multi)
  error = UnsupportedOpError("ORT", Ops.MULTI, dtypes.float32, unsupported_reason(multi))
  assert str(error).startswith("device ORT cannot compute MULTI on float32: a tensor over several devices")


@pytest.mark.parametrize("row", ["SIN on float64", "float16 a*b+c"])
def test_the_disagreements_still_differ(row: str) -> None:
  fn, x = {"SIN on float64": (lambda t: t.sin(), np.array([3.0, 12.573522141723970])),
           "float16 a*b+c": (lambda t: t * t.flip(0) + 3, np.array([3.0, -1.0009765625], np.float16))}[row]
  for device in DEVICES:
    with pytest.raises(ReferenceMismatch, match=f"{device} differs from the reference"):
      check_against_reference(fn, x, device=device)


def _run_one(op_type: str, inputs: list[np.ndarray], out_type: int, **attributes) -> np.ndarray:
  """One onnxruntime node on graph inputs, no graph optimizations: onnxruntime's own operator, nothing composed."""
  names = [f"x{i}" for i in range(len(inputs))]
  graph = helper.make_graph(
    [helper.make_node(op_type, names, ["y"], **attributes)], "pin",
    [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
     for n, a in zip(names, inputs)],
    [helper.make_tensor_value_info("y", out_type, None)])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
  return session.run(None, dict(zip(names, inputs)))[0]


def test_onnxruntimes_own_answers_the_rules_compose_around() -> None:
  """Each is why a rule composes (README.md, "The rules"); one that stops holding marks a composition to remove."""
  where = _run_one("Where", [np.array([True]), np.array([-0.0], np.float32), np.array([1.0], np.float32)],
                   TensorProto.FLOAT)
  assert not np.signbit(where[0])  # onnxruntime #32191: the selected -0.0 comes back +0.0
  reduce_max = _run_one("ReduceMax", [np.array([1.0, np.nan, 2.0], np.float32), np.array([0])], TensorProto.FLOAT,
                        keepdims=1)
  assert reduce_max[0] == 2.0  # onnxruntime #10514: NaN dropped
  saturated = _run_one("ReduceSum", [np.array([2 ** 31 - 1, 1], np.int32), np.array([0])], TensorProto.INT32,
                       keepdims=1)
  assert saturated[0] == 2 ** 31 - 1  # SPEC wraps to INT32_MIN
  cast = _run_one("Cast", [np.array([1 + 2 ** -11 + 2 ** -40])], TensorProto.FLOAT16, to=TensorProto.FLOAT16)
  assert cast[0] == 1.0  # rounded twice; once gives 1 + 2**-10
  with pytest.raises(Exception, match="Integer division by zero"):
    _run_one("Div", [np.array([1], np.int32), np.array([0], np.int32)], TensorProto.INT32)


def test_onnxruntimes_integer_division_of_min_by_minus_one_kills_the_process() -> None:
  """Div on int32 MIN / -1 ends the process with SIGFPE (README.md), which is why the rules guard the divisor."""
  script = ("import sys; sys.path[:0] = " + repr(sys.path) + "\n"
            "import numpy as np\nfrom onnx import TensorProto\nfrom test_onnx import _run_one\n"
            "_run_one('Div', [np.array([-2**31], np.int32), np.array([-1], np.int32)], TensorProto.INT32)\n")
  run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=__file__.rsplit("/", 1)[0])
  assert run.returncode == -8, run.stdout + run.stderr  # -SIGFPE


def test_a_finding_is_shrunk_and_written_as_a_standalone_onnx_reproducer(tmp_path):
  """float16 (x * y + z) * 2: the whole-graph check finds the unrounded product, shrinks the graph to the multiply
  and the add, and writes repro.onnx with a script that runs it with onnxruntime alone and exits 1."""
  x, y, z = (np.array(v, np.float16) for v in ([3.0, 1.0], [-1.0009765625, 2.0], [3.0, 0.5]))
  report = check_graph_against_reference(lambda a, b, c: (a * b + c) * 2, x, y, z, device="ORT",
                                         raise_on_mismatch=False)
  assert not report.ok and [u.op for u in report.shrunk.graph.toposort if u.op in GroupOp.ALU] == [Ops.MUL, Ops.ADD]
  assert write_graph_standalone(report, tmp_path) == f"standalone reproducer: {tmp_path}/repro.py"
  assert onnx.load(tmp_path / "repro.onnx").opset_import[0].version == OPSET
  script = (tmp_path / "repro.py").read_text()
  assert "import refgrad" not in script and "from refgrad" not in script
  run = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
  assert run.returncode == 1 and "lane 0: got np.float16(-0.00293), expected np.float16(-0.003906)" in run.stdout, \
    run.stdout + run.stderr


def test_a_program_without_an_answer_is_written_whole_one_reproducer_per_output(tmp_path):
  """A graph device's crash, hang or compile error cannot be run here to see which output it was in, nor shrunk:
  each output's whole graph is written as a reproducer. Here output 0 has the unrounded float16 product (its script
  exits 1), output 1 is right (exits 0)."""
  x, y = np.array([3.0, 1.0], np.float16), np.array([-1.0009765625, 2.0], np.float16)
  line = write_program_standalone(lambda a, b: (a * b + a, a * 2), [x, y], "ORT", tmp_path, "it killed the process")
  assert line == (f"standalone reproducers, one per output (which one fails is not known): "
                  f"{tmp_path}/output_0/repro.py, {tmp_path}/output_1/repro.py")
  runs = [subprocess.run([sys.executable, "repro.py"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path / f"output_{k}") for k in (0, 1)]
  assert [run.returncode for run in runs] == [1, 0], [run.stdout + run.stderr for run in runs]
  assert "it killed the process (the program's output 0" in (tmp_path / "output_0" / "repro.py").read_text()
