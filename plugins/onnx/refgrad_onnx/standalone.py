"""A graph finding as an ONNX model and a script that runs it with onnxruntime alone, for a bug report upstream: the
model (repro.onnx, exactly what the device ran), its text (onnx.printer) in the script to read, the inputs and the
reference's expected values inline as bit patterns, each lane's allowed error, and the device's optimization level.
The script exits 1 when onnxruntime's result differs. bfloat16 values cross as uint16 bits, as on the device."""
from __future__ import annotations

import textwrap

import numpy as np
import onnx
import onnxruntime as ort

from refgrad.dtype import dtypes
from refgrad.graph_device import bits_literal
from refgrad.uop import UOp
from refgrad_onnx.export import onnx_model, transport_dtype

_HEADER = '''import os
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))


def from_bits(values, dtype, shape):
    """An array from its elements' bit patterns (exact for NaN and -0.0)."""
    dtype = np.dtype(dtype)
    return np.array(values, dtype=f"i{dtype.itemsize}").view(dtype).reshape(shape)
'''

_CHECK = '''

def as_float64(values):
    """Float values widened exactly; bfloat16 (given as its uint16 bits) is the top half of a float32."""
    values = np.asarray(values).reshape(-1)
    if BFLOAT16_BITS:
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return values.astype(np.float64)


def wrong_lanes(actual):
    """Lanes (flat) where `actual` is not the expected value: bit for bit where the bound is 0 (any NaN for a NaN),
    else farther than the bound; lanes the reference leaves undefined or unbounded are skipped."""
    a, e = np.asarray(actual).reshape(-1), EXPECTED.reshape(-1)
    same_bits = a.view(f"i{a.dtype.itemsize}") == e.view(f"i{e.dtype.itemsize}")
    if a.dtype.kind == "f" or BFLOAT16_BITS:
        wide, want = as_float64(a), as_float64(e)
        ok = same_bits | (np.isnan(wide) & np.isnan(want)) | ((BOUND > 0) & (np.abs(wide - want) <= BOUND))
    else:
        ok = same_bits
    return np.flatnonzero(~(ok | SKIPPED)).tolist()


if __name__ == "__main__":
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVEL
    session = ort.InferenceSession(os.path.join(HERE, "repro.onnx"), options, providers=["CPUExecutionProvider"])
    out = session.run(None, INPUTS)[0]
    wrong = wrong_lanes(out)
    print(f"onnxruntime {ort.__version__} ({LEVEL}): {len(wrong)} of {out.size} lanes differ from the expected values")
    for lane in wrong[:8]:
        print(f"  lane {lane}: got {out.reshape(-1)[lane]!r}, expected {EXPECTED.reshape(-1)[lane]!r}")
    sys.exit(1 if wrong else 0)
'''


def reproducer(root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
               undefined: np.ndarray | None, title: str, level: ort.GraphOptimizationLevel) -> dict[str, str | bytes]:
  """repro.py and repro.onnx (see the module's docstring) for graph `root` over leaves `inputs` ((leaf node, its
  values)), with the reference's flat `expected` values, per-lane `bound` and `undefined` lanes."""
  arrays = [np.ascontiguousarray(values, leaf.dtype.np).reshape(-1).view(transport_dtype(leaf.dtype).np)
            for leaf, values in inputs]
  model = onnx_model([root], [leaf for leaf, _ in inputs], [a.size for a in arrays])
  bound = np.reshape(bound, -1).astype(np.float64)
  skipped = ~np.isfinite(bound) | (np.zeros(bound.size, bool) if undefined is None else np.reshape(undefined, -1))
  reference = np.asarray(expected, root.dtype.np).reshape(root.shape).view(transport_dtype(root.dtype).np)
  lines = [f'"""{title}', "", f"onnxruntime {ort.__version__}. Runs without refgrad (needs onnxruntime and numpy):",
           "python repro.py (exit status 1 if onnxruntime's result differs). repro.onnx is the model, printed below.",
           '"""', _HEADER, "# The model (onnx.printer):", textwrap.indent(onnx.printer.to_text(model), "#   "),
           f"LEVEL = ort.GraphOptimizationLevel.{level.name}  # the device's graph optimizations", "INPUTS = {"]
  lines += [f"    {value.name!r}: {bits_literal(a)}," for value, a in zip(model.graph.input, arrays)]
  lines += ["}", f"EXPECTED = {bits_literal(reference)}  # the reference",
            f"BFLOAT16_BITS = {root.dtype == dtypes.bfloat16}  # values given as bfloat16's uint16 bits",
            f"BOUND = np.array({np.where(skipped, 0.0, bound).tolist()})  # |error| allowed per lane",
            f"SKIPPED = np.array({skipped.tolist()})  # undefined in docs/SPEC.md, or unbounded", _CHECK]
  return {"repro.py": "\n".join(lines), "repro.onnx": model.SerializeToString()}
