"""Random numbers: Threefry-2x32 known answers, identical bits on every device for a seed, manual_seed resetting the
stream, and distribution checks (mean, variance, Kolmogorov-Smirnov) for each sampler."""
import gc
import math

import numpy as np
import pytest
import torch
from scipy import stats

from refgrad import Device, Tensor, dtypes
from refgrad.frontend.random import threefry2x32

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

D = dtypes
N = 20000
ALPHA = 1e-4  # significance of each statistical test: fixed seeds make them deterministic, this keeps them robust


def ks_pvalue(sample, cdf):
  return stats.kstest(np.asarray(sample, np.float64).ravel(), cdf).pvalue


def mean_tolerance(std, n=N):
  return 5 * std / math.sqrt(n)  # 5 standard errors


# Random123's known-answer vectors for threefry2x32_20: (counter, key) -> output
KAT = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
       ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
       ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]


def test_threefry_known_answers():
  ctr, key = (np.array([row[i] for row in KAT], np.uint32) for i in (0, 1))
  x0, x1 = threefry2x32((Tensor(key[:, 0]), Tensor(key[:, 1])), Tensor(ctr[:, 0]), Tensor(ctr[:, 1]))
  assert list(zip(x0.tolist(), x1.tolist())) == [want for _, _, want in KAT]


def exact_draws(device=None):
  """Draws made of integer ops and exact float ops (bitcast, subtract 1, scale): bit-identical on every device."""
  Tensor.manual_seed(1234)
  kw = {"device": device}
  return [Tensor.rand(7, 5, **kw), Tensor.rand(33, dtype=D.float64, **kw), Tensor.rand(9, dtype=D.float16, **kw),
          Tensor.randint(50, low=-7, high=1000, **kw), Tensor.rand(3, dtype=D.bfloat16, **kw)]


def test_same_seed_same_bits_on_every_device(refgrad_device):
  for got, want in zip(exact_draws(), exact_draws("PYTHON")):
    assert got.device == refgrad_device and got.dtype == want.dtype and got.shape == want.shape
    assert got.numpy().tobytes() == want.numpy().tobytes(), f"{refgrad_device} differs from PYTHON"


def test_same_seed_same_normals_on_every_device():
  """randn goes through log, sqrt and cos, whose results may differ by their ULP bounds (docs/SPEC.md) between
  devices; the random bits underneath are the same, so the normals agree to a few ULP (Box-Muller: log and sin
  2 ULP each, sqrt halves the log's error, products and cos's pi/2 - x rounding add ~2)."""
  Tensor.manual_seed(99)
  here = Tensor.randn(4, 6).numpy()
  Tensor.manual_seed(99)
  ref = Tensor.randn(4, 6, device="PYTHON").numpy()
  from helpers import check
  check(Tensor(here), ref, D.float32, ulp=8, atol=8 * 2.0 ** -24)


def test_manual_seed_resets_and_stream_advances():
  Tensor.manual_seed(7)
  a, b = Tensor.rand(100).numpy(), Tensor.rand(100).numpy()
  assert not np.array_equal(a, b)  # the stream moves on
  Tensor.manual_seed(7)
  assert np.array_equal(Tensor.rand(100).numpy(), a)
  Tensor.manual_seed(8)
  assert not np.array_equal(Tensor.rand(100).numpy(), a)
  Tensor.manual_seed(7)  # one draw of 200 continues exactly where two draws of 100 would
  assert np.array_equal(Tensor.rand(200).numpy(), np.concatenate([a, b]))


def test_counter_carries_into_the_high_word():
  from refgrad.frontend import random
  Tensor.manual_seed(5)
  random.STATE.counter = (1 << 32) - 2  # the 4 counters straddle 2**32
  got = Tensor.rand(4).numpy()
  random.STATE.counter = 0
  low = Tensor(np.array([(1 << 32) - 2, (1 << 32) - 1, 0, 1], np.uint32))
  high = Tensor(np.array([0, 0, 1, 1], np.uint32))
  x0, _ = threefry2x32((5, 0), low, high)
  want = ((x0 >> 9) | 0x3F800000).bitcast(D.float32) - 1.0
  assert np.array_equal(got, want.numpy())


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16, D.bfloat16], ids=lambda d: d.name)
def test_rand_uniform_distribution(dtype):
  Tensor.manual_seed(11)
  u = Tensor.rand(N, dtype=dtype)
  assert u.dtype == dtype and u.shape == (N,)
  v = u.numpy().astype(np.float64)
  assert v.min() >= 0 and v.max() < 1
  assert abs(v.mean() - 0.5) < mean_tolerance(math.sqrt(1 / 12))
  assert abs(v.var() - 1 / 12) < 0.01
  if dtype.itemsize >= 4:  # halves are too coarse for a continuous KS test
    assert ks_pvalue(v, "uniform") > ALPHA


def test_randn_distribution():
  Tensor.manual_seed(12)
  z = Tensor.randn(N).numpy().astype(np.float64)
  assert abs(z.mean()) < mean_tolerance(1.0) and abs(z.var() - 1) < 0.05
  assert ks_pvalue(z, "norm") > ALPHA
  z64 = Tensor.randn(N, dtype=D.float64).numpy()
  assert z64.dtype == np.float64 and ks_pvalue(z64, "norm") > ALPHA


def test_normal_uniform_parameters():
  Tensor.manual_seed(13)
  x = Tensor.normal(N, mean=-3.0, std=0.5).numpy()
  assert ks_pvalue(x, stats.norm(-3.0, 0.5).cdf) > ALPHA
  y = Tensor.uniform(N, low=2.0, high=5.0).numpy()
  assert y.min() >= 2.0 and y.max() < 5.0 and ks_pvalue(y, stats.uniform(2.0, 3.0).cdf) > ALPHA


@pytest.mark.parametrize("low, high, dtype", [(0, 10, D.int32), (-5, 3, D.int8), (0, 2, D.uint8),
                                              (-(2 ** 40), 2 ** 40, D.int64)], ids=str)
def test_randint(low, high, dtype):
  Tensor.manual_seed(14)
  r = Tensor.randint(N, low=low, high=high, dtype=dtype)
  assert r.dtype == dtype
  v = r.numpy().astype(np.int64)
  assert v.min() >= low and v.max() < high
  if high - low <= 16:  # chi-square test of equal frequencies
    counts = np.bincount(v - low, minlength=high - low)
    assert stats.chisquare(counts).pvalue > ALPHA
  else:
    assert ks_pvalue((v - low) / (high - low), "uniform") > ALPHA


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_randperm_is_a_permutation_with_uniform_positions(n):
  Tensor.manual_seed(15)
  p = Tensor.randperm(n)
  assert p.dtype == D.int32 and p.shape == (n,)
  assert sorted(p.tolist()) == list(range(n))
  if n == 7:  # where element 0 lands, over many draws: equal frequencies (chi-square)
    draws = np.stack([Tensor.randperm(7, dtype=D.int64).numpy() for _ in range(350)])
    assert stats.chisquare(np.bincount(np.argmax(draws == 0, axis=1), minlength=7)).pvalue > ALPHA


def test_randperm_misuse():
  with pytest.raises(ValueError, match="-1"):
    Tensor.randperm(-1)
  with pytest.raises(TypeError, match="float32"):
    Tensor.randperm(3, dtype=D.float32)


def test_initializers():
  Tensor.manual_seed(15)
  s = Tensor.scaled_uniform(64, 50).numpy()
  assert np.abs(s).max() <= 64 * 50 ** -0.5 / 64 ** 0.5 * 64 ** 0.5 and abs(s.std() - (3200 ** -0.5) / 3 ** 0.5) < 2e-3
  g = Tensor.glorot_uniform(64, 50).numpy()
  bound = math.sqrt(6 / 114)
  assert np.abs(g).max() <= bound and abs(g.std() - bound / math.sqrt(3)) < 0.01
  ku = Tensor.kaiming_uniform(100, 40, a=0.0).numpy()
  bound = math.sqrt(3) * math.sqrt(2) / math.sqrt(40)
  assert np.abs(ku).max() <= bound and ks_pvalue(ku, stats.uniform(-bound, 2 * bound).cdf) > ALPHA
  kn = Tensor.kaiming_normal(100, 40, a=0.0).numpy()
  assert ks_pvalue(kn, stats.norm(0, math.sqrt(2) / math.sqrt(40)).cdf) > ALPHA


def test_shapes_like_and_kwargs():
  Tensor.manual_seed(16)
  assert Tensor.rand().shape == () and Tensor.rand(0, 3).numpy().shape == (0, 3)
  assert Tensor.rand((2, 3)).shape == (2, 3)
  base = Tensor.zeros(3, 4, dtype=D.float16)
  assert base.rand_like().dtype == D.float16 and base.rand_like().shape == (3, 4)
  assert Tensor.zeros(2, dtype=D.int32).rand_like().dtype == D.float32
  assert base.randn_like(dtype=D.float64).dtype == D.float64
  assert Tensor.rand(2, requires_grad=True).requires_grad is True
  assert Tensor.rand(2).device == Device.DEFAULT
  Tensor.manual_seed(16)  # contiguous (tinygrad's scheduling hint) does not change the numbers
  hinted = Tensor.rand(5, contiguous=False).numpy()
  Tensor.manual_seed(16)
  assert np.array_equal(hinted, Tensor.rand(5).numpy())
  assert base.rand_like(contiguous=False).shape == (3, 4)


def test_multinomial_with_replacement():
  Tensor.manual_seed(17)
  w = np.array([1.0, 0.0, 3.0, 4.0], np.float32)
  s = Tensor(w).multinomial(N, replacement=True)
  assert s.dtype == D.int32 and s.shape == (N,)
  counts = np.bincount(s.numpy(), minlength=4)
  assert counts[1] == 0
  expected = w / w.sum() * N
  assert stats.chisquare(counts[[0, 2, 3]], expected[[0, 2, 3]]).pvalue > ALPHA
  rows = Tensor(np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)).multinomial(5, replacement=True).numpy()
  assert rows.tolist() == [[1] * 5, [0] * 5]


def test_multinomial_without_replacement():
  Tensor.manual_seed(18)
  w = np.array([[5.0, 1.0, 0.0, 2.0, 2.0]] * 3, np.float32)
  s = Tensor(w).multinomial(4).numpy()
  assert s.shape == (3, 4)
  for row in s:
    assert sorted(row.tolist()) == [0, 1, 3, 4]  # distinct, and the zero-weight category never appears
  firsts = Tensor(np.repeat(w[:1], 400, 0)).multinomial(1).numpy()[:, 0]
  counts = np.bincount(firsts, minlength=5)
  assert counts[2] == 0 and stats.chisquare(counts[[0, 1, 3, 4]], np.array([5, 1, 2, 2]) / 10 * 400).pvalue > ALPHA


def test_same_size_draws_reuse_one_kernel():
  Tensor.manual_seed(19)
  first = Tensor.rand(16).schedule()[-1].ast
  Tensor.manual_seed(20)
  Tensor.rand(3)
  assert Tensor.rand(16).schedule()[-1].ast is first  # seed and offset are data, not constants


def test_randn_and_uniform_into_other_dtypes_cast_the_floats_as_tinygrad():
  """tinygrad draws floats and casts: uniform into an int dtype truncates the spread, then adds low."""
  Tensor.manual_seed(3)
  floats = Tensor.rand(1000).numpy()
  Tensor.manual_seed(3)
  ints = Tensor.uniform(1000, low=-100, high=100, dtype=dtypes.int32)
  assert ints.dtype == dtypes.int32
  np.testing.assert_array_equal(ints.numpy(), (floats * 200).astype(np.int32) - 100)
  Tensor.manual_seed(3)
  normal = Tensor.randn(64).numpy()
  Tensor.manual_seed(3)
  np.testing.assert_array_equal(Tensor.randn(64, dtype=dtypes.bool).numpy(), normal != 0)


def test_multinomial_misuse_is_also_an_assertion_error():
  for misuse in (lambda: Tensor(2.0).multinomial(1, replacement=False), lambda: Tensor.ones(3).multinomial(4),
                 lambda: Tensor([1.0, 9.0]).multinomial(0, replacement=False)):
    with pytest.raises(AssertionError):
      misuse()


@pytest.mark.parametrize("low, high, dtype", [(100.0, 101.0, D.float16), (0.0, 3.0, D.bfloat16),
                                              (1.0, 1.0000001, D.float32), (-1.0000001, -1.0, D.float32)], ids=str)
def test_uniform_never_gives_high(low, high, dtype):
  """[low, high) as documented, and as torch's uniform_ keeps it: rand * (high - low) + low rounded up to high (1 in
  32 float16 draws of uniform(100, 101), 40% of float32 uniform(1, 1.0000001))."""
  Tensor.manual_seed(21)
  got = Tensor.uniform(N, low=low, high=high, dtype=dtype).numpy().astype(np.float64)
  want = torch.empty(N, dtype=getattr(torch, dtype.name)).uniform_(low, high).double().numpy()
  top = float(np.array(high).astype(dtype.np))
  assert want.max() < top and got.max() < top and got.min() >= float(np.array(low).astype(dtype.np))
  if dtype == D.float16:  # the values below high still come: the top one as often as the others
    assert np.mean(got == np.nextafter(np.float16(top), np.float16(0))) > 1 / 32


def test_bad_random_arguments_raise_torchs_errors():
  """randint's range must fit its dtype (the values wrapped: int8 [0, 200) gave -60); multinomial's weights must be a
  distribution (they were sampled: all zeros drew the last category, a negative weight was drawn)."""
  cases = [(lambda: Tensor.randint(5, low=0, high=200, dtype=D.int8),
            lambda: torch.randint(0, 200, (5,), dtype=torch.int8)),
           (lambda: Tensor.randint(5, low=-5, high=2, dtype=D.uint8),
            lambda: torch.randint(-5, 2, (5,), dtype=torch.uint8)),
           (lambda: Tensor.randint(5, low=3, high=3), lambda: torch.randint(3, 3, (5,))),
           *((lambda w=w: Tensor(w).multinomial(2, replacement=True), lambda w=w: torch.tensor(w).multinomial(2, True))
             for w in ([1.0, -1.0, 2.0], [0.0, 0.0], [[1.0, 1.0], [0.0, 0.0]], [1.0, float("inf")])),
           (lambda: Tensor([0.0, 0.0]).multinomial(1), lambda: torch.tensor([0.0, 0.0]).multinomial(1))]
  for ours, theirs in cases:
    with pytest.raises(RuntimeError):
      theirs()
    with pytest.raises(RuntimeError):
      ours()
  assert set(Tensor.randint(1000, low=-128, high=128, dtype=D.int8).tolist()) <= set(range(-128, 128))
  for low, high, dtype in ((-2**63, 2**63, D.int64), (0, 2**64, D.uint64)):  # the whole range (IntOverflowError)
    v = Tensor.randint(N, low=low, high=high, dtype=dtype).numpy().astype(np.float64)
    assert ks_pvalue((v - low) / (high - low), "uniform") > ALPHA
  assert set(Tensor.randint(100, low=np.int64(2), high=np.int64(4)).tolist()) <= {2, 3}  # numpy ints, as torch


def test_initializers_of_empty_shapes_are_empty():
  """torch returns an empty tensor (fan 0); the bound divided by zero."""
  for init, shape in ((Tensor.kaiming_uniform, (3, 0)), (Tensor.kaiming_normal, (3, 0)),
                      (Tensor.glorot_uniform, (0, 0)), (Tensor.scaled_uniform, (0,))):
    assert init(*shape).numpy().shape == shape


def test_draws_asked_for_gradients_get_them():
  """requires_grad=True makes the returned tensor the leaf, as tinygrad's requires_grad_ on its result: it was asked
  of the inner draw, a temporary, so w = Tensor.normal(3, 4, requires_grad=True) never got a .grad."""
  Tensor.manual_seed(22)
  for init in (Tensor.normal, Tensor.uniform, Tensor.scaled_uniform, Tensor.glorot_uniform, Tensor.kaiming_uniform,
               Tensor.kaiming_normal, Tensor.rand, Tensor.randn):
    w = init(3, 4, requires_grad=True)
    gc.collect()
    (w * w).sum().backward()
    assert w.requires_grad and w.grad is not None, init.__name__
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)
