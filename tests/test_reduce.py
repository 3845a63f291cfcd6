"""Reductions, argmax/argmin and matmul against torch (numpy where torch lacks the dtype), and the scheduler's kernel
counts: fusion and laziness."""
import numpy as np
import pytest
import torch
from helpers import NP_DTYPE, TORCH_DTYPE, VIEW_BASES, check, to_numpy, to_torch, torch_ok, view_pair

import refgrad.tensor
from refgrad import Tensor, dtypes
from refgrad.uop import Ops

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

D = dtypes
# What sum and prod return (tinygrad's rule): small ints widen to 32 bits, halves accumulate in float32 but come back
# in their own dtype, everything else keeps its dtype.
SUM_DTYPE = {D.bool: D.int32, D.int8: D.int32, D.int16: D.int32, D.uint8: D.uint32, D.uint16: D.uint32}
ACC_DTYPE = {**SUM_DTYPE, D.float16: D.float32, D.bfloat16: D.float32}
EPS = {D.float16: 2.0 ** -24, D.bfloat16: 2.0 ** -24, D.float32: 2.0 ** -24, D.float64: 2.0 ** -53}  # accumulation


def sample(shape, dtype, seed=0):
  rng = np.random.default_rng(seed)
  if dtype == D.bool:
    return np.asarray(rng.random(shape) < 0.5)
  if dtypes.is_int(dtype):
    info = np.iinfo(NP_DTYPE[dtype])
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=NP_DTYPE[dtype])
  return rng.uniform(-2, 2, shape).astype(NP_DTYPE[dtype])


def norm_axes(axis, ndim):
  if ndim == 0:
    return ()
  axes = range(ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
  return tuple(sorted(a % ndim for a in axes))


def out_shape(shape, axes, keepdim):
  return tuple(1 if i in axes else s for i, s in enumerate(shape) if keepdim or i not in axes)


TORCH_REDUCE = {
  "sum": lambda t, d, acc: torch.sum(t, d, keepdim=True, dtype=acc),
  "prod": lambda t, d, acc: torch.prod(t, d, keepdim=True, dtype=acc),
  "max": lambda t, d, acc: torch.amax(t, d, keepdim=True),
  "min": lambda t, d, acc: torch.amin(t, d, keepdim=True),
}
NUMPY_REDUCE = {
  "sum": lambda a, d, acc: np.sum(a, d, keepdims=True, dtype=acc),
  "prod": lambda a, d, acc: np.prod(a, d, keepdims=True, dtype=acc),
  "max": lambda a, d, acc: np.max(a, d, keepdims=True),
  "min": lambda a, d, acc: np.min(a, d, keepdims=True),
}


def reduce_oracle(a, op, axis, keepdim, dtype):
  """op over the axes one dim at a time (torch's prod takes one dim), accumulating in ACC_DTYPE."""
  acc = ACC_DTYPE.get(dtype, dtype) if op in ("sum", "prod") else dtype
  axes = norm_axes(axis, a.ndim)
  if torch_ok(dtype, acc):
    x = to_torch(a).to(TORCH_DTYPE[acc]) if op in ("sum", "prod") else to_torch(a)
    for d in axes:
      x = TORCH_REDUCE[op](x, d, TORCH_DTYPE[acc])
  else:
    x = a.astype(NP_DTYPE[acc])
    for d in axes:
      x = NUMPY_REDUCE[op](x, d, NP_DTYPE[acc])
  return to_numpy(x).reshape(out_shape(a.shape, axes, keepdim))


def reduce_tolerance(a, op, axis, keepdim, dtype):
  """(ulp, atol) for float results: the summation bound n * eps * sum|x| of docs/SPEC.md, products n * eps relative;
  half results also get the one rounding to their dtype."""
  if not dtypes.is_float(dtype) or op in ("max", "min"):
    return 0, 0.0
  axes = norm_axes(axis, a.ndim)
  n = int(np.prod([a.shape[i] for i in axes]))
  if op == "prod":
    return 2 * n + 1, 0.0
  abs_sum = np.abs(a.astype(np.float64)).sum(axis=axes, keepdims=True).reshape(out_shape(a.shape, axes, keepdim))
  atol = n * EPS[dtype] * abs_sum
  return (1 if dtype.itemsize == 2 else 0), (atol / max(n, 1) if op == "mean" else atol)


def run_reduce(t, op, axis, keepdim):
  return getattr(t, op)(axis=axis, keepdim=keepdim)


SHAPE_AXES = [((5,), [None, 0, -1, (0,)]), ((3, 4), [None, 0, 1, -1, (0, 1), (-1, 0)]),
              ((2, 3, 4), [None, 1, -2, (0, 2), (2, 0, 1)]), ((2, 0, 3), [None, 0, 1, -1, (0, 1), (1, 2)]),
              ((), [None, 0, -1])]
CASES = [(shape, axis) for shape, axes in SHAPE_AXES for axis in axes]


def empty_reduction(shape, axis):
  return len(shape) > 0 and np.prod([shape[i] for i in norm_axes(axis, len(shape))]) == 0


def with_ops(cases, ops=("sum", "prod", "max", "min")):
  """(op, shape, axis) for every case; max and min over nothing (the dtype's extremes) have a test of their own."""
  return [(op, shape, axis) for op in ops for shape, axis in cases
          if not (op in ("max", "min") and empty_reduction(shape, axis))]


AXES_CASES = with_ops(CASES)


@pytest.mark.parametrize("dtype", [D.float32, D.int32], ids=["float32", "int32"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op, shape, axis", AXES_CASES, ids=[f"{o}-{s}-{a}" for o, s, a in AXES_CASES])
def test_reduce_axes(op, shape, axis, keepdim, dtype):
  a = sample(shape, dtype)
  ulp, atol = reduce_tolerance(a, op, axis, keepdim, dtype)
  check(run_reduce(Tensor(a), op, axis, keepdim), reduce_oracle(a, op, axis, keepdim, dtype), dtype, ulp=ulp,
        atol=atol)


EMPTY_EXTREMES = [(D.float32, -np.inf), (D.float16, -np.inf), (D.int32, np.iinfo(np.int32).min),
                  (D.uint8, 0), (D.int8, -128), (D.bool, False)]


@pytest.mark.parametrize("dtype, lowest", EMPTY_EXTREMES, ids=[d.name for d, _ in EMPTY_EXTREMES])
@pytest.mark.parametrize("shape, axis", [((0,), None), ((2, 0), 1), ((0, 3), 0), ((2, 0, 3), (0, 1))])
def test_max_and_min_over_nothing_are_the_dtype_extremes(dtype, lowest, shape, axis):
  """As tinygrad: max over no element is the dtype's smallest value (min its largest), numpy's `initial`; torch
  raises instead (docs/architecture.md)."""
  a = np.zeros(shape, NP_DTYPE[dtype])
  highest = np.inf if lowest == -np.inf else (True if dtype == D.bool else np.iinfo(NP_DTYPE[dtype]).max)
  np.testing.assert_array_equal(Tensor(a).max(axis).numpy(), np.max(a, axis, initial=lowest))
  np.testing.assert_array_equal(Tensor(a).min(axis).numpy(), np.min(a, axis, initial=highest))
  assert Tensor(a).max(axis).dtype == dtype


REDUCE_DTYPES = [D.bool, D.int8, D.int16, D.uint8, D.uint16, D.uint32, D.int64, D.uint64, D.float16, D.bfloat16,
                 D.float64]
DTYPE_CASES = with_ops([((3, 40), None), ((3, 40), 1), ((2, 3, 4), (0, 2)), ((2, 0, 3), 1)])


@pytest.mark.parametrize("dtype", REDUCE_DTYPES, ids=[d.name for d in REDUCE_DTYPES])
@pytest.mark.parametrize("op, shape, axis", DTYPE_CASES, ids=[f"{o}-{s}-{a}" for o, s, a in DTYPE_CASES])
def test_reduce_dtypes(op, shape, axis, dtype):
  a = sample(shape, dtype, seed=1)
  if op == "prod" and dtypes.is_float(dtype):
    a = (np.sign(a) * (1 + a.astype(np.float64) / 40)).astype(NP_DTYPE[dtype])  # keep products in range
  out = SUM_DTYPE.get(dtype, dtype) if op in ("sum", "prod") else dtype
  ulp, atol = reduce_tolerance(a, op, axis, False, dtype)
  check(run_reduce(Tensor(a), op, axis, False), reduce_oracle(a, op, axis, False, dtype), out, ulp=ulp, atol=atol)


MEAN_DTYPES = [D.float32, D.float64, D.float16, D.bfloat16, D.int8, D.uint32, D.bool]


@pytest.mark.parametrize("dtype", MEAN_DTYPES, ids=[d.name for d in MEAN_DTYPES])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape, axis", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_mean(shape, axis, keepdim, dtype):
  a = sample(shape, dtype, seed=2)
  out = dtype if dtypes.is_float(dtype) else D.float32
  axes = norm_axes(axis, a.ndim)
  want = torch.from_numpy(a.astype(np.float64)).mean(dim=axes, keepdim=keepdim) if axes else torch.from_numpy(
    a.astype(np.float64))
  ulp, atol = reduce_tolerance(a, "mean", axis, keepdim, out)
  ulp = 2 if out.itemsize == 2 else 1  # the final division rounds once more (twice for halves: sum, then divide)
  with np.errstate(invalid="ignore"):
    check(Tensor(a).mean(axis=axis, keepdim=keepdim), want.numpy().astype(NP_DTYPE[out]), out, ulp=ulp, atol=atol)


def test_sum_wraps_in_accumulator():
  a = np.full(300, 120, np.int8)
  check(Tensor(a).sum(), torch.tensor(a).sum(dtype=torch.int32), D.int32)  # 36000 needs the int32 accumulator
  b = np.full((3, 2), 2**31 - 1, np.int32)
  check(Tensor(b).sum(0), torch.tensor(b).sum(0, dtype=torch.int32), D.int32)  # wraps like torch's int32 sum


def test_half_sum_accumulates_in_float32():
  a = np.full(4096, 1.0, np.float16)  # a float16 accumulator would stop at 2048
  check(Tensor(a).sum(), torch.tensor(a).sum(dtype=torch.float32).half(), D.float16)
  b = np.full(1000, 0.01, np.float32).astype(NP_DTYPE[D.bfloat16])
  check(Tensor(b).sum(), to_torch(b).sum(dtype=torch.float32).bfloat16(), D.bfloat16, ulp=1)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reduce_nan_and_inf(axis):
  a = np.array([[1.0, np.nan, -np.inf], [2.0, 3.0, np.inf], [-0.0, 5.0, 4.0]], np.float32)
  ta = torch.from_numpy(a)
  dims = (0, 1) if axis is None else axis
  check(Tensor(a).max(axis), torch.amax(ta, dims), D.float32)
  check(Tensor(a).min(axis), torch.amin(ta, dims), D.float32)
  check(Tensor(a).sum(axis), torch.sum(ta, dims), D.float32)
  check(Tensor(a).argmax(axis), torch.argmax(ta, axis), D.int32)
  check(Tensor(a).argmin(axis), torch.argmin(ta, axis), D.int32)


# the views of helpers.VIEW_BASES (shape (2, 3, 4)), over random values
@pytest.mark.parametrize("view", [base for base in VIEW_BASES if base != "contiguous"])
@pytest.mark.parametrize("op, axis", [("sum", None), ("sum", 1), ("max", (0, 2)), ("min", -1), ("argmax", 1),
                                      ("argmin", None), ("mean", 0)])
def test_reduce_on_views(view, op, axis):
  t, tt = view_pair(view, values=np.random.default_rng(7).standard_normal(120))
  dims = tuple(range(3)) if axis is None else axis
  want = {"sum": lambda: tt.sum(dims), "max": lambda: tt.amax(dims), "min": lambda: tt.amin(dims),
          "argmax": lambda: tt.argmax(axis).int(), "argmin": lambda: tt.argmin(axis).int(),
          "mean": lambda: tt.mean(dims)}[op]()
  check(getattr(t, op)(axis), want, dtypes.int32 if op.startswith("arg") else dtypes.float32, ulp=1, atol=1e-5)


def test_reduce_chains():
  a = np.random.default_rng(8).standard_normal((4, 6)).astype(np.float32)
  t, tt = Tensor(a), torch.from_numpy(a)
  check((t - t.max(1, keepdim=True)).exp().sum(1).log(), (tt - tt.amax(1, keepdim=True)).exp().sum(1).log(), D.float32,
        ulp=4, atol=1e-6)
  check((t.sum(0) * 2).max() + t.min(), (tt.sum(0) * 2).max() + tt.min(), D.float32, atol=1e-5)
  check(t.sum(1).reshape(2, 2).T @ t[:2], tt.sum(1).reshape(2, 2).T @ tt[:2], D.float32, atol=1e-4)


def test_realize_several_tensors():
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  t, tt = Tensor(a), torch.from_numpy(a)
  s, m = t.sum(0), (t * 2).max(1)
  assert s.realize(m) is s
  assert s.schedule() == [] and m.schedule() == []
  check(s, tt.sum(0, dtype=torch.int32), D.int32)
  check(m, (tt * 2).amax(1), D.int32)


# ---- argmax / argmin: first index of the extreme value, int32
ARG_CASES = [((5,), None), ((5,), 0), ((3, 4), None), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 4), -3),
             ((2, 0, 3), -1), ((), None), ((), 0)]
ARG_DTYPES = [D.float32, D.float16, D.int8, D.uint8, D.int64, D.uint32, D.bool]


@pytest.mark.parametrize("dtype", ARG_DTYPES, ids=[d.name for d in ARG_DTYPES])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape, axis", ARG_CASES, ids=[f"{s}-{a}" for s, a in ARG_CASES])
def test_argmax_argmin(shape, axis, op, keepdim, dtype):
  rng = np.random.default_rng(3)
  a = rng.integers(0, 2 if dtype == D.bool else 4, shape).astype(NP_DTYPE[dtype])  # few values: many ties
  if torch_ok(dtype) and dtype != D.bool:
    want = getattr(torch, op)(to_torch(a), axis, keepdim)
  else:  # numpy also returns the first index
    want = getattr(np, op)(a, axis, keepdims=keepdim)
  check(getattr(Tensor(a), op)(axis, keepdim), to_numpy(want).astype(np.int32), D.int32)


# ---- matmul
MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                 ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,)), ((0, 3), (3, 2)),
                 ((2, 0), (0, 3)), ((1, 17), (17, 1))]
MATMUL_DTYPES = [D.float32, D.float64, D.float16, D.int32, D.int8]


def matmul_tolerance(a, b, dtype):
  """(ulp, atol): sums accumulate in float32/float64 (K * eps), the result rounds once more. (Half products are exact
  in float32 now; the bound keeps float16's looser eps.)"""
  if not dtypes.is_float(dtype):
    return 0, 0.0
  eps = 2.0 ** -11 if dtype == D.float16 else EPS[dtype]
  abs_product = to_numpy(torch.matmul(torch.from_numpy(np.abs(a.astype(np.float64))),
                                      torch.from_numpy(np.abs(b.astype(np.float64)))))
  return 1, (a.shape[-1] + 1) * eps * abs_product


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=[d.name for d in MATMUL_DTYPES])
@pytest.mark.parametrize("sa, sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
def test_matmul(sa, sb, dtype):
  a, b = sample(sa, dtype, seed=4), sample(sb, dtype, seed=5)
  want = torch.matmul(to_torch(a), to_torch(b))
  ulp, atol = matmul_tolerance(a, b, dtype)
  check(Tensor(a) @ Tensor(b), want, dtype, ulp=ulp, atol=atol)
  check(Tensor(a).matmul(Tensor(b)), want, dtype, ulp=ulp, atol=atol)
  check(Tensor(a).dot(Tensor(b)), want, dtype, ulp=ulp, atol=atol)


def test_matmul_promotes():
  a, b = sample((2, 3), D.int8), sample((3, 2), D.float16)
  want = torch.matmul(torch.from_numpy(a).half(), torch.from_numpy(b))
  ulp, atol = matmul_tolerance(a, b, D.float16)
  check(Tensor(a) @ Tensor(b), want, D.float16, ulp=ulp, atol=atol)


@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16], ids=["float16", "bfloat16"])
def test_half_matmul_conv_and_einsum_multiply_in_float32_like_torch(dtype):
  """Products past half's range (300 * 300 > 65504) are exact in float32, as torch's, and the result rounds once:
  [300, 300] @ [300, -299] was NaN in float16 (inf - inf; torch: 300), and bfloat16 products rounded to 8 bits."""
  a = np.array([[300.0, 300.0, 0.5], [1000.0, -1000.0, 3.0]], np.float32)
  b = np.array([[300.0, 7.0], [-299.0, 0.25], [1.5, -3.0]], np.float32)
  ta, tb = (torch.from_numpy(v).to(TORCH_DTYPE[dtype]) for v in (a, b))
  x, w = Tensor(a).cast(dtype), Tensor(b).cast(dtype)
  want = (ta.double() @ tb.double()).to(ta.dtype)
  check(x @ w, want, dtype)
  check(Tensor.einsum("ij,jk->ik", x, w), want, dtype)
  conv = x.reshape(2, 3, 1).conv2d(w.T.reshape(2, 3, 1))  # (N=2, C=3, L=1) with 2 output channels of kernel 1
  check(conv.reshape(2, 2), want, dtype)


def test_matmul_non_contiguous():
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  ta, t = torch.from_numpy(a), Tensor(a)
  check(t.T[::2] @ t[:, 1:4], ta.T[::2] @ ta[:, 1:4], D.float32)
  check(t[:1].expand(3, 6) @ t.T.flip(0), ta[:1].expand(3, 6) @ ta.T.flip(0), D.float32)


# ---- laziness and fusion
@pytest.fixture
def abc():
  rng = np.random.default_rng(6)
  arrays = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
  return [Tensor(x) for x in arrays], [torch.from_numpy(x) for x in arrays]


def test_fused_multiply_add_sum_is_one_kernel(abc):
  (a, b, c), (ta, tb, tc) = abc
  out = (a * b + c).sum()
  assert len(out.schedule()) == 1
  check(out, (ta * tb + tc).sum(), D.float32, atol=1e-5)


def test_elementwise_chain_is_one_kernel(abc):
  (a, b, c), (ta, tb, tc) = abc
  out = (((a + b) * c - a).maximum(b) / 3).exp().sqrt().neg()
  assert len(out.schedule()) == 1
  want = -(torch.maximum((ta + tb) * tc - ta, tb) / 3).exp().sqrt()
  check(out, want, D.float32, ulp=8)


def test_movement_then_reduce_is_one_kernel(abc):
  (a, b, _), (ta, tb, _) = abc
  out = (a.T * b.T.flip(0)).sum(1)
  assert len(out.schedule()) == 1
  check(out, (ta.T * tb.T.flip(0)).sum(1), D.float32, atol=1e-5)


def test_nothing_runs_before_realize(abc, monkeypatch):
  (a, b, c), (ta, tb, tc) = abc
  kernels = []  # how many kernels each run_schedule call ran
  real_run = refgrad.tensor.run_schedule
  monkeypatch.setattr(refgrad.tensor, "run_schedule", lambda items: (kernels.append(len(items)), real_run(items)))
  out = (a * b + c).sum(0) * 2
  assert out.shape == (5,) and out.dtype == D.float32
  assert len(out.schedule()) == 1 and sum(kernels) == 0
  assert out.realize() is out and sum(kernels) == 1
  assert out.schedule() == []
  check(out, (ta * tb + tc).sum(0) * 2, D.float32, atol=1e-5)
  assert sum(kernels) == 1  # reading a realized tensor runs nothing more


def test_realize_empties_schedule(abc):
  (a, b, _), _ = abc
  x = a - b.max()  # the max is expanded, so it is realized in its own kernel first
  assert len(x.schedule()) == 2
  x.realize()
  assert len(x.schedule()) == 0 and len((x + 1).schedule()) == 1


def test_softmax_weights_expanded_into_a_matmul_get_a_kernel_of_their_own():
  """softmax(q k^T) v: the weights (an exp) are computed once into a buffer, not once per column of v; the scores
  reduce they read is its own kernel too, shared with the max and the sum rather than computed twice. Below
  SPLIT_MIN_ELEMENTS of recomputation saved, a kernel launch costs more: small attention stays fused."""
  rng = np.random.default_rng(3)
  q, k, v = (rng.standard_normal((2, 32, 16)).astype(np.float32) for _ in range(3))
  out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v))
  shapes = [item.ast.src[0].src[1].shape for item in out.schedule()]
  assert shapes == [(2, 32, 32, 1), (2, 32, 1), (2, 32, 1), (2, 32, 1, 32), (2, 32, 16)]
  want = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)))
  check(out, want, D.float32, atol=1e-5)
  small = Tensor(q[:, :8, :4]).scaled_dot_product_attention(Tensor(k[:, :8, :4]), Tensor(v[:, :8, :4]))
  assert len(small.schedule()) == 4  # the scores, their max, the sum, and the weighted sum with the weights fused in


@pytest.mark.parametrize("rows", [64, 4])
def test_softmax_computes_its_exponentials_once(rows):
  """exp(x - max) is read by the sum (expanded: its own kernel) and by the division: computed once into a buffer
  where that saves 2^14 or more exponentials, fused into both kernels below that."""
  x = np.random.default_rng(5).standard_normal((rows, 512)).astype(np.float32)
  x[0, :3] = 0.0, -0.0, 80.0
  out = Tensor(x).softmax(1)
  exps = [sum(u.op is Ops.EXP2 for u in item.ast.toposort) for item in out.schedule()]
  assert sum(exps) == (1 if rows * 512 >= 1 << 14 else 2)
  check(out, torch.softmax(torch.from_numpy(x), 1), D.float32, atol=1e-6)


def test_a_reduce_several_realized_tensors_need_is_computed_once():
  """Like an optimizer step: two updates read one gradient; the gradient's reduce is one kernel, not one per update."""
  rng = np.random.default_rng(8)
  a, b = rng.standard_normal((512, 32)).astype(np.float32), rng.standard_normal((512, 32)).astype(np.float32)
  grad = (Tensor(a) * Tensor(b)).sum(0)
  first, second = grad * 0.5 + 1, grad * grad
  items = first.schedule(second)
  assert sum(any(u.op is Ops.REDUCE_AXIS for u in item.ast.toposort) for item in items) == 1
  Tensor.realize(first, second)
  g = grad.numpy()
  bound = 512 * 2.0 ** -24 * np.abs(a * b).sum(0, dtype=np.float64)  # SPEC.md's order-free sum bound
  assert np.all(np.abs(g - (a * b).sum(0, dtype=np.float64)) <= bound)
  np.testing.assert_array_equal(first.numpy(), g * np.float32(0.5) + np.float32(1))  # both read that one sum
  np.testing.assert_array_equal(second.numpy(), g * g)


def test_random_bits_expanded_into_a_reduce_are_drawn_once():
  """A dropout-like mask (threefry: about a hundred integer ops per element) feeding a matmul is its own kernel."""
  Tensor.manual_seed(3)
  x, w = Tensor(np.ones((32, 64), np.float32)), Tensor(np.ones((64, 16), np.float32))
  masked = x * (Tensor.rand(32, 64) < 0.5)
  out = masked @ w
  reduce_kernels = [i for i in out.schedule() if any(u.op is Ops.REDUCE_AXIS for u in i.ast.toposort)]
  assert len(reduce_kernels) == 1 and not any(u.op is Ops.XOR for u in reduce_kernels[0].ast.toposort)
  np.testing.assert_array_equal(out.numpy(), masked.numpy() @ np.ones((64, 16), np.float32))


def test_a_padded_input_read_by_every_output_channel_is_padded_once():
  """conv2d with padding: the padded input is one kernel, the convolution reads it without bounds checks; a small
  input (below SPLIT_MIN_ELEMENTS) and a padded value read only once stay fused."""
  rng = np.random.default_rng(4)
  x, w = rng.standard_normal((2, 8, 30, 30)).astype(np.float32), rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
  out = Tensor(x).conv2d(Tensor(w), padding=1)
  shapes = [item.ast.src[0].src[1].shape for item in out.schedule()]
  assert shapes[0] == (2, 8, 32, 32) and len(shapes) == 2
  check(out, torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1), D.float32, atol=1e-4)
  assert len((Tensor(x).pad((1, 1, 1, 1)).sum()).schedule()) == 1  # read once: nothing to gain from a kernel
  assert len(Tensor(x[:, :, :6, :6]).conv2d(Tensor(w), padding=1).schedule()) == 1


@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16, D.float32, D.float64])
@pytest.mark.parametrize("shape,axis", [((), None), ((1,), None), ((2, 1), 1), ((1, 3), 0), ((3,), 0), ((0,), 0)])
def test_sum_of_negative_zeros_is_positive_zero_like_torch(shape, axis, dtype):
  """A sum of -0.0s is +0.0 in torch whatever the length: also for one element (a size-1 axis, a 0-d tensor), where
  no loop runs."""
  data = np.full(shape, -0.0, dtype=np.float32)
  got = Tensor(data).cast(dtype).sum(axis).cast(D.float32).numpy()
  want = torch.tensor(data).to(TORCH_DTYPE[dtype]).sum(axis if axis is not None else tuple(range(len(shape))))
  want = want.float().numpy()
  assert got.shape == want.shape
  np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
  assert not np.signbit(got).any()


I64 = np.int64  # a dim read from an array's shape or computed with numpy
NUMPY_INT_AXES = {
  "sum": (lambda t: t.sum(I64(1)), lambda t: t.sum(1)),
  "max_keepdim": (lambda t: t.max(np.int32(0), keepdim=True), lambda t: t.amax(0, keepdim=True)),
  "mean_tuple": (lambda t: t.mean((I64(0), I64(-1))), lambda t: t.mean((0, -1))),
  "argmax": (lambda t: t.argmax(I64(1)), lambda t: t.argmax(1)),
  "cumsum": (lambda t: t.cumsum(I64(1)), lambda t: t.cumsum(1)),
  "softmax": (lambda t: t.softmax(I64(-1)), lambda t: t.softmax(-1)),
  "std": (lambda t: t.std(I64(0)), lambda t: t.std(0)),
  "logsumexp": (lambda t: t.logsumexp(I64(1)), lambda t: t.logsumexp(1)),
  "layernorm": (lambda t: t.layernorm(I64(-1)), lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5)),
}


@pytest.mark.parametrize("name", list(NUMPY_INT_AXES))
def test_numpy_int_axes(name):
  """A numpy int axis is an axis, as in torch (sum(np.int64(1)) raised "'numpy.int64' object is not iterable")."""
  ours, theirs = NUMPY_INT_AXES[name]
  a = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], np.float32)
  want = theirs(torch.from_numpy(a))
  index_dtype = dtypes.int32  # tinygrad's argmax dtype (torch's int64)
  check(ours(Tensor(a)), want, index_dtype if want.dtype == torch.int64 else dtypes.float32, ulp=4)
