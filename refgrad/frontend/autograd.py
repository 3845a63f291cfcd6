"""Autograd methods of Tensor: requires_grad, gradient(), backward(), and the training/no-grad switches.

The gradient of every op comes from the rule table in refgrad/gradient.py; this file only decides which
tensors want gradients and where the results go.
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from refgrad.dtype import dtypes
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.shapes import ShapeError
from refgrad.gradient import compute_gradients, reachable_without_detach
from refgrad.schedule import computed_buffer, realized_buffer
from refgrad.symbolic_shapes import is_symbolic_shape
from refgrad.uop import Ops, UOp


class ScalarOutputError(RuntimeError, AssertionError):
  """backward()/gradient() of a non-scalar output without a seed: torch raises RuntimeError, tinygrad asserts."""


# tensors with requires_grad=True, so backward() can find the leaves of a graph
WANT_GRAD: weakref.WeakSet = weakref.WeakSet()
class LiveTensors:
  """Weak references to tensors, cheaper to add to than a WeakSet (no callback per tensor): dead ones are dropped
  when the list has doubled since the last sweep."""

  def __init__(self):
    self.refs: list[weakref.ref] = []
    self.sweep_at = 1024

  def add(self, t: Any) -> None:
    self.refs.append(weakref.ref(t))
    if len(self.refs) >= self.sweep_at:
      self.refs = [r for r in self.refs if r() is not None]
      self.sweep_at = max(1024, 2 * len(self.refs))

  def __iter__(self) -> Iterator[Any]:
    return (t for r in list(self.refs) if (t := r()) is not None)


# tensors computed while some tensor wanted gradients: backward() gives each that requires grad (computed from one
# that does) its gradient too, as tinygrad does (torch keeps only the leaves')
COMPUTED = LiveTensors()
# the nodes tensors held when they were made to require gradients: a tensor computed from one still requires them
# after that tensor is gone (`t = Tensor(x, requires_grad=True).reshape(2, 1)`), as in tinygrad
GRAD_NODES: weakref.WeakSet = weakref.WeakSet()


def _leads_to(targets: set[UOp], starts: tuple[UOp, ...], dead_ends: set[UOp]) -> bool:
  """Whether a path not through a DETACH leads from one of `starts` to a target. `dead_ends` holds nodes known to
  lead to none, shared by the searches over one graph: a search that finds nothing adds every node it saw, so the
  graph is walked in full at most once, and one that finds a target stops there (an optimizer step's updates each
  reach a parameter within a few nodes)."""
  seen: set[UOp] = set()
  stack = list(starts)
  while stack:
    node = stack.pop()
    if node in seen or node in dead_ends or node.op is Ops.DETACH:
      continue
    if node in targets:
      return True
    seen.add(node)
    stack.extend(node.src)
  dead_ends |= seen
  return False


def orphaned_grad_nodes() -> set[UOp]:
  """The nodes tensors held when made to want gradients that no such tensor holds now (the leaf of
  `Tensor(a, requires_grad=True) * 2` is gone at once): a tensor computed from one still wants gradients."""
  if not GRAD_NODES:
    return set()
  return set(GRAD_NODES) - {t.uop for t in list(WANT_GRAD)}


def computed_from(targets: set[UOp], nodes: Sequence[UOp]) -> list[bool]:
  """For each node, whether its sources lead (not through a DETACH) to a target: one walk for all of them."""
  dead_ends: set[UOp] = set()
  return [bool(targets) and _leads_to(targets, node.src, dead_ends) for node in nodes]


class _ClassSwitch(contextlib.ContextDecorator):
  """Set a class attribute of Tensor for the duration of a `with` block or a decorated function."""

  def __init__(self, cls: type, name: str, value: bool):
    self.cls, self.name, self.value = cls, name, value

  def __enter__(self) -> None:
    self.previous = getattr(self.cls, self.name)
    setattr(self.cls, self.name, self.value)

  def __exit__(self, *exc: Any) -> None:
    setattr(self.cls, self.name, self.previous)


class AutogradMixin(TensorBase):
  __slots__ = ()
  training: bool = False
  no_grad: bool = False

  # ---- switches
  @classmethod
  def train(cls, mode: bool = True) -> _ClassSwitch:
    """Context decorator: `with Tensor.train():` sets Tensor.training (dropout and batchnorm read it)."""
    return _ClassSwitch(cls, "training", mode)

  @classmethod
  def test(cls, mode: bool = True) -> _ClassSwitch:
    """Context decorator: `with Tensor.test():` sets Tensor.no_grad, as tinygrad 0.10's does (Tensor.training is
    left as it is): backward() inside stores no gradients."""
    return _ClassSwitch(cls, "no_grad", mode)

  @classmethod
  def inference_mode(cls, mode: bool = True) -> _ClassSwitch:
    """Context decorator: gradients are disabled inside (Tensor.no_grad is True), as in Tensor.test()."""
    return _ClassSwitch(cls, "no_grad", mode)

  # ---- which tensors want gradients
  @property
  def requires_grad(self) -> bool | None:
    """True: gradients flow to it (set so, or, as in tinygrad, computed not through a detach from a tensor that is);
    False: they never do; None: not decided (an optimizer makes it True)."""
    if self._requires_grad is not None or not (WANT_GRAD or GRAD_NODES):
      return self._requires_grad
    wanted = {t.uop for t in list(WANT_GRAD) if t._requires_grad and t is not self} | set(GRAD_NODES)
    wanted.discard(self.uop)
    return True if wanted and not wanted.isdisjoint(reachable_without_detach(self.uop)) else None

  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None:
    if value and self.dtype.kind != "f":  # as torch: a gradient of an integer or bool tensor would be rounded away
      raise RuntimeError(f"only tensors of a floating point dtype can require gradients, got {self.dtype.name} "
                         f"(cast it first: t.float())")
    if value and not self._requires_grad:
      self._give_own_buffer()
    self._requires_grad = value
    if value:
      WANT_GRAD.add(self)
      GRAD_NODES.add(self.uop)
    else:
      WANT_GRAD.discard(self)
      GRAD_NODES.discard(self.uop)

  def _give_own_buffer(self) -> None:
    """A gradient is found by graph node, and equal graphs are one node (hash-consing): Tensor.ones(3) made twice,
    two LayerNorms' weights, or x.exp() computed twice are each one node, so gradients meant for one would reach
    the other too. A tensor starting to want gradients therefore gets a buffer of its own (its value computed into
    it now), unless it holds one already or is computed from a tensor that wants gradients (it is an intermediate,
    whose graph must stay). A view keeps following its base; a symbolic shape (perhaps unbound) stays lazy."""
    node = self.uop
    if self._view is not None or node.op is Ops.BUFFER or (node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER):
      return
    if is_symbolic_shape(node.shape):
      return
    if self.requires_grad:  # computed from a tensor that wants gradients
      return
    own = self.contiguous().realize().uop
    own.grad_origin = node  # a graph built before still reaches it (shared there, as before: see _target_nodes)
    self.uop = own

  def requires_grad_(self, requires_grad: bool = True) -> Self:
    self.requires_grad = requires_grad
    return self

  def contiguous_backward(self) -> Self:
    """Identity forward; the gradient flowing back through it is made contiguous (a scheduling hint)."""
    return self._from(self.uop)

  # ---- gradients
  def gradient(self, *targets: Any, gradient: Any = None, materialize_grads: bool = False) -> list[Self]:
    """The gradients of this tensor with respect to `targets`. A scalar output seeds with 1. An explicit request,
    so Tensor.no_grad does not stop it (as in tinygrad); it stores nothing.
    >>> x = Tensor([1.0, 2.0, 3.0]); (x * x).sum().gradient(x)[0].tolist()
    [2.0, 4.0, 6.0]
    """
    seed = self._seed(gradient)
    for t in targets:
      if not dtypes.is_float(t.dtype):  # its gradient would be rounded away: torch and tinygrad raise too
        raise RuntimeError(f"gradient(): only tensors of a floating point dtype have gradients, got a target of "
                           f"dtype {t.dtype.name} and shape {t.shape}")
    nodes = self._target_nodes(targets)
    found = compute_gradients(self, seed, [n for ns in nodes for n in ns])
    out = []
    for t, ns in zip(targets, nodes):
      parts = [found[n] for n in ns if n in found]
      if parts:
        out.append(sum(parts[1:], parts[0]))
      elif materialize_grads:
        out.append(t.zeros_like())
      else:
        raise RuntimeError(f"a target tensor of shape {t.shape} is not part of this tensor's graph: the output does "
                           "not depend on it (pass materialize_grads=True to get zeros instead)")
    return out

  def _target_nodes(self, targets: tuple[Any, ...]) -> list[list[UOp]]:
    """For each target, the nodes of this graph that stand for it: its own node; if it was realized after this
    graph was built from it (realize gave it a buffer node of its own), the graph node computed into that buffer;
    and, when the graph holds none of those, the node it held before it was given a buffer of its own to want
    gradients (_give_own_buffer): a graph built before then holds that (a node equal tensors may share: there they
    share its gradient, as before)."""
    by_buffer: dict[Any, list[UOp]] = {}
    graph = self.uop.toposort
    for node in graph:
      if (buf := computed_buffer(node)) is not None:
        by_buffer.setdefault(buf, []).append(node)
    nodes, in_graph = [], None
    for t in targets:
      buf = realized_buffer(t.uop) if t.uop.op in (Ops.BUFFER, Ops.RESHAPE) else None
      found = [t.uop] + [n for n in by_buffer.get(buf, []) if n is not t.uop]
      origin = t.uop.__dict__.get("grad_origin")
      if origin is not None:
        in_graph = in_graph if in_graph is not None else set(graph)
        if not any(n in in_graph for n in found):  # only a graph built before holds the origin
          found.append(origin)
      nodes.append(found)
    return nodes

  @classmethod
  def _keep_history(cls, tensors: Sequence[Any]) -> list[bool]:
    """For each tensor, whether realize() must leave it its graph node: only while the graph leads (not through a
    detach) to another tensor that wants gradients. Otherwise the buffer replaces the graph, which is then freed.
    One walk for all of them (an optimizer step realizes dozens of tensors over one gradient graph)."""
    if cls.no_grad:
      return [False] * len(tensors)
    holders: dict[UOp, list[Any]] = {}
    for t in list(WANT_GRAD):
      if t.requires_grad:
        holders.setdefault(t.uop, []).append(t)
    if not holders:
      return [False] * len(tensors)
    targets, dead_ends = set(holders), set()
    # a tensor's own node counts only if another tensor holds it; its sources cannot lead back to it
    return [node.op is not Ops.DETACH and (any(h is not t for h in holders.get(node, ())) or
                                           _leads_to(targets, node.src, dead_ends))
            for t in tensors for node in (t.uop,)]

  def _seed(self, gradient: Any) -> Self:
    if gradient is None:
      if self.numel() != 1:
        raise ScalarOutputError(f"grad can be implicitly created only for scalar outputs; this tensor has shape "
                           f"{self.shape}: pass gradient=")
      return self.ones_like()
    if gradient.shape != self.shape:
      raise ShapeError(f"gradient of shape {gradient.shape} does not match the output's shape {self.shape}")
    return gradient

  def backward(self, gradient: Any = None) -> Self:
    """Accumulate d(self)/d(t) into t.grad for every live float tensor t in the graph with requires_grad=True:
    leaves and, as in tinygrad, tensors computed from them (not self, unless self is set to require grad, as a leaf
    whose backward() gives it the seed in torch and tinygrad; not an int one such as max_pool2d's indices).
    As in torch, the stored gradients carry no graph of their own (they are detached). Under Tensor.no_grad (inside
    `Tensor.test()` or `Tensor.inference_mode()`) nothing is stored, as in tinygrad; a wrong `gradient` still
    raises."""
    self._seed(gradient)
    if type(self).no_grad:
      return self
    candidates = list(dict.fromkeys([*WANT_GRAD, *COMPUTED]))
    in_graph = set(self.uop.toposort)
    leaves = [t for t, ns in zip(candidates, self._target_nodes(tuple(candidates)))
              if (t is not self or t._requires_grad) and any(n in in_graph for n in ns) and t.requires_grad
              and dtypes.is_float(t.dtype)]
    if not leaves:
      return self
    grads = self.gradient(*leaves, gradient=gradient, materialize_grads=True)
    for t, g in zip(leaves, grads):
      g = (g.cast(t.dtype) if g.dtype != t.dtype else g).detach()
      t.grad = g if t.grad is None else t.grad + g
    return self

