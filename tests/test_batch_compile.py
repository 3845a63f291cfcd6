"""Batched compilation: many kernels in one compiler run (a compiler's optional compile_batch), each still its own
compile cache entry. A batch's kernels compute what the reference computes and what they compute compiled alone;
kernels of one name share a batch; a kernel that does not compile is named by its own error while the others
compile; a kernel compiled in a batch is a cache hit alone and the other way round; a pruned shared library is a
miss; and a schedule longer than the runner cache runs."""
import os
import re

import numpy as np
import pytest
from helpers import check

import refgrad.compile_cache as compile_cache
from refgrad import Device, Tensor
from refgrad.codegen.contract import batch_binary, split_batch_binary
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cache_dir, cached_compile, cached_compile_batch, prune_cache
from refgrad.device import LRU

INSTANCE = 6  # a numbered instance of the device under test, whose runners only these tests load
X = np.linspace(-3.0, 5.0, 16, dtype=np.float32).reshape(4, 4)
Y = np.linspace(0.5, 2.0, 16, dtype=np.float32).reshape(4, 4)
PROGRAMS = {  # kernels of several shapes, dtypes and preludes; both row sums are kernels named r_4
  "chain": lambda x, y: (x * 1.5 + 2.5) * y - 3.0,
  "row sums": lambda x, y: (x * y).sum(1),
  "other row sums": lambda x, y: (x - y).sum(1),
  "column max": lambda x, y: x.maximum(y).max(0),
  "half": lambda x, y: (x.half() * y.half()).float(),
  "double": lambda x, y: (x.double() / y.double()).float(),
  "int": lambda x, y: (x.int() * 7).float(),
  "exp2 sqrt": lambda x, y: x.exp2() + y.sqrt(),
}
# a kernel's signature in C, OpenCL C (`void name(`) or LLVM IR (`void @name(`)
KERNEL = re.compile(r"void (@?)(\w+)\(")


@pytest.fixture
def batching(refgrad_device, tmp_path, monkeypatch):
  """A fresh instance of the device under test (one whose compiler has compile_batch) with an empty compile cache
  and runner cache; yields (device name, the sizes of the batches it compiled)."""
  device = f"{refgrad_device}:{INSTANCE}"
  impl = Device[device]
  if getattr(impl.compiler, "compile_batch", None) is None:
    pytest.skip(f"{refgrad_device} compiles one kernel at a time")
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)
  monkeypatch.setattr(impl, "_runners", LRU(impl.runner_cache))
  sizes = []
  real = impl.compiler.compile_batch
  monkeypatch.setattr(impl.compiler, "compile_batch", lambda sources: sizes.append(len(sources)) or real(sources))
  return device, sizes


def run_all(device: str) -> list[np.ndarray]:
  """Every program of PROGRAMS realized in one schedule on `device`."""
  x, y = Tensor(X, device=device), Tensor(Y, device=device)
  outputs = [fn(x, y) for fn in PROGRAMS.values()]
  outputs[0].realize(*outputs[1:])
  return [out.numpy() for out in outputs]


def test_a_batch_computes_what_the_reference_and_the_kernels_compiled_alone_compute(batching, monkeypatch):
  device, sizes = batching
  batched = run_all(device)
  assert sizes and max(sizes) >= len(PROGRAMS)  # one compile_batch call for the whole schedule
  names = [compile_ast(item.ast, Device[device].caps).name for item in PROGRAMS["row sums"](Tensor(X), Tensor(Y))
           .schedule(PROGRAMS["other row sums"](Tensor(X), Tensor(Y)))]
  assert len(names) == 2 and names[0] == names[1]  # two kernels of one name were in that batch
  reference = run_all("PYTHON")
  monkeypatch.setattr(Device[device].compiler, "compile_batch", None)  # one kernel per compiler run
  monkeypatch.setattr(Device[device], "_runners", LRU(8))
  monkeypatch.setenv("REFGRAD_CACHE", str(cache_dir().parent / "alone"))
  alone = run_all(device)
  for got, want, single in zip(batched, reference, alone):
    check(Tensor(got), want)
    check(Tensor(single), got)


def broken(source: str) -> str:
  """A rendered kernel (C, OpenCL C or LLVM IR) renamed `broken_kernel`, whose body does not compile."""
  kernel = list(KERNEL.finditer(source))[-1]
  body = source[kernel.end():].replace("{\n", "{\n  not code at all;\n", 1)
  return f"{source[:kernel.start()]}void {kernel.group(1)}broken_kernel({body}"


def sources(device: str) -> list[str]:
  """The rendered kernels of PROGRAMS on `device`."""
  impl = Device[device]
  outputs = [fn(Tensor(X, device=device), Tensor(Y, device=device)) for fn in PROGRAMS.values()]
  items = outputs[0].schedule(*outputs[1:])
  return [impl.render(compile_ast(item.ast, impl.caps)) for item in items if not item.is_transfer]


def test_a_kernel_that_does_not_compile_is_named_and_the_others_compile(batching, monkeypatch):
  device, sizes = batching
  good = sources(device)
  compiler = Device[device].compiler
  with pytest.raises(Exception, match="broken_kernel") as info:
    cached_compile_batch(compiler, good[:3] + [broken(good[0])] + good[3:])
  signatures = [m.group(2) for m in KERNEL.finditer(str(info.value))]
  assert signatures == ["broken_kernel"] and sizes[0] == len(good) + 1  # the message shows that kernel alone
  monkeypatch.setattr(compiler, "compile", lambda source: pytest.fail("compiled again"))
  assert cached_compile_batch(compiler, good) == [cached_compile(compiler, source) for source in good]


def test_a_kernel_compiled_in_a_batch_is_a_hit_alone_and_the_other_way_round(batching, monkeypatch):
  device, sizes = batching
  first, *rest = sources(device)
  compiler = Device[device].compiler
  alone = cached_compile(compiler, first)
  batch = cached_compile_batch(compiler, [first, *rest])
  assert batch[0] == alone and sizes == [len(rest)]  # the first was a hit; the others one batch
  monkeypatch.setattr(compiler, "compile", lambda source: pytest.fail("compiled again"))
  monkeypatch.setattr(compiler, "compile_batch", lambda sources: pytest.fail("compiled again"))
  assert [cached_compile(compiler, source) for source in rest] == batch[1:]
  monkeypatch.setattr(Device[device], "_runners", LRU(8))  # loaded from the cache: the values are right
  for got, want in zip(run_all(device), run_all("PYTHON")):
    check(Tensor(got), want)


def test_a_pruned_shared_library_is_a_miss_and_a_corrupt_one_a_warning(batching):
  device, sizes = batching
  compiler = Device[device].compiler
  kernels = sources(device)
  cached_compile_batch(compiler, kernels)
  blobs = list(cache_dir().glob("??/*.blob"))
  assert 0 < len(blobs) < len(kernels)  # libraries the kernels share
  for blob in blobs:
    blob.write_bytes(blob.read_bytes()[:-1])
  with pytest.warns(compile_cache.CacheWarning, match="blob fails its checksum"):
    cached_compile(compiler, kernels[0])  # compiled alone
    cached_compile_batch(compiler, kernels[1:])  # compiled again in one batch
  assert len(sizes) == 2 and not set(blobs) & set(cache_dir().glob("??/*.blob"))
  for blob in cache_dir().glob("??/*.blob"):
    blob.unlink()  # as prune_cache would
  cached_compile_batch(compiler, kernels[1:])
  assert len(sizes) == 3


def test_a_schedule_longer_than_the_runner_cache_runs_and_compiles_once(batching, monkeypatch):
  device, sizes = batching
  monkeypatch.setattr(Device[device], "_runners", LRU(3))
  x = Tensor(X, device=device)
  outputs = [x * float(i) + 0.5 for i in range(10)]
  outputs[0].realize(*outputs[1:])
  assert sizes == [10] and len(Device[device]._runners) == 3
  for i, out in enumerate(outputs):
    check(out, X * np.float32(i) + np.float32(0.5))


class FakeBatchCompiler:
  """Sources -> reversed bytes. compile_batch fails on any source containing 'bad'; `library` picks what a batch
  returns: one batch_binary per kernel (a library it shares) or the same bytes for every kernel."""
  cache_key = "test-batch-compile-fake"

  def __init__(self, library: str = "member"):
    self.library, self.calls = library, []

  def compile(self, source: str) -> bytes:
    self.calls.append([source])
    if "bad" in source:
      raise ValueError(f"cannot compile {source}")
    return source.encode()[::-1]

  def compile_batch(self, sources: list[str]) -> list[bytes]:
    self.calls.append(list(sources))
    if any("bad" in source for source in sources):
      raise ValueError("a batch with a bad source")
    shared = "|".join(sources).encode()
    if self.library == "member":
      return [batch_binary(f"k{i}", shared) for i in range(len(sources))]
    return [shared] * len(sources)


def test_a_failing_batch_is_split_in_halves_down_to_the_kernel_that_fails(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = FakeBatchCompiler()
  with pytest.raises(ValueError, match="cannot compile bad"):
    cached_compile_batch(compiler, ["a", "b", "bad", "c"])
  assert compiler.calls == [["a", "b", "bad", "c"], ["a", "b"], ["bad", "c"], ["bad"], ["c"]]
  compiler.calls.clear()
  assert cached_compile_batch(compiler, ["c", "a", "b", "c"]) == [b"c", batch_binary("k0", b"a|b"),
                                                                 batch_binary("k1", b"a|b"), b"c"]
  assert compiler.calls == []  # every one a hit, "c" compiled alone (a plain entry)


@pytest.mark.parametrize("library", ["member", "same bytes"])
def test_a_library_a_batch_shares_is_stored_once(tmp_path, monkeypatch, library):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = FakeBatchCompiler(library)
  names = [f"kernel {i} " * 100 for i in range(6)]
  binaries = cached_compile_batch(compiler, names)
  assert len(list(cache_dir().glob("??/*.blob"))) == 1 and len(list(cache_dir().glob("??/*.bin"))) == 6
  assert sum(p.stat().st_size for p in cache_dir().glob("??/*")) < 2 * len("|".join(names))
  assert [cached_compile(compiler, name) for name in names] == binaries and len(compiler.calls) == 1
  if library == "member":
    assert [split_batch_binary(b)[0] for b in binaries] == [f"k{i}" for i in range(6)]
  (blob,) = cache_dir().glob("??/*.blob")
  os.utime(blob, (0, 0))  # the least recently used: pruned first, its kernels' entries left behind
  prune_cache(limit=sum(p.stat().st_size for p in cache_dir().glob("??/*")) - 1)
  assert not blob.exists() and len(list(cache_dir().glob("??/*.bin"))) == 6
  assert [cached_compile(compiler, name) for name in names] == [name.encode()[::-1] for name in names]


def test_a_compiler_without_compile_batch_compiles_one_kernel_at_a_time(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = FakeBatchCompiler()
  monkeypatch.setattr(compiler, "compile_batch", None)
  assert cached_compile_batch(compiler, ["a", "b", "a"]) == [b"a", b"b", b"a"]
  assert compiler.calls == [["a"], ["b"]]
