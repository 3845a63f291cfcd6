"""`refgrad check`: the conformance suite for a device.

What it runs (docs/testing.md has the full list):
* every primitive op x every dtype the device claims, over the full cross product of the dtype's edge values and
  their neighbours (refgrad.testing.edges), so both operand orders of every edge pair;
* every cast and bitcast between claimed dtypes, narrowing casts also at and one step either side of each rounding
  boundary of the target (ties to even and to odd, overflow, the subnormal range);
* chains of two and three ops fused into one kernel, with constant and loop-invariant operands, and mixed precision;
* the three reductions over rows made of one edge value (all -inf, all NaN, all -0.0, ...) and over lengths that
  reach every path a backend may specialise (empty, 1, a prime, multiples of 8 and 32, longer than a work-group);
* a fixed corpus of Tensor programs (elementwise, reductions, matmul, conv, indexing, hashing).

To stay fast, cases are batched: every cell of the op x dtype matrix that shares an output dtype becomes one segment
of one kernel (the segments are concatenated), so a dtype's ops compile once. Each kernel runs through
check_against_reference, so verdicts follow docs/SPEC.md exactly, and each segment is then judged on its own lanes.
Cells of a dtype the device does not declare (not in its Capabilities.dtypes) are not run but listed as
unsupported, so a device that stops claiming a dtype shows it in the matrix and the summary.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from refgrad.alu import result_dtype, ulp_distance
from refgrad.codegen.contract import Opt, OptList, Program
from refgrad.codegen.opt import apply_opts, heuristic_amounts, legal_opts
from refgrad.codegen.pipeline import lowered_kernel, random_kernel_opts
from refgrad.dtype import DTYPES_BY_PRIORITY, DType, dtypes, from_numpy
from refgrad.frontend.bitcast import UNSIGNED_OF_SIZE
from refgrad.ops import OP_FACTS
from refgrad.registry import Device
from refgrad.symbolic_shapes import Variable
from refgrad.testing.compare import Comparison, add_histogram
from refgrad.testing.edges import cast_values, dtype_edges, result_class_inputs
from refgrad.testing.jit_check import check_jit_replay
from refgrad.testing.reference import (
  KernelResult,
  ReferenceMismatch,
  ReferenceReport,
  check_against_reference,
  lane_text,
)
from refgrad.uop import GroupOp, Ops, UOp

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"
REDUCE_LENGTHS = (0, 1, 13, 64, 1031)  # empty, one, a prime past 8 (split + remainder), multiple of 8 and 32, > 1024
TRANSCENDENTAL_ROWS = frozenset(op.name for op in GroupOp.Transcendental)  # cells the reports histogram by ULP error
RANDOM_LANES = 512  # random values beside the edges: a bug in a third of the lanes (x/3 as x*(1/3)) shows at once
RANDOM_BITCAST_LANES = 64  # random values beside the edges of a bitcast between item sizes


@dataclass
class CaseResult:
  row: str       # op name, "CAST->int8", "BITCAST->...", "REDUCE ADD", "chain: a*b+c", or a program name
  column: str    # dtype name (or "program")
  status: str
  worst_ulp: int = 0
  checked: int = 0
  skipped: int = 0
  detail: str = ""
  ulp_histogram: dict[int, int] = field(default_factory=dict)  # transcendental cells: ULP bucket -> lanes
  paths: list[str] = field(default_factory=list)  # the device's code paths its kernels took (as its renderer says)


@dataclass
class UnitOutcome:
  results: list[CaseResult]
  programs: list[Program] = field(default_factory=list)  # what ran on the device, for the code-path report


# ---- building blocks: primitive ops on tensors
def alu(op: Ops, *xs: Any) -> Any:
  """A primitive op straight on the tensors' graph nodes (below the Tensor API, so nothing is rewritten)."""
  return xs[0]._from(xs[0].uop.alu(op, *(x.uop for x in xs[1:])))


def const(like: Any, value: Any) -> Any:
  """A constant of `like`'s dtype and shape: rendered as a literal, which a compiler may fold."""
  return like._const(value).reshape((1,) * like.ndim).expand(like.shape)


def cast(x: Any, dtype: DType, op: Ops = Ops.CAST) -> Any:
  return x if x.dtype == dtype and op is Ops.CAST else x._from(UOp(op, dtype, (x.uop,)))


def reduce(x: Any, op: Ops) -> Any:
  return x._from(UOp(Ops.REDUCE_AXIS, x.dtype, (x.uop,), (op, (1,)))).reshape(-1)


@dataclass
class Segment:
  """One cell's share of a batch: `build(tensors)` gives its lanes; `operands(tensors)` names the input values each
  lane saw, for the report (numpy arrays, one per operand, each as long as the segment)."""
  row: str
  column: str
  build: Callable[[tuple], Any]
  operands: Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass
class Batch:
  """Segments with one output dtype, concatenated into one kernel's output."""
  label: str
  inputs: list[np.ndarray]
  segments: list[Segment]
  dtypes: tuple[DType, ...]

  @property
  def rows(self) -> set[str]:
    return {s.row for s in self.segments}

  def program(self, sizes: list[int]) -> Callable[..., Any]:
    def run(*tensors: Any) -> Any:
      parts = [segment.build(tensors).reshape(-1) for segment in self.segments]
      sizes[:] = [p.shape[0] for p in parts]
      return parts[0].cat(*parts[1:]) if len(parts) > 1 else parts[0]
    return run

  def run(self, device: str) -> UnitOutcome:
    sizes: list[int] = []
    report = check_against_reference(self.program(sizes), *self.inputs, device=device, raise_on_mismatch=False,
                                     keep_lanes=True)
    programs = [k.program for k in report.kernels if k.program is not None]
    earlier = next((k for k in report.kernels[:-1] if not k.ok), None)
    if earlier is not None:  # a kernel before the output failed: every segment depends on it
      return UnitOutcome([CaseResult(s.row, s.column, FAIL, detail=earlier.explanation) for s in self.segments],
                         programs)
    final, start, results = report.kernels[-1], 0, []
    for segment, size in zip(self.segments, sizes):
      results.append(judge_segment(segment, final, slice(start, start + size), self.inputs))
      start += size
    return UnitOutcome(results, programs)


def judge_segment(segment: Segment, kernel: KernelResult, lanes: slice, inputs: list[np.ndarray]) -> CaseResult:
  """The verdict on one segment's lanes of a batch's output kernel, summed up from the check's verdict on each lane
  (nothing is compared again)."""
  seen = kernel.lanes
  if kernel.rewrite_error:  # the reference itself against the graph evaluator: a rewrite every device shares
    wrong = seen.rewrites.summary(lanes, undefined=seen.verdicts.undefined)  # the lanes the device may differ in
    if not wrong.ok:
      return CaseResult(segment.row, segment.column, FAIL, 0, wrong.checked, wrong.undefined + wrong.unbounded,
                        f"{segment.row} on {segment.column}: {wrong.mismatch_count} of {wrong.checked} lanes of the "
                        f"reference differ from the graph evaluator\n{kernel.rewrite_error}")
  result = seen.verdicts.summary(lanes)
  histogram = seen.verdicts.histogram(lanes) if segment.row in TRANSCENDENTAL_ROWS else {}
  if result.ok:
    return CaseResult(segment.row, segment.column, PASS, result.worst_ulp, result.checked,
                      result.undefined + result.unbounded, ulp_histogram=histogram)
  operands = segment.operands(inputs)
  return CaseResult(segment.row, segment.column, FAIL, result.worst_ulp, result.checked,
                    result.undefined + result.unbounded,
                    explain_segment(segment, result, seen.actual[lanes], seen.expected[lanes], operands,
                                    kernel.explanation), histogram)


def explain_segment(segment: Segment, result: Comparison, actual: np.ndarray, expected: np.ndarray,
                    operands: list[np.ndarray], kernel_explanation: str) -> str:
  lines = [f"{segment.row} on {segment.column}: {result.mismatch_count} of {result.checked} checked lanes differ "
           "from the reference"]
  for lane in result.mismatches:
    shown = ", ".join(repr(o[lane].item() if hasattr(o[lane], "item") else o[lane]) for o in operands)
    ulps = ""
    if result.dtype.kind == "f":
      ulps = f" ({int(ulp_distance(actual[lane:lane + 1], expected[lane:lane + 1])[0])} ulp apart)"
    lines.append(f"  operands ({shown}): device {lane_text(actual, lane)}, reference {lane_text(expected, lane)}{ulps}")
  if kernel_explanation:  # which kernel of the batch, with which opts
    lines.append("the batch: " + kernel_explanation.splitlines()[0])
  source = kernel_explanation.find("kernel source on")
  if source >= 0:
    lines.append("the batch's " + kernel_explanation[source:])
  return "\n".join(lines)


def _pairs(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Every ordered pair of edge values (both operand orders of each pair), bits kept (NaN payloads included)."""
  return np.repeat(edges, len(edges)), np.tile(edges, len(edges))


def _shift_operands(dtype: DType, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  amounts = np.array([0, 1, 3, dtype.bits - 1, dtype.bits, dtype.bits + 1] + ([-1] if dtype.kind == "i" else []),
                     dtype=object).astype(dtype.np)
  return np.repeat(edges, len(amounts)), np.tile(amounts, len(edges))


# ---- primitive ops over every edge pair
def op_batches(dtype: DType) -> list[Batch]:
  """Every op of `dtype`: unary ops over its edges (transcendentals also over inputs that give every class of
  result), binary ops and WHERE over every ordered edge pair, shifts over every amount class. One batch per output
  dtype (comparisons give bool)."""
  edges = dtype_edges(dtype)
  a, b = _pairs(edges)
  shift_a, shift_b = _shift_operands(dtype, edges) if dtype.kind in "iu" else (edges[:0], edges[:0])
  cond = np.arange(len(a)) % 3 == 0
  inputs = [edges, a, b, cond, shift_a, shift_b]
  segments: dict[DType, list[Segment]] = {}
  for op, facts in OP_FACTS.items():
    if dtype.kind not in facts.kinds:
      continue
    if facts.transcendental:  # the edges, and inputs whose results are subnormal, tiny, near overflow or exact
      inputs.append(np.concatenate([edges, result_class_inputs(op, dtype)]))
      i = len(inputs) - 1
      build, operands = (lambda t, op=op, i=i: alu(op, t[i])), (lambda x, i=i: [x[i]])
    elif op in GroupOp.Unary:
      build, operands = (lambda t, op=op: alu(op, t[0])), (lambda x: [x[0]])
    elif op is Ops.WHERE:
      build, operands = (lambda t: alu(Ops.WHERE, t[3], t[1], t[2])), (lambda x: [x[3], x[1], x[2]])
    elif op in (Ops.SHL, Ops.SHR):
      build, operands = (lambda t, op=op: alu(op, t[4], t[5])), (lambda x: [x[4], x[5]])
    else:
      build, operands = (lambda t, op=op: alu(op, t[1], t[2])), (lambda x: [x[1], x[2]])
    segments.setdefault(result_dtype(op, (dtype,)), []).append(Segment(op.name, dtype.name, build, operands))
  return [Batch(f"{dtype.name} ops" if out == dtype else f"{dtype.name} comparisons", inputs, group,
                (dtype, out)) for out, group in segments.items()]


# ---- conversions
def cast_batches(dst: DType, kinds: list[DType]) -> list[Batch]:
  """CASTs to `dst` from every other dtype (narrowing ones at their rounding boundaries), BITCASTs to `dst` from
  every other dtype of its width, and Tensor.bitcast to `dst` from the other widths (shifts and casts through the
  unsigned types, in a batch of its own: a device without those types cannot run it but still runs the rest)."""
  sources = [s for s in kinds if s != dst]
  casts = Batch(f"CAST->{dst.name}", [cast_values(s, dst) for s in sources],
                [Segment(f"CAST->{dst.name}", s.name, lambda t, i=i: cast(t[i], dst), lambda x, i=i: [x[i]])
                 for i, s in enumerate(sources)], (dst, *sources))
  if dst == dtypes.bool:
    return [casts]
  bitcastable = [s for s in sources if s != dtypes.bool]
  same_width = [s for s in bitcastable if s.itemsize == dst.itemsize]
  resized = [s for s in bitcastable if s.itemsize != dst.itemsize]
  batches = [casts]
  if same_width:
    batches.append(Batch(f"BITCAST->{dst.name}", [dtype_edges(s) for s in same_width],
                         [Segment(f"BITCAST->{dst.name}", s.name, lambda t, i=i: cast(t[i], dst, Ops.BITCAST),
                                  lambda x, i=i: [x[i]]) for i, s in enumerate(same_width)], (dst, *same_width)))
  if resized:
    unsigned = {UNSIGNED_OF_SIZE[d.itemsize] for d in (dst, *resized)}
    batches.append(Batch(f"BITCAST->{dst.name} between item sizes", [_whole_groups(s, dst) for s in resized],
                         [Segment(f"BITCAST->{dst.name}", s.name, lambda t, i=i: t[i].bitcast(dst),
                                  lambda x, i=i, s=s: _bitcast_operands(x[i], s, dst)) for i, s in enumerate(resized)],
                         (dst, *resized, *sorted(unsigned))))
  return batches


def _whole_groups(src: DType, dst: DType) -> np.ndarray:
  """src's edge values and random ones (an edge's pieces are mostly all-zero or all-one bytes), repeated up to a
  whole number of dst elements when dst is the wider."""
  values = np.concatenate([dtype_edges(src), _random_values(src, RANDOM_BITCAST_LANES, np.random.default_rng(5))])
  ratio = max(dst.itemsize // src.itemsize, 1)
  return np.resize(values, -(-len(values) // ratio) * ratio)


def _bitcast_operands(x: np.ndarray, src: DType, dst: DType) -> list[np.ndarray]:
  """The source elements behind each lane of a bitcast between item sizes: the one it is a piece of, or the run of
  elements it joins (one operand per element of the run)."""
  if src.itemsize > dst.itemsize:
    return [np.repeat(x, src.itemsize // dst.itemsize)]
  ratio = dst.itemsize // src.itemsize
  return [x.reshape(-1, ratio)[:, k] for k in range(ratio)]


# ---- reductions
def _reduce_rows(dtype: DType, length: int, rng: np.random.Generator) -> np.ndarray:
  """One row per edge value, that value repeated (all -inf, all NaN, all -0.0, ...), and two rows of mixed edges."""
  edges = dtype_edges(dtype)
  same = np.repeat(edges[:, None], length, axis=1)
  mixed = rng.choice(edges, size=(2, length)) if length else same[:2]
  return np.concatenate([same, mixed.astype(dtype.np)])


def reduce_batches(dtype: DType) -> list[Batch]:
  """ADD, MUL and MAX (and min() through the Tensor API) over rows of every length in REDUCE_LENGTHS: the short ones
  in one kernel, the long ones in another of their own, so that a device's heuristic may choose its path for long
  rows (a GPU's grouped reduction) as it would for a real one."""
  rng = np.random.default_rng(7)
  rows = {n: _reduce_rows(dtype, n, rng) for n in REDUCE_LENGTHS}
  short = [n for n in REDUCE_LENGTHS if n < LONG_ROWS]
  return [_reduce_batch(dtype, lengths, rows, label) for lengths, label in
          ((short, f"reductions {dtype.name}"), ([n for n in REDUCE_LENGTHS if n not in short],
                                                 f"long reductions {dtype.name}"))]


LONG_ROWS = 1024  # rows this long or longer reduce in a kernel of their own (longer than a work-group)


def _reduce_batch(dtype: DType, lengths: list[int], rows: dict[int, np.ndarray], label: str) -> Batch:
  inputs = [rows[n] for n in lengths]
  first_value = lambda x, i: [x[i][:, 0] if x[i].shape[1] else np.zeros(len(x[i]), x[i].dtype)]  # noqa: E731
  segments = [Segment(f"REDUCE {op.name}", dtype.name, lambda t, i=i, op=op: reduce(t[i], op),
                      lambda x, i=i: first_value(x, i)) for op in (Ops.ADD, Ops.MUL, Ops.MAX)
              for i in range(len(lengths))]
  segments += [Segment("min() over rows", dtype.name, lambda t, i=i: t[i].min(1), lambda x, i=i: first_value(x, i))
               for i, n in enumerate(lengths) if n > 0]
  return Batch(label, inputs, segments, (dtype,))


def exact_sum_rows(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
  """Rows of a dot product whose sum is the same in every order (every partial sum exact), so it is judged bit for
  bit, but moves if a product is not rounded before it is added (a multiply-add fused into the reduction): products
  p*p = 1 + 2^(1-k) + 2^-2k with k = ceil(digits / 2), which round to r = 1 + 2^(1-k), against products of exactly
  -r; 8 of these, then 9 of those. Blocked (the -r first: a serial or strided sum meets a -r just before a p*p, where
  the fused result keeps 2^-2k) and interleaved (so does every contiguous split)."""
  digits = int(ml_dtypes.finfo(dtype.np).nmant) + 1
  k = (digits + 1) // 2
  p, r = 1 + 2.0 ** -k, 1 + 2.0 ** (1 - k)
  blocked = ([-r] * 8 + [p] * 9, [1.0] * 8 + [p] * 9)
  interleaved = ([-r, p] * 8 + [p], [1.0, p] * 8 + [p])
  a, b = (np.array([blocked[i], interleaved[i]], dtype=np.float64).astype(dtype.np) for i in (0, 1))
  return a, b


def exact_sum_batch(dtype: DType) -> Batch:
  """The REDUCE ADD of products over exact_sum_rows: the reference's bits, in any summation order."""
  a, b = exact_sum_rows(dtype)
  segment = Segment("REDUCE ADD of products, exact in every order", dtype.name,
                    lambda t: reduce(alu(Ops.MUL, t[0], t[1]), Ops.ADD), lambda x: [x[0][:, 0], x[1][:, 0]])
  return Batch(f"exact sums {dtype.name}", [a, b], [segment], (dtype,))


# ---- chains of ops, constants, loop-invariant operands
# (name, dtype kinds, function of (a, b, c, s) where s holds one value for every lane): what compilers rewrite.
# Fast-math style rewrites each break one: x/3 -> x*(1/3), (x+1)+2 -> x+3, x+0.0 -> x, a*b+c -> fma(a,b,c),
# x-x -> 0, x*0.0 -> 0, (x*2)*0.5 -> x, 1/(1/x) -> x; half/bfloat16 results must round after every op; and
# integer overflow must wrap: a<a+1 -> True and (a*2)//2 -> a are wrong at the extremes.
CHAINS: list[tuple[str, str, Callable[..., Any]]] = [
  ("a*b+c", "iuf", lambda a, b, c, s: alu(Ops.ADD, alu(Ops.MUL, a, b), c)),
  ("(a+b)*c", "iuf", lambda a, b, c, s: alu(Ops.MUL, alu(Ops.ADD, a, b), c)),
  ("a*b+c*b", "iuf", lambda a, b, c, s: alu(Ops.ADD, alu(Ops.MUL, a, b), alu(Ops.MUL, c, b))),
  ("(a+1)+2", "iuf", lambda a, b, c, s: alu(Ops.ADD, alu(Ops.ADD, a, const(a, 1)), const(a, 2))),
  ("a+0", "iuf", lambda a, b, c, s: alu(Ops.ADD, a, const(a, 0))),
  ("a+(-0.0)", "f", lambda a, b, c, s: alu(Ops.ADD, a, const(a, -0.0))),
  ("a*0", "iuf", lambda a, b, c, s: alu(Ops.MUL, a, const(a, 0))),
  ("a*1", "iuf", lambda a, b, c, s: alu(Ops.MUL, a, const(a, 1))),
  ("(a*2)*0.5", "f", lambda a, b, c, s: alu(Ops.MUL, alu(Ops.MUL, a, const(a, 2)), const(a, 0.5))),
  ("a-a", "iuf", lambda a, b, c, s: alu(Ops.ADD, a, alu(Ops.NEG, a))),
  ("(a+b)-b", "iuf", lambda a, b, c, s: alu(Ops.ADD, alu(Ops.ADD, a, b), alu(Ops.NEG, b))),
  ("a/3", "f", lambda a, b, c, s: alu(Ops.FDIV, a, const(a, 3))),
  ("a/10", "f", lambda a, b, c, s: alu(Ops.FDIV, a, const(a, 10))),
  ("a/s (s=3 in every lane)", "f", lambda a, b, c, s: alu(Ops.FDIV, a, s)),
  ("1/(1/a)", "f", lambda a, b, c, s: alu(Ops.RECIP, alu(Ops.RECIP, a))),
  ("sqrt(a*a)", "f", lambda a, b, c, s: alu(Ops.SQRT, alu(Ops.MUL, a, a))),
  ("a!=a", "iuf", lambda a, b, c, s: cast(alu(Ops.CMPNE, a, a), a.dtype)),
  ("a<b", "iuf", lambda a, b, c, s: cast(alu(Ops.CMPLT, a, b), a.dtype)),
  ("max(a,0)", "iuf", lambda a, b, c, s: alu(Ops.MAX, a, const(a, 0))),
  ("a*b in float32", "f", lambda a, b, c, s: cast(alu(Ops.MUL, cast(a, dtypes.float32), cast(b, dtypes.float32)),
                                                   a.dtype)),
  ("(a*b) to float32 + c", "f", lambda a, b, c, s: cast(alu(Ops.ADD, cast(alu(Ops.MUL, a, b), dtypes.float32),
                                                             cast(c, dtypes.float32)), a.dtype)),
  ("a//3", "iu", lambda a, b, c, s: alu(Ops.IDIV, a, const(a, 3))),
  ("a%7", "iu", lambda a, b, c, s: alu(Ops.MOD, a, const(a, 7))),
  ("a//s (s=3 in every lane)", "iu", lambda a, b, c, s: alu(Ops.IDIV, a, s)),
  ("(a<<1)>>1", "iu", lambda a, b, c, s: alu(Ops.SHR, alu(Ops.SHL, a, const(a, 1)), const(a, 1))),
  ("(a^b)^b", "iu", lambda a, b, c, s: alu(Ops.XOR, alu(Ops.XOR, a, b), b)),
  # integer overflow wraps (SPEC.md): a compiler that assumes it cannot (C's signed overflow) folds these to a
  # constant and to a
  ("a<a+1", "iu", lambda a, b, c, s: cast(alu(Ops.CMPLT, a, alu(Ops.ADD, a, const(a, 1))), a.dtype)),
  ("(a*2)//2", "iu", lambda a, b, c, s: alu(Ops.IDIV, alu(Ops.MUL, a, const(a, 2)), const(a, 2))),
  # multiplies that wrap, in both operand orders: an optimizer told they cannot (LLVM's nsw/nuw flags) divides
  # them back, widens them before multiplying, or reassociates them
  ("(a*b)//b", "iu", lambda a, b, c, s: alu(Ops.IDIV, alu(Ops.MUL, a, b), b)),
  ("(b*a)//b", "iu", lambda a, b, c, s: alu(Ops.IDIV, alu(Ops.MUL, b, a), b)),
  ("(a*b)*c", "iu", lambda a, b, c, s: alu(Ops.MUL, alu(Ops.MUL, a, b), c)),
  ("(a*3)*5", "iu", lambda a, b, c, s: alu(Ops.MUL, alu(Ops.MUL, a, const(a, 3)), const(a, 5))),
  ("a*b widened, >> (bits-1)", "iu", lambda a, b, c, s: _high_bits(alu(Ops.MUL, a, b))),
  ("b*a widened, >> (bits-1)", "iu", lambda a, b, c, s: _high_bits(alu(Ops.MUL, b, a))),
  ("a*b+c<c", "iu", lambda a, b, c, s: cast(alu(Ops.CMPLT, alu(Ops.ADD, alu(Ops.MUL, a, b), c), c), a.dtype)),
  # constants the dtype holds exactly and no narrower dtype does: a renderer that prints them with too few digits
  # (a float64 constant with float32 precision, an int64 constant as a 32-bit literal) changes them
  ("a*K, K=1/3", "f", lambda a, b, c, s: alu(Ops.MUL, a, const(a, 1 / 3))),
  ("a+K, K=0.1", "f", lambda a, b, c, s: alu(Ops.ADD, a, const(a, 0.1))),
  ("a+K, K=the smallest subnormal", "f", lambda a, b, c, s: alu(Ops.ADD, a, const(a, _finfo(a).smallest_subnormal))),
  ("a*K, K=a third of the largest", "f", lambda a, b, c, s: alu(Ops.MUL, a, const(a, _third_of_largest(a)))),
  ("a+K, K=the largest odd integer", "f",
   lambda a, b, c, s: alu(Ops.ADD, a, const(a, 2.0 ** (_finfo(a).nmant + 1) - 1))),
  ("a*K+L, K and L beyond a narrower int", "iu",
   lambda a, b, c, s: alu(Ops.ADD, alu(Ops.MUL, a, const(a, (1 << (a.dtype.bits - 4)) + 1)),
                          const(a, dtypes.max(a.dtype) - 2))),
]


def _finfo(t: Any) -> Any:
  return ml_dtypes.finfo(t.dtype.np)


def _third_of_largest(t: Any) -> float:
  return float(np.array(float(_finfo(t).max) / 3).astype(t.dtype.np))


def _high_bits(product: Any) -> Any:
  """product (an integer of n bits) widened to 64 bits, shifted right by n-1 and narrowed back: the sign bits of the
  wrapped product, which a widening done before the multiply changes."""
  wide = cast(product, dtypes.int64 if product.dtype.kind == "i" else dtypes.uint64)
  return cast(alu(Ops.SHR, wide, const(wide, product.dtype.bits - 1)), product.dtype)


def _random_values(dtype: DType, n: int, rng: np.random.Generator) -> np.ndarray:
  if dtype.kind == "f":
    magnitude = 10.0 ** rng.integers(-3, 4, n)
    return (rng.standard_normal(n) * magnitude).astype(dtype.np)
  small = rng.integers(-100 if dtype.kind == "i" else 0, 100, n)
  wide = rng.integers(dtypes.min(dtype), dtypes.max(dtype), n, dtype=np.int64 if dtype.kind == "i" else np.uint64,
                      endpoint=True)
  return np.where(np.arange(n) % 2 == 0, small, wide).astype(dtype.np)


def chain_batch(dtype: DType) -> Batch:
  """CHAINS over every edge pair (a, b) with c a rotated copy of a, then RANDOM_LANES random triples."""
  rng = np.random.default_rng(11)
  a, b = _pairs(dtype_edges(dtype))
  a, b = np.concatenate([a, _random_values(dtype, RANDOM_LANES, rng)]), \
    np.concatenate([b, _random_values(dtype, RANDOM_LANES, rng)])
  inputs = [a, b, np.roll(a, 7), np.array(3, dtype=dtype.np)]
  segments = [Segment(f"chain: {name}", dtype.name,
                      lambda t, fn=fn: fn(t[0], t[1], t[2], t[3].reshape(1).expand(t[0].shape)),
                      lambda x: x[:3]) for name, kinds, fn in CHAINS if dtype.kind in kinds]
  return Batch(f"chains {dtype.name}", inputs, segments, (dtype, dtypes.bool, dtypes.float32))


# ---- the Tensor program corpus
def _corpus() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
  rng = np.random.default_rng(1234)
  x = rng.standard_normal((8, 12)).astype(np.float32)
  w = rng.standard_normal((12, 5)).astype(np.float32)
  img = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
  kern = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  ints = rng.integers(-1000, 1000, (6, 10)).astype(np.int32)
  n = Variable("rows", 1, 8).bind(5)  # made here, not at import: until a Variable exists, schedules skip looking
  return {
    "elementwise chain": (lambda t: ((t * 1.5 - 2) * t + 0.25).maximum(t.abs() * 0.5), [x]),
    "transcendentals": (lambda t: t.exp2() + t.abs().log2() + t.sin() + t.abs().sqrt(), [x]),
    "sum and max over axes": (lambda t: t.sum(0) + t.max(0) - t.min(0), [x]),
    "full reductions": (lambda t: t.sum() * t.mean() + t.max(), [x]),
    "matmul": (lambda a, b: a @ b, [x, w]),
    "conv via windows": (lambda i, k: _conv2d(i, k), [img, kern]),
    "indexing and padding": (lambda t: t[1:7:2, ::-3].pad(((1, 2), (3, 0))) + t[::-1][:6, 4:8].flip(1).sum(), [x]),
    "integer arithmetic": (lambda t: (t // 7) * 3 + t % 5 - (t >> 2) ^ (t << 1), [ints]),
    "updates in place": (_update_in_place, [x, x[::-1].copy()]),
    "argmax and comparisons": (lambda t: t.argmax(1) + (t > 0).sum(1), [x]),
    "random-looking hash": (lambda t: ((t.cast(dtypes.uint32) * 2654435761) ^ (t.cast(dtypes.uint32) >> 13)), [ints]),
    # over two instances of the device: each part's kernels, the copies and all-reduces between them
    "sharded sums and maxima": (lambda t: _sharded(t, 0).sum(0) * _sharded(t, 1).max(1).sum(), [x]),
    "sharded matmul, gathered": (lambda a, b: (_sharded(a, 0) @ _sharded(b, None)).to("PYTHON"), [x, w]),
    "sharded integers, resharded": (lambda t: (_sharded(t, 1) * 3 + _sharded(t, 0)).sum(1), [ints]),
    # sizes known only at launch: kernels compiled for a Variable, run with a bound value below its largest
    "symbolic rows": (lambda t: _rows(t, n).sum(0) * _rows(t, n).max(0) + _rows(t, n).mean(), [x]),
    "symbolic reshape and pad": (lambda t: _rows(t, n).T.reshape(12 * n).exp().reshape(12, n)
                                 .pad((None, (1, 8 - n))).sum(1), [x]),
  }


def _update_in_place(a: Any, b: Any) -> Any:
  """Writes into a slice of one argument and all of the other, then reads both: a jit replay must land each write in
  the tensors of its own call."""
  a[1:5] = a[1:5] * b[1:5] + 1
  b += a
  return (a * b).sum(0)


def _heuristic_corpus() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
  """Programs at the sizes where the kernel optimizer's heuristic (codegen/opt.py, default_opts) takes each of its
  branches on a CPU device, so the opts it chooses (a 16-wide tile on an 8-lane device, threads) are checked as the
  device runs them; the corpus above is too small to leave the unoptimized branch."""
  rng = np.random.default_rng(4321)
  square = rng.standard_normal((256, 256)).astype(np.float32)
  ints = rng.integers(-2 ** 20, 2 ** 20, (256, 256)).astype(np.int32)
  a, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  thin, wide = rng.standard_normal((3, 512)).astype(np.float32), rng.standard_normal((512, 64)).astype(np.float32)
  image = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
  return {
    "heuristic: column sums (a tile of twice the lanes)": (lambda t: t.sum(0), [square]),
    "heuristic: integer column sums and maxima": (lambda t: t.sum(0) + t.max(0), [ints]),
    "heuristic: float64 column sums (a tile of float64 lanes)": (lambda t: t.sum(0), [square.astype(np.float64)]),
    "heuristic: row sums (a split reduction, no tile)": (lambda t: t.sum(1), [square]),
    "heuristic: matmul (two tiles and threads)": (lambda x, w: x @ w, [a, b]),
    "heuristic: a 3-row matmul (a small axis tiled whole)": (lambda x, w: x @ w, [thin, wide]),
    "heuristic: a pooling gradient (an elementwise tile)": (_pooling_gradient, [image]),
  }


def _pooling_gradient(image: Any) -> Any:
  image.requires_grad_()
  return image.max_pool2d(2).sum().gradient(image)[0]


# Programs whose every kernel runs with the largest legal opts of one kind, one per axis: integer reductions unrolled
# and padded (random draws rarely unroll an integer reduce; an unroll that drops an integer lane went unseen).
FORCED_OPTS = ("UNROLL", "PADLOOP")


def _integer_reductions() -> tuple[Callable[..., Any], list[np.ndarray]]:
  rng = np.random.default_rng(77)
  return (lambda a, b: (a.sum(1) * 3 + a.max(1), b.sum(1) - b.max(1)),
          [rng.integers(-1000, 1000, (6, 24)).astype(np.int32), rng.integers(-9, 9, (5, 13)).astype(np.int64)])


def _rows(t: Any, n: Any) -> Any:
  """The first n rows of t (n: a bound Variable)."""
  return t.shrink(((0, n),) + (None,) * (t.ndim - 1))


def _sharded(t: Any, axis: int | None) -> Any:
  """t split along axis (None: copied) over two reference instances, which the check maps to the device's."""
  return t.shard(("PYTHON", "PYTHON:1"), axis=axis)


def _conv2d(image: Any, weight: Any) -> Any:
  """A 3x3 valid convolution from movement ops, sums and a multiply (independent of Tensor.conv2d)."""
  n, c, h, w = image.shape
  o, _, kh, kw = weight.shape
  windows = [image[:, :, i:i + h - kh + 1, j:j + w - kw + 1] for i in range(kh) for j in range(kw)]
  total = None
  for k, win in enumerate(windows):
    term = (win.unsqueeze(1) * weight[:, :, k // kw, k % kw].reshape(1, o, c, 1, 1)).sum(2)
    total = term if total is None else total + term
  return total


# Programs of the corpus that also run jitted: run, captured, then replayed this many times, each call's inputs new.
REPLAYED = ("matmul", "conv via windows", "full reductions", "integer arithmetic", "updates in place")
REPLAYS = 3


def _other_inputs(inputs: list[np.ndarray], count: int) -> list[list[np.ndarray]]:
  """`count` more sets of inputs like these (shapes, dtypes, magnitudes), each different in order and in value (so a
  replay of stale inputs cannot pass by a max or a sum that does not see the order)."""
  rng = np.random.default_rng(99)
  def other(x: np.ndarray, k: int) -> np.ndarray:
    shuffled = rng.permutation(x.reshape(-1)).reshape(x.shape)
    return shuffled * x.dtype.type(1 + 0.25 * k) if x.dtype.kind == "f" else shuffled + x.dtype.type(k)
  return [[other(x, k) for x in inputs] for k in range(1, count + 1)]


# Each corpus program also runs under this many random legal opt lists (refgrad/codegen/opt.py), one row each: the
# device's own heuristic runs in the plain rows, and these prove the optimizer's other choices on the device too.
OPT_DRAWS = 2


@dataclass
class ProgramCase:
  """A corpus program, checked kernel by kernel as a whole (its own row); with `opts_seed`, under random legal opt
  lists drawn from that seed."""
  label: str
  fn: Callable[..., Any]
  inputs: list[np.ndarray]
  dtypes: tuple[DType, ...] = ()
  opts_seed: int | None = None
  replay: bool = False  # run jitted (refgrad/jit.py) on new inputs: replays must give the plain call's bits
  forced: str | None = None  # every kernel under its largest legal opts of this kind (FORCED_OPTS), one per axis

  @property
  def rows(self) -> set[str]:
    return {self.label}

  def run(self, device: str) -> UnitOutcome:
    if self.replay:
      _, lanes = check_jit_replay(self.fn, [self.inputs, *_other_inputs(self.inputs, 1 + REPLAYS)], device)
      return UnitOutcome([CaseResult(self.label, "program", PASS, 0, lanes, 0)], [])
    opts = None
    if self.opts_seed is not None:
      rng = random.Random(self.opts_seed)
      caps = Device[device].caps
      opts = lambda ast: random_kernel_opts(ast, caps, rng)  # noqa: E731
    if self.forced is not None:
      caps = Device[device].caps
      opts = lambda ast: largest_opts(ast, self.forced, caps)  # noqa: E731
    report: ReferenceReport = check_against_reference(self.fn, *self.inputs, device=device, opts=opts)
    return UnitOutcome([CaseResult(self.label, "program", PASS, report.worst_ulp, report.checked,
                                   report.undefined + report.unbounded)],
                       [k.program for k in report.kernels if k.program is not None])


def largest_opts(ast: UOp, kind: str, caps: Any) -> OptList:
  """For each axis of the kernel it applies to, the legal opt of this kind with the largest amount (every reduce loop
  unrolled, for one), each chosen after the ones before it have applied."""
  sink, shape = lowered_kernel(ast)
  chosen: list[Opt] = []
  amounts = heuristic_amounts(caps.upcast_lanes, caps.threads)
  while found := [o for o in legal_opts(sink, amounts) if o.kind == kind and o.axis not in {c.axis for c in chosen}]:
    chosen.append(max(found, key=lambda o: o.amount))
    sink, shape = apply_opts(sink, shape, chosen[-1:])
  return tuple(chosen)


Unit = Batch | ProgramCase


def all_units(kinds: list[DType] | None = None) -> list[Unit]:
  """Everything `refgrad check` runs, in order: ops, chains, casts, reductions, then the program corpus."""
  kinds = list(kinds or DTYPES_BY_PRIORITY)
  units: list[Unit] = [batch for d in kinds for batch in op_batches(d)]
  units += [chain_batch(d) for d in kinds if d != dtypes.bool]
  units += [batch for d in kinds for batch in cast_batches(d, kinds)]
  units += [batch for d in kinds if d != dtypes.bool for batch in reduce_batches(d)]
  units += [exact_sum_batch(d) for d in kinds if dtypes.is_float(d)]
  units += [ProgramCase(name, fn, inputs) for name, (fn, inputs) in _corpus().items()]
  units += [ProgramCase(f"{name}, opts draw {draw}", fn, inputs, opts_seed=draw)
            for name, (fn, inputs) in _corpus().items() for draw in range(1, OPT_DRAWS + 1)]
  units += [ProgramCase(f"{name}, jit replay", fn, inputs, replay=True)
            for name, (fn, inputs) in _corpus().items() if name in REPLAYED]
  units += [ProgramCase(name, fn, inputs, tuple(dict.fromkeys(from_numpy(x.dtype) for x in inputs)))
            for name, (fn, inputs) in _heuristic_corpus().items()]
  units += [ProgramCase(f"integer reductions, opts: {kind} of every kernel", *_integer_reductions(), forced=kind)
            for kind in FORCED_OPTS]
  return units


def _cells(unit: Unit) -> list[tuple[str, str]]:
  return [(s.row, s.column) for s in unit.segments] if isinstance(unit, Batch) else [(unit.label, "program")]


def run_unit(unit: Unit, device: str) -> UnitOutcome:
  """Run one batch or program on `device`; a dtype it does not declare makes every cell unsupported, and a crash
  of the device fails every cell with its message."""
  undeclared = [d.name for d in dict.fromkeys(unit.dtypes) if d not in Device[device].caps.dtypes]
  if undeclared:
    detail = f"{', '.join(undeclared)} not in Capabilities.dtypes"
    return UnitOutcome([CaseResult(row, column, UNSUPPORTED, detail=detail) for row, column in _cells(unit)])
  try:
    outcome = unit.run(device)
  except ReferenceMismatch as e:
    status, detail = FAIL, str(e)
  except NotImplementedError as e:
    status, detail = UNSUPPORTED, str(e)
  except Exception as e:  # a crash of the device under test is a failure with its message
    status, detail = FAIL, f"{type(e).__name__}: {e}"
  else:
    paths = sorted(code_paths(device, outcome.programs))
    for result in outcome.results:
      result.paths = paths
    return outcome
  return UnitOutcome([CaseResult(row, column, status, detail=detail) for row, column in _cells(unit)])


def merge(results: list[CaseResult]) -> list[CaseResult]:
  """One result per (row, column): a cell checked in several batches (reduction lengths) adds up."""
  cells: dict[tuple[str, str], CaseResult] = {}
  for r in results:
    seen = cells.get((r.row, r.column))
    if seen is None:
      cells[(r.row, r.column)] = CaseResult(**asdict(r))
      continue
    seen.status = FAIL if FAIL in (seen.status, r.status) else seen.status
    seen.worst_ulp, seen.checked, seen.skipped = max(seen.worst_ulp, r.worst_ulp), seen.checked + r.checked, \
      seen.skipped + r.skipped
    seen.detail = "\n\n".join(d for d in (seen.detail, r.detail) if d)
    seen.paths = sorted(set(seen.paths) | set(r.paths))
    add_histogram(seen.ulp_histogram, r.ulp_histogram)
  return list(cells.values())


def code_paths(device: str, programs: list[Program]) -> Counter[str]:
  """Which of the device's code paths these programs (as they ran) took, as its renderer reports them (an optional
  `code_paths(program)` method: split reductions, remainder loops, grouped reductions, each opt and its amount,
  ...)."""
  report = getattr(Device[device].renderer, "code_paths", None)
  found: Counter[str] = Counter()
  if report is not None:
    for program in programs:
      found.update(report(program))
  return found


@dataclass
class CheckRun:
  device: str
  results: list[CaseResult]
  paths: Counter[str]
  reports_paths: bool  # the device's renderer reports code paths
  seconds: float


def run_conformance(device: str, progress: Callable[[int, int, Unit], None] | None = None,
                    only: str | None = None, stop_on_failure: bool = False) -> CheckRun:
  """Run every unit (those with a row containing `only`, if given) on `device`; with `stop_on_failure`, stop
  after the first unit with a failing cell."""
  device = Device.canonicalize(device)
  started = time.perf_counter()
  units = [u for u in all_units() if only is None or any(only in row for row in u.rows)]
  results, programs = [], []
  for i, unit in enumerate(units):
    if progress:
      progress(i, len(units), unit)
    outcome = run_unit(unit, device)
    results += outcome.results
    programs += outcome.programs
    if stop_on_failure and any(r.status == FAIL for r in outcome.results):
      break
  reports = getattr(Device[device].renderer, "code_paths", None) is not None
  return CheckRun(device, merge(results), code_paths(device, programs), reports, time.perf_counter() - started)


# ---- progress
def progress_printer(stream: Any = None) -> Callable[[int, int, Unit], None]:
  """A terminal.ProgressBar over the units: opened at the first unit, closed at the last (a unit is counted when
  it starts, so the bar names the one running)."""
  from refgrad.testing.terminal import ProgressBar  # terminal imports this module
  bar: ProgressBar | None = None

  def show(i: int, total: int, unit: Unit) -> None:
    nonlocal bar
    if bar is None:
      bar = ProgressBar(total, "refgrad check", stream).start()
    bar.advance(label=unit.label)
    if i + 1 == total:
      bar.close()
      bar = None
  return show
