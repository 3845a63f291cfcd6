"""A graph finding as a jax script that runs without refgrad, for a bug report upstream: the graph's jaxpr (to read),
the StableHLO module jax exports for it (to run: `jax.export`, so XLA compiles exactly what the device compiled),
the inputs and the reference's expected values inline as bit patterns, each lane's allowed error, and the device's
XLA flags. The script exits 1 when jax.jit's result differs."""
from __future__ import annotations

import base64
import textwrap

import jax
import numpy as np

from refgrad.graph_device import bits_literal
from refgrad.uop import UOp
from refgrad_xla.export import xla_function
from refgrad_xla.flags import FLAGS

_HEADER = '''import base64
import os
import sys

os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), {flags!r}]).strip()  # before jax starts

import jax  # noqa: E402
import ml_dtypes  # noqa: E402,F401  (bfloat16)
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)


def from_bits(values, dtype, shape):
    """An array from its elements' bit patterns (exact for NaN, -0.0 and bfloat16)."""
    dtype = np.dtype(dtype)
    return np.array(values, dtype=f"i{{dtype.itemsize}}").view(dtype).reshape(shape)
'''

_CHECK = '''

def wrong_lanes(actual):
    """Lanes (flat) where `actual` is not the expected value: bit for bit where the bound is 0 (any NaN for a NaN),
    else farther than the bound; lanes the reference leaves undefined or unbounded are skipped."""
    a, e = np.asarray(actual).reshape(-1), EXPECTED.reshape(-1)
    same_bits = a.view(f"i{a.dtype.itemsize}") == e.view(f"i{e.dtype.itemsize}")
    if a.dtype.kind == "f" or a.dtype == np.dtype("bfloat16"):
        wide, want = a.astype(np.float64), e.astype(np.float64)
        ok = same_bits | (np.isnan(wide) & np.isnan(want)) | ((BOUND > 0) & (np.abs(wide - want) <= BOUND))
    else:
        ok = same_bits
    return np.flatnonzero(~(ok | SKIPPED)).tolist()


if __name__ == "__main__":
    program = jax.export.deserialize(base64.b64decode(MODULE))
    out = np.asarray(program.call(*INPUTS)[0])
    wrong = wrong_lanes(out)
    print(f"jax.jit (XLA): {len(wrong)} of {out.size} lanes differ from the expected values")
    for lane in wrong[:8]:
        print(f"  lane {lane}: got {out.reshape(-1)[lane]!r}, expected {EXPECTED.reshape(-1)[lane]!r}")
    sys.exit(1 if wrong else 0)
'''


def jax_script(root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
               undefined: np.ndarray | None, title: str) -> str:
  """The script (see the module's docstring) for graph `root` over leaves `inputs` ((leaf node, its values, flat)),
  with the reference's flat `expected` values, per-lane `bound` and `undefined` lanes."""
  arrays = [np.ascontiguousarray(values, leaf.dtype.np).reshape(-1) for leaf, values in inputs]
  function = xla_function([root], [leaf for leaf, _ in inputs])
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
  module = base64.b64encode(jax.export.export(jax.jit(function))(*specs).serialize()).decode()
  jaxpr = textwrap.indent(str(jax.make_jaxpr(function)(*arrays)), "#   ")
  bound = np.reshape(bound, -1).astype(np.float64)
  skipped = ~np.isfinite(bound) | (np.zeros(bound.size, bool) if undefined is None else np.reshape(undefined, -1))
  lines = [f'"""{title}', "", f"jax {jax.__version__}. Runs without refgrad (needs jax and flatbuffers):",
           "python repro.py (exit status 1 if jax.jit's result differs).", '"""', _HEADER.format(flags=" ".join(FLAGS)),
           "# The program (jax.make_jaxpr), run below as the StableHLO module jax.export made of it:", jaxpr,
           f'MODULE = "{module}"', "INPUTS = ["]
  lines += [f"    {bits_literal(a)}," for a in arrays]
  reference = np.asarray(expected, root.dtype.np).reshape(root.shape)
  lines += ["]", f"EXPECTED = {bits_literal(reference)}  # the reference",
            f"BOUND = np.array({np.where(skipped, 0.0, bound).tolist()})  # |error| allowed per lane",
            f"SKIPPED = np.array({skipped.tolist()})  # undefined in docs/SPEC.md, or unbounded", _CHECK]
  return "\n".join(lines)
