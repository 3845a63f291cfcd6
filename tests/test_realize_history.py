"""Realizing keeps the autograd graph (issue 11): gradients survive realize(), numpy(), item() and tolist() of the
output or of any intermediate, without recomputing what was realized, and without keeping memory alive once no
tensor that needs a gradient refers to it. Gradients are checked against torch."""
import gc
import weakref

import numpy as np
import pytest
import torch

from refgrad import Tensor
from refgrad.nn.optim import SGD
from refgrad.schedule import realized_buffer

pytestmark = pytest.mark.usefixtures("refgrad_device")

X = np.array([1.0, 2.0, 3.0], dtype=np.float32)
W = np.array([0.5, -1.5, 2.0], dtype=np.float32)


def torch_grads(fn, *arrays):
  ts = [torch.tensor(a, requires_grad=True) for a in arrays]
  fn(*ts).backward()
  return [t.grad.numpy() for t in ts]


def close(got, want):
  """float32 gradients summed in another order than torch's; the softmax-shaped loss cancels, so both are about
  3e-5 (relative) from the float64 result."""
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6 * float(np.abs(want).max()))


def loss_fn(x, w):
  """A small graph with a reduce feeding an expand (so the forward schedule has an intermediate buffer)."""
  h = (x * w).exp()
  return (h / h.sum() * x).sum()


READS = {
  "realize": lambda t: t.realize(),
  "numpy": lambda t: t.numpy(),
  "item": lambda t: t.item(),
  "tolist": lambda t: t.tolist(),
}


@pytest.mark.parametrize("read", READS, ids=list(READS))
def test_backward_after_reading_the_loss(read):
  x, w = Tensor(X, requires_grad=True), Tensor(W, requires_grad=True)
  loss = loss_fn(x, w)
  READS[read](loss)
  loss.backward()
  for got, want in zip((x.grad, w.grad), torch_grads(loss_fn, X, W)):
    close(got, want)


def test_the_silent_loss_case_from_the_issue():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  loss = (x * x).sum()
  assert loss.item() == pytest.approx(14.0)
  loss.backward()
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), torch_grads(lambda t: (t * t).sum(), X)[0])


@pytest.mark.parametrize("read", READS, ids=list(READS))
def test_backward_after_reading_an_intermediate(read):
  x, w = Tensor(X, requires_grad=True), Tensor(W, requires_grad=True)
  h = (x * w).exp()
  READS[read](h if read != "item" else h.sum())
  loss = (h / h.sum() * x).sum()
  loss.backward()
  for got, want in zip((x.grad, w.grad), torch_grads(loss_fn, X, W)):
    close(got, want)


def test_gradient_reads_the_realized_intermediate_instead_of_recomputing_it():
  x, w = Tensor(X, requires_grad=True), Tensor(W.reshape(3, 1) * np.ones((3, 4), np.float32), requires_grad=True)
  h = (x.reshape(1, 3) @ w).exp()
  h.realize()
  h_buffer = realized_buffer(h.uop)
  assert h_buffer is not None
  (gx,) = (h * 2).sum().gradient(x)
  items = gx.schedule()
  assert any(h_buffer in item.buffers for item in items), "the gradient's kernels do not read h's buffer"
  want = torch_grads(lambda a, b: ((a.reshape(1, 3) @ b).exp() * 2).sum(), X, w.numpy())[0]
  np.testing.assert_allclose(gx.numpy(), want, rtol=1e-5)


def test_realizing_two_gradients_of_one_graph():
  x, y = Tensor(X, requires_grad=True), Tensor(W, requires_grad=True)
  gx, gy = ((x + y) + 1).square().mean().gradient(x, y)
  Tensor.realize(gx, gy)
  want = torch_grads(lambda a, b: ((a + b) + 1).square().mean(), X, W)
  np.testing.assert_allclose(gx.numpy(), want[0], rtol=1e-6)
  np.testing.assert_allclose(gy.numpy(), want[1], rtol=1e-6)


def test_realize_of_duplicates_shared_graphs_and_realized_tensors():
  a = Tensor(X) * 2
  done = (Tensor(W) + 1).realize()
  b = a + done
  Tensor.realize(a, a, b, done, b)
  np.testing.assert_allclose(a.numpy(), X * 2)
  np.testing.assert_allclose(b.numpy(), X * 2 + W + 1)
  np.testing.assert_allclose(done.numpy(), W + 1)
  assert len(Tensor.schedule(a, b, done)) == 0


def test_a_leaf_realized_after_the_graph_was_built_from_it():
  w = Tensor.rand(3, requires_grad=True)
  loss = (w * w * w).sum()
  w.realize()
  loss.backward()
  value = w.numpy()
  np.testing.assert_allclose(w.grad.numpy(), torch_grads(lambda t: (t * t * t).sum(), value)[0], rtol=1e-5)


def test_the_realized_value_is_not_recomputed_by_later_reads():
  x = Tensor(X, requires_grad=True)
  loss = (x * 3).sum()
  loss.realize()
  assert len(loss.schedule()) == 0
  assert len((loss + 1).schedule()) == 1  # only the new op; the sum is read from its buffer


def test_stored_gradients_carry_no_graph():
  x = Tensor(X, requires_grad=True)
  (x * x).sum().backward()
  x.grad.realize()
  assert realized_buffer(x.grad.uop) is not None and x.grad.uop.op.name in ("BUFFER", "RESHAPE")


def test_no_history_without_a_tensor_that_wants_gradients():
  t = (Tensor(X) * 2).exp().realize()
  assert t.uop.op.name == "BUFFER"
  x = Tensor(X, requires_grad=True)
  with Tensor.inference_mode():
    u = (x * 2).realize()
  assert u.uop.op.name == "BUFFER"


def test_memory_is_freed_once_no_tensor_refers_to_the_graph():
  x = Tensor(X, requires_grad=True)
  h = (x * 2).exp()
  loss = h.sum()
  loss.realize()
  h.realize()
  buffers = [weakref.ref(realized_buffer(t.uop)) for t in (h, loss)]
  loss.backward()
  x.grad.realize()
  del h, loss
  gc.collect()
  assert all(ref() is None for ref in buffers), "realized buffers of a dropped graph are still alive"


def test_training_loop_keeps_no_history_between_steps():
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((4, 3)).astype(np.float32), requires_grad=True)
  data = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
  opt = SGD([w], lr=0.1, momentum=0.9)
  sizes = []
  with Tensor.train():
    for _ in range(4):
      opt.zero_grad()
      loss = (data @ w).relu().square().mean()
      loss.item()
      loss.backward()
      opt.step()
      sizes.append((len(w.uop.toposort), len(opt.b[0].uop.toposort), len(loss.uop.toposort)))
  assert w.uop.op.name in ("BUFFER", "RESHAPE") and sizes[-1] == sizes[1], f"graphs grow across steps: {sizes}"


@pytest.mark.parametrize("order", ["tensor first", "its output first"])
def test_realizing_several_tensors_keeps_each_ones_history_whatever_their_order(order):
  """A tensor made to want gradients (not a leaf of the graph) realized together with a tensor computed from it: the
  output keeps its history in either order. It lost it when the tensor came first (w.grad stayed None): each tensor
  was judged after the ones before it had already dropped their graphs."""
  w = Tensor(W) * 2
  w.requires_grad = True
  h = (w * w).exp()
  Tensor.realize(*((w, h) if order == "tensor first" else (h, w)))
  h.sum().backward()
  (want,) = torch_grads(lambda t: (t * t).exp().sum(), W * 2)
  close(w.grad, want)
