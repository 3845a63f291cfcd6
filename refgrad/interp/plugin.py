"""Registers the PYTHON device through the same plugin contract as every other backend."""
from __future__ import annotations

from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec
from refgrad.version import __version__


def make_python_device() -> DeviceImpl:
  from refgrad.interp.device import PythonAllocator
  from refgrad.interp.kernel import PythonKernel
  return DeviceImpl("PYTHON", PythonAllocator(), interpret=PythonKernel)


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("PYTHON", make_python_device, plugin="refgrad", version=__version__)]
