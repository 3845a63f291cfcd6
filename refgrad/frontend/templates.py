"""Graph templates: the nodes a composite Tensor function (a convolution, a pool, a loss, an optimizer's update of one
parameter) builds, kept by what the function's graph depends on, so that a call like an earlier one rebuilds the
nodes directly instead of running the function's Tensor ops again (a training step makes the same calls on new
tensors every step; the Tensor ops cost several times what making their nodes does).

The contract of a function decorated with `graph_template`: its graph depends only on its arguments that are not
tensors, on each tensor argument's type, shape, dtype and device (never on its graph node), and on the switches in
`_modes` (training, no_grad, the default dtypes). A call that draws random numbers, reads a buffer, writes an
argument or returns a view of one is not templated (its recording is refused). A template is recorded on
placeholder tensors (a buffer of the argument's shape each, never allocated), so that no node the function makes
can coincide with a node of an argument's graph; which arguments are the same tensor node is part of the key."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from refgrad.buffer import Buffer
from refgrad.device import LRU
from refgrad.dtype import DType, dtypes
from refgrad.frontend import random as rng
from refgrad.frontend.base import TensorBase
from refgrad.schedule import buffer_node
from refgrad.uop import Ops, UOp, prod

# Entries: (function, its arguments' key) -> a GraphTemplate, or REFUSED for a call whose graph cannot be templated.
# An entry holds ops, dtypes, args and constant nodes, no buffer. A training step makes a few calls per layer and one
# update per parameter shape; 256 keep the calls of a few models of several shapes.
TEMPLATE_CACHE_SIZE = 256
ENABLED = True  # False: every decorated function runs its Tensor ops (tests compare both)
_TEMPLATES: LRU[Any] = LRU(TEMPLATE_CACHE_SIZE)
REFUSED = object()
_UNTEMPLATED = frozenset({Ops.BUFFER, Ops.MULTI, Ops.DEFINE_VAR, Ops.BIND})  # nodes a template may not make


class _NoKey(Exception):
  """An argument the key cannot stand for (a list of tensors, a numpy array, a symbolic shape ...)."""


@dataclass(frozen=True)
class GraphTemplate:
  """`nodes`: what the function made, each a source-less node (kept as it is) or (op, dtype, arg, its sources'
  references), a reference being an argument tensor's position or, past the arguments, one of these nodes;
  `outputs`: each result's reference; `tuple_result`: the function returns a tuple (else its one result)."""
  nodes: tuple[UOp | tuple[Ops, DType, Any, tuple[int, ...]], ...]
  outputs: tuple[int, ...]
  tuple_result: bool

  @staticmethod
  def of(inputs: list[UOp], outputs: list[UOp], tuple_result: bool) -> GraphTemplate | None:
    reference: dict[UOp, int] = {}
    for i, node in enumerate(inputs):
      reference.setdefault(node, i)
    made: list[UOp | tuple[Ops, DType, Any, tuple[int, ...]]] = []
    stack = [(node, False) for node in reversed(outputs)]
    while stack:  # sources before their users
      node, expanded = stack.pop()
      if node in reference:
        continue
      if not expanded:
        if node.op in _UNTEMPLATED or (node.op is Ops.DEVICE and type(node.arg) is tuple):
          return None
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if s not in reference)
        continue
      reference[node] = len(inputs) + len(made)
      made.append((node.op, node.dtype, node.arg, tuple(reference[s] for s in node.src)) if node.src else node)
    if any(reference[out] < len(inputs) for out in outputs):
      return None  # an argument returned as it is: the caller gets that tensor object, not a new one
    return GraphTemplate(tuple(made), tuple(reference[out] for out in outputs), tuple_result)

  def instantiate(self, inputs: list[UOp]) -> list[UOp]:
    nodes = list(inputs)
    for entry in self.nodes:
      nodes.append(entry if type(entry) is UOp else UOp(entry[0], entry[1], tuple([nodes[i] for i in entry[3]]),
                                                        entry[2]))
    return [nodes[i] for i in self.outputs]


def _value_key(value: Any) -> Any:
  """A key that tells apart what the function may tell apart: 1, True and 1.0, 0.0 and -0.0."""
  kind = type(value)
  if kind is float:
    return (float, "nan" if math.isnan(value) else value.hex())
  if kind in (int, bool, str, DType) or value is None:
    return (kind, value)
  if kind in (tuple, list):
    return (kind, *[_value_key(v) for v in value])
  raise _NoKey


def _call_key(fn: Callable, args: tuple, kwargs: dict) -> tuple[tuple, list[Any]]:
  """The key of a call and its tensor arguments, in order (positional, then keyword by name)."""
  tensors: list[Any] = []
  slots: dict[UOp, int] = {}
  key: list[Any] = [fn, *_modes(args[0])]
  for name, value in [*enumerate(args), *sorted(kwargs.items())]:
    if isinstance(value, TensorBase):
      shape, device = value.shape, value.device
      if type(device) is not str or any(type(s) is not int for s in shape):
        raise _NoKey
      node = value.uop
      # which arguments are one node: a template made from x * x would compute x * y as x * x
      key.append((name, type(value), slots.setdefault(node, len(slots)), shape, value.dtype, device))
      tensors.append(value)
    else:
      key.append((name, _value_key(value)))
  return tuple(key), tensors


def _modes(t: Any) -> tuple:
  """What a function's graph may depend on besides its arguments: the Tensor class's switches and the dtypes of
  Python constants."""
  cls = type(t)
  return cls.training, cls.no_grad, dtypes.default_float, dtypes.default_int


def graph_template(fn: Callable) -> Callable:
  """Decorate a composite Tensor function (first argument a tensor, results a tensor or a tuple of tensors) that
  keeps the contract in the module's docstring."""
  @functools.wraps(fn)
  def templated(*args: Any, **kwargs: Any) -> Any:
    if not ENABLED or not isinstance(args[0], TensorBase):
      return fn(*args, **kwargs)
    try:
      key, tensors = _call_key(fn, args, kwargs)
    except _NoKey:
      return fn(*args, **kwargs)
    template = _TEMPLATES.get(key)
    if template is None:
      try:
        template = _record(fn, args, kwargs, tensors)
      except Exception:  # the real call raises its own error, with its own tensors
        return fn(*args, **kwargs)
      _TEMPLATES.put(key, template)
    if template is REFUSED:
      return fn(*args, **kwargs)
    outputs = [args[0]._from(node) for node in template.instantiate([t.uop for t in tensors])]
    return tuple(outputs) if template.tuple_result else outputs[0]
  return templated


def _record(fn: Callable, args: tuple, kwargs: dict, tensors: list[Any]) -> Any:
  """The template of fn's graph, made by calling it on placeholders of its tensor arguments (an error the call raises
  is raised again by the real call), or REFUSED. Arguments of one node get one placeholder."""
  placeholders: dict[UOp, Any] = {}
  for t in tensors:
    if t.uop not in placeholders:
      placeholders[t.uop] = t._from(buffer_node(Buffer(t.device, prod(t.shape), t.dtype), t.shape))
  inputs = [placeholders[t.uop].uop for t in tensors]

  def stand_in(value: Any) -> Any:
    return placeholders[value.uop] if isinstance(value, TensorBase) else value
  counter = rng.STATE.counter
  result = fn(*[stand_in(a) for a in args], **{k: stand_in(v) for k, v in kwargs.items()})
  outputs = result if isinstance(result, tuple) else (result,)
  if rng.STATE.counter != counter or [placeholders[t.uop].uop for t in tensors] != inputs or \
     not all(isinstance(o, TensorBase) and _plain(o) for o in outputs):
    return REFUSED  # it drew random numbers, wrote an argument, returned no tensor or a view of a tensor that lives
  template = GraphTemplate.of(inputs, [o.uop for o in outputs], isinstance(result, tuple))
  return REFUSED if template is None else template


def _plain(t: Any) -> bool:
  """No view, or a view of a tensor that is gone (an intermediate of the function, as `x.max(axis)` reshapes the
  reduce's result): the same as no view (views.ViewLink.sync). A view of an argument writes through to it."""
  return t._view is None or t._view.base() is None
