"""refgrad-llvm: the LLVM device. Programs are rendered to LLVM IR (render.py), verified, optimized and compiled by
llvmlite to an object file for the host CPU (in a child process: isolation.py), linked by LLVM's ORC JIT in this
process and called through ctypes.

The object file is what `compile` returns, so refgrad's content cache skips all of LLVM on a warm start; only
the (fast) in-memory link runs per process. A batch of kernels (`compile_batch`) is one module, optimized and
compiled to one object file, linked once per process for all its kernels; a large batch is split into parts
compiled at the same time in children of their own, a module and an object file each (`batch_parts`). No fast-math
and no FP contraction anywhere (see render.py).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import os
import re
import warnings
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from refgrad.backend_helpers import HostAllocator, distribution_version, numbered_source, run_ranges
from refgrad.codegen.contract import batch_binary, split_batch_binary
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.registry import DeviceSpec
from refgrad_llvm import isolation
from refgrad_llvm.isolation import LLVMCrash, LLVMTimeout
from refgrad_llvm.render import LLVMRenderer

OPT_LEVEL = 3
RELOCATION, CODE_MODEL = "pic", "jitdefault"
MIN_LLVMLITE = (0, 45)  # LLVM 20: opaque pointers, the new pass manager, no explicit initialization
LIBRARY_MAGIC = b"refgrad-llvm-library-1\n"  # a batch's object file, after the names of the kernels it defines
# LLVM optimizes and generates code on one thread (O3 and code generation: 10-20 ms of CPU a fuzz kernel), so a
# batch of at least this many kernels a part is split into parts of about equal IR size, each compiled in a child
# of its own at the same time, one part per core up to MAX_PARTS. Each part is its own library.
KERNELS_PER_PART = 8
MAX_PARTS = 4
# A child costs about 0.4 s of CPU to start, which a process compiling a batch or two would not earn back: a
# compiler starts more children once it has compiled this many kernels in batches (a fuzz worker, in seconds).
SPREAD_AFTER = 64
# A compile request's time limit: COMPILE_SECONDS, and COMPILE_SECONDS_PER_KERNEL more for each kernel of a batch.
# A kernel takes 10-20 ms, and a part of a batch well under a second, so only a pathological compile reaches the
# limit (LLVM's loop vectorizer took 484 s on one int32 `**` kernel: bugs/llvm-loop-vectorizer-compile-time); its
# kernel is then compiled without loop vectorization, which computes the same values.
COMPILE_SECONDS = 10.0
COMPILE_SECONDS_PER_KERNEL = 0.25


class LLVMCompileError(RuntimeError):
  """LLVM rejected a program: the message shows the numbered IR and LLVM's own message."""


@dataclass(frozen=True)
class Toolchain:
  versions: str          # "llvmlite 0.50.0, LLVM 22.1.0"
  problem: str | None    # why the device cannot run here, or None


def _release(text: str) -> tuple[int, ...]:
  return tuple(int(part) for part in itertools.takewhile(str.isdigit, text.split(".")))


@functools.cache
def toolchain() -> Toolchain:
  """Import llvmlite once; a missing or broken llvmlite makes the device unavailable, never `import refgrad` fail."""
  try:
    import llvmlite
    import llvmlite.binding as llvm
  except (ImportError, OSError) as e:  # OSError: its shared library would not load
    return Toolchain("llvmlite missing", f"llvmlite cannot be imported ({type(e).__name__}: {e}); "
                                         "pip install 'llvmlite>=0.45'")
  versions = f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
  if _release(llvmlite.__version__) < MIN_LLVMLITE:
    return Toolchain(versions, f"llvmlite {llvmlite.__version__} is too old: refgrad-llvm needs llvmlite >= 0.45")
  return Toolchain(versions, None)


def probe() -> str | None:
  return toolchain().problem


def host_target() -> tuple[str, str, str]:
  """This process's (triple, CPU name, CPU features string), as LLVM sees them."""
  import llvmlite.binding as llvm
  return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def host_target_machine() -> Any:
  """A target machine for this CPU (its name and features), optimizing at OPT_LEVEL."""
  import llvmlite.binding as llvm
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  triple, cpu, features = host_target()
  return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=OPT_LEVEL,
                                                               reloc=RELOCATION, codemodel=CODE_MODEL)


class LLVMCompiler:
  """IR text -> verified, optimized module -> object file bytes for the host CPU, compiled in a child process
  (isolation.py). If LLVM aborts there or runs past its time limit, the kernel is compiled again without loop
  vectorization (with a warning); if it fails even then, the result is an LLVMCompileError, never a dead caller."""

  isolated = True  # compiles in child processes, one per thread compiling: refgrad fuzz compiles ahead in a thread

  def __init__(self):
    import llvmlite.binding as llvm
    self.llvm = llvm
    self.child = isolation.SHARED
    self.batched = 0  # kernels compiled in batches
    # everything that shapes the object file besides the IR: LLVM itself, the target CPU, the options
    self.cache_key = "|".join(["llvm", toolchain().versions, *host_target(), f"O{OPT_LEVEL}", RELOCATION, CODE_MODEL])

  @functools.cached_property
  def target_machine(self) -> Any:
    return host_target_machine()

  def compile(self, source: str) -> bytes:
    try:
      return self._answer(self.child.compile(source, vectorize=True, limit=COMPILE_SECONDS))
    except LLVMCrash as crash:
      warnings.warn(f"LLVM {_failed(crash)} while optimizing {kernel_name(source)} ({crash}); compiling it again "
                    "without loop vectorization", RuntimeWarning, stacklevel=2)
    try:
      return self._answer(self.child.compile(source, vectorize=False, limit=COMPILE_SECONDS))
    except LLVMCrash as crash:
      raise LLVMCompileError(f"LLVM {_failed(crash)} on this program, with and without loop vectorization "
                             f"({crash}):\n{numbered_source(source)}") from None

  def compile_batch(self, sources: Sequence[str]) -> list[bytes]:
    """An object file for each part of the batch (`batch_parts`), the parts compiled at once, each in a child that
    has started already (one starting would make the batch wait); more children are started for the batches to
    come, once SPREAD_AFTER kernels are compiled. If LLVM aborts on a part or rejects it, its error is raised:
    refgrad then compiles the batch in halves, down to `compile`, which retries the culprit without loop
    vectorization. A part past its time limit is compiled again kernel by kernel (halving would wait for the limit
    once a level)."""
    wanted = min(compile_cores(), len(sources) // KERNELS_PER_PART) if self.batched >= SPREAD_AFTER else 1
    self.batched += len(sources)
    parts = batch_parts(sources, self.child.available(wanted) if wanted > 1 else 1)
    if len(parts) == 1:
      return self._library(list(sources))
    with ThreadPoolExecutor(len(parts) - 1, thread_name_prefix="llvm-part") as pool:
      others = [pool.submit(self._library, [sources[i] for i in part]) for part in parts[1:]]
      answers = [self._library([sources[i] for i in parts[0]])] + [future.result() for future in others]
    binaries: list[bytes] = [b""] * len(sources)
    for part, answer in zip(parts, answers):
      for i, binary in zip(part, answer):
        binaries[i] = binary
    return binaries

  def _library(self, sources: list[str]) -> list[bytes]:
    """One object file for these sources, in one request to a child: each kernel's batch_binary in it; or, if
    that request runs past its time limit, each kernel compiled on its own."""
    limit = COMPILE_SECONDS + COMPILE_SECONDS_PER_KERNEL * len(sources)
    try:
      compiled, symbols = self._answer(self.child.compile(sources, vectorize=True, limit=limit))
    except LLVMTimeout:
      return [self.compile(source) for source in sources]
    check_symbols(sources, symbols)
    library = LIBRARY_MAGIC + " ".join(symbols).encode() + b"\n" + compiled
    return [batch_binary(symbol, library) for symbol in symbols]

  @staticmethod
  def _answer(answer: tuple[str, Any]) -> Any:
    """The child's answer: the object file (and a batch's kernel names), or LLVM's rejection raised here."""
    kind, payload = answer
    if kind == "rejected":
      raise LLVMCompileError(payload)
    return payload

  def compile_here(self, source: str, vectorize: bool = True) -> bytes:
    """The compile itself, in this process (the child's side)."""
    module = self.parse(source)
    self.optimize(module, vectorize)
    return self.target_machine.emit_object(module)

  def compile_batch_here(self, sources: Sequence[str], vectorize: bool = True) -> tuple[bytes, list[str]]:
    """A batch's compile (the child's side): the object file of one module holding every kernel, renamed
    `b<i>_<name>` after its place (two kernels may share a name), and the kernels' new names. Each source is
    parsed and verified on its own; LLVM's linker merges their declarations and renames clashing helpers."""
    modules = [self.parse(source) for source in sources]
    symbols = [rename_kernel(module, f"b{i}_") for i, module in enumerate(modules)]
    for module in modules[1:]:
      modules[0].link_in(module)
    self.optimize(modules[0], vectorize)
    return self.target_machine.emit_object(modules[0]), symbols

  def parse(self, source: str) -> Any:
    """Parse and verify first: bad IR becomes an LLVMCompileError, never a crash inside LLVM's code generator."""
    try:
      module = self.llvm.parse_assembly(source)
      module.verify()
    except RuntimeError as e:
      raise LLVMCompileError(f"LLVM rejected this program:\n{numbered_source(source)}\n\n"
                             f"LLVM says:\n{str(e).strip()}") from None
    module.triple = self.target_machine.triple
    module.data_layout = str(self.target_machine.target_data)
    return module

  def optimize(self, module: Any, vectorize: bool = True) -> None:
    tuning = self.llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    tuning.slp_vectorization = tuning.loop_unrolling = True
    tuning.loop_vectorization = vectorize
    passes = self.llvm.create_pass_builder(self.target_machine, tuning)
    passes.getModulePassManager().run(module, passes)


def _failed(crash: LLVMCrash) -> str:
  return "ran past its time limit" if isinstance(crash, LLVMTimeout) else "aborted"


def compile_cores() -> int:
  """The cores this process may run on, as many compile children as a batch keeps busy at most."""
  return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, MAX_PARTS)


def batch_parts(sources: Sequence[str], cores: int) -> list[list[int]]:
  """The batch's source indices in parts to compile at once: as many as `cores` with KERNELS_PER_PART each at
  least, the largest sources first each to the part with the least IR so far (IR size stands for compile time)."""
  count = max(1, min(cores, len(sources) // KERNELS_PER_PART))
  parts: list[list[int]] = [[] for _ in range(count)]
  sizes = [0] * count
  for i in sorted(range(len(sources)), key=lambda i: -len(sources[i])):
    smallest = sizes.index(min(sizes))
    parts[smallest].append(i)
    sizes[smallest] += len(sources[i])
  return [sorted(part) for part in parts]


def check_symbols(sources: Sequence[str], symbols: Sequence[str]) -> None:
  """Each kernel's name in a batch's library must be `b<i>_` and a function source i defines: a binary cached under
  one kernel's source that runs another kernel is the silent wrong answer this rules out."""
  wrong = len(symbols) != len(sources) or any(
    not symbol.startswith(f"b{i}_") or f"@{symbol[len(f'b{i}_'):]}(" not in source
    for i, (source, symbol) in enumerate(zip(sources, symbols)))
  if wrong:
    raise RuntimeError(f"the LLVM compile process named {len(symbols)} kernels {list(symbols)[:8]} for a batch of "
                       f"{len(sources)} ({', '.join(kernel_name(source) for source in sources[:8])}, ...)")


def rename_kernel(module: Any, prefix: str) -> str:
  """Prefix the name of the one function `module` defines for callers outside it (its kernel); the new name."""
  import llvmlite.binding as llvm
  kernels = [f for f in module.functions if not f.is_declaration and f.linkage == llvm.Linkage.external]
  if len(kernels) != 1:
    raise LLVMCompileError(f"a batch takes modules that define one kernel each; this one defines "
                           f"{[f.name for f in kernels]}:\n{numbered_source(str(module))}")
  kernels[0].name = prefix + kernels[0].name
  return kernels[0].name


def kernel_name(source: str) -> str:
  """The first function an IR text defines ("define void @r_1(..." -> "kernel r_1"), for messages."""
  match = re.search(r"define [^@]*@([\w.$]+)", source)
  return f"kernel {match.group(1)}" if match else "a program"


# An LLJIT keeps bookkeeping for every library it ever linked (about 90 KB each, measured) even after the library's
# code is released, so a long-running process starts a fresh LLJIT after this many libraries; the old one is freed
# when the last runner linked into it is (runners hold their JIT).
LIBRARIES_PER_JIT = 256


@dataclass
class Linked:
  """An object file linked into a JIT: its code lives as long as this does, and its JIT at least as long (released
  in this order). Runners hold it."""
  library: Any
  jit: Any


class JITRuntime:
  """Links object files into LLVM's ORC JIT, one library per object file, which a batch's kernels share while any
  of their runners lives (libm and libc come from this process)."""

  def __init__(self):
    import llvmlite.binding as llvm
    self.llvm = llvm
    self.jit = llvm.create_lljit_compiler(host_target_machine())
    self.libraries = itertools.count()
    self.linked: weakref.WeakValueDictionary[bytes, Linked] = weakref.WeakValueDictionary()  # by sha256

  def link(self, library: bytes, symbol: str) -> Linked:
    """The library linked, once while it is in use: a batch's (LIBRARY_MAGIC, its kernels' names, its object
    file) exports every kernel, a single kernel's object file its `symbol`."""
    digest = hashlib.sha256(library).digest()
    if (linked := self.linked.get(digest)) is not None:
      return linked
    compiled, exports = library, [symbol]
    if library.startswith(LIBRARY_MAGIC):
      names, _, compiled = library[len(LIBRARY_MAGIC):].partition(b"\n")
      exports = names.decode().split()
    number = next(self.libraries)
    if number and number % LIBRARIES_PER_JIT == 0:
      self.jit = self.llvm.create_lljit_compiler(host_target_machine())
    builder = self.llvm.JITLibraryBuilder().add_object_img(compiled).add_current_process()
    for name in exports:
      builder.export_symbol(name)
    linked = self.linked[digest] = Linked(builder.link(self.jit, f"{exports[0]}.{number}"), self.jit)
    return linked

  def load(self, binary: bytes, program: Any):
    symbol, library = split_batch_binary(binary) or (program.name, binary)
    linked = self.link(library, symbol)
    threaded = program.threads > 1  # the THREAD opt: the kernel takes a range of its outermost axis
    arguments = [ctypes.c_void_p] * len(program.params) + [ctypes.c_int64] * 2 * threaded
    function = ctypes.CFUNCTYPE(None, *arguments)(linked.library[symbol])
    ranges = program.thread_ranges()

    def run(*handles: np.ndarray) -> None:
      pointers = [h.ctypes.data for h in handles]
      if threaded:
        run_ranges(lambda start, end: function(*pointers, start, end), ranges)
      else:
        function(*pointers)
    run.linked = linked
    return run


def make_device() -> DeviceImpl:
  from refgrad_llvm.standalone import llvm_standalone  # it reads this module's settings: imported once this one is
  return DeviceImpl("LLVM", HostAllocator(), renderer=LLVMRenderer(), compiler=LLVMCompiler(), runtime=JITRuntime(),
                    standalone=llvm_standalone)


def description() -> str:
  """The plugin version and the llvmlite and LLVM it runs on (imports llvmlite: asked only when devices are listed)."""
  return f"{distribution_version('refgrad-llvm')} ({toolchain().versions})"


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("LLVM", make_device, plugin="refgrad-llvm", version=description, probe=probe)]
