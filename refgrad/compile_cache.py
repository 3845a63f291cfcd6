"""The compile cache on disk: content-addressed, verified, written atomically, pruned least recently used first.

An entry is CACHE_MAGIC, a SHA-256 of its key and payload, then the payload; its file is named by its key. The
checksum covering the key ties the payload to its name: an entry copied or renamed over another kernel's file
fails the check like a corrupt one, instead of running the wrong kernel.

Kernels compiled in one batch (a compiler's compile_batch) share one library: it is written once, as a blob named by
its SHA-256 (`<sha256>.blob`), and each kernel's entry (`<key>.bin`, the same key as if compiled alone) holds
REF_MAGIC, its symbol in the library and the blob's name. A kernel's entry is thus either its binary or such a
reference; a reference whose blob was pruned is a miss.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from refgrad.codegen.contract import Compiler, batch_binary, is_symbol, split_batch_binary

CACHE_MAGIC = b"refgrad-cache-2\n"
OLD_CACHE_MAGICS = (b"refgrad-cache-1\n",)  # earlier formats, whose checksum did not cover the key
REF_MAGIC = b"refgrad-cache-ref-1\n"  # the payload of a kernel's entry whose binary is in a blob its batch shares
# Kernels per compile_batch call. On CLANG one run costs about 170 ms for one tiny kernel and 17 ms a kernel for 32;
# past 64 a kernel costs no less, and a batch that fails is split and compiled again.
MAX_BATCH = 64
# The test suite's kernels take about 310 MB here (11,400 entries of 27 KB on average over the four devices), so
# the default keeps a warm suite warm with room to spare. REFGRAD_CACHE_MAX_MB overrides it.
CACHE_MAX_MB = 1024
PRUNE_TO = 0.8  # a prune goes down to this share of the limit, so the next one is many compiles away
STALE_TMP_SECONDS = 3600  # a temporary file this old was left by a killed writer; a younger one may be in flight
_cache_estimate: int | None = None  # bytes in the cache: its size at this process's last scan + what it wrote since
_warned_old_format = False  # entries of an older format are many after an upgrade: one warning per process
_last_hit = threading.local()  # the entry this thread's last cached_compile returned, None after a compile


class CacheWarning(RuntimeWarning):
  """A compile cache entry was evicted (not this kernel's, corrupt, of an older format, or unloadable) and its
  kernel is compiled again; or a search cache entry (refgrad/search.py) was, and its kernel is searched again."""


def cache_dir() -> Path:
  """REFGRAD_CACHE if set, else the user cache dir (XDG_CACHE_HOME or ~/.cache) / refgrad."""
  if (explicit := os.environ.get("REFGRAD_CACHE")):
    return Path(explicit)
  return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "refgrad"


def backend_cache_dir(backend: str) -> Path:
  """A folder of the compile cache for one backend's own files, created on first use: for a JIT that cannot hand
  back a binary from `compile` (numba, a driver's JIT) and keeps its own on-disk cache instead (docs/writing-a-
  backend.md). The backend owns what is inside; refgrad's size limit and pruning cover only its own entries."""
  if not backend or not all(c.isalnum() or c in "-_." for c in backend) or backend.strip(".") == "":
    raise ValueError(f"backend_cache_dir: {backend!r} is not a valid folder name (letters, digits, '-', '_', '.')")
  path = cache_dir() / "backends" / backend
  path.mkdir(parents=True, exist_ok=True)
  return path


def _entry_digest(key: str, payload: bytes) -> bytes:
  return hashlib.sha256(key.encode() + b"\0" + payload).digest()


def _entry_fault(data: bytes, key: str) -> str | None:
  """Why a cache file's bytes are not a valid entry of `key`, or None if they are."""
  header = len(CACHE_MAGIC) + 32
  if data.startswith(OLD_CACHE_MAGICS):
    return ("is of an older cache format, which did not tie an entry to its key (other entries of that format are "
            "replaced without a warning)")
  if len(data) < header or not data.startswith(CACHE_MAGIC):
    return "is not a refgrad compile cache entry (truncated, or another format)"
  if _entry_digest(key, data[header:]) != data[len(CACHE_MAGIC):header]:
    return "fails its checksum: it is corrupt, or another kernel's entry copied over this kernel's file"
  return None


def _read_entry(path: Path) -> bytes | None:
  """The payload of the entry at `path` (named by its key), or None. An entry that is not valid for its key is
  evicted with a CacheWarning, so it is compiled and written again rather than failing or running the wrong code."""
  try:
    data = path.read_bytes()
  except OSError:  # missing (a miss), or pruned by another process just now
    return None
  if (fault := _entry_fault(data, path.stem)) is None:
    return data[len(CACHE_MAGIC) + 32:]
  _evict(path, fault, once=data.startswith(OLD_CACHE_MAGICS))
  return None


def _evict(path: Path, reason: str, once: bool = False) -> None:
  """Delete a bad entry with a CacheWarning (`once`: warn only for the first entry of an older format)."""
  global _warned_old_format
  if not (once and _warned_old_format):
    warnings.warn(f"compile cache entry {path} {reason}; evicted, the kernel is compiled again", CacheWarning,
                  stacklevel=2)
  _warned_old_format |= once
  try:
    path.unlink(missing_ok=True)
  except OSError:  # a read-only cache: the entry stays, and every use compiles
    pass


def _write_entry(path: Path, payload: bytes) -> int:
  """Write to a temporary file in the same folder, then rename: readers never see half a file. Returns its size."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
  data = CACHE_MAGIC + _entry_digest(path.stem, payload) + payload
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise
  return len(data)


def cache_limit() -> int:
  """The compile cache's size limit in bytes: REFGRAD_CACHE_MAX_MB megabytes, else CACHE_MAX_MB. A value that is not
  a positive number raises ValueError: 0 would prune every entry on every write, and there is no "no cache" setting
  (a throwaway REFGRAD_CACHE folder is one)."""
  text = os.environ.get("REFGRAD_CACHE_MAX_MB") or ""
  if not text.strip():
    return CACHE_MAX_MB * 2**20
  try:
    limit = float(text) * 2**20
  except ValueError:
    limit = math.nan
  if not math.isfinite(limit) or int(limit) <= 0:
    raise ValueError(f"REFGRAD_CACHE_MAX_MB={text!r}: the compile cache's size limit must be a positive number of "
                     f"megabytes, at least one byte (unset, it is {CACHE_MAX_MB})")
  return int(limit)


def prune_cache(limit: int | None = None) -> int:
  """If the cache holds more than `limit` bytes (default: cache_limit()), delete the least recently used entries
  (oldest modification time: an entry's time is refreshed on every hit) until it holds PRUNE_TO of the limit.
  Returns the bytes left. Safe while other processes use the cache: a reader that loses an entry recompiles it."""
  entries = []
  for name, path, stat in _scan_entries():
    if name.startswith(".tmp-") and time.time() - stat.st_mtime < STALE_TMP_SECONDS:
      continue
    entries.append((stat.st_mtime_ns, stat.st_size, path))
  total = sum(size for _, size, _ in entries)
  limit = cache_limit() if limit is None else limit
  if total > limit:
    for _, size, path in sorted(entries, key=lambda e: e[0]):
      if total <= PRUNE_TO * limit:
        break
      Path(path).unlink(missing_ok=True)
      total -= size
  return total


def _scan_entries() -> Iterator[tuple[str, str, os.stat_result]]:
  """Every file in the cache's two-character folders: its name, path and stat. os.scandir, not Path.glob: each
  process scans the cache on its first write, and 300,000 entries took glob 12 s at load (scandir 5 s)."""
  try:
    with os.scandir(cache_dir()) as top:
      folders = [entry.path for entry in top if len(entry.name) == 2 and entry.is_dir()]
  except OSError:  # no cache folder yet
    return
  for folder in folders:
    try:
      with os.scandir(folder) as files:
        for entry in files:
          try:
            yield entry.name, entry.path, entry.stat()
          except OSError:  # another process deleted or renamed it meanwhile
            continue
    except OSError:  # the folder went away meanwhile
      continue


# What every process knows of the cache's size without a scan, in two files beside its folders: USAGE_FILE holds the
# bytes found by the last scan (of any process), WRITTEN_FILE one line per write since, its bytes (appended whole:
# O_APPEND writes of a few bytes do not interleave). A scan of 300,000 entries took 5 s at load, and every process
# that compiled (each fuzz worker, check subprocess, test worker) paid it on its first write.
USAGE_FILE, WRITTEN_FILE = "usage", "written"
USAGE_MAX_AGE = 24 * 3600  # a record this old is scanned again: files deleted by hand, or lines lost to a race
_since_read = 0  # bytes this process wrote since it last read the shared record


def _shared_size() -> int | None:
  """The cache's size by the shared record (the last scan plus the writes since), or None if there is none fresh."""
  try:
    usage = cache_dir() / USAGE_FILE
    if time.time() - usage.stat().st_mtime > USAGE_MAX_AGE:
      return None
    scanned = _byte_count(usage.read_text())
    try:
      written = sum(_byte_count(line) for line in (cache_dir() / WRITTEN_FILE).read_text().split())
    except FileNotFoundError:
      written = 0
  except (OSError, ValueError):
    return None
  return scanned + written


def _byte_count(text: str) -> int:
  """A count of bytes in the shared record; ValueError if it is not one. A negative count (a corrupt or forged
  record) would hide the cache's size from every process for a day, so that it grew past its limit unpruned."""
  count = int(text)
  if count < 0:
    raise ValueError(f"negative byte count {count}")
  return count


def _record_write(nbytes: int) -> None:
  fd = os.open(cache_dir() / WRITTEN_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.write(fd, b"%d\n" % nbytes)
  finally:
    os.close(fd)


def _record_scan(total: int) -> None:
  """A scan's result becomes the shared record, and the writes it counted leave the journal."""
  tmp = cache_dir() / f".usage-{os.getpid()}-{threading.get_ident()}"
  tmp.write_text(str(total))
  os.replace(tmp, cache_dir() / USAGE_FILE)
  (cache_dir() / WRITTEN_FILE).unlink(missing_ok=True)


def _note_write(nbytes: int) -> None:
  """Scan the cache folder only when it may be over its limit, never on every write. A process knows the size from
  the shared record (read on its first write, and again after it wrote a twentieth of the limit or when its own
  estimate passes the limit) plus what it wrote since; writes of other processes show when it reads the record."""
  global _cache_estimate, _since_read
  _record_write(nbytes)
  limit = cache_limit()
  _since_read += nbytes
  if _cache_estimate is None or _since_read > limit / 20 or _cache_estimate + nbytes > limit:
    _cache_estimate, _since_read = _shared_size(), 0
  else:
    _cache_estimate += nbytes
  if _cache_estimate is None or _cache_estimate > limit:
    _cache_estimate = prune_cache()
    _record_scan(_cache_estimate)


def _touch(path: Path) -> None:
  """Mark an entry as just used, so pruning keeps it."""
  try:
    os.utime(path)
  except OSError:  # a read-only cache, or another process pruned the entry just now
    pass


def _entry_path(compiler: Compiler, source: str) -> Path:
  key = hashlib.sha256(f"{compiler.cache_key}\0{source}".encode()).hexdigest()
  return cache_dir() / key[:2] / f"{key}.bin"


def _blob_path(digest: str) -> Path:
  return cache_dir() / digest[:2] / f"{digest}.blob"


def _reference(payload: bytes) -> tuple[str, str] | None:
  """(symbol, blob digest) of a reference entry's payload, or None if it is malformed. The digest must be a SHA-256
  in hex, so the blob's path stays inside the cache folder whatever an entry says (`../x` or `/x` never is one)."""
  symbol, found, digest = payload[len(REF_MAGIC):].partition(b"\0")
  name = symbol.decode("ascii", errors="replace")
  if not found or re.fullmatch(rb"[0-9a-f]{64}", digest) is None or (symbol and not is_symbol(name)):
    return None
  return name, digest.decode()


def _lookup(path: Path) -> bytes | None:
  """The binary of a kernel's entry (marked as used), or None: a miss. A reference is completed from its blob."""
  if (payload := _read_entry(path)) is None:
    return None
  if payload.startswith(REF_MAGIC):
    if (reference := _reference(payload)) is None:
      _evict(path, "is a reference that names no blob of the cache (its name must be a SHA-256) or no valid symbol")
      return None
    symbol, digest = reference
    blob = _blob_path(digest)
    if (library := _read_entry(blob)) is None:
      return None  # pruned since: compiled again
    _touch(blob)
    payload = batch_binary(symbol, library) if symbol else library
  _touch(path)
  return payload


def _store(entries: Sequence[tuple[Path, bytes]]) -> None:
  """Write each kernel's binary to its entry. A library several of them share (a batch_binary's, or the same bytes
  given for several kernels) is written once, as a blob, and their entries refer to it."""
  repeated = {payload for payload, count in Counter(payload for _, payload in entries).items() if count > 1}
  blobs, written = set(), 0
  try:
    for path, payload in entries:
      member = split_batch_binary(payload)
      if member is None and payload not in repeated:
        written += _write_entry(path, payload)
        continue
      symbol, library = member or ("", payload)
      digest = hashlib.sha256(library).hexdigest()
      if digest not in blobs:
        blobs.add(digest)
        written += _write_entry(_blob_path(digest), library)
      written += _write_entry(path, REF_MAGIC + symbol.encode() + b"\0" + digest.encode())
    _note_write(written)
  except OSError:
    pass  # a read-only or full cache folder only costs speed


def cached_compile(compiler: Compiler, source: str) -> bytes:
  """compiler.compile(source), run once per (compiler, source) across processes. A kernel compiled in a batch
  before gives its binary out of that batch (a batch_binary)."""
  cache_limit()  # a bad REFGRAD_CACHE_MAX_MB fails every run, not only runs that write
  path = _entry_path(compiler, source)
  if (payload := _lookup(path)) is not None:
    _last_hit.path = path
    return payload
  _last_hit.path = None
  return _compile_and_store(compiler, source, path)


def _compile_and_store(compiler: Compiler, source: str, path: Path) -> bytes:
  payload = compiler.compile(source)
  _store([(path, payload)])
  return payload


def cached_compile_batch(compiler: Compiler, sources: Sequence[str]) -> list[bytes]:
  """[cached_compile(compiler, s) for s in sources], the misses compiled together (cached_compile_each); a kernel
  that does not compile raises its own error (the first such), after every other kernel is compiled and cached."""
  results = cached_compile_each(compiler, sources)
  if (error := next((r for r in results if isinstance(r, Exception)), None)) is not None:
    raise error
  return results


def cached_compile_each(compiler: Compiler, sources: Sequence[str]) -> list[bytes | Exception]:
  """Each source's binary as cached_compile gives it, or the exception its compile alone raises. The misses are
  compiled together: MAX_BATCH at a time by the compiler's optional compile_batch (one compiler run), else one by
  one. A batch that fails is compiled again in halves, down to single kernels compiled with `compile`, so one
  kernel that does not compile costs the others a few compiler runs, not one each."""
  cache_limit()
  paths = [_entry_path(compiler, source) for source in sources]
  found: dict[Path, bytes | Exception] = {path: payload for path in dict.fromkeys(paths)
                                          if (payload := _lookup(path)) is not None}
  missing = list({path: source for path, source in zip(paths, sources) if path not in found}.items())
  for start in range(0, len(missing), MAX_BATCH):
    chunk = missing[start:start + MAX_BATCH]
    results = dict(zip((path for path, _ in chunk), _compile_pieces(compiler, [source for _, source in chunk])))
    _store([(path, result) for path, result in results.items() if isinstance(result, bytes)])
    found.update(results)
  return [found[path] for path in paths]


def _compile_pieces(compiler: Compiler, sources: Sequence[str]) -> list[bytes | Exception]:
  """Each source's binary, or the exception its compile alone raised: the whole batch in one compile_batch call if
  that works, else each half in the same way."""
  compile_batch = getattr(compiler, "compile_batch", None)
  if len(sources) < 2 or compile_batch is None:
    return [_compile_one(compiler, source) for source in sources]
  try:
    binaries = compile_batch(sources)
  except Exception:  # some kernel of the batch does not compile: find it (and compile the others)
    half = len(sources) // 2
    return _compile_pieces(compiler, sources[:half]) + _compile_pieces(compiler, sources[half:])
  if len(binaries) != len(sources):
    raise RuntimeError(f"{type(compiler).__name__}.compile_batch returned {len(binaries)} binaries for "
                       f"{len(sources)} sources (it must return one per source)")
  return list(binaries)


def _compile_one(compiler: Compiler, source: str) -> bytes | Exception:
  try:
    return compiler.compile(source)
  except Exception as e:  # the caller raises it or leaves it to the kernel's run, once the others are compiled
    return e


T = TypeVar("T")


def load_cached(compiler: Compiler, source: str, load: Callable[[bytes], T]) -> T:
  """load(cached_compile(compiler, source)). A cached binary that passes its checksum but that the runtime cannot
  load (a payload that is no library of this backend) is evicted with a CacheWarning and compiled again, so it
  costs one compile rather than failing every run. A freshly compiled binary that does not load is the backend's
  error, raised as it is."""
  _last_hit.path = None  # stays None if cached_compile is replaced (tests record what it compiles)
  binary = cached_compile(compiler, source)
  if (path := _last_hit.path) is None:
    return load(binary)
  try:
    return load(binary)
  except Exception as e:
    _evict(path, f"does not load ({type(e).__name__}: {e})")
  return load(_compile_and_store(compiler, source, path))
