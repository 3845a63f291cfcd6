"""The graph device XLA: a graph (refgrad/graph_device.py) exported by the rules of export.py into one function over
all its outputs, compiled ahead of time by jax.jit for exactly its inputs' shapes and dtypes, and run whole."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jaxlib
import numpy as np

from refgrad.codegen.contract import Capabilities, Difference
from refgrad.dtype import ALL_DTYPES, dtypes
from refgrad.graph_device import graph_inputs, graph_outputs, graph_program
from refgrad.ops import OP_FACTS
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_xla import flags
from refgrad_xla.export import unsupported_reason, xla_function

XLA_DTYPES = frozenset(ALL_DTYPES.values())  # jax has every refgrad dtype (bfloat16 is ml_dtypes', as refgrad's)
# XLA's CPU runtime computes with the processor's FTZ/DAZ flags set (README.md, "Disagreements found"): its arithmetic
# reads float32/float64/bfloat16 subnormals as zeros and writes subnormal results as zeros. float16 is computed in
# float32, where its subnormals are normal. NEG (a sign-bit flip) and WHERE (a select) do no arithmetic and keep
# subnormals (measured), so they are not declared.
FLUSHED_SUBNORMALS = Difference(
  ops=frozenset({op for op in GroupOp.ALU if "f" in OP_FACTS[op].kinds} - {Ops.NEG, Ops.WHERE}) |
      {Ops.CAST, Ops.REDUCE_AXIS},
  dtypes=frozenset({dtypes.float32, dtypes.float64, dtypes.bfloat16}),
  ulp=0.0,
  flushes_subnormals=True,
  source="jax-ml/jax#16200 (\"Subnormal `jax.numpy` arrays equal to 0\"), a maintainer: \"This is working as intended: "
         "JAX sets the CPU mode [...]\"; jax-ml/jax#37762: \"JAX's CPU backend enables the processor's DAZ "
         "(Denormals-Are-Zero) flag [...] It does **not** affect `float16`\"; xla/pjrt/cpu/cpu_client.cc, around "
         "every execution: \"Set denormal and rounding behavior to match the default TF ThreadPool behavior.\" "
         "(tsl::port::ScopedFlushDenormal)")


class XlaGraphCompiler:
  """A graph as one jax function, lowered and compiled by XLA once per graph. The executable is compiled ahead of
  time for the inputs' exact shapes and dtypes (jit(...).lower(...).compile()), so no call goes through jit's
  dispatch cache: a call with other arguments raises instead of reusing or retracing a trace."""

  def __init__(self) -> None:
    self.caps = Capabilities(dtypes=XLA_DTYPES)
    self.differences = (FLUSHED_SUBNORMALS,)
    check_no_contraction()

  def unsupported(self, node: UOp) -> str | None:
    return unsupported_reason(node)

  def _lowered(self, graph: UOp) -> jax.stages.Lowered:
    inputs, outputs = graph_inputs(graph), graph_outputs(graph)
    function = xla_function([value for _, value in outputs], inputs)
    function.__name__ = graph_program(graph).name  # names the XLA module in dumps and profiles
    return jax.jit(function).lower(*[jax.ShapeDtypeStruct((p.arg[1],), p.dtype.np) for p in inputs])

  def compile(self, graph: UOp) -> Callable[..., Sequence[np.ndarray]]:
    executable = self._lowered(graph).compile()

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
      return [np.asarray(r) for r in executable(*arrays)]
    return run

  def standalone(self, root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                 undefined: np.ndarray | None, title: str) -> dict[str, str]:
    """A finding as a jax script that runs without refgrad (standalone.py)."""
    from refgrad_xla.standalone import jax_script
    return {"repro.py": jax_script(root, inputs, expected, bound, undefined, title)}

  def render(self, graph: UOp) -> str:
    """The graph as a report shows it: the StableHLO module jax lowers it to (CONSTs are constants in it)."""
    return f"# jax {jax.__version__}, jaxlib {jaxlib.__version__}, XLA_FLAGS {' '.join(flags.FLAGS)}\n" + \
      self._lowered(graph).as_text()


def check_no_contraction() -> None:
  """RuntimeError if XLA fuses a float multiply and add into an FMA: its CPU backend was started before this plugin
  set XLA_FLAGS (flags.py), which XLA reads once."""
  a, c = np.full(8, 1 + 2 ** -12, np.float32), np.full(8, -(1 + 2 ** -11), np.float32)
  fused = np.asarray(jax.jit(lambda x, y, z: x * y + z)(a, a, c))
  if fused.any():
    raise RuntimeError(f"XLA's CPU backend fuses float multiply-adds here (SPEC.md forbids it): it was started before "
                       f"refgrad-xla could set XLA_FLAGS; set XLA_FLAGS='{' '.join(flags.FLAGS)}' before jax starts")
