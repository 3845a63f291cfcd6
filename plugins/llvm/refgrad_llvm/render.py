"""LLVM IR renderer: a linear `Program` becomes one LLVM IR function `void @name(ptr %data0, ptr %data1, ...)`.

Threads and `RANGE`s become counted loops, accumulators are `alloca`s (the optimizer promotes them to
registers), every other value is one SSA name. One table, `LLVM_RULES` ({op: rule}, over the core's program
walker: refgrad/codegen/walker.py), says how each op is written; its rules keep docs/SPEC.md:

- no fast-math flags anywhere, so float ops are IEEE and nothing is contracted into FMAs;
- plain `add`/`mul`/`sub` (no `nsw`/`nuw`) wrap like the spec's integers;
- comparisons use `fcmp olt` (false on NaN) and `fcmp une` (true on NaN);
- division by zero and MIN / -1 are sent to a divisor of 1, shift amounts are masked to the width, and float to
  int conversions are `freeze`d: the spec's UNDEFINED lanes get some value, never LLVM poison or a trap;
- MAX is `llvm.maximum` (NaN wins, +0.0 beats -0.0), the IEEE 754-2019 operation the spec asks for;
- half and bfloat16 are computed in float and rounded once per op (see prelude.py).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from refgrad.alu import reduce_identity
from refgrad.codegen.contract import Capabilities, Program
from refgrad.codegen.walker import ProgramWalker, Rule, code_paths, pieces
from refgrad.dtype import EMULATED_16BIT, ODD_HELPER, DType, dtypes, round_to_odd_source
from refgrad.uop import Ops, UOp
from refgrad_llvm.prelude import needed_helpers

LL_TYPES: dict[DType, str] = {
  dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
  dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64",
  dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double",
}
STORAGE_TYPES: dict[DType, str] = {**LL_TYPES, dtypes.bool: "i8", dtypes.float16: "i16", dtypes.bfloat16: "i16"}
REDUCE_LANES = 8  # independent accumulators per innermost reduce loop: the order of a reduction is free (SPEC.md)


def ll_type(dt: DType) -> str:
  return LL_TYPES[dt]


def suffix(ll: str) -> str:
  """The overload suffix of an intrinsic: llvm.sqrt.f32, llvm.smax.i16."""
  return {"float": "f32", "double": "f64"}.get(ll, ll)


def literal(value: object, dt: DType) -> str:
  """An exact LLVM constant of dt's compute type."""
  if dt == dtypes.bool:
    return "true" if value else "false"
  if dtypes.is_int(dt):
    v = int(value) % (1 << dt.bits)
    return str(v - (1 << dt.bits) if v >= 1 << (dt.bits - 1) else v)
  exact = float(np.array(value, dtype=dt.np).astype(np.float64))  # the dtype's value, exact in its compute type
  return f"0x{struct.unpack('<Q', struct.pack('<d', exact))[0]:016X}"  # LLVM's hex form is always a double's bits


class LLVMRenderer:
  """Renders a `Program` to the text of one LLVM module."""
  # AVX2: 8 floats per vector register; every core for long kernels (refgrad/codegen/opt.py)
  caps = Capabilities(upcast_lanes=8, threads=os.cpu_count() or 1)

  def render(self, program: Program) -> str:
    return _Kernel(program).source()

  def code_paths(self, program: Program) -> list[str]:
    """Which special cases of this renderer `program` takes (for `refgrad check`'s coverage report)."""
    return code_paths(program, REDUCE_LANES)


# The lanes of a split reduction already are a vector. LLVM vectorizing their loop again cost 2-4 s of compile for
# one 8- or 16-bit integer kernel of a few outputs (VF 64 times 8 lanes; 0.1 s without) and made 64-bit reductions
# three times slower (int64 sum of 4096x4096 14.9 ms against 4.8, float64 max 14.7 against 4.9); float
# accumulators (float32, and half and bfloat16, computed in float) keep it: their code and times are as before
# (bench/split_reductions.py, figures in bench/README.md).
LOOP_VECTORIZED_ACCUMULATORS = {"float"}


@dataclass
class _Loop:
  number: int
  step: int

  @property
  def index(self) -> str:
    return f"%i{self.number}"

  @property
  def label(self) -> str:
    return f"loop{self.number}"


class _Kernel(ProgramWalker):
  """One program being rendered to LLVM IR: its instructions so far and the SSA name of each value."""

  def __init__(self, program: Program):
    super().__init__(program)
    self.values: dict[UOp, str] = {p: f"%data{p.arg[0]}" for p in program.params}
    self.acc_ptrs: dict[UOp, str] = {}
    self.open_ranges: dict[UOp, _Loop] = {}
    self.thread_index: dict[int, str] = {}
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.calls: set[str] = set()  # helper names and intrinsic declarations the body uses
    self.block, self.prefix, self.count, self.loops = "entry", "t", 0, 0
    self.unvectorized = 0  # loops closed with vectorize=False so far: their metadata is !1, !2, ...
    self.lane = ""  # appended to instruction names while a loop body is rendered once per accumulator lane

  # ---- emitting
  def emit(self, instruction: str) -> str:
    """Append `%name = instruction`; the name says which uop (and lane) it belongs to."""
    name = f"%{self.prefix}.{self.count}"
    self.count += 1
    self.lines.append(f"  {name} = {instruction}")
    return name

  def emit_void(self, instruction: str) -> None:
    self.lines.append(f"  {instruction}")

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def call(self, fn: str, ret: str, *args: tuple[str, str]) -> str:
    """Call a helper of prelude.py or an LLVM intrinsic (declared on first use)."""
    self.calls.add(f"declare {ret} @{fn}({', '.join(t for t, _ in args)})" if fn.startswith("llvm.") else fn)
    return self.emit(f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")

  def intrinsic(self, name: str, dt: DType, *operands: str) -> str:
    ll = ll_type(dt)
    return self.call(f"llvm.{name}.{suffix(ll)}", ll, *((ll, o) for o in operands))

  def round16(self, value: str, dt: DType) -> str:
    """Round a float result to half/bfloat16; other dtypes are already rounded by the instruction."""
    return self.call(f"rg_round_{EMULATED_16BIT[dt]}", "float", ("float", value)) if dt in EMULATED_16BIT else value

  def operand(self, u: UOp) -> str:
    """The value of u here: an accumulator is read from its slot at each use."""
    if u.op is Ops.DEFINE_ACC:
      return self.emit(f"load {ll_type(u.dtype)}, ptr {self.acc_ptrs[u]}")
    return self.values[u]

  def bind(self, i: int, u: UOp, value: str) -> None:
    self.values[u] = value

  def visit(self, i: int, u: UOp) -> None:
    self.prefix = f"v{i}{self.lane}"
    super().visit(i, u)

  # ---- loops: head (phi, test), body, latch (increment); LLVM rotates and vectorizes them
  def open_loop(self, start: str, stop: int | str, step: int = 1) -> _Loop:
    loop, pre = _Loop(self.loops, step), self.block
    self.loops += 1
    self.emit_void(f"br label %{loop.label}.head")
    self.label(f"{loop.label}.head")
    self.emit_void(f"{loop.index} = phi i64 [ {start}, %{pre} ], [ {loop.index}.next, %{loop.label}.latch ]")
    self.emit_void(f"{loop.index}.more = icmp slt i64 {loop.index}, {stop}")
    self.emit_void(f"br i1 {loop.index}.more, label %{loop.label}.body, label %{loop.label}.exit")
    self.label(f"{loop.label}.body")
    return loop

  def close_loop(self, loop: _Loop, vectorize: bool = True) -> None:
    """vectorize=False: the loop's latch carries llvm.loop metadata that keeps the loop vectorizer off it."""
    self.emit_void(f"br label %{loop.label}.latch")
    self.label(f"{loop.label}.latch")
    self.emit_void(f"{loop.index}.next = add nuw nsw i64 {loop.index}, {loop.step}")
    hint = ""
    if not vectorize:
      self.unvectorized += 1
      hint = f", !llvm.loop !{self.unvectorized}"
    self.emit_void(f"br label %{loop.label}.head{hint}")
    self.label(f"{loop.label}.exit")

  def new_slot(self, dt: DType, name: str, op: Ops) -> str:
    """An accumulator slot, set to the identity of reduce op `op` here."""
    self.allocas.append(f"  {name} = alloca {ll_type(dt)}")
    self.emit_void(f"store {ll_type(dt)} {literal(reduce_identity(op, dt), dt)}, ptr {name}")
    return name

  def accumulate(self, op: Ops, dt: DType, slot: str, value: str) -> None:
    current = self.emit(f"load {ll_type(dt)}, ptr {slot}")
    self.emit_void(f"store {ll_type(dt)} {self.apply(op, dt, current, value)}, ptr {slot}")

  # ---- the program
  def source(self) -> str:
    params = ", ".join(f"ptr {self.values[p]}" for p in self.program.params)
    threaded = self.program.threads > 1  # the THREAD opt: this call runs the outermost axis over [start, end)
    if threaded:
      params += ", i64 %thread_start, i64 %thread_end"
    if all(size > 0 for size in self.program.global_shape):  # an empty grid runs nothing
      axes = [(axis, size) for axis, size in enumerate(self.program.global_shape) if size > 1]
      threads = [self.open_thread(axis, size, threaded and i == 0) for i, (axis, size) in enumerate(axes)]
      self.walk(pieces(self.program, 0, len(self.program.uops), REDUCE_LANES))
      for loop in reversed(threads):
        self.close_loop(loop)
    helpers, declarations = needed_helpers(self.calls)
    body = "\n".join(["entry:", *self.allocas, *self.lines, "  ret void"])
    return "\n".join([f"; refgrad kernel {self.program.name}, global shape {self.program.global_shape}",
                      f"define void @{self.program.name}({params}) nounwind {{", body, "}", "", *helpers,
                      *sorted(declarations), *self.loop_metadata(), ""])

  def loop_metadata(self) -> list[str]:
    """!0 turns the loop vectorizer off; each unvectorized loop has a distinct node of its own that says so."""
    if not self.unvectorized:
      return []
    return ['!0 = !{!"llvm.loop.vectorize.enable", i1 false}',
            *(f"!{n} = distinct !{{!{n}, !0}}" for n in range(1, self.unvectorized + 1))]

  def open_thread(self, axis: int, size: int, ranged: bool = False) -> _Loop:
    loop = self.open_loop("%thread_start", "%thread_end") if ranged else self.open_loop("0", size)
    self.thread_index[axis] = loop.index
    return loop

  def split_reduce(self, start: int, end: int) -> None:
    """Run REDUCE_LANES independent accumulators (the SLP vectorizer packs them into one vector register) and
    combine them at the end; lane 0 also runs the leftover iterations. The loop vectorizer stays off the loop of
    the lanes unless its accumulators are in LOOP_VECTORIZED_ACCUMULATORS."""
    uops, lanes = self.program.uops, REDUCE_LANES
    size = uops[start].arg[1]
    acc = next(u for u in uops[start + 1:end] if u.op is Ops.ACCUMULATE).src[0]
    slots = [self.acc_ptrs[acc]] + [self.new_slot(acc.dtype, f"{self.acc_ptrs[acc]}.l{lane}", acc.arg[1])
                                    for lane in range(1, lanes)]
    main = size - size % lanes
    loop = self.open_loop("0", main, lanes)
    for lane in range(lanes):
      self.prefix = f"r{start}.l{lane}"
      index = self.emit(f"add nuw nsw i64 {loop.index}, {lane}") if lane else loop.index
      self.render_body(start, end, index, slots[lane], f"l{lane}")
    self.close_loop(loop, vectorize=ll_type(acc.dtype) in LOOP_VECTORIZED_ACCUMULATORS)
    if size % lanes:
      rest = self.open_loop(str(main), size)
      self.render_body(start, end, rest.index, slots[0], "rest")
      self.close_loop(rest)
    self.prefix = f"r{start}.sum"
    for slot in slots[1:]:
      self.accumulate(acc.arg[1], acc.dtype, slots[0], self.emit(f"load {ll_type(acc.dtype)}, ptr {slot}"))

  def render_body(self, start: int, end: int, index: str, slot: str, lane: str) -> None:
    self.values[self.program.uops[start]] = index
    self.lane = f".{lane}"

    def add_to_slot(i: int, u: UOp) -> None:
      self.prefix = f"v{i}{self.lane}"
      self.accumulate(u.src[0].arg[1], u.src[0].dtype, slot, self.operand(u.src[1]))
    self.walk_body(start, end, add_to_slot)
    self.lane = ""

  # ---- memory
  def address(self, param: UOp, index: str, index_dt: DType) -> str:
    return self.emit(f"getelementptr inbounds {STORAGE_TYPES[param.dtype]}, ptr {self.values[param]}, "
                     f"{ll_type(index_dt)} {index}")

  def load(self, u: UOp) -> str:
    """LOAD(param, index[, valid]): where valid is false nothing is read (index 0 is, harmlessly) and 0 results."""
    param, index = u.src[0], self.operand(u.src[1])
    zero = literal(0, u.dtype)
    if len(u.src) > 2:
      if param.arg[1] == 0:
        return zero  # an empty buffer: no lane can be valid
      valid = self.operand(u.src[2])
      index = self.emit(f"select i1 {valid}, {ll_type(u.src[1].dtype)} {index}, {ll_type(u.src[1].dtype)} 0")
    raw = self.emit(f"load {STORAGE_TYPES[u.dtype]}, ptr {self.address(param, index, u.src[1].dtype)}")
    value = self.from_storage(raw, u.dtype)
    return self.emit(f"select i1 {valid}, {ll_type(u.dtype)} {value}, {ll_type(u.dtype)} {zero}") \
      if len(u.src) > 2 else value

  def store(self, param: UOp, index: UOp, value: UOp, gate: UOp | None = None) -> None:
    """STORE(param, index, value[, gate]): a gated store branches around itself where the gate is false."""
    if gate is not None:
      block = f"store{self.count}"
      self.emit_void(f"br i1 {self.operand(gate)}, label %{block}.do, label %{block}.done")
      self.label(f"{block}.do")
    stored = self.to_storage(self.operand(value), value.dtype)
    address = self.address(param, self.operand(index), index.dtype)
    self.emit_void(f"store {STORAGE_TYPES[value.dtype]} {stored}, ptr {address}")
    if gate is not None:
      self.emit_void(f"br label %{block}.done")
      self.label(f"{block}.done")

  def from_storage(self, raw: str, dt: DType) -> str:
    if dt in EMULATED_16BIT:
      return self.call(f"rg_{EMULATED_16BIT[dt]}_to_f32", "float", ("i16", raw))
    return self.emit(f"icmp ne i8 {raw}, 0") if dt == dtypes.bool else raw

  def to_storage(self, value: str, dt: DType) -> str:
    if dt in EMULATED_16BIT:
      return self.call(f"rg_f32_to_{EMULATED_16BIT[dt]}", "i16", ("float", value))
    return self.emit(f"zext i1 {value} to i8") if dt == dtypes.bool else value

  # ---- values
  def bits(self, value: str, dt: DType) -> str:
    """The bit pattern of a value as an integer of its storage width."""
    if dt in EMULATED_16BIT:
      return self.call(f"rg_f32_to_{EMULATED_16BIT[dt]}", "i16", ("float", value))
    if dtypes.is_float(dt):
      return self.emit(f"bitcast {ll_type(dt)} {value} to i{dt.bits}")
    return value

  def from_bits(self, bits: str, dt: DType) -> str:
    if dt in EMULATED_16BIT:
      return self.call(f"rg_{EMULATED_16BIT[dt]}_to_f32", "float", ("i16", bits))
    if dtypes.is_float(dt):
      return self.emit(f"bitcast i{dt.bits} {bits} to {ll_type(dt)}")
    return bits


# ---- statements and values that are not ALU ops: their rules get the uop
def _parameter(k: _Kernel, u: UOp) -> None:
  """A buffer is a parameter of the function (%data0, %data1, ...), named before the walk."""


def _thread_index(k: _Kernel, u: UOp) -> str:
  """The index of the thread loop on the axis (axes of size 1 have no loop: index 0)."""
  return k.thread_index.get(u.arg[0], "0")


def _open_loop(k: _Kernel, u: UOp) -> str:
  k.open_ranges[u] = loop = k.open_loop("0", u.arg[1])
  return loop.index


def _close_loop(k: _Kernel, u: UOp) -> None:
  k.close_loop(k.open_ranges.pop(u.src[0]))


def _accumulator(k: _Kernel, u: UOp) -> None:
  k.acc_ptrs[u] = k.new_slot(u.dtype, f"%acc{u.arg[0]}", u.arg[1])


def _accumulate(k: _Kernel, u: UOp) -> None:
  acc, value = u.src
  k.accumulate(acc.arg[1], acc.dtype, k.acc_ptrs[acc], k.operand(value))


def _store(k: _Kernel, u: UOp) -> None:
  k.store(*u.src)


def _constant(k: _Kernel, u: UOp) -> str:
  return literal(u.arg, u.dtype)


def _load(k: _Kernel, u: UOp) -> str:
  return k.load(u)


def _cast(k: _Kernel, u: UOp) -> str:
  src, dst = u.src[0].dtype, u.dtype
  return CAST_RULES[(cast_class(src), cast_class(dst))](k, k.operand(u.src[0]), src, dst)


def _bitcast(k: _Kernel, u: UOp) -> str:
  return k.from_bits(k.bits(k.operand(u.src[0]), u.src[0].dtype), u.dtype)


# ---- ALU ops: one rule per op, chosen by the operand's kind (b bool, i signed, u unsigned, f float)


def _arithmetic(by_kind: dict[str, str]) -> Rule:
  """One instruction; a float result of half/bfloat16 is rounded once."""
  def render(k: _Kernel, dt: DType, a: str, b: str) -> str:
    out = k.emit(f"{by_kind[dt.kind]} {ll_type(dt)} {a}, {b}")
    return k.round16(out, dt)
  return render


def _instruction(by_kind: dict[str, str]) -> Rule:
  """One instruction whose result needs no rounding: comparisons and bitwise ops."""
  def render(k: _Kernel, dt: DType, a: str, b: str) -> str:
    return k.emit(f"{by_kind[dt.kind]} {ll_type(dt)} {a}, {b}")
  return render


def _division(by_kind: dict[str, str]) -> Rule:
  """b == 0 and MIN / -1 are UNDEFINED in the spec but immediate UB in LLVM (and trap on x86): divide by 1."""
  def render(k: _Kernel, dt: DType, a: str, b: str) -> str:
    t = ll_type(dt)
    bad = k.emit(f"icmp eq {t} {b}, 0")
    if dt.kind == "i":
      overflow = k.emit(f"and i1 {k.emit(f'icmp eq {t} {a}, {literal(dtypes.min(dt), dt)}')}, "
                        f"{k.emit(f'icmp eq {t} {b}, -1')}")
      bad = k.emit(f"or i1 {bad}, {overflow}")
    divisor = k.emit(f"select i1 {bad}, {t} 1, {t} {b}")
    return k.emit(f"{by_kind[dt.kind]} {t} {a}, {divisor}")
  return render


def _remainder(k: _Kernel, dt: DType, a: str, b: str) -> str:
  """MOD: srem/urem on ints (guarded like division); frem on floats, which is C's fmod: exact, so no rounding."""
  if dtypes.is_float(dt):
    return k.emit(f"frem {ll_type(dt)} {a}, {b}")
  return _division({"i": "srem", "u": "urem"})(k, dt, a, b)


def _shift(by_kind: dict[str, str]) -> Rule:
  """A shift by < 0 or >= the width is UNDEFINED in the spec and poison in LLVM: mask the amount to the width
  (which leaves every defined shift alone, like x86's own shift instructions)."""
  def render(k: _Kernel, dt: DType, a: str, b: str) -> str:
    t = ll_type(dt)
    return k.emit(f"{by_kind[dt.kind]} {t} {a}, {k.emit(f'and {t} {b}, {dt.bits - 1}')}")
  return render


def _maximum(k: _Kernel, dt: DType, a: str, b: str) -> str:
  if dt == dtypes.bool:
    return k.emit(f"or i1 {a}, {b}")
  return k.intrinsic({"i": "smax", "u": "umax", "f": "maximum"}[dt.kind], dt, a, b)


def _negate(k: _Kernel, dt: DType, a: str) -> str:
  t = ll_type(dt)
  return k.emit(f"fneg {t} {a}" if dtypes.is_float(dt) else f"sub {t} 0, {a}")  # sub wraps: -MIN == MIN


def _reciprocal(k: _Kernel, dt: DType, a: str) -> str:
  return k.round16(k.emit(f"fdiv {ll_type(dt)} 1.0, {a}"), dt)


def _math(name: str, rounds: bool = True) -> Rule:
  """An LLVM intrinsic (a libm call or an instruction after lowering), rounded to half/bfloat16."""
  def render(k: _Kernel, dt: DType, a: str) -> str:
    out = k.intrinsic(name, dt, a)
    return k.round16(out, dt) if rounds else out
  return render


def _select(k: _Kernel, dt: DType, c: str, a: str, b: str) -> str:
  return k.emit(f"select i1 {c}, {ll_type(dt)} {a}, {ll_type(dt)} {b}")


# ---- casts: one rule per (source class, target class); classes are b bool, n integer, f float
def cast_class(dt: DType) -> str:
  return {"b": "b", "i": "n", "u": "n", "f": "f"}[dt.kind]


def _same(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  return a


def _to_bool(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  compare = "fcmp une" if dtypes.is_float(src) else "icmp ne"  # NaN != 0 is true, -0.0 != 0 is false
  return k.emit(f"{compare} {ll_type(src)} {a}, {literal(0, src)}")


def _from_bool(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  return k.emit(f"{'uitofp' if dtypes.is_float(dst) else 'zext'} i1 {a} to {ll_type(dst)}")


def _int_to_int(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  if src.bits == dst.bits:
    return a
  grow = "sext" if src.kind == "i" else "zext"
  return k.emit(f"{'trunc' if dst.bits < src.bits else grow} {ll_type(src)} {a} to {ll_type(dst)}")


def _int_to_float(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  convert = "sitofp" if src.kind == "i" else "uitofp"
  if (wide := round_to_odd_source(src, dst)) is None:  # float holds every src value: one rounding
    return k.round16(k.emit(f"{convert} {ll_type(src)} {a} to {ll_type(dst)}"), dst)
  odd = k.call(f"rg_{ODD_HELPER[wide]}_to_f32_odd", "float", ("i64", _int_to_int(k, a, src, wide)))
  return k.round16(odd, dst)


def _float_to_float(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  if src == dtypes.float64:
    if dst == dtypes.float64:
      return a
    if dst == dtypes.float32:
      return k.emit(f"fptrunc double {a} to float")
    return k.round16(k.call("rg_f64_to_f32_odd", "float", ("double", a)), dst)
  if dst == dtypes.float64:
    return k.emit(f"fpext float {a} to double")
  return a if dst in (src, dtypes.float32) else k.round16(a, dst)  # float holds every half and bfloat16 exactly


def _float_to_int(k: _Kernel, a: str, src: DType, dst: DType) -> str:
  """Out of range is UNDEFINED in the spec and poison in LLVM: `freeze` turns poison into some fixed value."""
  convert = "fptosi" if dst.kind == "i" else "fptoui"
  return k.emit(f"freeze {ll_type(dst)} {k.emit(f'{convert} {ll_type(src)} {a} to {ll_type(dst)}')}")


CAST_RULES: dict[tuple[str, str], Rule] = {
  ("b", "b"): _same, ("n", "b"): _to_bool, ("f", "b"): _to_bool,
  ("b", "n"): _from_bool, ("b", "f"): _from_bool, ("n", "n"): _int_to_int,
  ("n", "f"): _int_to_float, ("f", "f"): _float_to_float, ("f", "n"): _float_to_int,
}


# How each op is written in LLVM IR: the one table the walker (refgrad/codegen/walker.py) renders every uop through.
LLVM_RULES: dict[Ops, Rule] = {
  Ops.PARAM: _parameter, Ops.SPECIAL: _thread_index, Ops.RANGE: _open_loop, Ops.ENDRANGE: _close_loop,
  Ops.DEFINE_ACC: _accumulator, Ops.ACCUMULATE: _accumulate, Ops.STORE: _store,
  Ops.CONST: _constant, Ops.LOAD: _load, Ops.CAST: _cast, Ops.BITCAST: _bitcast,
  Ops.NEG: _negate, Ops.RECIP: _reciprocal, Ops.SQRT: _math("sqrt"), Ops.EXP2: _math("exp2"),
  Ops.LOG2: _math("log2"), Ops.SIN: _math("sin"), Ops.TRUNC: _math("trunc", rounds=False),  # integers are exact
  Ops.ADD: _arithmetic({"b": "or", "i": "add", "u": "add", "f": "fadd"}),
  Ops.MUL: _arithmetic({"b": "and", "i": "mul", "u": "mul", "f": "fmul"}),
  Ops.FDIV: _arithmetic({"f": "fdiv"}),
  Ops.IDIV: _division({"i": "sdiv", "u": "udiv"}), Ops.MOD: _remainder,
  Ops.MAX: _maximum,
  Ops.CMPLT: _instruction({"b": "icmp ult", "i": "icmp slt", "u": "icmp ult", "f": "fcmp olt"}),  # i1 true is 1
  Ops.CMPNE: _instruction({"b": "icmp ne", "i": "icmp ne", "u": "icmp ne", "f": "fcmp une"}),
  Ops.AND: _instruction(dict.fromkeys("biu", "and")), Ops.OR: _instruction(dict.fromkeys("biu", "or")),
  Ops.XOR: _instruction(dict.fromkeys("biu", "xor")),
  Ops.SHL: _shift({"i": "shl", "u": "shl"}), Ops.SHR: _shift({"i": "ashr", "u": "lshr"}),
  Ops.WHERE: _select,
}
_Kernel.rules = LLVM_RULES
