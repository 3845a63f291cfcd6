"""How autograd behaves, on every device: gradients accumulate, requires_grad and no_grad rules, clear errors, clone,
non-leaf gradients, and finite differences in float64 (torch autograd the oracle where it has the rule). Each op's
gradient against torch: test_method_gradients.py (ordinary inputs) and test_grad_edges.py (edge points)."""
import numpy as np
import pytest
import torch

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")

RNG = np.random.default_rng(0)


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
  with pytest.raises(AssertionError, match="only for scalar outputs"):  # tinygrad's type; torch's RuntimeError too
    (x * 2).gradient(x)
  ints = Tensor([1, 2, 3])
  for out in (ints.sum(), ints.float().sum()):  # no gradient of an int tensor: torch and tinygrad raise too
    with pytest.raises(RuntimeError, match="int32.*\\(3,\\)"):
      out.gradient(ints)


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


def test_backward_of_a_leaf_gives_it_the_seed_as_torch():
  """x.backward(g) on a leaf (a 0-d loss parameter, dropout's identity outside training) sets x.grad = g and
  accumulates (torch and tinygrad); it left x.grad None. A computed output still gets no .grad of its own."""
  x, tx = Tensor([1.0, -2.0], requires_grad=True), torch.tensor([1.0, -2.0], requires_grad=True)
  for seed in ([3.0, 4.0], [0.5, -1.0]):
    x.dropout(0.5).backward(Tensor(seed))
    tx.backward(torch.tensor(seed))
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
  s = Tensor(2.0, requires_grad=True)
  s.backward()
  assert s.grad.shape == () and s.grad.item() == 1.0
  loss = (x * x).sum()
  loss.backward()
  assert loss.grad is None


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
  chained = Tensor([1.0, -2.0], requires_grad=True) * 2 + 1  # the leaf is gone before `+ 1` runs
  (chained * chained * 3).sum().backward()
  tc = torch.tensor([1.0, -2.0], requires_grad=True) * 2 + 1
  tc.retain_grad()
  (tc * tc * 3).sum().backward()
  np.testing.assert_array_equal(chained.grad.numpy(), tc.grad.numpy())  # was None
  kept = Tensor([1.0, -2.0], requires_grad=True)
  copies = [kept.contiguous(), (kept * 2).contiguous()]
  sum((c * c).sum() for c in copies).backward()
  tk = torch.tensor([1.0, -2.0], requires_grad=True)
  tcopies = [tk.clone(), tk * 2]
  for t in tcopies:
    t.retain_grad()
  sum((t * t).sum() for t in tcopies).backward()
  for c, t in zip(copies, tcopies):  # contiguous() results were left out (None)
    np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())
  halved = Tensor([1.0, -2.0], requires_grad=True).cast(dtypes.float16).contiguous().realize()  # the leaf is gone
  (halved * halved * 3).sum().backward()
  th = torch.tensor([1.0, -2.0], requires_grad=True).half()
  th.retain_grad()
  (th * th * 3).sum().backward()
  assert halved.requires_grad  # was None: realize dropped the graph to the dead leaf and what it wanted
  np.testing.assert_array_equal(halved.grad.numpy(), th.grad.numpy())


def test_equal_constant_tensors_that_require_grad_are_distinct_leaves():
  """Hash-consing makes equal graphs one node: two Tensor.ones(3) were one leaf, so each got the other's gradient
  too (w*2 + x*3 gave both 5). A tensor that starts to want gradients now gets a buffer of its own; torch's
  distinct leaves are the oracle. Values, signed zeros included, are unchanged."""
  w, x = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
  tw, tx = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
  (w * 2 + x * 3 + w * Tensor.ones(3)).sum().backward()
  (tw * 2 + tx * 3 + tw * torch.ones(3)).sum().backward()
  np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
  a, b = Tensor(-0.0, requires_grad=True), Tensor(-0.0, requires_grad=True)
  ta, tb = torch.tensor(-0.0, requires_grad=True), torch.tensor(-0.0, requires_grad=True)
  assert np.signbit(a.numpy()) and np.signbit(Tensor.full((2,), -0.0, requires_grad=True).numpy()).all()
  ga, gb = (a * b * b + 1).gradient(a, b)
  tga, tgb = torch.autograd.grad(ta * tb * tb + 1, (ta, tb))
  np.testing.assert_array_equal([ga.item(), gb.item()], [tga.item(), tgb.item()])
  empty = Tensor.zeros(0, 2, requires_grad=True)
  assert empty.sum().gradient(empty)[0].shape == (0, 2)
  with pytest.raises(RuntimeError, match="not part of"):  # an equal tensor is another leaf
    empty.sum().gradient(Tensor.zeros(0, 2, requires_grad=True))


def test_equal_computed_leaf_and_layer_weights_get_their_own_gradients():
  """x.exp() made twice is one node; the one set to require gradients is a leaf of its own (torch: a tensor computed
  without gradients is a leaf). Two LayerNorms of one size start with equal weights: each gets its own gradient."""
  from refgrad import nn
  from refgrad.nn import optim
  v = np.array([0.5, -1.0, 2.0], np.float32)
  a = Tensor(v).exp()
  a.requires_grad = True
  (a * Tensor(v).exp()).sum().backward()
  ta = torch.from_numpy(v).exp().requires_grad_()
  (ta * torch.from_numpy(v).exp()).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
  x = RNG.standard_normal((4, 3)).astype(np.float32)
  ours, theirs = [nn.LayerNorm(3), nn.LayerNorm(3)], [torch.nn.LayerNorm(3), torch.nn.LayerNorm(3)]
  optim.SGD([p for n in ours for p in (n.weight, n.bias)], lr=0.1)  # makes them require gradients
  xs, txs = Tensor(x), torch.from_numpy(x)
  (ours[0](xs).sum() * 0 + (ours[1](xs) * xs).sum()).backward()
  (theirs[0](txs).sum() * 0 + (theirs[1](txs) * txs).sum()).backward()
  for n, tn in zip(ours, theirs):
    np.testing.assert_allclose(n.weight.grad.numpy(), tn.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n.bias.grad.numpy(), tn.bias.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_graph_built_before_the_parameters_want_gradients_still_reaches_them():
  """An optimizer made after the forward pass makes the parameters want gradients (and gives each a buffer of its
  own); the graph built before still leads to them. torch's Linear is the oracle."""
  from refgrad import nn
  from refgrad.nn import optim
  x = RNG.standard_normal((4, 3)).astype(np.float32)
  layer, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2)
  with torch.no_grad():
    theirs.weight.copy_(torch.from_numpy(layer.weight.numpy()))
    theirs.bias.copy_(torch.from_numpy(layer.bias.numpy()))
  loss = (layer(Tensor(x)) ** 2).sum()
  optim.SGD([layer.weight, layer.bias], lr=0.1)
  loss.backward()
  (theirs(torch.from_numpy(x)) ** 2).sum().backward()
  np.testing.assert_allclose(layer.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(layer.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-5, atol=1e-6)
