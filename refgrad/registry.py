"""The registry of devices: `Device[name]` gives a working device, `Device.DEFAULT` the default one.

Devices come from plugins (refgrad/hookspecs.py, refgrad/plugin_loader.py) as `DeviceSpec`s; a device that cannot run
here is still listed, with the reason, and selecting it raises that reason.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from refgrad.device import DeviceImpl


class UnknownDeviceError(ValueError, RuntimeError):
  """A device name no plugin registers: torch's RuntimeError, and the ValueError refgrad raised before."""


class DeviceSpec:
  """How a plugin describes a device: `make()` builds an instance; `probe()` says why it cannot run here (None: it
  can); `version` is a string, or a function giving one (a description may need the driver, e.g. the OpenCL
  platform's name); `kind` is "kernel" or "graph" (a graph device: refgrad/graph_device.py), so a listing can say
  which without making the device. Probe and version run once, the first time anyone asks (listing devices,
  selecting one), never at `import refgrad`: they may be slow (OpenCL enumerates its platforms, LLVM imports
  llvmlite)."""

  def __init__(self, name: str, make: Callable[[], DeviceImpl], plugin: str = "refgrad",
               version: str | Callable[[], str] = "", probe: Callable[[], str | None] = lambda: None,
               kind: str = "kernel"):
    if kind not in ("kernel", "graph"):
      raise ValueError(f"device {name}: kind must be 'kernel' (it runs refgrad's kernels) or 'graph' (it computes "
                       f"whole graphs), got {kind!r}")
    self.name, self.make, self.plugin, self.probe, self.kind = name, make, plugin, probe, kind
    self.instances: dict[str, DeviceImpl] = {}  # "CLANG", "CLANG:1", ...: one each
    self._version = version
    self._reason: str | None = None
    self._probed = False

  @property
  def version(self) -> str:
    if callable(self._version):
      try:
        self._version = self._version()
      except Exception as e:  # a description that fails must not hide the device
        self._version = f"(version unknown: {type(e).__name__}: {e})"
    return self._version

  @property
  def unavailable_reason(self) -> str | None:
    """Why the device cannot run here, or None; probes on first use."""
    if not self._probed:
      try:
        self._reason = self.probe()
      except Exception as e:  # a crashing probe makes the device unavailable, with the reason
        self._reason = f"probe failed: {type(e).__name__}: {e}"
      self._probed = True
    return self._reason

  def __repr__(self) -> str:
    return f"DeviceSpec({self.name!r}, plugin={self.plugin!r})"


class DeviceRegistry:
  """`Device[name]` gives a device; `Device.DEFAULT` is the default one (env REFGRAD_DEVICE, else PYTHON)."""

  def __init__(self):
    self._specs: dict[str, DeviceSpec] = {}
    self._aliases: dict[str, str] = {}
    self._default: str | None = None
    self._late: list[Callable[[], None]] = []
    self._found: dict[str, DeviceImpl] = {}  # name as given -> instance: every kernel launch looks its device up

  def add_later(self, register: Callable[[], None]) -> None:
    """Call `register` at the next lookup of a device: a plugin imported before refgrad is still being imported
    when refgrad loads the entry points, and can register its devices only once its import has finished."""
    self._late.append(register)

  def _lookup(self) -> dict[str, DeviceSpec]:
    late, self._late = self._late, []
    for register in late:
      register()
    return self._specs

  def add(self, spec: DeviceSpec) -> None:
    """Register a device (probed later, on first use). A name another plugin already registered is refused:
    silently replacing a device would run one backend's kernels under another's name."""
    name = spec.name.upper()
    existing = self._specs.get(name)
    if existing is not None and existing.plugin != spec.plugin:
      raise ValueError(f"device {name} is already registered by plugin {existing.plugin!r}; plugin {spec.plugin!r} "
                       f"cannot register it again (remove one of the two, or give the device another name)")
    self._specs[name] = spec
    self._found.clear()

  def register(self, name: str, factory: Callable[[], DeviceImpl], plugin: str = "refgrad",
               unavailable_reason: str | None = None) -> None:
    """Shortcut for tests: register a device by name and factory."""
    self.add(DeviceSpec(name.upper(), factory, plugin, probe=lambda: unavailable_reason))

  def remove(self, name: str) -> None:
    self._specs.pop(name.upper(), None)
    self._aliases = {a: n for a, n in self._aliases.items() if n != name.upper()}
    self._found.clear()

  def alias(self, alias: str, name: str) -> None:
    self._aliases[alias.upper()] = name.upper()
    self._found.clear()

  def canonicalize(self, name: str | tuple[str, ...] | None) -> str | tuple[str, ...]:
    """'clang:1' -> 'CLANG:1'; None -> the default device; a tuple or list of names (a tensor over several devices)
    -> a tuple of canonical names, each once. Unknown names raise ValueError listing the known."""
    if name is None:
      return self.DEFAULT
    if isinstance(name, (tuple, list)):
      names = tuple(self.canonicalize(n) for n in name)
      if not names or any(isinstance(n, tuple) for n in names) or len(set(names)) != len(names):
        raise ValueError(f"a tensor over several devices needs distinct device names, got {tuple(name)!r}")
      return names
    if not isinstance(name, str):
      raise TypeError(f"device must be a string like 'PYTHON' or 'CLANG:1', got {type(name).__name__}")
    base, _, index = name.upper().partition(":")
    base = self._aliases.get(base, base)
    if base not in self._lookup():
      raise UnknownDeviceError(f"unknown device {name!r}; known devices: {', '.join(sorted(self._specs))}")
    if index and not index.isdigit():
      raise ValueError(f"bad device index in {name!r}: expected a number after ':'")
    return base if not index or index == "0" else f"{base}:{index}"

  def __getitem__(self, name: str) -> DeviceImpl:
    """The device instance: "CLANG" and "CLANG:0" are one, "CLANG:1" another with its own buffers and caches."""
    if type(name) is str and (found := self._found.get(name)) is not None:
      return found
    full = self.canonicalize(name)
    base = full.partition(":")[0]
    spec = self._specs[base]
    if spec.unavailable_reason is not None:
      raise RuntimeError(f"device {base} is unavailable: {spec.unavailable_reason}")
    if full not in spec.instances:
      spec.instances[full] = spec.make()
    if type(name) is str:
      self._found[name] = spec.instances[full]
    return spec.instances[full]

  @property
  def DEFAULT(self) -> str:  # noqa: N802 -- tinygrad's name
    if self._default is None:
      self._default = self.canonicalize(os.environ.get("REFGRAD_DEVICE", "PYTHON"))
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:  # noqa: N802
    self._default = self.canonicalize(name)

  def specs(self) -> list[DeviceSpec]:
    return list(self._lookup().values())

  def available(self, kind: str | None = None) -> list[str]:
    """The devices that can run here; with `kind` ("kernel" or "graph"), only those of that kind."""
    return [s.name for s in self._lookup().values() if s.unavailable_reason is None and kind in (None, s.kind)]


Device = DeviceRegistry()
