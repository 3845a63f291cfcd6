"""The device layer: registry, default device, clear errors for unknown or unavailable devices."""
import subprocess
import sys

import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad.device import Buffer, DeviceImpl
from refgrad.dtype import dtypes
from refgrad.interp.device import PythonAllocator
from refgrad.interp.kernel import PythonKernel


def test_unknown_device_lists_known_ones():
  with pytest.raises(ValueError, match="unknown device 'NOPE'.*PYTHON"):
    Tensor([1, 2], device="NOPE")


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
  with pytest.raises(RuntimeError, match="no widget found"):
    Tensor([1.0], device="BROKENTEST")


def test_a_second_registered_device_runs_programs_and_copies():
  Device.register("PYCOPY", lambda: DeviceImpl("PYCOPY", PythonAllocator(), interpret=PythonKernel), plugin="tests")
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  t = Tensor(x, device="PYCOPY")
  assert t.device == "PYCOPY"
  moved = (t * 2).to("PYTHON")
  assert moved.device == "PYTHON"
  np.testing.assert_array_equal(moved.numpy(), x * 2)


def test_buffers_round_trip_every_dtype():
  for dt in dtypes.fields().values():
    data = np.arange(5).astype(dt.np)
    np.testing.assert_array_equal(Buffer("PYTHON", 5, dt).copyin(data).numpy(), data)
