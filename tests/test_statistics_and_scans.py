"""Statistics (var/std with correction), any/all, logsumexp, scans (cumsum, cumprod, cummax, logcumsumexp), triu/tril
and acc_dtype, against torch over shapes with 0-size dims, 0-d tensors, negative axes and non-contiguous views."""
import numpy as np
import pytest
import torch
from helpers import NP_DTYPE, check, to_torch

from refgrad import Tensor, dtypes
from refgrad.frontend import sorting
from refgrad.frontend.reduce import SCAN_BLOCK

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

D = dtypes
EPS32 = 2.0 ** -24


def sample(shape, seed=0, dtype=np.float32):
  return np.asarray(np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype))


def torch_dims(axis, ndim):
  return tuple(range(ndim)) if axis is None else axis


# ---- var / std: the summation bound of docs/SPEC.md on a sum of squares, relative: n * eps for the squares' sum,
# plus the mean's error feeding the deviations (second order), plus the final division: 4 * n * eps relative
VAR_CASES = [((5,), None, False, 1), ((3, 4), 1, True, 0), ((3, 4), -2, False, 2), ((2, 3, 4), (0, 2), True, 1),
             ((2, 0, 3), 1, False, 1), ((4, 1), 1, False, 1), ((), None, False, 0), ((), None, True, 1)]


@pytest.mark.filterwarnings("ignore:var.. degrees of freedom")
@pytest.mark.parametrize("shape, axis, keepdim, correction", VAR_CASES, ids=[str(c) for c in VAR_CASES])
def test_var_std(shape, axis, keepdim, correction):
  a = sample(shape)
  t, tt = Tensor(a), torch.from_numpy(a).double()
  dims = torch_dims(axis, a.ndim)
  n = max(int(np.prod([a.shape[d] for d in ((dims,) if isinstance(dims, int) else dims)])), 1)
  want_var = torch.var(tt, dim=dims, correction=correction, keepdim=keepdim) if a.ndim else \
    torch.var(tt, correction=correction)
  rel = 4 * n * EPS32 + EPS32
  with np.errstate(all="ignore"):
    wv = want_var.numpy().astype(np.float32)
    check(t.var(axis, keepdim, correction), wv, D.float32, atol=rel * np.abs(wv))
    check(t.std(axis, keepdim, correction), np.sqrt(wv), D.float32, atol=rel * np.sqrt(np.abs(wv)))
    v, m = t.var_mean(axis, keepdim, correction)
    check(v, wv, D.float32, atol=rel * np.abs(wv))
    s, m2 = t.std_mean(axis, keepdim, correction)
    want_mean = tt.mean(dim=dims, keepdim=keepdim).numpy().astype(np.float32) if a.ndim else a
    check(m2, want_mean, D.float32, atol=n * EPS32 * 2 + 1e-7)


def test_var_int_input_and_non_contiguous():
  a = np.arange(24, dtype=np.int32).reshape(4, 6)
  check(Tensor(a).var(0), torch.from_numpy(a).double().var(0).float(), D.float32, ulp=2)
  f = sample((4, 6), 1)
  tf = torch.from_numpy(f).double()
  check(Tensor(f).T[::2].std(-1), tf.T[::2].std(-1).float(), D.float32, atol=1e-6)


# ---- any / all
@pytest.mark.parametrize("dtype", [D.bool, D.int8, D.uint32, D.float32, D.float16], ids=lambda d: d.name)
def test_any_all(dtype):
  a = np.array([[0, 0, 0], [0, 2, 0], [1, 1, 3], [0, 0, 0]]).astype(NP_DTYPE[dtype])
  if dtype == D.float32:
    a[3, 1] = np.nan  # NaN counts as true
  ta = to_torch(a)
  for axis in (None, 0, -1, (0, 1)):
    dims = torch_dims(axis, 2)
    check(Tensor(a).any(axis), torch.any(ta, dim=dims), D.bool)
    check(Tensor(a).all(axis, keepdim=True), torch.all(ta, dim=dims, keepdim=True), D.bool)


def test_any_all_empty_and_0d():
  e = np.zeros((2, 0), np.float32)
  check(Tensor(e).any(1), torch.zeros(2, 0).any(1), D.bool)
  check(Tensor(e).all(1), torch.zeros(2, 0).all(1), D.bool)
  check(Tensor(np.float32(3.0)).any(), torch.tensor(True), D.bool)


# ---- logsumexp: exp/log errors (exp: 3 + |x - max| ULP per term, relative) plus log's 2 ULP and one addition
@pytest.mark.parametrize("shape, axis", [((3, 5), 1), ((3, 5), -2), ((2, 3, 4), (0, 2)), ((4,), None), ((), None),
                                         ((2, 0), 1)], ids=str)
def test_logsumexp(shape, axis):
  a = np.asarray(sample(shape, 2) * 3)
  dims = torch_dims(axis, a.ndim)
  want = torch.logsumexp(torch.from_numpy(a).double(), dims) if a.ndim else torch.from_numpy(a).double()
  check(Tensor(a).logsumexp(axis), want.float(), D.float32, atol=20 * EPS32 * (np.abs(want.numpy()) + 1))


def test_logsumexp_infinities():
  a = np.array([[1.0, -np.inf], [-np.inf, -np.inf], [np.inf, 2.0], [1000.0, 1000.0]], np.float32)
  check(Tensor(a).logsumexp(1), torch.logsumexp(torch.from_numpy(a), 1), D.float32, ulp=2)


# ---- scans
SCAN_SHAPES = [((7,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1), ((0, 4), 1), ((4, 0), 1), ((), 0),
               ((2, 3 * SCAN_BLOCK + 5), -1)]  # the last one runs the blocked (two-level) scan


def scan_tolerance(a, axis):
  """A cumulative sum of k terms: k * eps * (sum of |x| so far) (docs/SPEC.md); the blocked scan adds one term."""
  if a.ndim == 0:
    return 0.0
  partial = np.cumsum(np.abs(a.astype(np.float64)), axis=axis)
  return (a.shape[axis] + 2) * EPS32 * partial


@pytest.mark.parametrize("shape, axis", SCAN_SHAPES, ids=str)
def test_cumsum_cummax_logcumsumexp(shape, axis):
  a = sample(shape, 3)
  ta = torch.from_numpy(a)
  check(Tensor(a).cumsum(axis), ta.cumsum(axis), D.float32, atol=scan_tolerance(a, axis), signed_zeros=False)
  check(Tensor(a).cummax(axis), ta.cummax(axis).values if a.ndim else ta, D.float32)
  want = torch.logcumsumexp(ta.double(), axis).float()
  check(Tensor(a).logcumsumexp(axis), want, D.float32, atol=20 * EPS32 * (np.abs(want.numpy()) + 1))


def test_cumprod():
  a = (1 + sample((3, 6), 4) / 8).astype(np.float32)
  check(Tensor(a).cumprod(1), torch.from_numpy(a).cumprod(1), D.float32, ulp=8)  # k roundings over k <= 6 factors


@pytest.mark.parametrize("dtype, out", [(D.int32, D.int32), (D.int8, D.int32), (D.bool, D.int32), (D.uint8, D.uint32),
                                        (D.int64, D.int64)], ids=lambda d: d.name)
def test_int_scans_exact(dtype, out):
  """Sum's dtype rule (as tinygrad): small ints widen to 32 bits; torch returns int64, compared by value."""
  a = np.random.default_rng(5).integers(0 if dtype in (D.bool, D.uint8) else -50, 2 if dtype == D.bool else 50,
                                        (3, 2 * SCAN_BLOCK + 3)).astype(NP_DTYPE[dtype])
  ta = torch.from_numpy(a)
  check(Tensor(a).cumsum(1), ta.cumsum(1).numpy().astype(NP_DTYPE[out]), out)
  if dtype != D.bool:
    check(Tensor(a).cummax(1), ta.cummax(1).values, dtype)


def test_scans_nan_inf_and_non_contiguous():
  a = np.array([[1.0, np.nan, 3.0, -1.0], [-np.inf, 2.0, np.inf, 0.5]], np.float32)
  ta = torch.from_numpy(a)
  check(Tensor(a).cummax(1), ta.cummax(1).values, D.float32)
  check(Tensor(a).cumsum(1), ta.cumsum(1), D.float32)
  check(Tensor(a).logcumsumexp(1), ta.logcumsumexp(1), D.float32, ulp=4)
  b = sample((6, 4), 6)
  tb = torch.from_numpy(b)
  check(Tensor(b).T[:, ::2].cumsum(-1), tb.T[:, ::2].cumsum(-1), D.float32, atol=1e-6)


def test_logcumsumexp_gradient_over_masked_runs_like_torch():
  """A run of -inf (masked log-probabilities) at the start of a block of SCAN_BLOCK, or at the end past the last
  finite value: its gradient is 0, as torch's; the block's own scan of the run is -inf there and its zero gradient
  became NaN through logsumexp's exp(-inf - -inf)."""
  a = sample((2, 2 * SCAN_BLOCK + 6), 7) * 3
  a[0, SCAN_BLOCK:SCAN_BLOCK + 8] = -np.inf
  a[1, 2 * SCAN_BLOCK - 2:] = -np.inf
  seed = sample(a.shape, 8)
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  x.logcumsumexp(1).backward(Tensor(seed))
  tx.logcumsumexp(1).backward(torch.tensor(seed))
  check(x.grad, tx.grad, D.float32, atol=1e-5)


def test_half_cumsum_accumulates_in_float32():
  a = np.full(3000, 1.0, np.float16)
  check(Tensor(a).cumsum(), torch.from_numpy(a).float().cumsum(0).half(), D.float16)


# ---- triangles
@pytest.mark.parametrize("shape, diagonals", [((3, 4), (0, 1, -1)), ((4, 3), (5, -5)), ((2, 3, 3), (0, 2)),
                                              ((0, 3), (0,)), ((3, 1), (-1, 1))], ids=str)
def test_triu_tril(shape, diagonals):
  a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape) + 1
  ta = torch.from_numpy(a)
  for diagonal in diagonals:
    check(Tensor(a).triu(diagonal), ta.triu(diagonal), D.int32)
    check(Tensor(a).tril(diagonal), ta.tril(diagonal), D.int32)


def test_triu_tril_dtypes_and_views():
  b = np.ones((3, 3), bool)
  check(Tensor(b).triu(), torch.from_numpy(b).triu(), D.bool)
  f = sample((4, 5), 7)
  check(Tensor(f).T.tril(1), torch.from_numpy(f).T.tril(1), D.float32)


# ---- acc_dtype
def test_sum_and_matmul_acc_dtype():
  a = np.full((4, 300), 100, np.int8)
  check(Tensor(a).sum(1, acc_dtype=D.int64), torch.from_numpy(a).sum(1), D.int64)
  h = np.full((2, 3000), 1.0, np.float16)
  check(Tensor(h).matmul(Tensor(np.ones((3000, 1), np.float16)), acc_dtype=D.float32), np.full((2, 1), 3000.0,
        np.float32), D.float32)
  check(Tensor(h).dot(Tensor(np.ones((3000, 1), np.float16))), np.full((2, 1), 3000.0, np.float16), D.float16)


def test_dtype_keyword_is_torch_sum_dtype():
  """dtype= (tinygrad 0.10.3's and torch's name for acc_dtype) casts before reducing and is the result's dtype."""
  a = np.array([[100, 100, 100], [-128, -128, 0], [0, 0, 0]], np.int8)
  check(Tensor(a).sum(1, dtype=D.int64), torch.from_numpy(a).sum(1, dtype=torch.int64), D.int64)
  check(Tensor(a).prod(1, dtype=D.int64), torch.from_numpy(a).prod(1, dtype=torch.int64), D.int64)
  check(Tensor(a).sum(dtype="int16"), torch.from_numpy(a).sum(dtype=torch.int16), D.int16)  # 44 wraps nothing
  h = np.array([60000.0, 60000.0, -0.0], np.float16)  # half's sum overflows; float32's does not
  check(Tensor(h).sum(dtype=D.float32), torch.from_numpy(h).sum(dtype=torch.float32), D.float32)
  check(Tensor(h).sum(), torch.from_numpy(h).float().sum().half(), D.float16)
  z = np.array([-0.0, -0.0], np.float32)
  check(Tensor(z).sum(dtype=D.float64), torch.from_numpy(z).sum(dtype=torch.float64), D.float64)
  e = np.zeros((0, 2), np.float16)
  check(Tensor(e).prod(0, dtype=D.float64), torch.from_numpy(e).prod(0, dtype=torch.float64), D.float64)
  check(Tensor(np.float16(2.5)).sum(dtype=D.float32), torch.tensor(2.5, dtype=torch.float16).sum(dtype=torch.float32),
        D.float32)


def test_dtype_keyword_of_matmul_einsum_conv_linear():
  h, ones = np.full((2, 3000), 1.0, np.float16), np.ones((3000, 1), np.float16)
  want = np.full((2, 1), 3000.0, np.float32)
  check(Tensor(h).matmul(Tensor(ones), dtype=D.float32), want, D.float32)
  check(Tensor(h).dot(Tensor(ones), dtype=D.float32), want, D.float32)
  check(Tensor(ones).matmul(Tensor(h), reverse=True, dtype=D.float32), want, D.float32)
  check(Tensor.einsum("ij,jk->ik", Tensor(h), Tensor(ones), dtype=D.float32), want, D.float32)
  x, w = np.full((1, 1, 1, 3000), 1.0, np.float16), np.ones((1, 1, 1, 3000), np.float16)
  check(Tensor(x).conv2d(Tensor(w), dtype=D.float32), np.full((1, 1, 1, 1), 3000.0, np.float32), D.float32)
  xi, wi, bi = np.array([[2, -3]], np.int32), np.array([[1.5], [0.25]], np.float32), np.array([0.5], np.float32)
  want = torch.nn.functional.linear(torch.from_numpy(xi).double(), torch.from_numpy(wi.T).double(),
                                    torch.from_numpy(bi).double())
  check(Tensor(xi).linear(Tensor(wi), Tensor(bi), dtype=D.float64), want, D.float64)
  check(Tensor(xi).linear(Tensor(wi), dtype="float16"), np.array([[2.25]], np.float16), D.float16)


# ---- sort, topk
SORT_FLOATS = np.array([3.0, np.nan, -0.0, 0.0, 1.0, np.inf, -np.inf, 1.0, np.nan, -2.5, 0.0, -0.0], np.float32)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_special_values_ties_and_signed_zeros_like_torch_stable(descending):
  """NaN sorts above inf (first when descending); equal values, -0.0 and 0.0 included, keep their order."""
  got_v, got_i = Tensor(SORT_FLOATS).sort(descending=descending)
  want_v, want_i = torch.from_numpy(SORT_FLOATS).sort(descending=descending, stable=True)
  check(got_v, want_v, D.float32)
  check(got_i, want_i.int(), D.int32)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_along_each_dim_of_a_view(dim, descending):
  a = np.round(sample((4, 5, 6), 21), 1)  # rounding makes ties
  view = Tensor(a).permute(2, 0, 1)[::-1]
  want_v, want_i = torch.from_numpy(a).permute(2, 0, 1).flip(0).sort(dim=dim, descending=descending, stable=True)
  got_v, got_i = view.sort(dim, descending)
  check(got_v, want_v, D.float32)
  check(got_i, want_i.int(), D.int32)


@pytest.mark.parametrize("dtype", [D.int8, D.uint8, D.int64, D.uint64, D.bool, D.float16], ids=lambda d: d.name)
def test_sort_ints_bools_and_half_against_numpy_stable_argsort(dtype):
  info = np.iinfo(NP_DTYPE[dtype]) if dtypes.is_int(dtype) else None
  if info is not None:
    a = np.array([info.max, info.min, 0, 1, info.max, info.min + 1, 0, info.max - 1], NP_DTYPE[dtype])
  elif dtype == D.bool:
    a = np.array([True, False, True, True, False])
  else:
    a = np.array([65504, -65504, 6e-8, -0.0, 0.0, 1, 1, np.inf, np.nan], np.float16)
  order = np.argsort(a, kind="stable")
  got_v, got_i = Tensor(a).sort()
  check(got_v, a[order], dtype)
  check(got_i, order.astype(np.int32), D.int32)


def test_sort_0d_and_empty():
  v, i = Tensor(-0.0).sort()
  check(v, np.array(-0.0, np.float32), D.float32)
  check(i, np.array(0, np.int32), D.int32)
  for dim in (0, 1):
    v, i = Tensor.ones(3, 0).sort(dim, descending=True)
    assert v.shape == i.shape == (3, 0) and i.dtype == D.int32


def test_sort_values_gradient_reaches_the_sorted_positions():
  a = np.array([[2.0, -1.0, 2.0, 0.5], [0.0, 3.0, -3.0, 1.0]], np.float32)
  w = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], np.float32)
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.sort(1, descending=True)[0] * Tensor(w)).sum().backward()
  (tx.sort(dim=1, descending=True, stable=True).values * torch.from_numpy(w)).sum().backward()
  check(x.grad, tx.grad, D.float32)


@pytest.fixture
def network(monkeypatch):
  """Every sort that needs no gradient goes through the bitonic network, whatever its length."""
  monkeypatch.setattr(sorting, "PAIRWISE_LIMIT", 0)


@pytest.mark.parametrize("descending", [False, True])
def test_network_sort_special_values_ties_and_padding_like_torch_stable(network, descending):
  """12 values padded to 16: NaN above inf, -0.0 and 0.0 tied and kept in order, the padding never in the result;
  rows of 1 to 9 (every padding amount of a 16-wide network) along dim 0 of a view."""
  got_v, got_i = Tensor(SORT_FLOATS).sort(descending=descending)
  want_v, want_i = torch.from_numpy(SORT_FLOATS).sort(descending=descending, stable=True)
  check(got_v, want_v, D.float32)
  check(got_i, want_i.int(), D.int32)
  a = np.round(sample((9, 3), 23), 0)  # few distinct values: many ties
  a[[1, 4], [0, 2]] = np.nan
  for n in range(1, 10):
    got_v, got_i = Tensor(a).T[:, :n].T.sort(0, descending)
    want_v, want_i = torch.from_numpy(a[:n]).sort(dim=0, descending=descending, stable=True)
    check(got_v, want_v, D.float32)
    check(got_i, want_i.int(), D.int32)


@pytest.mark.parametrize("dtype", [D.int8, D.uint64, D.bool, D.float16], ids=lambda d: d.name)
def test_network_sort_ints_bools_and_half_against_numpy_stable_argsort(network, dtype):
  info = np.iinfo(NP_DTYPE[dtype]) if dtypes.is_int(dtype) else None
  if info is not None:
    a = np.array([info.max, info.min, 0, 1, info.max, info.min + 1, 0, info.max - 1, 1], NP_DTYPE[dtype])
  elif dtype == D.bool:
    a = np.array([True, False, True, True, False])
  else:
    a = np.array([65504, -65504, 6e-8, -0.0, 0.0, 1, 1, np.inf, np.nan], np.float16)
  for descending in (False, True):
    if dtype == D.float16:  # NaN first when descending: torch's order
      order = torch.from_numpy(a).sort(descending=descending, stable=True).indices.numpy()
    else:  # ~ reverses the order of ints and bools without overflow
      order = np.argsort(~a if descending else a, kind="stable")
    got_v, got_i = Tensor(a).sort(descending=descending)
    check(got_v, a[order], dtype)
    check(got_i, order.astype(np.int32), D.int32)


def test_network_sort_leaves_a_row_that_needs_a_gradient_to_the_pairwise_sort(network):
  a = np.array([[2.0, -1.0, 2.0, 0.5, np.inf], [0.0, 3.0, -3.0, 1.0, -0.0]], np.float32)
  w = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [5.0, 6.0, 7.0, 8.0, 9.0]], np.float32)
  x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.sort(1)[0] * Tensor(w)).sum().backward()
  (tx.sort(dim=1, stable=True).values * torch.from_numpy(w)).sum().backward()
  check(x.grad, tx.grad, D.float32)


def test_argsort_like_torch_stable():
  a = np.array([[1.0, np.nan, -0.0, 1.0, 0.0], [3.0, 3.0, -np.inf, 2.0, 3.0]], np.float32)
  for dim, descending in ((1, False), (1, True), (0, True)):
    want = torch.from_numpy(a).argsort(dim=dim, descending=descending, stable=True)
    check(Tensor(a).argsort(dim, descending), want.int(), D.int32)


def test_a_long_row_sorts_by_the_network_like_numpy():
  """A row past the pairwise limit (3 x 15000: 6.75e8 pair comparisons), with many ties, stable as numpy's."""
  a = np.random.default_rng(24).integers(-50, 50, (3, 15000)).astype(np.int32)
  got_v, got_i = Tensor(a).sort()
  order = np.argsort(a, axis=1, kind="stable")
  check(got_i, order.astype(np.int32), D.int32)
  check(got_v, np.take_along_axis(a, order, 1), D.int32)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_topk_like_torch_on_distinct_values(largest, dim):
  a = sample((5, 7), 22)
  for k in (0, 1, 3, a.shape[dim]):
    got_v, got_i = Tensor(a).topk(k, dim, largest)
    want_v, want_i = torch.from_numpy(a).topk(k, dim, largest)
    check(got_v, want_v, D.float32)
    check(got_i, want_i.int(), D.int32)


def test_topk_ties_go_to_the_earlier_element_and_k_out_of_range_raises():
  a = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 0], np.int32)
  got_v, got_i = Tensor(a).topk(3)
  order = np.argsort(-a, kind="stable")[:3]
  check(got_v, a[order], D.int32)
  check(got_i, order.astype(np.int32), D.int32)
  got_v, got_i = Tensor(a).topk(3, largest=False)
  order = np.argsort(a, kind="stable")[:3]
  check(got_i, order.astype(np.int32), D.int32)
  for k in (11, -1):
    with pytest.raises(RuntimeError, match=str(k)):
      Tensor(a).topk(k)
    with pytest.raises(RuntimeError):
      torch.from_numpy(a).topk(k)
