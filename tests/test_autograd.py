"""Gradients against torch autograd, on every device. Tolerances: gradients are compositions of a few float32
ops (and sums), so they are compared with rtol=1e-5 plus atol=1e-6 relative to the largest gradient, except
where a transcendental is involved (rtol 1e-4)."""
import functools

import helpers
import numpy as np
import pytest
import torch

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")

RNG = np.random.default_rng(0)


def data(*shape, positive=False):
  x = RNG.standard_normal(shape).astype(np.float32)
  return np.abs(x) + 0.5 if positive else x


# helpers.grads_match (shapes, dtypes, values) at this file's tolerance: rtol=1e-5 unless a test says more
grads_match = functools.partial(helpers.grads_match, rtol=1e-5)


UNARY = {
  "neg": (lambda x: -x, lambda x: -x, False),
  "exp": (lambda x: x.exp(), lambda x: x.exp(), False),
  "log": (lambda x: x.log(), lambda x: x.log(), True),
  "sqrt": (lambda x: x.sqrt(), lambda x: x.sqrt(), True),
  "sin": (lambda x: x.sin(), lambda x: x.sin(), False),
  "cos": (lambda x: x.cos(), lambda x: x.cos(), False),
  "tanh": (lambda x: x.tanh(), lambda x: x.tanh(), False),
  "sigmoid": (lambda x: x.sigmoid(), lambda x: x.sigmoid(), False),
  "relu": (lambda x: x.relu(), lambda x: x.relu(), False),
  "reciprocal": (lambda x: x.reciprocal(), lambda x: x.reciprocal(), True),
  "abs": (lambda x: x.abs(), lambda x: x.abs(), False),
  "square": (lambda x: x * x, lambda x: x * x, False),
  "pow": (lambda x: x ** 3, lambda x: x ** 3, False),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name):
  rg, th, positive = UNARY[name]
  grads_match(rg, th, data(3, 4, positive=positive), rtol=1e-4)


BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / b, lambda a, b: a / b),
  "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
  "minimum": (lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b)),
  "where": (lambda a, b: (a > b).where(a, b * 2), lambda a, b: torch.where(a > b, a, b * 2)),
  "matmul": (lambda a, b: a @ b.T, lambda a, b: a @ b.T),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients_with_broadcasting(name):
  rg, th = BINARY[name]
  if name == "matmul":
    grads_match(rg, th, data(3, 4), data(5, 4))
  else:
    grads_match(rg, th, data(3, 4), data(1, 4) + 3.0 if name == "div" else data(1, 4))


MOVEMENT = {
  "reshape": (lambda x: x.reshape(6, 4), lambda x: x.reshape(6, 4)),
  "permute": (lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
  "expand": (lambda x: x[:, :1].expand(2, 5, 4), lambda x: x[:, :1].expand(2, 5, 4)),
  "flip": (lambda x: x.flip(1), lambda x: x.flip(1)),
  "pad": (lambda x: x.pad(((0, 0), (1, 2), (3, 0))), lambda x: torch.nn.functional.pad(x, (3, 0, 1, 2))),
  "shrink and step": (lambda x: x[:, 1:3, ::2], lambda x: x[:, 1:3, ::2]),
  "transpose": (lambda x: x.transpose(0, 2), lambda x: x.transpose(0, 2)),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement_gradients(name):
  rg, th = MOVEMENT[name]
  grads_match(rg, th, data(2, 3, 4))


REDUCE = {
  "sum": (lambda x: x.sum(1), lambda x: x.sum(1)),
  "sum all": (lambda x: x.sum(), lambda x: x.sum()),
  "mean": (lambda x: x.mean((0, 2), keepdim=True), lambda x: x.mean((0, 2), keepdim=True)),
  "max": (lambda x: x.max(2), lambda x: x.amax(2)),
  "min": (lambda x: x.min(0), lambda x: x.amin(0)),
  "prod": (lambda x: x.prod(1), lambda x: x.prod(1)),
  "softmax": (lambda x: x.softmax(-1), lambda x: x.softmax(-1)),
  "log_softmax": (lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
  "logsumexp": (lambda x: x.logsumexp(2), lambda x: x.logsumexp(2)),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reduction_gradients(name):
  rg, th = REDUCE[name]
  grads_match(rg, th, data(2, 3, 4), rtol=1e-4)


def test_max_ties_share_the_gradient_like_torch_amax():
  x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=np.float32)
  grads_match(lambda t: t.max(1), lambda t: t.amax(1), x)


def test_nn_functional_gradients():
  x, w, b = data(2, 3, 7, 7), data(4, 3, 3, 3), data(4)
  grads_match(lambda x, w, b: x.conv2d(w, b, padding=1, stride=2),
              lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=1, stride=2), x, w, b, rtol=1e-4)
  grads_match(lambda x: x.max_pool2d(2), lambda x: torch.nn.functional.max_pool2d(x, 2), x)
  grads_match(lambda x: x.avg_pool2d(3, stride=2), lambda x: torch.nn.functional.avg_pool2d(x, 3, stride=2), x)
  logits, labels = data(5, 4), np.array([0, 3, 1, 1, 2], dtype=np.int32)
  ours = Tensor(logits, requires_grad=True)
  ours.sparse_categorical_crossentropy(Tensor(labels)).backward()
  theirs = torch.tensor(logits, requires_grad=True)
  torch.nn.functional.cross_entropy(theirs, torch.tensor(labels, dtype=torch.long)).backward()
  np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_gradient_accumulates_and_zero_grad_resets():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (x * x).sum().backward()
  (x * 2).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [4.0, 6.0, 8.0])


def test_gradient_api_and_requires_grad_semantics():
  x = Tensor([1.0, 2.0], requires_grad=True)
  frozen = Tensor([3.0, 4.0], requires_grad=False)
  undecided = Tensor([5.0, 6.0])
  (x * frozen * undecided).sum().backward()
  assert x.grad is not None and frozen.grad is None and undecided.grad is None
  gx, gu = (x * undecided).sum().gradient(x, undecided)
  np.testing.assert_allclose(gx.numpy(), [5.0, 6.0])
  np.testing.assert_allclose(gu.numpy(), [1.0, 2.0])
  assert x.detach().requires_grad is None
  assert (x.detach() * 2).sum().gradient(x, materialize_grads=True)[0].tolist() == [0.0, 0.0]


def test_integer_and_comparison_ops_have_no_gradient():
  x = Tensor([1.5, -2.5], requires_grad=True)
  y = (x > 0).cast(dtypes.float32) * 3 + x.cast(dtypes.int32).cast(dtypes.float32)
  g = y.sum().gradient(x, materialize_grads=True)[0]
  assert g.tolist() == [0.0, 0.0]


def test_gradient_errors_are_clear():
  x = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="only for scalar outputs.*shape \\(2,\\)"):
    (x * 2).backward()
  with pytest.raises((RuntimeError, ValueError), match="gradient of shape \\(3,\\).*\\(2,\\)"):
    (x * 2).backward(gradient=Tensor([1.0, 1.0, 1.0]))
  other = Tensor([1.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="not part of this tensor's graph"):
    (x * 2).sum().gradient(other)
  with Tensor.inference_mode(), pytest.raises(RuntimeError, match="only for scalar outputs"):
    (x * 2).backward()  # storing nothing, backward still checks its seed


@pytest.mark.parametrize("switch", [Tensor.test, Tensor.inference_mode])
def test_no_grad_switches_store_no_gradients(switch):
  """As tinygrad 0.10: backward() under Tensor.no_grad (Tensor.test() sets it) leaves .grad as it was; gradient()
  is an explicit request and still answers (torch.autograd.grad is the oracle); the switch is restored on exit."""
  x = Tensor([1.0, 2.0], requires_grad=True)
  with switch():
    assert Tensor.no_grad
    (x * x).sum().backward()
    assert x.grad is None
    got = (x * x * x).sum().gradient(x)[0]
  assert not Tensor.no_grad
  xt = torch.tensor([1.0, 2.0], requires_grad=True)
  np.testing.assert_allclose(got.numpy(), torch.autograd.grad((xt ** 3).sum(), xt)[0].numpy(), rtol=1e-6)
  (x * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
  with switch():
    (x * x).sum().backward()  # an existing gradient is kept, not accumulated into
  np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_test_mode_is_a_decorator_and_leaves_training_alone():
  @Tensor.test()
  def step(x):
    (x * 3).sum().backward()
    return Tensor.training
  x = Tensor([1.0], requires_grad=True)
  with Tensor.train():
    assert step(x) is True  # tinygrad 0.10's Tensor.test sets only no_grad
  assert x.grad is None and not Tensor.no_grad and not Tensor.training
  with Tensor.test(False):
    (x * 3).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [3.0])


def test_clone_keeps_requires_grad_and_a_copy_of_grad():
  """tinygrad's clone keeps both; the gradient flows back through a clone as through torch's."""
  x = Tensor([1.0, -2.0], requires_grad=True)
  (x * x).sum().backward()
  c = x.clone()
  assert c.requires_grad is True and c.grad is not x.grad
  np.testing.assert_allclose(c.grad.numpy(), [2.0, -4.0])
  x.grad = x.grad * 0
  np.testing.assert_allclose(c.grad.numpy(), [2.0, -4.0])
  assert Tensor([1.0]).clone().requires_grad is None and Tensor([1.0]).clone().grad is None
  assert Tensor([1.0], requires_grad=False).clone().requires_grad is False
  xt = torch.tensor([1.0, -2.0], requires_grad=True)
  (xt.clone() * 3).exp().sum().backward()
  y = Tensor([1.0, -2.0], requires_grad=True)
  (y.clone() * 3).exp().sum().backward()
  np.testing.assert_allclose(y.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name,fn", [
  ("softplus of a product", lambda a, b: (a * b).softplus().sum()),
  ("normalised exp", lambda a, b: ((a - a.max()).exp() / (a - a.max()).exp().sum() * b).sum()),
  ("tanh matmul", lambda a, b: (a @ b.T).tanh().mean()),
  ("pow and sqrt", lambda a, b: ((a * a + 1).sqrt() * b.abs() ** 1.5).sum()),
])
def test_finite_differences_in_float64(name, fn):
  """Central differences (h=1e-6) agree with the analytic gradient to 1e-6 relative in float64."""
  a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
  ta = Tensor(a, requires_grad=True)
  fn(ta, Tensor(b)).backward()
  numeric = np.zeros_like(a)
  for index in np.ndindex(a.shape):
    hi, lo = a.copy(), a.copy()
    hi[index] += 1e-6
    lo[index] -= 1e-6
    numeric[index] = (fn(Tensor(hi), Tensor(b)).item() - fn(Tensor(lo), Tensor(b)).item()) / 2e-6
  np.testing.assert_allclose(ta.grad.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_requires_grad_passes_to_computed_tensors_but_not_through_a_detach():
  """As in tinygrad (and torch): a tensor computed from one that requires grad requires grad itself."""
  x = Tensor([1.0, 2.0], requires_grad=True)
  assert (x * 2).requires_grad is True and x.sum().requires_grad is True
  assert x.detach().requires_grad is None and (x.detach() * 2).requires_grad is None
  assert Tensor([1.0]).requires_grad is None and Tensor([1.0], requires_grad=False).requires_grad is False


def test_backward_sets_grad_on_a_non_leaf_that_requires_grad():
  """y = x * 3 with y.requires_grad set: backward fills y.grad and x.grad (torch's retain_grad values)."""
  x = Tensor([1.0, -2.0, 0.5], requires_grad=True)
  y = x * 3
  y.requires_grad = True
  (y * y).sum().backward()
  tx = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
  ty = tx * 3
  ty.retain_grad()
  (ty * ty).sum().backward()
  np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy())
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_tensors_computed_from_ones_that_require_grad_get_their_gradient_too():
  """tinygrad's rule (torch keeps only the leaves' unless retain_grad): every live tensor in the graph that requires
  grad gets .grad, also when the leaf it was computed from is gone; torch with retain_grad is the oracle."""
  x0, w0 = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32), np.array([[0.5, -1.0], [2.0, 0.0]], np.float32)
  x, w = Tensor(x0), Tensor(w0, requires_grad=True)
  hidden = x.matmul(w)
  out = hidden.relu().sum()
  out.backward()
  tx, tw = torch.tensor(x0), torch.tensor(w0, requires_grad=True)
  th = tx @ tw
  th.retain_grad()
  th.relu().sum().backward()
  np.testing.assert_allclose(hidden.grad.numpy(), th.grad.numpy())
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
  assert x.grad is None and out.grad is None  # no gradient wanted; the output itself gets none
  column = Tensor([1.0, 2.0], requires_grad=True).reshape(2, 1)  # the leaf is dropped at once
  column.square().sum().backward()
  np.testing.assert_array_equal(column.grad.numpy(), [[2.0], [4.0]])
