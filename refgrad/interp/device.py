"""The PYTHON device's memory: numpy byte arrays, with the undefined-lane mask the interpreter writes."""
from __future__ import annotations

import numpy as np

from refgrad.interp.kernel import PyBuffer


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
