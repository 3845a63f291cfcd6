"""The PYTHON device: numpy memory and the vectorized kernel interpreter, registered like any other device."""
from __future__ import annotations

import numpy as np

from refgrad.codegen.linearize import Program
from refgrad.device import DeviceImpl
from refgrad.interp.kernel import PyBuffer, PythonKernel


class PythonAllocator:
  def alloc(self, nbytes: int) -> PyBuffer:
    return PyBuffer(np.zeros(nbytes, dtype=np.uint8))

  def free(self, handle: PyBuffer) -> None:
    handle.data = np.zeros(0, dtype=np.uint8)

  def copyin(self, handle: PyBuffer, src: memoryview) -> None:
    handle.data[:] = np.frombuffer(src, dtype=np.uint8)
    handle.undefined = None

  def copyout(self, dest: memoryview, handle: PyBuffer) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = handle.data


def make_python_device() -> DeviceImpl:
  return DeviceImpl("PYTHON", PythonAllocator(), PythonKernel, plugin="refgrad", render=Program.listing)
