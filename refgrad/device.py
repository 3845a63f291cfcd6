"""The device layer: what a device is, the registry of devices, buffers, and the compile cache.

A device is an allocator plus either an interpreter of programs (PYTHON) or a renderer, a compiler and a
runtime (every compiled backend). Devices come from plugins (refgrad/hookspecs.py, refgrad/plugins.py); a
device that cannot run here is still listed, with the reason, and selecting it raises that reason.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from refgrad.alu import exec_reduce
from refgrad.codegen.contract import (
  Allocator,
  Capabilities,
  Compiler,
  Program,
  Renderer,
  Runner,
  Runtime,
  UnsupportedDTypeError,
)
from refgrad.dtype import ALL_DTYPES, DType


class HostAllocator:
  """Buffers in host memory as numpy byte arrays, for CPU backends whose kernels take raw addresses
  (`handle.ctypes.data`). Shared by CLANG and LLVM; third-party CPU backends can use it too."""

  def alloc(self, nbytes: int) -> np.ndarray:
    return np.zeros(max(nbytes, 1), dtype=np.uint8)

  def free(self, handle: np.ndarray) -> None:
    pass

  def copyin(self, handle: np.ndarray, src: memoryview) -> None:
    handle[:len(src)] = np.frombuffer(src, dtype=np.uint8)

  def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = handle[:len(dest)]


V = TypeVar("V")


class LRU(Generic[V]):
  """A mapping that keeps only its `maxsize` most recently used entries. An evicted value is just dropped: what
  it holds (a loaded library, a built program) is released when no caller holds it any more."""

  def __init__(self, maxsize: int):
    self.maxsize = maxsize
    self._entries: OrderedDict[Hashable, V] = OrderedDict()

  def get(self, key: Hashable) -> V | None:
    if (value := self._entries.get(key)) is not None:
      self._entries.move_to_end(key)
    return value

  def put(self, key: Hashable, value: V) -> None:
    self._entries[key] = value
    self._entries.move_to_end(key)
    while len(self._entries) > self.maxsize:
      self._entries.popitem(last=False)

  def __len__(self) -> int:
    return len(self._entries)

  def __contains__(self, key: Hashable) -> bool:
    return key in self._entries


# Loaded kernels kept per device. Measured (one process, all four devices): a loaded kernel costs about 8 KB on
# PYTHON, 33 KB on CLANG, 130 KB on LLVM and 150 KB on OPENCL (1.7 MB if PoCL built it from source in this
# process); unbounded, tests/test_elementwise.py alone loaded 1194 kernels per device and took the process from
# 0.6 to 1.7 GB. Replaying the kernel sequence of tests/test_reduce.py, an LRU of 64 already misses only on first
# use, and a training step of bench/train.py uses at most 46 kernels: 128 leaves room, and costs OPENCL at most
# about 220 MB.
RUNNER_CACHE_SIZE = 128


@dataclass
class DeviceImpl:
  """A working device. Compiled devices give renderer+compiler+runtime; PYTHON gives `interpret`."""
  name: str
  allocator: Allocator
  renderer: Renderer | None = None
  compiler: Compiler | None = None
  runtime: Runtime | None = None
  interpret: Callable[[Program], Runner] | None = None
  runner_cache: int = RUNNER_CACHE_SIZE  # loaded kernels kept (a device whose kernels are large keeps fewer)
  # Optional native transfers between devices (defaults: through host memory): transfer(dest, src) copies a buffer
  # of another device into dest of this one; allreduce(op, dest, partials) writes into dest the reduction (op:
  # Ops.ADD, MUL or MAX) of same-sized buffers on several devices, meaning what alu.exec_reduce means.
  transfer: Callable[[Buffer, Buffer], None] | None = None
  allreduce: Callable[[Any, Buffer, list[Buffer]], None] | None = None
  _runners: LRU[Runner] = field(init=False)

  def __post_init__(self):
    self._runners = LRU(self.runner_cache)

  @property
  def caps(self) -> Capabilities:
    return self.renderer.caps if self.renderer is not None else Capabilities()

  def render(self, program: Program) -> str:
    return self.renderer.render(program) if self.renderer is not None else program.listing()

  def get_runner(self, program: Program) -> Runner:
    """Load a program once per device while it stays among the `runner_cache` most recently used; programs are
    keyed by their (hash-consed) kernel graph and their opt list. An evicted one is loaded again from the compile
    cache."""
    key = (program.key, getattr(program, "opts", ()))
    runner = self._runners.get(key)
    if runner is None:
      runner = self._build_runner(program)
      self._runners.put(key, runner)
    return runner

  def copy_from(self, dest: Buffer, src: Buffer) -> None:
    """Copy src (a buffer of any device) into dest, a buffer of this device."""
    if self.transfer is not None:
      self.transfer(dest, src)
    else:
      dest.copyin(src.numpy())
    dest.keep_undefined(src.undefined)

  def all_reduce(self, op: Any, dest: Buffer, partials: list[Buffer]) -> None:
    """dest (of this device) = the reduction by op of the partials (buffers of any devices), element by element."""
    if self.allreduce is not None:
      self.allreduce(op, dest, partials)
      return
    stacked = np.stack([p.numpy() for p in partials])
    dest.copyin(exec_reduce(op, dest.dtype, stacked, 0).reshape(-1))
    masks = [p.undefined for p in partials if p.undefined is not None]
    dest.keep_undefined(np.logical_or.reduce(masks) if masks else None)

  def synchronize(self) -> None:
    """Wait for every kernel launched on this device (runtimes that launch asynchronously have `synchronize`)."""
    if (wait := getattr(self.runtime, "synchronize", None)) is not None:
      wait()

  def check_dtypes(self, program: Program) -> None:
    """Raise UnsupportedDTypeError if the program uses a dtype this device does not claim."""
    missing = {u.dtype for u in program.uops} & set(ALL_DTYPES.values()) - self.caps.dtypes
    if missing:
      names = ", ".join(sorted(d.name for d in missing))
      supported = ", ".join(d.name for d in ALL_DTYPES.values() if d in self.caps.dtypes)
      raise UnsupportedDTypeError(f"device {self.name} does not support {names} (kernel {program.name}); "
                                  f"it supports {supported}")

  def _build_runner(self, program: Program) -> Runner:
    self.check_dtypes(program)
    if self.interpret is not None:
      return self.interpret(program)
    source = self.render(program)
    return load_cached(self.compiler, source, lambda binary: self.runtime.load(binary, program))


_thread_pool: ThreadPoolExecutor | None = None


def run_ranges(launch: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
  """launch(start, end) for every range at once, on a pool of CPU threads shared by every CPU device (a ctypes call
  releases the GIL, so the ranges really run in parallel); the first error raised by any range is raised here."""
  global _thread_pool
  if len(ranges) == 1:
    launch(*ranges[0])
    return
  if _thread_pool is None:
    _thread_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="refgrad-kernel")
  for future in [_thread_pool.submit(launch, start, end) for start, end in ranges]:
    future.result()


def numbered_source(source: str) -> str:
  """Source text with line numbers, as a backend's compile error shows it (the compiler's messages cite lines)."""
  return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


def distribution_version(distribution: str, fallback: str = "0.1.0") -> str:
  """The installed version of a plugin's distribution (for DeviceSpec.version), or `fallback` when it runs from a
  source tree without being installed."""
  try:
    return version(distribution)
  except PackageNotFoundError:
    return fallback


class DeviceSpec:
  """How a plugin describes a device: `make()` builds an instance; `probe()` says why it cannot run here (None: it
  can); `version` is a string, or a function giving one (a description may need the driver, e.g. the OpenCL
  platform's name). Probe and version run once, the first time anyone asks (listing devices, selecting one), never
  at `import refgrad`: they may be slow (OpenCL enumerates its platforms, LLVM imports llvmlite)."""

  def __init__(self, name: str, make: Callable[[], DeviceImpl], plugin: str = "refgrad",
               version: str | Callable[[], str] = "", probe: Callable[[], str | None] = lambda: None):
    self.name, self.make, self.plugin, self.probe = name, make, plugin, probe
    self.instances: dict[str, DeviceImpl] = {}  # "CLANG", "CLANG:1", ...: one each
    self._version = version
    self._reason: str | None = None
    self._probed = False

  @property
  def version(self) -> str:
    if callable(self._version):
      try:
        self._version = self._version()
      except Exception as e:  # a description that fails must not hide the device
        self._version = f"(version unknown: {type(e).__name__}: {e})"
    return self._version

  @property
  def unavailable_reason(self) -> str | None:
    """Why the device cannot run here, or None; probes on first use."""
    if not self._probed:
      try:
        self._reason = self.probe()
      except Exception as e:  # a crashing probe makes the device unavailable, with the reason
        self._reason = f"probe failed: {type(e).__name__}: {e}"
      self._probed = True
    return self._reason

  def __repr__(self) -> str:
    return f"DeviceSpec({self.name!r}, plugin={self.plugin!r})"


class DeviceRegistry:
  """`Device[name]` gives a device; `Device.DEFAULT` is the default one (env REFGRAD_DEVICE, else PYTHON)."""

  def __init__(self):
    self._specs: dict[str, DeviceSpec] = {}
    self._aliases: dict[str, str] = {}
    self._default: str | None = None
    self.before_lookup: Callable[[], None] | None = None  # refgrad.plugins registers late plugins through it

  def _lookup(self) -> dict[str, DeviceSpec]:
    if self.before_lookup is not None:
      self.before_lookup()
    return self._specs

  def add(self, spec: DeviceSpec) -> None:
    """Register a device (probed later, on first use). A name another plugin already registered is refused:
    silently replacing a device would run one backend's kernels under another's name."""
    name = spec.name.upper()
    existing = self._specs.get(name)
    if existing is not None and existing.plugin != spec.plugin:
      raise ValueError(f"device {name} is already registered by plugin {existing.plugin!r}; plugin {spec.plugin!r} "
                       f"cannot register it again (remove one of the two, or give the device another name)")
    self._specs[name] = spec

  def register(self, name: str, factory: Callable[[], DeviceImpl], plugin: str = "refgrad",
               unavailable_reason: str | None = None) -> None:
    """Shortcut for tests: register a device by name and factory."""
    self.add(DeviceSpec(name.upper(), factory, plugin, probe=lambda: unavailable_reason))

  def remove(self, name: str) -> None:
    self._specs.pop(name.upper(), None)
    self._aliases = {a: n for a, n in self._aliases.items() if n != name.upper()}

  def alias(self, alias: str, name: str) -> None:
    self._aliases[alias.upper()] = name.upper()

  def canonicalize(self, name: str | tuple[str, ...] | None) -> str | tuple[str, ...]:
    """'clang:1' -> 'CLANG:1'; None -> the default device; a tuple or list of names (a tensor over several devices)
    -> a tuple of canonical names, each once. Unknown names raise ValueError listing the known."""
    if name is None:
      return self.DEFAULT
    if isinstance(name, (tuple, list)):
      names = tuple(self.canonicalize(n) for n in name)
      if not names or any(isinstance(n, tuple) for n in names) or len(set(names)) != len(names):
        raise ValueError(f"a tensor over several devices needs distinct device names, got {tuple(name)!r}")
      return names
    if not isinstance(name, str):
      raise TypeError(f"device must be a string like 'PYTHON' or 'CLANG:1', got {type(name).__name__}")
    base, _, index = name.upper().partition(":")
    base = self._aliases.get(base, base)
    if base not in self._lookup():
      raise ValueError(f"unknown device {name!r}; known devices: {', '.join(sorted(self._specs))}")
    if index and not index.isdigit():
      raise ValueError(f"bad device index in {name!r}: expected a number after ':'")
    return base if not index or index == "0" else f"{base}:{index}"

  def __getitem__(self, name: str) -> DeviceImpl:
    """The device instance: "CLANG" and "CLANG:0" are one, "CLANG:1" another with its own buffers and caches."""
    full = self.canonicalize(name)
    base = full.partition(":")[0]
    spec = self._specs[base]
    if spec.unavailable_reason is not None:
      raise RuntimeError(f"device {base} is unavailable: {spec.unavailable_reason}")
    if full not in spec.instances:
      spec.instances[full] = spec.make()
    return spec.instances[full]

  @property
  def DEFAULT(self) -> str:  # noqa: N802 -- tinygrad's name
    if self._default is None:
      self._default = self.canonicalize(os.environ.get("REFGRAD_DEVICE", "PYTHON"))
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None:  # noqa: N802
    self._default = self.canonicalize(name)

  def specs(self) -> list[DeviceSpec]:
    return list(self._lookup().values())

  def available(self) -> list[str]:
    return [s.name for s in self._lookup().values() if s.unavailable_reason is None]


Device = DeviceRegistry()


# ---- the compile cache: content-addressed, verified, written atomically, pruned least recently used first
# An entry is CACHE_MAGIC, a SHA-256 of its key and payload, then the payload; its file is named by its key. The
# checksum covering the key ties the payload to its name: an entry copied or renamed over another kernel's file
# fails the check like a corrupt one, instead of running the wrong kernel.
CACHE_MAGIC = b"refgrad-cache-2\n"
OLD_CACHE_MAGICS = (b"refgrad-cache-1\n",)  # earlier formats, whose checksum did not cover the key
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
  kernel is compiled again."""


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


def _write_entry(path: Path, payload: bytes) -> None:
  """Write to a temporary file in the same folder, then rename: readers never see half a file."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(CACHE_MAGIC + _entry_digest(path.stem, payload) + payload)
    os.replace(tmp, path)
  except BaseException:
    Path(tmp).unlink(missing_ok=True)
    raise


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
  for path in cache_dir().glob("??/*"):
    try:
      stat = path.stat()
    except OSError:  # another process deleted or renamed it meanwhile
      continue
    if path.name.startswith(".tmp-") and time.time() - stat.st_mtime < STALE_TMP_SECONDS:
      continue
    entries.append((stat.st_mtime_ns, stat.st_size, path))
  total = sum(size for _, size, _ in entries)
  limit = cache_limit() if limit is None else limit
  if total > limit:
    for _, size, path in sorted(entries, key=lambda e: e[0]):
      if total <= PRUNE_TO * limit:
        break
      path.unlink(missing_ok=True)
      total -= size
  return total


def _note_write(nbytes: int) -> None:
  """Scan the cache folder only on this process's first write and when what it wrote since its last scan may
  have taken the cache over its limit, never on every write. Writes of other processes show at the next scan."""
  global _cache_estimate
  if _cache_estimate is not None and _cache_estimate + nbytes <= cache_limit():
    _cache_estimate += nbytes
    return
  _cache_estimate = prune_cache()


def _touch(path: Path) -> None:
  """Mark an entry as just used, so pruning keeps it."""
  try:
    os.utime(path)
  except OSError:  # a read-only cache, or another process pruned the entry just now
    pass


def cached_compile(compiler: Compiler, source: str) -> bytes:
  """compiler.compile(source), run once per (compiler, source) across processes."""
  cache_limit()  # a bad REFGRAD_CACHE_MAX_MB fails every run, not only runs that write
  key = hashlib.sha256(f"{compiler.cache_key}\0{source}".encode()).hexdigest()
  path = cache_dir() / key[:2] / f"{key}.bin"
  if (payload := _read_entry(path)) is not None:
    _touch(path)
    _last_hit.path = path
    return payload
  _last_hit.path = None
  return _compile_and_store(compiler, source, path)


def _compile_and_store(compiler: Compiler, source: str, path: Path) -> bytes:
  payload = compiler.compile(source)
  try:
    _write_entry(path, payload)
    _note_write(len(CACHE_MAGIC) + 32 + len(payload))
  except OSError:
    pass  # a read-only or full cache folder only costs speed
  return payload


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


class Buffer:
  """`size` elements of `dtype` on a device, allocated on first use."""

  def __init__(self, device: str, size: int, dtype: DType):
    self.device, self.size, self.dtype = device, size, dtype
    self._handle: Any = None

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  @property
  def handle(self) -> Any:
    if self._handle is None:
      self._handle = Device[self.device].allocator.alloc(self.nbytes)
    return self._handle

  @property
  def undefined(self) -> np.ndarray | None:
    """PYTHON only: the lanes whose value the spec leaves undefined (None: all defined)."""
    return getattr(self._handle, "undefined", None)

  def keep_undefined(self, mask: np.ndarray | None) -> None:
    """Give copied or all-reduced data the undefined lanes of its sources, on a device that tracks them (PYTHON's
    buffers do): a lane undefined on one device stays undefined on the next."""
    if hasattr(self.handle, "undefined"):
      self.handle.undefined = mask.copy() if mask is not None and mask.any() else None

  def copyin(self, data: np.ndarray) -> Buffer:
    flat = np.ascontiguousarray(data, dtype=self.dtype.np).reshape(-1)
    if flat.size != self.size:
      raise ValueError(f"copyin of {flat.size} elements into a buffer of {self.size}")
    Device[self.device].allocator.copyin(self.handle, memoryview(flat.view(np.uint8)))
    return self

  def numpy(self) -> np.ndarray:
    out = np.empty(self.size, dtype=self.dtype.np)
    if self.size:
      Device[self.device].allocator.copyout(memoryview(out.view(np.uint8)), self.handle)
    return out

  def __del__(self):
    if self._handle is not None:
      try:
        Device[self.device].allocator.free(self._handle)
      except Exception:  # interpreter shutdown: the registry may already be gone
        pass

  def __repr__(self) -> str:
    return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"
