"""Lowering: a kernel's tensor graph becomes index math over thread and loop indices.

Each output element is computed by one thread; thread indices are `SPECIAL` nodes, one per output dim.
Movement ops never move data: they rewrite the index tuple on the way down to the loads (reshape
unflattens, permute reorders, expand pins to 0, shrink offsets, flip mirrors, pad offsets and adds a
validity condition). A reduce becomes `REDUCE(body, *RANGE)`, one `RANGE` loop per reduced axis.
"""
from __future__ import annotations

from collections.abc import Callable

from refgrad.alu import reduce_identity
from refgrad.codegen.simplify import simplify_index
from refgrad.dtype import DType, dtypes
from refgrad.symbolic_shapes import kernel_variables, max_shape, max_size
from refgrad.uop import GroupOp, Ops, UOp, prod

INDEX = dtypes.int64  # every index is int64: no overflow on any buffer size
Index = tuple[UOp, ...]


def idx_const(value: int) -> UOp:
  return UOp.const(INDEX, value)


def as_index(value: int | UOp) -> UOp:
  """An index node for a size: a constant, or a symbolic size's expression (refgrad/symbolic_shapes.py)."""
  return value if isinstance(value, UOp) else idx_const(value)


def strides_of(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, acc = [], 1
  for s in reversed(shape):
    strides.append(acc)
    acc *= s
  return tuple(reversed(strides))


def flatten_index(idx: Index, shape: tuple[int, ...]) -> UOp:
  flat = idx_const(0)
  for i, stride in zip(idx, strides_of(shape)):
    flat = flat + i * stride
  return simplify_index(flat)


def unflatten_index(flat: UOp, shape: tuple[int, ...]) -> Index:
  """The index of `shape` whose flat position is `flat`. The outermost axis takes no `% size`: an index is in
  bounds wherever its lane is valid, and where it is not (padding) the load it reaches is gated, so the remainder
  would only cost a division in the inner loop of every padded kernel (a convolution's)."""
  outer = next((axis for axis, size in enumerate(shape) if max_size(size) > 1), None)
  index = []
  for axis, (size, stride) in enumerate(zip(shape, strides_of(shape))):
    position = flat // stride if axis == outer else (flat // stride) % size
    index.append(idx_const(0) if size == 1 else simplify_index(position))
  return tuple(index)


def _and(a: UOp | None, b: UOp) -> UOp:
  return b if a is None else simplify_index(a.logical_and(b))


# ---- movement ops: how each one maps an index in its output to an index in its source
def _reshape_index(node: UOp, idx: Index) -> Index:
  return unflatten_index(flatten_index(idx, node.shape), node.src[0].shape)


def _permute_index(node: UOp, idx: Index) -> Index:
  src_idx: list[UOp] = [idx_const(0)] * len(idx)
  for out_axis, src_axis in enumerate(node.arg):
    src_idx[src_axis] = idx[out_axis]
  return tuple(src_idx)


def _expand_index(node: UOp, idx: Index) -> Index:
  return tuple(idx_const(0) if s == 1 else i for i, s in zip(idx, node.src[0].shape))


def _shrink_index(node: UOp, idx: Index) -> Index:
  return tuple(simplify_index(i + start) if start else i for i, (start, _) in zip(idx, node.arg))


def _flip_index(node: UOp, idx: Index) -> Index:
  return tuple(simplify_index(as_index(s - 1) - i) if flip else i
               for i, s, flip in zip(idx, node.shape, node.arg))


INDEX_RULES: dict[Ops, Callable[[UOp, Index], Index]] = {
  Ops.RESHAPE: _reshape_index, Ops.PERMUTE: _permute_index, Ops.EXPAND: _expand_index,
  Ops.SHRINK: _shrink_index, Ops.FLIP: _flip_index,
}


def pad_condition(node: UOp, idx: Index) -> UOp | None:
  """True where idx falls inside the source of a PAD (None when no axis is padded)."""
  cond = None
  for i, size, (before, after) in zip(idx, node.src[0].shape, node.arg):
    if before == 0 and after == 0:
      continue
    inside = as_index(before - 1).lt(i).logical_and(i.lt(as_index(before + size)))
    cond = _and(cond, simplify_index(inside))
  return cond


def _has_variable(index: UOp) -> bool:
  return any(u.op is Ops.DEFINE_VAR for u in index.toposort)


def in_buffer(index: UOp, size: int) -> UOp | None:
  """None if an index of symbolic sizes stays inside a buffer of `size` elements for every value of its
  Variables, else the condition that it does. Its lanes inside the bound shapes always do (the frontend checks
  the shapes at the bound values), but lanes outside them, which run because a kernel runs over the largest
  sizes, can reach past a buffer laid out for the bound sizes (a concrete tensor reshaped to a symbolic shape)."""
  low, high = index.vrange
  if low >= 0 and high < size:
    return None
  return simplify_index(idx_const(-1).lt(index).logical_and(index.lt(size)))


class Lowerer:
  """Lowers one kernel. Memoized per (node, index, validity), so shared subgraphs stay shared."""

  def __init__(self):
    self.memo: dict[tuple, UOp] = {}
    self.range_count = 0

  def lower(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
    key = (node, idx, valid)
    if key not in self.memo:
      self.memo[key] = self._lower(node, idx, valid)
    return self.memo[key]

  def _lower(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
    if node.op is Ops.PARAM:
      if _has_variable(idx[0]) and (inside := in_buffer(idx[0], node.arg[1])) is not None:
        valid = _and(valid, inside)
      return UOp(Ops.LOAD, node.dtype, (node, idx[0]) + ((valid,) if valid is not None else ()))
    if node.op is Ops.CONST:  # a symbolic size's value is computed from the kernel's variables
      return node.arg.cast(node.dtype) if isinstance(node.arg, UOp) else UOp.const(node.dtype, node.arg)
    if node.op in GroupOp.Elementwise:
      return node.replace(src=tuple(self.lower(s, idx, valid) for s in node.src))
    if node.op in INDEX_RULES:
      return self.lower(node.src[0], INDEX_RULES[node.op](node, idx), valid)
    if node.op is Ops.PAD:
      return self._lower_pad(node, idx, valid)
    if node.op is Ops.REDUCE_AXIS:
      return self._lower_reduce(node, idx, valid)
    raise NotImplementedError(f"cannot lower {node.op} inside a kernel")

  def _lower_pad(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
    src_idx = tuple(simplify_index(i - before) if before else i for i, (before, _) in zip(idx, node.arg))
    inside = pad_condition(node, idx)
    if inside is None:
      return self.lower(node.src[0], src_idx, valid)
    if inside.op is Ops.CONST:
      return self.lower(node.src[0], src_idx, valid) if inside.arg else UOp.const(node.dtype, 0)
    value = self.lower(node.src[0], src_idx, _and(valid, inside))
    return inside.where(value, UOp.const(node.dtype, 0))

  def _lower_reduce(self, node: UOp, idx: Index, valid: UOp | None) -> UOp:
    reduce_op, axes = node.arg
    src_shape = node.src[0].shape
    if prod(src_shape[a] for a in axes) == 0:
      return UOp.const(node.dtype, reduce_identity(reduce_op, node.dtype))
    ranges = []
    src_idx = list(idx)
    bounded = None  # the loops of symbolic size run to its largest value, adding only the lanes inside the bound
    for axis in sorted(axes):
      if src_shape[axis] == 1:
        continue
      rng = UOp(Ops.RANGE, INDEX, (), (self.range_count, max_size(src_shape[axis])))
      self.range_count += 1
      ranges.append(rng)
      src_idx[axis] = rng
      if isinstance(src_shape[axis], UOp):
        bounded = _and(bounded, rng.lt(src_shape[axis]))
    body = self.lower(node.src[0], tuple(src_idx), valid)
    if bounded is not None:
      body = bounded.where(body, UOp.const(node.dtype, reduce_identity(reduce_op, node.dtype)))
    if ranges:
      return UOp(Ops.REDUCE, node.dtype, (body, *ranges), reduce_op)
    if reduce_op is Ops.ADD and dtypes.is_float(node.dtype):
      # a sum of one element is the loop of one iteration: +0.0 + x, so the sum of a lone -0.0 is +0.0 as in a
      # longer sum (and in numpy and torch)
      return UOp(Ops.ADD, node.dtype, (body, UOp.const(node.dtype, 0.0)))
    return body


def lower_kernel(ast: UOp) -> tuple[UOp, tuple[int, ...]]:
  """SINK(STORE(PARAM, value)[, PARAM of variables]) -> SINK(STORE(PARAM, flat index, lowered value)) and the
  global shape. A symbolic shape runs over its largest sizes (the output buffer's layout), and each Variable is
  read from the variables' buffer (slot i: the i-th by name), so the kernel is the same for every value."""
  store = ast.src[0]
  out_param, value = store.src
  shape = max_shape(value.shape)
  gidx = tuple(UOp(Ops.SPECIAL, INDEX, (), (axis, size)) if size > 1 else idx_const(0)
               for axis, size in enumerate(shape))
  lowered = Lowerer().lower(value, gidx, None)
  sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_param, flatten_index(gidx, shape), lowered)),))
  if len(ast.src) > 1:
    sink = sink.substitute({u: UOp(Ops.LOAD, INDEX, (ast.src[1], idx_const(slot)))
                            for slot, u in enumerate(kernel_variables(ast))})
  return sink, shape


def param_dtypes(sink: UOp) -> dict[int, DType]:
  return {u.arg[0]: u.dtype for u in sink.toposort if u.op is Ops.PARAM}
