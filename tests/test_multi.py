"""Tensors over several devices (Tensor.shard, refgrad/multi.py), on every device's numbered instances: every op
kind on split and replicated tensors against numpy, uneven and empty parts, the sum across devices within the
reduction bound, autograd and an optimizer on sharded parameters against one device, and the errors."""
import numpy as np
import pytest
from helpers import edge_values, training_step

from refgrad import Device, Tensor, TinyJit, dtypes
from refgrad.nn import Linear
from refgrad.nn.optim import Adam
from refgrad.uop import Ops


def instances(device, n):
  return tuple(device if i == 0 else f"{device}:{i}" for i in range(n))


def last_device(t):
  return t.device[-1] if isinstance(t.device, tuple) else t.device


EDGES = edge_values(dtypes.float32)


def data(shape, seed=0):
  rng = np.random.default_rng(seed)
  values = rng.standard_normal(shape).astype(np.float32)
  flat = values.reshape(-1)
  flat[:min(flat.size, EDGES.size)] = EDGES[:flat.size]
  return values


# (name, tensor program, numpy program): run on a (5, 6) input split along `axis`, or replicated; no sum of floats
PROGRAMS = [
  ("mul_add", lambda t: t * 2 + 1, lambda a: a * 2 + 1),
  ("exp_where", lambda t: (t > 0).where(t.exp(), -t), lambda a: np.where(a > 0, np.exp(a), -a)),
  ("transpose", lambda t: t.T, lambda a: a.T),
  ("reshape_rows", lambda t: t.reshape(3, 10), lambda a: a.reshape(3, 10)),
  ("reshape_flat", lambda t: t.reshape(30), lambda a: a.reshape(30)),
  ("reshape_split", lambda t: t.reshape(5, 2, 3), lambda a: a.reshape(5, 2, 3)),
  ("flip", lambda t: t.flip(0).flip(1), lambda a: a[::-1, ::-1]),
  ("shrink", lambda t: t[1:4, 2:5], lambda a: a[1:4, 2:5]),
  ("step_slice", lambda t: t[::2, ::-3], lambda a: a[::2, ::-3]),
  ("pad", lambda t: t.pad(((1, 2), (3, 0))), lambda a: np.pad(a, ((1, 2), (3, 0)))),
  ("expand", lambda t: t.reshape(5, 1, 6).expand(5, 4, 6), lambda a: np.broadcast_to(a.reshape(5, 1, 6), (5, 4, 6))),
  ("max0", lambda t: t.max(0), lambda a: a.max(0)),
  ("max1", lambda t: t.max(1), lambda a: a.max(1)),
  ("max_all", lambda t: t.max(), lambda a: a.max()),
  ("count_positive", lambda t: (t > 0).sum(0), lambda a: (a > 0).sum(0)),
  ("any_negative", lambda t: (t < 0).any(1), lambda a: (a < 0).any(1)),
  ("int_prod", lambda t: (t > 0).cast(dtypes.int32).add(1).prod(0), lambda a: ((a > 0).astype(np.int32) + 1).prod(0)),
  ("cat_self", lambda t: t.cat(t * -1, dim=0), lambda a: np.concatenate([a, -a], 0)),
  ("gather", lambda t: t.to(last_device(t)) + 0, lambda a: a),
]
FLOAT_SUMS = [
  ("sum0", lambda t: t.sum(0), lambda a: a.sum(0, dtype=np.float64)),
  ("sum1", lambda t: t.sum(1), lambda a: a.sum(1, dtype=np.float64)),
  ("mean", lambda t: t.mean(), lambda a: a.mean(dtype=np.float64)),
  ("softmax", lambda t: t.softmax(0), lambda a: np.exp(a - a.max(0)) / np.exp(a - a.max(0)).sum(0)),
  ("matmul", lambda t: t @ t.T, lambda a: a.astype(np.float64) @ a.T),
]


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("name, program, expected", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_programs_give_the_one_device_bits(refgrad_device, name, program, expected, axis):
  """Bit for bit the program's result on one device, and close to numpy's (exp may differ from numpy's by ulps)."""
  a = data((5, 6))
  devices = instances(refgrad_device, 2)
  out = program(Tensor(a, device=refgrad_device).shard(devices, axis=axis)).numpy()
  one = program(Tensor(a, device=refgrad_device)).numpy()
  np.testing.assert_array_equal(out.reshape(-1).view(np.uint8), one.reshape(-1).view(np.uint8))
  with np.errstate(all="ignore"):
    np.testing.assert_allclose(out, expected(a), rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name, program, expected", FLOAT_SUMS, ids=[p[0] for p in FLOAT_SUMS])
def test_sums_across_devices_within_the_reduction_bound(refgrad_device, name, program, expected, axis):
  a = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
  out = program(Tensor(a, device=refgrad_device).shard(instances(refgrad_device, 2), axis=axis))
  np.testing.assert_allclose(out.numpy(), expected(a), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("size, count, splits, sizes", [(5, 3, None, (2, 2, 1)), (2, 3, None, (1, 1, 0)),
                                                        (0, 2, None, (0, 0)), (6, 2, (6, 0), (6, 0)),
                                                        (6, 3, (1, 4, 1), (1, 4, 1))])
def test_uneven_and_empty_parts(size, count, splits, sizes):
  """Parts of different sizes and empty ones: values, sums, maxima, pads and slices still match numpy."""
  a = data((size, 3))
  t = Tensor(a, device="PYTHON").shard(instances("PYTHON", count), axis=0, splits=splits)
  assert tuple(p.shape[0] for p in t.uop.src) == sizes
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal(t.max(0).numpy(), a.max(0, initial=-np.inf))  # over nothing: -inf, as on one device
  np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-6)
  np.testing.assert_array_equal(t.pad(((2, 1), (0, 0))).flip(0).numpy(), np.pad(a, ((2, 1), (0, 0)))[::-1])
  np.testing.assert_array_equal(t[1:].numpy(), a[1:])


def test_even_split_sizes_follow_tinygrad():
  t = Tensor.arange(10, device="PYTHON").shard(instances("PYTHON", 4), axis=0)
  assert t.uop.arg == (0, ((0, 3), (3, 6), (6, 9), (9, 10)))
  assert [p.device for p in t.uop.src] == ["PYTHON", "PYTHON:1", "PYTHON:2", "PYTHON:3"]


def test_negative_zero_survives_a_gather_and_a_split_max(refgrad_device):
  """Joining parts picks values (no add of zeros: -0.0 + 0.0 would be 0.0); the max of +0 and -0 is +0."""
  a = np.array([[-0.0, 0.0], [-0.0, -0.0], [0.0, -0.0]], np.float32)
  t = Tensor(a, device=refgrad_device).shard(instances(refgrad_device, 2), axis=0)
  np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(a))
  np.testing.assert_array_equal(np.signbit(t.max(0).numpy()), [False, False])
  np.testing.assert_array_equal(np.signbit(t[1:2].max(0).numpy()), [True, True])


def test_zero_d_and_integer_extremes_give_the_one_device_values(refgrad_device):
  """A 0-d tensor copied to each device; an int32 sum across devices that wraps around as on one device."""
  devices = instances(refgrad_device, 2)
  zero = Tensor(-0.0, device=refgrad_device)
  assert np.signbit((zero.shard(devices) * 2).item()) and (zero.shard(devices) * 2).shape == ()
  extremes = np.array([2**31 - 1, 1, -2**31, -1, 5], np.int32)
  one, many = Tensor(extremes, device=refgrad_device), Tensor(extremes, device=refgrad_device).shard(devices, axis=0)
  assert many.sum().item() == one.sum().item() and many.max().item() == 2**31 - 1 and many.min().item() == -2**31


def test_reduce_over_the_split_axis_uses_an_allreduce_and_stays_replicated():
  t = Tensor(data((4, 3)), device="PYTHON").shard(instances("PYTHON", 2), axis=0)
  items = t.sum(0).schedule()
  assert sum(item.ast.op is Ops.ALLREDUCE for item in items) == 2  # one per device
  s = t.sum(0).realize()
  assert s.uop.op is Ops.MULTI and s.uop.arg == (None, None)
  np.testing.assert_array_equal(*(p.arg.numpy() if p.op is Ops.BUFFER else Tensor(p).numpy() for p in s.uop.src))


def test_resharding_between_axes(refgrad_device):
  a = data((4, 6))
  devices = instances(refgrad_device, 2)
  rows = Tensor(a, device=refgrad_device).shard(devices, axis=0)
  cols = rows.shard(devices, axis=1)
  assert cols.uop.arg[0] == 1
  with np.errstate(over="ignore"):
    np.testing.assert_array_equal((rows + cols).numpy(), a + a)
    np.testing.assert_array_equal((cols * rows.shard(devices)).numpy(), a * a)


@pytest.mark.parametrize("axis, splits", [(0, None), (1, (1, 0, 5)), (None, None)], ids=str)
def test_pickle_keeps_the_split(refgrad_device, axis, splits):
  """A pickled tensor over several devices comes back with its devices, split axis and parts (a lazy one too); an
  empty part and uneven parts stay so."""
  import pickle
  a = data((4, 6))
  devices = instances(refgrad_device, 3)
  t = Tensor(a, device=refgrad_device).shard(devices, axis=axis, splits=splits)
  lazy = t * 2
  with np.errstate(over="ignore"):  # the edge values' largest doubled
    twice = a * 2
  for original, want in ((t, a), (lazy, twice)):
    back = pickle.loads(pickle.dumps(original))
    assert back.device == devices and back.shape == want.shape
    assert back.realize().uop.op is Ops.MULTI and back.uop.arg == original.realize().uop.arg
    np.testing.assert_array_equal(back.numpy(), want)
    np.testing.assert_array_equal(back.to(devices[-1]).numpy(), want)


def test_to_and_shard_of_a_sharded_tensor():
  a = data((4, 2))
  t = Tensor(a, device="PYTHON").shard(instances("PYTHON", 2), axis=0)
  assert t.to(("PYTHON", "PYTHON:1")) is t
  three = t.to(instances("PYTHON", 3))
  assert three.device == instances("PYTHON", 3) and three.uop.arg == (None, None)
  np.testing.assert_array_equal(three.numpy(), a)
  np.testing.assert_array_equal(t.to("PYTHON:5").numpy(), a)
  assert Tensor(a, device=("PYTHON", "PYTHON:1")).uop.op is Ops.MULTI


def test_shard_in_place_and_realize_keep_the_values():
  a = data((6, 2))
  t = Tensor(a, device="PYTHON")
  assert t.shard_(instances("PYTHON", 2), axis=0) is t and t.device == ("PYTHON", "PYTHON:1")
  (t * 3).realize()
  t.realize()
  assert all(p.op in (Ops.BUFFER, Ops.RESHAPE) for p in t.uop.src)
  np.testing.assert_array_equal(t.numpy(), a)


def test_gradients_of_sharded_inputs_and_parameters_match_one_device(refgrad_device):
  rng = np.random.default_rng(3)
  x_np, w_np = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)

  def grads(devices):
    x = Tensor(x_np, device=refgrad_device, requires_grad=True)
    w = Tensor(w_np, device=refgrad_device, requires_grad=True)
    xs, ws = (x.shard(devices, axis=0), w.shard(devices)) if devices else (x, w)
    ((xs @ ws).relu() * (xs @ ws).tanh()).sum().backward()
    return x.grad.numpy(), w.grad.numpy()

  for one, many in zip(grads(None), grads(instances(refgrad_device, 2))):
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-6)


def test_gradient_of_a_replicated_input_is_counted_once():
  x = Tensor([1.0, 2.0, 3.0], device="PYTHON", requires_grad=True)
  (x.shard(instances("PYTHON", 3)) * 2).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def _mlp_losses(device, shard, steps=8):
  Tensor.manual_seed(0)
  rng = np.random.default_rng(0)
  x, y = Tensor(rng.standard_normal((16, 3)).astype(np.float32), device=device), \
    Tensor(rng.integers(0, 4, 16).astype(np.int32), device=device)
  layers = [Linear(3, 8), Linear(8, 4)]
  params = [p for layer in layers for p in (layer.weight, layer.bias)]
  for p in params:
    p.replace(p.to(device)).realize()
  if shard:
    x, y = x.shard(shard, axis=0), y.shard(shard, axis=0)
    for p in params:
      p.shard_(shard)
  opt, losses = Adam(params, lr=0.05), []
  with Tensor.train():
    for _ in range(steps):
      opt.zero_grad()
      loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      losses.append(loss.item())
  return np.array(losses), [p.numpy() for p in params]


@pytest.mark.parametrize("device", ["PYTHON", "CLANG"])
def test_data_parallel_training_follows_the_one_device_loss_curve(device):
  """On the reference and one compiled device (each instance of a compiled device builds its own kernels: on OPENCL
  a cold run of this costs 40 s; its sharded kernels and transfers are covered above and by refgrad check)."""
  if device not in Device.available():
    pytest.skip(f"{device} is not available here")
  one, one_params = _mlp_losses(device, None)
  two, two_params = _mlp_losses(device, instances(device, 2))
  np.testing.assert_allclose(two, one, rtol=1e-5)
  assert one[-1] < one[0]
  for a, b in zip(one_params, two_params):
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_a_jitted_sharded_function_replays_the_plain_results(refgrad_device):
  """Replays of a function of split and replicated inputs (each call's inputs new) give the plain function's bits."""
  devices = instances(refgrad_device, 2)

  def fn(a, b):
    return (a @ b).relu().sum(0), a.max() * 2, a + 1
  jitted = TinyJit(fn)
  for seed in range(5):
    rng = np.random.default_rng(seed)
    a_np, b_np = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    args = (Tensor(a_np, device=refgrad_device).shard(devices, axis=0),
            Tensor(b_np, device=refgrad_device).shard(devices))
    for got, want in zip(jitted(*args), fn(*args)):
      np.testing.assert_array_equal(got.numpy(), want.numpy())
  assert jitted.captured.replays == 3


def test_a_jitted_data_parallel_training_step_follows_the_plain_one():
  """The jit finds the sharded parameters' and moments' buffers at capture and carries them between replays."""
  def losses(jit):
    Tensor.manual_seed(0)
    devices = instances("PYTHON", 2)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 3)).astype(np.float32), device="PYTHON").shard(devices, axis=0)
    y = Tensor(rng.integers(0, 4, 8).astype(np.int32), device="PYTHON").shard(devices, axis=0)
    layer = Linear(3, 4)
    for p in (layer.weight, layer.bias):
      p.replace(p.to("PYTHON")).realize()
      p.shard_(devices)
    step = training_step(layer, Adam([layer.weight, layer.bias], lr=0.05))
    run = TinyJit(step) if jit else step
    with Tensor.train():
      return [run(x, y).item() for _ in range(6)], layer.weight.numpy()
  (plain, w_plain), (jitted, w_jitted) = losses(False), losses(True)
  assert plain == jitted and plain[-1] < plain[0]
  np.testing.assert_array_equal(w_jitted, w_plain)


def test_mixing_devices_without_sharding_raises():
  t = Tensor([1.0, 2.0], device="PYTHON").shard(instances("PYTHON", 2))
  with pytest.raises(RuntimeError, match="same device"):
    t + Tensor([1.0, 2.0], device="PYTHON")
  with pytest.raises(RuntimeError, match="same device"):
    t + Tensor([1.0, 2.0], device="PYTHON").shard(("PYTHON", "PYTHON:2"))


@pytest.mark.parametrize("kwargs, error, match", [
  ({"devices": ("PYTHON", "PYTHON"), "axis": 0}, ValueError, "distinct"),
  ({"devices": ("PYTHON", "PYTHON:1"), "axis": 0, "splits": (1, 1)}, ValueError, r"summing to the axis size 4"),
  ({"devices": ("PYTHON", "PYTHON:1"), "axis": 0, "splits": (5, -1)}, ValueError, "non-negative"),
  ({"devices": ("PYTHON", "PYTHON:1"), "axis": 2}, IndexError, "range"),
  ({"devices": ("PYTHON", "PYTHON:1"), "splits": (2, 2)}, ValueError, "need an axis"),
  ({"devices": "PYTHON"}, TypeError, "tuple of device names"),
  ({"devices": ("PYTHON", "NOSUCH")}, ValueError, "unknown device"),
])
def test_bad_shard_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    Tensor.zeros(4, 2, device="PYTHON").shard(**kwargs)


def test_random_numbers_on_several_devices_are_the_one_device_numbers():
  Tensor.manual_seed(3)
  one = Tensor.rand(5, 3, device="PYTHON").numpy()
  Tensor.manual_seed(3)
  many = Tensor.rand(5, 3, device=instances("PYTHON", 2))
  assert many.device == instances("PYTHON", 2)
  np.testing.assert_array_equal(many.numpy(), one)


def test_check_against_reference_takes_sharded_inputs(refgrad_device):
  from refgrad.testing.oracle.reference import check_against_reference
  x = Tensor(data((6, 4)), device="PYTHON").shard(instances("PYTHON", 2), axis=0)
  report = check_against_reference(lambda t: (t * 2).sum(0).to("PYTHON") + 1, x, device=refgrad_device)
  assert any(k.name.startswith("allreduce ADD") for k in report.kernels) and report.ok


@pytest.mark.parametrize("axis, splits", [(0, None), (1, (1, 5))])
def test_load_state_dict_into_a_sharded_weight_keeps_its_split(refgrad_device, axis, splits):
  """tinygrad shards a loaded one-device value by the target's axis; refgrad's .to(devices) replicated it, so a
  weight split in two for tensor parallelism became whole on every device (same values, twice the memory)."""
  from refgrad.nn.state import load_state_dict
  devices = instances(refgrad_device, 2)
  layer = Linear(6, 4)
  layer.weight.shard_(devices, axis=axis, splits=splits)
  layer.bias.shard_(devices)
  w, b = data((4, 6), seed=3), data((4,), seed=4)
  load_state_dict(layer, {"weight": Tensor(w), "bias": Tensor(b)})
  assert layer.weight.uop.op is Ops.MULTI and layer.weight.uop.arg[0] == axis
  assert [hi - lo for lo, hi in layer.weight.uop.arg[1]] == list(splits or (2, 2))
  np.testing.assert_array_equal(layer.weight.numpy(), w)
  x = data((3, 6), seed=5)
  np.testing.assert_allclose(layer(Tensor(x).shard(devices)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
  other_devices = tuple(f"{refgrad_device}:{i}" for i in (2, 3))  # a value sharded elsewhere takes the split too
  load_state_dict(layer, {"weight": Tensor(w / 2).shard(other_devices, axis=1 - axis), "bias": Tensor(b)})
  assert layer.weight.device == devices and layer.weight.uop.arg[0] == axis
  np.testing.assert_array_equal(layer.weight.numpy(), w / 2)
