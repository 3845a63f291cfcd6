"""Reverse-mode differentiation as rules over the tensor graph.

`GRADIENT_RULES` is one table: for each tensor-level op, a rule that takes the gradient of the node's output
(`ctx`, a Tensor) and the node, and returns the gradient of each source (None where the source gets none).
`compute_gradients` walks the graph backwards from the output, asks the rule matcher for each node and sums
the contributions. Rules are written with Tensor methods, so they build lazy graphs like any other code and
are scheduled and fused with everything else.
"""
from __future__ import annotations

import math
from typing import Any

from refgrad.dtype import dtypes
from refgrad.rewrite import PatternMatcher, UPat
from refgrad.uop import GroupOp, Ops, UOp

LN_2 = math.log(2)


def _t(g: Any, u: UOp) -> Any:
  """The Tensor view of a graph node, made like g (so the rules can use Tensor methods)."""
  return g._from(u)


def _max_grad(ctx: Any, node: UOp) -> tuple:
  """Ties share the gradient equally, as torch.maximum does."""
  a, b, out = _t(ctx, node.src[0]), _t(ctx, node.src[1]), _t(ctx, node)
  a_wins, b_wins = a.eq(out).cast(ctx.dtype), b.eq(out).cast(ctx.dtype)
  share = ctx / (a_wins + b_wins).maximum(1)
  return share * a_wins, share * b_wins


def _reduce_grad(ctx: Any, node: UOp) -> tuple:
  op, axes = node.arg
  src = _t(ctx, node.src[0])
  if op is Ops.ADD:
    return (ctx.expand(src.shape),)
  out = _t(ctx, node).expand(src.shape)
  if op is Ops.MAX:  # every maximum shares the gradient equally
    hits = src.eq(out).cast(ctx.dtype)
    return (ctx.expand(src.shape) * hits / hits._reduce(Ops.ADD, axes, keepdim=True).expand(src.shape),)
  return (ctx.expand(src.shape) * out / src,)  # MUL: the product of the others (inf/NaN where src is 0)


def _permute_grad(ctx: Any, node: UOp) -> tuple:
  inverse = [0] * len(node.arg)
  for i, axis in enumerate(node.arg):
    inverse[axis] = i
  return (ctx.permute(inverse),)


def _expand_grad(ctx: Any, node: UOp) -> tuple:
  src_shape = node.src[0].shape
  axes = tuple(i for i, (s, t) in enumerate(zip(src_shape, node.shape)) if s != t)
  grad = ctx.cast(dtypes.float32) if ctx.dtype in (dtypes.float16, dtypes.bfloat16) else ctx
  return (grad._reduce(Ops.ADD, axes, keepdim=True).cast(ctx.dtype) if axes else ctx,)


def _pad_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.shrink(tuple((before, before + s) for (before, _), s in zip(node.arg, node.src[0].shape))),)


def _shrink_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.pad(tuple((start, s - end) for (start, end), s in zip(node.arg, node.src[0].shape))),)


def _cast_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.cast(node.src[0].dtype) if dtypes.is_float(node.src[0].dtype) else None,)


def _no_grad(ctx: Any, node: UOp) -> tuple:
  return (None,) * len(node.src)


GRADIENT_RULES = PatternMatcher([
  (UPat(Ops.ADD, name="node"), lambda ctx, node: (ctx, ctx)),
  (UPat(Ops.MUL, name="node"), lambda ctx, node: (ctx * _t(ctx, node.src[1]), ctx * _t(ctx, node.src[0]))),
  (UPat(Ops.NEG, name="node"), lambda ctx, node: (-ctx,)),
  (UPat(Ops.RECIP, name="node"), lambda ctx, node: (-ctx * _t(ctx, node) * _t(ctx, node),)),
  (UPat(Ops.SQRT, name="node"), lambda ctx, node: (ctx / (_t(ctx, node) * 2),)),
  (UPat(Ops.EXP2, name="node"), lambda ctx, node: (ctx * _t(ctx, node) * LN_2,)),
  (UPat(Ops.LOG2, name="node"), lambda ctx, node: (ctx / (_t(ctx, node.src[0]) * LN_2),)),
  (UPat(Ops.SIN, name="node"), lambda ctx, node: (ctx * (math.pi / 2 - _t(ctx, node.src[0])).sin(),)),
  (UPat(Ops.FDIV, name="node"), lambda ctx, node: (
    ctx / _t(ctx, node.src[1]), -ctx * _t(ctx, node.src[0]) / (_t(ctx, node.src[1]) * _t(ctx, node.src[1])))),
  (UPat(Ops.MAX, name="node"), _max_grad),
  (UPat(Ops.WHERE, name="node"), lambda ctx, node: (
    None, _t(ctx, node.src[0]).where(ctx, 0.0), _t(ctx, node.src[0]).where(0.0, ctx))),
  (UPat(Ops.CAST, name="node"), _cast_grad),
  (UPat((Ops.TRUNC, Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
         Ops.BITCAST, Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.DETACH), name="node"), _no_grad),
  (UPat(Ops.RESHAPE, name="node"), lambda ctx, node: (ctx.reshape(node.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="node"), _permute_grad),
  (UPat(Ops.EXPAND, name="node"), _expand_grad),
  (UPat(Ops.PAD, name="node"), _pad_grad),
  (UPat(Ops.SHRINK, name="node"), _shrink_grad),
  (UPat(Ops.FLIP, name="node"), lambda ctx, node: (ctx.flip(tuple(i for i, f in enumerate(node.arg) if f)),)),
  (UPat(Ops.REDUCE_AXIS, name="node"), _reduce_grad),
  (UPat((Ops.CONTIGUOUS, Ops.ASSIGN), name="node"), lambda ctx, node: (ctx,) + (None,) * (len(node.src) - 1)),
  (UPat(Ops.COPY, name="node"), lambda ctx, node: (ctx.to(node.src[0].device),)),
])


def _on_path(root: UOp, targets: set[UOp]) -> set[UOp]:
  """Nodes of root's graph from which some target can be reached: only they need a gradient."""
  needed: set[UOp] = set()
  for node in root.toposort:
    if node in targets or any(s in needed for s in node.src):
      needed.add(node)
  return needed


def compute_gradients(root: Any, seed: Any, targets: list[UOp]) -> dict[UOp, Any]:
  """Gradients (Tensors) of `root` (a Tensor) with respect to each target node, starting from `seed`.

  Targets the output does not depend on are absent from the result."""
  wanted = set(targets)
  needed = _on_path(root.uop, wanted)
  grads: dict[UOp, Any] = {root.uop: seed}
  for node in reversed(root.uop.toposort):
    if node not in grads or node not in needed:
      continue
    if node.op in GroupOp.Comparison or (not dtypes.is_float(node.dtype) and node.op is not Ops.CAST):
      continue  # integer and boolean values carry no gradient
    src_grads = GRADIENT_RULES.rewrite(node, ctx=grads[node])
    if src_grads is None:
      raise NotImplementedError(f"no gradient rule for {node.op}")
    for src, g in zip(node.src, src_grads):
      if g is None or src not in needed:
        continue
      grads[src] = g if src not in grads else grads[src] + g
  return {t: grads[t] for t in targets if t in grads}
