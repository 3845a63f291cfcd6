"""The device contract: what codegen hands a device, and what a device gives back.

The bottom of codegen, resting on the IR alone: a `Program` (a linearized kernel), the `Opt` list it was built with,
the `Capabilities` a renderer declares, and the protocols of a device's parts (allocator, renderer, compiler,
runtime, and the runner a runtime loads). refgrad/hookspecs.py explains the contract in words; plugins import its
types from here.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from refgrad.dtype import ALL_DTYPES, DType
from refgrad.uop import Ops, UOp


@dataclass(frozen=True)
class Opt:
  kind: str  # a name in codegen/opt.py's APPLY or a device's own (Capabilities.opt_rules)
  axis: int
  amount: int  # for SWAP, the other loop's axis

  def __str__(self) -> str:
    return f"{self.kind}({self.axis},{self.amount})"


OptList = tuple[Opt, ...]


def opts_text(opts: OptList) -> str:
  return " ".join(str(o) for o in opts) or "(none)"


@dataclass(frozen=True)
class Program:
  """A kernel ready for a device. `uops` is ordered; PARAM i is the i-th buffer (0 is the output).

  `local_shape` is empty for a plain program. A GPU-shaped one (codegen/gpu.py) has one entry per grid axis:
  the work-group size, which divides the global size on that axis."""
  name: str
  uops: tuple[UOp, ...]
  global_shape: tuple[int, ...]
  key: UOp
  local_shape: tuple[int, ...] = ()
  opts: OptList = ()

  @functools.cached_property
  def params(self) -> tuple[UOp, ...]:
    """Every buffer parameter, in order, including any the simplified program no longer reads."""
    return tuple(sorted((u for u in self.key.toposort if u.op is Ops.PARAM), key=lambda u: u.arg[0]))

  @functools.cached_property
  def loop_ends(self) -> dict[int, int]:
    """Position of each RANGE -> position of its ENDRANGE."""
    ends, open_loops = {}, []
    for i, u in enumerate(self.uops):
      if u.op is Ops.RANGE:
        open_loops.append(i)
      elif u.op is Ops.ENDRANGE:
        ends[open_loops.pop()] = i
    return ends

  @property
  def threads(self) -> int:
    """How many CPU threads the program's THREAD opt splits its outermost thread axis over (1: no THREAD opt)."""
    return next((o.amount for o in self.opts if o.kind == "THREAD"), 1)

  def thread_ranges(self) -> list[tuple[int, int]]:
    """The [start, end) ranges of the outermost thread axis, one per CPU thread: a threaded kernel is launched once
    per range with the two as its last arguments."""
    size = next((s for s in self.global_shape if s > 1), 1)
    n = self.threads
    return [(size * i // n, size * (i + 1) // n) for i in range(n) if size * i // n < size * (i + 1) // n]

  def listing(self) -> str:
    """A numbered, readable text form: what the PYTHON device 'renders'."""
    number = {u: i for i, u in enumerate(self.uops)}
    local = f" local_shape={self.local_shape}" if self.local_shape else ""
    opts = f" opts={opts_text(self.opts)}" if self.opts else ""
    lines = [f"kernel {self.name} global_shape={self.global_shape}{local}{opts}"]
    depth = 0
    for i, u in enumerate(self.uops):
      depth -= u.op is Ops.ENDRANGE
      srcs = ", ".join(f"%{number[s]}" for s in u.src)
      arg = "" if u.arg is None else f" {u.arg!r}"
      lines.append(f"{i:4d} {'  ' * depth}{u.op.name}:{u.dtype.name}({srcs}){arg}")
      depth += u.op is Ops.RANGE
    return "\n".join(lines)


@dataclass(frozen=True)
class Capabilities:
  """What a renderer's programs can do; the oracle kit and the codegen read it."""
  dtypes: frozenset[DType] = frozenset(ALL_DTYPES.values())
  local_memory: int = 0                # bytes of work-group local memory (0: none)
  max_global_size: tuple[int, ...] | None = None
  max_local_size: int = 1
  # how a grouped reduction shares iterations among a work-group's items: interleaved, so neighbouring items read
  # neighbouring addresses together (GPU), or in contiguous runs, one per item (CPU OpenCL runs items one by one)
  interleaved_groups: bool = True
  # how many floats the device's compiler keeps in one vector register: the kernel optimizer gives a long reduction
  # a tile of that many outputs per thread along the last axis (refgrad/codegen/opt.py); 0 or 1: no opts
  upcast_lanes: int = 0
  # CPU threads a kernel's outermost axis may be split over (the THREAD opt; the renderer takes the range as two
  # int64 arguments after the buffers, and the runtime launches every range at once)
  threads: int = 1
  # the device's own kernel transformations, (opt name, rule) pairs that replace or add to refgrad/codegen/opt.py's
  # (a rule takes and returns (lowered kernel, shape) and gets the opt's axis and amount)
  opt_rules: tuple[tuple[str, Callable[..., Any]], ...] = ()


class UnsupportedDTypeError(TypeError):
  """A kernel computes with a dtype that its device does not support (not in its `Capabilities.dtypes`)."""


class UnsupportedOpError(NotImplementedError):
  """A graph device cannot compute `op` on `dtype` as docs/SPEC.md defines it (`why` says what it lacks, with its
  source): the device's answer would not be SPEC's, so it gives none. A NotImplementedError, as torch raises for an
  op a backend lacks; `refgrad check` counts it as an unsupported cell."""

  def __init__(self, device: str, op: Ops, dtype: DType, why: str):
    super().__init__(f"device {device} cannot compute {op.name} on {dtype.name}: {why}")
    self.device, self.op, self.dtype, self.why = device, op, dtype, why


class Allocator(Protocol):
  """Raw memory of one device. Handles are opaque to the core."""
  def alloc(self, nbytes: int) -> Any: ...
  def free(self, handle: Any) -> None: ...
  def copyin(self, handle: Any, src: memoryview) -> None: ...
  def copyout(self, dest: memoryview, handle: Any) -> None: ...


class Renderer(Protocol):
  caps: Capabilities
  def render(self, program: Program) -> str: ...


class Compiler(Protocol):
  """Source -> binary. It may also have `compile_batch(sources) -> list[bytes]` (see BatchCompiler): many kernels
  in one compiler run, which costs far less than one run each."""
  # everything besides the source that changes the binary: compiler version, flags, the resolved target CPU and
  # features (never "native"). Compile caches may be shared between machines: see docs/writing-a-backend.md
  cache_key: str
  def compile(self, source: str) -> bytes: ...


class BatchCompiler(Compiler, Protocol):
  """A compiler with the optional `compile_batch`: one binary per source, each loadable by the runtime for that
  source's program exactly as if `compile(source)` had made it (a binary may be a `batch_binary`, naming its
  kernel's symbol in a library the batch shares). It raises if the batch does not compile; refgrad then compiles
  the batch in halves, down to single `compile` calls, so an error names its kernel."""
  def compile_batch(self, sources: Sequence[str]) -> list[bytes]: ...


BATCH_BINARY_MAGIC = b"refgrad-batch-binary-1\n"
# A kernel's symbol in a batch's library: a C, LLVM IR or OpenCL C identifier ('.' and '$' are LLVM's too). A binary
# read from the compile cache names one: anything else is refused before a runtime looks it up.
SYMBOL = re.compile(r"[A-Za-z_.$][A-Za-z0-9_.$]*")


def is_symbol(name: str) -> bool:
  return SYMBOL.fullmatch(name) is not None


def batch_binary(symbol: str, library: bytes) -> bytes:
  """One kernel's binary out of a batch: the library (module, program) compiled for the whole batch, and the name
  of this kernel's symbol in it (kernels are renamed in a batch: two of them may share a name). The compile cache
  stores the library once for all its kernels."""
  if not is_symbol(symbol):
    raise ValueError(f"batch_binary: {symbol!r} is not a symbol name (letters, digits, '_', '.', '$')")
  return BATCH_BINARY_MAGIC + symbol.encode() + b"\0" + library


def split_batch_binary(binary: bytes) -> tuple[str, bytes] | None:
  """(symbol, library) of a `batch_binary`; None for a binary of one kernel (its symbol is the program's name).
  ValueError if it names no valid symbol (a corrupt or forged cache entry: load_cached evicts it)."""
  if not binary.startswith(BATCH_BINARY_MAGIC):
    return None
  symbol, found, library = binary[len(BATCH_BINARY_MAGIC):].partition(b"\0")
  name = symbol.decode("ascii", errors="replace")
  if not found or not is_symbol(name):
    raise ValueError(f"a batch binary names no valid symbol: {symbol[:64]!r}")
  return name, library


class Runner(Protocol):
  """A loaded kernel: call it with one buffer handle per program parameter (output first)."""
  def __call__(self, *handles: Any) -> None: ...


class Runtime(Protocol):
  def load(self, binary: bytes, program: Program) -> Runner: ...


@dataclass(frozen=True)
class Difference:
  """A documented way a framework computes some ops on some dtypes differently from docs/SPEC.md, which its graph
  device declares so that the oracle allows it, carried through the rest of the graph as any error is:

  * up to `ulp` more units in the last place of each such op's result (a rounding the framework skips, a looser
    approximation);
  * with `flushes_subnormals` (FTZ/DAZ, `ulp` may then be 0.0): subnormal operands of the listed ops on the listed
    dtypes read as zero of the same sign, and subnormal results are written as zero of the same sign. An operand is
    keyed by its own dtype (a CAST from float32 flushes its float32 input, a comparison its float operands), a result
    by the op's.

  `source` is the sentence of the framework's documentation or source that says so, and where: never declared
  without one."""
  ops: frozenset[Ops]
  dtypes: frozenset[DType]
  ulp: float
  source: str
  flushes_subnormals: bool = False


@dataclass(frozen=True)
class Allowance:
  """What the differences a device declares allow on one (op, dtype), on top of SPEC.md's bounds."""
  ulp: float = 0.0
  flushes_subnormals: bool = False


def declared_allowances(differences: Sequence[Difference]) -> dict[tuple[Ops, DType], Allowance]:
  """(op, dtype) -> what the differences allow there, merged where several apply: the most ULPs, and a flush if any
  of them flushes."""
  allowed: dict[tuple[Ops, DType], Allowance] = {}
  for difference in differences:
    for key in ((op, dtype) for op in difference.ops for dtype in difference.dtypes):
      before = allowed.get(key, Allowance())
      allowed[key] = Allowance(max(before.ulp, difference.ulp),
                               before.flushes_subnormals or difference.flushes_subnormals)
  return allowed


# A compiled graph: the values of the graph's input PARAMs, in PARAM order, each a flat numpy array of its dtype, ->
# the values its STOREs write, in the SINK's order, each a numpy array of the stored value's dtype and shape.
GraphFunction = Callable[..., Sequence[Any]]


class GraphCompiler(Protocol):
  """A graph device's compiler (refgrad/graph_device.py): it takes a whole tensor-level graph and computes it with a
  framework's own compiler, instead of rendering refgrad's linearized kernels.

  A graph is a SINK of STOREs, each writing one value into an output PARAM; the values are built from input PARAMs
  (flat buffers, RESHAPEd to the shapes they are read as) by the primitive ops the graph evaluator
  (refgrad/interp/graph.py) runs: ALU ops with explicit dtypes, CAST, BITCAST, CONST (with its DEVICE), the six
  movement ops, REDUCE_AXIS, and CONTIGUOUS / DETACH / CUSTOM_GRAD / COPY whose value is their first source's.
  `unsupported(node)` is asked of every node before `compile`: a reason (naming op, dtype and the framework's
  documentation or source) makes the whole graph raise UnsupportedOpError, never a wrong answer."""
  caps: Capabilities  # the dtypes it claims (the rest of Capabilities is about kernels)
  # optional: `differences`, a tuple of Difference (its framework's documented differences from SPEC.md)
  def unsupported(self, node: UOp) -> str | None: ...
  def compile(self, graph: UOp) -> GraphFunction: ...
