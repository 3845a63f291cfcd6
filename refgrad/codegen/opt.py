"""Kernel optimizations: small transformations of a lowered kernel, each with a legality check, applied in order.

An `Opt` names a transformation, the axis it applies to and an amount:

- `UPCAST(axis, k)`: each thread computes k neighbouring outputs along thread axis `axis` (the `SPECIAL` with that
  axis counts in steps of k and every store is repeated for the k offsets). Values that do not depend on the axis
  (a row of A in a matmul) are the same nodes for all k outputs, so they are loaded once; the k results are
  independent, so a C compiler can keep them in one vector register.
- `UNROLL(axis, k)`: the reduce loop `RANGE` number `axis` runs n/k times, each iteration doing k iterations' work,
  combined in order before they reach the accumulator.
- `THREAD(axis, n)`: the outermost thread axis is split into n ranges that run at once on n CPU threads. The kernel
  graph is unchanged: a CPU renderer takes the range as two arguments and its runtime launches each range
  (`Program.thread_ranges`). Outputs of different ranges never overlap.
- `PADTO(axis, k)`: thread axis `axis` grows to the next multiple of k, so that UPCAST(axis, k) applies; the added
  threads read nothing (their loads are gated) and write nothing (their stores are gated).
- `PADLOOP(axis, k)`: reduce loop `axis` grows to the next multiple of k, so that UNROLL(axis, k) applies; the added
  iterations read nothing and add the reduction's identity.
- `SWAP(axis, other)`: reduce loops `axis` and `other` of one reduction trade places in its loop nest (loop
  interchange: the loop whose iterations read neighbouring addresses should run innermost).
- `TILE(axis, k)`: reduce loop `axis` runs in blocks of k: it becomes a loop over the n/k blocks, where it stood,
  and a loop of k inside the block, moved innermost (loop tiling: each block of `axis` is reused by every iteration
  of the loops inside it while it is still in cache).
- `GROUP(0, L)`, `LOCAL(axis, k)` and `LOCALTILE(axis, k)`: the work-groups of a device that launches them (items
  sharing a reduction, the plain work-group shape, tiles of a reduce loop's shared loads in local memory);
  codegen/gpu.py checks and applies them, other devices refuse them.

UPCAST, UNROLL and TILE need k to divide the size, PADTO and PADLOOP a size that k does not divide, THREAD at most as
many threads as rows, SWAP two loops of the same reduction (an `OptError` says why an opt does not apply). Every opt
computes the same value in every lane, bit for bit, except UNROLL, SWAP and TILE of a float ADD or MUL reduction,
which add in another order: docs/SPEC.md leaves the order of a reduction free within its error bound, and the
checker's bounds hold for every order.

A tuple of opts is an opt list: it prints (`UPCAST(1,4) UNROLL(0,4)`), hashes and replays (`parse_opts`).
`default_opts` is the heuristic a device gets from its `Capabilities`; `REFGRAD_OPTS` overrides it for every kernel
of such a device that the list fits (the others keep the heuristic's, with one warning per list; a string that is
not an opt list is a ValueError). The reference, PYTHON, always runs kernels as lowered.
"""
from __future__ import annotations

import functools
import os
import random
import re
import warnings
from collections.abc import Callable

from refgrad.alu import reduce_identity, result_dtype
from refgrad.codegen.contract import Opt, OptList
from refgrad.codegen.simplify import simplify_index
from refgrad.ops import OP_FACTS
from refgrad.uop import GroupOp, Ops, UOp, prod


class OptError(ValueError):
  """An opt that does not apply to a kernel: no such axis, or an amount that does not divide its size."""


def parse_opts(text: str) -> OptList:
  """'UPCAST(1,4) UNROLL(0,4)' -> the opt list (what opts_text prints)."""
  pattern = r"(\w+)\((\d+),\s*(\d+)\)"
  if re.sub(pattern, "", text).strip() not in ("", "(none)"):
    raise OptError(f"cannot read opts from {text!r}: write them as UPCAST(axis,amount) UNROLL(axis,amount)")
  opts = []
  for kind, axis, amount in re.findall(pattern, text):
    if kind not in APPLY:
      raise OptError(f"unknown opt {kind!r} in {text!r}: known are {', '.join(APPLY)}")
    opts.append(Opt(kind, int(axis), int(amount)))
  return tuple(opts)


def thread_index(sink: UOp, axis: int, opt: str = "UPCAST") -> UOp:
  """The SPECIAL of thread axis `axis` in a lowered kernel; OptError if there is none."""
  found = [u for u in sink.toposort if u.op is Ops.SPECIAL and u.arg[0] == axis]
  if not found:
    raise OptError(f"{opt}: the kernel has no thread axis {axis} (axes of size 1 have none)")
  return found[0]


def check_amount(what: str, size: int, amount: int) -> None:
  if amount < 2 or size % amount:
    raise OptError(f"{what} of size {size} cannot be split by {amount}: the amount must be at least 2 and divide it")


def upcast(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  index = thread_index(sink, axis)
  check_amount(f"UPCAST: thread axis {axis}", index.arg[1], amount)
  outer = UOp(Ops.SPECIAL, index.dtype, (), (axis, index.arg[1] // amount))
  stores = [store.substitute({index: outer * amount + lane}) for lane in range(amount) for store in sink.src]
  new_shape = tuple(s // amount if i == axis else s for i, s in enumerate(shape))
  return sink.replace(src=tuple(stores)), new_shape


def combine(op: Ops, values: list[UOp]) -> UOp:
  """values[0] op values[1] op ..., left to right: how the k unrolled iterations of a reduce meet."""
  total = values[0]
  for v in values[1:]:
    total = UOp(op, result_dtype(op, (total.dtype, v.dtype)), (total, v))
  return total


def reduce_loop(sink: UOp, axis: int, opt: str = "UNROLL") -> UOp:
  """The RANGE of reduce loop `axis` in a lowered kernel; OptError if there is none."""
  loops = [u for u in sink.toposort if u.op is Ops.RANGE and u.arg[0] == axis]
  if not loops:
    raise OptError(f"{opt}: the kernel has no reduce loop {axis}")
  return loops[0]


def unroll(sink: UOp, shape: tuple[int, ...], axis: int, amount: int, lanes: Callable[[int], range] = range,
           meet: Callable[[Ops], Ops] = lambda op: op) -> tuple[UOp, tuple[int, ...]]:
  """Each iteration of reduce loop `axis` does `amount` of the old ones, combined with the reduce's own op. `lanes`
  (which of the amount iterations are kept) and `meet` (the op that combines them) are there for the planted
  optimizer bugs of the self-test (tests/broken_devices.py), which get them wrong."""
  loop = reduce_loop(sink, axis)
  check_amount(f"UNROLL: reduce loop {axis}", loop.arg[1], amount)
  outer = UOp(Ops.RANGE, loop.dtype, (), (axis, loop.arg[1] // amount))
  mapping = {}
  for node in sink.toposort:
    if node.op is Ops.REDUCE and loop in node.src[1:]:
      bodies = [node.src[0].substitute({loop: outer * amount + lane}) for lane in lanes(amount)]
      ranges = tuple(outer if r is loop else r for r in node.src[1:])
      mapping[node] = node.replace(src=(combine(meet(node.arg), bodies), *ranges))
  return sink.substitute(mapping), shape


def rebuild(sink: UOp, change: Callable[[UOp], UOp]) -> UOp:
  """The graph rebuilt bottom-up, each node passed through `change` once its sources are rebuilt (so a load whose
  index holds another load sees that one changed too)."""
  rebuilt: dict[UOp, UOp] = {}
  for node in sink.toposort:
    new_src = tuple(rebuilt[s] for s in node.src)
    rebuilt[node] = change(node if new_src == node.src else node.replace(src=new_src))
  return rebuilt[sink]


def padded_size(what: str, size: int, amount: int) -> int:
  if amount < 2 or size % amount == 0:
    raise OptError(f"{what} of size {size} needs no padding to a multiple of {amount}: the amount must be at least "
                   "2 and not divide the size")
  return -(-size // amount) * amount


def gated(load: UOp, inside: UOp) -> UOp:
  """The load, read only where `inside` also holds (elsewhere it reads nothing and gives 0)."""
  valid = inside if len(load.src) < 3 else load.src[2].logical_and(inside)
  return load.replace(src=(load.src[0], load.src[1], valid))


def pad_index(sink: UOp, index: UOp, size: int, also: Callable[[UOp, UOp], UOp | None]) -> UOp:
  """The kernel with thread or loop index `index` counting to `size`: loads past its old end are gated, and
  also(node, inside) rewrites what else must know (stores, reduces), given the condition `inside` the old range."""
  padded = index.replace(arg=(index.arg[0], size))
  inside = padded.lt(index.arg[1])

  def change(u: UOp) -> UOp:
    if u is index:
      return padded
    if u.op is Ops.LOAD and padded in u.src[1].toposort:  # nothing is read past the edge
      return gated(u, inside)
    return also(u, inside) or u
  return rebuild(sink, change)


def padto(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  index = thread_index(sink, axis, "PADTO")
  size = padded_size(f"PADTO: thread axis {axis}", index.arg[1], amount)

  def gate_store(u: UOp, inside: UOp) -> UOp | None:  # the added threads write nothing
    if u.op is not Ops.STORE:
      return None
    return u.replace(src=(*u.src[:3], inside if len(u.src) < 4 else u.src[3].logical_and(inside)))
  return pad_index(sink, index, size, gate_store), tuple(size if i == axis else s for i, s in enumerate(shape))


def padloop(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  loop = reduce_loop(sink, axis, "PADLOOP")
  size = padded_size(f"PADLOOP: reduce loop {axis}", loop.arg[1], amount)

  def add_identity(u: UOp, inside: UOp) -> UOp | None:  # the added iterations add the reduction's identity
    if u.op is not Ops.REDUCE or inside.src[0] not in u.src[1:]:
      return None
    return u.replace(src=(inside.where(u.src[0], UOp.const(u.dtype, reduce_identity(u.arg, u.dtype))), *u.src[1:]))
  return pad_index(sink, loop, size, add_identity), shape


def reduces_over(sink: UOp, loop: UOp) -> list[UOp]:
  return [u for u in sink.toposort if u.op is Ops.REDUCE and loop in u.src[1:]]


def with_ranges(sink: UOp, loop: UOp, ranges: Callable[[tuple[UOp, ...]], tuple[UOp, ...]],
                body: Callable[[UOp], UOp] = lambda b: b) -> UOp:
  """The kernel with every reduction over `loop` given new ranges (and its body passed through `body`)."""
  return sink.substitute({r: r.replace(src=(body(r.src[0]), *ranges(r.src[1:]))) for r in reduces_over(sink, loop)})


def swap(sink: UOp, shape: tuple[int, ...], axis: int, other: int) -> tuple[UOp, tuple[int, ...]]:
  loop, second = reduce_loop(sink, axis, "SWAP"), reduce_loop(sink, other, "SWAP")
  if axis == other or any(second not in r.src[1:] for r in reduces_over(sink, loop)):
    raise OptError(f"SWAP: reduce loops {axis} and {other} are not two loops of one reduction")
  trade = {loop: second, second: loop}
  return with_ranges(sink, loop, lambda ranges: tuple(trade.get(r, r) for r in ranges)), shape


def tile(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  loop = reduce_loop(sink, axis, "TILE")
  check_amount(f"TILE: reduce loop {axis}", loop.arg[1], amount)
  blocks = UOp(Ops.RANGE, loop.dtype, (), (axis, loop.arg[1] // amount))
  first_free = 1 + max(u.arg[0] for u in sink.toposort if u.op is Ops.RANGE)
  inside = UOp(Ops.RANGE, loop.dtype, (), (first_free, amount))
  return with_ranges(sink, loop, lambda ranges: tuple(blocks if r is loop else r for r in ranges) + (inside,),
                     lambda body: body.substitute({loop: blocks * amount + inside})), shape


OptRule = Callable[[UOp, tuple[int, ...], int, int], tuple[UOp, tuple[int, ...]]]  # (sink, shape, axis, amount)
def thread(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  outer = next((i for i, s in enumerate(shape) if s > 1), None)
  if axis != outer:
    raise OptError(f"THREAD: axis {axis} is not the outermost thread axis (that is {outer}, of shape {shape})")
  if not 2 <= amount <= shape[axis]:
    raise OptError(f"THREAD: thread axis {axis} of size {shape[axis]} cannot run on {amount} threads: the amount "
                   "must be at least 2 and at most the size")
  return sink, shape


def work_groups(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  raise OptError("GROUP, LOCAL and LOCALTILE shape work-groups: they are for devices that launch them "
                 "(codegen/gpu.py), not for this one")


APPLY: dict[str, OptRule] = {"UPCAST": upcast, "UNROLL": unroll, "THREAD": thread, "PADTO": padto,
                             "PADLOOP": padloop, "SWAP": swap, "TILE": tile, "GROUP": work_groups,
                             "LOCAL": work_groups, "LOCALTILE": work_groups}


def apply_opts(sink: UOp, shape: tuple[int, ...], opts: OptList,
               rules: tuple[tuple[str, OptRule], ...] = ()) -> tuple[UOp, tuple[int, ...]]:
  """The kernel with every opt applied in order; OptError names the first that does not apply. `rules` replace or
  add transformations by name (a device's own, from Capabilities.opt_rules)."""
  table = {**APPLY, **dict(rules)}
  for opt in opts:
    if opt.kind not in table:
      raise OptError(f"unknown opt {opt.kind!r}: known are {', '.join(table)}")
    sink, shape = table[opt.kind](sink, shape, opt.axis, opt.amount)
  return sink, shape


def heuristic_amounts(upcast_lanes: int, threads: int = 1) -> tuple[int, ...]:
  """Every amount `default_opts` may choose on a device of `upcast_lanes` and `threads`, and the small ones: what
  random opt lists draw from, so the check and a fuzz campaign reach the opts the heuristic applies (a 16-wide
  column-sum tile on an 8-lane device, for one)."""
  return tuple(sorted({2, 3, 4, 8, upcast_lanes, 2 * upcast_lanes, threads} - {0, 1}))


def legal_opts(sink: UOp, amounts: tuple[int, ...] = (2, 3, 4, 8)) -> list[Opt]:
  """Every single opt that applies to this kernel as it is (what a search or a fuzzer draws from)."""
  found = []
  for u in sink.toposort:
    split, pad = {Ops.SPECIAL: ("UPCAST", "PADTO"), Ops.RANGE: ("UNROLL", "PADLOOP")}.get(u.op, (None, None))
    if split:
      divides = [k for k in amounts if k < u.arg[1] and u.arg[1] % k == 0]
      found += [Opt(split, u.arg[0], k) for k in divides]
      found += [Opt(pad, u.arg[0], k) for k in amounts if u.arg[1] % k]
      if u.op is Ops.RANGE:
        found += [Opt("TILE", u.arg[0], k) for k in divides]
    if u.op is Ops.REDUCE:
      found += [Opt("SWAP", a.arg[0], b.arg[0]) for i, a in enumerate(u.src[1:]) for b in u.src[2 + i:]]
  threads = sorted((u.arg for u in sink.toposort if u.op is Ops.SPECIAL), key=lambda arg: arg[0])
  if threads:  # the outermost thread axis, on any number of threads up to its size (ranges need not be equal)
    found += [Opt("THREAD", threads[0][0], k) for k in amounts if k <= threads[0][1]]
  return sorted(set(found), key=str)


def random_opts(sink: UOp, shape: tuple[int, ...], rng: random.Random, max_opts: int = 3,
                amounts: tuple[int, ...] = (2, 3, 4, 8)) -> OptList:
  """A random legal opt list for this kernel: up to max_opts opts, each legal after the ones before it."""
  opts: list[Opt] = []
  for _ in range(rng.randint(1, max_opts)):
    candidates = legal_opts(sink, amounts)
    if not candidates:
      break
    opts.append(rng.choice(candidates))
    sink, shape = apply_opts(sink, shape, (opts[-1],))
  return tuple(opts)


# Kernels smaller than this many multiply-adds run as they are: an opt makes the source longer (slower to compile)
# and only pays off when the loops are long.
WORK_THRESHOLD = 1 << 16
# Below this many multiply-adds a kernel takes less time than waking a thread pool (tens of microseconds). 2^19, not
# 2^20: the CNN training step's 884K-op pooling-gradient kernel went from 10 to 5.6 ms on two threads.
THREAD_THRESHOLD = 1 << 19


LONG_LOOP = 16  # an innermost reduce loop at least this long runs split over several accumulators (walker.pieces)


def tile_shares_loads(sink: UOp, axis: int) -> bool:
  """True if some load inside a reduce does not depend on thread axis `axis`, so a tile of outputs along it loads
  that value once for all of them (a matmul's row of A for a tile along the columns). A row sum shares nothing: a
  tile of rows would only take parallel work away from a GPU's grouped reduction."""
  index = next((u for u in sink.toposort if u.op is Ops.SPECIAL and u.arg[0] == axis), None)
  if index is None:
    return False
  bodies = [u.src[0] for u in sink.toposort if u.op is Ops.REDUCE]
  return any(u.op is Ops.LOAD and index not in u.toposort for body in bodies for u in body.toposort)


def tile_loads_contiguously(sink: UOp, axis: int) -> bool:
  """True if every load inside a reduce that depends on thread axis `axis` reads consecutive addresses along it: a
  tile along the axis then loads one vector per iteration where each output alone would read one element per cache
  line (a column sum: 9.9 -> 1.3 ms on CLANG for 2048^2)."""
  index = next((u for u in sink.toposort if u.op is Ops.SPECIAL and u.arg[0] == axis), None)
  loads = [u for r in sink.toposort if r.op is Ops.REDUCE for u in r.src[0].toposort if u.op is Ops.LOAD]
  moving = [u for u in loads if index is not None and index in u.src[1].toposort]
  return bool(moving) and all(stride_along(u.src[1], index) == 1 for u in moving)


def index_deps(sink: UOp) -> dict[UOp, frozenset[UOp]]:
  """The thread indices (SPECIAL) and loops (RANGE) each node of a kernel depends on, in one pass."""
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in sink.toposort:
    own = frozenset((u,)) if u.op in (Ops.SPECIAL, Ops.RANGE) else frozenset()
    deps[u] = own.union(*(deps[s] for s in u.src))
  return deps


def loop_work(sink: UOp, deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
  """The ALU ops and loads a kernel runs in its reduce loops (those that depend on a loop)."""
  body = {u: None for r in sink.toposort if r.op is Ops.REDUCE for u in r.src[0].toposort
          if (u.op in GroupOp.ALU or u.op is Ops.LOAD) and any(d.op is Ops.RANGE for d in deps[u])}
  return list(body)


def shared_loop_work(work: list[UOp], index: UOp, deps: dict[UOp, frozenset[UOp]]) -> int:
  """How much of the work does not depend on a thread index: what a tile along it computes once for all."""
  return sum(index not in deps[u] for u in work)


def innermost(loops: list[UOp]) -> UOp:
  """The innermost of a kernel's reduce loops (the last one lowering made)."""
  return max(loops, key=lambda u: u.arg[0])


def stride_along(index: UOp, var: UOp) -> int | None:
  """How far `index` moves when `var` (a RANGE or SPECIAL) steps by one, if that is a constant (affine index)."""
  step = simplify_index(index.substitute({var: var + 1}) - index)
  return step.arg if step.op is Ops.CONST else None


def reduce_vectorizes(sink: UOp) -> bool:
  """True if the innermost reduce loop is long and every load in it reads consecutive (or the same) addresses from
  one iteration to the next: the renderers' split reduction (several accumulators) then vectorizes along the loop,
  which beats a tile of outputs whose loads are strided (attention's q @ k^T: 1.4 ms against 4 to 7 ms)."""
  loops = [u for u in sink.toposort if u.op is Ops.RANGE]
  if not loops:
    return False
  inner = innermost(loops)
  loads = [u for r in sink.toposort if r.op is Ops.REDUCE for u in r.src[0].toposort if u.op is Ops.LOAD]
  return inner.arg[1] >= LONG_LOOP and all(stride_along(load.src[1], inner) in (0, 1) for load in loads)


def default_opts(sink: UOp, shape: tuple[int, ...], upcast_lanes: int, threads: int = 1) -> OptList:
  """The heuristic for a CPU device whose compiler vectorizes `upcast_lanes` floats: a tile of outputs per thread
  where its outputs share work (`tile_opts`), and the outermost axis split over `threads` CPU threads when there is
  enough work (`kernel_work`)."""
  env = os.environ.get("REFGRAD_OPTS")
  if env is not None and (forced := env_opts_for(sink, shape, env)) is not None:
    return forced
  work = kernel_work(sink, shape)
  opts: OptList = ()
  if upcast_lanes >= 2 and work >= WORK_THRESHOLD:
    opts, shape = tile_opts(sink, shape, upcast_lanes)
  outer = next((i for i, s in enumerate(shape) if s > 1), None)
  if threads > 1 and work >= THREAD_THRESHOLD and outer is not None and shape[outer] >= threads:
    opts += (Opt("THREAD", outer, threads),)
  return opts


# The opt lists from REFGRAD_OPTS already warned about: one warning per list in a process, not one per kernel
_WARNED_ENV_OPTS: set[OptList] = set()


def _checked_later(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
  """A work-group opt, checked where a device that launches work-groups plans its grid (codegen/gpu.py)."""
  return sink, shape


_UNCHECKED = tuple((name, _checked_later) for name in ("GROUP", "LOCAL", "LOCALTILE"))


@functools.lru_cache(maxsize=16)
def parse_env_opts(text: str) -> OptList:
  """REFGRAD_OPTS's opt list; a ValueError naming the variable if it cannot be read."""
  try:
    return parse_opts(text)
  except OptError as error:
    raise ValueError(f"REFGRAD_OPTS={text!r} is not an opt list: {error}") from None


def env_opts_for(sink: UOp, shape: tuple[int, ...], text: str) -> OptList | None:
  """REFGRAD_OPTS's opt list for this kernel, or None if it does not apply to it (the kernel then gets the
  heuristic's opts; the first such kernel of each list is named in a warning)."""
  opts = parse_env_opts(text)
  try:
    apply_opts(sink, shape, opts, _UNCHECKED)
  except OptError as error:
    if opts not in _WARNED_ENV_OPTS:
      _WARNED_ENV_OPTS.add(opts)
      warnings.warn(f"REFGRAD_OPTS={text!r} does not fit the kernel of output shape {shape} ({error}): it and "
                    "any other kernel the list does not fit run with the default opts", stacklevel=2)
    return None
  return opts


def kernel_work(sink: UOp, shape: tuple[int, ...]) -> int:
  """About how many multiply-adds a kernel runs: outputs times loop iterations (times the cost of its costliest op,
  OP_FACTS' cost: a libm call's); an elementwise kernel, outputs times half the cost of its ALU ops (the pooling
  gradient's index math: about 50 ops per element)."""
  loops = [u for u in sink.toposort if u.op is Ops.RANGE]
  costs = [OP_FACTS[u.op].cost for u in sink.toposort if u.op in OP_FACTS]
  if loops:
    return prod(shape) * prod(u.arg[1] for u in loops) * max(costs, default=1)
  ops = sum(costs)
  return prod(shape) * max(1, ops // 2)


# An elementwise kernel gets a tile along an axis when at least this many of its ALU ops do not depend on that axis
# (index math of windows and strides, computed once for the tile): the CNN's pooling gradient, 1.2 -> 0.8 ms on CLANG.
SHARED_INDEX_OPS = 8
# A reduction's tile spans up to three axes and TILE_OUTPUTS outputs (accumulators). The CNN training step's
# convolutions on CLANG, per-kernel best times at load 5-7 (4x4 spatial tiles before): forward 2.6 -> 0.27 ms, weight
# gradients 1.7 -> 0.7 and 1.4 -> 0.6 ms, max pool 0.56 -> 0.14 ms; 64 outputs made the conv forward 4x slower.
TILE_AXES = 3
TILE_OUTPUTS = 48


def tile_loads_shared(sink: UOp, deps: dict[UOp, frozenset[UOp]], tile: list[Opt], index: UOp) -> int:
  """How many loads of a tile's reduce loops (one per output of the tile that they depend on, past the first) a
  further tile along thread index `index` would share: those that do not depend on it."""
  along = {u.arg[0]: u for u in sink.toposort if u.op is Ops.SPECIAL}
  loads = {u: None for r in sink.toposort if r.op is Ops.REDUCE for u in r.src[0].toposort if u.op is Ops.LOAD}
  return sum(prod(o.amount for o in tile if along[o.axis] in deps[u]) - 1 for u in loads if index not in deps[u])


def tile_opts(sink: UOp, shape: tuple[int, ...], upcast_lanes: int) -> tuple[OptList, tuple[int, ...]]:
  """UPCASTs along the thread axes the work depends on least, so a tile computes that work once for all its outputs
  (a convolution's input gradient: its index math does not depend on the batch axis, 5.5 -> 0.6 ms on CLANG); on a
  tie, the later axes, whose loads are contiguous. With reduce loops, up to upcast_lanes outputs along the first such
  axis, then 4 along the axis that shares most of the tile's own loads (`tile_loads_shared`: a convolution's input
  row serves a tile of output channels), then up to TILE_OUTPUTS outputs in all along a third such axis; each where
  the tile shares loads, reads vectors, or the inner loop is short (a long row sum's tile would share nothing and
  undo the split reduction, or a GPU's grouped reduction), and not when the innermost loop already reads every
  operand contiguously (the split reduction vectorizes it). Elementwise kernels (the compiler vectorizes their loop)
  only where SHARED_INDEX_OPS of their ops are shared, 4 outputs along one axis."""
  loops = [u for u in sink.toposort if u.op is Ops.RANGE]
  if loops and reduce_vectorizes(sink):
    return (), shape
  deps = index_deps(sink)
  work = loop_work(sink, deps) if loops else [u for u in sink.toposort if u.op in GroupOp.ALU]
  specials = [u for u in sink.toposort if u.op is Ops.SPECIAL]
  by_sharing = sorted(specials, key=lambda u: (shared_loop_work(work, u, deps), u.arg[0]), reverse=True)
  long_inner_loop = bool(loops) and innermost(loops).arg[1] >= LONG_LOOP
  opts: list[Opt] = []
  while by_sharing and len(opts) < (TILE_AXES if loops else 1):
    if loops and opts:  # the next axis: the one along which the tile's own loads are shared most
      by_sharing.sort(key=lambda u: tile_loads_shared(sink, deps, opts, u), reverse=True)  # stable: ties keep order
    index, *by_sharing = by_sharing
    axis, size = index.arg
    if loops:
      shares, vectors = tile_shares_loads(sink, axis), tile_loads_contiguously(sink, axis)
      lanes = (upcast_lanes if not opts else 4) * (2 if vectors and not shares else 1)  # a column sum: 2 vectors
      helps = shares or vectors or not long_inner_loop
      if len(opts) == 2:  # a third axis only where the tile's loads are shared along it, within the register budget
        lanes, helps = min(4, TILE_OUTPUTS // prod(o.amount for o in opts)), shares
    else:
      lanes, helps = 4, shared_loop_work(work, index, deps) >= SHARED_INDEX_OPS
    # a small axis (a 3x3 window's) is tiled whole
    amount = next((k for k in (lanes, 8, 4, 2) if 2 <= k <= lanes and size % k == 0),
                  size if size <= min(4, lanes) else None)
    if amount and helps:
      opts.append(Opt("UPCAST", axis, amount))
      shape = tuple(s // amount if i == axis else s for i, s in enumerate(shape))
  return tuple(opts), shape
