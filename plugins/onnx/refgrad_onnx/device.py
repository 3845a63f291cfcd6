"""The graph devices ORT and ORT_BASIC: a graph (refgrad/graph_device.py) exported by the rules of export.py into one
ONNX model, loaded once per graph into an onnxruntime InferenceSession on the CPU execution provider, and run whole.
ORT runs onnxruntime's graph optimizations at their highest level (ORT_ENABLE_ALL: constant folding, operator
fusions, layout rewrites), ORT_BASIC none (ORT_DISABLE_ALL): the same kernels, so a cell that fails on ORT only is
an optimizer's doing."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from refgrad.codegen.contract import Capabilities
from refgrad.dtype import ALL_DTYPES, DType
from refgrad.graph_device import graph_inputs, graph_outputs
from refgrad.uop import UOp
from refgrad_onnx.export import onnx_model, transport_dtype, unsupported_reason

ONNX_DTYPES = frozenset(ALL_DTYPES.values())  # ONNX has every refgrad dtype (bfloat16 crosses as its bits)
LEVELS = {"ORT": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "ORT_BASIC": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}


def session_options(level: ort.GraphOptimizationLevel) -> ort.SessionOptions:
  options = ort.SessionOptions()
  options.graph_optimization_level = level
  options.intra_op_num_threads = options.inter_op_num_threads = 1  # a graph per cell: threads cost more than they give
  options.log_severity_level = 3  # warnings about unused initializers are not findings
  return options


def _model(graph: UOp) -> onnx.ModelProto:
  inputs, outputs = graph_inputs(graph), graph_outputs(graph)
  return onnx_model([value for _, value in outputs], inputs, [p.arg[1] for p in inputs])


def _as_stored(array: np.ndarray, dt: DType) -> np.ndarray:
  return array.view(dt.np) if transport_dtype(dt) != dt else array  # bfloat16's bits back as bfloat16


class OrtGraphCompiler:
  """A graph as one ONNX model in one onnxruntime session, built once per graph at the device's optimization level."""

  def __init__(self, device: str) -> None:
    self.caps = Capabilities(dtypes=ONNX_DTYPES)
    self.level = LEVELS[device]

  def unsupported(self, node: UOp) -> str | None:
    return unsupported_reason(node)

  def compile(self, graph: UOp) -> Callable[..., Sequence[np.ndarray]]:
    session = ort.InferenceSession(_model(graph).SerializeToString(), session_options(self.level),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    given = [transport_dtype(p.dtype).np for p in graph_inputs(graph)]
    stored = [value.dtype for _, value in graph_outputs(graph)]

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
      feeds = {n: np.asarray(a).view(dt) for n, a, dt in zip(names, arrays, given)}
      return [_as_stored(r, dt) for r, dt in zip(session.run(None, feeds), stored)]
    return run

  def standalone(self, root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                 undefined: np.ndarray | None, title: str) -> dict[str, str | bytes]:
    """A finding as an ONNX model and a script that runs it with onnxruntime alone (standalone.py)."""
    from refgrad_onnx.standalone import reproducer
    return reproducer(root, inputs, expected, bound, undefined, title, self.level)

  def render(self, graph: UOp) -> str:
    """The graph as a report shows it: the ONNX model in ONNX's textual syntax (CONSTs are its initializers)."""
    return f"# onnxruntime {ort.__version__}, onnx {onnx.__version__}, {self.level}\n" + \
      onnx.printer.to_text(_model(graph))

