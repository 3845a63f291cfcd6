"""Helpers a backend plugin may use: host memory for CPU kernels, a shared pool of CPU threads for threaded kernels,
source listings for compile errors, and the version of the plugin's distribution."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import PackageNotFoundError, version

import numpy as np


class HostMemory(np.ndarray):
  """A numpy byte array that knows its own address (`address`, what `ctypes.data` gives): a kernel launch reads
  it for every buffer, and numpy's `ctypes.data` builds an object each time (a few microseconds). The data of an
  array never moves, so the address stays right as long as the array lives."""
  address: int


class HostAllocator:
  """Buffers in host memory as numpy byte arrays (HostMemory), for CPU backends whose kernels take raw addresses
  (`handle.address`). Shared by CLANG and LLVM; third-party CPU backends can use it too. A freed array is kept for
  the next buffer of its size (up to POOL_BYTES in all) and zeroed when handed out, as a new one would be: a training
  step frees and allocates the same sizes every step, and a new array costs more (numpy's zeros, the view, its
  address: about 20 us) and page faults where a kernel first writes it."""
  POOL_BYTES = 32 << 20

  def __init__(self):
    self._pool: dict[int, list[HostMemory]] = {}
    self._pooled = 0
    self._lock = threading.Lock()  # a Buffer may be freed in any thread

  def alloc(self, nbytes: int) -> HostMemory:
    nbytes, memory = max(nbytes, 1), None
    with self._lock:
      if same_size := self._pool.get(nbytes):
        self._pooled -= nbytes
        memory = same_size.pop()
    if memory is not None:
      memory.fill(0)
      return memory
    memory = np.zeros(nbytes, dtype=np.uint8).view(HostMemory)
    memory.address = memory.ctypes.data
    return memory

  def free(self, handle: HostMemory) -> None:
    with self._lock:
      if self._pooled + handle.nbytes <= self.POOL_BYTES:
        self._pool.setdefault(handle.nbytes, []).append(handle)
        self._pooled += handle.nbytes

  def copyin(self, handle: np.ndarray, src: memoryview) -> None:
    handle[:len(src)] = np.frombuffer(src, dtype=np.uint8)

  def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = handle[:len(dest)]


_thread_pool: ThreadPoolExecutor | None = None


def run_ranges(launch: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
  """launch(start, end) for every range at once: the first in this thread, the others on a pool of CPU threads shared
  by every CPU device (a ctypes call releases the GIL, so the ranges really run in parallel; running one here saves
  a thread hand-off per launch and keeps this thread working rather than waiting). Every range has ended when this
  returns; the first error raised by any range is raised here."""
  global _thread_pool
  if not ranges:
    return
  if _thread_pool is None and len(ranges) > 1:
    _thread_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="refgrad-kernel")
  others = [_thread_pool.submit(launch, start, end) for start, end in ranges[1:]]
  errors: list[BaseException] = []
  try:
    launch(*ranges[0])
  except Exception as error:  # the other ranges still write the buffers: wait for them before raising
    errors.append(error)
  for future in others:
    if (error := future.exception()) is not None:
      errors.append(error)
  if errors:
    raise errors[0]


def numbered_source(source: str) -> str:
  """Source text with line numbers, as a backend's compile error shows it (the compiler's messages cite lines)."""
  return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


def distribution_version(distribution: str, fallback: str = "0.1.0") -> str:
  """The installed version of a plugin's distribution (for DeviceSpec.version), or `fallback` when it runs from a
  source tree without being installed."""
  try:
    return version(distribution)
  except PackageNotFoundError:
    return fallback
