"""Tensors over several devices: the frontend builds ordinary ops on a `MULTI` node (whose shape is the whole tensor),
and before scheduling, `lower_multi` turns each such graph into one graph per device, joined by copies.

A lowered MULTI holds one part per device and arg (axis, bounds): with axis None every part is the whole tensor
(replicated); otherwise part i holds the range bounds[i] = (start, end) of that axis. The rules below say how each
op runs on parts:
- elementwise ops run part by part, after their inputs are brought to one layout (a replicated input is shrunk to
  each part's range; an input split differently is gathered and split again);
- movement ops run part by part with their arg mapped onto the part (a shrink of the split axis keeps what each
  part holds of the range, a flip reverses the bounds); a reshape that cannot keep the split axis whole in one new
  axis, and an expand of the split axis, first make the tensor replicated;
- a reduce over the split axis reduces each part, then an ALLREDUCE on every device adds (or multiplies, or takes
  the max of) every part's partial result (realize.run_transfer; a device may do it natively);
- a copy to one device gathers the parts there and joins them.
Every step is made of the single-device ops, so each device's kernels and the copies between them are scheduled and
checked like any others.
"""
from __future__ import annotations

import weakref
from typing import Any

from refgrad.dtype import dtypes
from refgrad.rewrite import PatternMatcher, UPat
from refgrad.uop import GroupOp, Ops, UOp, arg_key, prod, walk

Bounds = tuple[tuple[int, int], ...]

# Graphs lower_multi returned (each on one device): lowering them again gives them back (Tensor.realize lowers, then
# create_schedule is given the parts), so the walk stops there.
_LOWERED: weakref.WeakSet[UOp] = weakref.WeakSet()
# The nodes on several devices that exist (MULTIs, and the DEVICEs of constants on several devices): while there are
# none, no graph can hold one, and the scheduler skips the lowering walk.
_LIVE: weakref.WeakSet[UOp] = weakref.WeakSet()


def in_use() -> bool:
  return len(_LIVE) > 0


def split_bounds(size: int, count: int, splits: tuple[int, ...] | None = None) -> Bounds:
  """The range of an axis of `size` each of `count` devices holds: `splits` (sizes summing to size), or as even as
  possible with the larger parts first (as tinygrad: ceil(size / count) each, the last ones shorter or empty)."""
  if splits is None:
    step = -(-size // count) if count else 0
    splits = tuple(max(0, min(step, size - step * i)) for i in range(count))
  if len(splits) != count or any(s < 0 for s in splits) or sum(splits) != size:
    raise ValueError(f"shard: splits {tuple(splits)} must be {count} non-negative sizes summing to the axis size "
                     f"{size}")
  starts = [sum(splits[:i]) for i in range(count)]
  return tuple((start, start + s) for start, s in zip(starts, splits))


def multi(parts: list[UOp] | tuple[UOp, ...], axis: int | None, bounds: Bounds | None) -> UOp:
  node = UOp(Ops.MULTI, parts[0].dtype, tuple(parts), (axis, bounds))
  _LIVE.add(node)
  return node


# (dtype, device, Python type, arg_key of the value) -> the constant's node on one device: every Python number a
# Tensor op takes becomes one, and a training step makes the same few dozens of times. Bounded, cleared when full.
# Not for several devices: a node held here would keep multi.in_use() true.
_CONSTS: dict[tuple, UOp] = {}
_CONSTS_SIZE = 1024


def const_on(dtype: Any, value: Any, device: str | tuple[str, ...]) -> UOp:
  """A constant on a device, or on several (a tuple of names: the constant is replicated on each)."""
  kind = type(value)
  plain = type(device) is str and (kind is float or kind is int or kind is bool)
  key = (dtype, device, kind, arg_key(value)) if plain else None
  if key is not None and (found := _CONSTS.get(key)) is not None:
    return found
  device_node = UOp(Ops.DEVICE, dtypes.void, (), device)
  if isinstance(device, tuple):
    _LIVE.add(device_node)
  node = UOp.const(dtype, value).replace(src=(device_node,))
  if key is not None:
    if len(_CONSTS) >= _CONSTS_SIZE:
      _CONSTS.clear()
    _CONSTS[key] = node
  return node


# ---- single-device building blocks
def shrink_axis(node: UOp, axis: int, start: int, end: int) -> UOp:
  if (start, end) == (0, node.shape[axis]):
    return node
  arg = tuple((start, end) if i == axis else (0, s) for i, s in enumerate(node.shape))
  return UOp(Ops.SHRINK, node.dtype, (node,), arg)


def copy_to(node: UOp, device: str) -> UOp:
  return node if node.device == device else UOp(Ops.COPY, node.dtype, (node,), device)


def _pad_axis(node: UOp, axis: int, before: int, after: int) -> UOp:
  arg = tuple((before, after) if i == axis else (0, 0) for i in range(len(node.shape)))
  return UOp(Ops.PAD, node.dtype, (node,), arg)


def _join(pieces: list[UOp], axis: int) -> UOp:
  """Concatenate same-device pieces along axis: each padded to the whole and picked where it lies (a WHERE, not an
  add of zeros, which would turn -0.0 into 0.0)."""
  total, start, out = sum(p.shape[axis] for p in pieces), 0, None
  for p in pieces:
    before, after = start, total - start - p.shape[axis]
    padded = _pad_axis(p, axis, before, after)
    if out is None:
      out = padded
    else:
      true = UOp(Ops.RESHAPE, dtypes.bool, (const_on(dtypes.bool, True, p.device),), (1,) * len(p.shape))
      inside = UOp(Ops.EXPAND, dtypes.bool, (true,), p.shape)
      out = UOp(Ops.WHERE, p.dtype, (_pad_axis(inside, axis, before, after), padded, out))
    start += p.shape[axis]
  return out


# ---- layouts
def gather(m: UOp, device: str, axis: int | None = None, start: int = 0, end: int | None = None) -> UOp:
  """m on one device: all of it, or the range [start, end) of one axis."""
  split, bounds = m.arg
  if split is None:
    part = next((p for p in m.src if p.device == device), m.src[0])
    return copy_to(part if axis is None else shrink_axis(part, axis, start, end), device)
  if axis is None:
    axis, start, end = split, 0, m.shape[split]
  pieces = []
  for part, (lo, hi) in sorted(zip(m.src, bounds), key=lambda pb: pb[1]):
    if axis != split:  # the same range of another axis from every part
      pieces.append(copy_to(shrink_axis(part, axis, start, end), device))
    elif (a := max(lo, start)) < (b := min(hi, end)):
      pieces.append(copy_to(shrink_axis(part, axis, a - lo, b - lo), device))
  if not pieces:  # nothing of the range is anywhere: an empty piece of the right shape
    return copy_to(shrink_axis(m.src[0], axis, 0, 0), device)
  return _join([p for p in pieces if p.shape[split]] or pieces[:1], split)


def relayout(m: UOp, axis: int | None, bounds: Bounds | None) -> UOp:
  """m with its parts holding (axis, bounds) instead, on the same devices."""
  if m.arg == (axis, bounds):
    return m
  devices = [p.device for p in m.src]
  if axis is None:
    return multi([gather(m, d) for d in devices], None, None)
  return multi([gather(m, d, axis, lo, hi) for d, (lo, hi) in zip(devices, bounds)], axis, bounds)


def _aligned(node: UOp, srcs: tuple[UOp, ...]) -> tuple[UOp, list[tuple[UOp, ...]]]:
  """The layout an elementwise node's parts take (an assign's target's, else the first split input's) and each
  part's sources in it."""
  multis = [s for s in srcs if s.op is Ops.MULTI]
  for s in srcs:
    if s.op is not Ops.MULTI:
      raise RuntimeError(f"{node.op.name} mixes a tensor on {s.device} with one on {multis[0].device}; "
                         "move it with .to() or .shard() first")
    if s.device != multis[0].device:
      raise RuntimeError(f"{node.op.name} mixes tensors on {s.device} and {multis[0].device}")
  split = [s for s in multis if s.arg[0] is not None]
  leader = srcs[0] if node.op is Ops.ASSIGN else (split[0] if split else multis[0])
  moved = [s if s.shape == () else relayout(s, *leader.arg) for s in srcs]  # () : a scalar constant, unexpanded
  return leader, [tuple(s.src[i] for s in moved) for i in range(len(leader.src))]


# ---- the rules: (node, its lowered sources) -> the lowered node
def _per_part(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  leader, part_srcs = _aligned(node, ctx)
  return multi([node.replace(src=src) for src in part_srcs], *leader.arg)


def _device(node: UOp) -> UOp:
  return multi([node.replace(arg=d) for d in node.arg], None, None)


def _movement(node: UOp, m: UOp, part_args: list[Any], axis: int | None, bounds: Bounds | None) -> UOp:
  return multi([node.replace(src=(p,), arg=a) for p, a in zip(m.src, part_args)], axis, bounds)


def _with_axis(arg: tuple, axis: int, value: Any) -> tuple:
  return arg[:axis] + (value,) + arg[axis + 1:]


def _reshaped_axis(old: tuple[int, ...], new: tuple[int, ...], axis: int, bounds: Bounds) -> int | None:
  """The axis of `new` that holds each part's range of `old`'s split axis as one range, if there is one: its outer
  dims must have the same product, and every bound must land on a whole index of it."""
  outer, inner = prod(old[:axis]), prod(old[axis + 1:])
  fits = []
  for b in range(len(new)):
    inner_new = prod(new[b + 1:])
    if prod(new[:b]) == outer and inner_new and all(lo * inner % inner_new == 0 and hi * inner % inner_new == 0
                                                    for lo, hi in bounds):
      fits.append(b)
  return next((b for b in fits if new[b] != 1), fits[0] if fits else None)


def _reshape(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  if axis is not None and prod(m.shape) and (b := _reshaped_axis(m.shape, node.arg, axis, bounds)) is not None:
    scale = prod(m.shape[axis + 1:]), prod(node.arg[b + 1:])
    new_bounds = tuple((lo * scale[0] // scale[1], hi * scale[0] // scale[1]) for lo, hi in bounds)
    return _movement(node, m, [_with_axis(node.arg, b, hi - lo) for lo, hi in new_bounds], b, new_bounds)
  m = relayout(m, None, None)
  return _movement(node, m, [node.arg] * len(m.src), None, None)


def _permute(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  return _movement(node, m, [node.arg] * len(m.src), None if axis is None else node.arg.index(axis), bounds)


def _expand(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  if axis is not None and node.arg[axis] != m.shape[axis]:  # the split axis is broadcast: every part needs it all
    m, axis, bounds = relayout(m, None, None), None, None
  args = [node.arg if axis is None else _with_axis(node.arg, axis, p.shape[axis]) for p in m.src]
  return _movement(node, m, args, axis, bounds)


def _edge_parts(bounds: Bounds, total: int) -> tuple[int, int]:
  """The parts holding the first and the last index of the split axis (among empty parts at an end, a non-empty
  one; for an empty axis, part 0 for both)."""
  first = max(range(len(bounds)), key=lambda i: (bounds[i][0] == 0, bounds[i][1], -i))
  last = max(range(len(bounds)), key=lambda i: (bounds[i][1] == total, -bounds[i][0], -i))
  return first, last


def _pad(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  if axis is None:
    return _movement(node, m, [node.arg] * len(m.src), None, None)
  before, after = node.arg[axis]
  first, last = _edge_parts(bounds, m.shape[axis])
  args, new_bounds = [], []
  for i, (lo, hi) in enumerate(bounds):
    grow = (before if i == first else 0, after if i == last else 0)
    args.append(_with_axis(node.arg, axis, grow))
    new_bounds.append((lo + before - grow[0], hi + before + grow[1]))
  return _movement(node, m, args, axis, tuple(new_bounds))


def _shrink(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  if axis is None:
    return _movement(node, m, [node.arg] * len(m.src), None, None)
  start, end = node.arg[axis]
  args, new_bounds = [], []
  for lo, hi in bounds:
    a = min(max(lo, start), end)
    b = max(a, min(hi, end))
    args.append(_with_axis(node.arg, axis, (a - lo, b - lo)))
    new_bounds.append((a - start, b - start))
  return _movement(node, m, args, axis, tuple(new_bounds))


def _flip(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  if axis is None or not node.arg[axis]:
    return _movement(node, m, [node.arg] * len(m.src), axis, bounds)
  total = m.shape[axis]
  return _movement(node, m, [node.arg] * len(m.src), axis, tuple((total - hi, total - lo) for lo, hi in bounds))


def _reduce(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  m, (axis, bounds) = ctx[0], ctx[0].arg
  partials = [node.replace(src=(p,)) for p in m.src]
  if axis is None or axis not in node.arg[1]:
    return multi(partials, axis, bounds)
  # across devices: every device combines the partials of the parts that hold any of the axis
  held = tuple(p for p, (lo, hi) in zip(partials, bounds) if hi > lo) or tuple(partials[:1])
  return multi([UOp(Ops.ALLREDUCE, node.dtype, held, (node.arg[0], p.device)) for p in m.src], None, None)


def _copy(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  return gather(ctx[0], node.arg)


def _passthrough(ctx: tuple[UOp, ...], node: UOp) -> UOp:
  return ctx[0]


MULTI_RULES = PatternMatcher([
  (UPat(GroupOp.Elementwise | {Ops.CONST, Ops.CONTIGUOUS, Ops.ASSIGN}, name="node"), _per_part),
  (UPat((Ops.DETACH, Ops.CUSTOM_GRAD), name="node"), _passthrough),
  (UPat(Ops.RESHAPE, name="node"), _reshape),
  (UPat(Ops.PERMUTE, name="node"), _permute),
  (UPat(Ops.EXPAND, name="node"), _expand),
  (UPat(Ops.PAD, name="node"), _pad),
  (UPat(Ops.SHRINK, name="node"), _shrink),
  (UPat(Ops.FLIP, name="node"), _flip),
  (UPat(Ops.REDUCE_AXIS, name="node"), _reduce),
  (UPat(Ops.COPY, name="node"), _copy),
])


def lower_multi(roots: list[UOp], realized: Any) -> list[UOp]:
  """Each root with its graph on one device per part: a single-device node, or a MULTI of single-device parts.
  `realized` (read with get and [], as a dict) holds the nodes an earlier realize computed (schedule._REALIZED): a
  node over several devices there maps to the MULTI of its parts' buffer nodes, and the walk stops at it (a
  single-device one is lowered as any)."""
  lowered: dict[UOp, UOp] = {}

  def computed(node: UOp) -> bool:
    return isinstance(realized.get(node), UOp)
  for node in walk(roots, lambda n: n.op is Ops.BUFFER or computed(n) or n in _LOWERED):
    if computed(node):
      lowered[node] = realized[node]
      continue
    if node in _LOWERED:
      lowered[node] = node
      continue
    srcs = tuple(lowered[s] for s in node.src)
    if node.op is Ops.DEVICE and isinstance(node.arg, tuple):
      lowered[node] = _device(node)
    elif node.op is Ops.MULTI:  # its parts are on one device each (Tensor.shard copies them there)
      lowered[node] = multi(srcs, *node.arg)
    elif any(s.op is Ops.MULTI for s in srcs):
      if (rule := MULTI_RULES.rewrite(node, ctx=srcs)) is None:
        raise NotImplementedError(f"{node.op.name} is not supported on a tensor over several devices")
      lowered[node] = rule
    else:
      lowered[node] = node if srcs == node.src else node.replace(src=srcs)
  results = [lowered[r] for r in roots]
  _LOWERED.update(p for r in results for p in (r.src if r.op is Ops.MULTI else (r,)))
  return results
