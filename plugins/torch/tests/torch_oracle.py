"""A tensor graph computed by the torch exporter alone (no device), checked against the graph evaluator with the
oracle's whole-graph comparison (refgrad.testing.oracle.graph_check): bit-exact where SPEC.md says exact,
transcendentals within their ULP bounds, float sums within gamma_n, undefined lanes skipped."""
from __future__ import annotations

from refgrad_torch.export import run_on_torch

from refgrad.dtype import dtypes
from refgrad.testing.oracle.compare import Comparison, compare
from refgrad.testing.oracle.graph_check import plain_graph, reference_bounds
from refgrad.uop import Ops, UOp

# Where torch 2.13 on the CPU gives another answer than SPEC.md (README.md, "Disagreements"): each cell must still
# differ, so a torch that fixes it makes this test fail and the entry go.
TORCH_DIFFERS = {
  ("SQRT", "float32"): "torch.sqrt is not correctly rounded: sqrt(0.99999994) is 1.0, not 0.99999994",
  ("SQRT", "float64"): "torch.sqrt is not correctly rounded: sqrt(0.9999999999999999) is 1.0",
  ("MOD", "float32"): "vectorized torch.fmod(1.0, 1e-45) is NaN, not 0.0 (the scalar path is right)",
  ("MOD", "bfloat16"): "vectorized torch.fmod with a subnormal divisor is NaN",
  ("MOD", "float64"): "vectorized torch.fmod(1.0, 5e-324) is NaN, not 0.0",
}


def torch_may_differ(graph: UOp) -> bool:
  """Whether a mismatch of `graph` can be one of TORCH_DIFFERS: it computes a float square root or remainder."""
  return any(u.op in (Ops.SQRT, Ops.MOD) and dtypes.is_float(u.dtype) for u in graph.toposort)


def check_on_torch(root: UOp, compile: bool = False) -> Comparison:
  """Compute `root` with torch (eager, or torch.compile) and compare it lane by lane with the reference. Raises
  Unsupported (refgrad_torch.export) for a graph torch cannot compute as SPEC.md says."""
  root = plain_graph(root)
  actual = run_on_torch(root, compile)
  expected, bound, undefined = reference_bounds(root)
  return compare(actual.reshape(-1), expected, undefined, abs_bound=bound)
