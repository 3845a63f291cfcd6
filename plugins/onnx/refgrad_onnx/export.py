"""refgrad's tensor-level graph as an ONNX model: one rule per op (RULES), the ONNX counterpart of the graph
evaluator's EVALUATORS (refgrad/interp/graph.py), each with the dtype semantics of refgrad/alu.py.

A rule takes the Builder, the graph node and its sources' value names, appends the ONNX nodes that compute it and
returns the name of the result; refgrad.graph_device.step_function runs the rules over the graph in order, so the
whole graph becomes one ONNX graph, which onnxruntime optimizes and runs whole. CONSTs are initializers, which
onnxruntime's optimizer sees and may fold.

The translation is plain ONNX where an operator means what SPEC.md says. It composes only where it must:
* an (operator, dtype) that onnxruntime's CPU execution provider has no kernel for is computed in a wider dtype that
  holds every value exactly (COMPUTE_IN), and cast back, which for ints keeps the low bits (wrapping, as SPEC);
* where ONNX leaves a case open or onnxruntime answers otherwise than SPEC (integer division by zero raises and
  MIN / -1 kills the process; Max and ReduceMax on signed zeros; ReduceMax dropping NaN; Mod's fmod=1 being for
  floats only; no Trunc or Exp2 or Log2 operator; BitShift on unsigned only), the rule composes SPEC's meaning.
README.md, "The rules", has the table with what was measured for each.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import ModelProto, helper

from refgrad.alu import reduce_identity
from refgrad.dtype import DType, dtypes
from refgrad.graph_device import SHARDED, operand_dtype, rule_gap, step_function
from refgrad.uop import GroupOp, Ops, UOp
from refgrad_onnx.builder import ONNX_TYPE, OPSET, Builder
from refgrad_onnx.casts import cast

Emit = Callable[..., str]  # (Builder, the dtype it computes in, *source names) -> result name
Rule = Callable[..., str]  # (Builder, node, *source names) -> result name

NOT_EXPORTED = SHARDED
# (op, operand dtype) -> why ONNX or onnxruntime cannot compute it as SPEC.md says (README.md, "Unsupported")
UNSUPPORTED: dict[tuple[Ops, DType], str] = {}

SMALL_INTS = (dtypes.int16, dtypes.uint16)
UNSIGNED_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
SIGNED_OF_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}

# (op, dtype) -> the dtype it is computed in, where onnxruntime 1.32's CPU execution provider has no kernel of the
# operator for that dtype (probed: "Could not find an implementation for Max(13) node with name ''") and a wider
# dtype holds every value and gives SPEC's result once cast back. LOG2 on floats narrower than float64 goes through
# float64 for accuracy instead: Log(x) / ln 2 in float32 was 4 ULP off (SPEC allows 2).
COMPUTE_IN: dict[tuple[Ops, DType], DType] = {
  **{(op, dtypes.bfloat16): dtypes.float32 for op in GroupOp.ALU},  # no bfloat16 arithmetic kernel at all
  **{(op, dt): dtypes.int32 for op in (Ops.MAX, Ops.WHERE) for dt in SMALL_INTS},
  (Ops.IDIV, dtypes.int16): dtypes.int32, (Ops.MOD, dtypes.int16): dtypes.int32,  # their guard needs Where
  (Ops.WHERE, dtypes.bool): dtypes.uint8, (Ops.WHERE, dtypes.uint64): dtypes.int64,
  (Ops.CMPLT, dtypes.bool): dtypes.uint8,  # Less has no bool in its schema
  **{(Ops.LOG2, dt): dtypes.float64 for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32)},
}


def unsupported_reason(u: UOp) -> str | None:
  """Why ONNX Runtime cannot compute node `u` as SPEC.md says, or None if it can."""
  return rule_gap(u, RULES, UNSUPPORTED)


# ---- ALU ops, each emitted in the dtype it computes in
def _by_kind(on_bool: str, on_number: str) -> Emit:
  return lambda g, dt, *xs: g.op(on_bool if dt == dtypes.bool else on_number, *xs)


def _plain(op_type: str) -> Emit:
  return lambda g, dt, *xs: g.op(op_type, *xs)


def _neg(g: Builder, dt: DType, x: str) -> str:
  return g.op("Sub", g.const(0, dt), x) if dt.kind == "u" else g.op("Neg", x)  # Neg's schema has no unsigned types


def _trunc(g: Builder, dt: DType, x: str) -> str:
  """ONNX has no Trunc: Ceil below zero, Floor from zero up (-0.0 and NaN go to Floor, which keeps them)."""
  return _where(g, dt, g.op("Less", x, g.const(0, dt)), g.op("Ceil", x), g.op("Floor", x))


def _exp2(g: Builder, dt: DType, x: str) -> str:
  return g.op("Pow", g.const(2, dt), x)  # no Exp2; Exp(x * ln 2) was 49 ULP off in float32, Pow within 1


def _log2(g: Builder, dt: DType, x: str) -> str:
  return g.op("Div", g.op("Log", x), g.const(np.log(2.0), dt))  # no Log2


def _float_max(g: Builder, dt: DType, a: str, b: str) -> str:
  """Max propagates NaN in onnxruntime, but of two zeros it returns one operand, either sign; SPEC's max(-0.0, +0.0)
  is +0.0 in both orders, which is their sum."""
  zero = g.const(0, dt)
  both_zero = g.op("And", g.op("Equal", a, zero), g.op("Equal", b, zero))
  return _where(g, dt, both_zero, g.op("Add", a, b), g.op("Max", a, b))


def _max(g: Builder, dt: DType, a: str, b: str) -> str:
  if dt == dtypes.bool:
    return g.op("Or", a, b)
  return _float_max(g, dt, a, b) if dtypes.is_float(dt) else g.op("Max", a, b)


def _safe_divisor(g: Builder, dt: DType, b: str) -> str:
  """The divisor with 1 in its zero lanes (UNDEFINED in SPEC; onnxruntime raises 'Integer division by zero') and,
  signed, its -1 lanes (onnxruntime's MIN / -1 traps with SIGFPE, killing the process): the callers give those."""
  if dt.kind == "u":
    return g.op("Add", b, g.cast(g.op("Equal", b, g.const(0, dt)), dt))  # no Where: uint64 has no Where kernel
  replaced = g.op("Or", g.op("Equal", b, g.const(0, dt)), g.op("Equal", b, g.const(-1, dt)))
  return g.op("Where", replaced, g.const(1, dt), b)


def _idiv(g: Builder, dt: DType, a: str, b: str) -> str:
  """ONNX's Div truncates integers toward zero (its docs), as C; x / -1 is -x, which wraps MIN to MIN."""
  quotient = g.op("Div", a, _safe_divisor(g, dt, b))
  return quotient if dt.kind == "u" else g.op("Where", g.op("Equal", b, g.const(-1, dt)), g.op("Neg", a), quotient)


def _mod(g: Builder, dt: DType, a: str, b: str) -> str:
  """Floats: Mod with fmod=1, C's fmod. Ints: ONNX allows fmod=1 for floats only, and fmod=0 is Python's % (the sign
  of the divisor); C's remainder has the dividend's sign, so a nonzero remainder of operands of different signs
  moves by one divisor. x % -1 is 0, which the safe divisor 1 gives."""
  if dtypes.is_float(dt):
    return g.op("Mod", a, b, fmod=1)
  divisor = _safe_divisor(g, dt, b)
  python = g.op("Mod", a, divisor, fmod=0)
  if dt.kind == "u":
    return python
  zero = g.const(0, dt)
  signs_differ = g.op("Xor", g.op("Less", a, zero), g.op("Less", divisor, zero))
  moves = g.op("And", signs_differ, g.op("Not", g.op("Equal", python, zero)))
  return g.op("Where", moves, g.op("Sub", python, divisor), python)


def _shift(direction: str) -> Emit:
  """BitShift is defined on unsigned types only: signed values are shifted as the unsigned type of their size (the
  same bits; Cast between them keeps the low bits, ONNX's Cast rules). A signed right shift fills with the sign:
  the bits are complemented before and after a logical shift where the value is negative."""
  def emit(g: Builder, dt: DType, a: str, b: str) -> str:
    if dt.kind == "u":
      return g.op("BitShift", a, b, direction=direction)
    unsigned = UNSIGNED_OF_SIZE[dt.itemsize]
    bits, amount = g.cast(a, unsigned), g.cast(b, unsigned)
    if direction == "LEFT":
      return g.cast(g.op("BitShift", bits, amount, direction="LEFT"), dt)
    negative = g.cast(g.op("Less", a, g.const(0, dt)), unsigned)
    fill = g.op("Sub", g.const(0, unsigned), negative)  # all ones where a < 0, else zero
    shifted = g.op("BitShift", g.op("BitwiseXor", bits, fill), amount, direction="RIGHT")
    return g.cast(g.op("BitwiseXor", shifted, fill), dt)
  return emit


def _where(g: Builder, dt: DType, c: str, a: str, b: str) -> str:
  """onnxruntime's Where returns +0.0 for a -0.0 it selects from X (onnxruntime issue #32191, open; README.md):
  floats are selected as their bits, in the int of their size (int16 has no Where kernel: in int32)."""
  if not dtypes.is_float(dt):
    return g.op("Where", c, a, b)
  bits = SIGNED_OF_SIZE[dt.itemsize]
  select_in = dtypes.int32 if bits == dtypes.int16 else bits
  a, b = (g.cast(g.bitcast(x, bits), select_in) for x in (a, b))
  return g.bitcast(cast(g, g.op("Where", c, a, b), select_in, bits), dt)


_ALU: dict[Ops, Emit] = {
  Ops.NEG: _neg,  # ints wrap: -MIN == MIN
  Ops.RECIP: _plain("Reciprocal"),
  Ops.SQRT: _plain("Sqrt"),
  Ops.EXP2: _exp2,
  Ops.LOG2: _log2,
  Ops.SIN: _plain("Sin"),
  Ops.TRUNC: _trunc,
  Ops.ADD: _by_kind("Or", "Add"),  # ints wrap modulo 2**bits
  Ops.MUL: _by_kind("And", "Mul"),
  Ops.FDIV: _plain("Div"),
  Ops.IDIV: _idiv,
  Ops.MOD: _mod,
  Ops.MAX: _max,
  Ops.CMPLT: _plain("Less"),
  Ops.CMPNE: lambda g, dt, a, b: g.op("Not", g.op("Equal", a, b)),  # a NaN is unequal to everything
  Ops.AND: _by_kind("And", "BitwiseAnd"),
  Ops.OR: _by_kind("Or", "BitwiseOr"),
  Ops.XOR: _by_kind("Xor", "BitwiseXor"),
  Ops.SHL: _shift("LEFT"),
  Ops.SHR: _shift("RIGHT"),
  Ops.WHERE: _where,
}


def _alu(g: Builder, u: UOp, *xs: str) -> str:
  """The op in its operand dtype, or in COMPUTE_IN's wider dtype with the operands cast there and the result cast
  back (comparisons give bool already)."""
  dt = operand_dtype(u)
  wide = COMPUTE_IN.get((u.op, dt))
  if wide is None:
    return _ALU[u.op](g, dt, *xs)
  widened = [x if u.op is Ops.WHERE and i == 0 else cast(g, x, dt, wide) for i, x in enumerate(xs)]
  result = _ALU[u.op](g, wide, *widened)
  return result if u.op in GroupOp.Comparison else cast(g, result, wide, u.dtype)


# ---- casts and leaves
def _cast(g: Builder, u: UOp, x: str) -> str:
  if u.op is Ops.BITCAST:
    return g.bitcast(x, u.dtype)  # same item size (alu.exec_bitcast); NaN lanes UNDEFINED
  return cast(g, x, u.src[0].dtype, u.dtype)


def _const(g: Builder, u: UOp, *srcs: str) -> str:
  """A CONST's value, by numpy's conversion as the graph evaluator's, as an initializer of its exact dtype."""
  return g.const(np.array(u.arg, dtype=u.dtype.np), u.dtype)


# ---- movement
def _pad(g: Builder, u: UOp, x: str) -> str:
  """Zeros (+0.0, False) outside, as np.pad: Pad's default constant. Pad has no int16/uint16 kernel: in int32."""
  pads = g.ints([before for before, _ in u.arg] + [after for _, after in u.arg])
  if u.dtype not in SMALL_INTS:
    return g.op("Pad", x, pads)
  return g.cast(g.op("Pad", g.cast(x, dtypes.int32), pads), u.dtype)


def _expand_to(g: Builder, dt: DType, x: str, shape: tuple[int, ...]) -> str:
  """Expand has no bfloat16 kernel: the bits are expanded as uint16."""
  if dt != dtypes.bfloat16:
    return g.op("Expand", x, g.ints(shape))
  return g.bitcast(g.op("Expand", g.bitcast(x, dtypes.uint16), g.ints(shape)), dtypes.bfloat16)


def _shrink(g: Builder, u: UOp, x: str) -> str:
  starts, ends = [start for start, _ in u.arg], [end for _, end in u.arg]
  return g.op("Slice", x, g.ints(starts), g.ints(ends), g.ints(range(len(u.arg))))


def _flip(g: Builder, u: UOp, x: str) -> str:
  """Slice with step -1 from the last element to before the first (an end of INT64_MIN means 'past the start')."""
  axes = [i for i, flipped in enumerate(u.arg) if flipped]
  if not axes:
    return x
  n = len(axes)
  return g.op("Slice", x, g.ints([-1] * n), g.ints([np.iinfo(np.int64).min] * n), g.ints(axes), g.ints([-1] * n))


# ---- reductions, keepdims=1 (the reduced dims stay as size 1, as REDUCE_AXIS's shape)
# maxima where the operator's schema or onnxruntime's kernels lack the dtype: in a wider dtype, which is exact
MAX_IN: dict[DType, DType] = {dtypes.int16: dtypes.int32, dtypes.uint16: dtypes.int32, dtypes.uint32: dtypes.int64,
                              dtypes.bfloat16: dtypes.float32}


def _tree_fold(g: Builder, op_type: str, x: str, shape: tuple[int, ...], axes: tuple[int, ...]) -> str:
  """An integer sum or product over `axes` as a tree of elementwise Adds or Muls, which wrap modulo 2**bits.
  onnxruntime's ReduceSum and ReduceProd saturate on int32 and int64 instead (INT32_MAX + 1 gives INT32_MAX;
  README.md), and their schemas have no 8- or 16-bit ints: the reduced axes go last, flattened into one, which is
  halved until one element is left (an odd one out is set aside and folded in at the end)."""
  kept = [i for i in range(len(shape)) if i not in axes]
  n = int(np.prod([shape[a] for a in axes]))
  x = g.op("Reshape", g.op("Transpose", x, perm=kept + list(axes)), g.ints([shape[i] for i in kept] + [n]),
           allowzero=1)
  last, odd_ones = g.ints([-1]), []
  while n > 1:
    if n % 2:
      odd_ones.append(g.op("Slice", x, g.ints([n - 1]), g.ints([n]), last))
      n -= 1
    x = g.op(op_type, g.op("Slice", x, g.ints([0]), g.ints([n // 2]), last),
             g.op("Slice", x, g.ints([n // 2]), g.ints([n]), last))
    n //= 2
  for odd in odd_ones:
    x = g.op(op_type, x, odd)
  return g.op("Reshape", x, g.ints([1 if i in axes else size for i, size in enumerate(shape)]), allowzero=1)


def _float_max_reduce(g: Builder, dt: DType, x: str, axes: str) -> str:
  """ReduceMax drops NaN depending on where it is (onnxruntime issue #10514: [1, nan, 2] gives 2) and returns
  either zero of -0.0 and +0.0: NaN where any term is NaN, +0.0 where the maximum is a zero and a term is +0.0."""
  found = g.op("ReduceMax", x, axes, keepdims=1)
  zero = g.const(0, dt)
  bits = SIGNED_OF_SIZE[dt.itemsize]
  positive = g.op("Not", g.op("Less", g.bitcast(x, bits), g.const(0, bits)))  # the sign bit clear
  any_positive_zero = g.op("ReduceMax", g.op("And", g.op("Equal", x, zero), positive), axes, keepdims=1)
  found = _where(g, dt, g.op("And", g.op("Equal", found, zero), any_positive_zero), zero, found)
  any_nan = g.op("ReduceMax", g.op("IsNaN", x), axes, keepdims=1)
  return _where(g, dt, any_nan, g.const(np.nan, dt), found)


def _uint64_max_reduce(g: Builder, x: str, axes: str) -> str:
  """No uint64 ReduceMax kernel: the bits as int64 with the sign bit flipped are in the same order."""
  flip = g.const(np.iinfo(np.int64).min, dtypes.int64)
  keys = g.op("BitwiseXor", g.cast(x, dtypes.int64), flip)
  return g.cast(g.op("BitwiseXor", g.op("ReduceMax", keys, axes, keepdims=1), flip), dtypes.uint64)


def _max_reduce(g: Builder, dt: DType, x: str, axes: str) -> str:
  if dt == dtypes.bool or dtypes.is_int(dt) and dt not in (dtypes.uint64, *MAX_IN):
    return g.op("ReduceMax", x, axes, keepdims=1)  # bool: any
  if dt == dtypes.uint64:
    return _uint64_max_reduce(g, x, axes)
  if dt in MAX_IN:
    return cast(g, _max_reduce(g, MAX_IN[dt], cast(g, x, dt, MAX_IN[dt]), axes), MAX_IN[dt], dt)
  return _float_max_reduce(g, dt, x, axes)


def _reduce(g: Builder, u: UOp, x: str) -> str:
  op, axes = u.arg
  dt, shape = u.dtype, u.src[0].shape
  if any(shape[a] == 0 for a in axes):  # an empty reduction is its identity (bool's ReduceMax raises on one)
    return _expand_to(g, dt, g.const(reduce_identity(op, dt), dt), u.shape)
  if op is Ops.MAX:
    return _max_reduce(g, dt, x, g.ints(axes))
  if dt == dtypes.bool:  # any / all
    return g.op("ReduceMin" if op is Ops.MUL else "ReduceMax", x, g.ints(axes), keepdims=1)
  if dtypes.is_int(dt):
    return _tree_fold(g, "Add" if op is Ops.ADD else "Mul", x, shape, tuple(axes))
  wide = dtypes.float32 if dt == dtypes.bfloat16 else dt  # no bfloat16 kernel: in float32, rounded once at the end
  folded = g.op("ReduceSum" if op is Ops.ADD else "ReduceProd", cast(g, x, dt, wide), g.ints(axes), keepdims=1)
  return cast(g, folded, wide, dt)


def _same(g: Builder, u: UOp, x: str, *rest: str) -> str:
  return x


RULES: dict[Ops, Rule] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast,
  Ops.CONST: _const,
  Ops.DEVICE: lambda g, u: "",  # only names where a CONST lives; the CONST's rule does not read it
  Ops.RESHAPE: lambda g, u, x: g.op("Reshape", x, g.ints(u.arg), allowzero=1),  # a 0 in the shape is a size
  Ops.PERMUTE: lambda g, u, x: g.op("Transpose", x, perm=list(u.arg)),
  Ops.EXPAND: lambda g, u, x: _expand_to(g, u.dtype, x, u.arg),
  Ops.PAD: _pad,
  Ops.SHRINK: _shrink,
  Ops.FLIP: _flip,
  Ops.REDUCE_AXIS: _reduce,
  Ops.CONTIGUOUS: _same,  # values, not layouts
  Ops.DETACH: _same,
  Ops.CUSTOM_GRAD: _same,  # its value is src[0]; the others are its gradient's inputs
  Ops.COPY: _same,  # one onnxruntime session holds the whole graph
}


# ---- the whole graph
def transport_dtype(dt: DType) -> DType:
  """The dtype a model's input or output has for values of `dt`: onnxruntime's Python binding takes and returns no
  bfloat16 arrays ("Numpy_type 256 can't be converted to MLDataType"), so those cross as uint16 bits."""
  return dtypes.uint16 if dt == dtypes.bfloat16 else dt


def onnx_model(outputs: Sequence[UOp], leaves: Sequence[UOp], sizes: Sequence[int]) -> ModelProto:
  """An ONNX model computing `outputs` from the flat values of `leaves` (a graph's input PARAMs, or a shrunk graph's
  BUFFERs: inputs `in0`, `in1`, ... of `sizes` elements each), checked by onnx.checker. The caller has asked
  unsupported_reason of every node."""
  g = Builder()
  names = [f"in{i}" for i in range(len(leaves))]
  run = step_function(outputs, leaves, lambda u: functools.partial(RULES[u.op], g, u))
  values = run(*(g.bitcast(n, dtypes.bfloat16) if u.dtype == dtypes.bfloat16 else n for n, u in zip(names, leaves)))
  results = [g.bitcast(v, dtypes.uint16) if u.dtype == dtypes.bfloat16 else g.op("Identity", v)
             for v, u in zip(values, outputs)]  # one graph output each, even for a value stored twice
  graph = helper.make_graph(
    g.nodes, "refgrad_graph",
    [helper.make_tensor_value_info(n, ONNX_TYPE[transport_dtype(u.dtype)], [size])
     for n, u, size in zip(names, leaves, sizes)],
    [helper.make_tensor_value_info(r, ONNX_TYPE[transport_dtype(u.dtype)], list(u.shape))
     for r, u in zip(results, outputs)],
    initializer=g.initializers)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="refgrad-onnx")
  onnx.checker.check_model(model, full_check=True)
  return model
