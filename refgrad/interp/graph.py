"""The graph evaluator: runs a tensor graph op by op with numpy, before any scheduling or lowering.

It shares alu.py with the kernel interpreter, so comparing the two checks the scheduler, the lowering and
the rewrite rules, not the op semantics. Undefined lanes are tracked the same way.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from refgrad import alu
from refgrad.symbolic_shapes import concrete_graph
from refgrad.symbolic_shapes import in_use as sizes_in_use
from refgrad.uop import GroupOp, Ops, UOp

Value = tuple[np.ndarray, np.ndarray | None]  # (values, undefined-lane mask or None)


def _or(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
  if a is None:
    return b
  return a if b is None else a | b


def _buffer(u: UOp, srcs: list[Value]) -> Value:
  buf = u.arg
  undefined = buf._handle.undefined if buf._handle is not None and hasattr(buf._handle, "undefined") else None
  return buf.numpy(), undefined


def _alu(u: UOp, srcs: list[Value]) -> Value:
  arrays = [v for v, _ in srcs]
  return alu.exec_alu(u.op, u.dtype, *arrays), alu.propagate_undefined(u.op, u.dtype, arrays, [m for _, m in srcs])


def _cast(u: UOp, srcs: list[Value]) -> Value:
  (x, mask), = srcs
  if u.op is Ops.BITCAST:
    return alu.exec_bitcast(x, u.dtype), _or(mask, alu.undefined_bitcast_lanes(x))
  return alu.exec_cast(x, u.dtype), _or(mask, alu.undefined_cast_lanes(x, u.dtype))


def _movement(fn: Callable[[np.ndarray, UOp], np.ndarray]) -> Callable[[UOp, list[Value]], Value]:
  def apply(u: UOp, srcs: list[Value]) -> Value:
    (x, mask), = srcs
    return fn(x, u), (fn(mask, u) if mask is not None else None)
  return apply


def _pad(x: np.ndarray, u: UOp) -> np.ndarray:
  return np.pad(x, u.arg)  # zeros (False for masks) outside


def _shrink(x: np.ndarray, u: UOp) -> np.ndarray:
  return x[tuple(slice(start, end) for start, end in u.arg)]


def _flip(x: np.ndarray, u: UOp) -> np.ndarray:
  return np.flip(x, tuple(i for i, f in enumerate(u.arg) if f))


def _reduce(u: UOp, srcs: list[Value]) -> Value:
  (x, mask), = srcs
  op, axes = u.arg
  if x.size == 0 or any(x.shape[a] == 0 for a in axes):
    return np.full(u.shape, alu.reduce_identity(op, u.dtype), dtype=u.dtype.np), None
  out = alu.exec_reduce(op, u.dtype, x, axes)
  return out, (mask.any(axis=axes, keepdims=True) if mask is not None else None)


def _multi(u: UOp, srcs: list[Value]) -> Value:
  """A tensor over several devices is the whole of its parts: each part's range of the split axis, in order."""
  axis, bounds = u.arg
  if axis is None:
    return srcs[0]
  order = sorted(range(len(srcs)), key=lambda i: bounds[i])
  values = np.concatenate([np.broadcast_to(srcs[i][0], u.src[i].shape) for i in order], axis)
  masks = [srcs[i][1] for i in order]
  if all(m is None for m in masks):
    return values, None
  full = [np.zeros(u.src[i].shape, bool) if m is None else np.broadcast_to(m, u.src[i].shape) for i, m in
          zip(order, masks)]
  return values, np.concatenate(full, axis)


def _allreduce(u: UOp, srcs: list[Value]) -> Value:
  stacked = np.stack([np.broadcast_to(v, u.shape) for v, _ in srcs])
  mask = None
  for _, m in srcs:
    mask = _or(mask, m)
  return alu.exec_reduce(u.arg[0], u.dtype, stacked, 0).reshape(u.shape), mask


EVALUATORS: dict[Ops, Callable[[UOp, list[Value]], Value]] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast,
  Ops.CONST: lambda u, srcs: (np.array(u.arg, dtype=u.dtype.np), None),
  Ops.DEVICE: lambda u, srcs: (np.zeros(()), None),
  Ops.BUFFER: _buffer,
  Ops.RESHAPE: _movement(lambda x, u: x.reshape(u.arg)),
  Ops.PERMUTE: _movement(lambda x, u: x.transpose(u.arg)),
  Ops.EXPAND: _movement(lambda x, u: np.broadcast_to(x, u.arg)),
  Ops.PAD: _movement(_pad),
  Ops.SHRINK: _movement(_shrink),
  Ops.FLIP: _movement(_flip),
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: lambda u, srcs: srcs[0],
  Ops.DETACH: lambda u, srcs: srcs[0],
  Ops.CUSTOM_GRAD: lambda u, srcs: srcs[0],
  Ops.COPY: lambda u, srcs: srcs[0],
  Ops.MULTI: _multi,
  Ops.ALLREDUCE: _allreduce,
}


def evaluate_nodes(root: UOp, leaves: dict[UOp, Value] | None = None) -> dict[UOp, Value]:
  """The value of every node of a graph; `leaves` binds nodes the evaluator cannot compute (kernel PARAMs)."""
  values: dict[UOp, Value] = dict(leaves or {})
  for node in root.toposort:
    if node in values:
      continue
    if node.op not in EVALUATORS:
      raise NotImplementedError(f"the graph evaluator has no rule for {node.op}")
    values[node] = EVALUATORS[node.op](node, [values[s] for s in node.src])
  return values


def evaluate_graph(root: UOp) -> Value:
  """The value of a tensor graph node (shape root.shape, its bound sizes for a symbolic shape) and its
  undefined-lane mask (None if all defined)."""
  root = concrete_graph(root) if sizes_in_use() else root
  value, mask = evaluate_nodes(root)[root]
  value = np.broadcast_to(value, root.shape)
  return value, (np.broadcast_to(mask, root.shape) if mask is not None and mask.any() else None)
