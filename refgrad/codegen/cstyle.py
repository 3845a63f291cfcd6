"""A C-style renderer: linear `Program` -> C-like source, specialised per backend by a small `CDialect`.

Every value becomes one `const` local; loops become `for` loops. What each op means comes from docs/SPEC.md;
the `C_RULES` table ({op: rule}, over codegen/walker.py's walker) says how each op is written so that C gives
exactly that meaning:
integer + * and negation wrap (computed in an unsigned type), division and shifts are guarded where C would
trap or be undefined, MAX propagates NaN, and half/bfloat16 are emulated (see cstyle_prelude.py).
Backend authors subclass nothing: they fill in a `CDialect`. A CPU dialect runs the threads as nested loops; a GPU
dialect (OpenCL) reads each work-item's indices and renders GPU-shaped programs (codegen/gpu.py): local memory
arrays, barriers and gated stores.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from refgrad.alu import reduce_identity
from refgrad.codegen.contract import Capabilities, Program
from refgrad.codegen.cstyle_prelude import DOUBLE_PRELUDE, PRELUDE, WIDE_INT_PRELUDE
from refgrad.codegen.walker import ProgramWalker, Rule, code_paths, pieces
from refgrad.dtype import EMULATED_16BIT, ODD_HELPER, DType, dtypes, round_to_odd_source
from refgrad.uop import Ops, UOp

THREAD_INDEX_NAMES = {Ops.SPECIAL: "gidx", Ops.LOCAL_INDEX: "lidx", Ops.GROUP_INDEX: "gridx"}
UNSIGNED_OF_WIDTH = {8: dtypes.uint8, 16: dtypes.uint16, 32: dtypes.uint32, 64: dtypes.uint64}

C_TYPES = {
  dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
  dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
  dtypes.uint64: "uint64_t", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
  dtypes.float64: "double",
}
C_STORAGE = {**C_TYPES, dtypes.bool: "uint8_t", dtypes.float16: "uint16_t", dtypes.bfloat16: "uint16_t"}
# a float's prelude helpers to its bits (an unsigned int of its width) and back; half and bfloat16 values are floats
FLOAT_BITS: dict[DType, tuple[str, str]] = {
  dtypes.float32: ("rg_f32_bits", "rg_bits_f32"), dtypes.float64: ("rg_f64_bits", "rg_bits_f64"),
  **{dt: (f"rg_f32_to_{name}", f"rg_{name}_to_f32") for dt, name in EMULATED_16BIT.items()},
}

C_HEADER = """#include <stdint.h>
#include <string.h>
#include <math.h>
typedef uint16_t ushort_t;
#define RG_FN static inline
RG_FN uint32_t rg_f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
RG_FN float rg_bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
RG_FN uint64_t rg_f64_bits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
RG_FN double rg_bits_f64(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
"""


@dataclass(frozen=True)
class CDialect:
  """What differs between C-like languages. The defaults are plain C99 for a CPU."""
  header: str = C_HEADER
  kernel_prefix: str = ""                  # e.g. "__kernel "
  buffer_prefix: str = ""                  # e.g. "__global "
  types: dict[DType, str] = field(default_factory=lambda: dict(C_TYPES))      # how values are held
  storage: dict[DType, str] = field(default_factory=lambda: dict(C_STORAGE))  # how buffers hold them
  # None: a CPU runs the threads as nested loops. Else, per index op, how a work-item reads it on grid axis {}:
  # e.g. {Ops.SPECIAL: "get_global_id({})", Ops.LOCAL_INDEX: "get_local_id({})", Ops.GROUP_INDEX: ...}
  thread_index: dict[Ops, str] | None = None
  local_prefix: str = ""   # e.g. "__local ": declares work-group local memory
  barrier: str = ""        # e.g. "barrier(CLK_LOCAL_MEM_FENCE);": waits for the group's local stores
  float_math: dict[str, str] = field(default_factory=lambda: {
    "sqrt": "sqrtf", "exp2": "exp2f", "log2": "log2f", "sin": "sinf", "trunc": "truncf", "fabs": "fabsf",
    "fmod": "fmodf"})
  double_math: dict[str, str] = field(default_factory=lambda: {
    "sqrt": "sqrt", "exp2": "exp2", "log2": "log2", "sin": "sin", "trunc": "trunc", "fabs": "fabs",
    "fmod": "fmod"})
  reduce_lanes: int = 8  # independent accumulators per innermost reduce loop (1: one sequential accumulator)
  caps: Capabilities = Capabilities()


def c_literal(value: object, dtype: DType, d: CDialect) -> str:
  """An exact C literal of `dtype`'s compute type."""
  if dtype == dtypes.bool:
    return "1" if value else "0"
  ctype = d.types[dtype]
  if dtypes.is_int(dtype):
    if dtype.bits == 64:
      if value == -(1 << 63):
        return f"({ctype})(-9223372036854775807LL - 1)"
      return f"({ctype}){value}{'ULL' if dtypes.is_unsigned(dtype) else 'LL'}"
    if value == dtypes.min(dtype) and value < 0:
      return f"({ctype})({value + 1} - 1)"
    return f"({ctype}){value}{'u' if dtypes.is_unsigned(dtype) else ''}"
  suffix = "f" if ctype == "float" else ""
  if math.isnan(value):
    return f"({ctype})NAN"
  if math.isinf(value):
    return f"({'-' if value < 0 else ''}({ctype})INFINITY)"
  return f"{float(value).hex()}{suffix}"


class CStyleRenderer:
  """Renders programs for one dialect. `render(program)` returns the whole translation unit."""

  def __init__(self, dialect: CDialect):
    self.d = dialect
    self.caps = dialect.caps

  def render(self, program: Program) -> str:
    return _Render(self.d, program).source()

  def code_paths(self, program: Program) -> list[str]:
    """Which special cases of this renderer `program` takes (for `refgrad check`'s coverage report)."""
    return code_paths(program, self.d.reduce_lanes)


class _Render(ProgramWalker):
  """One program being rendered to C: its lines so far and the C name of each value. C_RULES renders each op."""

  def __init__(self, dialect: CDialect, program: Program):
    super().__init__(program)
    self.d = dialect
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.depth = 1
    self.suffix = ""  # appended to value names while a loop body is rendered once per accumulator lane

  # ---- names and types
  def name(self, u: UOp) -> str:
    return self.names[u]

  operand = name

  def bind(self, i: int, u: UOp, value: str) -> None:
    """A value is a `const` local named after its position in the program (and lane)."""
    self.names[u] = f"v{i}{self.suffix}"
    self.emit(f"const {self.ctype(u.dtype)} {self.names[u]} = {value};")

  def ctype(self, dt: DType) -> str:
    return self.d.types[dt]

  def emit(self, line: str) -> None:
    self.lines.append("  " * self.depth + line)

  def math(self, fn: str, dt: DType) -> str:
    return (self.d.double_math if dt == dtypes.float64 else self.d.float_math)[fn]

  def round16(self, expr: str, dt: DType) -> str:
    """Round a float result to half/bfloat16 (a no-op wrapper for every other dtype)."""
    return f"rg_round_{EMULATED_16BIT[dt]}({expr})" if dt in EMULATED_16BIT else expr

  # ---- the program
  def source(self) -> str:
    params = ", ".join(f"{self.d.buffer_prefix}{self.d.storage[p.dtype]}* data{p.arg[0]}"
                       for p in self.program.params)
    if self.threaded:  # the THREAD opt: this call runs the outermost thread axis from thread_start to thread_end
      params += f", {self.ctype(dtypes.int64)} thread_start, {self.ctype(dtypes.int64)} thread_end"
    self.names.update({p: f"data{p.arg[0]}" for p in self.program.params})
    if self.d.thread_index is None:
      self.open_thread_loops()
    self.walk(pieces(self.program, 0, len(self.program.uops), self.d.reduce_lanes))
    self.close_thread_loops()
    uses_double = any(u.dtype == dtypes.float64 or any(s.dtype == dtypes.float64 for s in u.src)
                      for u in self.program.uops)
    prelude = self.d.header + PRELUDE + (DOUBLE_PRELUDE if uses_double else "") + WIDE_INT_PRELUDE
    body = "\n".join(self.lines)
    return f"{prelude}\n{self.d.kernel_prefix}void {self.program.name}({params}) {{\n{body}\n}}\n"

  @property
  def threaded(self) -> bool:
    return self.d.thread_index is None and self.program.threads > 1

  def open_thread_loops(self) -> None:
    index, outermost = self.ctype(dtypes.int64), self.threaded
    for axis, size in enumerate(self.program.global_shape):
      if size > 1:
        start, stop = ("thread_start", "thread_end") if outermost else ("0", size)
        self.emit(f"for ({index} gidx{axis} = {start}; gidx{axis} < {stop}; gidx{axis}++) {{")
        self.depth += 1
        outermost = False

  def close_thread_loops(self) -> None:
    while self.depth > 1:
      self.depth -= 1
      self.emit("}")

  # ---- reductions with several accumulators
  def split_reduce(self, start: int, end: int) -> None:
    """The order of a reduction is free (SPEC.md), so run `lanes` independent accumulators, which a compiler
    can keep in one vector register, and combine them at the end. Lane 0 also runs the leftover iterations."""
    uops, lanes = self.program.uops, self.d.reduce_lanes
    rng, size = uops[start], uops[start].arg[1]
    acc = next(u for u in uops[start + 1:end] if u.op is Ops.ACCUMULATE).src[0]
    base, acc_name = f"ridx{rng.arg[0]}", self.name(acc)
    identity = c_literal(reduce_identity(acc.arg[1], acc.dtype), acc.dtype, self.d)
    self.emit(f"{self.ctype(acc.dtype)} {', '.join(f'{acc_name}_{lane} = {identity}' for lane in range(1, lanes))};")
    index = self.ctype(dtypes.int64)
    self.emit(f"for ({index} {base}_base = 0; {base}_base < {size - size % lanes}; {base}_base += {lanes}) {{")
    self.depth += 1
    for lane in range(lanes):
      self.render_lane(start, end, lane, f"{base}_base + {lane}")
    self.depth -= 1
    self.emit("}")
    if size % lanes:
      self.emit(f"for ({index} {base}_rest = {size - size % lanes}; {base}_rest < {size}; {base}_rest++) {{")
      self.depth += 1
      self.render_lane(start, end, 0, f"{base}_rest")
      self.depth -= 1
      self.emit("}")
    for lane in range(1, lanes):
      self.emit(f"{acc_name} = {self.apply(acc.arg[1], acc.dtype, acc_name, f'{acc_name}_{lane}')};")
    self.names[acc] = acc_name

  def render_lane(self, start: int, end: int, lane: int, index: str) -> None:
    uops = self.program.uops
    rng, acc_name = uops[start], self.name(next(u for u in uops[start + 1:end] if u.op is Ops.ACCUMULATE).src[0])
    self.names[rng] = f"ridx{rng.arg[0]}_{lane}"
    self.emit(f"const {self.ctype(dtypes.int64)} ridx{rng.arg[0]}_{lane} = {index};")
    self.suffix = f"_{lane}"
    target = acc_name if lane == 0 else f"{acc_name}_{lane}"

    def accumulate(i: int, u: UOp) -> None:
      self.emit(f"{target} = {self.apply(u.src[0].arg[1], u.src[0].dtype, target, self.name(u.src[1]))};")
    self.walk_body(start, end, accumulate)
    self.suffix = ""

  def from_storage(self, expr: str, dt: DType) -> str:
    if dt in EMULATED_16BIT:
      return f"rg_{EMULATED_16BIT[dt]}_to_f32({expr})"
    return f"({expr} != 0)" if dt == dtypes.bool else expr

  def to_storage(self, expr: str, dt: DType) -> str:
    if dt in EMULATED_16BIT:
      return f"rg_f32_to_{EMULATED_16BIT[dt]}({expr})"
    return f"({self.d.storage[dt]})({expr})" if dt == dtypes.bool else expr

  def unsigned_of(self, dt: DType) -> str:
    return self.d.types[dtypes.uint64 if dt.bits == 64 else dtypes.uint32]

  # ---- conversions
  def cast(self, a: str, src: DType, dst: DType) -> str:
    return CAST_RULES[dst.kind](self, a, src, dst)

  def bitcast(self, a: str, src: DType, dst: DType) -> str:
    """Through the bits as an unsigned integer of the width: a float's helpers (FLOAT_BITS) read and make them, an
    integer converts to and from the unsigned type."""
    unsigned = self.d.types[UNSIGNED_OF_WIDTH[src.bits]]
    bits = f"{FLOAT_BITS[src][0]}({a})" if src in FLOAT_BITS else f"({unsigned})({a})"
    return f"{FLOAT_BITS[dst][1]}(({unsigned})({bits}))" if dst in FLOAT_BITS else f"({self.ctype(dst)})({bits})"


# ---- statements: they write their own lines and have no value (or, like an index, name it themselves)
def _parameter(r: _Render, u: UOp) -> None:
  """A buffer is a parameter of the function, named before the walk (data0, data1, ...)."""


def _thread_index(r: _Render, u: UOp) -> None:
  """A CPU dialect's thread loops already named gidx0, gidx1...; a GPU dialect asks the work-item."""
  axis = u.arg[0]
  r.names[u] = f"{THREAD_INDEX_NAMES[u.op]}{axis}"
  if r.d.thread_index is not None:
    r.emit(f"const {r.ctype(dtypes.int64)} {r.names[u]} = {r.d.thread_index[u.op].format(axis)};")
  elif u.op is not Ops.SPECIAL:
    raise NotImplementedError(f"a dialect without thread_index has no {u.op.name}")


def _open_loop(r: _Render, u: UOp) -> None:
  r.names[u] = f"ridx{u.arg[0]}"
  index = r.ctype(dtypes.int64)
  r.emit(f"for ({index} ridx{u.arg[0]} = 0; ridx{u.arg[0]} < {u.arg[1]}; ridx{u.arg[0]}++) {{")
  r.depth += 1


def _close_loop(r: _Render, u: UOp) -> None:
  r.depth -= 1
  r.emit("}")


def _local_array(r: _Render, u: UOp) -> None:
  r.names[u] = f"local{u.arg[0]}"
  r.emit(f"{r.d.local_prefix}{r.d.storage[u.dtype]} local{u.arg[0]}[{u.arg[1]}];")


def _barrier(r: _Render, u: UOp) -> None:
  """A barrier's value is the local array it guards: reads after it use the array."""
  r.names[u] = r.name(u.src[0])
  r.emit(r.d.barrier)


def _store(r: _Render, u: UOp) -> None:
  param, index, value = u.src[:3]
  gate = f"if ({r.name(u.src[3])}) " if len(u.src) > 3 else ""
  r.emit(f"{gate}{r.name(param)}[{r.name(index)}] = {r.to_storage(r.name(value), value.dtype)};")


def _accumulator(r: _Render, u: UOp) -> None:
  r.names[u] = f"acc{u.arg[0]}"
  identity = reduce_identity(u.arg[1], u.dtype)
  r.emit(f"{r.ctype(u.dtype)} acc{u.arg[0]} = {c_literal(identity, u.dtype, r.d)};")


def _accumulate(r: _Render, u: UOp) -> None:
  acc, value = u.src
  r.emit(f"{r.name(acc)} = {r.apply(acc.arg[1], acc.dtype, r.name(acc), r.name(value))};")


# ---- values that are not ALU ops: they get the uop
def _constant(r: _Render, u: UOp) -> str:
  return c_literal(u.arg, u.dtype, r.d)


def _load(r: _Render, u: UOp) -> str:
  """LOAD(param, index[, valid]): a gated load reads nothing where valid is false and gives 0."""
  param, index = u.src[0], u.src[1]
  load = r.from_storage(f"{r.name(param)}[{r.name(index)}]", u.dtype)
  return f"({r.name(u.src[2])} ? {load} : {c_literal(0, u.dtype, r.d)})" if len(u.src) > 2 else load


def _cast(r: _Render, u: UOp) -> str:
  return r.cast(r.name(u.src[0]), u.src[0].dtype, u.dtype)


def _bitcast(r: _Render, u: UOp) -> str:
  return r.bitcast(r.name(u.src[0]), u.src[0].dtype, u.dtype)


# ---- casts: one rule per kind of target (b bool, i signed, u unsigned, f float)
def _to_bool(r: _Render, a: str, src: DType, dst: DType) -> str:
  return f"({a} != 0)"


def _c_conversion(r: _Render, a: str, src: DType, dst: DType) -> str:
  """C's own conversion, which the spec's casts are (out-of-range float -> int is UNDEFINED in both)."""
  return f"({r.ctype(dst)})({a})"


def _to_float(r: _Render, a: str, src: DType, dst: DType) -> str:
  """float and double by C's conversion; half and bfloat16 from a float that rounds to the right 16-bit value
  (rounded to odd first where float cannot hold the source exactly), rounded once."""
  if dst in (dtypes.float32, dtypes.float64):
    return _c_conversion(r, a, src, dst)
  wide = round_to_odd_source(src, dst)
  if wide is None:
    return r.round16(f"(float)({a})", dst)
  return r.round16(f"rg_{ODD_HELPER[wide]}_to_f32_odd(({r.ctype(wide)})({a}))", dst)


CAST_RULES: dict[str, Callable[[_Render, str, DType, DType], str]] = {
  "b": _to_bool, "i": _c_conversion, "u": _c_conversion, "f": _to_float,
}


# ---- ALU ops: they get the operand dtype and the operands' C expressions
def _negate(r: _Render, dt: DType, a: str) -> str:
  """Integers negate in their unsigned type, so -MIN wraps to MIN instead of overflowing."""
  if dtypes.is_int(dt):
    return f"({r.ctype(dt)})(0u - ({r.unsigned_of(dt)}){a})"
  return r.round16(f"(-{a})", dt)


def _reciprocal(r: _Render, dt: DType, a: str) -> str:
  one = c_literal(1.0, dtypes.float64 if dt == dtypes.float64 else dtypes.float32, r.d)
  return r.round16(f"({one} / {a})", dt)


def _libm(fn: str) -> Callable[[_Render, DType, str], str]:
  """A math library call (the dialect names it), rounded to half/bfloat16."""
  def render(r: _Render, dt: DType, a: str) -> str:
    return r.round16(f"{r.math(fn, dt)}({a})", dt)
  return render


def _select(r: _Render, dt: DType, c: str, a: str, b: str) -> str:
  return f"({c} ? {a} : {b})"


def _wrapping(symbol: str) -> Callable[[_Render, DType, str, str], str]:
  """+ and * : floats directly (rounded for half/bfloat16), ints in an unsigned type so they wrap."""
  def render(r: _Render, dt: DType, a: str, b: str) -> str:
    if dt == dtypes.bool:
      return f"({a} {'|' if symbol == '+' else '&'} {b})"
    if dtypes.is_int(dt):
      u = r.unsigned_of(dt)
      return f"({r.ctype(dt)})(({u}){a} {symbol} ({u}){b})"
    return r.round16(f"({a} {symbol} {b})", dt)
  return render


def _division(symbol: str) -> Callable[[_Render, DType, str, str], str]:
  """Integer / and %: C truncates like the spec; the undefined cases are guarded so they cannot trap."""
  def render(r: _Render, dt: DType, a: str, b: str) -> str:
    guard = f"{b} == 0"
    if not dtypes.is_unsigned(dt):
      guard += f" || ({a} == {c_literal(dtypes.min(dt), dt, r.d)} && {b} == -1)"
    return f"(({guard}) ? {c_literal(0, dt, r.d)} : ({r.ctype(dt)})({a} {symbol} {b}))"
  return render


def _remainder(r: _Render, dt: DType, a: str, b: str) -> str:
  """MOD: C's % on ints (guarded); fmod on floats, which is exact, so half/bfloat16 results need no rounding."""
  if dtypes.is_float(dt):
    return f"{r.math('fmod', dt)}({a}, {b})"
  return _division("%")(r, dt, a, b)


def _shift(symbol: str) -> Callable[[_Render, DType, str, str], str]:
  """Shifts by less than 0 or at least the width are undefined: guarded to 0. << wraps (unsigned)."""
  def render(r: _Render, dt: DType, a: str, b: str) -> str:
    guard = f"{b} >= {dt.bits}" + ("" if dtypes.is_unsigned(dt) else f" || {b} < 0")
    value = f"({r.unsigned_of(dt)}){a} << {b}" if symbol == "<<" else f"{a} >> {b}"
    return f"(({guard}) ? {c_literal(0, dt, r.d)} : ({r.ctype(dt)})({value}))"
  return render


def _maximum(r: _Render, dt: DType, a: str, b: str) -> str:
  if dt == dtypes.bool:
    return f"({a} | {b})"
  if dtypes.is_int(dt):
    return f"({a} > {b} ? {a} : {b})"
  return f"rg_max_{'f64' if dt == dtypes.float64 else 'f32'}({a}, {b})"


def _plain(symbol: str, result: DType | None = None) -> Callable[[_Render, DType, str, str], str]:
  def render(r: _Render, dt: DType, a: str, b: str) -> str:
    out = result or dt
    return f"({r.ctype(out)})({a} {symbol} {b})" if out == dtypes.bool or dtypes.is_int(out) else \
      r.round16(f"({a} {symbol} {b})", out)
  return render


# How each op is written in C: the one table the walker (codegen/walker.py) renders every uop through.
C_RULES: dict[Ops, Rule] = {
  Ops.PARAM: _parameter, Ops.SPECIAL: _thread_index, Ops.LOCAL_INDEX: _thread_index, Ops.GROUP_INDEX: _thread_index,
  Ops.RANGE: _open_loop, Ops.ENDRANGE: _close_loop, Ops.DEFINE_LOCAL: _local_array, Ops.BARRIER: _barrier,
  Ops.STORE: _store, Ops.DEFINE_ACC: _accumulator, Ops.ACCUMULATE: _accumulate,
  Ops.CONST: _constant, Ops.LOAD: _load, Ops.CAST: _cast, Ops.BITCAST: _bitcast,
  Ops.NEG: _negate, Ops.RECIP: _reciprocal, Ops.SQRT: _libm("sqrt"), Ops.EXP2: _libm("exp2"),
  Ops.LOG2: _libm("log2"), Ops.SIN: _libm("sin"), Ops.TRUNC: _libm("trunc"),
  Ops.ADD: _wrapping("+"), Ops.MUL: _wrapping("*"), Ops.FDIV: _plain("/"),
  Ops.IDIV: _division("/"), Ops.MOD: _remainder, Ops.MAX: _maximum,
  Ops.CMPLT: _plain("<", dtypes.bool), Ops.CMPNE: _plain("!=", dtypes.bool),
  Ops.AND: _plain("&"), Ops.OR: _plain("|"), Ops.XOR: _plain("^"),
  Ops.SHL: _shift("<<"), Ops.SHR: _shift(">>"),
  Ops.WHERE: _select,
}
_Render.rules = C_RULES
