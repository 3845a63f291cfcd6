"""Opt search: time candidate opt lists for one kernel on its device and keep the fastest.

Opt-in: under `REFGRAD_SEARCH=N` realize asks for a search (refgrad/execute.py's kernel_opts; or call
`search_opts(ast, device, budget=N)`), which tries the device's heuristic opts, no opts and up to N random legal opt
lists (refgrad/codegen/opt.py), each compiled and run on scratch buffers, and uses the fastest from then on. The
winner is cached on disk per (kernel, device, compiler key), so a kernel is searched once per machine and compiler,
not once per process. Every search prints what it tried, how long it took and what it chose, on stderr: a chosen
opt list is never hidden. The opts a search may choose are the same legal opts the fuzzer (`refgrad fuzz --opts`)
and `refgrad check` prove against the reference.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import random
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from refgrad.buffer import Buffer
from refgrad.codegen.contract import OptList, opts_text
from refgrad.codegen.opt import OptError, parse_opts
from refgrad.codegen.pipeline import compile_ast, kernel_name, lowered_kernel, random_kernel_opts
from refgrad.compile_cache import CacheWarning, cache_dir
from refgrad.registry import Device
from refgrad.uop import Ops, UOp

TIMED_RUNS = 3  # each candidate: one untimed run (loads caches), then the best of these


@dataclass(frozen=True)
class SearchResult:
  opts: OptList
  seconds: float        # the winner's kernel time
  heuristic: float      # the heuristic's kernel time (what the search is measured against)
  candidates: int
  search_seconds: float


def kernel_key(ast: UOp, device: str) -> str:
  """Names a kernel on a device across processes: the device, its compiler's key and the unoptimized source."""
  impl = Device[device]
  source = impl.render(compile_ast(ast, impl.caps, ()))
  compiler = getattr(impl.compiler, "cache_key", "")
  return hashlib.sha256(f"{impl.name}\0{compiler}\0{source}".encode()).hexdigest()


def time_opts(ast: UOp, device: str, opts: OptList | None) -> float:
  """Seconds one run of the kernel takes on the device with `opts` (None: its heuristic), on scratch buffers."""
  impl = Device[device]
  params = sorted((u for u in ast.toposort if u.op is Ops.PARAM), key=lambda u: u.arg[0])
  buffers = [Buffer(device, p.arg[1], p.dtype) for p in params]
  _, runner = impl.run_kernel(ast, buffers, opts)
  handles = [b.handle for b in buffers]
  impl.synchronize()
  best = float("inf")
  for _ in range(TIMED_RUNS):
    start = time.perf_counter()
    runner(*handles)
    impl.synchronize()
    best = min(best, time.perf_counter() - start)
  return best


def candidates(ast: UOp, device: str, budget: int, seed: str) -> list[OptList]:
  """The heuristic's opts, no opts, then up to `budget` distinct random legal opt lists (seeded by the kernel)."""
  heuristic = compile_ast(ast, Device[device].caps).opts
  found = [heuristic, ()]
  rng, caps = random.Random(seed), Device[device].caps
  for _ in range(budget * 4):
    if len(found) >= budget + 2:
      break
    opts = random_kernel_opts(ast, caps, rng, max_opts=4)
    if opts not in found:
      found.append(opts)
  return found


def run_search(ast: UOp, device: str, budget: int, seed: str = "") -> SearchResult:
  """Time every candidate (an opt list the device cannot compile or run is skipped, and said so) and pick the
  fastest; ties go to the earlier candidate, the heuristic first."""
  start = time.perf_counter()
  heuristic, *others = candidates(ast, device, budget, seed)
  timed = [(time_opts(ast, device, heuristic), heuristic)]  # the device's default must run: no except here
  for opts in others:
    try:
      timed.append((time_opts(ast, device, opts), opts))
    except (OptError, RuntimeError) as error:
      print(f"search: skipped {opts_text(opts)}: {type(error).__name__}: {str(error).splitlines()[0]}", file=sys.stderr)
  seconds, opts = min(timed, key=lambda pair: pair[0])
  return SearchResult(opts, seconds, timed[0][0], len(timed), time.perf_counter() - start)


def _cache_path(key: str) -> Path:
  return cache_dir() / "search" / f"{key}.json"


def _cached_opts(path: Path, ast: UOp, device: str, budget: int) -> OptList | None:
  """The opts cached at `path` by a search of at least `budget`, or None: search (again). An entry that is not what
  search_opts writes (any JSON the file may hold), or whose opts do not apply to this kernel on this device, is
  evicted with a CacheWarning: realize would otherwise fail on it in every process, or run garbage opts."""
  try:
    data = path.read_bytes()
  except OSError:  # not searched yet on this machine
    return None
  try:
    searched, opts = _search_entry(data, ast, device)
  except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep
    warnings.warn(f"search cache entry {path} is not valid for its kernel ({type(e).__name__}: {str(e)[:200]}); "
                  f"evicted, the kernel is searched again", CacheWarning, stacklevel=3)
    with contextlib.suppress(OSError):  # a read-only cache: searched again in every process
      path.unlink(missing_ok=True)
    return None
  return opts if searched >= budget else None


def _search_entry(data: bytes, ast: UOp, device: str) -> tuple[int, OptList]:
  """(budget, opts) of a search cache entry; ValueError if it is not what search_opts writes, or an OptError if its
  opts do not apply to this kernel on this device."""
  cached = json.loads(data)
  if not isinstance(cached, dict) or type(cached.get("budget")) is not int or not isinstance(cached.get("opts"), str):
    raise ValueError("it is not an object with an int 'budget' and a string 'opts'")
  opts = parse_opts(cached["opts"])
  compile_ast(ast, Device[device].caps, opts)
  return cached["budget"], opts


@functools.lru_cache(maxsize=512)
def search_opts(ast: UOp, device: str, budget: int) -> OptList:
  """The fastest opt list found for this kernel on `device`: from the disk cache if this kernel was searched here
  before (with at least this budget), else searched now. Prints the choice."""
  device = Device.canonicalize(device)
  key = kernel_key(ast, device)
  name = kernel_name(*lowered_kernel(ast))  # a program's name, without compiling one for it
  path = _cache_path(key)
  if (cached := _cached_opts(path, ast, device, budget)) is not None:
    print(f"search: {name} on {device}: {opts_text(cached)} (cached)", file=sys.stderr)
    return cached
  result = run_search(ast, device, budget, seed=key)
  chosen = opts_text(result.opts)
  print(f"search: {name} on {device}: {result.candidates} opt lists in {result.search_seconds:.2f} s; chose "
        f"{chosen} ({result.seconds * 1e3:.3f} ms; heuristic {result.heuristic * 1e3:.3f} ms)", file=sys.stderr)
  record = {"opts": chosen, "budget": budget, "ms": result.seconds * 1e3, "heuristic_ms": result.heuristic * 1e3}
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
  except OSError:
    pass  # a read-only cache only costs searching again
  return result.opts

