"""refgrad-torch: refgrad's tensor-level graph (what refgrad/interp/graph.py evaluates) exported to torch ops, one
rule per primitive op with docs/SPEC.md's dtype semantics, run eagerly or through torch.compile (Inductor).

Not a device yet: the graph-device contract of issue 46 does not exist in refgrad's core, so nothing is registered.
"""
from refgrad_torch.export import RULES, Unsupported, run_on_torch, to_torch_function

__all__ = ["RULES", "Unsupported", "run_on_torch", "to_torch_function"]
