"""The plugin contract: an out-of-tree example backend registered in-process, checked against PYTHON."""
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from refgrad import Device, Tensor, plugin_loader
from refgrad.codegen.pipeline import compile_ast
from refgrad.hookspecs import hookimpl
from refgrad.testing.oracle.reference import check_against_reference
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
