"""The device layer: a registry of devices, buffers that live on them, and `Device.DEFAULT`.

A device is an allocator plus a way to turn a linear `Program` into something runnable. Devices are registered
by name; a device that cannot run on this machine is still listed, with the reason. The plugin issue makes
registration go through pluggy; `register_device` is the one entry point both paths use.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from refgrad.dtype import DType


class Allocator(Protocol):
  """Raw memory of one device. Handles are opaque to the core."""
  def alloc(self, nbytes: int) -> Any: ...
  def free(self, handle: Any) -> None: ...
  def copyin(self, handle: Any, src: memoryview) -> None: ...
  def copyout(self, dest: memoryview, handle: Any) -> None: ...


class Runner(Protocol):
  """A compiled kernel: call it with one buffer handle per program parameter (output first)."""
  def __call__(self, *handles: Any) -> None: ...


@dataclass
class DeviceImpl:
  """What a device provides: memory, and a compiler from linear programs to runners."""
  name: str
  allocator: Allocator
  compile_program: Callable[[Any], Runner]
  plugin: str = "refgrad"
  version: str = ""
  render: Callable[[Any], str] | None = None  # source text of a program, for error messages and reports
  _runner_cache: dict[Any, Runner] = field(default_factory=dict)

  def get_runner(self, program: Any) -> Runner:
    """Compile a program once per device; programs are keyed by their (hash-consed) kernel graph."""
    runner = self._runner_cache.get(program.key)
    if runner is None:
      runner = self._runner_cache[program.key] = self.compile_program(program)
    return runner


@dataclass
class DeviceEntry:
  name: str
  factory: Callable[[], DeviceImpl]
  plugin: str
  unavailable_reason: str | None = None
  instance: DeviceImpl | None = None


class DeviceRegistry:
  """`Device[name]` gives a device; `Device.DEFAULT` is the default one (env REFGRAD_DEVICE, else PYTHON)."""

  def __init__(self):
    self._entries: dict[str, DeviceEntry] = {}
    self._default: str | None = None

  def register(self, name: str, factory: Callable[[], DeviceImpl], plugin: str = "refgrad",
               unavailable_reason: str | None = None) -> None:
    self._entries[name.upper()] = DeviceEntry(name.upper(), factory, plugin, unavailable_reason)

  def canonicalize(self, name: str | None) -> str:
    """'clang:1' -> 'CLANG:1'; None -> the default device. Unknown names raise ValueError listing the known."""
    if name is None:
      return self.DEFAULT
    if not isinstance(name, str):
      raise TypeError(f"device must be a string like 'PYTHON' or 'CLANG:1', got {type(name).__name__}")
    base, _, index = name.upper().partition(":")
    if base not in self._entries:
      raise ValueError(f"unknown device {name!r}; known devices: {', '.join(sorted(self._entries))}")
    if index and not index.isdigit():
      raise ValueError(f"bad device index in {name!r}: expected a number after ':'")
    return base if not index or index == "0" else f"{base}:{index}"

  def __getitem__(self, name: str) -> DeviceImpl:
    base = self.canonicalize(name).partition(":")[0]
    entry = self._entries[base]
    if entry.unavailable_reason is not None:
      raise RuntimeError(f"device {base} is unavailable: {entry.unavailable_reason}")
    if entry.instance is None:
      entry.instance = entry.factory()
    return entry.instance

  @property
  def DEFAULT(self) -> str:  # noqa: N802 -- tinygrad's name
    if self._default is None:
      self._default = self.canonicalize(os.environ.get("REFGRAD_DEVICE", "PYTHON"))
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:  # noqa: N802
    self._default = self.canonicalize(name)

  def entries(self) -> list[DeviceEntry]:
    return list(self._entries.values())

  def available(self) -> list[str]:
    return [e.name for e in self._entries.values() if e.unavailable_reason is None]


Device = DeviceRegistry()


class Buffer:
  """`size` elements of `dtype` on a device, allocated on first use."""

  def __init__(self, device: str, size: int, dtype: DType):
    self.device, self.size, self.dtype = device, size, dtype
    self._handle: Any = None
    self.undefined: np.ndarray | None = None  # PYTHON only: lanes whose value the spec leaves undefined

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  @property
  def handle(self) -> Any:
    if self._handle is None:
      self._handle = Device[self.device].allocator.alloc(self.nbytes)
    return self._handle

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

  def __del__(self):
    if self._handle is not None:
      try:
        Device[self.device].allocator.free(self._handle)
      except Exception:  # interpreter shutdown: the registry may already be gone
        pass

  def __repr__(self) -> str:
    return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"
