"""Bounded memory: the in-memory caches of loaded kernels and compiled programs are LRUs of a fixed size, an
evicted kernel is loaded again and computes the right values, and the on-disk compile cache keeps under its size
limit by deleting its least recently used entries, also while several processes share it."""
import gc
import multiprocessing
import os
import weakref
from pathlib import Path

import numpy as np
import pytest

from refgrad import Device, Tensor, compile_cache
from refgrad.codegen import pipeline
from refgrad.codegen.simplify import simplify_index
from refgrad.compile_cache import cache_dir, cached_compile, prune_cache
from refgrad.device import LRU


# ---- the LRU itself
def test_lru_never_exceeds_its_size_and_evicts_the_least_recently_used():
  cache = LRU(3)
  for key in "abc":
    cache.put(key, key.upper())
  assert cache.get("a") == "A"  # a is now the most recently used: b goes first
  cache.put("d", "D")
  assert len(cache) == 3 and "b" not in cache and all(k in cache for k in "acd")
  for i in range(100):
    cache.put(i, i)
    assert len(cache) <= 3
  assert cache.get("a") is None


def test_codegen_memo_tables_are_bounded():
  assert pipeline._compile.cache_info().maxsize is not None and simplify_index.cache_info().maxsize is not None


# ---- loaded kernels
def distinct_kernels(device: str, count: int) -> list[tuple[Tensor, np.ndarray]]:
  """`count` programs that compile to different kernels (the constant is part of each kernel), with numpy's values."""
  data = np.arange(12, dtype=np.float32)
  x = Tensor(data, device=device)
  return [((x * 1.5 + float(i)) * x, (data * np.float32(1.5) + np.float32(i)) * data) for i in range(count)]


def test_an_evicted_kernel_is_loaded_again_and_computes_right(refgrad_device, monkeypatch):
  refgrad_device = f"{refgrad_device}:3"  # an instance no other test loads kernels on (in a full run one was reused)
  device = Device[refgrad_device]
  monkeypatch.setattr(device, "_runners", LRU(2))
  built = []
  build = device._build_runner
  monkeypatch.setattr(device, "_build_runner", lambda program: built.append(program.key) or build(program))
  for program, want in distinct_kernels(refgrad_device, 5) + distinct_kernels(refgrad_device, 1):
    np.testing.assert_array_equal(program.numpy(), want)
    assert len(device._runners) <= 2
  assert len(built) == 6 and built[5] is built[0]  # the first kernel was evicted, then loaded again


@pytest.mark.skipif("CLANG" not in Device.available(), reason="refgrad-clang is not installed here")
def test_an_evicted_clang_kernel_is_unloaded(monkeypatch):
  device = Device["CLANG"]
  monkeypatch.setattr(device, "_runners", LRU(1))
  (program, _), (other, _) = distinct_kernels("CLANG", 2)
  program.numpy()
  (runner,) = device._runners._entries.values()
  library, alive = runner.library._name, weakref.ref(runner)
  assert mappings_of(library)
  del runner
  other.numpy()  # evicts the first kernel
  gc.collect()
  assert alive() is None, f"the evicted runner is still held by {[type(r).__name__ for r in gc.get_referrers(alive())]}"
  assert not mappings_of(library), "the evicted kernel's library is still mapped"


def mappings_of(path: str) -> list[str]:
  """The lines of /proc/self/maps that map `path` (what a failure shows, rather than the whole file)."""
  return [line for line in Path("/proc/self/maps").read_text().splitlines() if path in line]


# ---- the on-disk compile cache
class EchoCompiler:
  """Compiles a source to itself, padded to `size` bytes, so tests control how much each entry weighs."""
  cache_key = "memory-bounds-test-compiler"
  size = 1000

  def compile(self, source: str) -> bytes:
    return source.encode().ljust(self.size, b".")


def entries() -> dict[str, Path]:
  """source -> its entry's file, for every entry in the cache."""
  header = len(compile_cache.CACHE_MAGIC) + 32
  return {p.read_bytes()[header:].rstrip(b".").decode(): p for p in cache_dir().glob("??/*.bin")}


def cache_bytes() -> int:
  return sum(p.stat().st_size for p in cache_dir().glob("??/*"))


@pytest.fixture
def small_cache(tmp_path, monkeypatch):
  """An empty cache folder limited to about ten entries, and a process that has not looked at it yet."""
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("REFGRAD_CACHE_MAX_MB", str(10.5 * 1048 / 2**20))
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)
  return compile_cache.cache_limit()


def age(sources: list[str]) -> None:
  """Give the entries of `sources` distinct, increasing use times (the first is the least recently used)."""
  paths = entries()
  for i, source in enumerate(sources):
    os.utime(paths[source], ns=(10**18 + i * 10**9,) * 2)


def aged_cache() -> tuple:
  """Ten cached kernels, each used one second after the one before."""
  compiler = EchoCompiler()
  sources = [f"kernel {i}" for i in range(10)]
  for source in sources:
    cached_compile(compiler, source)
  age(sources)
  return compiler, sources


def test_pruning_removes_the_least_recently_used_first_and_keeps_under_the_limit(small_cache):
  compiler, sources = aged_cache()
  prune_cache(limit=5 * 1048)
  assert cache_bytes() <= 5 * 1048
  kept = sorted(entries())
  assert kept == sources[-len(kept):]  # the most recently used survive


def test_a_hit_refreshes_an_entry(small_cache):
  compiler, sources = aged_cache()
  assert cached_compile(compiler, "kernel 0") == compiler.compile("kernel 0")  # a hit: kernel 0 is now the newest
  prune_cache(limit=5 * 1048)
  assert "kernel 0" in entries() and "kernel 1" not in entries()


def test_writes_prune_now_and_then_and_the_cache_stays_under_its_limit(small_cache, monkeypatch):
  scans = []
  monkeypatch.setattr(compile_cache, "prune_cache", lambda: scans.append(1) or prune_cache())
  compiler = EchoCompiler()
  for i in range(100):
    assert cached_compile(compiler, f"kernel {i}") == compiler.compile(f"kernel {i}")
    assert cache_bytes() <= small_cache
  assert 5 <= len(scans) <= 40  # every few writes (a prune frees a fifth of the limit), never on every write
  assert "kernel 99" in entries()


def test_a_new_process_knows_the_size_from_the_shared_record_without_a_scan(small_cache, monkeypatch):
  compiler = EchoCompiler()
  for i in range(3):
    cached_compile(compiler, f"kernel {i}")
  assert compile_cache._shared_size() == cache_bytes()  # the first write's scan, then the writes since
  scans = []
  monkeypatch.setattr(compile_cache, "prune_cache", lambda: scans.append(1) or prune_cache())
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)  # as in a process that has not written yet
  cached_compile(compiler, "kernel 3")
  assert scans == [] and compile_cache._shared_size() == cache_bytes()
  (cache_dir() / compile_cache.USAGE_FILE).unlink()  # no record (an older refgrad's cache): a scan makes one
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)
  cached_compile(compiler, "kernel 4")
  assert scans == [1] and compile_cache._shared_size() == cache_bytes()


def compile_many(cache: str, limit_mb: str, start: int, count: int) -> list[str]:
  """In another process: compile `count` entries into a shared cache; returns the sources whose payload was wrong."""
  os.environ.update(REFGRAD_CACHE=cache, REFGRAD_CACHE_MAX_MB=limit_mb)
  compiler = EchoCompiler()
  wrong = []
  for i in range(count):
    source = f"kernel {(start + i) % 60}"  # the processes overlap: each reads what others wrote and pruned
    if cached_compile(compiler, source) != compiler.compile(source):
      wrong.append(source)
  return wrong


def test_processes_sharing_a_cache_stay_safe(small_cache):
  cache, limit_mb = os.environ["REFGRAD_CACHE"], os.environ["REFGRAD_CACHE_MAX_MB"]
  with multiprocessing.get_context("spawn").Pool(3) as pool:
    results = pool.starmap(compile_many, [(cache, limit_mb, 20 * j, 300) for j in range(3)])
  assert results == [[], [], []]
  assert not list(cache_dir().glob("??/.tmp-*"))  # every write was renamed into place or cleaned up
  assert all(compile_cache._read_entry(path) is not None for path in cache_dir().glob("??/*"))
  prune_cache()
  assert cache_bytes() <= small_cache
