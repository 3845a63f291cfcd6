"""linear, einsum, convolutions, pools, interpolate, normalization, attention, activations, losses and dropout against
torch.nn.functional. Float tolerances: sums of products use the summation bound of docs/SPEC.md,
(K + 1) * eps * sum(|x| * |w|) (the same rule as matmul in test_reduce.py); transcendental chains use ULP counts
explained at each table."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual name
from helpers import ACTIVATION_ULP, ACTIVATIONS, check

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

D = dtypes
EPS32 = 2.0 ** -24


def sample(shape, seed=0, lo=-1.0, hi=1.0):
  return np.asarray(np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32))


def product_bound(k, abs_result):
  """(K + 1) * eps * (the same computation on |x| and |w|): K products summed, one final rounding."""
  return (k + 1) * EPS32 * abs_result.numpy()


# ---- linear, einsum
def test_linear():
  x, w, b = sample((2, 3, 4)), sample((4, 5), 1), sample((5,), 2)
  tx, tw, tb = map(torch.from_numpy, (x, w, b))
  check(Tensor(x).linear(Tensor(w), Tensor(b)), F.linear(tx, tw.T, tb), D.float32,
        atol=product_bound(4, F.linear(tx.abs(), tw.T.abs(), tb.abs())))
  check(Tensor(x).linear(Tensor(b[:4])), tx * torch.from_numpy(b[:4]), D.float32)  # 1-d weight: elementwise


EINSUMS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,kj", [(2, 3), (4, 3)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
           ("ii->i", [(3, 3)]), ("ii", [(4, 4)]), ("bii->b", [(2, 3, 3)]), ("i,j->ij", [(3,), (4,)]),
           ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]), ("i...->...", [(3, 2, 2)]), ("ijk->kji", [(2, 3, 4)]),
           ("i,i->", [(5,), (5,)]), ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]), ("ij,j->i", [(0, 3), (3,)]),
           ("ij,ij->i", [(2, 1), (2, 3)]), ("ij,jk->ik", [(2, 1), (4, 3)])]  # size 1 broadcasts, as in torch


@pytest.mark.parametrize("formula, shapes", EINSUMS, ids=[f for f, _ in EINSUMS])
def test_einsum(formula, shapes):
  xs = [sample(s, k) for k, s in enumerate(shapes)]
  want = torch.einsum(formula, *map(torch.from_numpy, xs))
  bound = torch.einsum(formula, *(torch.from_numpy(np.abs(x)) for x in xs))
  check(Tensor.einsum(formula, *map(Tensor, xs)), want, D.float32, atol=product_bound(12, bound))


def test_einsum_ints_list_and_non_contiguous():
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  ta = torch.from_numpy(a)
  check(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(a).T]), torch.einsum("ij,jk->ik", ta, ta.T), D.int32)
  check(Tensor.einsum("ij->j", Tensor(a)[:, ::2]), torch.einsum("ij->j", ta[:, ::2]), D.int32)
  i8 = a.astype(np.int8)
  check(Tensor.einsum("i,i->", Tensor(i8[0]), Tensor(i8[1])), np.int8(np.dot(i8[0].astype(np.int32), i8[1])), D.int8)


# ---- convolutions: 1d, 2d, 3d; groups, stride, dilation, padding
CONVS = [
  ("1d", (2, 4, 9), (6, 4, 3), {}),
  ("1d-stride-pad", (2, 4, 9), (6, 2, 3), {"stride": 2, "padding": 1, "groups": 2}),
  ("2d", (2, 3, 7, 6), (4, 3, 3, 3), {}),
  ("2d-all", (1, 4, 8, 7), (6, 2, 3, 2), {"stride": (2, 1), "dilation": (1, 2), "padding": (2, 1), "groups": 2}),
  ("2d-depthwise", (2, 3, 5, 5), (3, 1, 3, 3), {"groups": 3, "padding": 1}),
  ("2d-1x1", (2, 5, 4, 4), (3, 5, 1, 1), {"stride": 2}),
  ("3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"padding": (1, 0, 1), "stride": (1, 2, 1)}),
]
TORCH_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}


@pytest.mark.parametrize("name, xs, ws, kw", CONVS, ids=[c[0] for c in CONVS])
def test_conv(name, xs, ws, kw):
  x, w, b = sample(xs), sample(ws, 1), sample((ws[0],), 2)
  tx, tw, tb = map(torch.from_numpy, (x, w, b))
  fn = TORCH_CONV[len(xs)]
  want = fn(tx, tw, tb, **kw)
  k = int(np.prod(ws[1:]))
  check(Tensor(x).conv2d(Tensor(w), Tensor(b), **kw), want, D.float32,
        atol=product_bound(k + 1, fn(tx.abs(), tw.abs(), tb.abs(), **kw)))


def test_conv_flat_padding_and_half():
  x, w = sample((1, 2, 5, 6)), sample((3, 2, 3, 3), 1)
  tx, tw = torch.from_numpy(x), torch.from_numpy(w)
  # flat torch-style padding: (left, right, top, bottom) of the last two dims
  want = F.conv2d(F.pad(tx, (1, 0, 2, 1)), tw)
  check(Tensor(x).conv2d(Tensor(w), padding=(1, 0, 2, 1)), want, D.float32,
        atol=product_bound(18, F.conv2d(F.pad(tx.abs(), (1, 0, 2, 1)), tw.abs())))
  h = Tensor(x.astype(np.float16)).conv2d(Tensor(w.astype(np.float16)))
  # each product rounds to half (eps 2^-11), the float32 sum adds little, the result rounds once more
  want = F.conv2d(tx.half().double(), tw.half().double())
  bound = 19 * 2.0 ** -11 * F.conv2d(tx.half().double().abs(), tw.half().double().abs()).numpy()
  check(h, want.half(), D.float16, ulp=1, atol=bound)


CONV_T = [
  ("1d", (1, 3, 5), (3, 2, 3), {}),
  ("2d-stride", (2, 2, 3, 4), (2, 3, 3, 2), {"stride": 2}),
  ("2d-pad-outpad", (1, 2, 4, 4), (2, 2, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
  ("2d-groups-dilation", (1, 4, 3, 3), (4, 1, 2, 2), {"groups": 2, "dilation": 2, "stride": (1, 2)}),
]
TORCH_CONV_T = {3: F.conv_transpose1d, 4: F.conv_transpose2d}


@pytest.mark.parametrize("name, xs, ws, kw", CONV_T, ids=[c[0] for c in CONV_T])
def test_conv_transpose(name, xs, ws, kw):
  x, w, b = sample(xs, 3), sample(ws, 4), sample((ws[1] * kw.get("groups", 1),), 5)
  tx, tw, tb = map(torch.from_numpy, (x, w, b))
  fn = TORCH_CONV_T[len(xs)]
  want = fn(tx, tw, tb, **kw)
  k = int(np.prod(ws)) // ws[1]
  check(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kw), want, D.float32,
        atol=product_bound(k + 1, fn(tx.abs(), tw.abs(), tb.abs(), **kw)))


# ---- pools
POOLS = [
  {"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": (2, 3), "stride": (1, 2)},
  {"kernel_size": 3, "stride": 2, "ceil_mode": True}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
  {"kernel_size": 2, "stride": 1, "dilation": 2},
]


@pytest.mark.parametrize("kw", POOLS, ids=str)
def test_max_pool2d(kw):
  x = sample((2, 3, 7, 8))
  x[0, 0, 0, 0] = np.nan  # NaN wins a window, as in torch
  check(Tensor(x).max_pool2d(**kw), F.max_pool2d(torch.from_numpy(x), **kw), D.float32)


@pytest.mark.parametrize("kw", POOLS, ids=str)
def test_max_pool2d_return_indices_and_max_unpool2d(kw):
  """Indices as torch's (int32 here): the first of equal maxima, the last NaN, never padding; unpool puts back."""
  x = np.round(sample((2, 3, 7, 8), 4), 0)  # rounding makes ties inside windows
  x[0, 0, 0, 0] = x[0, 0, 1, 1] = np.nan
  x[1, 2] = -np.inf  # a plane of -inf: padding (-inf too) must still lose
  want_v, want_i = F.max_pool2d(torch.from_numpy(x), return_indices=True, **kw)
  got_v, got_i = Tensor(x).max_pool2d(return_indices=True, **kw)
  check(got_v, want_v, D.float32, signed_zeros=False)  # torch's max of -0.0 and 0.0 is the first; refgrad's +0.0
  check(got_i, want_i.int(), D.int32)
  unpool_kw = {k: v for k, v in kw.items() if k != "ceil_mode"}
  # torch's max_unpool2d has no dilation: the same scatter written out
  want = torch.zeros(2, 3, 7 * 8).scatter(-1, want_i.flatten(-2), want_v.flatten(-2)).reshape(x.shape)
  check(Tensor.max_unpool2d(got_v, got_i, output_size=x.shape, **unpool_kw), want, D.float32, signed_zeros=False)


def test_max_unpool2d_default_size_ints_and_gradient():
  x = np.arange(2 * 5 * 6, dtype=np.int32).reshape(1, 2, 5, 6) % 7
  v, i = Tensor(x).max_pool2d(2, return_indices=True)
  tv, ti = F.max_pool2d(torch.from_numpy(x).double(), 2, return_indices=True)
  check(i, ti.int(), D.int32)
  check(v.max_unpool2d(i, 2), F.max_unpool2d(tv, ti, 2).numpy().astype(np.int32), D.int32)  # (4, 6): default size
  a = sample((1, 1, 4, 4), 5)
  xg, txg = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  v, i = xg.max_pool2d(2, return_indices=True)
  tv, ti = F.max_pool2d(txg, 2, return_indices=True)
  (v.max_unpool2d(i, 2) * Tensor(a)).sum().backward()
  (F.max_unpool2d(tv, ti, 2) * torch.from_numpy(a)).sum().backward()
  check(xg.grad, txg.grad, D.float32)
  with pytest.raises(RuntimeError, match="indices"):
    v.max_unpool2d(i.reshape(1, 1, 4), 2)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kw", [k for k in POOLS if "dilation" not in k], ids=str)
def test_avg_pool2d(kw, count_include_pad):
  x = sample((2, 3, 7, 8), 1)
  want = F.avg_pool2d(torch.from_numpy(x), count_include_pad=count_include_pad, **kw)
  check(Tensor(x).avg_pool2d(count_include_pad=count_include_pad, **kw), want, D.float32, atol=16 * EPS32)


def test_pools_1d_3d_int_and_dilated_avg():
  x1 = sample((2, 3, 9), 2)
  check(Tensor(x1).max_pool2d((3,), stride=2, padding=1), F.max_pool1d(torch.from_numpy(x1), 3, 2, 1), D.float32)
  x3 = sample((1, 2, 4, 5, 6), 3)
  check(Tensor(x3).avg_pool2d((2, 2, 3)), F.avg_pool3d(torch.from_numpy(x3), (2, 2, 3)), D.float32, atol=8 * EPS32)
  xi = np.arange(2 * 6 * 6, dtype=np.int32).reshape(1, 2, 6, 6) % 7
  check(Tensor(xi).max_pool2d(2), F.max_pool2d(torch.from_numpy(xi.astype(np.float64)), 2).numpy().astype(np.int32),
        D.int32)
  # torch has no dilated avg_pool: the mean of each dilated window, read with unfold
  unfolded = F.unfold(torch.from_numpy(x3[0]), (2, 2), dilation=2).reshape(2, 4, 4, -1).mean(2)
  check(Tensor(x3[0]).avg_pool2d(2, stride=1, dilation=2), unfolded.reshape(2, 4, 3, 4), D.float32, atol=4 * EPS32)


# ---- interpolate
INTERP = [((1, 2, 5), (9,)), ((2, 1, 4, 6), (3, 8)), ((1, 1, 3, 4, 2), (5, 2, 3))]
TORCH_LINEAR = {1: "linear", 2: "bilinear", 3: "trilinear"}


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape, size", INTERP, ids=str)
def test_interpolate_linear(shape, size, align_corners):
  x = sample(shape, 4)
  want = F.interpolate(torch.from_numpy(x), size, mode=TORCH_LINEAR[len(size)], align_corners=align_corners)
  # separable weights round once per dim: 2 roundings of |x| <= 1 per dim
  check(Tensor(x).interpolate(size, align_corners=align_corners), want, D.float32, atol=4 * len(size) * EPS32)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape, size", INTERP + [((1, 2, 7, 5), (3, 11))], ids=str)
def test_interpolate_nearest(shape, size, mode):
  x = sample(shape, 5)
  check(Tensor(x).interpolate(size, mode=mode), F.interpolate(torch.from_numpy(x), size, mode=mode), D.float32)


def test_interpolate_int_nearest():
  x = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
  check(Tensor(x).interpolate((5, 2), mode="nearest"), F.interpolate(torch.from_numpy(x), (5, 2)), D.uint8)


# ---- normalization
@pytest.mark.parametrize("axis, shape", [(-1, (3, 8)), ((1, 2), (2, 3, 4)), (0, (5,))], ids=str)
def test_layernorm(axis, shape):
  x = sample(shape, 6) * 4
  normalized = x.shape[axis:] if isinstance(axis, int) and axis < 0 else x.shape[1:] if axis != 0 else x.shape
  want = F.layer_norm(torch.from_numpy(x).double(), normalized, eps=1e-5).float()
  check(Tensor(x).layernorm(axis), want, D.float32, atol=64 * EPS32 * (np.abs(want.numpy()) + 1))


def test_batchnorm():
  x = sample((2, 3, 4, 4), 7)
  w, b, m, v = sample((3,), 8), sample((3,), 9), sample((3,), 10), sample((3,), 11, 0.5, 2.0)
  want = F.batch_norm(*map(torch.from_numpy, (x, m, v, w, b)), eps=1e-5)
  invstd = Tensor(1 / np.sqrt(v + 1e-5).astype(np.float32))
  check(Tensor(x).batchnorm(Tensor(w), Tensor(b), Tensor(m), invstd), want, D.float32, atol=1e-6)
  check(Tensor(x).batchnorm(None, None, Tensor(m), invstd), F.batch_norm(*map(torch.from_numpy, (x, m, v)), eps=1e-5),
        D.float32, atol=1e-6)


# ---- attention
@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention(mask):
  q, k, v = sample((2, 3, 5, 8), 12), sample((2, 3, 6, 8), 13), sample((2, 3, 6, 4), 14)
  tq, tk, tv = map(torch.from_numpy, (q, k, v))
  kw, tkw = {}, {}
  if mask == "bool":
    m = np.random.default_rng(15).random((5, 6)) < 0.7
    m[:, 0] = True
    kw, tkw = {"attn_mask": Tensor(m)}, {"attn_mask": torch.from_numpy(m)}
  elif mask == "float":
    m = sample((1, 1, 5, 6), 16)
    kw, tkw = {"attn_mask": Tensor(m)}, {"attn_mask": torch.from_numpy(m)}
  elif mask == "causal":
    kw = tkw = {"is_causal": True}
  want = F.scaled_dot_product_attention(tq, tk, tv, **tkw)
  check(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), **kw), want, D.float32, atol=1e-6)


# ---- activations: helpers.ACTIVATIONS, each within its ACTIVATION_ULP bound, and tanh
ACTIVATIONS = {**ACTIVATIONS, "tanh": (lambda x: x.tanh(), torch.tanh)}
ACTIVATION_ULP = {**ACTIVATION_ULP, "tanh": 10}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activations(name):
  x = np.concatenate([np.linspace(-6, 6, 37), [0.0, -0.0, 1e-8, -30.0, 30.0]]).astype(np.float32)
  ours, theirs = ACTIVATIONS[name]
  want = theirs(torch.from_numpy(x).double()).float()
  check(ours(Tensor(x)), want, D.float32, ulp=ACTIVATION_ULP[name], atol=4 * EPS32, signed_zeros=False)


@pytest.mark.parametrize("name", ["gelu tanh", "elu", "softplus", "hardswish", "silu"])
def test_activations_half_and_shapes(name):
  ours, theirs = ACTIVATIONS[name]
  x = sample((2, 0, 3), 17)  # empty
  assert ours(Tensor(x)).numpy().shape == (2, 0, 3)
  h = np.linspace(-4, 4, 9).astype(np.float16).reshape(3, 3).T  # non-contiguous
  check(ours(Tensor(h)), theirs(torch.from_numpy(h.copy()).double()).half(), D.float16, ulp=2, atol=1e-3)


@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_half_activations_at_large_magnitudes(name, dtype):
  """Where an intermediate overflows half's range (exp(12), x * 6 at 20000) the result must not: softplus(12),
  logsigmoid(-12) and hardswish(20000) were inf in float16. bfloat16 gelu(-2) was 3% off (1 + tanh rounded)."""
  ours, theirs = ACTIVATIONS[name]
  x = np.array([-20000, -300, -12, -11.5, -10, -2, -1.5, 1.5, 10, 11.5, 12, 15, 300, 20000], np.float32)
  t = torch.from_numpy(x).to(torch.float16 if dtype == D.float16 else torch.bfloat16)
  check(ours(Tensor(x).cast(dtype)), theirs(t.double()).to(t.dtype), dtype, ulp=2, signed_zeros=False)


def test_gelu_exact_and_softmax_dtype():
  x = np.linspace(-5, 5, 21).astype(np.float32)
  check(Tensor(x).gelu("none"), F.gelu(torch.from_numpy(x).double()).float(), D.float32, ulp=4, atol=4 * EPS32)
  a = sample((3, 5), 18)
  ta = torch.from_numpy(a)
  check(Tensor(a).softmax(0, dtype=D.float64), ta.softmax(0, dtype=torch.float64), D.float64, atol=1e-15)
  check(Tensor(a).log_softmax(-1), ta.log_softmax(-1), D.float32, atol=4e-7)
  check(Tensor(a).T.softmax(-1), ta.T.softmax(-1), D.float32, atol=4e-7)
  check(Tensor(np.array([[-np.inf, 0.0]], np.float32)).softmax(), torch.tensor([[0.0, 1.0]]), D.float32)


# ---- losses
REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy(reduction):
  p = sample((4, 3), 19, 0.0, 1.0)
  p[0, 0], p[0, 1] = 0.0, 1.0  # log clamps at -100, as torch
  y = (sample((4, 3), 20, 0.0, 1.0) > 0.5).astype(np.float32)
  want = F.binary_cross_entropy(torch.from_numpy(p), torch.from_numpy(y), reduction=reduction)
  check(Tensor(p).binary_crossentropy(Tensor(y), reduction), want, D.float32, atol=2e-5)
  x = sample((4, 3), 21, -20, 20)
  pw = sample((3,), 22, 0.5, 2.0)
  want = F.binary_cross_entropy_with_logits(torch.from_numpy(x), torch.from_numpy(y), reduction=reduction,
                                            pos_weight=torch.from_numpy(pw))
  check(Tensor(x).binary_crossentropy_logits(Tensor(y), reduction, Tensor(pw)), want, D.float32, atol=5e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_sparse_categorical_crossentropy(reduction, smoothing):
  x = sample((6, 5), 23, -3, 3)
  y = np.array([0, 4, -1, 2, 1, -1])
  want = F.cross_entropy(torch.from_numpy(x), torch.from_numpy(y), ignore_index=-1, label_smoothing=smoothing,
                         reduction=reduction)
  got = Tensor(x).sparse_categorical_crossentropy(Tensor(y), label_smoothing=smoothing, reduction=reduction)
  check(got, want, D.float32, atol=2e-6)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy(reduction, smoothing):
  x = sample((4, 3, 2), 24, -3, 3)  # (N, C, d): classes along dim 1
  y = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
  tx = torch.from_numpy(x)
  want = F.cross_entropy(tx, torch.from_numpy(y), label_smoothing=smoothing, reduction=reduction)
  check(Tensor(x).cross_entropy(Tensor(y), reduction, smoothing), want, D.float32, atol=2e-6)
  probs = sample((4, 3, 2), 25, 0, 1)
  want = F.cross_entropy(tx, torch.from_numpy(probs), label_smoothing=smoothing, reduction=reduction)
  check(Tensor(x).cross_entropy(Tensor(probs), reduction, smoothing), want, D.float32, atol=2e-6)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
  x = torch.from_numpy(sample((5, 4), 26, -3, 3)).log_softmax(1).numpy()
  y = np.array([3, 0, 1, 3, 2])
  w = sample((4,), 27, 0.1, 2.0) if weighted else None
  tw = torch.from_numpy(w) if weighted else None
  want = F.nll_loss(torch.from_numpy(x), torch.from_numpy(y), tw, ignore_index=3, reduction=reduction)
  got = Tensor(x).nll_loss(Tensor(y), Tensor(w) if weighted else None, ignore_index=3, reduction=reduction)
  check(got, want, D.float32, atol=2e-6)


def test_unreduced_losses_have_torchs_zero_signs():
  """An ignored target's loss is +0.0 and bce(p=0, y=0) too, as in torch (they were -0.0); the other lanes as above."""
  x = torch.from_numpy(sample((4, 3), 28, -3, 3)).log_softmax(1)
  y = torch.tensor([2, -100, 0, -100])
  losses = [(Tensor(x.numpy()).nll_loss(Tensor(y.numpy()), ignore_index=-100, reduction="none"),
             F.nll_loss(x, y, reduction="none")),
            (Tensor(x.numpy()).sparse_categorical_crossentropy(Tensor(y.numpy()), -100, 0.1, "none"),
             F.cross_entropy(x, y, reduction="none", label_smoothing=0.1)),
            (Tensor([0.0, 1.0, 0.5]).binary_crossentropy(Tensor([0.0, 1.0, 0.0]), "none"),
             F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.5]), torch.tensor([0.0, 1.0, 0.0]), reduction="none"))]
  for got, want in losses:
    check(got, want, D.float32, atol=2e-6)
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want.numpy()))  # atol holds -0.0 == +0.0
def test_dropout_training_statistics():
  x = np.ones((200, 100), np.float32)
  assert Tensor(x).dropout(0.3).numpy().tolist() == x.tolist()  # not training: identity
  Tensor.training = True
  try:
    Tensor.manual_seed(3)
    out = Tensor(x).dropout(0.3).numpy()
    assert np.all((out == 0) | np.isclose(out, 1 / 0.7))
    kept = (out != 0).mean()
    assert abs(kept - 0.7) < 4 * np.sqrt(0.21 / x.size)  # 4 standard errors of a binomial proportion
    assert Tensor(x).dropout(1.0).numpy().sum() == 0 and Tensor(x).dropout(0.0).numpy().sum() == x.size
  finally:
    Tensor.training = False


def test_dropout_of_everything_still_has_a_zero_gradient():
  """dropout(1.0) is zeros that depend on x: backward gives x torch's zero gradient (x.grad stayed None)."""
  Tensor.training = True
  try:
    x, tx = Tensor([1.0, -2.0], requires_grad=True), torch.tensor([1.0, -2.0], requires_grad=True)
    x.dropout(1.0).sum().backward()
    F.dropout(tx, 1.0).sum().backward()
    check(x.grad, tx.grad, D.float32)
  finally:
    Tensor.training = False


def test_sequential():
  x = sample((3, 4), 28)
  out = Tensor(x).sequential([Tensor.relu, lambda t: t * 2, lambda t: t.sum(1)])
  check(out, (torch.from_numpy(x).relu() * 2).sum(1), D.float32, atol=1e-6)
