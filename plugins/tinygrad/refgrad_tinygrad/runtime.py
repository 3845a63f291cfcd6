"""Running a graph's tinygrad program on a target: inputs in, the settings tinygrad needs around it, outputs out.

The settings are tinygrad ContextVars, set with tinygrad's `Context` around building and realizing a graph and put
back afterwards, so nothing leaks into the rest of the process (README.md, "tinygrad's settings"):

* `DEV`: the device and its renderer (targets.py), since tinygrad picks the renderer from it when it lowers a kernel;
* `PARALLEL=0`: tinygrad compiles the graph's kernels in this process, not in a pool of worker processes it would
  otherwise start and keep for the rest of the process.

tinygrad's other settings (DEBUG, its caches) are the user's. A lock keeps two threads from realizing at once:
tinygrad's Context and caches belong to the whole process.
"""
from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from tinygrad import Tensor
from tinygrad import dtypes as tg
from tinygrad.helpers import Context

from refgrad.dtype import ALL_DTYPES, DType, dtypes
from refgrad_tinygrad.casts import tg_dtype
from refgrad_tinygrad.targets import TARGETS, Target

_LOCK = threading.Lock()


class Scalars:
  """Makes the CONSTs of a graph: tinygrad constants on the target's device."""

  def __init__(self, device: str):
    self.device = device

  def scalar(self, value: Any, dtype: Any) -> Tensor:
    return Tensor(value, dtype=dtype, device=self.device)


@contextmanager
def on(target: Target) -> Iterator[None]:
  """tinygrad's settings for `target`, for the time of one graph (and one thread at a time)."""
  with _LOCK, Context(DEV=target.dev, PARALLEL=0):
    yield


def renderer_dtypes(target: Target) -> frozenset[DType]:
  """The refgrad dtypes the target's renderer declares (`Renderer.supported_dtypes()`): tinygrad 0.14's CPULLVMRenderer
  leaves out float16 off macOS ("FIXME: fp16 works on non-osx, but only if the cpu supports it", renderer/llvmir.py)
  and its PYTHON renderer float16 before Python 3.12 (runtime/ops_python.py); tinygrad still runs such a graph,
  undeclared (float16 subnormals came out as 0 on LLVM, and a float16 sum failed tinygrad's UOp verification)."""
  from tinygrad import Device
  with on(target):
    declared = Device[target.device].renderer.supported_dtypes()
  return frozenset(dt for dt in ALL_DTYPES.values() if tg_dtype(dt) in declared)


# what tinygrad's C renderer writes for a bfloat16 buffer and cast; clang 14 and 15 reject it on x86-64 ("__bf16 is
# not supported on this target"), clang 19 compiles it
BF16_C = "void f(__bf16* restrict p, float x) { *p = (__bf16)(x); }"


def clang_compiles_bf16() -> bool:
  """Whether the clang tinygrad's CPU device runs (tinygrad's ClangCompiler: $CC or clang, its target and -march
  flags) compiles C with __bf16."""
  from tinygrad import Device
  with on(TARGETS["TINYGRAD_CPU"]):
    compiler = Device["CPU"].compiler
  command = [os.environ.get("CC", "clang"), "-c", "-x", "c", "-ffreestanding", "-nostdlib",
             f"--target={compiler.arch}-none-unknown-elf", *compiler.args, "-", "-o", os.devnull]
  return subprocess.run(command, input=BF16_C, capture_output=True, text=True).returncode == 0


def device_dtypes(target: Target) -> frozenset[DType]:
  """What a device claims: its renderer's dtypes, less bfloat16 on TINYGRAD_CPU where clang cannot compile it."""
  declared = renderer_dtypes(target)
  if target is TARGETS["TINYGRAD_CPU"] and not clang_compiles_bf16():
    return declared - {dtypes.bfloat16}
  return declared


def to_tinygrad(values: np.ndarray, dtype: DType, device: str) -> Tensor:
  """A numpy array as a tinygrad Tensor of `dtype`. tinygrad cannot take a bfloat16 array (numpy's buffer protocol
  refuses ml_dtypes' type), so bfloat16 goes in as its bits and is bitcast."""
  values = np.ascontiguousarray(values)
  if dtype == dtypes.bfloat16:
    return Tensor(values.view(np.uint16), device=device).bitcast(tg.bfloat16)
  return Tensor(values, device=device)


def realized(outputs: Sequence[Tensor], out_dtypes: Sequence[DType]) -> list[np.ndarray]:
  """The outputs realized together (one tinygrad schedule), as numpy arrays of their dtypes: bfloat16 comes out as
  its bits (tinygrad's numpy() has no bfloat16)."""
  bits = [t.bitcast(tg.uint16) if dt == dtypes.bfloat16 else t for t, dt in zip(outputs, out_dtypes)]
  bits[0].realize(*bits[1:])
  return [t.numpy().view(dt.np) for t, dt in zip(bits, out_dtypes)]


def run_program(build: Callable[..., Sequence[Tensor]], target: Target, arrays: Sequence[np.ndarray],
                in_dtypes: Sequence[DType], out_dtypes: Sequence[DType]) -> list[np.ndarray]:
  """`build(scalars, *inputs)`'s outputs on `target`, computed by tinygrad from `arrays`."""
  with on(target):
    inputs = [to_tinygrad(a, dt, target.device) for a, dt in zip(arrays, in_dtypes)]
    return realized(build(Scalars(target.device), *inputs), out_dtypes)
