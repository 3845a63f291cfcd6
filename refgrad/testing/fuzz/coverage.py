"""Which primitive op x dtype pairs a campaign's kernels executed, out of those a device could be asked to run."""
from __future__ import annotations

from typing import Any

from refgrad.dtype import DType, dtypes
from refgrad.ops import OP_FACTS
from refgrad.testing.strategies import ALL
from refgrad.uop import GroupOp, Ops


def coverage_universe(claimed: tuple[DType, ...] = ALL) -> set[tuple[str, str]]:
  """Every (op, dtype) pair a device claiming `claimed` can be asked to run: ALU ops by operand dtype, casts and
  bitcasts by target dtype, reductions by dtype."""
  every = list(claimed)
  pairs = {(op.name, d.name) for op, facts in OP_FACTS.items() for d in every if d.kind in facts.kinds}
  pairs |= {("CAST", d.name) for d in every} | {("BITCAST", d.name) for d in every if d != dtypes.bool}
  pairs |= {(f"REDUCE {op}", d.name) for op in ("ADD", "MUL", "MAX") for d in every if d != dtypes.bool}
  pairs |= {("REDUCE MAX", "bool")} if dtypes.bool in every else set()  # any(): sums of bools are cast first
  return pairs


def kernel_pairs(ast: Any) -> set[tuple[str, str]]:
  """The (op, dtype) pairs one scheduled kernel executes (see coverage_universe)."""
  pairs = set()
  for u in ast.toposort:
    if u.op in GroupOp.ALU:
      pairs.add((u.op.name, (u.src[-1] if u.op is Ops.WHERE else u.src[0]).dtype.name))
    elif u.op in (Ops.CAST, Ops.BITCAST):
      pairs.add((u.op.name, u.dtype.name))
    elif u.op is Ops.REDUCE_AXIS:
      pairs.add((f"REDUCE {u.arg[0].name}", u.dtype.name))
  return pairs
