"""A buffer: `size` elements of a dtype in one device's memory, allocated on first use."""
from __future__ import annotations

from typing import Any

import numpy as np

from refgrad.dtype import DType
from refgrad.registry import Device


class Buffer:
  """`size` elements of `dtype` on a device, allocated on first use."""

  def __init__(self, device: str, size: int, dtype: DType):
    self.device, self.size, self.dtype = device, size, dtype
    self._handle: Any = None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  @property
  def handle(self) -> Any:
    if self._handle is None:
      self._handle = Device[self.device].allocator.alloc(self.nbytes)
    return self._handle

  @property
  def undefined(self) -> np.ndarray | None:
    """PYTHON only: the lanes whose value the spec leaves undefined (None: all defined)."""
    return getattr(self._handle, "undefined", None)

  def keep_undefined(self, mask: np.ndarray | None) -> None:
    """Give copied or all-reduced data the undefined lanes of its sources, on a device that tracks them (PYTHON's
    buffers do): a lane undefined on one device stays undefined on the next."""
    if hasattr(self.handle, "undefined"):
      self.handle.undefined = mask.copy() if mask is not None and mask.any() else None

  def copyin(self, data: np.ndarray) -> Buffer:
    flat = np.ascontiguousarray(data, dtype=self.dtype.np).reshape(-1)
    if flat.size != self.size:
      raise ValueError(f"copyin of {flat.size} elements into a buffer of {self.size}")
    Device[self.device].allocator.copyin(self.handle, memoryview(flat.view(np.uint8)))
    return self

  def numpy(self) -> np.ndarray:
    out = np.empty(self.size, dtype=self.dtype.np)
    if self.size:
      Device[self.device].allocator.copyout(memoryview(out.view(np.uint8)), self.handle)
    return out

  def __reduce__(self) -> tuple:
    """Pickled with its contents (none if it was never allocated) and, on PYTHON, its undefined lanes: a pickled
    TinyJit carries the buffers its launches use."""
    data = None if self._handle is None else self.numpy().tobytes()
    return _restore_buffer, (self.device, self.size, self.dtype, data, self.undefined)

  def __del__(self):
    if self._handle is not None:
      try:
        Device[self.device].allocator.free(self._handle)
      except Exception:  # interpreter shutdown: the registry may already be gone
        pass

  def __repr__(self) -> str:
    return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"


def _restore_buffer(device: str, size: int, dtype: DType, data: bytes | None, undefined: np.ndarray | None) -> Buffer:
  buf = Buffer(device, size, dtype)
  if data is not None:
    buf.copyin(np.frombuffer(data, dtype=dtype.np)).keep_undefined(undefined)
  return buf
