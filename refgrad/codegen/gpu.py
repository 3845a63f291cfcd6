"""GPU-shaped programs: a lowered kernel becomes a launch over a grid of work-groups.

A GPU (or OpenCL on a CPU) launches work-items on a grid of at most `len(caps.max_global_size)` axes, cut into
work-groups whose items share local memory and wait for each other at barriers. `to_gpu` rewrites a lowered
kernel (codegen/lowering.py) for such a device, in two steps:

* **Grid.** Output dims of size > 1 become grid axes, innermost first: axis 0 varies fastest, which is where a
  GPU coalesces memory accesses and CPU OpenCL vectorizes. Dims beyond the grid's rank merge into its last axis.
  Reductions stay loops inside each work-item.
* **Grouped reductions.** A kernel with few outputs and long reductions gives each output a work-group of L
  items: item l accumulates its share of the reduction, stores its partial result in local memory, and after
  a barrier every item folds the L partials in order; item 0 stores the output. The order of a float sum is
  free (docs/SPEC.md), so this is as exact as the plain loop. The share is iterations l, l+L, l+2L, ... on a
  GPU, where neighbouring items read neighbouring addresses at once, and a contiguous run of iterations where
  the items of a group run one after the other (`caps.interleaved_groups` False: OpenCL on a CPU).

Three opts (codegen/opt.py) shape the work-groups instead of these defaults; they are checked here, where the grid
is planned, and `gpu_opts` lists those that apply to a kernel (what a fuzz campaign or a search draws from):

* `GROUP(0, L)`: a kernel's reductions are shared by work-groups of L items (any L the reductions, the device's
  work-group size and local memory allow, not only the power of two chosen by default).
* `LOCAL(axis, k)`: work-groups of k items along grid axis `axis` (1 along axes no LOCAL names), and no grouped
  reduction: every item runs its reduction loops alone.
* `LOCALTILE(axis, k)`: local-memory tiles. Reduce loop `axis` runs in blocks of k iterations; per block, the
  work-group loads each value that several of its items read (a load that does not vary along some axis of the
  group: a matmul's row of A for the items along a row of outputs) into local memory once, items sharing the
  loads, waits at a barrier, and every item reads those values from local memory. Two buffers alternate between
  blocks, so one barrier per block suffices: an item overwrites a buffer only after passing the next block's
  barrier, which every item reaches only after it has finished reading that buffer.

The ops it introduces (the interpreter, refgrad/interp/kernel.py, runs them too):

| op | meaning |
| --- | --- |
| `LOCAL_INDEX` arg `(axis, size)` | the work-item's index inside its work-group on grid axis `axis` |
| `GROUP_INDEX` arg `(axis, count)` | the work-group's index on grid axis `axis` |
| `DEFINE_LOCAL` arg `(id, size)` | `size` elements of `dtype` in local memory, one array per work-group |
| `BARRIER(local, *stores)` | every item of the group has done `stores`; loads read `local` through the barrier |
| `STORE(buffer, index, value, gate)` | a store that happens only where `gate` is true |
"""
from __future__ import annotations

from refgrad.alu import reduce_identity
from refgrad.codegen.contract import Capabilities, Opt, OptList
from refgrad.codegen.opt import OptError
from refgrad.codegen.simplify import simplify
from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp, prod

INDEX = dtypes.int64
PREFERRED_GROUP = 256  # work-items per group when the kernel does not need a particular size
GROUPED_OUTPUTS = 1024  # kernels with at most this many outputs may split their reductions across a group


def grid_axes(shape: tuple[int, ...], max_axes: int) -> list[list[int]]:
  """For each grid axis, the output dims it covers (outer to inner): innermost dim first, extra dims merged."""
  dims = [d for d, s in enumerate(shape) if s != 1][::-1]  # a 0-size dim stays: its grid axis runs nothing
  if len(dims) <= max_axes:
    return [[d] for d in dims]
  return [[d] for d in dims[:max_axes - 1]] + [sorted(dims[max_axes - 1:])]


def thread_mapping(shape: tuple[int, ...], axes: list[list[int]], index_of_axis: list[UOp]) -> dict[UOp, UOp]:
  """The lowering's SPECIAL (one per output dim) -> the same index read from the grid axis that covers it."""
  mapping: dict[UOp, UOp] = {}
  for dims, index in zip(axes, index_of_axis):
    stride = 1
    for d in reversed(dims):
      mapping[UOp(Ops.SPECIAL, INDEX, (), (d, shape[d]))] = (index // stride) % shape[d] if len(dims) > 1 else index
      stride *= shape[d]
  return mapping


def largest_divisor(n: int, limit: int) -> int:
  return next((d for d in range(min(n, limit), 0, -1) if n % d == 0), 1)


def plain_local_shape(grid: tuple[int, ...], limit: int) -> tuple[int, ...]:
  """Work-groups for a kernel that does not care about them: as large as allowed, filled from axis 0."""
  local = []
  for size in grid:
    local.append(largest_divisor(size, limit))
    limit //= local[-1]
  return tuple(local)


# ---- grouped reductions
def top_reduces(value: UOp) -> list[UOp] | None:
  """The REDUCEs of a kernel value, or None when one is nested in another (those stay plain loops)."""
  reduces = [u for u in value.toposort if u.op is Ops.REDUCE]
  if any(r is not inner and inner.op is Ops.REDUCE for r in reduces for inner in r.src[0].toposort):
    return None
  return reduces


def group_limit(reduces: list[UOp], caps: Capabilities) -> int:
  """The most items a work-group may share these reductions over: no more than the shortest has iterations, the
  device's work-group size, and what its local memory holds (one partial result per item and reduction)."""
  shortest = min(prod(r.arg[1] for r in red.src[1:]) for red in reduces)
  return min(shortest, caps.max_local_size, caps.local_memory // sum(red.dtype.itemsize for red in reduces))


def group_size(reduces: list[UOp], outputs: int, caps: Capabilities) -> int:
  """Items per work-group for grouped reductions (a power of two), or 0 to keep the plain loops."""
  if not reduces or outputs == 0 or outputs > GROUPED_OUTPUTS:
    return 0
  if min(prod(r.arg[1] for r in red.src[1:]) for red in reduces) < max(outputs, 2):
    return 0
  limit = min(group_limit(reduces, caps), PREFERRED_GROUP)
  size = 1
  while size * 2 <= limit:
    size *= 2
  return size if size >= 2 else 0


def shareable_reduces(sink: UOp) -> list[UOp]:
  """The reductions a work-group may share: those of a kernel with one store, none nested in another."""
  return (top_reduces(sink.src[0].src[2]) or []) if len(sink.src) == 1 else []


def chosen_group(sink: UOp, shape: tuple[int, ...], caps: Capabilities, opts: OptList) -> int:
  """Items per work-group for this kernel's grouped reductions (0: none), by its work-group opts or by default."""
  group = [o.amount for o in opts if o.kind == "GROUP"]
  if any(o.kind in ("LOCAL", "LOCALTILE") for o in opts):
    if group:
      raise OptError("GROUP with LOCAL or LOCALTILE: a kernel's work-groups either share its reductions or run "
                     "plain items")
    return 0
  reduces = shareable_reduces(sink)
  if not group:
    return group_size(reduces, prod(shape), caps)
  if not reduces:
    raise OptError("GROUP: the kernel has no reduction a work-group can share (it needs one store and no nested "
                   "reductions)")
  limit = group_limit(reduces, caps)
  if not 2 <= group[-1] <= limit:
    raise OptError(f"GROUP: {group[-1]} items per work-group: the amount must be at least 2 and at most {limit} "
                   "(the shortest reduction, the device's work-group size and its local memory)")
  return group[-1]


def chosen_local_shape(grid: tuple[int, ...], caps: Capabilities, opts: OptList) -> tuple[int, ...]:
  """Work-groups for a kernel without grouped reductions: by its LOCAL opts, or as large as allowed."""
  named = {o.axis: o.amount for o in opts if o.kind == "LOCAL"}
  if not named:
    return plain_local_shape(grid, min(caps.max_local_size, PREFERRED_GROUP))
  for axis, amount in named.items():
    if axis >= len(grid) or amount < 1 or grid[axis] % amount:
      raise OptError(f"LOCAL({axis},{amount}): the grid {grid} has no axis {axis} that {amount} items divide")
  local = tuple(named.get(axis, 1) for axis in range(len(grid)))
  if prod(local) > caps.max_local_size:
    raise OptError(f"LOCAL: work-groups of {local} items exceed the device's {caps.max_local_size}")
  return local


def gpu_opts(sink: UOp, shape: tuple[int, ...], caps: Capabilities, amounts: tuple[int, ...] = (2, 3, 4, 8, 16, 64)
             ) -> list[Opt]:
  """Every GROUP, LOCAL or LOCALTILE opt that applies to this kernel (after its other opts) on this device."""
  found = []
  reduces = shareable_reduces(sink)
  if reduces:
    found += [Opt("GROUP", 0, k) for k in amounts if 2 <= k <= group_limit(reduces, caps)]
  grid = [prod(shape[d] for d in dims) for dims in grid_axes(shape, len(caps.max_global_size))]
  found += [Opt("LOCAL", axis, k) for axis, size in enumerate(grid) for k in amounts
            if size % k == 0 and k <= caps.max_local_size]
  loops = {u.arg for u in sink.toposort if u.op is Ops.RANGE}
  for tile in [Opt("LOCALTILE", axis, k) for axis, size in loops for k in amounts if k < size and size % k == 0]:
    try:
      to_gpu(sink, shape, caps, (tile,))
      found.append(tile)
    except OptError:
      pass
  return found


class _GroupedReduce:
  """Rewrites each REDUCE into a partial loop per item, a trip through local memory and a final fold."""

  def __init__(self, item: UOp, size: int, first_range: int, interleaved: bool):
    self.item, self.size, self.next_range, self.locals = item, size, first_range, 0
    self.interleaved = interleaved

  def new_range(self, size: int) -> UOp:
    self.next_range += 1
    return UOp(Ops.RANGE, INDEX, (), (self.next_range - 1, size))

  def partial(self, red: UOp) -> UOp:
    """This item's share of the flattened reduction: interleaved with the other items, or one contiguous run."""
    body, ranges = red.src[0], red.src[1:]
    total = prod(r.arg[1] for r in ranges)
    rounds = -(-total // self.size)
    step = self.new_range(rounds)
    flat = step * self.size + self.item if self.interleaved else self.item * rounds + step
    valid = flat.lt(total) if total % self.size else None
    if valid is not None:  # the last round has fewer iterations than items: read in bounds, add the identity
      flat = valid.where(flat, UOp.const(INDEX, total - 1))
    mapping, stride = {}, 1
    for n, r in enumerate(reversed(ranges)):  # flat < total, so the outermost range needs no modulo
      mapping[r] = flat // stride if n == len(ranges) - 1 else (flat // stride) % r.arg[1]
      stride *= r.arg[1]
    share = body.substitute(mapping)
    if valid is not None:
      share = valid.where(share, UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
    return UOp(Ops.REDUCE, red.dtype, (share, step), red.arg)

  def __call__(self, red: UOp) -> UOp:
    local = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (self.locals, self.size))
    self.locals += 1
    store = UOp(Ops.STORE, dtypes.void, (local, self.item, self.partial(red)))
    synced = UOp(Ops.BARRIER, red.dtype, (local, store))
    slot = self.new_range(self.size)
    return UOp(Ops.REDUCE, red.dtype, (UOp(Ops.LOAD, red.dtype, (synced, slot)), slot), red.arg)


# ---- local-memory tiles
class LocalTile:
  """The LOCALTILE opt on a plain GPU-shaped kernel value (its thread indices read from the grid's SPECIALs)."""

  def __init__(self, grid: tuple[int, ...], local: tuple[int, ...], caps: Capabilities):
    self.local, self.caps, self.buffers = local, caps, 0
    self.global_ids = {axis: UOp(Ops.SPECIAL, INDEX, (), (axis, n)) for axis, n in enumerate(grid)}
    self.groups = {axis: UOp(Ops.GROUP_INDEX, INDEX, (), (axis, n // g))
                   for axis, (n, g) in enumerate(zip(grid, local))}
    self.items = {axis: UOp(Ops.LOCAL_INDEX, INDEX, (), (axis, g)) if g > 1 else UOp.const(INDEX, 0)
                  for axis, g in enumerate(local)}

  def __call__(self, value: UOp, axis: int, amount: int) -> UOp:
    reduces = [u for u in value.toposort if u.op is Ops.REDUCE and any(r.arg[0] == axis for r in u.src[1:])]
    if not reduces:
      raise OptError(f"LOCALTILE: the kernel has no reduce loop {axis}")
    red = reduces[0]
    loop = next(r for r in red.src[1:] if r.arg[0] == axis)
    if loop.arg[1] % amount or not 2 <= amount < loop.arg[1]:
      raise OptError(f"LOCALTILE: reduce loop {axis} of size {loop.arg[1]} cannot run in blocks of {amount}: the "
                     "amount must be at least 2, below the size, and divide it")
    blocks = UOp(Ops.RANGE, INDEX, (), (axis, loop.arg[1] // amount))
    inside = UOp(Ops.RANGE, INDEX, (), (1 + max(u.arg[0] for u in value.toposort if u.op is Ops.RANGE), amount))
    staged = {load: self.stage(load, loop, blocks, inside, amount) for load in self.shared_loads(red.src[0], loop)}
    if not staged:
      raise OptError(f"LOCALTILE: no load of reduce loop {axis} is read by several items of a work-group of "
                     f"{self.local} (it varies along every axis of the group, or with another loop)")
    if sum(2 * self.tile_size(load, amount) * load.dtype.itemsize for load in staged) > self.caps.local_memory:
      raise OptError(f"LOCALTILE: tiles of {amount} iterations need more than the device's {self.caps.local_memory} "
                     "bytes of local memory")
    body = red.src[0].substitute(staged).substitute({loop: blocks * amount + inside})
    inner = UOp(Ops.REDUCE, red.dtype, (body, inside, *(r for r in red.src[1:] if r is not loop)), red.arg)
    return value.substitute({red: UOp(Ops.REDUCE, red.dtype, (inner, blocks), red.arg)})

  def shared_loads(self, body: UOp, loop: UOp) -> list[UOp]:
    """Global loads of `loop` that depend on no other loop and not on some axis of the group (its items share them)."""
    found = []
    for load in (u for u in body.toposort if u.op is Ops.LOAD and u.src[0].op is Ops.PARAM):
      nodes = load.toposort
      varies = [a for a, g in enumerate(self.local) if g > 1 and self.global_ids[a] in nodes]
      if loop in nodes and len(varies) < sum(g > 1 for g in self.local) and \
         not any(u.op is Ops.RANGE and u is not loop for u in nodes):
        found.append(load)
    return found

  def dims_of(self, load: UOp) -> list[int]:
    nodes = load.toposort
    return [a for a in self.global_ids if self.global_ids[a] in nodes]

  def tile_size(self, load: UOp, amount: int) -> int:
    """Slots of one block's tile: one per iteration and per item position along the grid axes the load varies on."""
    return prod(self.local[a] for a in self.dims_of(load)) * amount

  def stage(self, load: UOp, loop: UOp, blocks: UOp, inside: UOp, amount: int) -> UOp:
    """The load read from a local tile: the group's items store the block's slots (slot = position x amount +
    iteration), round-robin, into one of two buffers; after the barrier each reads its own position's slot."""
    dims, size, items = self.dims_of(load), self.tile_size(load, amount), prod(self.local)
    flat = UOp.const(INDEX, 0)
    for a in range(len(self.local)):
      flat = flat * self.local[a] + self.items[a]
    buffer = UOp(Ops.DEFINE_LOCAL, load.dtype, (), (self.buffers, 2 * size))
    self.buffers += 1
    half = (blocks % 2) * size
    stores = []
    for first in range(0, size, items):
      slot = flat + first
      rest, coords = slot // amount, {}
      for a in reversed(dims):
        coords[a], rest = rest % self.local[a], rest // self.local[a]
      value = load.substitute({**{self.global_ids[a]: self.groups[a] * self.local[a] + coords[a] for a in dims},
                               loop: blocks * amount + slot % amount})
      gate = (slot.lt(size),) if first + items > size else ()
      stores.append(UOp(Ops.STORE, dtypes.void, (buffer, half + slot, value, *gate)))
    mine = UOp.const(INDEX, 0)
    for a in dims:
      mine = mine * self.local[a] + self.items[a]
    synced = UOp(Ops.BARRIER, load.dtype, (buffer, *stores))
    return UOp(Ops.LOAD, load.dtype, (synced, half + mine * amount + inside))


def planned_with_the_grid(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  """The work-group opts leave the kernel as it is: to_gpu reads and checks them when it plans the work-groups."""
  return sink, shape


WORK_GROUP_RULES = tuple((name, planned_with_the_grid) for name in ("GROUP", "LOCAL", "LOCALTILE"))


# ---- the pass
def to_gpu(sink: UOp, shape: tuple[int, ...], caps: Capabilities,
           opts: OptList = ()) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """A lowered kernel and its output shape -> the GPU-shaped kernel, its global shape and its local shape. A kernel
  with several stores (an upcast tile, codegen/opt.py) maps each of them; only a single store's reductions are
  shared by a work-group. `opts` are the kernel's opts: GROUP, LOCAL and LOCALTILE shape its work-groups."""
  size = chosen_group(sink, shape, caps, opts)
  if len(sink.src) > 1:
    return _to_gpu_tile(sink, shape, caps, opts)
  store = sink.src[0]
  out_param, out_index, value, *store_gate = store.src  # a PADTO opt gates the store
  axes = grid_axes(shape, len(caps.max_global_size))
  grid = [prod(shape[d] for d in dims) for dims in axes]
  index_of_axis = [UOp(Ops.SPECIAL, INDEX, (), (axis, n)) for axis, n in enumerate(grid)]
  gate = None
  if size:
    if not axes:  # one output: a grid of one work-group
      axes, grid = [[]], [1]
    index_of_axis[:1] = [UOp(Ops.GROUP_INDEX, INDEX, (), (0, grid[0]))]
    item = UOp(Ops.LOCAL_INDEX, INDEX, (), (0, size))
    grid[0] *= size
    gate = item.lt(1)
  mapping = thread_mapping(shape, axes, index_of_axis)
  value, out_index = value.substitute(mapping), out_index.substitute(mapping)
  for padded in store_gate:
    padded = padded.substitute(mapping)
    gate = padded if gate is None else gate.logical_and(padded)
  if size:
    first_range = 1 + max((u.arg[0] for u in value.toposort if u.op is Ops.RANGE), default=-1)
    grouped = _GroupedReduce(item, size, first_range, caps.interleaved_groups)
    value = value.substitute({red: grouped(red) for red in top_reduces(value)})
  check_grid(grid, caps)
  local = (size,) + (1,) * (len(grid) - 1) if size else chosen_local_shape(tuple(grid), caps, opts)
  tiles = LocalTile(tuple(grid), local, caps)  # one for all LOCALTILEs: it numbers their local buffers
  for tile in (o for o in opts if o.kind == "LOCALTILE"):
    value = tiles(value, tile.axis, tile.amount)
  new_store = UOp(Ops.STORE, dtypes.void, (out_param, out_index, value) + ((gate,) if gate is not None else ()))
  return simplify(UOp(Ops.SINK, dtypes.void, (new_store,))), tuple(grid), local


def check_grid(grid: list[int], caps: Capabilities) -> None:
  for axis, (size, limit) in enumerate(zip(grid, caps.max_global_size)):
    if size > limit:
      raise ValueError(f"kernel grid axis {axis} has {size} work-items, more than the device's {limit}")


def _to_gpu_tile(sink: UOp, shape: tuple[int, ...], caps: Capabilities,
                 opts: OptList) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """Several stores per thread: each reads its thread indices from the grid; no work-group reductions."""
  if any(o.kind == "LOCALTILE" for o in opts):
    raise OptError("LOCALTILE: the kernel stores several outputs per item (an UPCAST tile); local-memory tiles are "
                   "built for kernels with one store")
  axes = grid_axes(shape, len(caps.max_global_size))
  grid = [prod(shape[d] for d in dims) for dims in axes]
  mapping = thread_mapping(shape, axes, [UOp(Ops.SPECIAL, INDEX, (), (axis, n)) for axis, n in enumerate(grid)])
  check_grid(grid, caps)
  local = chosen_local_shape(tuple(grid), caps, opts)
  stores = tuple(store.substitute(mapping) for store in sink.src)
  return simplify(UOp(Ops.SINK, dtypes.void, stores)), tuple(grid), local
