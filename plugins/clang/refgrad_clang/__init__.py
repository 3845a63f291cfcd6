"""refgrad-clang: the CLANG device. Programs are rendered to C, compiled to a shared library, run with ctypes.

Threads become nested loops; the C-style renderer of the core does the rest. Compiler flags keep the spec:
no fast-math, no FP contraction (no fused multiply-add), -fwrapv. Each C compiler configuration in C_COMPILERS
(compiler and flags) is a device of its own: CLANG, GCC, CLANG_O3, so the kit tests more than one compiler.
"""
from __future__ import annotations

import _ctypes
import ctypes
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from refgrad.backend_helpers import HostAllocator, HostMemory, distribution_version, numbered_source, run_ranges
from refgrad.codegen.contract import Capabilities, batch_binary, split_batch_binary
from refgrad.codegen.cstyle import CDialect, CStyleRenderer
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec
from refgrad.standalone import StandaloneCase
from refgrad_clang.standalone import c_reproducer


def c_flags(optimize: str = "-O2", quiet: str = "-Wno-everything",
            workarounds: tuple[str, ...] = ()) -> tuple[str, ...]:
  """The flags of a configuration: an optimization level and the compiler's word for "no warnings" around the flags
  that keep the spec (no fast-math, no contraction, wrapping signed integers), which every configuration keeps, and
  any flags that keep the compiler off one of its known bugs (bugs/)."""
  return (optimize, "-march=native", "-fPIC", "-shared", "-fwrapv", "-ffp-contract=off", "-fno-fast-math",
          "-fno-math-errno", quiet, *workarounds, "-x", "c", "-std=c11")


FLAGS = c_flags()  # CLANG's
LIBRARIES = ("-lm",)  # after the source on the command line


@dataclass(frozen=True)
class CCompilerConfig:
  """A C compiler and its flags: one device. `compilers` are looked for in order (None: clang, then $CC, then cc)."""
  device: str
  compilers: tuple[str, ...] | None
  flags: tuple[str, ...]


C_COMPILERS = (
  CCompilerConfig("CLANG", None, FLAGS),
  # gcc's -w: clang's -Wno-everything. GCC 12's loop vectorizer miscompiles sums of 8- and 16-bit integers
  # (bugs/gcc-narrow-int-sum-vectorizer): its loops are not vectorized (SLP vectorization stays on)
  CCompilerConfig("GCC", ("gcc",), c_flags(quiet="-w", workarounds=("-fno-tree-loop-vectorize",))),
  CCompilerConfig("CLANG_O3", ("clang",), c_flags(optimize="-O3")),
)
CLANG = C_COMPILERS[0]


class CompileError(RuntimeError):
  """The C compiler rejected a program: the message shows the numbered source and the compiler's stderr."""


def find_compiler(config: CCompilerConfig = CLANG) -> tuple[str | None, list[str]]:
  """The first of the configuration's compilers on PATH: (path or None, what was tried)."""
  default = ["clang"] + ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc"]
  tried = list(config.compilers) if config.compilers is not None else default
  for name in tried:
    if (path := shutil.which(name)) is not None:
      return path, tried
  return None, tried


def target_flags(dry_run: str) -> str:
  """The flags a compiler's dry run (`-###`) resolves -march=native into: clang's -target-cpu and -target-feature
  pairs, else gcc's -march=CPU and -m<feature> flags; sorted, so the text is stable. Empty if there are none."""
  tokens = dry_run.replace('"', " ").split()
  clang = [f"{flag} {value}" for flag, value in zip(tokens, tokens[1:]) if flag in ("-target-cpu", "-target-feature")]
  gcc = {token for token in tokens if token.startswith("-m") and token != "-march=native"}
  return " ".join(sorted(clang) or sorted(gcc))


@functools.cache
def native_target(path: str) -> str:
  """What -march=native means for this compiler on this machine, asked once per process. A binary built for one
  CPU may use instructions another lacks, so the compile cache key must hold this, not the word "native"."""
  dry_run = subprocess.run([path, "-march=native", "-###", "-x", "c", "-c", os.devnull], capture_output=True,
                           text=True)
  # a compiler that does not say: the key names this machine, so no other machine ever loads its binaries
  return target_flags(dry_run.stderr) or f"unresolved -march=native on host {platform.node()}"


class ClangCompiler:
  def __init__(self, path: str, flags: tuple[str, ...] = FLAGS, link_directly: bool = True):
    """link_directly: compile to an object, then run the driver's linker command (link_command) where it has one;
    False links through the driver in the same command (bench/devices.py compares the two)."""
    self.path, self.flags, self.link_directly = path, flags, link_directly
    banner = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
    self.version = banner[0] if banner else path
    self.cache_key = f"clang|{self.version}|{' '.join(flags + LIBRARIES)}|{native_target(path)}"

  def with_flags(self, flags: tuple[str, ...]) -> ClangCompiler:
    """This compiler with other flags (refgrad selftest plants wrong ones)."""
    return ClangCompiler(self.path, flags, self.link_directly)

  def compile(self, source: str) -> bytes:
    return self._build(source, lambda: f"this program:\n{numbered_source(source)}")

  def compile_batch(self, sources: Sequence[str]) -> list[bytes]:
    """One translation unit, one shared library for many kernels (one compiler run: far cheaper than one per
    kernel). The preludes are merged, and each kernel, its code unchanged, gets a symbol of its own."""
    kernels = [split_kernel(source) for source in sources]
    symbols = [f"{name}_b{i}" for i, (_, name, _) in enumerate(kernels)]
    unit = merge_preludes([prelude for prelude, _, _ in kernels]) + "".join(
      f"\nvoid {symbol}{rest}" for symbol, (_, _, rest) in zip(symbols, kernels))
    library = self._build(unit, lambda: f"a batch of {len(sources)} programs (each is compiled alone next)")
    return [batch_binary(symbol, library) for symbol in symbols]

  def _build(self, source: str, what: Callable[[], str]) -> bytes:
    with tempfile.TemporaryDirectory(prefix="refgrad-clang-") as tmp:
      out = os.path.join(tmp, "kernel.so")
      link = link_command(self.path, self.flags) if self.link_directly else None
      if link is None:  # the driver compiles and links
        self._run([self.path, *self.flags, "-", "-o", out, *LIBRARIES], source, what)
      else:
        obj = os.path.join(tmp, "kernel.o")
        self._run([self.path, *self.flags, "-c", "-", "-o", obj], source, what)
        self._run([{OBJECT: obj, LIBRARY: out}.get(arg, arg) for arg in link], "", what, action="link")
      with open(out, "rb") as f:
        return f.read()

  def _run(self, command: list[str], source: str, what: Callable[[], str], action: str = "compile") -> None:
    result = subprocess.run(command, input=source, capture_output=True, text=True)
    if result.returncode != 0:
      raise CompileError(f"{os.path.basename(command[0])} failed to {action} {what()}\n\n"
                         f"compiler stderr:\n{result.stderr.strip()}")


# Stand-ins for the object and the library in a linker command learnt from a dry run (link_command)
OBJECT, LIBRARY = "refgrad-kernel.o", "refgrad-kernel.so"


@functools.cache
def link_command(path: str, flags: tuple[str, ...]) -> tuple[str, ...] | None:
  """The one command the compiler's driver runs to link the object OBJECT into the library LIBRARY with these
  flags, asked once per process by a dry run (`-###`), or None if linking is more than that one command (gcc passes
  settings to its collect2 through environment variables). Linking with it directly after a `-c` compile is the
  driver's own link, one process cheaper: clang runs its compiler in a process of its own when the same command
  also links (about 25 ms of a 86 ms compile of a tiny kernel on the development machine)."""
  with tempfile.TemporaryDirectory(prefix="refgrad-clang-") as tmp:
    obj, out = os.path.join(tmp, OBJECT), os.path.join(tmp, LIBRARY)
    open(obj, "wb").close()  # a driver leaves out an input that does not exist
    dry_run = subprocess.run([path, *flags, "-x", "none", obj, "-o", out, *LIBRARIES, "-###"], capture_output=True,
                             text=True)
  lines = dry_run.stderr.splitlines()
  commands = [line for line in lines if line.startswith(' "')]
  if dry_run.returncode != 0 or len(commands) != 1 or any(re.match(r"\w+=", line) for line in lines):
    return None
  command = tuple({obj: OBJECT, out: LIBRARY}.get(arg, arg) for arg in shlex.split(commands[0]))
  return command if command.count(OBJECT) == command.count(LIBRARY) == 1 else None


KERNEL = re.compile(r"^void (\w+)(?=\()", re.M)  # the renderer's kernel: the one function not static inline (RG_FN)


def split_kernel(source: str) -> tuple[str, str, str]:
  """(prelude, kernel name, the kernel from its parameter list on) of a rendered program."""
  found = list(KERNEL.finditer(source))
  if len(found) != 1:
    raise CompileError(f"cannot batch a source with {len(found)} kernel functions (one `void name(` per line start)")
  return source[:found[0].start()], found[0].group(1), source[found[0].end():]


def merge_preludes(preludes: Sequence[str]) -> str:
  """The top-level items of several preludes (an item starts at a line that starts at column 0, other than a
  closing brace), each item once, in an order that keeps every prelude's own. A macro defined differently in two of
  them would silently change one kernel, so that raises."""
  items: dict[str, None] = {}
  for prelude in dict.fromkeys(preludes):
    for item in re.split(r"\n(?=[^\s}])", prelude.strip()):
      items[item.rstrip()] = None
  macros = [item.split(None, 2)[1] for item in items if item.startswith("#define ")]
  if len(macros) != len(set(macros)):
    raise CompileError(f"cannot batch programs whose preludes define a macro differently: {sorted(macros)}")
  return "\n".join(items) + "\n"


class SharedLibraryRuntime:
  """Loads a compiled kernel with ctypes. The library is written to a temporary file, opened, then deleted; it is
  loaded once however many kernels of a batch it holds are loaded, and unloaded when no runner holds it."""

  def __init__(self):
    self._libraries: weakref.WeakValueDictionary[bytes, ctypes.CDLL] = weakref.WeakValueDictionary()

  def load(self, binary: bytes, program):
    symbol, library = split_batch_binary(binary) or (program.name, binary)
    loaded = self._open(library)
    function = loaded[symbol]
    function.restype = None
    threaded = program.threads > 1  # the THREAD opt: the kernel takes a range of its outermost axis
    function.argtypes = [ctypes.c_void_p] * len(program.params) + [ctypes.c_int64] * 2 * threaded
    ranges = program.thread_ranges()

    def run(*handles: HostMemory) -> None:
      pointers = [h.address for h in handles]
      if threaded:  # each range of the outermost axis on a CPU thread of its own
        run_ranges(lambda start, end: function(*pointers, start, end), ranges)
      else:
        function(*pointers)
    run.library = loaded  # keep the library loaded as long as the runner lives
    return run

  def _open(self, binary: bytes) -> ctypes.CDLL:
    """The library loaded, once while any runner of its kernels lives."""
    digest = hashlib.sha256(binary).digest()
    if (library := self._libraries.get(digest)) is None:
      fd, path = tempfile.mkstemp(suffix=".so", prefix="refgrad-")
      try:
        with os.fdopen(fd, "wb") as f:
          f.write(binary)
        library = ctypes.CDLL(path)
      finally:
        os.unlink(path)
      # unloaded with its last runner: ctypes never unloads a library, so every kernel ever loaded would stay mapped
      weakref.finalize(library, _ctypes.dlclose, library._handle)
      self._libraries[digest] = library
    return library



def standalone_files(case: StandaloneCase, device: DeviceImpl) -> dict[str, str]:
  """The hook DeviceImpl.standalone: repro.c and run.sh, built by the device's own compiler with its own flags."""
  compiler = device.compiler
  return c_reproducer(case, compiler.path, compiler.flags, LIBRARIES, compiler.version)


def probe(config: CCompilerConfig = CLANG) -> str | None:
  path, tried = find_compiler(config)
  return None if path else f"no C compiler found: tried {', '.join(tried)}"


def make_device(config: CCompilerConfig = CLANG) -> DeviceImpl:
  path, _ = find_compiler(config)
  # AVX2: 8 floats per vector register; every core for long kernels (codegen/opt.py)
  dialect = CDialect(caps=Capabilities(upcast_lanes=8, threads=os.cpu_count() or 1))
  return DeviceImpl(config.device, HostAllocator(), renderer=CStyleRenderer(dialect),
                    compiler=ClangCompiler(path, config.flags), runtime=SharedLibraryRuntime(),
                    standalone=standalone_files)


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(config.device, functools.partial(make_device, config), plugin="refgrad-clang",
                     version=distribution_version("refgrad-clang"), probe=functools.partial(probe, config))
          for config in C_COMPILERS]


@hookimpl
def refgrad_aliases() -> dict[str, str]:
  """tinygrad 0.10 calls its C-on-the-host device CPU: code written for it runs here on CLANG."""
  return {"CPU": "CLANG"}
