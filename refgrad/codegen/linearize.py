"""Linearization: a lowered kernel graph becomes the ordered uops of a `Program`, which any device can consume.

`REDUCE(body, *ranges)` turns into
    DEFINE_ACC            accumulator, starts at the reduce identity
    RANGE ...             one loop per reduced axis
      <body>              only the nodes that depend on the loop; the rest is hoisted above it
      ACCUMULATE(acc, v)  acc <- reduce_op(acc, v)
    ENDRANGE ...
and later uses of the reduce read the accumulator.
"""
from __future__ import annotations

from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp


def _replace_reduces(sink: UOp) -> tuple[UOp, dict[UOp, tuple[UOp, tuple[UOp, ...]]]]:
  """Swap every REDUCE for a DEFINE_ACC; remember each accumulator's (body, ranges)."""
  rebuilt: dict[UOp, UOp] = {}
  reduces: dict[UOp, tuple[UOp, tuple[UOp, ...]]] = {}
  for node in sink.toposort:
    new_src = tuple(rebuilt[s] for s in node.src)
    if node.op is Ops.REDUCE:
      acc = UOp(Ops.DEFINE_ACC, node.dtype, (), (len(reduces), node.arg))
      reduces[acc] = (new_src[0], new_src[1:])
      rebuilt[node] = acc
    else:
      rebuilt[node] = node if new_src == node.src else node.replace(src=new_src)
  return rebuilt[sink], reduces


class _Linearizer:
  def __init__(self, reduces: dict[UOp, tuple[UOp, tuple[UOp, ...]]]):
    self.reduces = reduces
    self.order: list[UOp] = []
    self.emitted: set[UOp] = set()
    self.deps: dict[UOp, frozenset[UOp]] = {}

  def ranges_of(self, node: UOp) -> frozenset[UOp]:
    """The loops a node's value depends on. A walk that stops at nodes already known: asking it of every node of
    a kernel costs one visit per node (node.toposort would build each node's whole subgraph, quadratic in total)."""
    stack = [node]
    while stack:
      n = stack[-1]
      if n in self.deps:
        stack.pop()
        continue
      needs = (self.reduces[n][0],) if n.op is Ops.DEFINE_ACC else n.src
      unknown = [s for s in needs if s not in self.deps]
      if unknown:
        stack.extend(unknown)
        continue
      stack.pop()
      self.deps[n] = self._own_ranges(n)
    return self.deps[node]

  def _own_ranges(self, n: UOp) -> frozenset[UOp]:
    """ranges_of(n), once what n needs is known: a range is its own loop; an accumulator depends on its body's loops
    but those it runs over."""
    if n.op is Ops.RANGE:
      return frozenset({n})
    if n.op is Ops.DEFINE_ACC:
      body, ranges = self.reduces[n]
      return self.deps[body] - set(ranges)
    return frozenset().union(*(self.deps[s] for s in n.src))

  def emit(self, target: UOp, skip_ranges: frozenset[UOp] = frozenset()) -> None:
    """Emit target and everything it needs; with skip_ranges, only what does not depend on those loops (looking
    into the bodies of reduces nested in them too, so what those need from outside every loop is hoisted as well)."""
    for n in target.toposort:
      if n in self.emitted:
        continue
      if skip_ranges and self.ranges_of(n) & skip_ranges:
        if n.op is Ops.DEFINE_ACC:
          body, ranges = self.reduces[n]
          self.emit(body, skip_ranges | frozenset(ranges))
        continue
      if n.op is Ops.DEFINE_ACC:
        self.emit_reduce(n)
      else:
        self.emitted.add(n)
        self.order.append(n)

  def siblings(self, acc: UOp) -> list[UOp]:
    """acc and the accumulators not yet emitted that loop over the same ranges and do not read each other (an
    upcast kernel's tile of outputs): they share one loop nest, so what their bodies share is computed once."""
    ranges = self.reduces[acc][1]
    group = [acc] + [a for a, (_, r) in self.reduces.items() if r == ranges and a is not acc and a not in self.emitted]
    return [a for a in group if a is acc or not any(b in self.reduces[a][0].toposort or a in self.reduces[b][0].toposort
                                                     for b in group if b is not a)]

  def emit_reduce(self, acc: UOp) -> None:
    group, ranges = self.siblings(acc), self.reduces[acc][1]
    for a in group:
      self.emit(self.reduces[a][0], skip_ranges=frozenset(ranges))  # hoist loop-invariant work above the loops
    for a in group:
      self.emitted.add(a)
      self.order.append(a)
    for r in ranges:
      self.emitted.add(r)
      self.order.append(r)
    for a in group:
      self.emit(self.reduces[a][0])
      self.order.append(UOp(Ops.ACCUMULATE, dtypes.void, (a, self.reduces[a][0])))
    self.order.extend(UOp(Ops.ENDRANGE, dtypes.void, (r,)) for r in reversed(ranges))


def linearize(sink: UOp) -> list[UOp]:
  flat_sink, reduces = _replace_reduces(sink)
  lin = _Linearizer(reduces)
  for local in (u for u in sink.toposort if u.op is Ops.DEFINE_LOCAL):  # declared at the kernel's outermost scope
    lin.emitted.add(local)
    lin.order.append(local)
  for store in flat_sink.src:
    lin.emit(store)
  return lin.order
