"""Rules a torch user relies on: integer interpolate keeps the dtype and rounds like torch's uint8 kernel, and
optimizers update half-precision parameters with float32 math (torch's float32 "master" copy). (Mistakes raising
the exception class torch raises: test_errors_*.py.)"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual name
from helpers import NP_DTYPE, TORCH_DTYPE, check

from refgrad import Tensor, dtypes
from refgrad.nn import optim

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

RNG = np.random.default_rng(0)


def uint8_image(shape, seed):
  x = np.random.default_rng(seed).integers(0, 256, shape).astype(np.uint8)
  x.flat[:2] = (0, 255)  # the extremes, so rounding and clamping at both ends are exercised
  return x


# ---- interpolate on integer tensors: torch's uint8 kernels are the oracle
RESIZES_2D = [((1, 2, 4, 5), (7, 9)), ((2, 1, 9, 7), (4, 3)), ((1, 3, 5, 5), (5, 8)), ((1, 1, 6, 3), (1, 1)),
              ((1, 2, 3, 8), (11, 2))]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape, size", RESIZES_2D, ids=str)
def test_interpolate_uint8_bilinear_rounds_like_torch(shape, size, align_corners):
  x = uint8_image(shape, sum(shape))
  want = F.interpolate(torch.from_numpy(x), size, mode="bilinear", align_corners=align_corners)
  check(Tensor(x).interpolate(size, align_corners=align_corners), want, dtypes.uint8)


@pytest.mark.parametrize("dtype", [dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint16], ids=lambda d: d.name)
def test_interpolate_wider_int_linear_follows_the_uint8_rule(dtype):
  """torch has no linear kernel for these dtypes; on values that fit uint8 the same rule gives torch's uint8 result."""
  x = uint8_image((1, 2, 5, 4), 3)
  want = F.interpolate(torch.from_numpy(x), (8, 3), mode="bilinear").numpy().astype(NP_DTYPE[dtype])
  check(Tensor(x.astype(NP_DTYPE[dtype])).interpolate((8, 3)), want, dtype)


@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_uint8_linear_1d_matches_torch_bilinear_of_one_row(align_corners):
  x = uint8_image((2, 3, 7), 4)
  want = F.interpolate(torch.from_numpy(x)[:, :, None], (1, 12), mode="bilinear", align_corners=align_corners)
  check(Tensor(x).interpolate((12,), align_corners=align_corners), want[:, :, 0], dtypes.uint8)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape, size", [((1, 2, 7), (12,)), ((1, 2, 5, 7), (3, 11)), ((1, 1, 3, 4, 5), (5, 2, 7))],
                         ids=str)
def test_interpolate_uint8_nearest_matches_torch(shape, size, mode):
  x = uint8_image(shape, 5)
  check(Tensor(x).interpolate(size, mode=mode), F.interpolate(torch.from_numpy(x), size, mode=mode), dtypes.uint8)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.uint32], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_int_nearest_keeps_dtype_and_values(dtype, mode):
  """Nearest only selects elements: torch's float64 result (exact for 32-bit ints) cast back is the oracle."""
  info = np.iinfo(NP_DTYPE[dtype])
  x = np.array([info.min, info.min + 7, 0, 3, info.max], dtype=NP_DTYPE[dtype]).reshape(1, 1, 5)
  want = F.interpolate(torch.from_numpy(x.astype(np.float64)), (8,), mode=mode).numpy().astype(NP_DTYPE[dtype])
  check(Tensor(x).interpolate((8,), mode=mode), want, dtype)


# ---- optimizers: half-precision parameters follow torch on a float32 master copy, rounded each step
HALF = [dtypes.float16, dtypes.bfloat16]
TORCH_OPTIMIZERS = {
  "SGD": (lambda p: optim.SGD(p, lr=1e5), lambda p: torch.optim.SGD(p, lr=1e5)),
  "SGD momentum nesterov wd": (lambda p: optim.SGD(p, lr=3e4, momentum=0.9, nesterov=True, weight_decay=1e-5),
                               lambda p: torch.optim.SGD(p, lr=3e4, momentum=0.9, nesterov=True, weight_decay=1e-5)),
  "Adam": (lambda p: optim.Adam(p, lr=1e3), lambda p: torch.optim.Adam(p, lr=1e3)),
  "AdamW": (lambda p: optim.AdamW(p, lr=1e3, weight_decay=1e-4), lambda p: torch.optim.AdamW(p, lr=1e3,
                                                                                            weight_decay=1e-4)),
}


def small_grads(dtype, steps=3):
  """Gradients around 1e-4: their squares (Adam's second moment) underflow in float16 and bfloat16 rounds them."""
  return [(RNG.standard_normal((4, 3)) * 1e-4).astype(NP_DTYPE[dtype]) for _ in range(steps)]


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(TORCH_OPTIMIZERS))
def test_half_parameters_take_float32_steps_like_torch(name, dtype):
  """Each step is compared, from the same weights: float32 math may round differently in its last bits, which moves
  a half result by at most one ULP, and a weight one ULP apart would send the next steps apart (Adam's first step
  is about lr in size, so a ULP there is larger than the half step of a later one)."""
  make_ours, make_theirs = TORCH_OPTIMIZERS[name]
  w0 = RNG.standard_normal((4, 3)).astype(NP_DTYPE[dtype])
  ours, master = Tensor(w0), torch.tensor(w0.astype(np.float32), requires_grad=True)
  opt_ours, opt_theirs = make_ours([ours]), make_theirs([master])
  for g in small_grads(dtype):
    ours.grad = Tensor(g)
    with Tensor.train():
      opt_ours.step()
    master.grad = torch.tensor(g.astype(np.float32))
    opt_theirs.step()
    check(ours, master.detach().to(TORCH_DTYPE[dtype]), dtype, ulp=1)
    with torch.no_grad():  # the parameter is stored in its own dtype: torch's goes on from ours
      master.copy_(torch.from_numpy(ours.numpy().astype(np.float32)))


@pytest.mark.parametrize("name", sorted(set(TORCH_OPTIMIZERS) - {"SGD"}))  # plain SGD keeps no state
def test_optimizer_state_is_float32_for_half_parameters(name):
  ours = Tensor(np.ones((2, 2), np.float16))
  opt = TORCH_OPTIMIZERS[name][0]([ours])
  state = [*getattr(opt, "b", []), *getattr(opt, "m", []), *getattr(opt, "v", [])]
  assert state and all(s.dtype == dtypes.float32 for s in state), [s.dtype for s in state]


def test_float64_parameters_keep_float64_math():
  w0, g = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 2)) * 1e-3
  ours, theirs = Tensor(w0), torch.tensor(w0, requires_grad=True)
  opt_ours, opt_theirs = optim.Adam([ours], lr=0.1), torch.optim.Adam([theirs], lr=0.1)
  for _ in range(2):
    ours.grad, theirs.grad = Tensor(g), torch.tensor(g)
    with Tensor.train():
      opt_ours.step()
    opt_theirs.step()
  check(ours, theirs.detach(), dtypes.float64, atol=1e-12)


def lamb_step_float32(w, g, lr, wd, eps=1e-6, b1=0.9, b2=0.999):
  """One LAMB step (first step: bias corrections 1 - b), transcribed in numpy float32."""
  w, g = w.astype(np.float32), g.astype(np.float32)
  m, v = (1 - b1) * g, (1 - b2) * g * g
  up = (m / np.float32(1 - b1)) / (np.sqrt(v / np.float32(1 - b2)) + np.float32(eps)) + np.float32(wd) * w
  return w - np.float32(lr) * (np.linalg.norm(w) / np.linalg.norm(up)) * up


def lars_step_float32(w, g, lr, tcoef=0.001):
  w, g = w.astype(np.float32), g.astype(np.float32)
  return w - np.float32(lr) * (np.float32(tcoef) * np.linalg.norm(w) / np.linalg.norm(g)) * g


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: d.name)
def test_lamb_and_lars_half_parameters_use_float32(dtype):
  """torch has neither optimizer: a numpy float32 transcription of one step, rounded to the parameter dtype."""
  w0, g = RNG.standard_normal((4, 3)).astype(NP_DTYPE[dtype]), small_grads(dtype, 1)[0]
  lamb_w, lars_w = Tensor(w0), Tensor(w0)
  lamb, lars = optim.LAMB([lamb_w], lr=1e3, weight_decay=0.01), optim.LARS([lars_w], lr=1e4, momentum=0.0,
                                                                          weight_decay=0.0)
  lamb_w.grad, lars_w.grad = Tensor(g), Tensor(g)
  with Tensor.train():
    lamb.step()
    lars.step()
  check(lamb_w, lamb_step_float32(w0, g, 1e3, 0.01).astype(NP_DTYPE[dtype]), dtype, ulp=1)
  check(lars_w, lars_step_float32(w0, g, 1e4).astype(NP_DTYPE[dtype]), dtype, ulp=1)


def test_step_outside_training_mode_raises():
  w = Tensor([1.0, 2.0])
  opt = optim.SGD([w], lr=0.1)
  w.grad = Tensor([1.0, 1.0])
  assert Tensor.training is False
  with pytest.raises(RuntimeError, match=r"Tensor\.training is False.*with Tensor\.train\(\):"):
    opt.step()
  np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])  # nothing was updated
  with Tensor.train():
    opt.step()
  np.testing.assert_allclose(w.numpy(), [0.9, 1.9], rtol=1e-6)
