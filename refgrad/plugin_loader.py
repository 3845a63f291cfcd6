"""Plugin discovery with pluggy: entry points in the group `refgrad`, in-process registration, and plugin files
(`--plugin FILE`: a backend that is not installed)."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pluggy

from refgrad import hookspecs
from refgrad.device import DeviceImpl
from refgrad.registry import Device, DeviceSpec

manager = pluggy.PluginManager("refgrad")
manager.add_hookspecs(hookspecs)


def _broken_plugin_spec(name: str, error: BaseException) -> DeviceSpec:
  def fail() -> DeviceImpl:
    raise RuntimeError(f"plugin {name} failed to load")
  return DeviceSpec(name.upper(), fail, plugin=name, probe=lambda: f"plugin failed to load: {type(error).__name__}: "
                                                                  f"{error}")


def _hook_of(plugin: Any, hook: str) -> Any:
  """Call one hook on one plugin only (pluggy's subset caller), so registering is incremental."""
  others = [p for p in manager.get_plugins() if p is not plugin]
  return manager.subset_hook_caller(hook, remove_plugins=others)()


def register(plugin: Any, name: str | None = None) -> list[str]:
  """Register a plugin object or module in-process; returns the names of the devices it added."""
  manager.register(plugin, name=name)
  added = []
  for specs in _hook_of(plugin, "refgrad_devices"):
    for spec in specs:
      Device.add(spec)
      added.append(spec.name.upper())
  for aliases in _hook_of(plugin, "refgrad_aliases"):
    for alias, target in aliases.items():
      Device.alias(alias, target)
  return added


def unregister(plugin: Any) -> None:
  """Remove an in-process plugin and its devices (tests use this to clean up)."""
  for specs in _hook_of(plugin, "refgrad_devices"):
    for spec in specs:
      Device.remove(spec.name)
  manager.unregister(plugin)


def _still_importing(module: Any) -> bool:
  """True while a module's own code is still running: `import my_plugin` before `import refgrad` gets here from
  the plugin's `from refgrad... import`, when its hooks are not defined yet."""
  return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _load(ep: Any) -> None:
  try:
    plugin = ep.load()
  except Exception as e:  # never let a broken plugin break `import refgrad`
    Device.add(_broken_plugin_spec(ep.name, e))
    return
  if _still_importing(plugin):
    Device.add_later(lambda: _load(ep))  # at the next device lookup, once the module has finished
    return
  if manager.is_registered(plugin):
    return
  try:
    register(plugin, name=ep.name)
  except Exception as e:  # a hook that raises is as broken as an import that fails
    if manager.is_registered(plugin):
      manager.unregister(plugin)
    Device.add(_broken_plugin_spec(ep.name, e))


def load_entry_points() -> None:
  """Import every installed plugin; one that fails to import is listed as an unavailable device. Registration does
  not depend on import order: a plugin imported first (whose module is half-done when it imports refgrad) is
  registered at the first device lookup after its import completes."""
  for ep in entry_points(group="refgrad"):
    _load(ep)


class PluginFileError(Exception):
  """A plugin file that could not be loaded; the message names the file and what stopped it."""


def why_not_loaded(path: str, error: BaseException) -> str:
  """'FILE: what stopped it (line N)', the line in the plugin file (refgrad's loader is not what failed)."""
  if isinstance(error, SystemExit):
    return f"{path}: it called sys.exit({error.code!r}) while being imported"
  if isinstance(error, SyntaxError):
    return f"{path}: SyntaxError: {error.msg} (line {error.lineno})"
  resolved = Path(path).resolve()
  lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename) == resolved]
  return f"{path}: {type(error).__name__}: {error}" + (f" (line {lines[-1]})" if lines else "")


def load_plugin_file(path: str) -> Any:
  """Import a plugin from a .py file and register it, once per file. What stops it (no such file, a syntax error, an
  exception at import, a hook that raises) is a PluginFileError naming the file; a sys.exit() is left to end the
  process with its status (a fuzz worker's parent reports it), and the command line reports it (why_not_loaded)."""
  resolved = Path(path).resolve()
  name = f"refgrad_plugin_file_{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"
  if (loaded := manager.get_plugin(name)) is not None:
    return loaded
  if not resolved.is_file():
    raise PluginFileError(f"{path}: no such file")
  spec = importlib.util.spec_from_file_location(name, resolved)
  if spec is None:
    raise PluginFileError(f"{path}: not a Python file (.py)")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # as an import would: dataclasses and pickling look modules up there
  try:
    spec.loader.exec_module(module)
    register(module, name=name)
  except BaseException as e:
    sys.modules.pop(name, None)
    if manager.is_registered(module):
      manager.unregister(module)
    if isinstance(e, Exception):
      raise PluginFileError(why_not_loaded(path, e)) from e
    raise
  return module
