"""The graph devices TORCH (torch's eager CPU kernels) and INDUCTOR (torch.compile: Inductor's C++/OpenMP code on the
CPU): a graph (refgrad/graph_device.py) exported by the rules of export.py and run whole."""
from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from refgrad.codegen.contract import Capabilities, Difference
from refgrad.dtype import ALL_DTYPES, dtypes
from refgrad.graph_device import graph_inputs, graph_outputs, graph_program
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_torch.casts import from_torch, to_torch
from refgrad_torch.export import inductor, torch_function, unsupported_reason

TORCH_DTYPES = frozenset(ALL_DTYPES.values())  # every refgrad dtype has a torch dtype; some ops lack kernels
# Inductor keeps float16/bfloat16 values in float32 between the ops it fuses, so an op's result may miss its rounding
# to the half type (at most half a unit in its last place): its documented behaviour, which the oracle allows.
ELIDED_HALF_ROUNDING = Difference(
  ops=frozenset(GroupOp.ALU - GroupOp.Comparison - {Ops.WHERE}) | {Ops.CAST},
  dtypes=frozenset({dtypes.float16, dtypes.bfloat16}),
  ulp=1.0,
  source="torch/_inductor/config.py (torch 2.13), on emulate_precision_casts (off by default): \"PyTorch eager "
         "computes bf16/fp16 by upcasting inputs to fp32 and downcasting after.  When two low precision operators are "
         "fused together, Inductor will elide the downcast-upcast pairs (effectively a precision truncation) that "
         "would occur between these two operators.\"")


class TorchGraphCompiler:
  """A graph as one function of torch ops: run eagerly, or compiled whole by torch.compile with `options` (mode=...)
  when `compiled`."""

  def __init__(self, compiled: bool, **options: Any):
    self.compiled, self.options = compiled, options
    self.caps = Capabilities(dtypes=TORCH_DTYPES)
    self.differences = (ELIDED_HALF_ROUNDING,) if compiled else ()

  def unsupported(self, node: UOp) -> str | None:
    return unsupported_reason(node)

  def compile(self, graph: UOp) -> Callable[..., Sequence[np.ndarray]]:
    inputs, outputs = graph_inputs(graph), graph_outputs(graph)
    function = torch_function([value for _, value in outputs], inputs)
    if self.compiled:
      function = inductor(function, graph_program(graph).name, **self.options)

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
      tensors = [to_torch(a, p.dtype) for a, p in zip(arrays, inputs)]
      with torch.no_grad():
        results = function(*tensors)
      return [from_torch(r, value.dtype) for r, (_, value) in zip(results, outputs)]
    return run

  def standalone(self, root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                 undefined: np.ndarray | None, title: str) -> dict[str, str]:
    """A finding as a torch script that runs without refgrad (standalone.py)."""
    from refgrad_torch.standalone import torch_script
    return {"repro.py": torch_script(root, inputs, expected, bound, undefined, "compiled" if self.compiled else "eager",
                                     self.options, f"{title}\n\ntorch {torch.__version__}")}

  def render(self, graph: UOp) -> str:
    """The graph as a report shows it: which torch path runs it, and its nodes."""
    how = f"torch.compile({', '.join(f'{k}={v!r}' for k, v in self.options.items()) or 'fullgraph=True'})" \
      if self.compiled else "torch eager"
    return f"# {how}, torch {torch.__version__}\n{graph}"


def cpp_compiler_reason() -> str | None:
  """Why Inductor cannot build its CPU code here (it runs a C++ compiler), or None."""
  return None if shutil.which("g++") or shutil.which("c++") or shutil.which("clang++") else \
    "torch.compile's Inductor needs a C++ compiler on the CPU: none of g++, c++, clang++ found"
