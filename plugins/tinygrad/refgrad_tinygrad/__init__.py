"""refgrad-tinygrad: three graph devices on tinygrad 0.14, refgrad's tensor-level graph built from tinygrad's own
primitive ops (export.py: one rule per op, with docs/SPEC.md's dtype semantics) and realized by tinygrad:

* TINYGRAD_CPU: tinygrad's CPU device with its C renderer (ClangRenderer), compiled by clang;
* TINYGRAD_LLVM: the same CPU device with its LLVM IR renderer (CPULLVMRenderer), compiled in-process by libLLVM;
* TINYGRAD_PYTHON: tinygrad's PYTHON device, which emulates its kernels' UOps in Python.

tinygrad is imported when a device is first made, not when refgrad loads this plugin: `import refgrad` stays fast,
and a machine without tinygrad (or without clang, or a recent enough libLLVM) lists the devices as unavailable with
the reason.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version

from refgrad.backend_helpers import distribution_version
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec
from refgrad_tinygrad.targets import TARGETS, TINYGRAD_VERSION

# tinygrad's IR for LLVM spells pointers as `float*` and loads vectors through them, which only LLVM's opaque
# pointers accept: libLLVM 15 rejects its kernels ("'%v0' defined with type 'float*' but expected '<4 x float>*'")
# and 19 runs them; LLVM 17 made opaque pointers the only kind
MIN_LLVM = 17


def tinygrad_reason() -> str | None:
  if importlib.util.find_spec("tinygrad") is None:
    return f"tinygrad is not installed (pip install tinygrad=={TINYGRAD_VERSION})"
  try:
    found = installed_version("tinygrad")
  except PackageNotFoundError:
    return None  # a source checkout on the path: trust it
  return None if found == TINYGRAD_VERSION else \
    f"tinygrad {found} is installed; refgrad-tinygrad is written against tinygrad {TINYGRAD_VERSION}"


def clang_reason() -> str | None:
  """tinygrad's CPU device compiles its C with `clang` (or $CC)."""
  compiler = os.environ.get("CC", "clang")
  return None if shutil.which(compiler) else f"tinygrad's C renderer compiles with {compiler!r}, which is not on PATH"


def llvm_reason() -> str | None:
  """The libLLVM tinygrad loads (its own search: LLVM, LLVM-21 ... LLVM-14), and whether it is recent enough."""
  import ctypes

  from tinygrad.runtime.autogen import llvm
  if "llvm" not in type(llvm.dll)._loaded_:
    return f"tinygrad found no libLLVM ({llvm.dll.emsg}); install libllvm{MIN_LLVM} or newer"
  major, minor, patch = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
  try:
    llvm.LLVMGetVersion(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
  except (AttributeError, OSError):  # LLVMGetVersion came with LLVM 16
    return f"tinygrad loaded a libLLVM older than 16; its IR needs LLVM {MIN_LLVM} or newer (opaque pointers)"
  return None if major.value >= MIN_LLVM else \
    f"tinygrad loaded libLLVM {major.value}.{minor.value}; its IR needs LLVM {MIN_LLVM} or newer (opaque pointers)"


PROBES = {"TINYGRAD_CPU": clang_reason, "TINYGRAD_LLVM": llvm_reason, "TINYGRAD_PYTHON": lambda: None}


def probe(name: str) -> str | None:
  return tinygrad_reason() or PROBES[name]()


def make_device(name: str) -> DeviceImpl:
  from refgrad.backend_helpers import HostAllocator
  from refgrad_tinygrad.device import TinygradGraphCompiler
  return DeviceImpl(name, HostAllocator(), graph=TinygradGraphCompiler(TARGETS[name]))


def version(name: str) -> str:
  return f"{distribution_version('refgrad-tinygrad')} (tinygrad {installed_version('tinygrad')}, " \
         f"{TARGETS[name].describe()})"


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(name, lambda name=name: make_device(name), plugin="refgrad-tinygrad",
                     version=lambda name=name: version(name), probe=lambda name=name: probe(name), kind="graph")
          for name in TARGETS]
