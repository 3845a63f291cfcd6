"""A tensor graph computed by torch, checked against the graph evaluator with the oracle's comparison.

The reference value, undefined lanes and per-lane error bounds come from refgrad.testing.oracle.bounds, run over the
whole graph as if it were one kernel (a graph device computes many kernels' worth at once), and the verdict from
refgrad.testing.oracle.compare: bit-exact where SPEC.md says exact, transcendentals within their ULP bounds, float
sums within gamma_n, undefined lanes skipped.
"""
from __future__ import annotations

import numpy as np
from refgrad_torch.export import run_on_torch

from refgrad.dtype import dtypes
from refgrad.symbolic_shapes import concrete_graph
from refgrad.symbolic_shapes import in_use as sizes_in_use
from refgrad.testing.oracle.bounds import kernel_error_bounds
from refgrad.testing.oracle.compare import Comparison, compare
from refgrad.uop import Ops, UOp

# nodes whose value is their first source's, which the bounds walk does not know (it sees kernels, where the
# scheduler has removed them)
_PASSED_THROUGH = (Ops.DETACH, Ops.CUSTOM_GRAD)


def _without_pass_through(root: UOp) -> UOp:
  """The graph with DETACH and CUSTOM_GRAD replaced by their value, innermost first (substitute keeps the
  replacement's own sources as they were, so one at a time)."""
  while found := [u for u in root.toposort if u.op in _PASSED_THROUGH]:
    root = root.substitute({found[0]: found[0].src[0]})
  return root


def concrete(root: UOp) -> UOp:
  """The graph with its symbolic sizes at their bound values, as the graph evaluator runs it."""
  return concrete_graph(root) if sizes_in_use() else root


def reference_with_bounds(root: UOp) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """(flat reference value, flat absolute error bound, flat undefined lanes or None) of a tensor graph."""
  value = _without_pass_through(concrete(root))
  out = UOp(Ops.PARAM, value.dtype, (), (0, int(np.prod(value.shape))))
  return kernel_error_bounds(UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, value)),)), {})


def check_on_torch(root: UOp, compile: bool = False) -> Comparison:
  """Compute `root` with torch (eager, or torch.compile) and compare it lane by lane with the reference. Raises
  Unsupported (refgrad_torch.export) for a graph torch cannot compute as SPEC.md says."""
  root = concrete(root)
  actual = run_on_torch(root, compile)
  expected, bound, undefined = reference_with_bounds(root)
  return compare(actual.reshape(-1), expected, undefined, abs_bound=bound)
