"""The codegen pipeline for one scheduled kernel: lower, simplify, optimize, shape for work-groups, linearize.

`compile_ast` runs it and gives the `Program` a device renders or interprets (refgrad/codegen/contract.py);
`lowered_kernel` is the stage opts transform, and `random_kernel_opts` draws legal opt lists for it (the fuzzer,
`refgrad check` and the search). Each stage lives in its own module: lowering.py, simplify.py, opt.py, gpu.py,
linearize.py.
"""
from __future__ import annotations

import functools
import os
import random

from refgrad.codegen.contract import Capabilities, OptList, Program
from refgrad.codegen.gpu import WORK_GROUP_RULES, gpu_opts, to_gpu
from refgrad.codegen.linearize import linearize
from refgrad.codegen.lowering import lower_kernel
from refgrad.codegen.opt import apply_opts, default_opts, heuristic_amounts, random_opts
from refgrad.codegen.simplify import simplify, simplify_gated_loads, simplify_index
from refgrad.uop import Ops, UOp


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
  rules as they are now: refgrad.testing.oracle.blame compiles a kernel again with a rule left out."""
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
