"""refgrad.nn layers, optimizers and state files, against torch (same weights, same inputs)."""
import numpy as np
import pytest
import torch
from helpers import check

from refgrad import Tensor, dtypes, nn
from refgrad.codegen.pipeline import _compile
from refgrad.nn import optim
from refgrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save

pytestmark = pytest.mark.usefixtures("refgrad_device")
RNG = np.random.default_rng(0)


def copy_into_torch(ours, theirs) -> None:
  with torch.no_grad():
    for name, t in get_state_dict(ours).items():
      target = theirs
      for part in name.split("."):
        target = getattr(target, part)
      target.copy_(torch.tensor(t.numpy()))


def close(a: Tensor, b: torch.Tensor, rtol: float = 1e-5) -> None:
  np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=rtol, atol=1e-5)


LAYERS = {
  "Linear": (lambda: nn.Linear(5, 3), lambda: torch.nn.Linear(5, 3), (4, 5)),
  "Conv2d": (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), lambda: torch.nn.Conv2d(3, 4, 3, 2, 1), (2, 3, 7, 7)),
  "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), lambda: torch.nn.Conv1d(3, 4, 3, padding=1), (2, 3, 9)),
  "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), lambda: torch.nn.ConvTranspose2d(3, 2, 3, 2),
                      (1, 3, 4, 4)),
  "LayerNorm": (lambda: nn.LayerNorm(6), lambda: torch.nn.LayerNorm(6), (3, 6)),
  "GroupNorm": (lambda: nn.GroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4), (2, 4, 3, 3)),
  "InstanceNorm": (lambda: nn.InstanceNorm(3), lambda: torch.nn.InstanceNorm2d(3, affine=True), (2, 3, 4, 4)),
  "RMSNorm": (lambda: nn.RMSNorm(6), lambda: torch.nn.RMSNorm(6, eps=1e-6), (3, 6)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_forward_matches_torch(name):
  make_ours, make_theirs, shape = LAYERS[name]
  ours, theirs = make_ours(), make_theirs()
  copy_into_torch(ours, theirs)
  x = RNG.standard_normal(shape).astype(np.float32)
  close(ours(Tensor(x)), theirs(torch.tensor(x)), rtol=1e-4)


def integer_valued(shape) -> np.ndarray:
  """Small integers as float32: every sum of their products is exact, so results compare bit for bit."""
  return RNG.integers(-4, 5, shape).astype(np.float32)


# (kernel, dilation, input length): even and odd kernels and total pads (the odd unit of 'same' goes at the end),
# inputs shorter than the kernel, and a length of 1
CONV1D_SIZES = [(1, 1, 5), (2, 1, 5), (3, 1, 1), (4, 1, 6), (4, 3, 7), (5, 2, 3), (6, 1, 2), (3, 2, 9)]
# 'valid' only where a whole window fits: torch refuses a kernel larger than the input
CONV1D_STRING_PADDING = [("same", *sizes) for sizes in CONV1D_SIZES] + \
  [("valid", k, d, n) for k, d, n in CONV1D_SIZES if d * (k - 1) < n]


@pytest.mark.parametrize("padding, kernel, dilation, length", CONV1D_STRING_PADDING, ids=str)
def test_conv1d_padding_strings_match_torch(padding, kernel, dilation, length):
  ours = nn.Conv1d(2, 3, kernel, padding=padding, dilation=dilation)
  theirs = torch.nn.Conv1d(2, 3, kernel, padding=padding, dilation=dilation)
  ours.weight, ours.bias = Tensor(integer_valued(ours.weight.shape)), Tensor(integer_valued(ours.bias.shape))
  copy_into_torch(ours, theirs)
  x = integer_valued((2, 2, length))
  got, want = ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy()
  if padding == "same":
    assert got.shape == (2, 3, length)
  np.testing.assert_array_equal(got, want)  # shapes too


@pytest.mark.parametrize("kernel, dilation, groups", [((2, 3), (2, 1), 1), ((4, 1), (1, 3), 2), ((1, 1), 1, 2)],
                         ids=str)
def test_conv2d_same_keeps_the_size_like_torch(kernel, dilation, groups):
  ours = nn.Conv2d(4, 2, kernel, padding="same", dilation=dilation, groups=groups, bias=False)
  theirs = torch.nn.Conv2d(4, 2, kernel, padding="same", dilation=dilation, groups=groups, bias=False)
  ours.weight = Tensor(integer_valued(ours.weight.shape))
  copy_into_torch(ours, theirs)
  x = integer_valued((1, 4, 5, 6))
  got = ours(Tensor(x))
  assert got.shape == (1, 2, 5, 6)
  np.testing.assert_array_equal(got.numpy(), theirs(torch.tensor(x)).detach().numpy())


def test_functional_conv2d_takes_padding_strings_like_torch():
  x, w = integer_valued((1, 2, 4, 5)), integer_valued((3, 2, 2, 3))
  for padding in ("same", "valid"):
    got = Tensor(x).conv2d(Tensor(w), padding=padding)
    np.testing.assert_array_equal(got.numpy(), torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w),
                                                                          padding=padding).numpy())
  valid_strided = Tensor(x).conv2d(Tensor(w), stride=2, padding="valid")
  np.testing.assert_array_equal(valid_strided.numpy(), torch.nn.functional.conv2d(
    torch.tensor(x), torch.tensor(w), stride=2, padding="valid").numpy())


@pytest.mark.parametrize("padding", ["SAME", "Same", "full", ""])
def test_an_unknown_padding_string_is_refused_at_construction(padding):
  for make in (lambda: nn.Conv2d(1, 1, 3, padding=padding), lambda: nn.Conv1d(1, 1, 3, padding=padding)):
    with pytest.raises(ValueError, match=f"invalid padding string '{padding}'"):
      make()
  with pytest.raises(RuntimeError, match="invalid padding string"):  # torch's functional conv: RuntimeError
    Tensor.ones(1, 1, 4).conv2d(Tensor.ones(1, 1, 3), padding=padding)


@pytest.mark.parametrize("stride", [2, (1, 2)], ids=str)
def test_same_padding_with_a_stride_is_refused_at_construction(stride):
  with pytest.raises(ValueError, match=r"padding='same' is not supported for strided convolutions \(stride"):
    nn.Conv2d(1, 1, 3, stride=stride, padding="same")
  with pytest.raises(ValueError, match="strided"):
    nn.Conv1d(1, 1, 3, stride=2, padding="same")


def test_valid_padding_with_a_stride_matches_torch():
  ours, theirs = nn.Conv2d(1, 2, 3, stride=2, padding="valid"), torch.nn.Conv2d(1, 2, 3, stride=2, padding="valid")
  ours.weight, ours.bias = Tensor(integer_valued(ours.weight.shape)), Tensor(integer_valued(ours.bias.shape))
  copy_into_torch(ours, theirs)
  x = integer_valued((1, 1, 7, 6))
  np.testing.assert_array_equal(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy())


def test_batchnorm_train_and_eval_match_torch():
  ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  x = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32)
  with Tensor.train():
    close(ours(Tensor(x)), theirs(torch.tensor(x)), rtol=1e-4)
  close(ours.running_mean, theirs.running_mean)
  close(ours.running_var, theirs.running_var, rtol=1e-4)
  theirs.eval()
  close(ours(Tensor(x)), theirs(torch.tensor(x)), rtol=1e-4)


def test_embedding_and_lstm_cell():
  emb = nn.Embedding(10, 4)
  idx = np.array([[1, 9], [0, 3]], dtype=np.int32)
  np.testing.assert_array_equal(emb(Tensor(idx)).numpy(), emb.weight.numpy()[idx])
  ours, theirs = nn.LSTMCell(3, 5), torch.nn.LSTMCell(3, 5)
  copy_into_torch(ours, theirs)
  x = RNG.standard_normal((2, 3)).astype(np.float32)
  h, c = ours(Tensor(x))
  th, tc = theirs(torch.tensor(x))
  close(h, th, rtol=1e-4)
  close(c, tc, rtol=1e-4)


def test_lstm_cell_unbatched_and_on_the_inputs_device():
  """torch's unbatched step (x of shape (input_size,)), and the default state made on x's device, not the default."""
  ours, theirs = nn.LSTMCell(3, 5), torch.nn.LSTMCell(3, 5)
  copy_into_torch(ours, theirs)
  x = RNG.standard_normal(3).astype(np.float32)
  h, c = ours(Tensor(x))
  th, tc = theirs(torch.tensor(x))
  assert h.shape == c.shape == (5,)
  close(h, th, rtol=1e-4)
  close(c, tc, rtol=1e-4)
  other = "PYTHON:1"
  for p in nn.state.get_parameters(ours):
    p.replace(p.to(other).realize())
  h, c = ours(Tensor(np.stack([x, -x]), device=other))
  th, tc = theirs(torch.tensor(np.stack([x, -x])))
  assert h.device == c.device == other
  close(h, th, rtol=1e-4)
  close(c, tc, rtol=1e-4)


OPTIMIZERS = {
  "SGD": (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
  "SGD momentum nesterov wd": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
                               lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
  "Adam": (lambda p: optim.Adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05)),
  "Adam weight_decay": (lambda p: optim.Adam(p, lr=0.05, weight_decay=0.3),  # torch's L2, not AdamW's decay
                        lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.3)),
  "AdamW": (lambda p: optim.AdamW(p, lr=0.05, weight_decay=0.1),
            lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_match_torch(name):
  make_ours, make_theirs = OPTIMIZERS[name]
  w0 = RNG.standard_normal((4, 3)).astype(np.float32)
  x = RNG.standard_normal((6, 4)).astype(np.float32)
  ours, theirs = Tensor(w0), torch.tensor(w0, requires_grad=True)
  opt_ours, opt_theirs = make_ours([ours]), make_theirs([theirs])
  assert ours.requires_grad is True  # None becomes True when handed to an optimizer
  for _ in range(3):
    opt_ours.zero_grad()
    ((Tensor(x) @ ours).tanh() ** 2).mean().backward()
    with Tensor.train():
      opt_ours.step()
    opt_theirs.zero_grad()
    ((torch.tensor(x) @ theirs).tanh() ** 2).mean().backward()
    opt_theirs.step()
  close(ours, theirs, rtol=1e-4)


# momentum buffers hold raw gradients (torch's and tinygrad's default SGD): a new lr scales all of the buffer
SCHEDULED = {**OPTIMIZERS, "SGD momentum": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
                                            lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))}


@pytest.mark.parametrize("name", sorted(SCHEDULED))
def test_a_learning_rate_schedule_assigns_into_lr(name):
  """opt.lr is a tensor on opt.device, as in tinygrad; an assign into it changes the next step (torch's param_groups
  lr is the oracle) and, once the state buffers exist, compiles nothing new: the update reads the rate from lr's
  buffer."""
  make_ours, make_theirs = SCHEDULED[name]
  w0 = RNG.standard_normal((4, 3)).astype(np.float32)
  ours, theirs = Tensor(w0), torch.tensor(w0, requires_grad=True)
  opt_ours, opt_theirs = make_ours([ours]), make_theirs([theirs])
  assert isinstance(opt_ours.lr, Tensor) and opt_ours.lr.shape == (1,) and opt_ours.lr.requires_grad is False
  assert opt_ours.device == ours.device == opt_ours.lr.device and opt_ours.lr.dtype == dtypes.float32
  compiled = []
  for rate in (0.1, 0.01, 0.5, 0.2):
    opt_ours.lr.assign(Tensor([rate], device=opt_ours.device)).realize()
    for group in opt_theirs.param_groups:
      group["lr"] = rate
    opt_ours.zero_grad()
    (ours * ours).sum().backward()
    with Tensor.train():
      opt_ours.step()
    compiled.append(_compile.cache_info().misses)
    opt_theirs.zero_grad()
    (theirs * theirs).sum().backward()
    opt_theirs.step()
    close(ours, theirs, rtol=1e-5)
  assert compiled[1] == compiled[2] == compiled[3]


def test_lr_dtype_and_errors():
  """lr is float32 (not rounded to a half model's dtype), float64 for float64 parameters (torch's math)."""
  half = optim.SGD([Tensor(np.ones(2, np.float16))], lr=1e-4)
  assert half.lr.dtype == dtypes.float32 and half.lr.numpy()[0] == np.float32(1e-4)
  assert optim.Adam([Tensor(np.ones(2))], lr=0.1).lr.numpy()[0] == 0.1
  with pytest.raises(TypeError, match="lr must be a Python number, got str '0.1'"):
    optim.SGD([Tensor([1.0])], lr="0.1")
  with pytest.raises(ValueError, match="got 1 parameters, none with requires_grad"):
    optim.SGD([Tensor([1.0], requires_grad=False)], lr=0.1)


def _assert_update(got: np.ndarray, w: np.ndarray, step: np.ndarray) -> None:
  """got is the float32 `w - step` within a few float32 ulps of the operands, not of the result (a weight and a step
  of about the same size cancel, and a bound relative to their small difference fails)."""
  bound = 8 * np.finfo(np.float32).eps * (np.abs(w) + np.abs(step))
  off = np.abs(got - (w - step))
  assert np.all(off <= bound), f"got {got}, want {w - step}: off by {off}, bound {bound}"


def test_lamb_and_lars_take_trust_ratio_steps():
  """LAMB and LARS against a numpy transcription of their update rules (in float64)."""
  w32 = RNG.standard_normal((4, 3)).astype(np.float32)
  w0, g = w32.astype(np.float64), np.full((4, 3), 0.5)
  ours = Tensor(w32)
  opt = optim.LAMB([ours], lr=0.1, weight_decay=0.01)
  ours.grad = Tensor(g.astype(np.float32))
  with Tensor.train():
    opt.step()
  m, v = 0.1 * g, 0.001 * g * g
  up = (m / 0.1) / (np.sqrt(v / 0.001) + 1e-6) + 0.01 * w0
  trust = np.linalg.norm(w0) / np.linalg.norm(up)
  step = 0.1 * trust * up
  _assert_update(ours.numpy(), w0, step)
  lars_w = Tensor(w32)
  lars = optim.LARS([lars_w], lr=0.1, momentum=0.0, weight_decay=0.0, tcoef=0.001)
  lars_w.grad = Tensor(g.astype(np.float32))
  with Tensor.train():
    lars.step()
  ratio = 0.001 * np.linalg.norm(w0) / np.linalg.norm(g)
  step = 0.1 * ratio * g
  _assert_update(lars_w.numpy(), w0, step)


@pytest.mark.parametrize("classic", [True, False])
def test_lars_momentum_order_under_a_changing_rate(classic):
  """tinygrad's LARS: classic scales the step by trust ratio and rate before the momentum, the default after it
  (momentum of raw gradients, torch's SGD). Equal while lr is constant; a numpy transcription with lr changing and
  a gradient changing with the weights tells them apart (the default was scaled before the momentum)."""
  w0 = RNG.standard_normal((4, 3)).astype(np.float32)
  ours = Tensor(w0)
  opt = optim.LARS([ours], lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True, classic=classic, tcoef=0.01)
  w, b = w0.astype(np.float64), np.zeros_like(w0, np.float64)
  for rate in (0.1, 0.5, 0.02):
    opt.lr.assign(Tensor([rate], device=opt.device)).realize()
    opt.zero_grad()
    (ours * ours * ours).sum().backward()
    with Tensor.train():
      opt.step()
    g = 3 * w * w
    ratio = 0.01 * np.linalg.norm(w) / (np.linalg.norm(g) + 0.01 * np.linalg.norm(w))
    g = g + 0.01 * w
    g = g * ratio * rate if classic else g
    b = 0.9 * b + g
    g = g + 0.9 * b
    w = w - (g if classic else g * ratio * rate)
  np.testing.assert_allclose(ours.numpy(), w, rtol=1e-5, atol=1e-6)


def test_one_optimizer_step_is_a_fixed_number_of_kernels():
  model = nn.Linear(4, 3)
  opt = optim.Adam(get_parameters(model), lr=0.01)
  x = Tensor(RNG.standard_normal((5, 4)).astype(np.float32))
  counts = []
  for _ in range(3):
    opt.zero_grad()
    model(x).square().mean().backward()
    updates = opt._updates()
    counts.append(len(Tensor.schedule(*updates)))
  assert counts[0] == counts[1] == counts[2] and counts[0] <= 4 * len(opt.params) + 6


def test_state_dict_round_trip_and_strict_errors(tmp_path):
  model = nn.Linear(3, 2)
  path = tmp_path / "model.safetensors"
  safe_save(get_state_dict(model), path)
  other = nn.Linear(3, 2)
  load_state_dict(other, safe_load(path))
  np.testing.assert_array_equal(other.weight.numpy(), model.weight.numpy())
  before = other.weight.numpy().copy()
  with pytest.raises(KeyError, match="missing keys \\['bias'\\]"):
    load_state_dict(other, {"weight": Tensor.zeros(2, 3)})
  mismatch = r"Shape mismatch in layer `weight`: Expected shape \(2, 3\), but found \(3, 3\)"  # tinygrad's words
  with pytest.raises(ValueError, match=mismatch):
    load_state_dict(other, {"weight": Tensor.zeros(3, 3), "bias": Tensor.zeros(2)})
  np.testing.assert_array_equal(other.weight.numpy(), before)  # a failed load changes nothing


def test_keys_the_model_lacks_are_skipped_with_a_warning_as_tinygrad_does():
  """torch raises for unexpected keys; tinygrad loads the rest (a torch checkpoint's num_batches_tracked, say)."""
  model = nn.Linear(3, 2)
  w, b = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5, np.float32([-0.0, np.inf])
  state = {"weight": Tensor(w), "bias": Tensor(b), "num_batches_tracked": Tensor(7)}
  with pytest.warns(UserWarning, match="not loaded: \\['num_batches_tracked'\\]"):
    loaded = load_state_dict(model, state)
  assert loaded == [model.weight, model.bias]
  check(model.weight, w, dtypes.float32)
  check(model.bias, b, dtypes.float32)
  with pytest.raises(KeyError, match="missing keys \\['weight'\\], unexpected keys \\['extra'\\]"):
    load_state_dict(model, {"bias": Tensor(b), "extra": Tensor(1.0)})


def test_a_torch_batchnorm_state_dict_loads():
  """torch's num_batches_tracked is 0-d int64, ours (1,) int64: () and (1,) load into each other (tinygrad's rule);
  the load raised 'Shape mismatch'. Evaluated on the loaded statistics, the layer gives torch's output."""
  theirs = torch.nn.BatchNorm2d(3)
  with torch.no_grad():
    theirs(torch.tensor(RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)) * 3 + 1)  # running stats move
  theirs.eval()
  ours = nn.BatchNorm(3)
  load_state_dict(ours, {k: Tensor(v.numpy()) for k, v in theirs.state_dict().items()})
  assert ours.num_batches_tracked.shape == (1,) and ours.num_batches_tracked.item() == 1
  x = RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
  close(ours(Tensor(x)), theirs(torch.tensor(x)))
  with pytest.raises(ValueError, match="Shape mismatch"):  # other shapes still refused
    load_state_dict(ours, {**get_state_dict(ours), "num_batches_tracked": Tensor([1, 2])})


def test_load_state_dict_returns_the_loaded_tensors_and_consumes():
  """tinygrad's arguments: the loaded tensors come back (in the model's order), consume empties what was loaded,
  strict=False skips what the dict lacks; verbose and realize change nothing."""
  model = nn.Linear(3, 2)
  w, b = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5), Tensor([-0.0, np.inf])
  state = {"weight": w, "bias": b}
  loaded = load_state_dict(model, state, verbose=False, consume=True, realize=False)
  assert loaded[0] is model.weight and loaded[1] is model.bias and len(loaded) == 2 and state == {}
  check(model.weight, w.numpy(), dtypes.float32)
  check(model.bias, np.array([-0.0, np.inf], np.float32), dtypes.float32)
  partial = {"bias": Tensor([1.0, 2.0])}
  assert load_state_dict(model, partial, strict=False) == [model.bias] and list(partial) == ["bias"]
  check(model.weight, w.numpy(), dtypes.float32)


def test_optimizer_group_steps_each_member_like_torch():
  w0, v0 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal((3,)).astype(np.float32)
  x = RNG.standard_normal((6, 4)).astype(np.float32)
  w, v, tw, tv = Tensor(w0), Tensor(v0), torch.tensor(w0, requires_grad=True), torch.tensor(v0, requires_grad=True)
  group = optim.OptimizerGroup(optim.SGD([w], lr=0.1, momentum=0.9), optim.Adam([v], lr=0.05))
  theirs = [torch.optim.SGD([tw], lr=0.1, momentum=0.9), torch.optim.Adam([tv], lr=0.05)]
  assert group[1].params == [v] and group.params == [w, v]
  for _ in range(3):
    group.zero_grad()
    ((Tensor(x) @ w + v).tanh() ** 2).mean().backward()
    with Tensor.train():
      group.step()
    for o in theirs:
      o.zero_grad()
    ((torch.tensor(x) @ tw + tv).tanh() ** 2).mean().backward()
    for o in theirs:
      o.step()
  close(w, tw, rtol=1e-4)
  close(v, tv, rtol=1e-4)
  group.zero_grad()
  (Tensor(x) @ w).sum().backward()  # v has no gradient: nothing may change, w included
  before = w.numpy().copy()
  with Tensor.train(), pytest.raises(RuntimeError, match="no gradient"):
    group.step()
  np.testing.assert_array_equal(w.numpy(), before)


def test_safetensors_files_interoperate_with_the_safetensors_package(tmp_path):
  import safetensors.numpy as safetensors_numpy
  arrays = {"a": RNG.standard_normal((2, 3)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
            "c": np.array([True, False])}
  ours = tmp_path / "ours.safetensors"
  safe_save({k: Tensor(v) for k, v in arrays.items()}, ours)
  loaded = safetensors_numpy.load_file(str(ours))
  for k, v in arrays.items():
    np.testing.assert_array_equal(loaded[k], v)
  theirs = tmp_path / "theirs.safetensors"
  safetensors_numpy.save_file(arrays, str(theirs))
  for k, v in safe_load(theirs).items():
    np.testing.assert_array_equal(v.numpy(), arrays[k])


def test_corrupt_and_truncated_safetensors_raise_clear_errors(tmp_path):
  path = tmp_path / "t.safetensors"
  safe_save({"weight": Tensor.ones(4, 4)}, path)
  raw = path.read_bytes()
  (tmp_path / "cut.safetensors").write_bytes(raw[:-8])
  with pytest.raises(ValueError, match="'weight'.*truncated or corrupt"):
    safe_load(tmp_path / "cut.safetensors")
  (tmp_path / "bad.safetensors").write_bytes(raw[:8] + b"{not json" + raw[17:])
  with pytest.raises(ValueError, match="corrupt safetensors header"):
    safe_load(tmp_path / "bad.safetensors")
  (tmp_path / "tiny.safetensors").write_bytes(b"abc")
  with pytest.raises(ValueError, match="not a safetensors file"):
    safe_load(tmp_path / "tiny.safetensors")


def test_state_dict_names_a_namedtuple_by_its_fields_as_tinygrad():
  """tinygrad names a namedtuple's tensors by field (its _asdict()); they were named by index, '0.weight', so a
  checkpoint saved by tinygrad code did not load."""
  import collections
  pair = collections.namedtuple("Pair", "enc dec")(nn.Linear(2, 3), nn.Linear(3, 1))
  state = get_state_dict(pair)
  assert list(state) == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]
  assert state["dec.weight"] is pair.dec.weight


def test_load_state_dict_keeps_the_loaded_dtype_as_tinygrad():
  """tinygrad's load_state_dict replaces each tensor by the loaded one (Tensor.replace: "only the shape must match"),
  so float16 weights make a float16 layer; refgrad cast them to the layer's float32 (torch's copy_) silently."""
  model = nn.Linear(3, 2)
  w = (np.arange(6).reshape(2, 3) / 3 - 0.7).astype(np.float16)
  load_state_dict(model, {"weight": Tensor(w), "bias": Tensor([1, -2], dtype=dtypes.int64)})
  check(model.weight, w, dtypes.float16)
  check(model.bias, np.array([1, -2], np.int64), dtypes.int64)


def test_batchnorm_counts_batches_in_int64_as_tinygrad(tmp_path):
  """tinygrad's num_batches_tracked is long (torch's too); it was int32, so a checkpoint refgrad saved held I32."""
  bn = nn.BatchNorm(2)
  with Tensor.train():
    bn(Tensor(RNG.standard_normal((3, 2, 2, 2)).astype(np.float32)))
  check(bn.num_batches_tracked, np.array([1], np.int64), dtypes.int64)
  safe_save(get_state_dict(bn), tmp_path / "bn.safetensors")
  assert safe_load(tmp_path / "bn.safetensors")["num_batches_tracked"].dtype == dtypes.int64
