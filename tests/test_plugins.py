"""The plugin contract: an out-of-tree example backend registered in-process, checked against PYTHON."""
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from refgrad import Device, Tensor, plugin_loader
from refgrad.codegen.pipeline import compile_ast
from refgrad.hookspecs import hookimpl
from refgrad.standalone import RUN_SCRIPT
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.testing.oracle.standalone_cases import cases_on, write_standalone
from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS, tensor_programs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pyloops"


@pytest.fixture(scope="module")
def pyloops():
  sys.path.insert(0, str(EXAMPLE))
  try:
    import refgrad_pyloops
    if "PYLOOPS" not in Device.available():
      plugin_loader.register(refgrad_pyloops)
    yield "PYLOOPS"
    plugin_loader.unregister(refgrad_pyloops)
  finally:
    sys.path.remove(str(EXAMPLE))


def test_example_plugin_registers_and_computes(pyloops):
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(x, device=pyloops)
  np.testing.assert_array_equal((t * 2 + 1).numpy(), x * 2 + 1)
  np.testing.assert_array_equal(t.sum(1).numpy(), x.sum(1))
  np.testing.assert_array_equal(t.T[::2].numpy(), x.T[::2])
  assert "def " in Device[pyloops].render(compile_ast((t + 1).schedule()[-1].ast))


@settings(max_examples=25, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)
@given(program=tensor_programs(transcendentals=False, max_steps=3))
def test_example_plugin_matches_the_reference(pyloops, program):
  """Kernel by kernel, with SPEC.md's bounds: the example backend sums floats in its own (serial) order."""
  check_against_reference(program.run, *program.inputs, device=pyloops)


def test_unregistering_removes_the_device():
  class Tmp:
    @staticmethod
    @hookimpl
    def refgrad_devices():
      from refgrad.interp.plugin import make_python_device
      from refgrad.registry import DeviceSpec
      return [DeviceSpec("TMPDEV", make_python_device, plugin="tmp")]

  plugin = Tmp()
  try:
    assert plugin_loader.register(plugin) == ["TMPDEV"]
    assert Tensor([1, 2], device="TMPDEV").tolist() == [1, 2]
  finally:
    plugin_loader.unregister(plugin)
  with pytest.raises(ValueError, match="unknown device"):
    Tensor([1], device="TMPDEV")


def test_a_plugin_that_fails_to_import_is_listed_unavailable():
  spec = plugin_loader._broken_plugin_spec("badplugin", ImportError("No module named 'missing_dep'"))
  Device.add(spec)
  try:
    with pytest.raises(RuntimeError, match="BADPLUGIN is unavailable: plugin failed to load: ImportError"):
      Tensor([1], device="badplugin")
  finally:
    Device.remove("BADPLUGIN")


def test_example_plugin_writes_a_standalone_reproducer(pyloops, tmp_path):
  """The example's DeviceImpl.standalone hook (docs/writing-a-backend.md): run.sh passes on the kernel PYLOOPS ran,
  and fails naming the lane when an expected value is wrong."""
  x = np.array([[0.0, -0.0, 1.5], [np.inf, np.nan, -3.25]], np.float32)
  case = cases_on(pyloops, lambda t: t.max(1) * 2, x)[-1]
  wrong = case.expected.copy()
  wrong[0] += 1
  env = {**os.environ, "PYTHON": sys.executable}
  runs = {}
  for name, expected in (("right", case.expected), ("wrong", wrong)):
    write_standalone(tmp_path / name, dataclasses.replace(case, expected=expected))
    runs[name] = subprocess.run(["sh", RUN_SCRIPT], cwd=tmp_path / name, env=env, capture_output=True, text=True)
  assert runs["right"].returncode == 0, runs["right"].stdout + runs["right"].stderr
  assert runs["wrong"].returncode == 1 and "lane 0: got bits" in runs["wrong"].stdout
