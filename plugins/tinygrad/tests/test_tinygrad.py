"""The graph devices TINYGRAD_CPU, TINYGRAD_LLVM and TINYGRAD_PYTHON against the reference: conformance cells, edge
values where tinygrad's own ops differ from SPEC.md and the rules compose the answer, programs realized whole, the
settings the plugin gives tinygrad, and the disagreements that remain (README.md, "Disagreements found"), each
required still to differ. TINYGRAD_PYTHON emulates every UOp in Python: it gets the small cases only."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from refgrad_tinygrad import probe, tinygrad_reason
from refgrad_tinygrad.export import NOT_EXPORTED, RULES, unsupported_reason
from refgrad_tinygrad.runtime import clang_compiles_bf16

from refgrad import Device, Tensor
from refgrad.codegen.contract import UnsupportedOpError
from refgrad.dtype import dtypes
from refgrad.graph_device import graph_inputs
from refgrad.interp.graph import EVALUATORS
from refgrad.testing.conformance.batches import all_batches
from refgrad.testing.conformance.results import FAIL, PASS
from refgrad.testing.conformance.run import run_unit
from refgrad.testing.oracle.graph_check import check_graph_against_reference, write_graph_standalone
from refgrad.testing.oracle.reference import ReferenceMismatch, check_against_reference
from refgrad.uop import GroupOp, Ops, UOp

DEVICES = ("TINYGRAD_CPU", "TINYGRAD_LLVM", "TINYGRAD_PYTHON")
COMPILED = ("TINYGRAD_CPU", "TINYGRAD_LLVM")

FMA = "a*b+c fused into one FMA: clang's default -ffp-contract=on (tinygrad's ClangCompiler passes none), and the " \
      "`contract` flag on every float op of tinygrad's LLVM IR (renderer/llvmir.py)"
REASSOCIATED = "tinygrad's symbolic rewrites fold (x+c1)+c2 and (x*c1)*c2 into one constant: one rounding less"
CANCELLED = "tinygrad's symbolic rewrites cancel x-x and (x+y)-y: 0 and x where NaN, inf or rounding say otherwise"
MUL_ZERO = "uop/symbolic.py's `x*0 -> 0` (its comment: 'NOTE: this can be wrong for loaded NaN'): -0.0, NaN, inf lost"
ADD_ZERO = "uop/symbolic.py's `x+0 -> x` keeps -0.0 (SPEC: -0.0 + 0.0 is +0.0)"
FACTORED = "a*b+c*b rewritten as (a+c)*b: inf - inf where a product overflows"
LOG2_BUG = "tinygrad's xlog2 gives -inf for negative subnormals (its -0.0 test is 1/x == -inf, which they overflow " \
           "to), against its own comment 'log2(x) = NaN for x < 0'"
SIN_ULP = "tinygrad's xsin, 'a 1.0 ULP approximation for Ops.SIN', is 7 ULP off at float32 3.0 and -0.0 at float32 pi"
NO_OVERFLOW = "tinygrad's symbolic rewrites assume integers do not overflow: a < a+1 is True at MAX, a*b+c < c " \
              "becomes a*b < 0"
FAST_MATH = "tinygrad's LLVM IR puts `nsz arcp contract afn` on every float op (renderer/llvmir.py): sqrt(-0.0) is " \
            "+0.0, a/3 is a*(1/3), sqrt(a*a) is 1 ULP off"
_FLOAT32 = {"chain: (a*2)*0.5": REASSOCIATED, "chain: (a+1)+2": REASSOCIATED, "chain: (a+b)-b": CANCELLED,
            "chain: a-a": CANCELLED, "chain: a*0": MUL_ZERO, "chain: a+0": ADD_ZERO, "chain: a*b+c*b": FACTORED,
            "chain: a*b+c": FMA, "chain: (a*b) to float32 + c": FMA, "LOG2": LOG2_BUG, "SIN": SIN_ULP,
            "REDUCE ADD of products, exact in every order": FMA}
_LLVM_ONLY = {"SQRT": FAST_MATH, "chain: a/3": FAST_MATH, "chain: a/10": FAST_MATH,
              "chain: a/s (s=3 in every lane)": FAST_MATH, "chain: sqrt(a*a)": FAST_MATH}
# Where tinygrad gives another answer than SPEC.md, among the cells each device's test runs (README.md has the whole
# matrix): each must still differ, so a tinygrad that stops a rewrite makes a test fail and its entry go.
TINYGRAD_DIFFERS = {
  "TINYGRAD_CPU": {**{(row, "float32"): why for row, why in _FLOAT32.items()},
                   ("chain: a<a+1", "int32"): NO_OVERFLOW, ("chain: a*b+c<c", "int32"): NO_OVERFLOW},
  "TINYGRAD_LLVM": {(row, "float32"): why for row, why in {**_FLOAT32, **_LLVM_ONLY}.items()},
  "TINYGRAD_PYTHON": {},
}
CONFORMANCE = {"TINYGRAD_CPU": [dtypes.float32, dtypes.int32, dtypes.bool],
               "TINYGRAD_LLVM": [dtypes.float32, dtypes.uint8, dtypes.bool],
               "TINYGRAD_PYTHON": [dtypes.bool]}  # its uint8 batches alone take 200 s (and pass)
UNSUPPORTED_CELLS = {("MOD", "float32")}  # tinygrad has no float remainder (export.py)
INT32_MIN = -2 ** 31


def test_rules_cover_the_graph_evaluator() -> None:
  assert set(RULES) | set(NOT_EXPORTED) | {Ops.BUFFER} == set(EVALUATORS)  # BUFFERs are the PARAMs on a device


@pytest.mark.parametrize("name", DEVICES)
def test_the_devices_are_graph_devices_naming_tinygrad_and_its_renderer(name: str) -> None:
  spec = next(s for s in Device.specs() if s.name == name)
  assert spec.kind == "graph" and name in Device.available("graph")
  assert "tinygrad 0.14.0" in spec.version and "DEV=" in spec.version


def test_a_machine_without_tinygrad_lists_the_devices_with_the_reason(monkeypatch) -> None:
  import refgrad_tinygrad
  monkeypatch.setattr(refgrad_tinygrad.importlib.util, "find_spec", lambda name: None)
  assert "tinygrad is not installed" in probe("TINYGRAD_CPU")
  monkeypatch.undo()
  monkeypatch.setattr(refgrad_tinygrad, "installed_version", lambda name: "0.11.0")
  assert "tinygrad 0.11.0 is installed" in tinygrad_reason()


@pytest.mark.parametrize("name", CONFORMANCE)
def test_conformance_cells_fail_only_where_pinned(name: str) -> None:
  results = [r for batch in all_batches(CONFORMANCE[name]) for r in run_unit(batch, name).results]
  cells = {(r.row, r.column): r.status for r in results}
  pinned, unsupported = set(TINYGRAD_DIFFERS[name]), UNSUPPORTED_CELLS & set(cells)
  assert {cell for cell, status in cells.items() if status != PASS} == pinned | unsupported
  assert all(cells[cell] == FAIL for cell in pinned) and len(cells) >= 9


def _check(fn, *inputs, devices=DEVICES) -> None:
  for name in devices:
    report = check_against_reference(fn, *inputs, device=name)
    assert report.ok, report


def test_integer_division_shifts_and_wrapping_at_their_edges() -> None:
  """C-style truncating IDIV and MOD, MIN / -1 (the frontend defines its lanes), zero divisors (UNDEFINED: skipped,
  and no SIGFPE: the rules divide by 1 there), shifts, wrapping ADD, MUL and NEG."""
  a = np.array([7, -7, 7, -7, INT32_MIN, INT32_MIN, 5, 2 ** 31 - 1, 0], np.int32)
  b = np.array([2, 2, -2, -2, -1, 1, 0, 2, 0], np.int32)
  _check(lambda x, y: (x // y, x % y, x.idiv(y), x * y, x + y, -x), a, b)
  _check(lambda x, s: (x << s, x >> s), a, np.array([0, 1, 31, 30, 7, 3, 2, 1, 0], np.int32), devices=COMPILED)
  unsigned = np.array([0, 1, 2 ** 63, 2 ** 64 - 1, 12345], np.uint64)
  _check(lambda x, y: (x // y, x % y, x + y, x * y, x.maximum(y), x < y), unsigned, unsigned[::-1].copy())


def test_signed_zeros_nan_and_inf_through_max_and_its_reductions() -> None:
  """tinygrad's MAX is `a < b ? b : a` (max(1, NaN) is 1, max(-0.0, 0.0) -0.0): the rules compose SPEC's."""
  z = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 3.0e38, -3.0e38, 1.0], np.float32)
  _check(lambda x: (x.maximum(x.flip(0)), x.minimum(x.flip(0)), x.reshape(2, 4).max(1), x.reshape(4, 2).min(1)), z)
  zeros = np.array([-0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 1.0, np.nan], np.float32)
  _check(lambda x: (x.reshape(4, 2).max(1), x.max(), x.reshape(2, 4).sum(1)), zeros)


def test_casts_round_once() -> None:
  """tinygrad rounds float64 -> float16/bfloat16 and int32/64 -> bfloat16 through float32; the rules round once."""
  wide = np.array([1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, -3.0, 65519.99, np.nan, -0.0])
  ints = np.array([2 ** 62 + 2 ** 54 + 1, -(2 ** 62 + 2 ** 54 + 1), 2 ** 24 + 2 ** 16 + 1, 3, -2 ** 63], np.int64)
  for name in DEVICES:
    for half in (dt for dt in (dtypes.float16, dtypes.bfloat16) if dt in Device[name].caps.dtypes):
      _check(lambda x, i, h=half: (x.cast(h), i.cast(h), i.cast(dtypes.int32).cast(h)), wide, ints, devices=(name,))
  _check(lambda x: (x.cast(dtypes.bool), x.cast(dtypes.int8), x.cast(dtypes.uint8), x.bitcast(dtypes.int32)),
         np.array([0.0, -0.0, np.nan, -0.9, 2.5, -1.5], np.float32))


def test_empty_and_zero_dimensional_tensors() -> None:
  _check(lambda t: (t.sum(), t.max(), t.prod(), t * 2), np.zeros((0, 3), np.float32))
  _check(lambda t: (t.sum(0), t.max(1), t + 1), np.zeros((2, 0), np.int32))
  _check(lambda t: (t * 2, -t, t.maximum(0.0)), np.array(-0.0, np.float32))


def _softmax_loss(x: Tensor, w: Tensor) -> Tensor:
  return ((x @ w).softmax(1) * w.sum(0)).sum()


def test_a_program_realizes_whole_and_matches_python() -> None:
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
  on_python = _softmax_loss(Tensor(x), Tensor(w)).numpy()
  for name in DEVICES:
    assert check_graph_against_reference(_softmax_loss, x, w, device=name).ok
    whole = _softmax_loss(Tensor(x, device=name), Tensor(w, device=name)).numpy()
    np.testing.assert_allclose(whole, on_python, rtol=1e-5)
  ints = np.arange(-6, 6, dtype=np.int64)
  assert ((Tensor(ints, device="TINYGRAD_CPU") * 3) // 4 + (Tensor(ints, device="TINYGRAD_CPU") << 2)).tolist() == \
    ((ints * 3) // 4 + (ints << 2)).tolist()


def test_each_graph_gets_its_own_answer_on_each_renderer() -> None:
  """tinygrad caches schedules and compiled kernels: two graphs differing only in a constant, and one graph on both
  CPU renderers in turn, still give each their own answer."""
  graphs = [(Tensor([1.0, 2.0, 3.0]) * k).schedule()[-1].ast for k in (2.0, 3.0)]
  arrays = [np.arange(3, dtype=np.float32) for _ in graph_inputs(graphs[0])]
  for name in COMPILED * 2:
    runs = [Device[name].graph.compile(g) for g in graphs]
    assert [list(run(*arrays)[0]) for run in runs] == [[0.0, 2.0, 4.0], [0.0, 3.0, 6.0]]


def test_tinygrads_settings_do_not_leak() -> None:
  """The plugin sets DEV and PARALLEL only around a graph (tinygrad's Context) and never tinygrad's environment."""
  from tinygrad.helpers import DEV, PARALLEL
  before = (os.environ.get("DEV"), repr(DEV), PARALLEL.value)
  for name in DEVICES:
    (Tensor([1.0, 2.0], device=name) * 2).numpy()
  assert (os.environ.get("DEV"), repr(DEV), PARALLEL.value) == before


def test_bfloat16_on_the_c_renderer_only_with_a_clang_that_compiles_it() -> None:
  assert (dtypes.bfloat16 in Device["TINYGRAD_CPU"].caps.dtypes) == clang_compiles_bf16()
  assert dtypes.float16 not in Device["TINYGRAD_LLVM"].caps.dtypes  # CPULLVMRenderer declares no float16 off macOS


def test_unsupported_nodes_are_named() -> None:
  with pytest.raises(UnsupportedOpError, match="MOD on float32: tinygrad has no float remainder"):
    (Tensor([5.0, -7.5], device="TINYGRAD_CPU") % Tensor([3.0, 2.0], device="TINYGRAD_CPU")).numpy()
  multi = UOp(Ops.MULTI, dtypes.float32, (Tensor([1.0]).uop,), (None, ((0, 1),)))
  assert "several devices" in unsupported_reason(multi)


REWRITES = {  # TINYGRAD_DIFFERS's rewrites, on lanes of normal numbers, on every device (README.md)
  "x * 0": (lambda t: t * 0, np.array([-2.0], np.float32)),
  "x + 0": (lambda t: t + 0, np.array([-0.0], np.float32)),
  "(x + 1) + 2": (lambda t: (t + 1) + 2, np.array([2.0 ** 24], np.float32)),
  "x - x": (lambda t: t - t, np.array([np.inf], np.float32)),
}


@pytest.mark.parametrize("name", REWRITES)
def test_tinygrads_rewrites_still_differ(name: str) -> None:
  fn, x = REWRITES[name]
  for device in DEVICES:
    with pytest.raises(ReferenceMismatch, match=f"{device} differs from the reference"):
      check_against_reference(fn, x, device=device)


PYTHON_ONLY = {  # where tinygrad's PYTHON emulator alone differs (README.md): it must still, and CPU must agree
  "trunc(-0.5) is +0.0 (its math.trunc gives an int)": (lambda t: t.trunc(), np.array([-0.5, 2.5], np.float32)),
  "a / b rounds twice (no FDIV: a * reciprocal(b))": (lambda t: t / (t + 4), np.array([3.0, 1.0, 5.0], np.float32)),
}


@pytest.mark.parametrize("name", PYTHON_ONLY)
def test_the_python_emulators_own_differences(name: str) -> None:
  fn, x = PYTHON_ONLY[name]
  with pytest.raises(ReferenceMismatch, match="TINYGRAD_PYTHON differs from the reference"):
    check_against_reference(fn, x, device="TINYGRAD_PYTHON")
  _check(fn, x, devices=("TINYGRAD_CPU",))


def test_a_float64_subnormal_constant_still_breaks_tinygrads_llvm_ir() -> None:
  """README.md, "Bugs": TINYGRAD_LLVM raises (LLVM's parser refuses the `5e-324` tinygrad writes for a double), and
  TINYGRAD_CPU answers right."""
  def add_the_smallest(t: Tensor) -> Tensor:
    return t + 5e-324
  with pytest.raises(RuntimeError, match="integer constant must have integer type"):
    check_against_reference(add_the_smallest, np.array([1.0, 0.0]), device="TINYGRAD_LLVM")
  _check(add_the_smallest, np.array([1.0, 0.0]), devices=("TINYGRAD_CPU",))


def test_a_finding_is_shrunk_and_written_as_a_tinygrad_script(tmp_path) -> None:
  """tinygrad's log2 of a negative subnormal (README.md, "Bugs") inside exp2(log2(x) * 2 + 1): the whole-graph check
  finds it, shrinks it to the LOG2, and writes a script that runs it with tinygrad alone and exits 1."""
  x = np.array([-1e-45, 2.0, 8.0], np.float32)
  report = check_graph_against_reference(lambda t: (t.log2() * 2 + 1).exp2(), x, device="TINYGRAD_CPU",
                                         raise_on_mismatch=False)
  assert not report.ok and [u.op for u in report.shrunk.graph.toposort if u.op in GroupOp.ALU] == [Ops.LOG2]
  assert write_graph_standalone(report, tmp_path) == f"standalone reproducer: {tmp_path}/repro.py"
  script = (tmp_path / "repro.py").read_text()
  assert "import refgrad" not in script and "from refgrad" not in script
  hidden = "import runpy, sys; sys.modules['refgrad'] = None; runpy.run_path('repro.py', run_name='__main__')"
  run = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert run.returncode == 1 and "lane 0: got bits 0xff800000" in run.stdout, run.stdout + run.stderr
