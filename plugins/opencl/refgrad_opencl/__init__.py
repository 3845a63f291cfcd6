"""refgrad-opencl: the OPENCL device (alias GPU). Programs are GPU-shaped by the core (refgrad/codegen/gpu.py),
rendered to OpenCL C by the core's C-style renderer with an OpenCL dialect, built and launched with pyopencl.

Without a GPU it runs on PoCL, the portable CPU implementation of OpenCL. The probe says why OPENCL cannot run
here when it cannot: no pyopencl, no ICD loader, no platform, no device. It never raises.
"""
from __future__ import annotations

import functools
from typing import Any

from refgrad.backend_helpers import distribution_version
from refgrad.codegen.cstyle import CStyleRenderer
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec

# A kernel PoCL built from source in this process holds about 3.4 MB while loaded (measured: 500 new kernels took a
# process from 111 to 544 MB with 128 kept); 64 still holds a whole training step of bench/train.py (46 kernels).
RUNNER_CACHE = 64


@functools.cache
def find_device() -> tuple[Any, str | None]:
  """(the pyopencl Device to use, None) or (None, why there is none): the first GPU, else the first device."""
  try:  # every failure below is a reason, never an exception: it runs while `import refgrad` does
    import pyopencl as cl
  except Exception as e:
    missing = "no OpenCL ICD loader (libOpenCL)" if "libOpenCL" in str(e) else "pyopencl is not installed"
    return None, f"{missing}: {e}"
  try:
    platforms = cl.get_platforms()
  except Exception as e:
    return None, f"no OpenCL platform (is an ICD such as pocl-opencl-icd installed?): {e}"
  devices = []
  for platform in platforms:
    try:
      devices += platform.get_devices()
    except Exception:  # a platform without devices reports DEVICE_NOT_FOUND
      continue
  if not devices:
    names = ", ".join(p.name for p in platforms) or "none"
    return None, f"no OpenCL device on the platforms found ({names})"
  gpus = [d for d in devices if d.type & cl.device_type.GPU]
  return (gpus or devices)[0], None


def probe() -> str | None:
  return find_device()[1]


def description() -> str:
  """The plugin version, and the platform and device OPENCL runs on."""
  device, _ = find_device()
  if device is None:
    return distribution_version("refgrad-opencl")
  from refgrad_opencl.runtime import describe
  return f"{distribution_version('refgrad-opencl')} ({describe(device)})"


def make_device() -> DeviceImpl:
  import pyopencl as cl

  from refgrad_opencl.dialect import DeviceLimits, opencl_dialect
  from refgrad_opencl.runtime import CLAllocator, CLCompiler, CLRuntime
  from refgrad_opencl.standalone import opencl_reproducer
  device, _ = find_device()
  context = cl.Context([device])
  queue = cl.CommandQueue(context, device)
  limits = DeviceLimits.of(device)
  return DeviceImpl("OPENCL", CLAllocator(context, queue), renderer=CStyleRenderer(opencl_dialect(limits)),
                    compiler=CLCompiler(context, device), runtime=CLRuntime(context, queue, device, limits),
                    runner_cache=RUNNER_CACHE, standalone=opencl_reproducer)


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("OPENCL", make_device, plugin="refgrad-opencl", version=description, probe=probe)]


@hookimpl
def refgrad_aliases() -> dict[str, str]:
  return {"GPU": "OPENCL"}
