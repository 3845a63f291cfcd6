"""Deliberately broken devices, derived from the PYTHON interpreter, to prove the oracle kit catches bugs.

Each one rewrites the program it is given with one wrong rule, the kind of mistake a backend author makes,
then interprets it. Load it as a plugin: `refgrad check --plugin tests/broken_devices.py --device BROKEN_...`
or `refgrad.plugin_loader.register(module)`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np

from refgrad.alu import exec_reduce
from refgrad.codegen import opt
from refgrad.codegen.contract import Capabilities, Program
from refgrad.device import DeviceImpl
from refgrad.dtype import ALL_DTYPES, dtypes
from refgrad.hookspecs import hookimpl
from refgrad.interp.device import PythonAllocator
from refgrad.interp.kernel import PythonKernel
from refgrad.registry import DeviceSpec
from refgrad.rewrite import PatternMatcher, UPat
from refgrad.symbolic_shapes import kernel_variables
from refgrad.uop import Ops, UOp

SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
FLOATS = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)


def _not(x: UOp) -> UOp:
  return x.alu(Ops.XOR, UOp.const(dtypes.bool, True))


def _floor_division(a: UOp, b: UOp) -> UOp:
  q, r = a.alu(Ops.IDIV, b), a.alu(Ops.MOD, b)
  zero = UOp.const(a.dtype, 0)
  fix = r.alu(Ops.CMPNE, zero).alu(Ops.AND, a.alu(Ops.CMPLT, zero).alu(Ops.CMPNE, b.alu(Ops.CMPLT, zero)))
  return fix.where(q.alu(Ops.ADD, UOp.const(a.dtype, -1)), q)


def _saturate(c: UOp, x: UOp) -> UOp | None:
  if not (dtypes.is_int(c.dtype) and dtypes.is_int(x.dtype)) or c.dtype.itemsize >= x.dtype.itemsize:
    return None
  lo, hi = UOp.const(x.dtype, dtypes.min(c.dtype)), UOp.const(x.dtype, dtypes.max(c.dtype))
  clamped = x.alu(Ops.CMPLT, lo).where(lo, hi.alu(Ops.CMPLT, x).where(hi, x))
  return UOp(Ops.CAST, c.dtype, (clamped,))


def _ten_ulp(e: UOp) -> UOp:
  eps = float(ml_dtypes.finfo(e.dtype.np).eps)
  return e.alu(Ops.MUL, UOp.const(e.dtype, 1 + 10 * eps))


BUGS: dict[str, PatternMatcher] = {
  "BROKEN_CMPLT": PatternMatcher([  # a < b rendered as a <= b
    (UPat(Ops.CMPLT, name="c"), lambda c: c.alu(Ops.OR, _not(c.src[0].alu(Ops.CMPNE, c.src[1]))))]),
  "BROKEN_MAX_NAN": PatternMatcher([  # fmax-style: a NaN operand is dropped
    (UPat(Ops.MAX, dtype=FLOATS, name="m"), lambda m: m.src[0].alu(Ops.CMPNE, m.src[0]).where(
      m.src[1], m.src[1].alu(Ops.CMPNE, m.src[1]).where(m.src[0], m)))]),
  "BROKEN_IDIV": PatternMatcher([  # integer division that floors instead of truncating
    (UPat(Ops.IDIV, dtype=SIGNED, name="d"), lambda d: _floor_division(*d.src))]),
  "BROKEN_PAD": PatternMatcher([  # an off-by-one in padded (gated) loads
    (UPat(Ops.LOAD, src=(UPat(name="p"), UPat(name="i"), UPat(name="v")), name="ld"),
     lambda ld, p, i, v: ld.replace(src=(p, i.alu(Ops.ADD, UOp.const(i.dtype, 1)), v)))]),
  "BROKEN_CAST": PatternMatcher([  # narrowing int casts saturate where the spec wraps
    (UPat(Ops.CAST, src=(UPat(name="x"),), name="c"), _saturate)]),
  "BROKEN_EXP2": PatternMatcher([  # a transcendental 10 ULP off
    (UPat(Ops.EXP2, dtype=FLOATS, name="e"), _ten_ulp)]),
}


def _through_wider(c: UOp, x: UOp) -> UOp | None:
  """A narrowing conversion to float made in two steps, through the next wider float (sitofp to double, then
  fptrunc): it rounds twice."""
  wider = {dtypes.float32: dtypes.float64, dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32}
  middle = wider.get(c.dtype)
  if middle is None or x.dtype in (middle, c.dtype, dtypes.bool) or x.dtype.itemsize < 4:
    return None
  return UOp(Ops.CAST, c.dtype, (UOp(Ops.CAST, middle, (x,)),))


def _flush_subnormal(e: UOp) -> UOp:
  tiny = float(ml_dtypes.finfo(e.dtype.np).tiny)
  return e.alu(Ops.CMPLT, UOp.const(e.dtype, tiny)).where(UOp.const(e.dtype, 0.0), e)


def _widen_before_multiply(c: UOp, m: UOp) -> UOp | None:
  """(a*b) widened as a widened times b widened: what an optimizer may do with a multiply it was told cannot wrap."""
  if not (dtypes.is_int(c.dtype) and dtypes.is_int(m.dtype)) or c.dtype.itemsize <= m.dtype.itemsize:
    return None
  return UOp(Ops.CAST, c.dtype, (m.src[0],)).alu(Ops.MUL, UOp(Ops.CAST, c.dtype, (m.src[1],)))


def _printed_short(c: UOp) -> UOp | None:
  """A float64 constant printed with float32's 9 significant digits; an int64 constant as a 32-bit literal."""
  if c.dtype == dtypes.float64 and isinstance(c.arg, float) and math.isfinite(c.arg):
    short = float(f"{c.arg:.9g}")
  elif c.dtype == dtypes.int64 and isinstance(c.arg, int):
    short = int(np.array(c.arg, np.int64).astype(np.int32))
  else:
    return None
  return None if short == c.arg else UOp.const(c.dtype, short)


# Bug kinds that escaped `refgrad check` before issue 26 (each planted here as the kind, not as the backend's bug):
# name -> (the wrong rules, a row and column of the check that must fail)
BLIND_SPOTS: dict[str, tuple[PatternMatcher, str, str]] = {
  "BROKEN_CAST_TWICE": (PatternMatcher([(UPat(Ops.CAST, src=(UPat(name="x"),), name="c"), _through_wider)]),
                        "CAST->float32", "int64"),
  "BROKEN_EXP2_FTZ": (PatternMatcher([(UPat(Ops.EXP2, dtype=FLOATS, name="e"), _flush_subnormal)]),
                      "EXP2", "float32"),
  "BROKEN_MUL_NO_WRAP": (PatternMatcher([
    (UPat(Ops.CAST, src=(UPat(Ops.MUL, name="m"),), name="c"), _widen_before_multiply)]),
    "chain: a*b widened, >> (bits-1)", "int32"),
  "BROKEN_SHORT_CONSTANTS": (PatternMatcher([(UPat(Ops.CONST, name="c"), _printed_short)]), "chain: a*K, K=1/3",
                             "float64"),
}


def rewrite_program(program: Program, rules: PatternMatcher) -> Program:
  """Apply `rules` once to each uop, in order, splicing any new nodes in before their first use."""
  mapping: dict[UOp, UOp] = {}
  order: list[UOp] = []
  placed: set[UOp] = set()
  for u in program.uops:
    rebuilt = u.replace(src=tuple(mapping.get(s, s) for s in u.src))
    new = rules.rewrite(rebuilt) or rebuilt
    for node in new.toposort:
      if node not in placed:
        placed.add(node)
        order.append(node)
    mapping[u] = new
  return dataclasses.replace(program, uops=tuple(order))


def make_broken(name: str) -> DeviceImpl:
  rules = BUGS[name] if name in BUGS else BLIND_SPOTS[name][0]
  return DeviceImpl(name, PythonAllocator(), interpret=lambda program: PythonKernel(rewrite_program(program, rules)))




# ---- optimizer bugs: a correct device whose kernel optimizer has one wrong rule (Capabilities.opt_rules)
def _upcast_wrong_stride(sink: UOp, shape: tuple, axis: int, amount: int):
  """Each thread's tile starts amount-1 outputs after the previous one: tiles overlap and the end is never written."""
  index = opt.thread_index(sink, axis)
  opt.check_amount(f"UPCAST: thread axis {axis}", index.arg[1], amount)
  outer = UOp(Ops.SPECIAL, index.dtype, (), (axis, index.arg[1] // amount))
  stores = [store.substitute({index: outer * (amount - 1) + lane}) for lane in range(amount) for store in sink.src]
  return sink.replace(src=tuple(stores)), tuple(s // amount if i == axis else s for i, s in enumerate(shape))


def _upcast_lost_lane(sink: UOp, shape: tuple, axis: int, amount: int):
  """The last lane of every tile is computed but its store is dropped."""
  upcast, new_shape = opt.upcast(sink, shape, axis, amount)
  return upcast.replace(src=upcast.src[:len(upcast.src) - len(sink.src)]), new_shape


def _upcast_reading(lane_read: Callable[[int, int], int]):
  """An UPCAST whose lane i stores its own output, but computed for lane lane_read(i, amount) of the tile."""
  def rule(sink: UOp, shape: tuple, axis: int, amount: int):
    index = opt.thread_index(sink, axis)
    opt.check_amount(f"UPCAST: thread axis {axis}", index.arg[1], amount)
    outer = UOp(Ops.SPECIAL, index.dtype, (), (axis, index.arg[1] // amount))
    stores = []
    for lane in range(amount):
      for store in sink.src:
        param, where, value, *gate = store.src  # a PADTO gate, like the index, is the lane's own
        own, read = {index: outer * amount + lane}, {index: outer * amount + lane_read(lane, amount)}
        stores.append(store.replace(src=(param, where.substitute(own), value.substitute(read),
                                         *(g.substitute(own) for g in gate))))
    return sink.replace(src=tuple(stores)), tuple(s // amount if i == axis else s for i, s in enumerate(shape))
  return rule


# every lane stores the value computed for lane 0 (a register reused across the tile)
_upcast_stale_value = _upcast_reading(lambda lane, amount: 0)
# an upcast wider than 8 whose lanes wrap: lane i computes lane i mod 8's output (a vector of 8 reused)
_upcast_wraps_at_8 = _upcast_reading(lambda lane, amount: lane % 8)


def _unroll_with(lanes: Callable[[int], range], op_of: Callable[[Ops], Ops]):
  """An UNROLL that combines the iterations `lanes(amount)` of each group with `op_of(reduce op)`."""
  return functools.partial(opt.unroll, lanes=lanes, meet=op_of)


def _padloop_reads_past_the_edge(sink: UOp, shape: tuple, axis: int, amount: int):
  """The reduce loop is padded to a multiple of amount, but its added iterations are neither gated nor replaced by
  the identity: they read past the end of the row (the next row, or past the buffer) and add what they read."""
  loop = opt.reduce_loop(sink, axis, "PADLOOP")
  padded = UOp(Ops.RANGE, loop.dtype, (), (axis, opt.padded_size("PADLOOP", loop.arg[1], amount)))
  return sink.substitute({loop: padded}), shape


OPT_BUGS: dict[str, tuple[str, Callable]] = {
  "OPTBUG_UPCAST_STRIDE": ("UPCAST", _upcast_wrong_stride),
  "OPTBUG_UPCAST_LOST_LANE": ("UPCAST", _upcast_lost_lane),
  "OPTBUG_UPCAST_STALE": ("UPCAST", _upcast_stale_value),
  "OPTBUG_UNROLL_SKIPS_LAST": ("UNROLL", _unroll_with(lambda k: range(k - 1), lambda op: op)),  # drops a remainder
  "OPTBUG_UNROLL_ADDS": ("UNROLL", _unroll_with(range, lambda op: Ops.ADD)),  # MAX and MUL reduces summed
  "OPTBUG_PADLOOP_PAST_EDGE": ("PADLOOP", _padloop_reads_past_the_edge),
}


def _unroll_drops_an_integer_lane(sink: UOp, shape: tuple, axis: int, amount: int):
  """An UNROLL that leaves out the last iteration of each group, in integer reductions only."""
  integer = any(u.op is Ops.REDUCE and dtypes.is_int(u.dtype) for u in sink.toposort)
  return _unroll_with(lambda k: range(k - 1) if integer else range(k), lambda op: op)(sink, shape, axis, amount)


# optimizer bugs that only the opts the heuristic chooses at real sizes, or a forced opt, reach: name -> (opt kind,
# rule, a row of the check that must fail)
OPT_BUGS_BY_ROW: dict[str, tuple[str, Callable, str]] = {
  "OPTBUG_UPCAST_WRAPS_AT_8": ("UPCAST", _upcast_wraps_at_8, "heuristic: column sums (a tile of twice the lanes)"),
  "OPTBUG_UNROLL_DROPS_INT_LANE": ("UNROLL", _unroll_drops_an_integer_lane,
                                   "integer reductions, opts: UNROLL of every kernel"),
}


def make_opt_bug(name: str) -> DeviceImpl:
  kind, rule = OPT_BUGS[name] if name in OPT_BUGS else OPT_BUGS_BY_ROW[name][:2]
  renderer = ListingRenderer(frozenset(ALL_DTYPES.values()))
  renderer.caps = Capabilities(upcast_lanes=8, opt_rules=((kind, rule),))
  return DeviceImpl(name, PythonAllocator(), renderer=renderer, compiler=ListingCompiler(),
                    runtime=InterpretingRuntime())


# ---- grouped-reduction bugs of a GPU backend: the real OPENCL device (PoCL here), its programs rendered wrong
class RewritingRenderer:
  """A renderer that rewrites every GPU-shaped program with work-group reductions by `rules` before rendering."""

  def __init__(self, renderer, rules: PatternMatcher):
    self.renderer, self.rules, self.caps = renderer, rules, renderer.caps

  def render(self, program: Program) -> str:
    if any(u.op is Ops.DEFINE_LOCAL for u in program.uops):
      program = rewrite_program(program, self.rules)
    return self.renderer.render(program)

  def code_paths(self, program: Program) -> list[str]:
    return self.renderer.code_paths(program)


def _no_barrier(opencl: DeviceImpl) -> DeviceImpl:
  """Work-items read the other items' partial sums from local memory without waiting for them to be written."""
  from refgrad.codegen.cstyle import CStyleRenderer
  return dataclasses.replace(opencl, renderer=CStyleRenderer(dataclasses.replace(opencl.renderer.d, barrier="")))


def _double_count(opencl: DeviceImpl) -> DeviceImpl:
  """In the last round of a grouped reduction, the items past the end add the element they clamp to (the last one)
  instead of the identity: that element is counted again, once per such item."""
  drop_identity = PatternMatcher([
    (UPat(Ops.ACCUMULATE, src=(UPat(name="acc"), UPat(Ops.WHERE, src=(UPat(), UPat(name="x"), UPat(Ops.CONST)))),
     name="a"), lambda a, acc, x: a.replace(src=(acc, x)))])
  return dataclasses.replace(opencl, renderer=RewritingRenderer(opencl.renderer, drop_identity))


GPU_BUGS: dict[str, Callable[[DeviceImpl], DeviceImpl]] = {"GPUBUG_NO_BARRIER": _no_barrier,
                                                          "GPUBUG_DOUBLE_COUNT": _double_count}


def make_gpu_bug(name: str) -> DeviceImpl:
  from refgrad_opencl import make_device
  return dataclasses.replace(GPU_BUGS[name](make_device()), name=name)


def opencl_probe() -> str | None:
  try:
    from refgrad_opencl import probe
  except ImportError:
    return "refgrad-opencl is not installed"
  return probe()


# ---- a threading bug of a CPU backend: the real CLANG device, its threaded kernels launched wrong
@dataclasses.dataclass(frozen=True)
class _RangesFromZero(Program):
  """Every thread runs as many rows as its range has, but from row 0 (its range's start is lost at the launch):
  the threads write the same first rows of the output, and its last rows are never written."""

  def thread_ranges(self) -> list[tuple[int, int]]:
    return [(0, end - start) for start, end in super().thread_ranges()]


class _OverlappingThreads:
  def __init__(self, runtime):
    self.runtime = runtime

  def load(self, binary: bytes, program: Program):
    fields = {f.name: getattr(program, f.name) for f in dataclasses.fields(program)}
    return self.runtime.load(binary, _RangesFromZero(**fields))


def make_thread_bug(name: str) -> DeviceImpl:
  from refgrad_clang import make_device
  clang = make_device()
  return dataclasses.replace(clang, name=name, runtime=_OverlappingThreads(clang.runtime))


def clang_probe() -> str | None:
  try:
    from refgrad_clang import probe
  except ImportError:
    return "refgrad-clang is not installed"
  return probe()


THREAD_BUGS = {"OPTBUG_THREADS_OVERLAP": make_thread_bug}


# ---- transfers between a device's instances that lose or double data (a sharded program's copies and all-reduces)
def _index(device: str) -> int:
  return int(device.partition(":")[2] or 0)


def _drop_last_shard(dest, src) -> None:
  """A copy from another instance of the device that never arrives when it comes from any instance but the first:
  a gather over two devices drops the last shard (the destination keeps whatever it held)."""
  if _index(src.device) == 0 or src.device.partition(":")[0] != dest.device.partition(":")[0]:
    dest.copyin(src.numpy())


def _double_count_first(op, dest, partials) -> None:
  """An all-reduce of sums that counts the first device's partial twice (a max of it twice would not show)."""
  counted = [partials[0], *partials] if op is Ops.ADD else partials
  dest.copyin(exec_reduce(op, dest.dtype, np.stack([p.numpy() for p in counted]), 0).reshape(-1))


MULTI_BUGS = {"MULTIBUG_COPY_DROPS_LAST": {"transfer": _drop_last_shard},
              "MULTIBUG_ALLREDUCE_DOUBLE": {"allreduce": _double_count_first}}


def make_multi_bug(name: str) -> DeviceImpl:
  return DeviceImpl(name, PythonAllocator(), interpret=PythonKernel, **MULTI_BUGS[name])


# ---- a kernel compiled for a Variable that runs with the Variable's largest value instead of the bound one
def _uses_max(program: Program):
  kernel = PythonKernel(program)
  variables = kernel_variables(program.key)

  def run(*handles):
    if variables:
      largest = PythonAllocator().alloc(8 * len(variables))
      largest.data[:] = np.array([v.arg[2] for v in variables], np.int64).view(np.uint8)
      handles = (*handles[:-1], largest)
    kernel(*handles)
  return run


VARIABLE_BUGS = {"VARBUG_USES_MAX": _uses_max}


def make_variable_bug(name: str) -> DeviceImpl:
  return DeviceImpl(name, PythonAllocator(), interpret=VARIABLE_BUGS[name])


# ---- devices that take the whole process down, for the fuzzer's worker isolation (never run them in-process)
def _crash_on_max(program: Program):
  import ctypes
  kernel = PythonKernel(program)

  def run(*handles):
    if any(u.op is Ops.MAX for u in program.uops):
      ctypes.string_at(0)  # a segfault, as a buggy native backend would
    kernel(*handles)
  return run


def _hang_on_max(program: Program):
  import time
  kernel = PythonKernel(program)

  def run(*handles):
    while any(u.op is Ops.MAX for u in program.uops):
      time.sleep(1)
    kernel(*handles)
  return run


STARVED_SECONDS = 4.5


def _starve_on_max(program: Program):
  """Right, but a kernel with a MAX op first runs STARVED_SECONDS at about a sixth of a core (a worker starved by a
  loaded machine), then computes."""
  import time
  kernel = PythonKernel(program)

  def run(*handles):
    end = time.monotonic() + STARVED_SECONDS
    while any(u.op is Ops.MAX for u in program.uops) and time.monotonic() < end:
      spin_until = time.monotonic() + 0.02
      while time.monotonic() < spin_until:
        pass
      time.sleep(0.1)
    kernel(*handles)
  return run


HANG_ALL_VARIABLE = "REFGRAD_TEST_HANG_ALL"


def _hang_always(program: Program):
  """Every kernel sleeps for ever while HANG_ALL_VARIABLE is 1 (a campaign's time limit must stop it; the test sets
  it, and the campaign's worker processes inherit it); else it computes right, so that a command running every
  available device (`refgrad demo` in test_oracle_kit) does not hang."""
  import os
  import time
  kernel = PythonKernel(program)

  def run(*handles):
    while os.environ.get(HANG_ALL_VARIABLE) == "1":
      time.sleep(1)
    kernel(*handles)
  return run


FATAL = {"CRASHY_SEGFAULT": _crash_on_max, "CRASHY_HANG": _hang_on_max, "CRASHY_STARVED": _starve_on_max,
         "CRASHY_HANG_ALL": _hang_always}


# ---- a correct device that claims only some dtypes: the kit must draw nothing else
NARROW_DTYPES = frozenset(ALL_DTYPES.values()) - {dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.uint64}


class ListingRenderer:
  """Renders a program as its listing and claims `claimed` dtypes; the runtime interprets the program itself."""

  def __init__(self, claimed: frozenset):
    self.caps = Capabilities(dtypes=claimed)

  def render(self, program: Program) -> str:
    return program.listing()


class ListingCompiler:
  cache_key = "tests-listing"

  def compile(self, source: str) -> bytes:
    return source.encode()


class InterpretingRuntime:
  def load(self, binary: bytes, program: Program) -> PythonKernel:
    return PythonKernel(program)


def make_narrow() -> DeviceImpl:
  return DeviceImpl("NARROW", PythonAllocator(), renderer=ListingRenderer(NARROW_DTYPES), compiler=ListingCompiler(),
                    runtime=InterpretingRuntime())


# ---- compiled devices whose compiler takes batches (DeviceImpl.prepare compiles a batch's kernels at once): a correct
# one, and some whose compiler fails on kernels with a MAX op (it raises, crashes the process or hangs) or whose
# runtime runs them wrong
def _raise(source: str) -> None:
  raise RuntimeError("error: this compiler cannot take MAX")


def _segfault(source: str) -> None:
  import ctypes
  ctypes.string_at(0)


def _hang(source: str) -> None:
  import time
  while True:
    time.sleep(1)


COMPILER_FAULTS: dict[str, Callable[[str], None] | None] = {
  "BATCHED": None, "BATCHED_COMPILE_ERROR": _raise, "BATCHED_COMPILE_CRASH": _segfault, "BATCHED_COMPILE_HANG": _hang}


class BatchingCompiler:
  """Listings as binaries, one kernel or a batch at a time; `fault` is what it does with a kernel that has a MAX op.
  What this process compiled: `batches` (each batch's size) and `singles` (kernels compiled alone). One that never
  fails may say it is `isolated` (a compiler that cannot crash its caller): a fuzz campaign then compiles its next
  batch while one runs, as on LLVM."""

  def __init__(self, name: str, fault: Callable[[str], None] | None):
    self.cache_key, self.fault, self.batches, self.singles = f"tests-{name}", fault, [], 0
    self.isolated = fault is None

  def compile(self, source: str) -> bytes:
    self.singles += 1
    return self._build(source)

  def compile_batch(self, sources: list[str]) -> list[bytes]:
    self.batches.append(len(sources))
    return [self._build(source) for source in sources]

  def _build(self, source: str) -> bytes:
    if self.fault is not None and " MAX:" in source:
      self.fault(source)
    return source.encode()


class HangingRenderer(ListingRenderer):
  """Hangs rendering a kernel with a MAX op: a fuzz worker on its device (whose compiler is isolated) first meets it
  planning the next batch while this one runs."""

  def render(self, program: Program) -> str:
    source = super().render(program)
    if " MAX:" in source:
      _hang(source)
    return source


class BrokenRuntime:
  def load(self, binary: bytes, program: Program) -> PythonKernel:
    return PythonKernel(rewrite_program(program, BUGS["BROKEN_CMPLT"]))


def make_batching(name: str) -> DeviceImpl:
  compiler = BatchingCompiler(name, COMPILER_FAULTS.get(name))
  runtime = BrokenRuntime() if name == "BATCHED_CMPLT" else InterpretingRuntime()
  renderer = (HangingRenderer if name == "BATCHED_RENDER_HANG" else ListingRenderer)(frozenset(ALL_DTYPES.values()))
  return DeviceImpl(name, PythonAllocator(), renderer=renderer, compiler=compiler, runtime=runtime)


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  specs = [DeviceSpec(name, lambda name=name: make_broken(name), plugin="tests.broken_devices")
           for name in (*BUGS, *BLIND_SPOTS)]
  specs += [DeviceSpec("NARROW", make_narrow, plugin="tests.broken_devices")]
  specs += [DeviceSpec(name, lambda name=name: make_batching(name), plugin="tests.broken_devices")
            for name in (*COMPILER_FAULTS, "BATCHED_CMPLT", "BATCHED_RENDER_HANG")]
  specs += [DeviceSpec(name, lambda name=name: make_opt_bug(name), plugin="tests.broken_devices")
            for name in (*OPT_BUGS, *OPT_BUGS_BY_ROW)]
  specs += [DeviceSpec(name, lambda name=name: make_gpu_bug(name), plugin="tests.broken_devices", probe=opencl_probe)
            for name in GPU_BUGS]
  specs += [DeviceSpec(name, lambda name=name: make_thread_bug(name), plugin="tests.broken_devices",
                       probe=clang_probe) for name in THREAD_BUGS]
  specs += [DeviceSpec(name, lambda name=name: make_multi_bug(name), plugin="tests.broken_devices")
            for name in MULTI_BUGS]
  specs += [DeviceSpec(name, lambda name=name: make_variable_bug(name), plugin="tests.broken_devices")
            for name in VARIABLE_BUGS]
  return specs + [DeviceSpec(name, lambda name=name: make_fatal(name), plugin="tests.broken_devices") for name in FATAL]


def make_fatal(name: str) -> DeviceImpl:
  return DeviceImpl(name, PythonAllocator(), interpret=FATAL[name])


@contextlib.contextmanager
def registered() -> Iterator[None]:
  """These devices registered for the duration; left as they are if a test module already registered them."""
  from refgrad import Device, plugin_loader
  fresh = "BROKEN_CMPLT" not in Device.available()
  if fresh:
    plugin_loader.register(sys.modules[__name__], name="tests.broken_devices")
  try:
    yield
  finally:
    if fresh:
      plugin_loader.unregister(sys.modules[__name__])
