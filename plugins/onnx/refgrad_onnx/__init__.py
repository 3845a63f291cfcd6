"""refgrad-onnx: the graph devices ORT and ORT_BASIC, refgrad's tensor-level graph exported to an ONNX model
(export.py: one rule per primitive op, with docs/SPEC.md's dtype semantics) and run whole by onnxruntime on the CPU,
with all of its graph optimizations (ORT) or none (ORT_BASIC). A graph ONNX Runtime cannot compute as SPEC.md says
raises UnsupportedOpError naming the op, its dtype and why.

onnx and onnxruntime are imported when a device is first made, not when refgrad loads this plugin: `import refgrad`
stays fast, and a machine without them lists the devices as unavailable with the reason.
"""
from __future__ import annotations

import importlib.util

from refgrad.backend_helpers import distribution_version
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec

DEVICES = ("ORT", "ORT_BASIC")


def probe() -> str | None:
  missing = [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
  return None if not missing else f"{' and '.join(missing)} not installed (pip install onnx onnxruntime; " \
    "refgrad-onnx is written against onnx 1.23 and onnxruntime 1.32, CPU)"


def _maker(name: str):
  def make_device() -> DeviceImpl:
    from refgrad.backend_helpers import HostAllocator
    from refgrad_onnx.device import OrtGraphCompiler
    return DeviceImpl(name, HostAllocator(), graph=OrtGraphCompiler(name))
  return make_device


def version() -> str:
  import onnx
  import onnxruntime
  return f"{distribution_version('refgrad-onnx')} (onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, CPU)"


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(name, _maker(name), plugin="refgrad-onnx", version=version, probe=probe, kind="graph")
          for name in DEVICES]
