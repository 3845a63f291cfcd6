"""A graph finding as a tinygrad script that runs without refgrad, for a bug report upstream: the graph as the
tinygrad program the rules build (program.py), its inputs and the reference's expected values inline as bytes (so
NaN payloads, -0.0 and bfloat16 survive), each lane's allowed error, and the tinygrad device and renderer the finding
was made on. It realizes the program with tinygrad and exits 1 when a judged lane differs, judging lanes as the
oracle does (refgrad/standalone.py's PY_CHECKER, numpy only)."""
from __future__ import annotations

from importlib.metadata import version

import numpy as np

from refgrad.standalone import PY_CHECKER, format_of
from refgrad.uop import UOp
from refgrad_tinygrad.program import program_source
from refgrad_tinygrad.targets import Target

_SETUP = '''import sys

import ml_dtypes  # noqa: F401  (numpy's bfloat16)
import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.helpers import Context
from tinygrad.uop import Ops  # noqa: F401  (the program's ops)

DEVICE, DEV = {device!r}, {dev!r}  # the tinygrad device, and its DEV setting: the renderer


class Scalars:
  """Makes the program's constants on DEVICE."""

  def scalar(self, value, dtype):
    return Tensor(value, dtype=dtype, device=DEVICE)


def tensor(data, dtype, shape):
  """An input from its bytes; bfloat16 goes in as its bits (tinygrad takes no bfloat16 array)."""
  values = np.frombuffer(data, np.dtype(dtype)).reshape(shape)
  if dtype == "bfloat16":
    return Tensor(values.view(np.uint16), device=DEVICE).bitcast(dtypes.bfloat16)
  return Tensor(values.copy(), device=DEVICE)


def result(out, dtype):
  """The realized output's bytes (bfloat16 as its bits)."""
  return (out.bitcast(dtypes.uint16) if dtype == "bfloat16" else out).numpy().tobytes()
'''

_MAIN = '''

if __name__ == "__main__":
  with Context(DEV=DEV, PARALLEL=0):
    out = program(Scalars(), *[tensor(*i) for i in INPUTS])[0]
    got = result(out, OUT_DTYPE)
  bad = check(got, EXPECTED, SKIP, ABS_BOUND, SIZE, EXP_BITS, MAN_BITS, 0)
  print(f"tinygrad on DEV={{DEV}}: {{bad}} of {{SKIP.size}} lanes differ from the reference")
  sys.exit(1 if bad else 0)
'''


def tinygrad_script(root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                    undefined: np.ndarray | None, title: str, target: Target) -> str:
  """The script (see the module's docstring) for graph `root` over leaves `inputs` ((leaf node, its values)), with
  the reference's flat `expected` values, per-lane `bound` and `undefined` lanes, run on `target`."""
  leaves = [leaf for leaf, _ in inputs]
  reference = np.ascontiguousarray(np.asarray(expected, root.dtype.np).reshape(-1))
  size, exp_bits, man_bits = format_of(reference)
  bound = np.reshape(bound, -1).astype(np.float64)
  skipped = ~np.isfinite(bound) | (np.zeros(bound.size, bool) if undefined is None else np.reshape(undefined, -1))
  allowed = [float(v).hex() for v in np.where(skipped, 0, bound)]
  data = [f"  ({np.ascontiguousarray(values, leaf.dtype.np).tobytes()!r}, {leaf.dtype.np.name!r}, "
          f"{tuple(leaf.shape)!r})," for leaf, values in inputs]
  lines = [f'"""{title}', "", f"tinygrad {version('tinygrad')}, {target.describe()}. Runs without refgrad (needs "
           "tinygrad, numpy and ml_dtypes): python repro.py (exit status 1 if tinygrad's result differs).", '"""',
           _SETUP.format(device=target.device, dev=target.dev), "\n# How the oracle judges a lane:", PY_CHECKER,
           "# The graph, as the tinygrad program refgrad-tinygrad builds of it:",
           program_source([root], leaves, target), "INPUTS = [  # (bytes, dtype, shape)", *data, "]",
           f"OUT_DTYPE = {root.dtype.np.name!r}",
           f"EXPECTED = {reference.tobytes()!r}  # the reference's values",
           f"SKIP = np.array({skipped.tolist()!r}, dtype=bool)  # undefined in docs/SPEC.md, or unbounded",
           f"ABS_BOUND = np.array([float.fromhex(h) for h in {allowed!r}])  # |error| allowed per lane",
           f"SIZE, EXP_BITS, MAN_BITS = {size}, {exp_bits}, {man_bits}", _MAIN.format()]
  return "\n".join(lines)
