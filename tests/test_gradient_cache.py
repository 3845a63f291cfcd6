"""compute_gradients caches the gradient graphs of a graph structure (issue 30): a graph of a structure seen before,
over other buffers, gets its gradients rebuilt from the template, the very nodes the rules make, with torch's
values."""
import numpy as np
import torch

from refgrad import Tensor, gradient


def _losses(w, x, lib):
  h = (x @ w).relu() * 0.5
  return lib.log_softmax(h, 1).sum() + (h.exp() / 3).sum()


def test_a_graph_of_a_structure_seen_before_gets_the_rules_gradients(monkeypatch):
  calls = []
  differentiate = gradient._differentiate
  monkeypatch.setattr(gradient, "_differentiate", lambda *args: calls.append(1) or differentiate(*args))
  rng = np.random.default_rng(0)
  for _ in range(3):
    w_np, x_np = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
    w = Tensor(w_np, requires_grad=True)
    loss = _losses(w, Tensor(x_np), Tensor)
    seed = loss.ones_like()
    got = gradient.compute_gradients(loss, seed, [w.uop])[w.uop]
    assert got.uop is differentiate(loss, seed, [w.uop])[w.uop].uop
    tw = torch.tensor(w_np, requires_grad=True)
    _losses(tw, torch.tensor(x_np), torch).backward()
    np.testing.assert_allclose(got.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
  assert len(calls) == 1  # the rules ran for the first graph only


def test_graphs_apart_only_by_a_constant_get_their_own_gradients():
  x = Tensor([1.0, -2.0], requires_grad=True)
  for factor in (2.0, 3.0, -0.0, 0.0):
    (x * factor).sum().backward()
    assert x.grad.tolist() == [factor, factor] and [np.signbit(g) for g in x.grad.numpy()] == [np.signbit(factor)] * 2
    x.grad = None


def test_a_graph_reading_one_tensor_twice_is_not_taken_for_one_reading_two():
  """Aliasing: (a * b) then (x * x), of one shape, each against torch; edge values 0, -0.0 and the float32 max."""
  values = np.array([0.0, -0.0, 3.0e38, -2.5], np.float32)
  a, b = Tensor(values, requires_grad=True), Tensor(values[::-1].copy(), requires_grad=True)
  (a * b).sum().backward()
  np.testing.assert_array_equal(a.grad.numpy(), values[::-1])
  x = Tensor(values, requires_grad=True)
  (x * x).sum().backward()
  tx = torch.tensor(values, requires_grad=True)
  (tx * tx).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
