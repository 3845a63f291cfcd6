"""Which tinygrad device and renderer each refgrad device drives, as plain data (no tinygrad import).

tinygrad 0.14 picks a device's renderer from its DEV setting (tinygrad/helpers.py `_DEV.target`, read by
`Compiled._select_renderer` in tinygrad/device.py each time a kernel is lowered): `DEV=CPU:CLANG` is the CPU device
with ClangRenderer, `DEV=CPU:LLVM` the same device with CPULLVMRenderer (a renderer's name is its class name without
"Renderer" and the device's prefix). There is no LLVM device and no tinygrad.runtime.ops_llvm in 0.14, and the old
`CPU_LLVM=1` / `CPU_CC=LLVM` variables are refused by an assertion. The device strings are "CPU" and "PYTHON".
"""
from __future__ import annotations

from dataclasses import dataclass

TINYGRAD_VERSION = "0.14.0"


@dataclass(frozen=True)
class Target:
  device: str  # tinygrad's device string
  dev: str  # tinygrad's DEV setting while a graph is built and realized: the device and its renderer
  fdiv: bool  # whether the device's renderer computes Ops.FDIV (PYTHON's emulator has no FDIV)
  what: str

  def describe(self) -> str:
    return f"DEV={self.dev}: {self.what}"


TARGETS = {
  "TINYGRAD_CPU": Target("CPU", "CPU:CLANG", True, "C by ClangRenderer, compiled by clang"),
  "TINYGRAD_LLVM": Target("CPU", "CPU:LLVM", True, "LLVM IR by CPULLVMRenderer, compiled by libLLVM"),
  "TINYGRAD_PYTHON": Target("PYTHON", "PYTHON", False, "tinygrad's Python emulator of its UOps"),
}
