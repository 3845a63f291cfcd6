"""Scheduling: cut a lazy tensor graph into kernels, each one graph that stores one output buffer.

Fusion rules: elementwise ops and movement ops are inlined into their consumer; a reduce is inlined when no
EXPAND and no other reduce lies between it and the kernel's output (so `(a*b+c).sum()` is one kernel, and so
is `x.sum(1).reshape(-1) + 1`); a reduce that gets expanded (e.g. `x - x.max()`) would be recomputed for every
copy, so it is realized first, in its own kernel.
An elementwise value that costs many ops per element (a transcendental, a dropout mask's random bits) and is
expanded into a reduce is also realized first: fused, it would be recomputed for every output the expand feeds
(attention's softmax weights, once per column of the weighted sum). So is a padded value that a reduce reads
through an EXPAND (a convolution's padded input, read by every output channel): its own kernel pads once, and the
reduce's inner loop reads a plain buffer with no bounds checks (CLANG conv2d 8x32x32x32 * 64x32x3x3: 23 ms ->
3.5 ms). And a reduce that several of the tensors being realized need (an optimizer step's gradient, read by the
parameter and both moments) is realized once for all of them, as is a costly elementwise value that both a reduce
and something else read (softmax's exp(x - max), read by the sum and by the weights). Every split gives the same
bits; it only saves work. `contiguous()`, copies between devices, and the tensors being realized are always their
own kernels.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from refgrad import multi, symbolic_shapes
from refgrad.buffer import Buffer
from refgrad.device import LRU
from refgrad.dtype import DType, dtypes
from refgrad.ops import OP_FACTS
from refgrad.symbolic_shapes import max_shape, view_shape
from refgrad.uop import GroupOp, Ops, UOp, arg_key, prod, walk

# Where a node is built, relative to the kernel's output: only elementwise ops above it (a reduce may be inlined),
# below an EXPAND (a reduce would be recomputed per copy), inside a reduce's input (so would a costly expanded
# value), or inside a reduce's input and below an EXPAND (a padded value there is read by many outputs).
OUTPUT, EXPANDED, REDUCED, REUSED = "output", "expanded", "reduced", "reused"
BELOW_EXPAND = {OUTPUT: EXPANDED, REDUCED: REUSED}  # where the source of an EXPAND built at a place is built
# What an expanded elementwise value costs per element, in multiply-adds (each ALU op's OP_FACTS cost):
# from COSTLY_OPS on, recomputing it for every copy costs more than a kernel that computes it once (softmax weights:
# an exp; a dropout mask: threefry's ~100 integer ops).
COSTLY_OPS = 16
# A kernel of its own pays off only where it saves more than launching it costs (about 10-20 us on a CPU device, and
# a compile the first time): the three splits below apply from this many elements of the work they save on.
SPLIT_MIN_ELEMENTS = 1 << 14


def worth_a_kernel(node: UOp) -> bool:
  return prod(max_shape(node.shape)) >= SPLIT_MIN_ELEMENTS


OWN_KERNEL = frozenset({Ops.CONTIGUOUS, Ops.COPY, Ops.ALLREDUCE, Ops.ASSIGN})  # always computed by an item of their own


@dataclass(frozen=True)
class ScheduleItem:
  """One kernel: `ast` is SINK(STORE(PARAM 0, value)) over PARAM inputs, buffers[i] is PARAM i. Or a transfer
  between devices: `ast` a COPY (buffers: destination, source) or an ALLREDUCE (destination, partials...)."""
  ast: UOp
  buffers: tuple[Buffer, ...]
  # a kernel of symbolic shape: its Variables (name order) and the values bound in this schedule; the kernel
  # reads them from its last buffer, which run_schedule fills at launch
  var_vals: tuple[tuple[UOp, int], ...] = ()

  @property
  def is_transfer(self) -> bool:
    return self.ast.op in (Ops.COPY, Ops.ALLREDUCE)


class NodeValues:
  """node -> value, kept on the node itself (in its __dict__, beside its cached facts): an entry lives exactly as long
  as its node, as in a WeakKeyDictionary, but a lookup is one dict read where a WeakKeyDictionary makes a weak
  reference, and every schedule looks up every node of its graph."""
  KEY = "realized_value"

  def get(self, node: UOp, default: Any = None) -> Any:
    return node.__dict__.get(self.KEY, default)

  def __contains__(self, node: UOp) -> bool:
    return self.KEY in node.__dict__

  def __getitem__(self, node: UOp) -> Any:
    return node.__dict__[self.KEY]

  def __setitem__(self, node: UOp, value: Any) -> None:
    node.__dict__[self.KEY] = value


# Graph nodes that have been computed, and each one's value: the buffer holding it, or for a node over several
# devices the MULTI of its parts' buffer nodes. A tensor that must keep its autograd history keeps its graph node
# after realize(); this table lets every later schedule (values, gradients) read the buffers instead of recomputing
# the node, and the multi-device lowering stop there. Keys are weak: an entry, and its buffers, live exactly as long
# as some graph still refers to the node.
_REALIZED = NodeValues()


def realized_buffer(node: UOp) -> Buffer | None:
  """The buffer behind a realized tensor node (BUFFER, a RESHAPE of one to the full size, the symbolic view of one,
  or a computed node)."""
  if node.op is Ops.SHRINK and node.src[0].op in (Ops.RESHAPE, Ops.BUFFER) and node.arg == view_shape(node.shape):
    node = node.src[0]
  if node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER:
    node = node.src[0]
  return node.arg if node.op is Ops.BUFFER else computed_buffer(node)


def computed_buffer(node: UOp) -> Buffer | None:
  """The buffer a graph node (not a BUFFER leaf) was computed into by an earlier realize, if it still exists."""
  return value if isinstance(value := _REALIZED.get(node), Buffer) else None


def realized_multi(node: UOp) -> UOp | None:
  """The MULTI of buffer nodes an earlier realize computed for `node` (a tensor over several devices that kept its
  graph for gradients), or None."""
  value = node if node.op is Ops.MULTI else _REALIZED.get(node)
  return value if isinstance(value, UOp) and value.op is Ops.MULTI else None


_NOT_REMEMBERED = frozenset({Ops.BUFFER, Ops.CONST})


def remember_realized(values: dict[UOp, Buffer | UOp]) -> None:
  """Record the values a schedule that has run computed (a buffer; a MULTI of buffer nodes for a node over several
  devices), for later schedules, lowerings and gradients to reuse. Not a bare constant: its node is shared by every
  tensor of that value and kept by multi.const_on's cache, so its buffer would outlive the tensor, and every later
  graph would read that buffer instead of folding the constant (kernels then differed by what ran before)."""
  for node, value in values.items():
    if node.op not in _NOT_REMEMBERED and not (node.op is Ops.RESHAPE and node.src[0].op is Ops.BUFFER):
      _REALIZED[node] = value


def value_buffers(value: Buffer | UOp) -> set[Buffer]:
  """The buffers a recorded value is held in: the buffer, or each part's for a node over several devices."""
  return {value} if isinstance(value, Buffer) else {b for p in value.src if (b := realized_buffer(p)) is not None}


def forget_realized(forget: Callable[[UOp, Buffer | UOp], bool]) -> None:
  """Drop the recorded value of every live node for which forget(node, value) holds; a later schedule computes the
  node from its sources again. The values are a memo: a node outlives the tensors that made it for as long as some
  graph holds it."""
  for ref in list(UOp._cache.values()):
    if (node := ref()) is not None and (value := _REALIZED.get(node)) is not None and forget(node, value):
      node.__dict__.pop(NodeValues.KEY, None)


def realized_node(node: UOp, buffers: dict[UOp, Buffer]) -> UOp:
  """The node reading node's value from the buffers a schedule computed (a MULTI of them for a lowered MULTI)."""
  if node.op is Ops.MULTI:
    return multi.multi([realized_node(p, buffers) for p in node.src], *node.arg)
  return buffer_node(buffers[node] if node in buffers else realized_buffer(node), node.shape)


def buffer_node(buf: Buffer, shape: tuple) -> UOp:
  return view_of(UOp(Ops.BUFFER, buf.dtype, (), buf), buf.size, shape)


def view_of(base: UOp, size: int, shape: tuple) -> UOp:
  """A flat buffer (or PARAM) of `size` elements viewed as `shape`: a reshape, and for a symbolic shape a reshape to
  its largest sizes (the buffer's layout) and a shrink to the bound ones."""
  if (bounds := view_shape(shape)) is not None:
    return UOp(Ops.SHRINK, base.dtype, (view_of(base, size, max_shape(shape)),), bounds)
  return base if shape == (size,) else UOp(Ops.RESHAPE, base.dtype, (base,), shape)


class _KernelBuilder:
  """Builds one kernel's graph: realized inputs become PARAMs, numbered in order of first use."""

  def __init__(self, scheduler: Scheduler, output: Buffer, root: UOp):
    self.scheduler, self.root = scheduler, root
    self.buffers: list[Buffer] = [output]
    self.params: dict[Buffer, UOp] = {}
    self.memo: dict[tuple[UOp, bool], UOp] = {}

  def param(self, buf: Buffer) -> UOp:
    if buf not in self.params:
      self.params[buf] = UOp(Ops.PARAM, buf.dtype, (), (len(self.buffers), buf.size))
      self.buffers.append(buf)
    return self.params[buf]

  def input_from(self, node: UOp, where: str = OUTPUT) -> UOp:
    buf = self.scheduler.realize(node, where)
    return view_of(self.param(buf), buf.size, node.shape)

  def shared_elsewhere(self, reduce: UOp) -> bool:
    """A reduce other tensors of this schedule need too, and worth a kernel: it gets its own (unless it is this)."""
    return reduce in self.scheduler.shared and reduce is not self.root and worth_a_kernel(reduce.src[0])

  def build(self, node: UOp, where: str) -> UOp:
    """`where`: OUTPUT, EXPANDED, REDUCED or REUSED, as above."""
    key = (node, where)
    if key not in self.memo:
      self.memo[key] = self._build(node, where)
    return self.memo[key]

  def _build(self, node: UOp, where: str) -> UOp:
    if node.op is Ops.BUFFER:
      return self.param(node.arg)
    if self.scheduler.computed_elsewhere(node):
      return self.input_from(node)
    if node.op is Ops.REDUCE_AXIS:
      if where != OUTPUT or self.shared_elsewhere(node):
        return self.input_from(node)
      return node.replace(src=(self.build(node.src[0], REDUCED),))
    if node.op in (Ops.DETACH, Ops.CUSTOM_GRAD):  # only autograd sees them: the value passes through
      return self.build(node.src[0], where)
    if node.op in (Ops.CONST, Ops.DEVICE):
      return node
    if node.op is Ops.EXPAND and where in (REDUCED, REUSED) and worth_a_kernel(node) and \
       self.scheduler.costly(node.src[0]):
      # built as if expanded: a reduce inside it is its own kernel, which the costly value's other users share
      return node.replace(src=(self.input_from(node.src[0], EXPANDED),))
    if node.op is Ops.PAD and where == REUSED and worth_a_kernel(node):
      return self.input_from(node, EXPANDED)
    if node in self.scheduler.reread and node is not self.root and worth_a_kernel(node) and \
       self.scheduler.costly(node):
      return self.input_from(node, EXPANDED)
    below = BELOW_EXPAND.get(where, where) if node.op is Ops.EXPAND else where
    return node.replace(src=tuple(self.build(s, below) for s in node.src))


class Scheduler:
  """Turns tensor nodes into schedule items; `done` maps each realized node to its buffer."""

  def __init__(self, roots: list[UOp] = ()):
    self.items: list[ScheduleItem] = []
    self.done: dict[UOp, Buffer] = {}
    self._cost: dict[UOp, int] = {}
    self.shared, self.reread = shared_values(roots)

  def computed_elsewhere(self, node: UOp) -> bool:
    """True if a kernel's graph reads node from a buffer rather than computing it."""
    return node.op in OWN_KERNEL or node in self.done or node in _REALIZED

  def costly(self, node: UOp) -> bool:
    """True if computing node in a kernel costs at least COSTLY_OPS ALU ops per element, not counting buffers and
    the reduces below it (an expanded reduce has a kernel of its own). Shared nodes count once per use: an
    overestimate, capped at COSTLY_OPS."""
    def leaf(n: UOp) -> bool:
      return n in self._cost or n.op in (Ops.BUFFER, Ops.REDUCE_AXIS) or self.computed_elsewhere(n)
    for n in walk([node], leaf):  # sources first, so each lookup below is already known
      if n not in self._cost:
        own = OP_FACTS[n.op].cost if n.op in OP_FACTS else 0
        self._cost[n] = 0 if leaf(n) else min(COSTLY_OPS, own + sum(self._cost[s] for s in n.src))
    return self._cost[node] >= COSTLY_OPS

  def realize(self, node: UOp, where: str = OUTPUT) -> Buffer:
    """The buffer holding node's value, scheduling its kernel if needed; `where` says which reduces it may inline."""
    if (buf := realized_buffer(node)) is not None and buf.size == prod(max_shape(node.shape)):
      return buf
    if node not in self.done:
      self.done[node] = self._schedule(node, where)
    return self.done[node]

  def _schedule(self, node: UOp, where: str) -> Buffer:
    out = Buffer(node.device, prod(max_shape(node.shape)), node.dtype)
    if node.op in (Ops.COPY, Ops.ALLREDUCE):
      sources = tuple(self.realize(s) for s in node.src)
      self.items.append(ScheduleItem(UOp(node.op, node.dtype, (), node.arg), (out, *sources)))
      return out
    if node.op is Ops.ASSIGN:
      target = self.realize(node.src[0])
      out = target
    value = node.src[0] if node.op is Ops.CONTIGUOUS else (node.src[1] if node.op is Ops.ASSIGN else node)
    if out.size == 0:
      return out
    builder = _KernelBuilder(self, out, value)
    body = builder.build(value, where)
    found = {}
    if symbolic_shapes.in_use():
      body, found = symbolic_shapes.unbind_graph(body)
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.PARAM, node.dtype, (), (0, out.size)), body))
    var_vals = tuple(sorted(found.items(), key=lambda kv: symbolic_shapes.slot_order(kv[0])))
    extra = (builder.param(Buffer(node.device, len(var_vals), symbolic_shapes.VARIABLE_DTYPE)),) if var_vals else ()
    self.items.append(ScheduleItem(UOp(Ops.SINK, dtypes.void, (store, *extra)), tuple(builder.buffers), var_vals))
    return out


def shared_values(roots: list[UOp]) -> tuple[set[UOp], set[UOp]]:
  """Two kinds of value that several kernels would compute, each realized once and read by all of them instead:
  - the reduces more than one of the nodes being realized needs (an optimizer step updates a parameter and its
    moments from one gradient);
  - the elementwise values that a reduce reads and something else reads too (softmax's exp(x - max): the sum of
    it is expanded, so it has a kernel of its own, and the weights need it again); only the costly ones are split
    (Scheduler.costly), when the kernel builder meets them."""
  roots = list(dict.fromkeys(roots))
  order = walk(roots, is_leaf)
  reached_from = {root: 1 << i for i, root in enumerate(roots)}  # a bit per root that needs the node
  users: dict[UOp, list[UOp]] = {}
  for node in reversed(order):  # users before their sources
    for s in dict.fromkeys(node.src):
      reached_from[s] = reached_from.get(s, 0) | reached_from.get(node, 0)
      users.setdefault(s, []).append(node)
  reduces = {n for n in order if n.op is Ops.REDUCE_AXIS and reached_from[n] & (reached_from[n] - 1)}
  elementwise = {n for n, seen_by in users.items() if n.op in GroupOp.ALU and len(seen_by) > 1
                 and any(u.op is Ops.REDUCE_AXIS for u in seen_by)}
  return reduces, elementwise


def is_leaf(node: UOp) -> bool:
  """Where a schedule stops looking: a buffer, or a node an earlier realize computed (its buffer is read)."""
  return node.op is Ops.BUFFER or NodeValues.KEY in node.__dict__  # `node in _REALIZED`, inlined: it runs per node


@dataclass(frozen=True)
class Structure:
  """A graph's structure with its buffers as numbered slots: two graphs of one `key` get the same schedule, but for
  the buffers. `order` is the graph's nodes (walk order: a position in the key names one of them) and `inputs` the
  buffers it reads, slot by slot."""
  key: tuple
  order: list[UOp]
  inputs: list[Buffer]


def graph_structure(roots: list[UOp]) -> Structure | None:
  """The structure of the graph from roots down to its leaves, or None where a leaf is one the scheduler would look
  inside (a node computed over several devices, or into a buffer of another size). Each node is one entry: a leaf
  its node's op, dtype and shape and its buffer's device, size, dtype and slot (distinct buffers get distinct slots,
  so a graph reading one buffer twice differs from one reading two); a node without sources (a constant, a device,
  a Variable) itself, the same node in every graph; any other its op, dtype, arg (as hash-consing tells args apart:
  -0.0 is not 0.0) and its sources' positions, so shared subgraphs are part of the key."""
  position: dict[UOp, int] = {}  # also the walk's "seen": one pass, each node's leaf test made once
  inputs: dict[Buffer, int] = {}
  order: list[UOp] = []
  entries: list[Any] = []
  stack = [(root, False) for root in reversed(roots)]
  while stack:
    node, expanded = stack.pop()
    if node in position:
      continue
    if expanded:
      entries.append((node.op, node.dtype, arg_key(node.arg), *[position[s] for s in node.src]))
    elif is_leaf(node):
      if (buf := realized_buffer(node)) is None or buf.size != prod(max_shape(node.shape)):
        return None
      slot = inputs.setdefault(buf, len(inputs))
      entries.append((Ops.BUFFER, node.op, node.dtype, node.shape, buf.device, buf.size, buf.dtype, slot))
    elif not node.src:
      entries.append(node)
    else:
      stack.append((node, True))
      stack.extend((s, False) for s in reversed(node.src) if s not in position)
      continue
    position[node] = len(order)
    order.append(node)
  key = (tuple(position[r] for r in roots), SPLIT_MIN_ELEMENTS, COSTLY_OPS, MAX_DEPTH, *entries)
  return Structure(key, order, list(inputs))


@dataclass(frozen=True)
class Template:
  """A schedule with its buffers as slots: the structure's inputs first, then the buffers it makes (`made`: device,
  size, dtype of each). `kernels` are the items (ast, slots, var_vals), `results` each (node position, slot) the
  schedule computed into a buffer. It holds no buffer, so a cached schedule keeps no memory alive."""
  kernels: tuple[tuple[UOp, tuple[int, ...], tuple[tuple[UOp, int], ...]], ...]
  made: tuple[tuple[str, int, DType], ...]
  results: tuple[tuple[int, int], ...]

  @staticmethod
  def of(structure: Structure, items: list[ScheduleItem], buffers: dict[UOp, Buffer]) -> Template:
    slots = {buf: i for i, buf in enumerate(structure.inputs)}
    made: list[tuple[str, int, DType]] = []

    def slot(buf: Buffer) -> int:
      if buf not in slots:
        slots[buf] = len(slots)
        made.append((buf.device, buf.size, buf.dtype))
      return slots[buf]
    kernels = tuple((item.ast, tuple(slot(b) for b in item.buffers), item.var_vals) for item in items)
    position = {node: i for i, node in enumerate(structure.order)}
    results = tuple((position[node], slot(buf)) for node, buf in buffers.items())  # may make more (an empty one)
    return Template(kernels, tuple(made), results)

  def instantiate(self, structure: Structure) -> tuple[list[ScheduleItem], dict[UOp, Buffer]]:
    """The schedule for the graph of `structure`: its own inputs, and new buffers for those the schedule makes."""
    buffers = structure.inputs + [Buffer(*made) for made in self.made]
    items = [ScheduleItem(ast, tuple(buffers[i] for i in slots), var_vals) for ast, slots, var_vals in self.kernels]
    return items, {structure.order[position]: buffers[i] for position, i in self.results}


# The schedules of the graph structures seen last: a training step, or fuzz programs of one shape, build the same
# graph over other buffers again and again, and scheduling it costs many times what computing its key does (CNN
# optimizer step, 464 nodes: key 2 ms, schedule 32 ms, on a loaded machine). An entry holds kernel graphs and
# constants, no buffer: the CNN step's largest (its first graph, 1469 nodes) takes 135 KB, so 64 stay under 10 MB.
# REFGRAD_SCHEDULE_CACHE=0 turns the cache off (bench/train.py measures both).
SCHEDULE_CACHE_SIZE = 64
_SCHEDULES: LRU[Template] = LRU(SCHEDULE_CACHE_SIZE)


def device_parts(nodes: list[UOp]) -> list[UOp]:
  """nodes as graphs on one device each: a node over several devices gives a MULTI of them (refgrad/multi.py)."""
  return multi.lower_multi(nodes, _REALIZED) if multi.in_use() else nodes


def create_schedule(nodes: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, Buffer]]:
  """The kernels that realize `nodes`, in dependency order, and the buffer each node (and each intermediate the
  schedule computes into a buffer of its own) ends up in. A node over several devices is realized part by part:
  the buffers are its lowered parts' (device_parts)."""
  nodes = [p for n in device_parts(nodes) for p in (n.src if n.op is Ops.MULTI else (n,))]
  if os.environ.get("REFGRAD_SCHEDULE_CACHE") == "0" or (structure := graph_structure(nodes)) is None:
    return schedule_graph(nodes)
  if (template := _SCHEDULES.get(structure.key)) is not None:
    return template.instantiate(structure)
  items, buffers = schedule_graph(nodes)
  _SCHEDULES.put(structure.key, Template.of(structure, items, buffers))
  return items, buffers


# The scheduler builds a kernel's graph by recursion, one level (three frames) per node, and reaches the kernels a
# kernel reads by recursing into them, so a deep lazy graph (a loop of 200 `x = x * a + b`, or of `.contiguous()` or
# `.sum()` steps, never realized) would exhaust Python's 1000 frames. chain_cuts bounds the depth: no path of nodes
# not yet scheduled is longer than MAX_DEPTH (the lowering and the renderers, which walk one kernel's graph by
# recursion too, then see no longer chain either).
MAX_DEPTH = 150
# where a path may be cut: an elementwise node, or one that may be a kernel anyway (an assign is never scheduled
# ahead: the reads of the old value must come first)
CUT_AT = GroupOp.ALU | {Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY, Ops.ALLREDUCE}


def chain_cuts(nodes: list[UOp]) -> list[UOp]:
  """The nodes to schedule before `nodes`, sources first, so that no path between them is longer than MAX_DEPTH.
  Scheduling a node early only moves reads earlier: each kernel still runs after the kernels it reads."""
  order = walk(nodes, is_leaf)
  if len(order) <= MAX_DEPTH:
    return []
  depth: dict[UOp, int] = {}
  cuts = []
  for node in order:
    below = 0 if is_leaf(node) else 1 + max((depth[s] for s in node.src), default=0)
    if below >= MAX_DEPTH and node.op in CUT_AT:
      cuts.append(node)
      below = 0
    depth[node] = below
  return cuts


def schedule_graph(nodes: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, Buffer]]:
  """create_schedule's work, for single-device nodes, without the cache."""
  scheduler = Scheduler(nodes)
  for cut in chain_cuts(nodes):
    scheduler.realize(cut)
  results = {n: scheduler.realize(n) for n in nodes}
  return scheduler.items, {**scheduler.done, **results}
