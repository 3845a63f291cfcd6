"""A small writer of ONNX graphs: nodes appended in order, each with a fresh output name, constants as initializers.

The exporter's rules (export.py) call it with value names (strings) and get names back, so a rule reads like the
computation it emits: `g.op("Add", a, g.const(1, dtypes.int32))`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from refgrad.dtype import DType, dtypes

# Opset 26 is the first with BitCast, which BITCAST and the single-rounding casts need; onnxruntime 1.32 has a CPU
# kernel of every operator this exporter emits at that opset (README.md, "Opset")
OPSET = 26

ONNX_TYPE: dict[DType, int] = {
  dtypes.bool: TensorProto.BOOL,
  dtypes.int8: TensorProto.INT8, dtypes.int16: TensorProto.INT16,
  dtypes.int32: TensorProto.INT32, dtypes.int64: TensorProto.INT64,
  dtypes.uint8: TensorProto.UINT8, dtypes.uint16: TensorProto.UINT16,
  dtypes.uint32: TensorProto.UINT32, dtypes.uint64: TensorProto.UINT64,
  dtypes.float16: TensorProto.FLOAT16, dtypes.bfloat16: TensorProto.BFLOAT16,
  dtypes.float32: TensorProto.FLOAT, dtypes.float64: TensorProto.DOUBLE,
}


class Builder:
  """The nodes and initializers of one ONNX graph being written."""

  def __init__(self) -> None:
    self.nodes: list[NodeProto] = []
    self.initializers: list[TensorProto] = []
    self._constants: dict[tuple[str, tuple[int, ...], bytes], str] = {}

  def _fresh(self, stem: str) -> str:
    return f"{stem}_{len(self.nodes) + len(self.initializers)}"

  def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
    """Append one node of `op_type` and return the name of its (only) output."""
    out = self._fresh(op_type.lower())
    self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
    return out

  def const(self, value: Any, dtype: DType) -> str:
    """A constant of `dtype` (a scalar, or an array of any shape) as an initializer, one per distinct value."""
    array = np.asarray(value, dtype=dtype.np)
    key = (dtype.name, array.shape, array.tobytes())
    if key not in self._constants:
      name = self._fresh("const")
      self.initializers.append(numpy_helper.from_array(array, name))
      self._constants[key] = name
    return self._constants[key]

  def ints(self, values: Any) -> str:
    """An int64 vector: the shape, axes, pads and slice bounds operators take as inputs."""
    return self.const(np.asarray(values, np.int64).reshape(-1), dtypes.int64)

  def cast(self, x: str, to: DType) -> str:
    return self.op("Cast", x, to=ONNX_TYPE[to])

  def bitcast(self, x: str, to: DType) -> str:
    return self.op("BitCast", x, to=ONNX_TYPE[to])
