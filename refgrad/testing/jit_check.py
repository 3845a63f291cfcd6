"""The oracle for capture and replay (refgrad/jit.py): a replayed call must give what the function gives when it runs.

`check_jit_replay(fn, calls, device)` runs a pure function (its result depends only on its tensor arguments) once
per set of inputs in `calls`, jitted and plain, on `device`. Each plain result is checked against the reference
kernel by kernel (`check_against_reference`, SPEC.md's bounds); each jitted result must equal the plain one bit for
bit (NaNs equal to NaNs): a replay launches the binaries the plain call compiled, on the same inputs, so any
difference is the replay's (a stale input, a missed launch, a buffer overwritten by another). The first two calls
run and capture; give at least three sets of inputs, different ones, so that replays are checked.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad.jit import TinyJit, tensors_in
from refgrad.tensor import Tensor
from refgrad.testing.reference import check_against_reference


class ReplayMismatch(AssertionError):
  """A replayed call's result differs from the function's own on the same inputs."""


def _arrays(result: Any) -> list[np.ndarray]:
  return [t.numpy() for t in tensors_in(result)]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
  return a.shape == b.shape and a.dtype == b.dtype and bool(np.all((a == b) | ((a != a) & (b != b))))


def check_jit_replay(fn: Callable[..., Any], calls: Sequence[Sequence[np.ndarray]], device: str,
                     jit: Callable[[Callable[..., Any]], Any] = TinyJit) -> tuple[int, int]:
  """Raise ReplayMismatch at the first call whose jitted result differs from the plain one (ReferenceMismatch if a
  plain result is wrong); return the number of replayed calls checked and of the output lanes they compared. `jit`
  wraps fn (TinyJit, or a jit under test)."""
  if len(calls) < 3:
    raise ValueError(f"check_jit_replay needs at least 3 sets of inputs (2 run and capture), got {len(calls)}")
  jitted, lanes = jit(fn), 0
  for number, inputs in enumerate(calls):
    check_against_reference(fn, *inputs, device=device)
    plain = _arrays(fn(*(Tensor(x, device=device) for x in inputs)))
    replayed = _arrays(jitted(*(Tensor(x, device=device) for x in inputs)))
    for i, (want, got) in enumerate(zip(plain, replayed)):
      if not _same_bits(want, got):
        where = np.flatnonzero(~((want == got) | ((want != want) & (got != got))).reshape(-1))[:5]
        raise ReplayMismatch(f"call {number} ({'replayed' if number >= 2 else 'run'} by the jit) on {device}: "
                             f"output {i} differs from the function's own result at flat lanes {where.tolist()}: "
                             f"jit {got.reshape(-1)[where].tolist()}, function {want.reshape(-1)[where].tolist()}")
    lanes += sum(x.size for x in plain) if number >= 2 else 0
  return len(calls) - 2, lanes
