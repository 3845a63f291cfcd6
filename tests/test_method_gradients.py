"""Gradients of the differentiable Tensor methods of API.md against torch autograd over ordinary inputs, on every
device (issue 6); the same methods at edge points: test_grad_edges.py; autograd's own rules: test_autograd.py.

Each check seeds the output with fixed random weights and compares d(sum(out * w))/d(input) for every float
input. Tolerances: rtol=1e-4 with atol=1e-6 relative to the largest gradient is the default (float32 gradients
built from a few transcendentals and small sums); larger ones are justified where they are used. Inputs are kept
away from kinks (relu6 at 0/6, clamp bounds, ...) and from ties, where subgradients may legitimately differ.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual torch alias
from helpers import ACTIVATIONS, grads_match

from refgrad import Tensor

pytestmark = pytest.mark.usefixtures("refgrad_device")

RNG = np.random.default_rng(6)


def data(*shape, lo=None, hi=None, dtype=np.float32):
  """Standard normal values, or uniform in [lo, hi] when bounds are given."""
  x = RNG.uniform(lo, hi, shape) if lo is not None else RNG.standard_normal(shape)
  return x.astype(dtype)


def idx(values):
  """An int32 refgrad index tensor and the matching int64 torch one."""
  a = np.asarray(values, dtype=np.int32)
  return Tensor(a), torch.tensor(a.astype(np.int64))


# ---------------------------------------------------------------- elementwise
# name: (refgrad fn, torch fn, input range (lo, hi) or None for standard normal)
ELEMENTWISE = {
  "neg": (lambda x: -x, lambda x: -x, None),
  "exp": (lambda x: x.exp(), torch.exp, None),
  "log": (lambda x: x.log(), torch.log, (0.5, 3.5)),
  "sqrt": (lambda x: x.sqrt(), torch.sqrt, (0.5, 3.5)),
  "sin": (lambda x: x.sin(), torch.sin, None),
  "cos": (lambda x: x.cos(), torch.cos, None),
  "tanh": (lambda x: x.tanh(), torch.tanh, None),
  "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal, (0.5, 3.5)),
  "abs": (lambda x: x.abs(), torch.abs, None),
  "mul by itself": (lambda x: x * x, lambda x: x * x, None),
  "pow int 3": (lambda x: x ** 3, lambda x: x ** 3, None),
  "tan": (lambda x: x.tan(), torch.tan, (-1.2, 1.2)),
  "asin": (lambda x: x.asin(), torch.asin, (-0.9, 0.9)),
  "acos": (lambda x: x.acos(), torch.acos, (-0.9, 0.9)),
  "atan": (lambda x: x.atan(), torch.atan, None),
  "sinh": (lambda x: x.sinh(), torch.sinh, None),
  "cosh": (lambda x: x.cosh(), torch.cosh, None),
  "asinh": (lambda x: x.asinh(), torch.asinh, None),
  "acosh": (lambda x: x.acosh(), torch.acosh, (1.2, 4.0)),
  "atanh": (lambda x: x.atanh(), torch.atanh, (-0.9, 0.9)),
  "erf": (lambda x: x.erf(), torch.erf, None),
  "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt, (0.3, 3.0)),
  "exp2": (lambda x: x.exp2(), torch.exp2, None),
  "log2": (lambda x: x.log2(), torch.log2, (0.3, 3.0)),
  "square": (lambda x: x.square(), torch.square, None),
  "clamp both": (lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7), None),
  "clamp min only": (lambda x: x.clamp(min_=0.1), lambda x: x.clamp(min=0.1), None),
  "clip max only": (lambda x: x.clip(max_=0.2), lambda x: x.clip(max=0.2), None),
  "pow tensor scalar": (lambda x: x ** 2.5, lambda x: x ** 2.5, (0.3, 3.0)),
  "rpow": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, None),
  "floor is flat": (lambda x: x.floor() * x, lambda x: x.floor() * x, None),
  "trunc is flat": (lambda x: x.trunc() + x * x, lambda x: x.trunc() + x * x, None),
}


# erf's gradient exp(-x^2) and tan's 1 + tan^2 lose a few float32 ulps more than the others
LOOSER_ELEMENTWISE = {"erf": 3e-4, "tan": 3e-4}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(name):
  rg, th, bounds = ELEMENTWISE[name]
  x = data(3, 5) if bounds is None else data(3, 5, lo=bounds[0], hi=bounds[1])
  grads_match(rg, th, x, rtol=LOOSER_ELEMENTWISE.get(name, 1e-4))


BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / b, lambda a, b: a / b),
  "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
  "minimum": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b)),
  "where": (lambda a, b: (a > b).where(a, b * 2), lambda a, b: torch.where(a > b, a, b * 2)),
  "mod": (lambda a, b: a % b, torch.remainder),  # b's gradient: minus the quotients, summed over the broadcast rows
  "matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T),
  "copysign": (lambda a, b: a.copysign(b), torch.copysign),  # b gets zeros
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_broadcasting(name):
  """A few float32 ops and a sum: rtol 1e-5."""
  rg, th = BINARY[name]
  if name == "matmul":
    grads_match(rg, th, data(3, 4), data(5, 4), rtol=1e-5)
  else:
    grads_match(rg, th, data(3, 4), data(1, 4) + 3.0 if name == "div" else data(1, 4), rtol=1e-5)


@pytest.mark.parametrize("name", ["tan", "asinh", "acosh", "atanh", "erf", "rsqrt"])
def test_elementwise_float64(name):
  rg, th, bounds = ELEMENTWISE[name]
  x = data(2, 3, dtype=np.float64) if bounds is None else data(2, 3, lo=bounds[0], hi=bounds[1], dtype=np.float64)
  # erf is a polynomial approximation in refgrad (accurate to ~1e-7 relative, not to float64 precision)
  grads_match(rg, th, x, rtol=1e-6 if name == "erf" else 1e-10)


def test_lerp_with_tensor_weight():
  grads_match(lambda a, b, w: a.lerp(b, w), torch.lerp, data(3, 4), data(3, 4), data(1, 4, lo=0.0, hi=1.0))


def test_lerp_with_scalar_weight():
  grads_match(lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), data(3, 4), data(4))


def test_where_with_broadcast_branches():
  cond = RNG.standard_normal((3, 4)) > 0
  grads_match(lambda a, b: Tensor(cond).where(a, b), lambda a, b: torch.where(torch.tensor(cond), a, b),
              data(3, 4), data(1, 4))


def test_where_with_scalar_branch():
  cond = RNG.standard_normal((3, 4)) > 0
  grads_match(lambda a: Tensor(cond).where(a, 2.0), lambda a: torch.where(torch.tensor(cond), a, 2.0), data(3, 4))


def test_masked_fill():
  mask = RNG.standard_normal((1, 4)) > 0
  grads_match(lambda a: a.masked_fill(Tensor(mask), -1.5), lambda a: a.masked_fill(torch.tensor(mask), -1.5),
              data(3, 4))


def test_binary_ops_float64_with_broadcasting():
  a, b = data(3, 4, dtype=np.float64), data(3, 1, lo=0.5, hi=2.0, dtype=np.float64)
  grads_match(lambda a, b: (a / b + a * b - b ** a.abs()).maximum(a), lambda a, b: torch.maximum(
    a / b + a * b - b ** a.abs(), a), a, b, rtol=1e-10)


# ---------------------------------------------------------------- activations
# the activations' table, and two that normalize over an axis
ACTIVATIONS = {**ACTIVATIONS, "softmax": (lambda x: x.softmax(0), lambda x: x.softmax(0)),
               "log_softmax": (lambda x: x.log_softmax(), lambda x: x.log_softmax(-1))}
# spread over [-8, 8] so every piece (relu6 above 6, hardswish beyond +-3, elu's exponential side) is exercised
ACT_INPUT = np.linspace(-8.0, 8.0, 4 * 9, dtype=np.float32).reshape(4, 9) + np.float32(0.0137)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name):
  rg, th = ACTIVATIONS[name]
  grads_match(rg, th, ACT_INPUT.copy(), rtol=1e-4)


@pytest.mark.parametrize("name", ["gelu tanh", "mish", "selu", "softplus", "logsigmoid"])
def test_activation_float64(name):
  rg, th = ACTIVATIONS[name]
  # the transcendentals are evaluated by refgrad's own float64 code; 1e-9 leaves room for their last few ulps
  grads_match(rg, th, ACT_INPUT.astype(np.float64), rtol=1e-9)


# ---------------------------------------------------------------- reductions and scans
REDUCTIONS = {
  "sum": (lambda x: x.sum(1), lambda x: x.sum(1)),
  "sum all": (lambda x: x.sum(), lambda x: x.sum()),
  "mean tuple keepdim": (lambda x: x.mean((0, 2), keepdim=True), lambda x: x.mean((0, 2), keepdim=True)),
  "max": (lambda x: x.max(2), lambda x: x.amax(2)),
  "min": (lambda x: x.min(0), lambda x: x.amin(0)),
  "prod dim 1": (lambda x: x.prod(1), lambda x: x.prod(1)),
  "softmax": (lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
  "log_softmax": (lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
  "logsumexp dim 2": (lambda x: x.logsumexp(2), lambda x: x.logsumexp(2)),
  "var": (lambda x: x.var(1), lambda x: x.var(1)),
  "var correction 0": (lambda x: x.var((0, 2), correction=0), lambda x: x.var((0, 2), correction=0)),
  "var correction 2 keepdim": (lambda x: x.var(2, keepdim=True, correction=2),
                               lambda x: x.var(2, keepdim=True, correction=2)),
  "var all": (lambda x: x.var(), lambda x: x.var()),
  "std": (lambda x: x.std(0), lambda x: x.std(0)),
  "std correction 0": (lambda x: x.std((1, 2), correction=0), lambda x: x.std((1, 2), correction=0)),
  "std_mean": (lambda x: x.std_mean(1)[0] * 2 + x.std_mean(1)[1],
               lambda x: torch.std_mean(x, 1)[0] * 2 + torch.std_mean(x, 1)[1]),
  "mean tuple": (lambda x: x.mean((0, 2)), lambda x: x.mean((0, 2))),
  "mean negative tuple keepdim": (lambda x: x.mean((-1, -3), keepdim=True), lambda x: x.mean((-1, -3), keepdim=True)),
  "sum tuple": (lambda x: x.sum((1, 2)), lambda x: x.sum((1, 2))),
  "prod": (lambda x: x.prod(2), lambda x: x.prod(2)),
  "max keepdim": (lambda x: x.max(1, keepdim=True), lambda x: x.amax(1, keepdim=True)),
  "min all": (lambda x: x.min(), lambda x: x.amin()),
  "logsumexp": (lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
  "logsumexp keepdim": (lambda x: x.logsumexp(-1, keepdim=True), lambda x: x.logsumexp(-1, keepdim=True)),
  "logsumexp all": (lambda x: x.logsumexp(), lambda x: x.logsumexp((0, 1, 2))),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
  "cummax": (lambda x: x.cummax(2), lambda x: torch.cummax(x, 2).values),
  "logcumsumexp": (lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(1)),
  "triu": (lambda x: x.triu(1), lambda x: x.triu(1)),
  "tril": (lambda x: x.tril(-1), lambda x: x.tril(-1)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_and_scan(name):
  rg, th = REDUCTIONS[name]
  grads_match(rg, th, data(2, 3, 5))


def test_max_ties_share_the_gradient_like_torch_amax():
  x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=np.float32)
  grads_match(lambda t: t.max(1), lambda t: t.amax(1), x, rtol=1e-5)


@pytest.mark.parametrize("name", ["var correction 2 keepdim", "std", "logsumexp", "cumsum"])
def test_reduction_and_scan_float64(name):
  rg, th = REDUCTIONS[name]
  grads_match(rg, th, data(2, 3, 5, dtype=np.float64), rtol=1e-10)


# ---------------------------------------------------------------- movement
def _split_mix(parts):
  return [p * (i + 1) for i, p in enumerate(parts)]


MOVEMENT = {
  "reshape": (lambda x: x.reshape(6, 5), lambda x: x.reshape(6, 5)),
  "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
  "expand": (lambda x: x[:, :1].expand(2, 5, 5), lambda x: x[:, :1].expand(2, 5, 5)),
  "flip": (lambda x: x.flip(1), lambda x: x.flip(1)),
  "pad": (lambda x: x.pad(((0, 0), (1, 2), (3, 0))), lambda x: F.pad(x, (3, 0, 1, 2))),
  "shrink and step": (lambda x: x[:, 1:3, ::2], lambda x: x[:, 1:3, ::2]),
  "transpose": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
  "cat": (lambda x: x.cat(x * 2, x[:, :1], dim=1), lambda x: torch.cat([x, x * 2, x[:, :1]], 1)),
  "cat negative dim": (lambda x: x.cat(x.exp(), dim=-1), lambda x: torch.cat([x, x.exp()], -1)),
  "stack": (lambda x: x.stack(x * 3, dim=1), lambda x: torch.stack([x, x * 3], 1)),
  "stack last": (lambda x: x.stack(x.sin(), dim=-1), lambda x: torch.stack([x, x.sin()], -1)),
  "split sizes": (lambda x: Tensor.cat(*_split_mix(x.split([1, 3, 1], 2)), dim=2),
                  lambda x: torch.cat(_split_mix(torch.split(x, [1, 3, 1], 2)), 2)),
  "split int": (lambda x: Tensor.cat(*_split_mix(x.split(2, 1)), dim=1),
                lambda x: torch.cat(_split_mix(torch.split(x, 2, 1)), 1)),
  "chunk": (lambda x: Tensor.cat(*_split_mix(x.chunk(3, 2)), dim=2),
            lambda x: torch.cat(_split_mix(torch.chunk(x, 3, 2)), 2)),
  "repeat": (lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
  "repeat new dims": (lambda x: x.repeat(2, 1, 1, 2), lambda x: x.repeat(2, 1, 1, 2)),
  "repeat_interleave": (lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, 1)),
  "roll": (lambda x: x.roll(2, 2), lambda x: x.roll(2, 2)),
  "roll multi": (lambda x: x.roll((1, -2), (0, 2)), lambda x: x.roll((1, -2), (0, 2))),
  "pad constant value": (lambda x: x.pad((1, 2, 0, 1), value=1.5), lambda x: F.pad(x, (1, 2, 0, 1), value=1.5)),
  "pad negative": (lambda x: x.pad((-1, 2, 1, -1)), lambda x: F.pad(x, (-1, 2, 1, -1))),
  "pad reflect": (lambda x: x.pad((1, 3, 2, 1), mode="reflect"), lambda x: F.pad(x, (1, 3, 2, 1), mode="reflect")),
  "pad replicate": (lambda x: x.pad((2, 1, 3, 1), mode="replicate"),
                    lambda x: F.pad(x, (2, 1, 3, 1), mode="replicate")),
  "pad circular": (lambda x: x.pad((2, 1, 1, 3), mode="circular"),
                   lambda x: F.pad(x, (2, 1, 1, 3), mode="circular")),
  "squeeze unsqueeze": (lambda x: x[:, :1].squeeze(1).unsqueeze(0), lambda x: x[:, :1].squeeze(1).unsqueeze(0)),
  "flatten unflatten": (lambda x: x.flatten(1).unflatten(1, (5, 3)), lambda x: x.flatten(1).unflatten(1, (5, 3))),
  "rearrange": (lambda x: x.rearrange("a b c -> c (a b)"), lambda x: x.permute(2, 0, 1).reshape(5, 6)),
  "view and T": (lambda x: x.view(6, 5).T, lambda x: x.reshape(6, 5).T),
  "negative step slice": (lambda x: x[::-1, 2:0:-1, ::-2], lambda x: x.flip(0)[:, [2, 1]][:, :, [4, 2, 0]]),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement(name):
  rg, th = MOVEMENT[name]
  grads_match(rg, th, data(2, 3, 5), rtol=1e-5)


def test_cat_and_stack_of_different_inputs():
  grads_match(lambda a, b, c: a.cat(b, c, dim=0).stack(a.cat(c, b, dim=0)),
              lambda a, b, c: torch.stack([torch.cat([a, b, c]), torch.cat([a, c, b])]), data(2, 3), data(1, 3),
              data(2, 3))


def test_meshgrid():
  def ours(a, b):
    ga, gb = Tensor.meshgrid(a, b, indexing="ij")
    return ga * gb.exp()

  def theirs(a, b):
    ga, gb = torch.meshgrid(a, b, indexing="ij")
    return ga * gb.exp()
  grads_match(ours, theirs, data(3), data(4))


def test_pad_float64_reflect():
  grads_match(lambda x: x.pad((2, 1), mode="reflect"), lambda x: F.pad(x, (2, 1), mode="reflect"),
              data(2, 3, 5, dtype=np.float64), rtol=1e-12)


# ---------------------------------------------------------------- indexing
def test_gather():
  index = RNG.integers(0, 4, (3, 6))
  i_rg, i_t = idx(index)
  grads_match(lambda x: x.gather(1, i_rg), lambda x: torch.gather(x, 1, i_t), data(3, 4))


def test_gather_first_dim():
  index = RNG.integers(0, 3, (5, 2))
  i_rg, i_t = idx(index)
  grads_match(lambda x: x.gather(0, i_rg), lambda x: torch.gather(x, 0, i_t), data(3, 4))


def test_advanced_indexing_repeated_indices_accumulate():
  i_rg, i_t = idx([0, 2, 0, 3, 2])
  grads_match(lambda x: x[i_rg], lambda x: x[i_t], data(4, 3))


def test_advanced_indexing_two_tensors_broadcast():
  r_rg, r_t = idx([[0], [2], [1]])
  c_rg, c_t = idx([1, 3, 3, 0])
  grads_match(lambda x: x[r_rg, 1:, c_rg], lambda x: x[r_t, 1:, c_t], data(3, 3, 4))


def test_advanced_indexing_negative_and_list():
  i_rg, i_t = idx([-1, 0, -2])
  grads_match(lambda x: x[:, i_rg] + x[[1, 0], :][:, :3], lambda x: x[:, i_t] + x[[1, 0], :][:, :3], data(2, 4))


def test_scatter_replaces():
  # unique indices along dim 1 per row, so the result does not depend on write order
  index = np.stack([RNG.permutation(5)[:3] for _ in range(2)])
  i_rg, i_t = idx(index)
  grads_match(lambda x, s: x.scatter(1, i_rg, s), lambda x, s: torch.scatter(x, 1, i_t, s), data(2, 5), data(2, 3))


def test_scatter_add():
  i_rg, i_t = idx([[0, 1, 2, 0], [2, 2, 0, 1]])
  grads_match(lambda x, s: x.scatter(0, i_rg, s, reduce="add"), lambda x, s: torch.scatter_add(x, 0, i_t, s),
              data(3, 4), data(2, 4))


@pytest.mark.parametrize("reduce,include_self", [("sum", True), ("sum", False), ("mean", True), ("mean", False),
                                                 ("amax", True), ("amin", False)])
def test_scatter_reduce(reduce, include_self):
  i_rg, i_t = idx([[0, 1, 1], [2, 0, 0]])
  grads_match(lambda x, s: x.scatter_reduce(1, i_rg, s, reduce, include_self=include_self),
              lambda x, s: torch.scatter_reduce(x, 1, i_t, s, reduce, include_self=include_self),
              data(2, 4), data(2, 3))


# ---------------------------------------------------------------- nn functional
def test_conv_pools_and_cross_entropy_at_tight_tolerances():
  x, w, b = data(2, 3, 7, 7), data(4, 3, 3, 3), data(4)
  grads_match(lambda x, w, b: x.conv2d(w, b, padding=1, stride=2),
              lambda x, w, b: F.conv2d(x, w, b, padding=1, stride=2), x, w, b, rtol=1e-4)
  grads_match(lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2), x, rtol=1e-5)
  grads_match(lambda x: x.avg_pool2d(3, stride=2), lambda x: F.avg_pool2d(x, 3, stride=2), x, rtol=1e-5)
  logits, labels = data(5, 4), np.array([0, 3, 1, 1, 2], dtype=np.int32)
  ours = Tensor(logits, requires_grad=True)
  ours.sparse_categorical_crossentropy(Tensor(labels)).backward()
  theirs = torch.tensor(logits, requires_grad=True)
  F.cross_entropy(theirs, torch.tensor(labels, dtype=torch.long)).backward()
  np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-7)


CONVS = {
  "conv2d groups dilation stride": (
    lambda x, w, b: x.conv2d(w, b, groups=2, stride=2, dilation=2, padding=1),
    lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
    ((2, 4, 7, 7), (6, 2, 3, 3), (6,))),
  "conv2d asymmetric": (
    lambda x, w, b: x.conv2d(w, b, stride=(1, 2), padding=(2, 1)),
    lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(2, 1)),
    ((1, 3, 5, 6), (2, 3, 3, 2), (2,))),
  "conv2d depthwise": (
    lambda x, w, b: x.conv2d(w, b, groups=3),
    lambda x, w, b: F.conv2d(x, w, b, groups=3),
    ((2, 3, 5, 5), (3, 1, 3, 3), (3,))),
  "conv1d": (
    lambda x, w, b: x.conv2d(w, b, stride=2, padding=1),
    lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
    ((2, 3, 9), (4, 3, 3), (4,))),
  "conv_transpose2d": (
    lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=1, output_padding=1),
    lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
    ((1, 4, 4, 4), (4, 3, 3, 3), (3,))),
  "conv_transpose2d groups dilation": (
    lambda x, w, b: x.conv_transpose2d(w, b, groups=2, dilation=2),
    lambda x, w, b: F.conv_transpose2d(x, w, b, groups=2, dilation=2),
    ((2, 4, 3, 3), (4, 1, 2, 2), (2,))),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolution(name):
  rg, th, shapes = CONVS[name]
  # sums of up to 36 products: float32 reordering between refgrad's and torch's accumulation needs 3e-4
  grads_match(rg, th, *(data(*s) for s in shapes), rtol=3e-4)


def test_conv2d_float64():
  rg, th, shapes = CONVS["conv2d groups dilation stride"]
  grads_match(rg, th, *(data(*s, dtype=np.float64) for s in shapes), rtol=1e-10)


POOLS = {
  "avg_pool2d padding": (lambda x: x.avg_pool2d(3, stride=2, padding=1),
                         lambda x: F.avg_pool2d(x, 3, stride=2, padding=1)),
  "avg_pool2d padding exclude": (lambda x: x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False),
                                 lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
  "avg_pool2d ceil_mode": (lambda x: x.avg_pool2d(2, stride=2, ceil_mode=True),
                           lambda x: F.avg_pool2d(x, 2, stride=2, ceil_mode=True)),
  "avg_pool2d ceil_mode padding": (lambda x: x.avg_pool2d(3, stride=2, padding=1, ceil_mode=True),
                                   lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)),
  "max_pool2d": (lambda x: x.max_pool2d(2), lambda x: F.max_pool2d(x, 2)),
  "max_pool2d overlap padding": (lambda x: x.max_pool2d(3, stride=2, padding=1),
                                 lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
  "max_pool2d ceil_mode": (lambda x: x.max_pool2d(2, stride=2, ceil_mode=True),
                           lambda x: F.max_pool2d(x, 2, stride=2, ceil_mode=True)),
  "max_pool2d dilation": (lambda x: x.max_pool2d(2, stride=1, dilation=2), lambda x: F.max_pool2d(x, 2, 1, 0, 2)),
  "interpolate bilinear": (lambda x: x.interpolate((5, 8)),
                           lambda x: F.interpolate(x, size=(5, 8), mode="bilinear", align_corners=False)),
  "interpolate bilinear align_corners": (lambda x: x.interpolate((3, 9), align_corners=True),
                                         lambda x: F.interpolate(x, (3, 9), mode="bilinear", align_corners=True)),
  "interpolate linear downsample": (lambda x: x.interpolate((4,)),
                                    lambda x: F.interpolate(x.flatten(1, 2), (4,), mode="linear").unflatten(1, (2, 7))),
  "interpolate nearest": (lambda x: x.interpolate((9, 4), mode="nearest"),
                          lambda x: F.interpolate(x, (9, 4), mode="nearest")),
  "interpolate nearest-exact": (lambda x: x.interpolate((5, 10), mode="nearest-exact"),
                                lambda x: F.interpolate(x, (5, 10), mode="nearest-exact")),
}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_pool_and_interpolate(name):
  rg, th = POOLS[name]
  grads_match(rg, th, data(1, 2, 7, 7))


def test_layernorm():
  grads_match(lambda x: x.layernorm(), lambda x: F.layer_norm(x, (5,)), data(3, 4, 5), rtol=3e-4)


def test_layernorm_two_axes_eps():
  # normalisation divides by a small std, amplifying float32 rounding: 3e-4
  grads_match(lambda x: x.layernorm((-2, -1), eps=1e-3), lambda x: F.layer_norm(x, (4, 5), eps=1e-3),
              data(3, 4, 5), rtol=3e-4)


def test_layernorm_float64_with_affine():
  grads_match(lambda x, w, b: x.layernorm() * w + b, lambda x, w, b: F.layer_norm(x, (5,), w, b),
              data(3, 5, dtype=np.float64), data(5, dtype=np.float64), data(5, dtype=np.float64), rtol=1e-10)


def test_batchnorm_all_parameters():
  def theirs(x, w, b, m, s):
    shape = (1, -1, 1, 1)
    return (x - m.reshape(shape)) * w.reshape(shape) * s.reshape(shape) + b.reshape(shape)
  grads_match(lambda x, w, b, m, s: x.batchnorm(w, b, m, s), theirs, data(2, 3, 4, 4), data(3), data(3), data(3),
              data(3, lo=0.5, hi=2.0))


def test_batchnorm_eval_against_torch_batch_norm():
  mean, var = data(3), data(3, lo=0.5, hi=2.0)
  invstd = (1 / np.sqrt(var + 1e-5)).astype(np.float32)
  grads_match(lambda x, w, b: x.batchnorm(w, b, Tensor(mean), Tensor(invstd)),
              lambda x, w, b: F.batch_norm(x, torch.tensor(mean), torch.tensor(var), w, b, training=False),
              data(2, 3, 4, 4), data(3), data(3))


def test_batchnorm_training_statistics():
  def ours(x, w, b):
    mean = x.mean((0, 2, 3))
    invstd = (x.var((0, 2, 3), correction=0) + 1e-5).rsqrt()
    return x.batchnorm(w, b, mean, invstd)
  # gradients through the batch statistics cancel to small values: 3e-4
  grads_match(ours, lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), data(4, 3, 3, 3), data(3),
              data(3), rtol=3e-4)


def test_batchnorm_last_axis_no_affine():
  mean, invstd = data(4), data(4, lo=0.5, hi=2.0)
  grads_match(lambda x: x.batchnorm(None, None, Tensor(mean), Tensor(invstd), axis=-1),
              lambda x: (x - torch.tensor(mean)) * torch.tensor(invstd), data(3, 4))


SDPA_MASK = np.array([[True, False, True, True], [True, True, False, False], [False, True, True, True]])
SDPA = {
  "plain": (lambda q, k, v: q.scaled_dot_product_attention(k, v), F.scaled_dot_product_attention),
  "bool mask": (lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(SDPA_MASK)),
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(SDPA_MASK))),
  "float mask": (lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(SDPA_MASK * 0.5 - 1.0)),
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(
                   SDPA_MASK * 0.5 - 1.0, dtype=torch.float32))),
}


@pytest.mark.parametrize("name", sorted(SDPA))
def test_scaled_dot_product_attention(name):
  rg, th = SDPA[name]
  grads_match(rg, th, data(2, 3, 5), data(2, 4, 5), data(2, 4, 3))


def test_scaled_dot_product_attention_causal_4d():
  grads_match(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
              lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
              data(1, 2, 4, 3), data(1, 2, 4, 3), data(1, 2, 4, 2))


def test_scaled_dot_product_attention_float64():
  grads_match(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
              lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
              data(3, 4, dtype=np.float64), data(3, 4, dtype=np.float64), data(3, 2, dtype=np.float64), rtol=1e-10)


def test_linear():
  # tinygrad's weight layout is (in, out): torch's F.linear takes its transpose
  grads_match(lambda x, w, b: x.linear(w, b), lambda x, w, b: F.linear(x, w.T, b), data(2, 3, 4), data(4, 5), data(5))


def test_linear_elementwise_weight_no_bias():
  grads_match(lambda x, w: x.linear(w), lambda x, w: x * w, data(3, 4), data(4))


EINSUM = {
  "ij,jk->ik": ((3, 4), (4, 5)),
  "bij,bjk->bik": ((2, 3, 4), (2, 4, 2)),
  "ij->ji": ((3, 4),),
  "i,j->ij": ((3,), (4,)),
  "ii->i": ((3, 3),),
  "ij,ij->": ((3, 4), (3, 4)),
  "...ij,...jk": ((2, 3, 4), (4, 2)),
}


@pytest.mark.parametrize("formula", sorted(EINSUM))
def test_einsum(formula):
  grads_match(lambda *ts: Tensor.einsum(formula, *ts), lambda *ts: torch.einsum(formula, *ts),
              *(data(*s) for s in EINSUM[formula]))


def test_matmul_float64():
  grads_match(lambda a, b: a @ b, lambda a, b: a @ b, data(2, 3, 4, dtype=np.float64), data(4, 2, dtype=np.float64),
              rtol=1e-12)


# ---------------------------------------------------------------- losses
REDUCTION_MODES = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
def test_binary_crossentropy(reduction):
  y = data(3, 4, lo=0.0, hi=1.0)
  y[0, :2] = [0.0, 1.0]
  grads_match(lambda p: p.binary_crossentropy(Tensor(y), reduction=reduction),
              lambda p: F.binary_cross_entropy(p, torch.tensor(y), reduction=reduction),
              data(3, 4, lo=0.05, hi=0.95))


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
def test_binary_crossentropy_logits(reduction):
  y = data(3, 4, lo=0.0, hi=1.0)
  grads_match(lambda x: x.binary_crossentropy_logits(Tensor(y), reduction=reduction),
              lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction=reduction), data(3, 4) * 3)


def test_binary_crossentropy_logits_pos_weight():
  y = (RNG.uniform(size=(3, 4)) > 0.5).astype(np.float32)
  pw = data(4, lo=0.5, hi=3.0)  # constant: torch has no gradient for pos_weight
  grads_match(lambda x: x.binary_crossentropy_logits(Tensor(y), pos_weight=Tensor(pw)),
              lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), pos_weight=torch.tensor(pw)),
              data(3, 4))


SCCE_LABELS = [0, 3, -1, 2, 1, 3]


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy(reduction, smoothing):
  y_rg, y_t = idx(SCCE_LABELS)
  grads_match(lambda x: x.sparse_categorical_crossentropy(y_rg, label_smoothing=smoothing, reduction=reduction),
              lambda x: F.cross_entropy(x, y_t, ignore_index=-1, label_smoothing=smoothing, reduction=reduction),
              data(6, 4))


def test_sparse_categorical_crossentropy_ignore_index_and_batch_dims():
  labels = np.array([[0, 3, 2], [2, 2, 1]])
  y_rg, y_t = idx(labels)
  grads_match(lambda x: x.sparse_categorical_crossentropy(y_rg, ignore_index=2, label_smoothing=0.1),
              lambda x: F.cross_entropy(x.permute(0, 2, 1), y_t, ignore_index=2, label_smoothing=0.1),
              data(2, 3, 4))


def test_sparse_categorical_crossentropy_float64():
  y_rg, y_t = idx(SCCE_LABELS)
  grads_match(lambda x: x.sparse_categorical_crossentropy(y_rg, label_smoothing=0.1),
              lambda x: F.cross_entropy(x, y_t, ignore_index=-1, label_smoothing=0.1), data(6, 4, dtype=np.float64),
              rtol=1e-10)


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_indices(reduction, smoothing):
  y_rg, y_t = idx([[1, 0, 4], [3, 3, 2]])
  grads_match(lambda x: x.cross_entropy(y_rg, reduction=reduction, label_smoothing=smoothing),
              lambda x: F.cross_entropy(x, y_t, reduction=reduction, label_smoothing=smoothing), data(2, 5, 3))


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
def test_cross_entropy_probabilities(reduction):
  probs = np.random.default_rng(3).dirichlet(np.ones(4), 3).astype(np.float32)
  grads_match(lambda x, p: x.cross_entropy(p, reduction=reduction, label_smoothing=0.1),
              lambda x, p: F.cross_entropy(x, p, reduction=reduction, label_smoothing=0.1), data(3, 4), probs)


def test_cross_entropy_one_dim():
  y_rg, y_t = idx(2)
  grads_match(lambda x: x.cross_entropy(y_rg), lambda x: F.cross_entropy(x, y_t), data(5))


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
def test_nll_loss_with_weight(reduction):
  y_rg, y_t = idx([0, 2, 1, 2, 3])
  w = data(4, lo=0.2, hi=2.0)
  grads_match(lambda x: x.log_softmax().nll_loss(y_rg, weight=Tensor(w), reduction=reduction),
              lambda x: F.nll_loss(x.log_softmax(-1), y_t, weight=torch.tensor(w), reduction=reduction), data(5, 4))


@pytest.mark.parametrize("reduction", REDUCTION_MODES)
def test_nll_loss_ignore_index_spatial(reduction):
  y_rg, y_t = idx([[0, 1, 2], [2, 2, 0]])
  w = data(3, lo=0.2, hi=2.0)  # constant: torch has no gradient for nll_loss's weight
  grads_match(lambda x: x.nll_loss(y_rg, weight=Tensor(w), ignore_index=1, reduction=reduction),
              lambda x: F.nll_loss(x, y_t, weight=torch.tensor(w), ignore_index=1, reduction=reduction),
              data(2, 3, 3))


def test_nll_loss_no_weight():
  y_rg, y_t = idx([1, 0, 2])
  grads_match(lambda x: x.nll_loss(y_rg), lambda x: F.nll_loss(x, y_t), data(3, 3))
