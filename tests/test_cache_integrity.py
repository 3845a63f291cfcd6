"""The compile cache cannot lie: an entry is tied to its key, so one copied over another kernel's file, a corrupt
one, one of the older format, or one whose payload the runtime cannot load is evicted with a CacheWarning and
compiled again, on every compiled device (a shared library on CLANG, an object file on LLVM, a driver binary on
OPENCL). REFGRAD_CACHE_MAX_MB is validated."""
import contextlib
import hashlib
import warnings

import numpy as np
import pytest

import refgrad.compile_cache as compile_cache
from refgrad import Device, Tensor
from refgrad.codegen.contract import split_batch_binary
from refgrad.compile_cache import CacheWarning, cache_dir, cache_limit, cached_compile
from refgrad.device import LRU

INSTANCE = 4  # a numbered instance of the device under test, whose runners only these tests load
X = np.arange(4, dtype=np.float32)


@pytest.fixture
def device(refgrad_device, tmp_path, monkeypatch):
  """The device under test (a compiled one) with an empty compile cache of its own."""
  impl = Device[f"{refgrad_device}:{INSTANCE}"]
  if impl.compiler is None:
    pytest.skip(f"{refgrad_device} interprets programs: it has no compile cache")
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)
  monkeypatch.setattr(compile_cache, "_warned_old_format", False)
  return f"{refgrad_device}:{INSTANCE}"


def run(device: str, offset: float, monkeypatch) -> np.ndarray:
  """x*3 - offset on a device that has loaded no kernel yet, so the binary comes from the compile cache."""
  monkeypatch.setattr(Device[device], "_runners", LRU(8))
  return (Tensor(X, device=device) * 3 - offset).numpy()


def entries() -> set:
  return set(cache_dir().glob("??/*.bin"))


def compile_entry(device: str, offset: float, monkeypatch):
  """Run x*3 - offset once, on an empty runner cache; the one cache entry it wrote."""
  before = entries()
  np.testing.assert_array_equal(run(device, offset, monkeypatch), X * np.float32(3) - np.float32(offset))
  (path,) = entries() - before
  return path


def entry_bytes(key: str, payload: bytes) -> bytes:
  """The entry format, written out independently: magic, SHA-256 of key NUL payload, payload."""
  return b"refgrad-cache-2\n" + hashlib.sha256(key.encode() + b"\0" + payload).digest() + payload


def payload_of(path) -> bytes:
  return path.read_bytes()[16 + 32:]


@contextlib.contextmanager
def no_cache_warnings():
  """A CacheWarning inside fails the test."""
  with warnings.catch_warnings():
    warnings.simplefilter("error", CacheWarning)
    yield


def test_an_entry_copied_over_another_kernels_file_is_evicted_and_the_right_values_come_back(device, monkeypatch):
  right = compile_entry(device, 9.5, monkeypatch)
  wrong = compile_entry(device, 12.5, monkeypatch)
  right.write_bytes(wrong.read_bytes())  # a valid entry under another kernel's name (same kernel name, other code)
  with pytest.warns(CacheWarning, match=f"entry {right}.*another kernel's entry"):
    values = run(device, 9.5, monkeypatch)
  np.testing.assert_array_equal(values, X * np.float32(3) - np.float32(9.5))
  assert right.read_bytes() != wrong.read_bytes()  # healed: the entry is this kernel's again
  with no_cache_warnings():
    np.testing.assert_array_equal(run(device, 9.5, monkeypatch), X * np.float32(3) - np.float32(9.5))


def test_a_payload_with_a_right_checksum_that_does_not_load_is_evicted_recompiled_and_healed(device, monkeypatch):
  path = compile_entry(device, 9.5, monkeypatch)
  path.write_bytes(entry_bytes(path.stem, b"\x7fELF but no library of any backend" * 8))
  with pytest.warns(CacheWarning, match=f"entry {path} does not load"):
    values = run(device, 9.5, monkeypatch)
  np.testing.assert_array_equal(values, X * np.float32(3) - np.float32(9.5))
  healed = path.read_bytes()
  assert healed == entry_bytes(path.stem, payload_of(path)) and b"no library" not in healed
  compiles = []
  compiler = Device[device].compiler
  monkeypatch.setattr(compiler, "compile", lambda source: compiles.append(source) or pytest.fail("recompiled"))
  with no_cache_warnings():
    np.testing.assert_array_equal(run(device, 9.5, monkeypatch), X * np.float32(3) - np.float32(9.5))
  assert compiles == []  # the next run loads the healed entry


def test_entries_of_the_older_format_are_evicted_and_recompiled_with_one_warning(device, monkeypatch):
  paths = [compile_entry(device, offset, monkeypatch) for offset in (9.5, 12.5)]
  for path in paths:  # format 1: the checksum covered only the payload
    payload = payload_of(path)
    path.write_bytes(b"refgrad-cache-1\n" + hashlib.sha256(payload).digest() + payload)
  with pytest.warns(CacheWarning, match="older cache format") as caught:
    np.testing.assert_array_equal(run(device, 9.5, monkeypatch), X * np.float32(3) - np.float32(9.5))
    np.testing.assert_array_equal(run(device, 12.5, monkeypatch), X * np.float32(3) - np.float32(12.5))
  assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1
  assert all(path.read_bytes().startswith(b"refgrad-cache-2\n") for path in paths)


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "empty", "foreign file"])
def test_a_corrupt_entry_is_evicted_with_a_warning(device, monkeypatch, damage):
  path = compile_entry(device, 9.5, monkeypatch)
  data = path.read_bytes()
  path.write_bytes({"truncated": data[:-1], "flipped byte": data[:-1] + bytes([data[-1] ^ 1]), "empty": b"",
                    "foreign file": b"PK\x03\x04 a zip archive"}[damage])
  with pytest.warns(CacheWarning, match=f"entry {path} (fails its checksum|is not a refgrad compile cache entry)"):
    np.testing.assert_array_equal(run(device, 9.5, monkeypatch), X * np.float32(3) - np.float32(9.5))
  assert path.read_bytes() == data  # rewritten, equal to the first compile's entry


class GarbageCompiler:
  cache_key = "cache-integrity-garbage-compiler"

  def compile(self, source: str) -> bytes:
    return b"garbage for " + source.encode()


def test_a_fresh_binary_that_does_not_load_raises_the_runtimes_error_without_a_cache_warning(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  def refuse(binary):
    raise RuntimeError(f"cannot load {binary!r}")
  with no_cache_warnings(), pytest.raises(RuntimeError, match="cannot load b'garbage for k'"):
    compile_cache.load_cached(GarbageCompiler(), "k", refuse)


@pytest.mark.parametrize("value", ["abc", "0", "-5", "0.0", "nan", "inf", "-inf", "1e-9", "5MB"])
def test_a_cache_size_limit_that_is_not_a_positive_number_is_refused(tmp_path, monkeypatch, value):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = GarbageCompiler()
  cached_compile(compiler, "kept")
  before = entries()
  monkeypatch.setenv("REFGRAD_CACHE_MAX_MB", value)
  with pytest.raises(ValueError, match=f"REFGRAD_CACHE_MAX_MB={value!r}: .* must be a positive number of megabytes"):
    cache_limit()
  with pytest.raises(ValueError, match="REFGRAD_CACHE_MAX_MB"):
    cached_compile(compiler, "new")
  assert entries() == before and len(before) == 1  # nothing was pruned


@pytest.mark.parametrize("value, limit", [("", 1024 * 2**20), ("  ", 1024 * 2**20), ("2", 2 * 2**20),
                                          (" 0.5 ", 2**19), ("1e3", 1000 * 2**20)])
def test_a_valid_cache_size_limit_is_read_in_megabytes(monkeypatch, value, limit):
  monkeypatch.setenv("REFGRAD_CACHE_MAX_MB", value)
  assert cache_limit() == limit


def reference_to(path, symbol: bytes, blob: bytes) -> None:
  """Make the entry at `path` a batch reference, valid for its key, naming `symbol` in the blob named `blob`."""
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_bytes(entry_bytes(path.stem, b"refgrad-cache-ref-1\n" + symbol + b"\0" + blob))


@pytest.mark.parametrize("blob", ["../victim", "{tmp}/victim"])
def test_a_reference_naming_a_blob_outside_the_cache_is_evicted_without_touching_it(tmp_path, monkeypatch, blob):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "user" / "cache"))
  victim = tmp_path / "victim.blob"
  victim.write_bytes(b"not a cache entry: a file the cache must neither read, touch nor delete")
  compiler = GarbageCompiler()
  path = compile_cache._entry_path(compiler, "k")
  blob = blob.format(tmp=tmp_path)
  reference_to(path, b"k0", blob.encode())
  assert (cache_dir() / blob[:2] / f"{blob}.blob").resolve() == victim  # where a blob's path was made from its name
  with pytest.warns(CacheWarning, match=f"entry {path} is a reference that names no blob of the cache"):
    assert cached_compile(compiler, "k") == b"garbage for k"
  assert victim.read_bytes().startswith(b"not a cache entry") and payload_of(path) == b"garbage for k"


@pytest.mark.parametrize("symbol, blob", [(b"k\xff", "sha"), (b"k 0", "sha"), (b"k0", "SHA"), (b"k0", "sha\xff")])
def test_a_reference_with_a_malformed_symbol_or_blob_name_is_evicted(tmp_path, monkeypatch, symbol, blob):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = GarbageCompiler()
  library = b"a library"
  digest = hashlib.sha256(library).hexdigest()
  blob_path = tmp_path / digest[:2] / f"{digest}.blob"
  blob_path.parent.mkdir(parents=True, exist_ok=True)
  blob_path.write_bytes(entry_bytes(blob_path.stem, library))
  path = compile_cache._entry_path(compiler, "k")
  named = {"sha": digest.encode(), "SHA": digest.upper().encode(), "sha\xff": digest.encode()[:-1] + b"\xff"}[blob]
  reference_to(path, symbol, named)
  with pytest.warns(CacheWarning, match="is a reference that names no blob of the cache .* or no valid symbol"):
    assert cached_compile(compiler, "k") == b"garbage for k"
  reference_to(path, b"k0", digest.encode())  # the same reference, well formed: a hit
  with no_cache_warnings():
    assert split_batch_binary(cached_compile(compiler, "k")) == ("k0", library)


@pytest.mark.parametrize("binary", [b"refgrad-batch-binary-1\nk\xff\0lib", b"refgrad-batch-binary-1\n../k\0lib",
                                    b"refgrad-batch-binary-1\n\0lib", b"refgrad-batch-binary-1\nno separator"])
def test_a_batch_binary_naming_no_valid_symbol_is_refused(binary):
  with pytest.raises(ValueError, match="a batch binary names no valid symbol"):
    split_batch_binary(binary)


def test_a_negative_size_in_the_shared_size_record_does_not_stop_pruning(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)
  tmp_path.mkdir(exist_ok=True)
  (tmp_path / "usage").write_text(str(-10**12))  # fresh, so it is believed unless it is refused
  monkeypatch.setenv("REFGRAD_CACHE_MAX_MB", str(2000 / 2**20))  # 2000 bytes: a few entries
  compiler = GarbageCompiler()
  for i in range(40):
    cached_compile(compiler, f"kernel {i} " + "x" * 100)
  assert sum(p.stat().st_size for p in entries()) <= 2000
