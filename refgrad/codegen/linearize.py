"""Linearization: a lowered kernel graph becomes an ordered `Program` that any device can consume.

`REDUCE(body, *ranges)` turns into
    DEFINE_ACC            accumulator, starts at the reduce identity
    RANGE ...             one loop per reduced axis
      <body>              only the nodes that depend on the loop; the rest is hoisted above it
      ACCUMULATE(acc, v)  acc <- reduce_op(acc, v)
    ENDRANGE ...
and later uses of the reduce read the accumulator.
"""
from __future__ import annotations

import functools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

from refgrad.codegen.gpu import WORK_GROUP_RULES, gpu_opts, to_gpu
from refgrad.codegen.lowering import lower_kernel
from refgrad.codegen.opt import OptList, apply_opts, default_opts, heuristic_amounts, opts_text, random_opts
from refgrad.codegen.symbolic import simplify, simplify_gated_loads, simplify_index
from refgrad.device import Capabilities
from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp


@dataclass(frozen=True)
class Program:
  """A kernel ready for a device. `uops` is ordered; PARAM i is the i-th buffer (0 is the output).

  `local_shape` is empty for a plain program. A GPU-shaped one (codegen/gpu.py) has one entry per grid axis:
  the work-group size, which divides the global size on that axis."""
  name: str
  uops: tuple[UOp, ...]
  global_shape: tuple[int, ...]
  key: UOp
  local_shape: tuple[int, ...] = ()
  opts: OptList = ()

  @functools.cached_property
  def params(self) -> tuple[UOp, ...]:
    """Every buffer parameter, in order, including any the simplified program no longer reads."""
    return tuple(sorted((u for u in self.key.toposort if u.op is Ops.PARAM), key=lambda u: u.arg[0]))

  @functools.cached_property
  def loop_ends(self) -> dict[int, int]:
    """Position of each RANGE -> position of its ENDRANGE."""
    ends, open_loops = {}, []
    for i, u in enumerate(self.uops):
      if u.op is Ops.RANGE:
        open_loops.append(i)
      elif u.op is Ops.ENDRANGE:
        ends[open_loops.pop()] = i
    return ends

  def splittable_reduce(self, start: int, lanes: int) -> bool:
    """The loop at `start` is innermost, feeds exactly one accumulator and runs at least 2*lanes times, so a
    renderer may run it as `lanes` independent accumulators (the order of a reduction is free: SPEC.md)."""
    end = self.loop_ends[start]
    body = self.uops[start + 1:end]
    return (lanes > 1 and self.uops[start].arg[1] >= 2 * lanes and not any(u.op is Ops.RANGE for u in body)
            and sum(u.op is Ops.ACCUMULATE for u in body) == 1)

  @property
  def threads(self) -> int:
    """How many CPU threads the program's THREAD opt splits its outermost thread axis over (1: no THREAD opt)."""
    return next((o.amount for o in self.opts if o.kind == "THREAD"), 1)

  def thread_ranges(self) -> list[tuple[int, int]]:
    """The [start, end) ranges of the outermost thread axis, one per CPU thread: a threaded kernel is launched once
    per range with the two as its last arguments."""
    size = next((s for s in self.global_shape if s > 1), 1)
    n = self.threads
    return [(size * i // n, size * (i + 1) // n) for i in range(n) if size * i // n < size * (i + 1) // n]

  def pieces(self, start: int, stop: int, lanes: int) -> Iterator[tuple[int, int | None]]:
    """uops[start:stop] in render order: (i, end) for a reduce loop from i to end that splittable_reduce lets a
    renderer run over `lanes` accumulators, (i, None) for any other uop, to render on its own."""
    i = start
    while i < stop:
      end = self.loop_ends.get(i)
      if end is not None and self.splittable_reduce(i, lanes):
        yield i, end
        i = end + 1
      else:
        yield i, None
        i += 1

  def code_paths(self, lanes: int) -> list[str]:
    """The paths a renderer that splits reductions over `lanes` accumulators (see splittable_reduce) takes for
    this program, and the other shapes renderers special-case: what `refgrad check` reports as reached."""
    paths = set()
    for start, end in self.loop_ends.items():
      if self.splittable_reduce(start, lanes):
        paths.add(f"split reduction ({lanes} accumulators)")
        if self.uops[start].arg[1] % lanes:
          paths.add("split reduction remainder loop")
      elif any(u.op is Ops.ACCUMULATE for u in self.uops[start + 1:end]):
        paths.add("serial reduction loop")
    if any(u.op is Ops.DEFINE_LOCAL for u in self.uops):
      paths.add("grouped reduction (local memory and barriers)")
    if any(u.op is Ops.LOAD and len(u.src) > 2 for u in self.uops):
      paths.add("gated load (padding)")
    paths |= {f"{opt.kind} opt" for opt in self.opts} | {f"{opt.kind} by {opt.amount}" for opt in self.opts}
    paths |= {f"{u.dtype.name} arithmetic" for u in self.uops
              if u.dtype in (dtypes.float16, dtypes.bfloat16) and u.op not in (Ops.LOAD, Ops.PARAM)}
    return sorted(paths)

  def listing(self) -> str:
    """A numbered, readable text form: what the PYTHON device 'renders'."""
    number = {u: i for i, u in enumerate(self.uops)}
    local = f" local_shape={self.local_shape}" if self.local_shape else ""
    opts = f" opts={opts_text(self.opts)}" if self.opts else ""
    lines = [f"kernel {self.name} global_shape={self.global_shape}{local}{opts}"]
    depth = 0
    for i, u in enumerate(self.uops):
      depth -= u.op is Ops.ENDRANGE
      srcs = ", ".join(f"%{number[s]}" for s in u.src)
      arg = "" if u.arg is None else f" {u.arg!r}"
      lines.append(f"{i:4d} {'  ' * depth}{u.op.name}:{u.dtype.name}({srcs}){arg}")
      depth += u.op is Ops.RANGE
    return "\n".join(lines)


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
    """The loops a node's value depends on."""
    for n in node.toposort:
      if n in self.deps:
        continue
      if n.op is Ops.RANGE:
        self.deps[n] = frozenset({n})
      elif n.op is Ops.DEFINE_ACC:
        body, ranges = self.reduces[n]
        self.deps[n] = self.ranges_of(body) - set(ranges)
      else:
        self.deps[n] = frozenset().union(*(self.deps[s] for s in n.src))
    return self.deps[node]

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


def kernel_name(sink: UOp, shape: tuple[int, ...]) -> str:
  has_reduce = any(u.op is Ops.REDUCE for u in sink.toposort)
  return ("r_" if has_reduce else "E_") + ("_".join(str(s) for s in shape) or "0d")


# One entry per (kernel, device capabilities). Replaying tests/test_reduce.py's sequence, 64 entries already miss
# only on first use (2993 misses for 2988 distinct kernels); 512 covers the devices' runner caches (128 each).
def compile_ast(ast: UOp, caps: Capabilities | None = None, opts: OptList | None = None) -> Program:
  """The whole codegen pipeline for one scheduled kernel: lower, simplify, optimize, linearize. `opts` default to
  the heuristic for the device's `caps` (none for the reference, caps None). With the `caps` of a device that
  launches a grid of work-groups, the program is GPU-shaped after the opts (codegen/gpu.py)."""
  if opts is None:
    heuristic = caps is not None and caps.upcast_lanes > 1
    opts = _device_opts(ast, caps, os.environ.get("REFGRAD_OPTS")) if heuristic else ()
  return _compile(ast, caps, tuple(opts))


@functools.lru_cache(maxsize=512)
def _device_opts(ast: UOp, caps: Capabilities, override: str | None) -> OptList:
  """The heuristic's opts for a kernel on a device, once per kernel (realize asks on every launch); `override`,
  REFGRAD_OPTS's value, is part of the key so that setting it takes effect."""
  return default_opts(*lowered_kernel(ast), caps.upcast_lanes, caps.threads)


@functools.lru_cache(maxsize=512)
def lowered_kernel(ast: UOp) -> tuple[UOp, tuple[int, ...]]:
  """A scheduled kernel lowered to index math and simplified, and its output shape: what opts transform."""
  lowered, shape = lower_kernel(ast)
  return simplify_gated_loads(simplify(lowered)), shape


@functools.lru_cache(maxsize=512)
def _compile(ast: UOp, caps: Capabilities | None, opts: OptList) -> Program:
  lowered, shape = lowered_kernel(ast)
  name = kernel_name(lowered, shape)
  if opts:
    lowered, shape = apply_opts(lowered, shape, opts, device_rules(caps))
    lowered = simplify(lowered)
  if launches_work_groups(caps):
    lowered, shape, local = to_gpu(lowered, shape, caps, opts)
    return Program(name, tuple(linearize(lowered)), shape, ast, local, opts)
  return Program(name, tuple(linearize(lowered)), shape, ast, opts=opts)


def forget_compiled() -> None:
  """Empty the codegen's caches (lowered kernels, opts, programs, simplified indices), so the next compile runs the
  rules as they are now: refgrad.testing.blame compiles a kernel again with a rule left out."""
  for cached in (_device_opts, lowered_kernel, _compile, simplify_index):
    cached.cache_clear()


def launches_work_groups(caps: Capabilities | None) -> bool:
  return caps is not None and caps.max_global_size is not None


def device_rules(caps: Capabilities | None) -> tuple:
  """The opt rules a device adds to codegen/opt.py's: the work-group opts where it launches work-groups, then its
  own (Capabilities.opt_rules)."""
  if caps is None:
    return ()
  return (WORK_GROUP_RULES if launches_work_groups(caps) else ()) + caps.opt_rules


def random_kernel_opts(ast: UOp, caps: Capabilities | None, rng: random.Random, max_opts: int = 3) -> OptList:
  """A random legal opt list for a scheduled kernel on a device (what `refgrad fuzz --opts`, `refgrad check` and
  the search draw): codegen/opt.py's opts, then, on a device that launches work-groups, half the time a GROUP,
  LOCAL or LOCALTILE opt that fits the kernel as those opts left it."""
  sink, shape = lowered_kernel(ast)
  amounts = heuristic_amounts(caps.upcast_lanes, caps.threads) if caps else (2, 3, 4, 8)
  opts = random_opts(sink, shape, rng, max_opts, amounts)
  if launches_work_groups(caps):
    optimized, shape = apply_opts(sink, shape, opts)
    choices = gpu_opts(simplify(optimized), shape, caps)
    if choices and rng.random() < 0.5:
      opts += (rng.choice(choices),)
  return opts
