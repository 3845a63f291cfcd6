"""TORCH and INDUCTOR as graph devices: Tensor programs realized whole and compared with the reference over the whole
graph, random programs kernel by kernel, and Inductor's int8 maximum found, shrunk and written as a torch script."""
from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from refgrad_torch.device import ELIDED_HALF_ROUNDING
from torch_oracle import torch_may_differ

from refgrad import Device, Tensor
from refgrad.codegen.contract import UnsupportedOpError
from refgrad.dtype import dtypes
from refgrad.testing.oracle.graph_check import (
  check_graph_against_reference,
  write_graph_standalone,
  write_program_standalone,
)
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.testing.strategies import tensor_programs
from refgrad.uop import Ops


def test_both_devices_are_graph_devices():
  assert {"TORCH", "INDUCTOR"} <= set(Device.available("graph"))
  assert Device["INDUCTOR"].kind == "graph" and "TORCH" not in Device.available("kernel")


def _program(x: Tensor, w: Tensor, i: Tensor, e: Tensor) -> tuple[Tensor, ...]:
  """Several kernels' worth as one graph: softmax over a matmul, C-style integer division at the edges, signed
  zeros, NaN and infinities, movement ops, an empty reduction, a 0-d value and a where over uint32."""
  return (((x @ w).softmax(1) * 2).sum(0),
          (i // 3) + (i % -3) * i, i.maximum(-i), i >> 2,
          e.maximum(-e), e * 0, e.relu(), e.max(), e.sum(),
          x.reshape(5, 6).T[::2, 1:].pad(((1, 1), (2, 0))), x.cumsum(1),
          Tensor.zeros(0, 3, device=x.device).sum(0), x[0, 0] * 2,
          (i > 0).where(i.cast(dtypes.uint32), 7))  # Inductor cannot compile a where over uint32 (unsigned.py)


@pytest.mark.parametrize("device", ["TORCH", "INDUCTOR"])
def test_a_program_realized_whole_matches_the_reference(device):
  rng = np.random.default_rng(0)
  inputs = (rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32),
            np.array([7, -7, -2 ** 31, 0, 2 ** 31 - 1, 5], np.int32),
            np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4e38], np.float32))
  report = check_graph_against_reference(_program, *inputs, device=device)
  # e.sum() is NaN in every order (e holds a NaN): checked too
  assert len(report.outputs) == 14 and sum(c.checked for c in report.outputs) == 115


def test_random_bits_on_torch_are_the_references():
  Tensor.manual_seed(5)
  expected = Tensor.rand(4, 7).numpy()
  Tensor.manual_seed(5)
  assert Tensor.rand(4, 7, device="TORCH").numpy().tobytes() == expected.tobytes()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(tensor_programs(sharded=False, transcendentals=False, symbolic_sizes=False))
def test_random_programs_on_torch_kernel_by_kernel(program):
  try:
    report = check_against_reference(program.run, *program.inputs, device="TORCH", raise_on_mismatch=False)
  except UnsupportedOpError as e:  # uint64 division: named, never computed
    assert e.dtype.name == "uint64" and e.op.name in ("IDIV", "MOD"), e
    return
  for kernel in report.kernels:  # a differing kernel passes only where a pinned disagreement of torch can be the cause
    assert kernel.ok or torch_may_differ(kernel.ast), kernel.explanation


def test_inductors_int8_maximum_is_found_shrunk_and_written(tmp_path):
  """Upstream bug (plugins/torch/README.md): torch.compile's int8 amax of 13 x -128 is 1. Found inside a larger
  program, shrunk to the one REDUCE_AXIS, written as a script that fails on torch.compile and passes eagerly. When
  torch fixes it this test fails and the README's entry goes."""
  x = np.full((1, 13), -128, np.int8)
  program = lambda t: ((t.max(1) + 1) * 2, t.cast("float32").sum())  # noqa: E731
  report = check_graph_against_reference(program, x, device="INDUCTOR", raise_on_mismatch=False)
  assert not report.outputs[0].ok and report.outputs[1].ok
  assert [u.op for u in report.shrunk.graph.toposort if u.op not in (Ops.BUFFER, Ops.RESHAPE)] == [Ops.REDUCE_AXIS]
  assert report.shrunk.actual.tolist() == [1]
  line = write_graph_standalone(report, tmp_path)
  assert line == f"standalone reproducer: {tmp_path}/repro.py"
  run = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
  assert run.returncode == 1, run.stdout + run.stderr
  assert "eager torch: 0 of 1 lanes differ" in run.stdout and "lane 0: got 1, expected -128" in run.stdout
  assert "refgrad" not in run.stdout and "import refgrad" not in (tmp_path / "repro.py").read_text()


def test_inductors_declared_half_precision_is_what_lets_a_fused_bfloat16_chain_pass(monkeypatch):
  """sqrt(x) * y in bfloat16, fused by Inductor without rounding the square root (found by an INDUCTOR campaign):
  within the declared difference (torch's own sentence, device.py), and a mismatch without it."""
  x = np.array([1.25, 54.0, 7.0, 100.0, 3.0], np.float32).astype(ml_dtypes.bfloat16)
  y = np.array([1.0, 3.5, 5.0, 0.75, 9.0], np.float32).astype(ml_dtypes.bfloat16)
  program = lambda a, b: a.sqrt() * b  # noqa: E731
  assert Device["INDUCTOR"].graph.differences == (ELIDED_HALF_ROUNDING,) and not Device["TORCH"].graph.differences
  assert "elide the downcast-upcast pairs" in ELIDED_HALF_ROUNDING.source
  check_graph_against_reference(program, x, y, device="INDUCTOR")
  monkeypatch.setattr(Device["INDUCTOR"].graph, "differences", ())
  report = check_graph_against_reference(program, x, y, device="INDUCTOR", raise_on_mismatch=False, shrink=False)
  assert not report.ok


def test_a_program_without_an_answer_is_written_whole_as_a_torch_script_that_runs(tmp_path):
  """A graph device's crash, hang or compile error has no answer to shrink by: the program's whole graph is written
  as a script (found on XLA's crash findings). Integer division composes tensor constants, which make_fx lifts as
  `self._tensor_constant0` (a script once read them into a local of the same name: UnboundLocalError). The script of
  a right program passes eagerly and compiled."""
  program = lambda t: (t < 0).cast("int32").sum(0) // (t > 5).cast("int32").sum(0)  # noqa: E731
  line = write_program_standalone(program, [np.array([1.0, -2.0, 7.0], np.float32)], "INDUCTOR", tmp_path,
                                  "its compiler raised")
  assert line == f"standalone reproducer: {tmp_path}/repro.py"
  assert "CONST_tensor_constant0 = from_bits(" in (tmp_path / "repro.py").read_text()
  run = subprocess.run([sys.executable, "repro.py"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert run.returncode == 0 and "torch.compile: 0 of 1 lanes differ" in run.stdout, run.stdout + run.stderr
