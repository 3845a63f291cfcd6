"""What a working device is: an allocator plus either an interpreter of programs (PYTHON) or a renderer, a compiler
and a runtime (every compiled backend), and the kernels it has loaded (the parts' protocols:
refgrad/codegen/contract.py; the registry of devices: refgrad/registry.py).
"""
from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from refgrad.alu import exec_reduce
from refgrad.codegen.contract import (
  Allocator,
  Capabilities,
  Compiler,
  GraphCompiler,
  OptList,
  Program,
  Renderer,
  Runner,
  Runtime,
  UnsupportedDTypeError,
  UnsupportedOpError,
)
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile_each, load_cached
from refgrad.dtype import ALL_DTYPES
from refgrad.graph_device import graph_listing, graph_program, graph_runner
from refgrad.uop import Ops, UOp

if TYPE_CHECKING:
  from refgrad.buffer import Buffer
  from refgrad.standalone import StandaloneCase


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
# PYTHON, 33 KB on CLANG, 130 KB on LLVM and 1.7 MB on OPENCL (PoCL builds each program from its source in the
# process that loads it); unbounded, tests/test_elementwise.py alone loaded 1194 kernels per device and took the
# process from 0.6 to 1.7 GB. Replaying the kernel sequence of tests/test_reduce.py, an LRU of 64 already misses
# only on first use, and a training step of bench/train.py uses at most 47 kernels: 128 leaves room, and costs
# OPENCL at most about 220 MB.
RUNNER_CACHE_SIZE = 128


def _attempt(fn: Callable[..., V], *args: Any) -> V | None:
  """fn(*args), or None if it raises: for DeviceImpl.prepare, whose failures run_kernel raises in their turn."""
  try:
    return fn(*args)
  except Exception:
    return None


def runner_key(program: Program) -> Hashable:
  """What a loaded kernel is found by: its (hash-consed) kernel graph and its opt list."""
  return program.key, getattr(program, "opts", ())


def write_variables(buffers: Sequence[Buffer], variables: Sequence[tuple[UOp, int]]) -> None:
  """Give a kernel of symbolic shape its Variables' values: (Variable, value) pairs in the order the kernel reads
  them, written into its last buffer (run_kernel at each launch, a jit's replay). Each value must lie in its
  Variable's range."""
  for var, value in variables:
    name, low, high = var.arg
    if not low <= value <= high:
      raise ValueError(f"Variable {name!r} = {value} is outside its range [{low}, {high}]")
  if variables:
    buffers[-1].copyin(np.array([value for _, value in variables], np.int64))


@dataclass
class DeviceImpl:
  """A working device. Compiled devices give renderer+compiler+runtime; PYTHON gives `interpret`; a graph device
  gives `graph`, a compiler of whole tensor-level graphs (refgrad/graph_device.py), and host memory."""
  name: str
  allocator: Allocator
  renderer: Renderer | None = None
  compiler: Compiler | None = None
  runtime: Runtime | None = None
  interpret: Callable[[Program], Runner] | None = None
  graph: GraphCompiler | None = None
  runner_cache: int = RUNNER_CACHE_SIZE  # loaded kernels kept (a device whose kernels are large keeps fewer)
  # Optional native transfers between devices (defaults: through host memory): transfer(dest, src) copies a buffer
  # of another device into dest of this one; allreduce(op, dest, partials) writes into dest the reduction (op:
  # Ops.ADD, MUL or MAX) of same-sized buffers on several devices, meaning what alu.exec_reduce means.
  transfer: Callable[[Buffer, Buffer], None] | None = None
  allreduce: Callable[[Ops, Buffer, list[Buffer]], None] | None = None
  # Optional: standalone(case, device) writes one judged kernel launch (refgrad/standalone.py's StandaloneCase) as
  # files that run without refgrad ({name: text}, run.sh among them), for a bug report upstream. It is given the
  # device, so a copy of it with other flags or options (a selftest mutant) writes a reproducer with its own.
  standalone: Callable[[StandaloneCase, DeviceImpl], dict[str, str]] | None = None
  _runners: LRU[Runner] = field(init=False)

  def __post_init__(self):
    self._runners = LRU(self.runner_cache)

  @property
  def caps(self) -> Capabilities:
    if self.graph is not None:
      return self.graph.caps
    return self.renderer.caps if self.renderer is not None else Capabilities()

  @property
  def kind(self) -> str:
    """'graph' for a graph device, 'kernel' for one that runs refgrad's kernels (compiled or interpreted)."""
    return "graph" if self.graph is not None else "kernel"

  def render(self, program: Program) -> str:
    if self.graph is not None:
      return graph_listing(program.key, self.graph)
    return self.renderer.render(program) if self.renderer is not None else program.listing()

  def program(self, ast: UOp, opts: OptList | None = None) -> Program:
    """What a scheduled kernel (or, on a graph device, a graph) becomes on this device: lowered, optimized with
    `opts` (None: the heuristic) and linearized by the codegen pipeline, or on a graph device the graph itself."""
    return graph_program(ast) if self.graph is not None else compile_ast(ast, self.caps, opts)

  def get_runner(self, program: Program) -> Runner:
    """Load a program once per device while it stays among the `runner_cache` most recently used; programs are
    keyed by their (hash-consed) kernel graph and their opt list. An evicted one is loaded again from the compile
    cache."""
    key = runner_key(program)
    runner = self._runners.get(key)
    if runner is None:
      runner = self._build_runner(program)
      self._runners.put(key, runner)
    return runner

  def prepare(self, kernels: Sequence[tuple[UOp, OptList | None]]) -> None:
    """Compile and load, all at once, the kernels (ast, opts as run_kernel takes them) about to run that are not
    loaded yet, so that their run_kernel calls find them: a compiler with compile_batch builds them in one go
    (compile_cache.cached_compile_each), and a batch with a kernel that does not compile is split until the others
    do, so they load here all the same. At most `runner_cache` are loaded, the first ones to run, so a longer list
    does not evict its own first kernels; the rest are only compiled (into the compile cache). This only saves time:
    a kernel that fails here (its dtype, its compile, its load) is left to run_kernel, which raises its error when
    its turn comes, as without prepare."""
    if self.compiler is None:  # an interpreter, or a graph device (its framework compiles when a graph first runs)
      return
    programs: dict[Hashable, Program] = {}
    for ast, opts in kernels:  # the loaded ones are skipped before rendering (a warm step renders nothing), and
      program = _attempt(compile_ast, ast, self.caps, opts)  # marked as used, so the new ones evict others first
      if program is not None and self._runners.get(runner_key(program)) is None:
        programs.setdefault(runner_key(program), program)
    new = {key: (program, source) for key, program in programs.items()
           if (source := _attempt(self._checked_source, program)) is not None}
    if not new:
      return
    binaries = _attempt(cached_compile_each, self.compiler, [source for _, source in new.values()]) or []
    compiled = [(key, program, binary) for (key, (program, _)), binary in zip(new.items(), binaries)
                if isinstance(binary, bytes)]  # a kernel that does not compile: run_kernel raises its error in its turn
    for key, program, binary in compiled[:self._runners.maxsize]:
      with contextlib.suppress(Exception):  # a binary that does not load: load_cached evicts it in its turn
        self._runners.put(key, self._build_runner(program, binary))

  def _checked_source(self, program: Program) -> str:
    self.check_dtypes(program)
    return self.render(program)

  def run_kernel(self, ast: UOp, buffers: Sequence[Buffer], opts: OptList | None = None,
                 variables: Sequence[tuple[UOp, int]] = ()) -> tuple[Program, Runner]:
    """The one way a kernel runs (realize, the oracle and the search call it): compile `ast` with `opts` (None: this
    device's heuristic), load it (get_runner), write the values of its Variables into its last buffer and launch it
    on `buffers`, one per PARAM. `variables` are (Variable, value) in the order the kernel reads them (the
    ScheduleItem's); each value must lie in its Variable's range. Returns the program that ran (its name, opts and
    code paths) and its runner, which launches it again (a jit's replay, the search's timing)."""
    if self.graph is not None and variables:
      raise UnsupportedOpError(self.name, Ops.DEFINE_VAR, variables[0][0].dtype, "a graph device computes graphs of "
                               "concrete sizes; this one has symbolic sizes (Variables), not yet supported")
    write_variables(buffers, variables)
    program = self.program(ast, opts)
    runner = self.get_runner(program)
    runner(*[b.handle for b in buffers])
    return program, runner

  def copy_from(self, dest: Buffer, src: Buffer) -> None:
    """Copy src (a buffer of any device) into dest, a buffer of this device."""
    if self.transfer is not None:
      self.transfer(dest, src)
    else:
      dest.copyin(src.numpy())
    dest.keep_undefined(src.undefined)

  def all_reduce(self, op: Ops, dest: Buffer, partials: list[Buffer]) -> None:
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

  def _build_runner(self, program: Program, binary: bytes | None = None) -> Runner:
    """Load a program: from `binary` if given (prepare compiled it, and checked its dtypes), else from the compile
    cache."""
    if binary is not None:
      return self.runtime.load(binary, program)
    if self.graph is not None:
      return graph_runner(self.name, self.graph, program.key)
    self.check_dtypes(program)
    if self.interpret is not None:
      return self.interpret(program)
    return load_cached(self.compiler, self.render(program), lambda binary: self.runtime.load(binary, program))
