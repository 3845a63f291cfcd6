"""The check's batches: every primitive op over every edge pair, every cast and bitcast at its rounding boundaries,
chains of ops a compiler rewrites, and reductions over rows of edge values. Every cell of the op x dtype matrix that
shares an output dtype is one segment of one kernel, so a dtype's ops compile once; each segment is then judged on
its own lanes of the check's per-lane verdicts."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from refgrad.alu import result_dtype, ulp_distance
from refgrad.dtype import DType, dtypes
from refgrad.frontend.bitcast import UNSIGNED_OF_SIZE
from refgrad.ops import OP_FACTS
from refgrad.testing.conformance.results import FAIL, PASS, CaseResult, UnitOutcome
from refgrad.testing.edges import cast_values, dtype_edges, result_class_inputs
from refgrad.testing.oracle.compare import Comparison
from refgrad.testing.oracle.prepare import PlannedCheck
from refgrad.testing.oracle.reference import KernelResult, check_against_reference, lane_text
from refgrad.uop import GroupOp, Ops, UOp

TRANSCENDENTAL_ROWS = frozenset(op.name for op in GroupOp.Transcendental)  # cells the reports histogram by ULP error
RANDOM_LANES = 512  # random values beside the edges: a bug in a third of the lanes (x/3 as x*(1/3)) shows at once
RANDOM_BITCAST_LANES = 64  # random values beside the edges of a bitcast between item sizes
REDUCE_LENGTHS = (0, 1, 13, 64, 1031)  # empty, one, a prime past 8 (split + remainder), multiple of 8 and 32, > 1024


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

  def one_per_segment(self) -> list[Batch]:
    """The batch as one batch per cell (a device that cannot compute one of its ops still computes the others)."""
    return [Batch(f"{self.label}: {s.row}", self.inputs, [s], self.dtypes) for s in self.segments]

  def planned(self, device: str) -> PlannedCheck:
    """What run checks against the reference, for compiling its kernels ahead."""
    return self.program([]), tuple(self.inputs), None

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


def all_batches(kinds: list[DType]) -> list[Batch]:
  """Every batch over the dtypes `kinds`, in order: ops, chains, casts, reductions, exact sums."""
  batches = [batch for d in kinds for batch in op_batches(d)]
  batches += [chain_batch(d) for d in kinds if d != dtypes.bool]
  batches += [batch for d in kinds for batch in cast_batches(d, kinds)]
  batches += [batch for d in kinds if d != dtypes.bool for batch in reduce_batches(d)]
  return batches + [exact_sum_batch(d) for d in kinds if dtypes.is_float(d)]
