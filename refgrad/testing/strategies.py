"""Hypothesis strategies: dtypes, shapes, edge-case values, arrays, and random tensor programs.

Every strategy shrinks toward small, readable examples: few dims, small sizes, plain values, short programs.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck
from hypothesis import strategies as st

from refgrad.dtype import ALL_DTYPES, DType, dtypes
from refgrad.registry import Device
from refgrad.testing.edges import edge_values
from refgrad.testing.programs import Step, TensorProgram

FLOAT_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64)
INT_DTYPES = (dtypes.int32, dtypes.int8, dtypes.int16, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
              dtypes.uint64)
ALL = (dtypes.float32, dtypes.int32, dtypes.bool) + FLOAT_DTYPES[1:] + INT_DTYPES[1:]
assert set(ALL) == set(ALL_DTYPES.values())

# What a test of random programs on a device may tell hypothesis to let pass, and nothing more: its device fixture is
# function-scoped but the same for every example, and compiling a kernel per example is slow. Never filter_too_much:
# a test that rejects most of its draws checks little, and must fail.
PROGRAM_HEALTH_CHECKS = (HealthCheck.function_scoped_fixture, HealthCheck.too_slow)


# Strategies made once and drawn from many times: hypothesis validates every new strategy object, which cost
# programs_strategy a third of its time when each draw built its own.
@functools.cache
def _sampled_of(choices: tuple, types: tuple) -> st.SearchStrategy[Any]:
  return st.sampled_from(choices)


def _sampled(choices: tuple) -> st.SearchStrategy[Any]:
  """sampled_from(choices), built once per choices and their types: (0, 1) equals (False, True), and a cache keyed by
  the values alone gave `pick(draw, (0, 1))` the booleans (a program's step read value `vFalse`)."""
  return _sampled_of(choices, tuple(map(type, choices)))


@functools.cache
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
  return st.integers(lo, hi)


@functools.cache
def _bytes(n: int) -> st.SearchStrategy[bytes]:
  return st.binary(min_size=n, max_size=n)


def pick(draw: st.DrawFn, choices: Any) -> Any:
  """One of `choices` (the first is the simplest: failures shrink toward it)."""
  return draw(_sampled(tuple(choices)))


def between(draw: st.DrawFn, lo: int, hi: int) -> int:
  """An integer in [lo, hi], shrinking toward lo."""
  return draw(_integers(lo, hi))


def coin(draw: st.DrawFn) -> bool:
  return draw(_sampled((False, True)))


def dtype_strategy(choices: tuple[DType, ...] = ALL) -> st.SearchStrategy[DType]:
  """Any refgrad dtype (float32 first, so failures shrink toward it)."""
  return _sampled(tuple(choices))


def claimed_dtypes(device: str) -> tuple[DType, ...]:
  """The dtypes `device` declares (Capabilities.dtypes), in the strategies' order: all a campaign may draw."""
  return tuple(d for d in ALL if d in Device[device].caps.dtypes)


@functools.cache
def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 0, max_side: int = 5) -> st.SearchStrategy[tuple]:
  """Shapes including 0-d and 0-size ones."""
  return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


@functools.cache
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
RANDOM_VALUES = 1 << 14  # the random part of a dtype's value pool (value_pool)


@functools.cache
def value_pool(dtype: DType, edges: bool = True) -> tuple[tuple, tuple, tuple]:
  """The values an array element can take, in three parts: small plain values (0 first, so shrinking ends there),
  the dtype's edge values, and RANDOM_VALUES random ones over the dtype's range (floats in [-10, 10] at float32
  precision), the same in every process."""
  if dtype == dtypes.bool:
    return (False, True), (False, True) if edges else (), (False, True)
  rng = np.random.default_rng(list(dtype.name.encode()))
  if dtypes.is_int(dtype):
    signed = dtypes.min(dtype) < 0
    small = (0,) + tuple(v for k in range(1, 9) for v in ((k, -k) if signed else (k,)))
    spread = tuple(rng.integers(dtypes.min(dtype), dtypes.max(dtype), RANDOM_VALUES, dtype=dtype.np,
                                endpoint=True).tolist())
  else:
    small = (0.0,) + tuple(float(v) for k in range(1, 9) for v in (k, -k))
    spread = tuple(rng.uniform(-10, 10, RANDOM_VALUES).astype(np.float32).astype(np.float64).tolist())
  return small, tuple(edge_values(dtype)) if edges else (), spread


def values_from_bytes(data: bytes, dtype: DType, edges: bool = True) -> list[Any]:
  """Two bytes per element: the first picks the part of value_pool (a quarter small values, half edge values,
  a quarter random ones; without edges half and half), the rest the value. All zero bytes give all zeros."""
  small, edge, spread = value_pool(dtype, edges)
  values = []
  for hi, lo in zip(data[0::2], data[1::2]):
    if hi < 64 or (hi < 128 and not edge):
      values.append(small[lo % len(small)])
    elif hi < 192 and edge:
      values.append(edge[lo % len(edge)])
    else:
      values.append(spread[((hi - 128) << 8 | lo) % len(spread)])
  return values


@st.composite
def arrays(draw: st.DrawFn, dtype: DType | None = None, shape: tuple | None = None, edges: bool = True) -> np.ndarray:
  """A numpy array of a refgrad dtype; values are cast with numpy (wrapping) to the dtype. Its values are one
  drawn byte string (values_from_bytes): one choice for hypothesis to make and to shrink, however long the array."""
  dtype = dtype or draw(dtype_strategy())
  return draw_array(draw, dtype, shape if shape is not None else draw(shapes()), edges)


def draw_array(draw: st.DrawFn, dtype: DType, shape: tuple, edges: bool = True) -> np.ndarray:
  """`arrays` inside another strategy: the same draws, without building a strategy per array."""
  n = math.prod(shape)
  if n > MAX_DRAWN_VALUES:  # long rows (to reach split reductions): values from a drawn seed, edges mixed in
    rng = np.random.default_rng(between(draw, 0, 2**16))
    pool = (edge_values(dtype) if edges else []) + [float(v) for v in rng.integers(-8, 9, 16)]
    values = [pool[i] for i in rng.integers(0, len(pool), n)]
    if dtypes.is_int(dtype):
      values = [int(v) for v in values]
  else:
    values = values_from_bytes(draw(_bytes(2 * n)), dtype, edges)
  with np.errstate(all="ignore"):
    if dtype == dtypes.bool or dtypes.is_float(dtype):
      array = np.array(values, dtype=np.float64 if dtypes.is_float(dtype) else np.bool_).astype(dtype.np)
    else:
      wrap = 1 << dtype.bits
      array = np.array([v % wrap for v in values], dtype=np.uint64).astype(dtype.np)
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


_LONG_SIDE_OR_NONE = st.none() | st.sampled_from(LONG_SIDES)
_KERNEL_SIZES = st.integers(1, 12) | st.sampled_from(LONG_SIDES)


@functools.cache
def _permutations(n: int) -> st.SearchStrategy[list]:
  return st.permutations(range(n))


@functools.cache
def _axis_or_none(ndim: int) -> st.SearchStrategy[int | None]:
  return st.none() | st.integers(0, ndim - 1)


def _factor_shapes(n: int) -> list[tuple]:
  out = [(n,), (1, n), (n, 1)]
  for d in range(2, n):
    if n % d == 0:
      out.append((d, n // d))
  return out


def _draw_step(b: _Builder) -> None:
  draw, v = b.draw, b.last
  shape, dtype = b.shapes[v], b.dtypes[v]
  kind = pick(draw, ("unary", "binary", "movement", "reduce", "cast") if b.movement else
               ("unary", "binary", "reduce", "cast"))
  from refgrad.dtype import least_upper_dtype, least_upper_float
  if kind == "unary":
    name = pick(draw, b.unary)
    float_result = name in ("exp2", "log2", "sqrt", "sin", "reciprocal", "sigmoid")
    if name in ("neg",) and dtype == dtypes.bool:
      name = "abs"
    b.add(Step(name, (v,), (True,)), shape, least_upper_float(dtype) if float_result else dtype)
  elif kind == "binary":
    names = BINARY + (INT_BINARY if dtypes.is_int(dtype) else ())
    name = pick(draw, names)
    if name == "sub" and dtype == dtypes.bool:
      name = "add"
    other = pick(draw, [i for i, s in enumerate(b.shapes) if s == shape or s == ()] or [v])
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
    axis = between(draw, 0, len(shape) - 1)
    keepdim = coin(draw)
    name = pick(draw, EXACT_REDUCES + ("sum",))
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
    to = pick(draw, b.allowed)
    b.add(Step("cast", (v, to), (True,)), shape, to)


def _draw_movement(b: _Builder, v: int, shape: tuple, dtype: DType) -> None:
  draw = b.draw
  choices = ["reshape", "flip", "pad", "contiguous"] + (["permute", "shrink"] if len(shape) else [])
  choices += ["expand"] if 1 in shape else []
  name = pick(draw, choices)
  n = math.prod(shape)
  if name == "reshape":
    new = pick(draw, _factor_shapes(n) if n else [(0,), (0, 2)])
    b.add(Step("reshape", (v, new), (True,)), new, dtype)
  elif name == "flip":
    axes = tuple(i for i in range(len(shape)) if coin(draw))
    b.add(Step("flip", (v, axes), (True,)), shape, dtype)
  elif name == "pad":
    pads = tuple((between(draw, 0, 2), between(draw, 0, 2)) for _ in shape)
    b.add(Step("pad", (v, pads), (True,)), tuple(s + p + q for s, (p, q) in zip(shape, pads)), dtype)
  elif name == "contiguous":
    b.add(Step("contiguous", (v,), (True,)), shape, dtype)
  elif name == "permute":
    order = tuple(draw(_permutations(len(shape))))
    b.add(Step("permute", (v, order), (True,)), tuple(shape[i] for i in order), dtype)
  elif name == "shrink":
    bounds = []
    for s in shape:
      start = between(draw, 0, s)
      bounds.append((start, between(draw, start, s)))
    b.add(Step("shrink", (v, tuple(bounds)), (True,)), tuple(e - s for s, e in bounds), dtype)
  elif name == "expand":
    new = tuple(between(draw, 1, 3) if s == 1 else s for s in shape)
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
  long_side = draw(_LONG_SIDE_OR_NONE)
  if long_side and shape:
    shape = (long_side,) + shape[1:]
  n_inputs = between(draw, 1, max_inputs)
  inputs = [draw_array(draw, pick(draw, dtype_choices), shape if i == 0 or coin(draw) else (), edges)
            for i in range(n_inputs)]
  symbolic = pick(draw, SYMBOLIC_ODDS) and len(shape) > 0 if symbolic_sizes else False
  builder = _Builder(draw, inputs, transcendentals, allowed, movement=not symbolic)
  if symbolic:  # dim 0 of the main shape is a Variable: the builder knows it by a name, equal only to itself
    builder.shapes = [("n",) + s[1:] if s == shape else s for s in builder.shapes]
  for _ in range(between(draw, 1, max_steps)):
    _draw_step(builder)
  value = between(draw, 0, shape[0]) if symbolic else None
  count = pick(draw, SHARD_COUNTS) if sharded and not symbolic else 0
  if not count:
    return TensorProgram(inputs, builder.steps, symbolic=value)
  axes = tuple(draw(_axis_or_none(x.ndim)) if x.ndim else None for x in inputs)
  devices = tuple("PYTHON" if i == 0 else f"PYTHON:{i}" for i in range(count))
  return TensorProgram(inputs, builder.steps, devices, axes)


# ---- random kernels: primitive ops straight on UOps
@functools.cache
def _ops_for(dtype: DType, root: bool) -> tuple[str, ...]:
  """Primitive ops (by name) whose result has `dtype`; transcendentals only at the root (see alu_kernels)."""
  from refgrad.ops import OP_FACTS
  names = [op.name for op, facts in OP_FACTS.items()
           if dtype.kind in facts.kinds and not facts.comparison and (root or not facts.transcendental)]
  if dtype == dtypes.bool:
    names += ["CMPLT", "CMPNE"]
  return (*names, "CAST", "BITCAST")


def _expr(draw: st.DrawFn, dtype: DType, depth: int, inputs: list[np.ndarray], size: int, allowed: tuple[DType, ...],
          root: bool = False) -> Any:
  """An expression tree of `dtype` at most `depth` deep, appending the inputs it reads to `inputs`."""
  from refgrad.ops import OP_FACTS
  from refgrad.testing.programs import Expr
  from refgrad.uop import GroupOp, Ops
  if depth == 0 or between(draw, 0, 3) == 0:
    if not root and between(draw, 0, 3) == 0:  # a constant operand: the shapes compilers fold and reassociate
      return Expr("CONST", dtype, value=draw(scalars(dtype)))
    same = [i for i, x in enumerate(inputs) if dtypes.from_np(x.dtype) == dtype]
    if same and coin(draw):
      return Expr("INPUT", dtype, index=pick(draw, same))
    inputs.append(draw_array(draw, dtype, (size,)))
    return Expr("INPUT", dtype, index=len(inputs) - 1)
  name = pick(draw, _ops_for(dtype, root))
  sub = lambda dt: _expr(draw, dt, depth - 1, inputs, size, allowed)  # noqa: E731
  if name == "CAST":
    return Expr(name, dtype, (sub(pick(draw, allowed)),))
  if name == "BITCAST":
    same_size = [d for d in allowed if d.itemsize == dtype.itemsize and d != dtypes.bool] if dtype != dtypes.bool \
      else []
    if not same_size:
      return _expr(draw, dtype, 0, inputs, size, allowed)
    return Expr(name, dtype, (sub(pick(draw, same_size)),))
  op = Ops[name]
  if op in GroupOp.Comparison:
    operand = pick(draw, allowed)
    return Expr(name, dtype, (sub(operand), sub(operand)))
  if op is Ops.WHERE:
    return Expr(name, dtype, (sub(dtypes.bool), sub(dtype), sub(dtype)))
  return Expr(name, dtype, tuple(sub(dtype) for _ in range(OP_FACTS[op].arity)))


@st.composite
def alu_kernels(draw: st.DrawFn, max_depth: int = 3, dtype_choices: tuple[DType, ...] = ALL,
                allowed: tuple[DType, ...] = ALL) -> Any:
  """Random kernels: expression trees of primitive ops over typed 1-D inputs full of edge values, some long
  enough to take a backend's split-reduction paths, often reduced to one value by ADD, MUL or MAX.

  The root has one of `dtype_choices`; casts, bitcasts and comparisons draw their operands from `allowed` (the
  dtypes the device claims). Transcendentals appear only at the root, so every other node is exact on a correct
  device and the root can be held to its ULP bound."""
  from refgrad.testing.programs import REDUCE_PREFIX, Expr, RandomKernel
  size = draw(_KERNEL_SIZES)
  inputs: list[np.ndarray] = []
  root = _expr(draw, pick(draw, dtype_choices), max_depth, inputs, size, allowed, root=True)
  if not inputs:  # every leaf is a constant: the lanes still need a shape, which one input gives
    inputs.append(draw_array(draw, root.dtype, (size,)))
  reduce_op = pick(draw, (None, "ADD", "MUL", "MAX")) if root.dtype != dtypes.bool else None
  return RandomKernel(inputs, Expr(REDUCE_PREFIX + reduce_op, root.dtype, (root,)) if reduce_op else root)
