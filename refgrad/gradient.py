"""Reverse-mode differentiation as rules over the tensor graph.

`GRADIENT_RULES` is one table: for each tensor-level op, a rule that takes the gradient of the node's output
(`ctx`, a Tensor) and the node, and returns the gradient of each source (None where the source gets none).
`compute_gradients` walks the graph backwards from the output, asks the rule matcher for each node and sums
the contributions. Rules are written with Tensor methods, so they build lazy graphs like any other code and
are scheduled and fused with everything else.

`CUSTOM_RULES` is the second table: named rules for `Ops.CUSTOM_GRAD` nodes, which the frontend puts around
functions whose composite form differentiates badly (0 * inf in an untaken `where` branch, or the wrong side of a
kink); see `custom_gradient` and the "Gradients" section of docs/SPEC.md.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from refgrad.device import LRU
from refgrad.dtype import DType, compute_dtype, dtypes
from refgrad.rewrite import PatternMatcher, UPat
from refgrad.uop import GroupOp, Ops, UOp, arg_key, walk

LN_2 = math.log(2)
TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


def _t(g: Any, u: UOp) -> Any:
  """The Tensor view of a graph node, made like g (so the rules can use Tensor methods)."""
  return g._from(u)


def _through(ctx: Any, contribution: Any) -> Any:
  """A contribution computed from the incoming gradient ctx, except that a zero ctx contributes 0 where the local
  derivative overflowed or is undefined (0 * inf, 0 / 0, 0 * NaN): no gradient flows through a zero. So
  exp(x) / (1 + exp(x)) differentiates to 0 at x = 300, where exp overflows, rather than NaN (torch: NaN)."""
  return (ctx.eq(0) & contribution.ne(contribution)).where(0.0, contribution)


def _fdiv_grad(ctx: Any, node: UOp) -> tuple:
  """a / b: a gets ctx / b, b gets -ctx (a / b) / b, torch's formula (b * b would under- or overflow). Where a's
  share is 0 because b is infinite, b's is 0 too, also when a is infinite and the quotient NaN (inf / inf)."""
  b = _t(ctx, node.src[1])
  to_a = _through(ctx, ctx / b)
  return to_a, _through(to_a, -ctx * (_t(ctx, node) / b))


def _max_grad(ctx: Any, node: UOp) -> tuple:
  """Ties share the gradient equally, as torch.maximum does."""
  a, b, out = _t(ctx, node.src[0]), _t(ctx, node.src[1]), _t(ctx, node)
  a_wins, b_wins = a.eq(out).cast(ctx.dtype), b.eq(out).cast(ctx.dtype)
  share = ctx / (a_wins + b_wins).maximum(1)
  return share * a_wins, share * b_wins


def _fmod_grad(ctx: Any, node: UOp) -> tuple:
  """fmod(a, b) = a - q b, q the exact quotient truncated: a gets ctx, b gets -ctx q. q is read off the remainder the
  forward computed, (a - fmod(a, b)) / b rounded (an integer up to rounding), as torch's floor division reads it:
  trunc(a / b) is another integer where a / b rounds up to one (-0.5 / -0.001 is 500.0, q is 499). With `%`'s sign
  fix (+b) this gives b torch's -floor_divide(a, b). b == 0 gives q = a / b (torch); an infinite a, a NaN q."""
  a, b = _t(ctx, node.src[0]), _t(ctx, node.src[1])
  wide = compute_dtype(ctx.dtype)  # half's q is an integer beyond 2048: rounding (a - r) / b in half could miss it
  exact = ((a.cast(wide) - _t(ctx, node).cast(wide)) / b.cast(wide)).round().cast(ctx.dtype)
  return ctx, -ctx * b.eq(0).where(a / b, exact)


def _reduce_grad(ctx: Any, node: UOp) -> tuple:
  op, axes = node.arg
  src = _t(ctx, node.src[0])
  if op is Ops.ADD:
    return (ctx.expand(src.shape),)
  out = _t(ctx, node).expand(src.shape)
  if op is Ops.MAX:  # every maximum shares the gradient equally
    # the ties are counted in float32 for half and bfloat16 (exact up to 2^24): a half-precision count of 10001 ties
    # depends on the order of its sum (anything from 2048 up), which SPEC.md leaves free
    wide = compute_dtype(ctx.dtype)
    hits = src.eq(out).cast(wide)
    share = ctx.cast(wide).expand(src.shape) * hits / hits._reduce(Ops.ADD, axes, keepdim=True).expand(src.shape)
    return (share.cast(ctx.dtype),)
  return (ctx.expand(src.shape) * _product_of_others(src, out, axes),)


def _product_of_others(src: Any, out: Any, axes: tuple[int, ...]) -> Any:
  """d prod(x) / d x_i, the product of the other elements, as torch computes it: out / x_i while no element is 0;
  with exactly one 0, the product of the nonzero elements at the 0 and 0 elsewhere; with more, 0 everywhere."""
  is_zero = src.eq(0)
  zeros = is_zero.cast(dtypes.int32)._reduce(Ops.ADD, axes, keepdim=True).expand(src.shape)
  nonzero_product = is_zero.where(1.0, src)._reduce(Ops.MUL, axes, keepdim=True).expand(src.shape)
  return zeros.eq(0).where(out / src, (zeros.eq(1) & is_zero).where(nonzero_product, 0.0))


def _permute_grad(ctx: Any, node: UOp) -> tuple:
  inverse = [0] * len(node.arg)
  for i, axis in enumerate(node.arg):
    inverse[axis] = i
  return (ctx.permute(inverse),)


def _expand_grad(ctx: Any, node: UOp) -> tuple:
  src_shape = node.src[0].shape
  axes = tuple(i for i, (s, t) in enumerate(zip(src_shape, node.shape)) if s != t)
  grad = ctx.cast(compute_dtype(ctx.dtype))
  return (grad._reduce(Ops.ADD, axes, keepdim=True).cast(ctx.dtype) if axes else ctx,)


def _pad_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.shrink(tuple((before, before + s) for (before, _), s in zip(node.arg, node.src[0].shape))),)


def _shrink_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.pad(tuple((start, s - end) for (start, end), s in zip(node.arg, node.src[0].shape))),)


def _cast_grad(ctx: Any, node: UOp) -> tuple:
  return (ctx.cast(node.src[0].dtype) if dtypes.is_float(node.src[0].dtype) else None,)


def _no_grad(ctx: Any, node: UOp) -> tuple:
  return (None,) * len(node.src)


def _multi_grad(ctx: Any, node: UOp) -> tuple:
  """Each part of a tensor over several devices gets its range of the gradient, on its device. Replicated parts are
  one value: the first gets the whole gradient, the others none (else a source copied to each would get it n times)."""
  axis, bounds = node.arg
  if axis is None:
    return (ctx.to(node.src[0].device),) + (None,) * (len(node.src) - 1)
  return tuple(ctx.shrink(tuple((lo, hi) if k == axis else None for k in range(ctx.ndim))).to(part.device)
               for part, (lo, hi) in zip(node.src, bounds))


GRADIENT_RULES = PatternMatcher([
  (UPat(Ops.ADD, name="node"), lambda ctx, node: (ctx, ctx)),
  (UPat(Ops.MUL, name="node"), lambda ctx, node: (ctx * _t(ctx, node.src[1]), ctx * _t(ctx, node.src[0]))),
  (UPat(Ops.NEG, name="node"), lambda ctx, node: (-ctx,)),
  (UPat(Ops.RECIP, name="node"), lambda ctx, node: (_through(ctx, -ctx * _t(ctx, node) * _t(ctx, node)),)),
  (UPat(Ops.SQRT, name="node"), lambda ctx, node: (_through(ctx, ctx / (_t(ctx, node) * 2)),)),
  (UPat(Ops.EXP2, name="node"), lambda ctx, node: (_through(ctx, ctx * _t(ctx, node) * LN_2),)),
  (UPat(Ops.LOG2, name="node"), lambda ctx, node: (_through(ctx, ctx / (_t(ctx, node.src[0]) * LN_2)),)),
  (UPat(Ops.SIN, name="node"), lambda ctx, node: (ctx * (math.pi / 2 - _t(ctx, node.src[0])).sin(),)),
  (UPat(Ops.FDIV, name="node"), _fdiv_grad),
  (UPat(Ops.MAX, name="node"), _max_grad),
  (UPat(Ops.WHERE, name="node"), lambda ctx, node: (
    None, _t(ctx, node.src[0]).where(ctx, 0.0), _t(ctx, node.src[0]).where(0.0, ctx))),
  (UPat(Ops.CAST, name="node"), _cast_grad),
  (UPat(Ops.MOD, name="node"), _fmod_grad),
  (UPat(Ops.CUSTOM_GRAD, name="node"), lambda ctx, node: (
    None, *CUSTOM_RULES[node.arg[0]](ctx, _t(ctx, node), [_t(ctx, s) for s in node.src[1:]], *node.arg[1:]))),
  (UPat((Ops.TRUNC, Ops.IDIV, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
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
  (UPat(Ops.MULTI, name="node"), _multi_grad),
])


# ---- named rules for Ops.CUSTOM_GRAD: rule(ctx, out, inputs, *params) -> the gradient of each input
def custom_gradient(value: Any, rule: tuple, *inputs: Any) -> Any:
  """`value` (a Tensor), differentiated with respect to `inputs` by the named rule CUSTOM_RULES[rule[0]] (with
  parameters rule[1:]) instead of through the ops that computed it. For functions whose composite form has a
  derivative that is 0 * inf somewhere, or that picks the wrong side of a kink. Adds nothing to the forward pass."""
  return value._from(UOp(Ops.CUSTOM_GRAD, value.dtype, (value.uop, *(t.uop for t in inputs)), rule))


def _pow_rule(ctx: Any, out: Any, xs: list) -> tuple:
  """torch's pow backward: exponent 0 gives no gradient to the base, and a base of 0 with exponent >= 0 none to the
  exponent (so 0**0, 0**y and x**0 are all finite)."""
  x, y = xs
  dx = y.eq(0).where(0.0, ctx * (y * x.pow(y - 1)))  # y * x**(y-1) first: ctx * y may be subnormal
  dy = (x.eq(0) & y.ge(0)).where(0.0, ctx * out * x.log())
  return dx, dy


def _clamp_rule(ctx: Any, out: Any, xs: list, has_min: bool, has_max: bool) -> tuple:
  """torch.clamp's: x gets the gradient inside the bounds, bounds included; a bound gets it where x is beyond it,
  and when min > max, max takes it all (as the value is max)."""
  x, lo, hi = xs[0], xs[1] if has_min else None, xs[-1] if has_max else None
  inside = x.ge(lo) & x.le(hi) if has_min and has_max else x.ge(lo) if has_min else x.le(hi)
  grads = [inside.where(ctx, 0.0)]
  if has_min:
    grads.append((x.lt(lo) & lo.lt(hi) if has_max else x.lt(lo)).where(ctx, 0.0))
  if has_max:
    grads.append((x.gt(hi) | hi.lt(lo) if has_min else x.gt(hi)).where(ctx, 0.0))
  return tuple(grads)


def _binary_crossentropy_rule(ctx: Any, out: Any, xs: list) -> tuple:
  """torch's: the logs are clamped at -100 in the loss, and (1 - p) p at 1e-12 in the gradient, so p = 0 or 1
  gives a finite gradient."""
  p, y = xs
  return ctx * (p - y) / ((1 - p) * p).maximum(1e-12), ctx * ((1 - p).log() - p.log())


def _cat_rule(ctx: Any, out: Any, xs: list, dim: int) -> tuple:
  """Each input's slice of the output's gradient along dim; a 1-d empty input (which cat skips) gets an empty one."""
  grads, start = [], 0
  for x in xs:
    if x.numel() == 0:
      grads.append(x.zeros_like())
      continue
    size = x.shape[dim]
    grads.append(ctx.shrink(tuple((start, start + size) if k == dim else None for k in range(ctx.ndim))))
    start += size
  return tuple(grads)


def _softmax_rule(ctx: Any, out: Any, xs: list, axis: int) -> tuple:
  return (out * (ctx - (ctx * out).sum(axis, keepdim=True)),)


def _log_softmax_rule(ctx: Any, out: Any, xs: list, axis: int) -> tuple:
  return (ctx - out.exp() * ctx.sum(axis, keepdim=True),)


def _logsumexp_rule(ctx: Any, out: Any, xs: list) -> tuple:
  """out keeps the reduced dims (size 1): the gradient is softmax(x), as exp(x - out). A zero ctx stays zero where a
  window is all -inf (exp(-inf - -inf) is NaN): logcumsumexp's block scans hand their -inf prefixes a zero ctx, and
  gave NaN gradients where torch gives 0 (a run of -inf starting a block of 32)."""
  x, g = xs[0], ctx.expand(xs[0].shape)
  return (_through(g, g * (x - out.expand(x.shape)).exp()),)


# Unary rules are written on x = inputs[0] and out; comparisons are written as torch writes them, so that NaN
# inputs take the same side.
CUSTOM_RULES: dict[str, Callable[..., tuple]] = {
  "constant": lambda ctx, out, xs: (ctx.zeros_like(),),
  "sigmoid": lambda ctx, out, xs: (ctx * out * (1 - out),),
  "tanh": lambda ctx, out, xs: (ctx * (1 - out * out),),
  "erf": lambda ctx, out, xs: (ctx * (-(xs[0] * xs[0])).exp() * TWO_OVER_SQRT_PI,),
  "expm1": lambda ctx, out, xs: (ctx * xs[0].exp(),),
  "log1p": lambda ctx, out, xs: (ctx / (xs[0] + 1),),
  # std = sqrt(var): torch gives no gradient where std is 0 (rather than inf * 0)
  "std": lambda ctx, out, xs: (out.eq(0).where(0.0, ctx / (out * 2)),),
  # relu'(0) = 0, from the output as torch's threshold_backward
  "relu": lambda ctx, out, xs: (out.le(0).where(0.0, ctx),),
  # hardtanh, relu6 and hardsigmoid: 0 at both bounds (torch's hardtanh_backward), unlike clamp
  "hardtanh": lambda ctx, out, xs, lo, hi: ((xs[0].le(lo) | xs[0].ge(hi)).where(0.0, ctx),),
  # torch's hardswish_backward: 0 up to -3, x / 3 + 1/2 strictly between -3 and 3, 1 from 3 on
  "hardswish": lambda ctx, out, xs: (xs[0].le(-3).where(0.0, xs[0].lt(3).where(ctx * (xs[0] / 3 + 0.5), ctx)),),
  # elu, celu, selu: alpha * input_scale * exp(x * input_scale) for x <= 0 (so elu'(0) = alpha, as torch)
  "elu": lambda ctx, out, xs, alpha, scale: (
    xs[0].le(0).where(ctx * (alpha * scale) * (xs[0] * scale).exp(), ctx),),
  # sigmoid(beta x) is torch's exp(beta x) / (exp(beta x) + 1) without its overflow to inf / inf
  "softplus": lambda ctx, out, xs, beta, threshold: (
    (xs[0] * beta).gt(threshold).where(ctx, ctx * (xs[0] * beta).sigmoid()),),
  "logsigmoid": lambda ctx, out, xs: (ctx * (-xs[0]).sigmoid(),),
  # trig, hyperbolic and their inverses: torch's formulas, on x (the composite forms choose between branches
  # with where, and an unused branch's infinite derivative would turn its zero gradient into NaN)
  "atan": lambda ctx, out, xs: (ctx / (xs[0] * xs[0] + 1),),
  "asin": lambda ctx, out, xs: (ctx * (1 - xs[0] * xs[0]).rsqrt(),),
  "acos": lambda ctx, out, xs: (-ctx * (1 - xs[0] * xs[0]).rsqrt(),),
  "cos": lambda ctx, out, xs: (-ctx * xs[0].sin(),),
  "sinh": lambda ctx, out, xs: (ctx * xs[0].cosh(),),
  "cosh": lambda ctx, out, xs: (ctx * xs[0].sinh(),),
  "asinh": lambda ctx, out, xs: (ctx * (xs[0] * xs[0] + 1).rsqrt(),),
  "acosh": lambda ctx, out, xs: (ctx * (xs[0] * xs[0] - 1).rsqrt(),),
  "atanh": lambda ctx, out, xs: (ctx / (1 - xs[0] * xs[0]),),
  # copysign: +-g to x by whether the sign changed, 0 at x == 0 (torch; its out / x is NaN at inf), none to the sign
  "copysign": lambda ctx, out, xs: (
    xs[0].eq(0).where(0.0, xs[0].signbit().ne(out.signbit()).where(-ctx, ctx)), out.zeros_like()),
  "pow": _pow_rule,
  "clamp": _clamp_rule,
  "binary_crossentropy": _binary_crossentropy_rule,
  "cat": _cat_rule,
  "softmax": _softmax_rule,
  "log_softmax": _log_softmax_rule,
  "logsumexp": _logsumexp_rule,
}


def _on_path(root: UOp, targets: set[UOp]) -> set[UOp]:
  """Nodes of root's graph from which some target can be reached: only they need a gradient."""
  needed: set[UOp] = set()
  for node in root.toposort:
    if node in targets or any(s in needed for s in node.src):
      needed.add(node)
  return needed


def compute_gradients(root: Any, seed: Any, targets: list[UOp]) -> dict[UOp, Any]:
  """Gradients (Tensors) of `root` (a Tensor) with respect to each target node, starting from `seed`.

  A target the output reaches only through piecewise-constant ops (sign, comparisons, floor, integer casts) gets
  zeros, as in torch; targets the output does not depend on, or only through detach(), are absent. A graph of a
  structure differentiated lately gets its gradients rebuilt from the cached template (_GRADIENTS)."""
  if (structure := _structure(root.uop, seed.uop, targets)) is None:
    return _differentiate(root, seed, targets)
  order, key = structure
  if (template := _GRADIENTS.get(key)) is not None:
    return template.instantiate(order, seed)
  grads = _differentiate(root, seed, targets)
  if (template := GradientTemplate.of(order, grads)) is not None:
    _GRADIENTS.put(key, template)
  return grads


def _differentiate(root: Any, seed: Any, targets: list[UOp]) -> dict[UOp, Any]:
  """compute_gradients' work, by the rules."""
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
  live = reachable_without_detach(root.uop)
  return {t: grads[t] if t in grads else _t(seed, t).zeros_like() for t in targets if t in grads or t in live}


_TRACKED = frozenset({Ops.MULTI, Ops.DEFINE_VAR, Ops.BIND})


def _structure(root: UOp, seed: UOp, targets: list[UOp]) -> tuple[list[UOp], tuple] | None:
  """The nodes of the graphs of root, seed and targets (each after its sources), and a key that two graphs share
  when the rules make the same gradient graphs of them, but for the buffers: a buffer is its dtype, device, size and
  slot (distinct buffers get distinct slots), a node without sources (a constant, a device) itself, any other node
  its op, dtype, arg (as hash-consing tells args apart) and its sources' positions. The rules' Python constants take
  the default dtypes, which are part of the key. None for a graph over several devices or of symbolic shape: the
  rules make such nodes through helpers that keep track of them (multi.py, symbolic_shapes.py)."""
  position: dict[UOp, int] = {}
  for graph_root in (root, seed, *targets):
    if graph_root not in position:
      for node in graph_root.toposort:
        position.setdefault(node, len(position))
  order = list(position)
  slots: dict[UOp, int] = {}
  entries: list[Any] = []
  for node in order:
    if node.op in _TRACKED or (node.op is Ops.DEVICE and type(node.arg) is tuple):
      return None
    if node.op is Ops.BUFFER:
      entries.append((Ops.BUFFER, node.dtype, node.arg.device, node.arg.size, slots.setdefault(node, len(slots))))
    elif not node.src:
      entries.append(node)
    else:
      entries.append((node.op, node.dtype, arg_key(node.arg), *[position[s] for s in node.src]))
  ends = (position[root], position[seed], *[position[t] for t in targets])
  return order, (ends, dtypes.default_float, dtypes.default_int, *entries)


@dataclass(frozen=True)
class GradientTemplate:
  """The gradient graphs of one graph structure: `nodes` are the nodes the rules made, each (op, dtype, arg, its
  sources' references), a reference being a position in the structure's order or, past its end, one of these nodes;
  `results` (target's position, its gradient's reference). It holds no buffer and no node of the graph."""
  nodes: tuple[tuple[Ops, DType, Any, tuple[int, ...]], ...]
  results: tuple[tuple[int, int], ...]

  @staticmethod
  def of(order: list[UOp], grads: dict[UOp, Any]) -> GradientTemplate | None:
    reference = {node: i for i, node in enumerate(order)}
    made: list[tuple[Ops, DType, Any, tuple[int, ...]]] = []
    for node in walk([g.uop for g in grads.values()], lambda n: n in reference):
      if node not in reference:
        if node.op is Ops.BUFFER:  # a buffer the rules made would be shared by every graph of the structure
          return None
        reference[node] = len(reference)
        made.append((node.op, node.dtype, node.arg, tuple(reference[s] for s in node.src)))
    return GradientTemplate(tuple(made), tuple((reference[t], reference[g.uop]) for t, g in grads.items()))

  def instantiate(self, order: list[UOp], seed: Any) -> dict[UOp, Any]:
    """The gradients of the graph of `order` (a graph of this template's structure), as Tensors made like seed."""
    nodes = list(order)
    for op, dtype, arg, src in self.nodes:
      nodes.append(UOp(op, dtype, tuple([nodes[i] for i in src]), arg))
    return {nodes[target]: _t(seed, nodes[grad]) for target, grad in self.results}


# The gradient graphs of the graph structures differentiated last: a training step differentiates a graph of one
# structure over new buffers every step, and the rules' Tensor ops cost several times what rebuilding the nodes
# they made does. An entry holds ops, dtypes, args and constants' nodes, no buffer.
GRADIENT_CACHE_SIZE = 16
_GRADIENTS: LRU[GradientTemplate] = LRU(GRADIENT_CACHE_SIZE)


def reachable_without_detach(root: UOp) -> set[UOp]:
  """The nodes of root's graph that gradients can reach: every node not behind a DETACH."""
  seen, stack = set(), [root]
  while stack:
    node = stack.pop()
    if node not in seen and node.op is not Ops.DETACH:
      seen.add(node)
      stack.extend(node.src)
  return seen
