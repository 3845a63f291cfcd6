"""A buffer: `size` elements of a dtype in one device's memory, allocated on first use."""
from __future__ import annotations

from typing import Any

import numpy as np

from refgrad.dtype import DType
from refgrad.registry import Device
from refgrad.safe_pickle import UnsafePickleError


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


class PickledValueError(UnsafePickleError):
  """A pickled Buffer, Tensor or TinyJit whose parts do not agree (a corrupt or crafted pickle): refused when it is
  unpickled, since a kernel trusts a buffer's size and would read or write past the end of a shorter one. A
  ValueError and an UnpicklingError, as every refusal of refgrad.safe_pickle."""


def check_pickled_buffer(size: Any, dtype: Any, data: Any, undefined: Any = None) -> None:
  """Refuse a pickled buffer's size, dtype, contents (None: never allocated) or undefined-lane mask unless they
  agree: a size of non-negative int, a DType, bytes of exactly size * itemsize, a bool mask of one lane each."""
  if type(size) is not int or size < 0 or not isinstance(dtype, DType):
    raise PickledValueError(f"unpickling a Buffer: size {size!r} and dtype {dtype!r} are not a non-negative int "
                            f"and a DType")
  if data is not None and (not isinstance(data, bytes) or len(data) != size * dtype.itemsize):
    got = f"{len(data)} bytes" if isinstance(data, bytes) else type(data).__name__
    raise PickledValueError(f"unpickling a Buffer of {size} {dtype.name}: its contents are {got}, not "
                            f"{size * dtype.itemsize} bytes")
  if undefined is not None and not (isinstance(undefined, np.ndarray) and undefined.dtype == np.bool_ and
                                    undefined.shape == (size,)):
    raise PickledValueError(f"unpickling a Buffer of {size} {dtype.name}: its undefined lanes are not a bool mask "
                            f"of shape ({size},)")


def _restore_buffer(device: str, size: int, dtype: DType, data: bytes | None, undefined: np.ndarray | None) -> Buffer:
  check_pickled_buffer(size, dtype, data, undefined)
  buf = Buffer(device, size, dtype)
  if data is not None:
    buf.copyin(np.frombuffer(data, dtype=dtype.np)).keep_undefined(undefined)
  return buf
