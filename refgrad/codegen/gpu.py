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

Two opts (codegen/opt.py) choose the work-groups instead of these defaults; they are checked here, where the grid
is planned, and draw from `gpu_opts` in a fuzz campaign or a search:

* `GROUP(0, L)`: a kernel's reductions are shared by work-groups of L items (any L the reductions, the device's
  work-group size and local memory allow, not only the power of two chosen by default).
* `LOCAL(axis, k)`: work-groups of k items along grid axis `axis` (1 along axes no LOCAL names), and no grouped
  reduction: every item runs its reduction loops alone.

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
from refgrad.codegen.opt import Opt, OptError, OptList
from refgrad.codegen.symbolic import simplify
from refgrad.device import Capabilities
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
  """Items per work-group for this kernel's grouped reductions (0: none), by its GROUP or LOCAL opt or by default."""
  group = [o.amount for o in opts if o.kind == "GROUP"]
  if any(o.kind == "LOCAL" for o in opts):
    if group:
      raise OptError("GROUP and LOCAL: a kernel's work-groups either share its reductions or run plain items")
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
  """Every GROUP or LOCAL opt that applies to this kernel (after its other opts) on this device."""
  found = []
  reduces = shareable_reduces(sink)
  if reduces:
    found += [Opt("GROUP", 0, k) for k in amounts if 2 <= k <= group_limit(reduces, caps)]
  grid = [prod(shape[d] for d in dims) for dims in grid_axes(shape, len(caps.max_global_size))]
  found += [Opt("LOCAL", axis, k) for axis, size in enumerate(grid) for k in amounts
            if size % k == 0 and k <= caps.max_local_size]
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


def planned_with_the_grid(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  """GROUP and LOCAL leave the kernel as it is: to_gpu reads and checks them when it plans the work-groups."""
  return sink, shape


WORK_GROUP_RULES = (("GROUP", planned_with_the_grid), ("LOCAL", planned_with_the_grid))


# ---- the pass
def to_gpu(sink: UOp, shape: tuple[int, ...], caps: Capabilities,
           opts: OptList = ()) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """A lowered kernel and its output shape -> the GPU-shaped kernel, its global shape and its local shape. A kernel
  with several stores (an upcast tile, codegen/opt.py) maps each of them; only a single store's reductions are
  shared by a work-group. `opts` are the kernel's opts: GROUP and LOCAL choose its work-groups."""
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
  new_store = UOp(Ops.STORE, dtypes.void, (out_param, out_index, value) + ((gate,) if gate is not None else ()))
  return simplify(UOp(Ops.SINK, dtypes.void, (new_store,))), tuple(grid), local


def check_grid(grid: list[int], caps: Capabilities) -> None:
  for axis, (size, limit) in enumerate(zip(grid, caps.max_global_size)):
    if size > limit:
      raise ValueError(f"kernel grid axis {axis} has {size} work-items, more than the device's {limit}")


def _to_gpu_tile(sink: UOp, shape: tuple[int, ...], caps: Capabilities,
                 opts: OptList) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """Several stores per thread: each reads its thread indices from the grid; no work-group reductions."""
  axes = grid_axes(shape, len(caps.max_global_size))
  grid = [prod(shape[d] for d in dims) for dims in axes]
  mapping = thread_mapping(shape, axes, [UOp(Ops.SPECIAL, INDEX, (), (axis, n)) for axis, n in enumerate(grid)])
  check_grid(grid, caps)
  local = chosen_local_shape(tuple(grid), caps, opts)
  stores = tuple(store.substitute(mapping) for store in sink.src)
  return simplify(UOp(Ops.SINK, dtypes.void, stores)), tuple(grid), local
