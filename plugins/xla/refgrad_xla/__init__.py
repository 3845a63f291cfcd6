"""refgrad-xla: the graph device XLA, refgrad's tensor-level graph exported to jax/XLA ops (export.py: one rule per
primitive op, with docs/SPEC.md's dtype semantics) and compiled whole by jax.jit on the CPU, with 64-bit types on. A
graph XLA cannot compute as SPEC.md says raises UnsupportedOpError naming the op, its dtype and why.

jax is imported when the device is first made, not when refgrad loads this plugin: `import refgrad` stays fast, and
a machine without jax lists the device as unavailable with the reason.
"""
from __future__ import annotations

import importlib.util

from refgrad.backend_helpers import distribution_version
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec


def probe() -> str | None:
  missing = [name for name in ("jax", "jaxlib") if importlib.util.find_spec(name) is None]
  return None if not missing else \
    f"{' and '.join(missing)} not installed (pip install jax jaxlib; refgrad-xla is written against jax 0.10 CPU)"


def make_device() -> DeviceImpl:
  from refgrad_xla.flags import set_xla_flags
  set_xla_flags()  # before anything starts jax's backend
  from refgrad.backend_helpers import HostAllocator
  from refgrad_xla.device import XlaGraphCompiler
  return DeviceImpl("XLA", HostAllocator(), graph=XlaGraphCompiler())


def version() -> str:
  import jax
  import jaxlib
  return f"{distribution_version('refgrad-xla')} (jax {jax.__version__}, jaxlib {jaxlib.__version__}, CPU)"


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("XLA", make_device, plugin="refgrad-xla", version=version, probe=probe, kind="graph")]
