"""A tensor graph computed by the torch exporter alone (no device), checked against the graph evaluator with the
oracle's whole-graph comparison (refgrad.testing.oracle.graph_check): bit-exact where SPEC.md says exact,
transcendentals within their ULP bounds, float sums within gamma_n, undefined lanes skipped."""
from __future__ import annotations

from refgrad_torch.export import run_on_torch

from refgrad.testing.oracle.compare import Comparison, compare
from refgrad.testing.oracle.graph_check import plain_graph, reference_bounds
from refgrad.uop import UOp


def check_on_torch(root: UOp, compile: bool = False) -> Comparison:
  """Compute `root` with torch (eager, or torch.compile) and compare it lane by lane with the reference. Raises
  Unsupported (refgrad_torch.export) for a graph torch cannot compute as SPEC.md says."""
  root = plain_graph(root)
  actual = run_on_torch(root, compile)
  expected, bound, undefined = reference_bounds(root)
  return compare(actual.reshape(-1), expected, undefined, abs_bound=bound)
