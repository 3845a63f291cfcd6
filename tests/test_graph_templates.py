"""Graph templates (refgrad/frontend/templates.py, issue 30): a templated call builds the very nodes the function's
Tensor ops build, and the key tells apart everything the graph depends on: which arguments are one tensor, 1, True
and 1.0, 0.0 and -0.0, the default dtypes and the training switch. Calls the key cannot stand for, random draws and
views of an argument are never templated. Values against numpy and torch."""
import numpy as np
import pytest
import torch

from examples import cnn, mlp
from examples.training import fit
from refgrad import Tensor, dtypes
from refgrad.frontend import templates
from refgrad.frontend.templates import graph_template
from refgrad.nn.optim import SGD, _lamb_update, _lars_update


def _untemplated(monkeypatch, call):
  monkeypatch.setattr(templates, "ENABLED", False)
  out = call()
  monkeypatch.setattr(templates, "ENABLED", True)
  return out


def _data(*shape, seed=0):
  return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


CALLS = {
  "conv2d": lambda x, w, b: x.conv2d(w, b, padding=1),
  "conv2d without bias, strided": lambda x, w, b: x.conv2d(w, stride=2),
  "max_pool2d": lambda x, w, b: x.max_pool2d(2),
  "relu": lambda x, w, b: x.relu(),
  "linear": lambda x, w, b: x.reshape(4, -1)[:, :16].linear(w.reshape(-1, 3)[:16], b[:3]),
  "sparse_categorical_crossentropy": lambda x, w, b: x.reshape(4, -1)[:, :3].sparse_categorical_crossentropy(
    Tensor([0, 2, 1, 1]), label_smoothing=0.1),
}


@pytest.mark.parametrize("name", CALLS)
def test_a_templated_call_makes_the_nodes_its_tensor_ops_make(monkeypatch, name):
  for seed in range(3):  # the first call records, the others instantiate
    x, w, b = _data(4, 2, 6, 6, seed=seed), _data(3, 2, 3, 3, seed=seed + 10), _data(3, seed=seed + 20)
    templated = CALLS[name](x, w, b)
    direct = _untemplated(monkeypatch, lambda x=x, w=w, b=b: CALLS[name](x, w, b))
    if name.startswith("sparse"):  # its class indices are a buffer of their own each call: compare the values
      np.testing.assert_array_equal(templated.numpy(), direct.numpy())
    else:
      assert templated.uop is direct.uop


def test_an_optimizer_update_makes_the_nodes_its_tensor_ops_make(monkeypatch):
  p, g, m, v = _data(5, 3, seed=1), _data(5, 3, seed=2), _data(5, 3, seed=3), _data(5, 3, seed=4).abs()
  c1, c2, lr = Tensor(0.1), Tensor(0.001), Tensor([0.01]).reshape(())
  lamb_args = [(0.9, 0.999, 1e-8, 0.0, True, 0.0), (0.9, 0.99, 1e-6, 0.1, False, 0.0),
               (0.9, 0.999, 1e-8, 0.0, True, 0.05)]  # b1, b2, eps, wd, adam, l2 (the last: Adam's weight_decay)
  for args in [(p, g, m, v, c1, c2, lr, *rest) for rest in lamb_args]:
    for _ in range(2):
      templated = _lamb_update(*args)
      direct = _untemplated(monkeypatch, lambda args=args: _lamb_update(*args))
      assert [t.uop for t in templated] == [t.uop for t in direct]
  for args in [(p, g, m, lr, 0.9, 1e-4, True, True, 0.001), (p, g, m, lr, 0.9, 0.0, False, False, 0.0),
               (p, g, None, lr, 0.0, 0.0, False, False, 0.0)]:
    for _ in range(2):
      templated = _lars_update(*args)
      direct = _untemplated(monkeypatch, lambda args=args: _lars_update(*args))
      assert [t.uop for t in templated] == [t.uop for t in direct]


@graph_template
def _scaled_sum(x, y, c):
  return x * c + y


def test_arguments_that_are_one_tensor_are_part_of_the_key():
  """Recorded with x twice (a template of x * c + x), then called with two tensors, and the other way round (the
  optimizer's two moments start as one zero constant)."""
  a_np, b_np = np.array([1.0, -2.0, 3.0], np.float32), np.array([10.0, 20.0, 30.0], np.float32)
  a, b = Tensor(a_np), Tensor(b_np)
  np.testing.assert_array_equal(_scaled_sum(a, a, 2.0).numpy(), a_np * 2 + a_np)
  np.testing.assert_array_equal(_scaled_sum(a, b, 2.0).numpy(), a_np * 2 + b_np)
  np.testing.assert_array_equal(_scaled_sum(b, b, 3.0).numpy(), b_np * 3 + b_np)
  np.testing.assert_array_equal(_scaled_sum(b, a, 3.0).numpy(), b_np * 3 + a_np)


@graph_template
def _reshaped_sum(x, y):
  return x.reshape(2, 2) + y


def test_a_node_the_function_makes_that_an_argument_also_is_stays_the_function_s():
  """Recorded with y = x.reshape(2, 2): the function's reshape of x is the very node y is. Called again with an
  unrelated y, the sum must read that y, not x reshaped."""
  x_np, y_np = np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([[5.0, 6.0], [7.0, 8.0]], np.float32)
  x = Tensor(x_np)
  np.testing.assert_array_equal(_reshaped_sum(x, x.reshape(2, 2)).numpy(), x_np.reshape(2, 2) * 2)
  np.testing.assert_array_equal(_reshaped_sum(x, Tensor(y_np)).numpy(), x_np.reshape(2, 2) + y_np)


@graph_template
def _filled(x, c):
  return x.full(x.shape, c, device=x.device)


def test_constants_apart_only_in_type_or_sign_are_apart():
  x, y = Tensor([1.0, -1.0]), Tensor([-0.0, -0.0])
  for c in (0.0, -0.0, 0.0):
    want = np.float32([1.0, -1.0]) * np.float32(c) + np.float32(-0.0)
    np.testing.assert_array_equal(np.signbit(_scaled_sum(x, y, c).numpy()), np.signbit(want))
  assert [_filled(x, c).dtype for c in (1, True, 1.0, 1)] == [dtypes.int32, dtypes.bool, dtypes.float32, dtypes.int32]


@graph_template
def _halved(x):
  return x / 2 if type(x).training else x * 10


def test_the_default_dtypes_and_the_training_switch_are_part_of_the_key():
  x = Tensor([1, 3], dtype=dtypes.int32)
  assert _halved(x).tolist() == [10, 30]
  with Tensor.train():
    assert _halved(x).tolist() == [0.5, 1.5]
    assert _halved(x).dtype == dtypes.float32
  old = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float64
    with Tensor.train():
      assert _halved(x).dtype == dtypes.float64
  finally:
    dtypes.default_float = old


@graph_template
def _noisy(x):
  return x + x.rand_like()


@graph_template
def _rows(x):
  return x.reshape(2, 2)


@graph_template
def _doubled_in_place(x):
  x.assign(x * 2)
  return x + 1


def test_random_draws_writes_to_an_argument_and_views_of_one_are_not_templated():
  x = Tensor.zeros(4).contiguous()
  first, second = _noisy(x).numpy(), _noisy(x).numpy()
  assert not np.array_equal(first, second)  # fresh random numbers each call
  for value in (1.0, 2.0):  # a view writes through to x, as the untemplated reshape's does
    _rows(x).assign(Tensor.full((2, 2), value))
    assert x.tolist() == [value] * 4
  y = Tensor([1.0, 2.0])
  for doubled in ([2.0, 4.0], [4.0, 8.0]):
    assert _doubled_in_place(y).tolist() == [d + 1 for d in doubled] and y.tolist() == doubled


def test_a_bad_call_raises_its_own_error():
  x, w = _data(1, 2, 5, 5), _data(3, 4, 3, 3)
  for _ in range(2):
    with pytest.raises(Exception) as templated:
      x.conv2d(w)
    with pytest.raises(type(templated.value)):
      x.conv2d.__wrapped__(x, w)


def test_calls_the_key_cannot_stand_for_run_untemplated():
  entries = len(templates._TEMPLATES)
  x, y = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  assert _scaled_sum(x, y, np.float32(2.0)).tolist() == [5.0, 8.0]
  assert len(templates._TEMPLATES) == entries


def test_sgd_with_nesterov_momentum_steps_as_torch():
  w_np, x_np = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32), np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)
  w = Tensor(w_np, requires_grad=True)
  opt = SGD([w], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
  tw = torch.tensor(w_np, requires_grad=True)
  topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      (Tensor(x_np) @ w).square().sum().backward()
      opt.step()
      topt.zero_grad()
      (torch.tensor(x_np) @ tw).square().sum().backward()
      topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
def test_training_losses_are_the_same_bits_with_and_without_templates(monkeypatch, model_name):
  """examples/training.py's Adam loop, 4 steps: the last loss and the accuracy after it."""
  model, data = (mlp.MLP, mlp.spirals(30)) if model_name == "mlp" else (cnn.CNN, cnn.shapes(24))
  templated = fit(model, data, 4, None, 0, quiet=True)
  direct = _untemplated(monkeypatch, lambda: fit(model, data, 4, None, 0, quiet=True))
  assert np.float32(templated["loss"]).view(np.uint32) == np.float32(direct["loss"]).view(np.uint32)
  assert templated["accuracy"] == direct["accuracy"] and 0 < templated["loss"] < 1.2


@pytest.mark.parametrize("values", [np.array(-0.0, np.float32), np.zeros((0, 3), np.float32),
                                    np.array([[-0.0, 0.0, np.nan], [-np.inf, np.finfo(np.float32).max, -1e-45]],
                                             np.float32)], ids=["0-d", "empty", "edges"])
def test_relu_and_linear_at_the_edges_give_numpys_values_on_a_template_hit(values):
  """The second call of a key runs the template: -0.0, NaN, infinities, the extremes, 0-d and empty tensors, and a
  realized intermediate as the argument."""
  weight = np.arange(9, dtype=np.float32).reshape(3, 3) - 4 if values.ndim == 2 else None
  for _ in range(2):
    x = Tensor(values) * 1  # a fresh graph each time (* 1 keeps -0.0, + 0 would not)
    x.realize()
    relu = x.relu().numpy()
    np.testing.assert_array_equal(relu, np.where(values < 0, np.float32(0), values))
    assert np.array_equal(np.signbit(relu), np.signbit(np.where(values < 0, np.float32(0), values)))
    if weight is not None:
      with np.errstate(over="ignore", invalid="ignore"):  # the oracle's own overflow to inf and inf - inf
        expected = values @ weight
      np.testing.assert_array_equal(x.linear(Tensor(weight)).numpy(), expected)
