"""Reductions that divide a sum (mean, var, std, softmax's normalizer, logsumexp, the norms, pooling, the losses) on
float16 and bfloat16: they sum and divide in float32 and round once, so an intermediate that passes half's range
(65504) does not turn a representable answer into inf or NaN.

The oracle is the exact answer: the inputs' half values computed in float64 (numpy, or torch in float64) and rounded
once to the dtype. torch's own half results are not the oracle: some of its CPU kernels overflow here too
(log_softmax, logsumexp and cross_entropy of 65536 zeros in float16 give -inf, inf and NaN in torch 2.x).
"""
import numpy as np
import pytest
import torch
from helpers import NP_DTYPE, check

from refgrad import Tensor, dtypes, nn
from refgrad.symbolic_shapes import Variable

pytestmark = pytest.mark.usefixtures("refgrad_device")

HALVES = [dtypes.float16, dtypes.bfloat16]
HALF_MAX = 65504.0


def exact(values: np.ndarray, dtype) -> np.ndarray:
  """float64 values rounded once to dtype (float32 results round to the half dtype within one ULP of this)."""
  return np.asarray(values, dtype=np.float64).astype(NP_DTYPE[dtype])


def halves(values, dtype) -> tuple[Tensor, np.ndarray]:
  """A refgrad tensor of values in dtype, and the same (rounded) values in float64."""
  a = np.asarray(values, dtype=np.float64).astype(NP_DTYPE[dtype])
  return Tensor(a), a.astype(np.float64)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("value, n", [(60000.0, 4), (60000.0, 65536), (HALF_MAX, 8), (-HALF_MAX, 3), (2.0 ** -24, 4)])
def test_mean_of_large_and_tiny_values(dtype, value, n):
  t, a = halves(np.full(n, value), dtype)
  check(t.mean(), exact(a.mean(), dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_mean_rounds_once(dtype):
  """Subnormal means round to nearest even once: 3/4 of the smallest half subnormal is it, 1/2 of it is 0."""
  for values in ([2.0 ** -24] * 3 + [0.0], [2.0 ** -24, 0.0], [2.0 ** -133] * 3 + [0.0]):
    t, a = halves(values, dtype)
    check(t.mean(), exact(a.mean(), dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_mean_over_axes_0d_and_empty(dtype):
  t, a = halves(np.full((3, 5), 60000.0) * np.arange(1, 4).reshape(3, 1) / 3, dtype)
  check(t.mean(1, keepdim=True), exact(a.mean(1, keepdims=True), dtype), dtype)
  check(t.mean(0), exact(a.mean(0), dtype), dtype)
  check(Tensor(60000.0, dtype=dtype).mean(), exact(60000.0, dtype), dtype)
  check(Tensor(60000.0, dtype=dtype).mean(0), exact(60000.0, dtype), dtype)
  check(Tensor.empty(0, 3, dtype=dtype).mean(0), np.full(3, np.nan).astype(NP_DTYPE[dtype]), dtype)


def test_bfloat16_mean_overflows_where_its_float32_accumulator_does():
  """As torch: bfloat16 reaches float32's range, so its float32 accumulator can overflow (and does for torch)."""
  want = torch.tensor([3e38] * 4, dtype=torch.bfloat16).mean()
  check(Tensor([3e38] * 4, dtype=dtypes.bfloat16).mean(), want, dtypes.bfloat16)


def test_symbolic_mean_of_halves():
  a = np.full((6, 4), 60000.0, dtype=np.float16)
  n = Variable("n", 1, 6)
  for value in (1, 4, 6):
    out = Tensor(a)[:n.bind(value)].mean(0)
    check(out, exact(a[:value].astype(np.float64).mean(0), dtypes.float16), dtypes.float16)


def test_mean_gradient_of_halves():
  x = Tensor(np.full(65536, 60000.0, np.float16), requires_grad=True)
  x.mean().backward()
  want = torch.full((65536,), 60000.0, dtype=torch.float16, requires_grad=True)
  want.mean().backward()
  check(x.grad, want.grad, dtypes.float16)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("correction", [0, 1])
def test_var_and_std_of_wide_spreads(dtype, correction):
  """Deviations of 500 square to 250000, past half's range; the variance may be too (then it is inf), the std not."""
  for values in ([0.0, 1000.0], [60000.0, -60000.0, 0.0], np.tile([200.0, -200.0], 32768)):
    t, a = halves(values, dtype)
    var = a.var(ddof=correction)
    check(t.var(correction=correction), exact(var, dtype), dtype, ulp=1)
    check(t.std(correction=correction), exact(np.sqrt(var), dtype), dtype, ulp=1)
    std, mean = t.std_mean(correction=correction)
    check(std, exact(np.sqrt(var), dtype), dtype, ulp=1)
    check(mean, exact(a.mean(), dtype), dtype)
    var2, mean2 = t.var_mean(correction=correction)
    check(var2, exact(var, dtype), dtype, ulp=1)
    check(mean2, exact(a.mean(), dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_softmax_logsumexp_over_many_elements(dtype):
  """65536 equal logits: the sum of their exponentials is 65536, past float16's range."""
  t, a = halves(np.zeros(65536), dtype)
  n = a.size
  check(t.softmax(), exact(np.full(n, 1 / n), dtype), dtype)
  check(t.log_softmax(), exact(np.full(n, -np.log(n)), dtype), dtype)
  check(t.logsumexp(), exact(np.log(n), dtype), dtype)
  check(t.reshape(2, -1).logsumexp(1, keepdim=True), exact(np.full((2, 1), np.log(n / 2)), dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_softmax_rounds_once(dtype):
  rng = np.random.default_rng(0)
  t, a = halves(rng.uniform(-8, 8, (4, 33)), dtype)
  e = np.exp(a - a.max(1, keepdims=True))
  check(t.softmax(1), exact(e / e.sum(1, keepdims=True), dtype), dtype, ulp=1)
  check(t.log_softmax(1), exact(np.log(e / e.sum(1, keepdims=True)), dtype), dtype, ulp=1)
  check(t.logcumsumexp(1), exact(np.logaddexp.accumulate(a, 1), dtype), dtype, ulp=1)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_layernorm_and_norm_layers_of_wide_spreads(dtype):
  t, a = halves([[0.0, 1000.0, 300.0, -700.0]], dtype)
  dev = a - a.mean(-1, keepdims=True)
  want = dev / np.sqrt((dev * dev).mean(-1, keepdims=True) + 1e-5)
  check(t.layernorm(), exact(want, dtype), dtype, ulp=1)
  check(nn.LayerNorm(4, elementwise_affine=False)(t), exact(want, dtype), dtype, ulp=1)
  check(nn.GroupNorm(1, 4, affine=False)(t.reshape(1, 4, 1)), exact(want.reshape(1, 4, 1), dtype), dtype, ulp=1)
  rms = a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6)
  check(nn.RMSNorm(4, elementwise_affine=False)(t), exact(rms, dtype), dtype, ulp=1)


def test_batchnorm_layer_of_wide_spreads():
  bn = nn.BatchNorm(2, affine=False, track_running_stats=False)
  # channel 0: deviations of 300 square past half's range, their mean (60000) does not
  t, a = halves(np.array([[[0.0], [5.0]], [[300.0], [-5.0]], [[600.0], [1.0]]]), dtypes.float16)
  mean, var = a.mean((0, 2), keepdims=True), a.var((0, 2), keepdims=True)
  # the batch statistics are rounded to half (as they are half tensors), then used in float32
  mean, invstd = exact(mean, dtypes.float16).astype(np.float64), 1 / np.sqrt(exact(var, dtypes.float16) + 1e-5)
  invstd = exact(invstd, dtypes.float16).astype(np.float64)
  check(bn(t), exact((a - mean) * invstd, dtypes.float16), dtypes.float16, ulp=1)


def test_batchnorm_rounds_once():
  """(60000 - -30000) * 1e-4 = 9: the difference passes half's range, the result does not."""
  x, a = halves([[60000.0, 1.0]], dtypes.float16)
  mean, m = halves([-30000.0, 0.5], dtypes.float16)
  invstd, s = halves([1e-4, 3.0], dtypes.float16)
  weight, w = halves([1.0, 3.0], dtypes.float16)
  bias, b = halves([0.0, 0.1], dtypes.float16)
  check(x.batchnorm(weight, bias, mean, invstd), exact((a - m) * w * s + b, dtypes.float16), dtypes.float16)
  check(x.batchnorm(None, None, mean, invstd.float()), ((a - m) * s).astype(np.float32), dtypes.float32, ulp=1)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_avg_pool_of_large_values(dtype):
  t, a = halves(np.full((1, 1, 4, 4), 60000.0), dtype)
  check(t.avg_pool2d(), exact(np.full((1, 1, 2, 2), a[0, 0, 0, 0]), dtype), dtype)
  check(t.avg_pool2d(3, stride=1, padding=1, count_include_pad=False), exact(np.full((1, 1, 4, 4), a[0, 0, 0, 0]),
                                                                             dtype), dtype)


def test_losses_of_large_batches():
  """70000 samples of loss log(3) (or 1): their sum passes float16's range, their mean does not."""
  logits = Tensor.zeros(70000, 3, dtype=dtypes.float16).contiguous()
  labels = Tensor.zeros(70000, dtype=dtypes.int32).contiguous()
  want = exact(np.log(3.0), dtypes.float16)
  check(logits.sparse_categorical_crossentropy(labels), want, dtypes.float16)
  check(logits.cross_entropy(labels), want, dtypes.float16)
  check(logits.cross_entropy(labels, label_smoothing=0.1), want, dtypes.float16)
  log_probs = Tensor.full((70000, 3), -1.0, dtype=dtypes.float16).contiguous()
  check(log_probs.nll_loss(labels), exact(1.0, dtypes.float16), dtypes.float16)
  check(log_probs.nll_loss(labels, weight=Tensor([2.0, 1.0, 1.0], dtype=dtypes.float16)), exact(1.0, dtypes.float16),
        dtypes.float16)


def test_attention_over_many_keys():
  """Softmax over 70000 equal scores: its normalizer is 70000."""
  q = Tensor.zeros(1, 1, 1, dtype=dtypes.float16)
  k = Tensor.zeros(1, 70000, 1, dtype=dtypes.float16).contiguous()
  v = Tensor.ones(1, 70000, 1, dtype=dtypes.float16).contiguous()
  check(q.scaled_dot_product_attention(k, v), np.ones((1, 1, 1), np.float16), dtypes.float16)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_full_precision_means_are_unchanged(dtype):
  """float32 and float64 divide in their own dtype, as torch does."""
  rng = np.random.default_rng(1)
  a = rng.standard_normal((5, 7)).astype(NP_DTYPE[dtype])
  check(Tensor(a).mean(1), torch.from_numpy(a).mean(1), dtype, ulp=2)
  check(Tensor(a).var(0), torch.from_numpy(a).var(0), dtype, ulp=4)


@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
def test_max_gradient_shares_among_many_ties(dtype):
  """The ties of a maximum are counted exactly: a half-precision count of 10001 ones depends on the order of the
  sum (CLANG's came to 9992 and the gradient to 1.001, the reference's to 10000), which SPEC.md leaves free. The
  oracle is exact: the gradient of max(expand(t)) is 1 at the maximum, and a share of 3000 ties is 1/3000 rounded
  once (torch's bfloat16 amax divides by the count rounded to bfloat16, 3008)."""
  t = Tensor([5.0, -5.0], dtype=dtype, requires_grad=True)
  t.reshape(2, 1).expand(2, 10001).max().backward()
  check(t.grad, exact([1.0, 0.0], dtype), dtype)
  x = Tensor(np.full((2, 3000), 7.0), dtype=dtype, requires_grad=True)
  x.max(1).sum().backward()
  check(x.grad, exact(np.full((2, 3000), 1 / 3000), dtype), dtype)
