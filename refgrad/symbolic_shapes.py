"""Symbolic sizes: a dim's size is an int or an expression of bound Variables (`Variable("n", 1, 10).bind(3)`).

A tensor of symbolic shape is computed by kernels compiled for the variables, not their values: the scheduler
replaces every bound variable by its unbound Variable (`unbind_arg`), so every value runs the same kernel, and the
kernel reads the values from a small int64 buffer given at launch (one slot per variable, in name order). Buffers
of symbolic tensors are laid out for the largest value of every size (`max_shape`); a kernel runs over that whole
layout and reduces only the lanes inside the bound sizes.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from refgrad.dtype import dtypes
from refgrad.uop import GroupOp, Ops, UOp, evaluate, size_sum

Size = int | UOp
VARIABLE_DTYPE = dtypes.int64
# The Variables that exist: while there are none, no graph can hold a symbolic size, and the scheduler skips looking
# for bound variables in kernels.
_LIVE: weakref.WeakSet[UOp] = weakref.WeakSet()


def in_use() -> bool:
  return len(_LIVE) > 0


def Variable(name: str, min_val: int, max_val: int) -> UOp:  # noqa: N802  (tinygrad's name: it makes a node)
  """A size that is known when the kernels run, between min_val and max_val (both included); `.bind(value)` it to
  use it in a shape.

  >>> Variable("n", 1, 10).bind(3).unbind()[1]
  3
  """
  if not isinstance(name, str) or not name:
    raise TypeError(f"Variable: the name must be a non-empty string, got {name!r}")
  for what, value in (("min_val", min_val), ("max_val", max_val)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise TypeError(f"Variable {name!r}: {what} must be an int, got {type(value).__name__}")
  if not 0 <= min_val <= max_val:
    raise ValueError(f"Variable {name!r}: needs 0 <= min_val <= max_val, got [{min_val}, {max_val}]")
  variable = UOp(Ops.DEFINE_VAR, VARIABLE_DTYPE, (), (name, int(min_val), int(max_val)))
  _LIVE.add(variable)
  return variable


class _Recording(threading.local):
  """The conditions on symbolic sizes the frontend checked in this thread while a TinyJit captures (else None)."""
  conditions: list[UOp] | None = None


RECORDING = _Recording()


def size_check(condition: Any) -> bool:
  """Whether a condition on sizes (a bool, or a comparison node of symbolic sizes) holds at the bound values: the
  frontend checks shapes as they are now, as tinygrad does. While a TinyJit captures, a symbolic condition is
  recorded, so that each replay checks it again for its own values (refgrad/jit.py) instead of running kernels on
  shapes that do not fit."""
  if not isinstance(condition, UOp):
    return bool(condition)
  if has_unbound(condition):  # no value to check: refused only if no value could satisfy it (tinygrad's leniency)
    return bool(condition.vmax)
  if RECORDING.conditions is not None:
    RECORDING.conditions.append(condition)
  return bool(evaluate(condition))


def has_unbound(size: UOp) -> bool:
  """Whether a size holds a Variable that is not bound (Variable("n", 1, 9) rather than its .bind(3))."""
  bound = {n.src[0] for n in size.toposort if n.op is Ops.BIND}
  return any(n.op is Ops.DEFINE_VAR and n not in bound for n in size.toposort)


def sizes_equal(a: Size, b: Size) -> Any:
  """a == b as a condition for size_check: a node when either is symbolic (UOp's == is identity)."""
  if not isinstance(a, UOp) and not isinstance(b, UOp):
    return a == b
  return (a if isinstance(a, UOp) else UOp.const(VARIABLE_DTYPE, a)).ne(b).ne(True)


def is_size_expression(node: Any) -> bool:
  """Whether node is an expression of Variables and constants (`v`, `v * 4 + 1`), not a tensor-graph node."""
  if not isinstance(node, UOp) or node.op is Ops.CONST:
    return False
  return all(n.op in (Ops.BIND, Ops.DEFINE_VAR) or (n.op is Ops.CONST and not n.src) or n.op in GroupOp.ALU
             for n in node.toposort)


def is_symbolic(size: Any) -> bool:
  return isinstance(size, UOp)


def is_symbolic_shape(shape: tuple) -> bool:
  return any(isinstance(s, UOp) for s in shape)


def max_size(size: Size) -> int:
  """The largest value a size can take (its buffers are laid out for it)."""
  return size if not isinstance(size, UOp) else int(size.vmax)


def max_shape(shape: tuple) -> tuple[int, ...]:
  return tuple(max_size(s) for s in shape)


def size_value(size: Size, values: dict[UOp, int] | None = None) -> int:
  """The value of a size: its bound variables' values, or for an unbound Variable its entry in `values`."""
  return evaluate(size, values) if isinstance(size, UOp) else size


def shape_value(shape: tuple, values: dict[UOp, int] | None = None) -> tuple[int, ...]:
  return tuple(size_value(s, values) for s in shape)


def bound_region(flat: Any, shape: tuple, values: dict[UOp, int] | None = None) -> Any:
  """The elements of a buffer laid out for a symbolic shape's largest sizes (`flat`, an array) that the sizes'
  values make the tensor: a view shaped shape_value(shape, values)."""
  return flat.reshape(max_shape(shape))[tuple(slice(0, n) for n in shape_value(shape, values))]


def size_const(size: UOp, dtype: Any, device: str) -> UOp:
  """A 0-d tensor node whose value is a symbolic size (a CONST whose arg is the size's expression): the kernel
  computes it from the variables it is given at launch."""
  return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.void, (), device),), size)


def map_sizes(arg: Any, fn: Any) -> Any:
  """arg (a size, or tuples of them, as op args hold them) with fn applied to each symbolic size."""
  if isinstance(arg, tuple):
    return tuple(map_sizes(a, fn) for a in arg)
  return fn(arg) if isinstance(arg, UOp) else arg


def _sizes_in(arg: Any) -> list[UOp]:
  found: list[UOp] = []
  map_sizes(arg, found.append)
  return found


def unbind_arg(arg: Any, found: dict[UOp, int]) -> Any:
  """arg with every bound variable replaced by its Variable; the values go to `found`. One Variable bound to two
  values in one kernel is an error."""
  def unbind(size: UOp) -> UOp:
    binds = [n for n in size.toposort if n.op is Ops.BIND]
    for node in binds:
      var, value = node.unbind()
      if found.setdefault(var, value) != value:
        raise ValueError(f"Variable {var.arg[0]!r} is bound to both {found[var]} and {value} in one computation")
    return size.substitute({node: node.src[0] for node in binds}) if binds else size
  return map_sizes(arg, unbind)


def variables_in(arg: Any) -> set[UOp]:
  """The unbound Variables in an arg (sizes, or tuples of them)."""
  return {n for size in _sizes_in(arg) for n in size.toposort if n.op is Ops.DEFINE_VAR}


def slot_order(variable: UOp) -> str:
  """Variables sit in a kernel's values buffer in the order of their names."""
  return variable.arg[0]


def kernel_variables(ast: UOp) -> list[UOp]:
  """The Variables a kernel compiled for them reads, in the order of their slots in its values buffer."""
  return sorted(set().union(*(variables_in(u.arg) for u in ast.toposort)), key=slot_order)


def holds_size(arg: Any) -> bool:
  return isinstance(arg, UOp) or (isinstance(arg, tuple) and any(holds_size(a) for a in arg))


def _rebuild_sized(root: UOp, remake: Any) -> UOp:
  """root with each node whose arg holds a size remade by remake(node, new sources); other nodes only get their
  rebuilt sources."""
  rebuilt: dict[UOp, UOp] = {}
  for node in root.toposort:
    src = tuple(rebuilt[s] for s in node.src)
    if holds_size(node.arg):
      rebuilt[node] = remake(node, src)
    else:
      rebuilt[node] = node if src == node.src else node.replace(src=src)
  return rebuilt[root]


def unbind_graph(root: UOp) -> tuple[UOp, dict[UOp, int]]:
  """root with every bound variable in its nodes' args (shapes, ranges, symbolic constants) unbound, and the
  values they were bound to: the graph a kernel is compiled from, the same for every value."""
  if not any(holds_size(node.arg) for node in root.toposort):
    # no node holds a size, so none holds a variable: the scheduler asks of every kernel while any Variable lives
    # (a cached kernel keeps one alive), and rebuilding and searching the graph for nothing cost a fuzz worker 4%
    return root, {}
  found: dict[UOp, int] = {}
  unbound = _rebuild_sized(root, lambda node, src: UOp(node.op, node.dtype, src, unbind_arg(node.arg, found)))
  if missing := sorted(v.arg[0] for v in kernel_variables(unbound) if v not in found):
    raise ValueError(f"Variable {missing[0]!r} is not bound: a tensor of a shape that holds it can be built but not "
                     f"computed (Variable(...).bind(value))")
  return unbound, found


def view_shape(shape: tuple) -> tuple | None:
  """How a buffer laid out for max_shape(shape) is viewed as a symbolic shape: the SHRINK arg, or None if the
  shape has no symbolic size."""
  return tuple((0, canonical(s)) for s in shape) if is_symbolic_shape(shape) else None


def canonical(size: Size) -> Size:
  """The one node of a size (uop.size_sum's form): n * 4 and 4 * n are one size."""
  return size_sum((size, 1)) if isinstance(size, UOp) else size


def concrete_graph(root: UOp, values: dict[UOp, int] | None = None) -> UOp:
  """root with the values of its sizes in place of the sizes: the graph as it is for these values (for the graph
  evaluator and the oracle's bounds, which compute on arrays of the bound shapes)."""
  def remake(node: UOp, src: tuple[UOp, ...]) -> UOp:
    if node.op is Ops.CONST:
      return UOp.const(node.dtype, size_value(node.arg, values)).replace(src=src)
    return UOp(node.op, node.dtype, src, map_sizes(node.arg, lambda size: size_value(size, values)))
  return _rebuild_sized(root, remake)


def rebind(arg: Any, values: dict[UOp, int]) -> Any:
  """arg (a size, or tuples of them) with each bound Variable in `values` bound to its value there instead."""
  def rebind_size(size: UOp) -> UOp:
    binds = {n: n.src[0].bind(values[n.src[0]]) for n in size.toposort if n.op is Ops.BIND and n.src[0] in values}
    return size.substitute(binds) if binds else size
  return map_sizes(arg, rebind_size)
