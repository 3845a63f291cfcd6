"""Hypothesis strategies: dtypes, shapes, edge-case values, arrays, and random tensor programs.

Every strategy shrinks toward small, readable examples: few dims, small sizes, plain values, short programs.
"""
from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from refgrad.dtype import ALL_DTYPES, DType, dtypes
from refgrad.testing.programs import Step, TensorProgram

FLOAT_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64)
INT_DTYPES = (dtypes.int32, dtypes.int8, dtypes.int16, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
              dtypes.uint64)
ALL = (dtypes.float32, dtypes.int32, dtypes.bool) + FLOAT_DTYPES[1:] + INT_DTYPES[1:]
assert set(ALL) == set(ALL_DTYPES.values())


def dtype_strategy(choices: tuple[DType, ...] = ALL) -> st.SearchStrategy[DType]:
  """Any refgrad dtype (float32 first, so failures shrink toward it)."""
  return st.sampled_from(choices)


def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 5) -> st.SearchStrategy[tuple]:
  """Shapes including 0-d and 0-size ones."""
  return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def edge_values(dtype: DType) -> list[Any]:
  """The values where backends usually go wrong, for one dtype."""
  if dtype == dtypes.bool:
    return [False, True]
  if dtypes.is_int(dtype):
    lo, hi = dtypes.min(dtype), dtypes.max(dtype)
    return sorted({0, 1, 2, 7, hi, hi - 1, lo, lo + 1} | ({-1, -2, -7} if lo < 0 else set()))
  info = ml_dtypes.finfo(dtype.np)
  tiny, smallest = float(info.tiny), float(info.smallest_subnormal)
  return [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, float("nan"), float("inf"), float("-inf"), float(info.max),
          -float(info.max), tiny, smallest, -smallest, 1e-3, 100.0, math.pi]


def scalars(dtype: DType, edges: bool = True) -> st.SearchStrategy[Any]:
  """Plain values of a dtype, mixed with its edge values."""
  if dtype == dtypes.bool:
    plain: st.SearchStrategy[Any] = st.booleans()
  elif dtypes.is_int(dtype):
    plain = st.integers(-8 if dtypes.min(dtype) < 0 else 0, 8) | st.integers(dtypes.min(dtype), dtypes.max(dtype))
  else:
    plain = st.integers(-8, 8).map(float) | st.floats(-10, 10, width=32).map(lambda v: float(v))
  return plain | st.sampled_from(edge_values(dtype)) if edges else plain


MAX_DRAWN_VALUES = 64  # larger arrays take their values from one drawn seed (hypothesis buffers stay small)
LONG_SIDES = (16, 17, 40, 67)  # reductions this long take the split (8-accumulator) paths, with and without rest


@st.composite
def arrays(draw: st.DrawFn, dtype: DType | None = None, shape: tuple | None = None, edges: bool = True) -> np.ndarray:
  """A numpy array of a refgrad dtype; values are cast with numpy (wrapping) to the dtype."""
  dtype = dtype or draw(dtype_strategy())
  shape = shape if shape is not None else draw(shapes())
  n = int(np.prod(shape))
  if n > MAX_DRAWN_VALUES:  # long rows (to reach split reductions): values from a drawn seed, edges mixed in
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    pool = (edge_values(dtype) if edges else []) + [float(v) for v in rng.integers(-8, 9, 16)]
    values = [pool[i] for i in rng.integers(0, len(pool), n)]
    if dtypes.is_int(dtype):
      values = [int(v) for v in values]
  else:
    values = draw(st.lists(scalars(dtype, edges), min_size=n, max_size=n))
  with np.errstate(all="ignore"):
    if dtype == dtypes.bool or dtypes.is_float(dtype):
      array = np.array(values, dtype=np.float64 if dtypes.is_float(dtype) else np.bool_).astype(dtype.np)
    else:
      array = np.array([v % (1 << dtype.bits) for v in values], dtype=np.uint64).astype(dtype.np)
  return array.reshape(shape)


# ---- random tensor programs
EXACT_UNARY = ("neg", "abs", "sqrt", "reciprocal", "trunc", "relu", "floor")
TRANSCENDENTAL_UNARY = ("exp2", "log2", "sin", "sigmoid")
BINARY = ("add", "mul", "sub", "maximum", "minimum", "lt", "eq", "ne")
INT_BINARY = ("idiv", "mod", "bitwise_and", "bitwise_xor", "bitwise_or")
EXACT_REDUCES = ("max", "min")


class _Builder:
  """Tracks shape and dtype of each value while steps are drawn."""

  def __init__(self, draw: st.DrawFn, inputs: list[np.ndarray], transcendentals: bool, allowed: tuple[DType, ...],
               movement: bool = True):
    self.draw, self.inputs, self.allowed, self.movement = draw, inputs, allowed, movement
    self.unary = EXACT_UNARY + (TRANSCENDENTAL_UNARY if transcendentals else ())
    self.shapes = [x.shape for x in inputs]
    self.dtypes = [dtypes.from_np(x.dtype) for x in inputs]
    self.steps: list[Step] = []

  def add(self, step: Step, shape: tuple, dtype: DType) -> None:
    self.steps.append(step)
    self.shapes.append(shape)
    self.dtypes.append(dtype)

  @property
  def last(self) -> int:
    return len(self.shapes) - 1


def _factor_shapes(n: int) -> list[tuple]:
  out = [(n,), (1, n), (n, 1)]
  for d in range(2, n):
    if n % d == 0:
      out.append((d, n // d))
  return out


def _draw_step(b: _Builder) -> None:
  draw, v = b.draw, b.last
  shape, dtype = b.shapes[v], b.dtypes[v]
  kind = draw(st.sampled_from(("unary", "binary", "movement", "reduce", "cast") if b.movement else
                              ("unary", "binary", "reduce", "cast")))
  from refgrad.dtype import least_upper_dtype, least_upper_float
  if kind == "unary":
    name = draw(st.sampled_from(b.unary))
    float_result = name in ("exp2", "log2", "sqrt", "sin", "reciprocal", "sigmoid")
    if name in ("neg",) and dtype == dtypes.bool:
      name = "abs"
    b.add(Step(name, (v,), (True,)), shape, least_upper_float(dtype) if float_result else dtype)
  elif kind == "binary":
    names = BINARY + (INT_BINARY if dtypes.is_int(dtype) else ())
    name = draw(st.sampled_from(names))
    if name == "sub" and dtype == dtypes.bool:
      name = "add"
    other = draw(st.sampled_from([i for i, s in enumerate(b.shapes) if s == shape or s == ()] or [v]))
    out_dtype = least_upper_dtype(dtype, b.dtypes[other])
    if name in INT_BINARY and not dtypes.is_int(out_dtype):
      name = "add"
    if name == "sub" and out_dtype == dtypes.bool:
      name = "mul"
    result = dtypes.bool if name in ("lt", "eq", "ne") else out_dtype
    b.add(Step(name, (v, other), (True, True)), shape, result)
  elif kind == "movement":
    _draw_movement(b, v, shape, dtype)
  elif kind == "reduce" and len(shape) > 0:
    axis = draw(st.integers(0, len(shape) - 1))
    keepdim = draw(st.booleans())
    name = draw(st.sampled_from(EXACT_REDUCES + ("sum",)))
    if name in ("max", "min") and shape[axis] == 0:
      name = "sum" if not dtypes.is_float(dtype) else None
    if name is None:
      return
    out_shape = tuple(1 if i == axis else s for i, s in enumerate(shape)) if keepdim else \
      tuple(s for i, s in enumerate(shape) if i != axis)
    from refgrad.frontend.reduce import SUM_ACC_DTYPE
    out_dtype = SUM_ACC_DTYPE.get(dtype, dtype) if name == "sum" else dtype
    b.add(Step(name, (v, axis), (True,), (("keepdim", keepdim),)), out_shape, out_dtype)
  elif kind == "cast":
    to = draw(dtype_strategy(b.allowed))
    b.add(Step("cast", (v, to), (True,)), shape, to)


def _draw_movement(b: _Builder, v: int, shape: tuple, dtype: DType) -> None:
  draw = b.draw
  choices = ["reshape", "flip", "pad", "contiguous"] + (["permute", "shrink"] if len(shape) else [])
  choices += ["expand"] if 1 in shape else []
  name = draw(st.sampled_from(choices))
  n = int(np.prod(shape))
  if name == "reshape":
    new = draw(st.sampled_from(_factor_shapes(n) if n else [(0,), (0, 2)]))
    b.add(Step("reshape", (v, new), (True,)), new, dtype)
  elif name == "flip":
    axes = tuple(i for i in range(len(shape)) if draw(st.booleans()))
    b.add(Step("flip", (v, axes), (True,)), shape, dtype)
  elif name == "pad":
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    b.add(Step("pad", (v, pads), (True,)), tuple(s + p + q for s, (p, q) in zip(shape, pads)), dtype)
  elif name == "contiguous":
    b.add(Step("contiguous", (v,), (True,)), shape, dtype)
  elif name == "permute":
    order = tuple(draw(st.permutations(range(len(shape)))))
    b.add(Step("permute", (v, order), (True,)), tuple(shape[i] for i in order), dtype)
  elif name == "shrink":
    bounds = []
    for s in shape:
      start = draw(st.integers(0, s))
      bounds.append((start, draw(st.integers(start, s))))
    b.add(Step("shrink", (v, tuple(bounds)), (True,)), tuple(e - s for s, e in bounds), dtype)
  elif name == "expand":
    new = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
    b.add(Step("expand", (v, new), (True,)), new, dtype)


# Sharded programs run over this many of the reference's instances (the check maps them to the device's), drawn with
# these odds: a fifth of programs, two thirds of those over two devices.
SHARD_COUNTS = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 3)
# Symbolic programs (dim 0 of the inputs a bound Variable; elementwise, cast and reduce steps only): a tenth.
SYMBOLIC_ODDS = (False,) * 9 + (True,)


@st.composite
def tensor_programs(draw: st.DrawFn, max_inputs: int = 2, max_steps: int = 6, edges: bool = True,
                    dtype_choices: tuple[DType, ...] = ALL, transcendentals: bool = True,
                    allowed: tuple[DType, ...] = ALL, sharded: bool = True,
                    symbolic_sizes: bool = True) -> TensorProgram:
  """Valid chains and DAGs of Tensor methods over random inputs (each step may reuse any earlier value).
  Inputs have one of `dtype_choices`; casts go to one of `allowed` (the dtypes the device claims). With `sharded`,
  some programs first shard every input over PYTHON's instances (each along a random axis, or copied); with
  `symbolic_sizes`, some shrink dim 0 of their inputs to a bound Variable first.

  With transcendentals=False every step is exact on a correct device, so results must match bit for bit."""
  shape = draw(shapes(max_dims=3, max_side=4))
  long_side = draw(st.one_of(st.none(), st.sampled_from(LONG_SIDES)))
  if long_side and shape:
    shape = (long_side,) + shape[1:]
  n_inputs = draw(st.integers(1, max_inputs))
  inputs = [draw(arrays(draw(dtype_strategy(dtype_choices)), shape if i == 0 or draw(st.booleans()) else (),
                        edges)) for i in range(n_inputs)]
  symbolic = draw(st.sampled_from(SYMBOLIC_ODDS)) and len(shape) > 0 if symbolic_sizes else False
  builder = _Builder(draw, inputs, transcendentals, allowed, movement=not symbolic)
  if symbolic:  # dim 0 of the main shape is a Variable: the builder knows it by a name, equal only to itself
    builder.shapes = [("n",) + s[1:] if s == shape else s for s in builder.shapes]
  for _ in range(draw(st.integers(1, max_steps))):
    _draw_step(builder)
  value = draw(st.integers(0, shape[0])) if symbolic else None
  count = draw(st.sampled_from(SHARD_COUNTS)) if sharded and not symbolic else 0
  if not count:
    return TensorProgram(inputs, builder.steps, symbolic=value)
  axes = tuple(draw(st.one_of(st.none(), st.integers(0, x.ndim - 1))) if x.ndim else None for x in inputs)
  devices = tuple("PYTHON" if i == 0 else f"PYTHON:{i}" for i in range(count))
  return TensorProgram(inputs, builder.steps, devices, axes)


# ---- random kernels: primitive ops straight on UOps
def _ops_for(dtype: DType, root: bool) -> list[str]:
  """Primitive ops (by name) whose result has `dtype`; transcendentals only at the root (see alu_kernels)."""
  from refgrad.alu import OP_KINDS, TRANSCENDENTAL
  from refgrad.uop import GroupOp
  names = [op.name for op, kinds in OP_KINDS.items()
           if dtype.kind in kinds and op not in GroupOp.Comparison and (root or op not in TRANSCENDENTAL)]
  if dtype == dtypes.bool:
    names += ["CMPLT", "CMPNE"]
  return names + ["CAST", "BITCAST"]


@st.composite
def _expr(draw: st.DrawFn, dtype: DType, depth: int, inputs: list[np.ndarray], size: int, allowed: tuple[DType, ...],
          root: bool = False) -> Any:
  from refgrad.testing.programs import Expr
  from refgrad.uop import GroupOp, Ops
  if depth == 0 or draw(st.integers(0, 3)) == 0:
    if not root and draw(st.integers(0, 3)) == 0:  # a constant operand: the shapes compilers fold and reassociate
      return Expr("CONST", dtype, value=draw(scalars(dtype)))
    same = [i for i, x in enumerate(inputs) if dtypes.from_np(x.dtype) == dtype]
    if same and draw(st.booleans()):
      return Expr("INPUT", dtype, index=draw(st.sampled_from(same)))
    inputs.append(draw(arrays(dtype, (size,))))
    return Expr("INPUT", dtype, index=len(inputs) - 1)
  name = draw(st.sampled_from(_ops_for(dtype, root)))
  sub = lambda dt: _expr(dt, depth - 1, inputs, size, allowed)  # noqa: E731
  if name == "CAST":
    return Expr(name, dtype, (draw(sub(draw(dtype_strategy(allowed)))),))
  if name == "BITCAST":
    same_size = [d for d in allowed if d.itemsize == dtype.itemsize and d != dtypes.bool] if dtype != dtypes.bool \
      else []
    if not same_size:
      return draw(_expr(dtype, 0, inputs, size, allowed))
    return Expr(name, dtype, (draw(sub(draw(st.sampled_from(same_size)))),))
  op = Ops[name]
  if op in GroupOp.Comparison:
    operand = draw(dtype_strategy(allowed))
    return Expr(name, dtype, (draw(sub(operand)), draw(sub(operand))))
  if op is Ops.WHERE:
    return Expr(name, dtype, (draw(sub(dtypes.bool)), draw(sub(dtype)), draw(sub(dtype))))
  arity = 1 if op in GroupOp.Unary else 2
  return Expr(name, dtype, tuple(draw(sub(dtype)) for _ in range(arity)))


@st.composite
def alu_kernels(draw: st.DrawFn, max_depth: int = 3, dtype_choices: tuple[DType, ...] = ALL,
                allowed: tuple[DType, ...] = ALL) -> Any:
  """Random kernels: expression trees of primitive ops over typed 1-D inputs full of edge values, some long
  enough to take a backend's split-reduction paths, often reduced to one value by ADD, MUL or MAX.

  The root has one of `dtype_choices`; casts, bitcasts and comparisons draw their operands from `allowed` (the
  dtypes the device claims). Transcendentals appear only at the root, so every other node is exact on a correct
  device and the root can be held to its ULP bound."""
  from refgrad.testing.programs import REDUCE_PREFIX, Expr, RandomKernel
  size = draw(st.integers(1, 12) | st.sampled_from(LONG_SIDES))
  inputs: list[np.ndarray] = []
  root = draw(_expr(draw(dtype_strategy(dtype_choices)), max_depth, inputs, size, allowed, root=True))
  if not inputs:  # every leaf is a constant: the lanes still need a shape, which one input gives
    inputs.append(draw(arrays(root.dtype, (size,))))
  reduce_op = draw(st.sampled_from((None, "ADD", "MUL", "MAX"))) if root.dtype != dtypes.bool else None
  return RandomKernel(inputs, Expr(REDUCE_PREFIX + reduce_op, root.dtype, (root,)) if reduce_op else root)
