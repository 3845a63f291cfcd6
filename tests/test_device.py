"""The device layer: registry, default device, clear errors for unknown or unavailable devices."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from refgrad import Device, Tensor
from refgrad.buffer import Buffer
from refgrad.device import DeviceImpl
from refgrad.dtype import dtypes
from refgrad.interp.device import PythonAllocator
from refgrad.interp.kernel import PythonKernel


def test_unknown_device_lists_known_ones():
  with pytest.raises(ValueError, match="unknown device 'NOPE'.*PYTHON"):
    Tensor([1, 2], device="NOPE")
  with pytest.raises(RuntimeError, match="unknown device 'NOPE'"):  # torch's type
    Tensor([1, 2]).to("NOPE")
  with pytest.raises(RuntimeError):  # the oracle: torch refuses an unknown device type with a RuntimeError
    torch.tensor([1, 2]).to("nope")


def test_device_strings_are_canonical():
  assert Device.canonicalize("python") == "PYTHON"
  assert Device.canonicalize("python:0") == "PYTHON"
  assert Device.canonicalize("PYTHON:1") == "PYTHON:1"
  with pytest.raises(ValueError, match="device index"):
    Device.canonicalize("PYTHON:x")


def test_default_device_comes_from_the_environment():
  code = "from refgrad import Device; print(Device.DEFAULT)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"REFGRAD_DEVICE": "python", "PATH": ""}, check=True)
  assert out.stdout.strip() == "PYTHON"
  bad = subprocess.run([sys.executable, "-c", "from refgrad import Tensor; Tensor([1])"], capture_output=True,
                       text=True, env={"REFGRAD_DEVICE": "MISSING", "PATH": ""})
  assert bad.returncode != 0 and "unknown device 'MISSING'" in bad.stderr


def test_unavailable_device_raises_with_its_reason():
  Device.register("BROKENTEST", lambda: None, plugin="tests", unavailable_reason="no widget found: tried a, b")
  try:
    with pytest.raises(RuntimeError, match="no widget found"):
      Tensor([1.0], device="BROKENTEST")
  finally:
    Device.remove("BROKENTEST")


def test_a_second_registered_device_runs_programs_and_copies():
  Device.register("PYCOPY", lambda: DeviceImpl("PYCOPY", PythonAllocator(), interpret=PythonKernel), plugin="tests")
  try:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(x, device="PYCOPY")
    assert t.device == "PYCOPY"
    moved = (t * 2).to("PYTHON")
    assert moved.device == "PYTHON"
    np.testing.assert_array_equal(moved.numpy(), x * 2)
  finally:
    Device.remove("PYCOPY")


def test_buffers_round_trip_every_dtype():
  for dt in dtypes.fields().values():
    data = np.arange(5).astype(dt.np)
    np.testing.assert_array_equal(Buffer("PYTHON", 5, dt).copyin(data).numpy(), data)


def test_a_name_registered_by_another_plugin_is_refused():
  Device.register("TAKENTEST", lambda: DeviceImpl("TAKENTEST", PythonAllocator(), interpret=PythonKernel),
                  plugin="first-plugin")
  try:
    with pytest.raises(ValueError, match="TAKENTEST is already registered by plugin 'first-plugin'.*'second-plugin'"):
      Device.register("takentest", lambda: None, plugin="second-plugin")
    assert Device["TAKENTEST"].name == "TAKENTEST"  # the first one is still there
  finally:
    Device.remove("TAKENTEST")


def test_numbered_devices_are_distinct_instances():
  assert Device["PYTHON"] is Device["PYTHON:0"]
  assert Device["PYTHON:1"] is not Device["PYTHON"] and Device["PYTHON:1"] is Device["python:1"]
  x = np.arange(4, dtype=np.float32)
  t = Tensor(x, device="PYTHON:1")
  np.testing.assert_array_equal((t + 1).to("PYTHON").numpy(), x + 1)


def test_mixing_devices_raises_like_torch():
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0], device="PYTHON:1")
  for combine in (lambda: a + b, lambda: b * a, lambda: a.maximum(b), lambda: a.reshape(1, 2) @ b.reshape(2, 1),
                  lambda: (a > 1).where(b, 0.0), lambda: (a > 1).where(b, b)):  # where's condition was not checked
    with pytest.raises(RuntimeError, match="same device.*PYTHON and PYTHON:1|same device.*PYTHON:1 and PYTHON"):
      combine()


def test_import_refgrad_probes_no_device():
  """Probes can be slow (OpenCL enumerates platforms): they run when a device is first listed or selected."""
  code = ("import refgrad\nfrom refgrad.registry import Device\n"
          "print(sorted(s.name for s in Device._specs.values() if s._probed))\n"
          "Device['PYTHON']\nprint(sorted(s.name for s in Device._specs.values() if s._probed))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
  assert out[0] == "[]" and out[1] == "['PYTHON']"


@pytest.mark.parametrize("plugin", ["refgrad_clang", "refgrad_llvm", "refgrad_opencl"])
def test_a_plugin_imported_before_refgrad_keeps_its_device(plugin):
  pytest.importorskip(plugin)
  name = plugin.split("_")[1].upper()
  code = f"import {plugin}\nimport refgrad\nprint([s.name for s in refgrad.Device.specs()])"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert f"'{name}'" in out


def test_tinygrads_device_names_are_aliases():
  """tinygrad 0.10 calls the C host device CPU and the OpenCL one GPU."""
  if "CLANG" in Device.available():
    assert Tensor.rand(2, device="CPU").device == "CLANG" and Tensor([1], device="cpu:1").device == "CLANG:1"
    np.testing.assert_array_equal(Tensor([1, 2], device="CPU").numpy(), [1, 2])
  if "OPENCL" in Device.available():
    assert Tensor([1], device="GPU").device == "OPENCL"
