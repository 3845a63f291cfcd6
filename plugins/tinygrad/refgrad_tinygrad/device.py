"""The graph devices TINYGRAD_CPU, TINYGRAD_LLVM and TINYGRAD_PYTHON: a graph (refgrad/graph_device.py) built from
tinygrad's ops by the rules of export.py on the target's tinygrad device, and realized whole by tinygrad."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.metadata import version

import numpy as np

from refgrad.codegen.contract import Capabilities
from refgrad.graph_device import graph_inputs, graph_outputs
from refgrad.uop import UOp
from refgrad_tinygrad.export import tinygrad_function, unsupported_reason
from refgrad_tinygrad.program import program_source
from refgrad_tinygrad.runtime import device_dtypes, run_program
from refgrad_tinygrad.targets import Target


class TinygradGraphCompiler:
  """A graph as tinygrad Tensors on one target. tinygrad builds no function ahead of time: each call builds the
  graph's Tensors from the inputs and realizes them; tinygrad's own caches (its schedule cache, keyed by the graph's
  structure and constants, and its compiled kernels, keyed by their source) make later calls cheap."""

  def __init__(self, target: Target) -> None:
    self.target = target
    self.caps = Capabilities(dtypes=device_dtypes(target))  # what tinygrad declares it computes here

  def unsupported(self, node: UOp) -> str | None:
    return unsupported_reason(node)

  def compile(self, graph: UOp) -> Callable[..., Sequence[np.ndarray]]:
    inputs, outputs = graph_inputs(graph), graph_outputs(graph)
    values = [value for _, value in outputs]
    in_dtypes, out_dtypes = [p.dtype for p in inputs], [v.dtype for v in values]

    def build(scalars: object, *tensors: object) -> tuple:
      return tinygrad_function(values, inputs, self.target, scalars)(*tensors)

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
      return run_program(build, self.target, arrays, in_dtypes, out_dtypes)
    return run

  def standalone(self, root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                 undefined: np.ndarray | None, title: str) -> dict[str, str]:
    """A finding as a tinygrad script that runs without refgrad (standalone.py)."""
    from refgrad_tinygrad.standalone import tinygrad_script
    return {"repro.py": tinygrad_script(root, inputs, expected, bound, undefined, title, self.target)}

  def render(self, graph: UOp) -> str:
    """The graph as a report shows it: the tinygrad program the rules build (program.py)."""
    values = [value for _, value in graph_outputs(graph)]
    return f"# tinygrad {version('tinygrad')}, {self.target.describe()}\n" + \
      program_source(values, graph_inputs(graph), self.target)
