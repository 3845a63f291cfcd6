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

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from tinygrad import Tensor
from tinygrad import dtypes as tg
from tinygrad.helpers import Context

from refgrad.dtype import DType, dtypes
from refgrad_tinygrad.targets import Target

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
