"""refgrad-torch: the graph devices TORCH (torch's eager CPU kernels) and INDUCTOR (torch.compile, Inductor's C++ code
on the CPU), on an exporter from refgrad's tensor-level graph to torch ops (export.py: one rule per primitive op, with
docs/SPEC.md's dtype semantics). A graph torch cannot compute as SPEC.md says raises UnsupportedOpError naming the op,
its dtype and why.

torch is imported when a device is first made, not when refgrad loads this plugin: `import refgrad` stays fast, and a
machine without torch lists the devices as unavailable with the reason.
"""
from __future__ import annotations

import importlib.util

from refgrad.backend_helpers import distribution_version
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec

# device -> (compiled by torch.compile, torch.compile's options)
CONFIGS: dict[str, tuple[bool, dict[str, str]]] = {
  "TORCH": (False, {}),
  "INDUCTOR": (True, {}),
}


def torch_reason() -> str | None:
  return None if importlib.util.find_spec("torch") is not None else \
    "torch is not installed (pip install torch; refgrad-torch is written against torch 2.13 CPU)"


def probe(name: str) -> str | None:
  if (reason := torch_reason()) is not None:
    return reason
  if CONFIGS[name][0]:
    from refgrad_torch.device import cpp_compiler_reason
    return cpp_compiler_reason()
  return None


def make_device(name: str) -> DeviceImpl:
  from refgrad.backend_helpers import HostAllocator
  from refgrad_torch.device import TorchGraphCompiler
  compiled, options = CONFIGS[name]
  return DeviceImpl(name, HostAllocator(), graph=TorchGraphCompiler(compiled, **options))


def version() -> str:
  import torch
  return f"{distribution_version('refgrad-torch')} (torch {torch.__version__})"


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(name, lambda name=name: make_device(name), plugin="refgrad-torch", version=version,
                     probe=lambda name=name: probe(name), kind="graph") for name in CONFIGS]
