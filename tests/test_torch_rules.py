"""Rules a torch user relies on: integer interpolate keeps the dtype and rounds like torch's uint8 kernel,
optimizers update half-precision parameters with float32 math (torch's float32 "master" copy), and mistakes raise
the exception class torch raises (out-of-range dims IndexError, bitwise ops on floats and malformed einsum formulas
RuntimeError), while a malformed rearrange pattern is a ValueError and an AssertionError (tinygrad's asserts)."""
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
    with torch.no_grad():
      master.copy_(master.to(TORCH_DTYPE[dtype]).float())  # the parameter is stored in its own dtype
  # float32 math may round differently in the last float32 bit; that moves the half result by at most one ULP
  check(ours, master.detach().to(TORCH_DTYPE[dtype]), dtype, ulp=1)


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


# ---- exceptions: ours must be an instance of the class torch raises for the same mistake
def torch_exception(fn) -> type:
  with pytest.raises(Exception) as info:
    fn()
  return info.type


def assert_raises_like(ours, theirs, fragments=()):
  expected = torch_exception(theirs)
  with pytest.raises(expected) as info:
    ours()
  for fragment in fragments:
    assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


def f23():
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def i23():
  return Tensor(np.arange(6, dtype=np.int32).reshape(2, 3))


def tf23():
  return torch.arange(6, dtype=torch.float32).reshape(2, 3)


def ti23():
  return torch.arange(6, dtype=torch.int32).reshape(2, 3)


BITWISE = {
  "and floats": (lambda: f23() & f23(), lambda: tf23() & tf23(), ["float32"]),
  "or int and float": (lambda: i23() | f23(), lambda: ti23() | tf23(), ["float32"]),
  "xor float scalar": (lambda: i23() ^ 1.5, lambda: ti23() ^ 1.5, ["float32"]),
  "bitwise_and method": (lambda: f23().bitwise_and(1), lambda: tf23().bitwise_and(1), ["float32"]),
  "bitwise_not float": (lambda: f23().bitwise_not(), lambda: tf23().bitwise_not(), ["float32"]),
  "invert float": (lambda: ~f23(), lambda: ~tf23(), ["float32"]),
  "lshift float": (lambda: f23() << 1, lambda: tf23() << 1, ["float32"]),
  "rshift float": (lambda: f23() >> 1, lambda: tf23() >> 1, ["float32"]),
  "shift by float": (lambda: i23() << 1.5, lambda: ti23() << 1.5, ["1.5"]),
  "shift by float tensor": (lambda: i23() >> f23(), lambda: ti23() >> tf23(), ["float32"]),
  "rshift bools": (lambda: Tensor([True]) >> Tensor([True]), lambda: torch.tensor([True]) >> torch.tensor([True]),
                   ["bool"]),
}


@pytest.mark.parametrize("name", sorted(BITWISE))
def test_bitwise_on_floats_raises_like_torch(name):
  ours, theirs, fragments = BITWISE[name]
  assert_raises_like(ours, theirs, fragments)


def test_bitwise_error_is_still_a_type_error():
  with pytest.raises(TypeError):
    f23() & f23()


EINSUM = {
  "too few operands": ("ij,jk->ik", 1, ["2 operands", "1"]),
  "too many operands": ("ij->ij", 2, ["1 operands", "2"]),
  "rank mismatch": ("ijk->i", 1, ["'ijk'", "(2, 3)"]),
  "unknown output": ("ij->iz", 1, ["'z'"]),
  "repeated output": ("ij->ii", 1, ["'i'"]),
  "digit": ("i1->i", 1, ["'i1'"]),
  "two ellipses": ("...i...->i", 1, ["'...i...'"]),
  "stray dots": ("..ij->i", 1, ["'..ij'"]),
  "two arrows": ("ij->i->j", 1, ["'i->j'"]),
  "bad character": ("i-j->i", 1, ["'i-j'"]),
}


@pytest.mark.parametrize("name", sorted(EINSUM))
def test_malformed_einsum_raises_like_torch(name):
  formula, count, fragments = EINSUM[name]
  assert_raises_like(lambda: Tensor.einsum(formula, *[f23()] * count),
                     lambda: torch.einsum(formula, *[tf23()] * count), fragments)


def test_einsum_errors_stay_value_errors():
  with pytest.raises(ValueError):
    Tensor.einsum("ij,jk->ik", f23())


def test_meshgrid_indexing_raises_like_torch():
  assert_raises_like(lambda: Tensor([1]).meshgrid(Tensor([2]), indexing="ji"),
                     lambda: torch.meshgrid(torch.tensor([1]), torch.tensor([2]), indexing="ji"), ["'ji'"])
  with pytest.raises(ValueError):
    Tensor([1]).meshgrid(Tensor([2]), indexing="ji")


def gather_index(x):
  return np.zeros(x.shape, np.int64)


def outward(d):
  """One further from 0: unsqueeze and stack take dims of the result, which has one dim more."""
  return d + (d > 0) - (d < 0)


# name: (our call, torch's call), both given the tensor and the dim
DIM_OPS = {
  "all": (lambda x, d: x.all(d), lambda x, d: x.all(d)),
  "any": (lambda x, d: x.any(d), lambda x, d: x.any(d)),
  "argmax": (lambda x, d: x.argmax(d), lambda x, d: x.argmax(d)),
  "argmin": (lambda x, d: x.argmin(d), lambda x, d: x.argmin(d)),
  "cummax": (lambda x, d: x.cummax(d), lambda x, d: x.cummax(d).values),
  "cumprod": (lambda x, d: x.cumprod(d), lambda x, d: x.cumprod(d)),
  "cumsum": (lambda x, d: x.cumsum(d), lambda x, d: x.cumsum(d)),
  "logcumsumexp": (lambda x, d: x.logcumsumexp(d), lambda x, d: x.logcumsumexp(d)),
  "logsumexp": (lambda x, d: x.logsumexp(d), lambda x, d: x.logsumexp(d)),
  "softmax": (lambda x, d: x.softmax(d), lambda x, d: x.softmax(d)),
  "log_softmax": (lambda x, d: x.log_softmax(d), lambda x, d: x.log_softmax(d)),
  "max": (lambda x, d: x.max(d), lambda x, d: x.amax(d)),
  "min": (lambda x, d: x.min(d), lambda x, d: x.amin(d)),
  "sum": (lambda x, d: x.sum(d), lambda x, d: x.sum(d)),
  "sum of two dims": (lambda x, d: x.sum((0, d)), lambda x, d: x.sum((0, d))),
  "mean": (lambda x, d: x.mean(d), lambda x, d: x.mean(d)),
  "prod": (lambda x, d: x.prod(d), lambda x, d: x.prod(d)),
  "var": (lambda x, d: x.var(d), lambda x, d: x.var(d)),
  "std_mean": (lambda x, d: x.std_mean(d), lambda x, d: torch.std_mean(x, d)),
  "flatten start": (lambda x, d: x.flatten(d), lambda x, d: x.flatten(d)),
  "flatten end": (lambda x, d: x.flatten(0, d), lambda x, d: x.flatten(0, d)),
  "flip": (lambda x, d: x.flip(d), lambda x, d: x.flip(d)),
  "gather": (lambda x, d: x.gather(d, Tensor(gather_index(x))),
             lambda x, d: x.gather(d, torch.tensor(gather_index(x)))),
  "repeat_interleave": (lambda x, d: x.repeat_interleave(2, d), lambda x, d: x.repeat_interleave(2, d)),
  "roll": (lambda x, d: x.roll(1, d), lambda x, d: x.roll(1, d)),
  "size": (lambda x, d: x.size(d), lambda x, d: x.size(d)),
  "split": (lambda x, d: x.split(1, d), lambda x, d: x.split(1, d)),
  "chunk": (lambda x, d: x.chunk(1, d), lambda x, d: x.chunk(1, d)),
  "squeeze": (lambda x, d: x.squeeze(d), lambda x, d: x.squeeze(d)),
  "squeeze of two dims": (lambda x, d: x.squeeze((0, d)), lambda x, d: x.squeeze((0, d))),
  "unsqueeze": (lambda x, d: x.unsqueeze(outward(d)), lambda x, d: x.unsqueeze(outward(d))),
  "stack": (lambda x, d: x.stack(x, dim=outward(d)), lambda x, d: torch.stack([x, x], outward(d))),
  "cat": (lambda x, d: x.cat(x, dim=d), lambda x, d: torch.cat([x, x], d)),
  "transpose": (lambda x, d: x.transpose(0, d), lambda x, d: x.transpose(0, d)),
  "unflatten": (lambda x, d: x.unflatten(d, (1, -1)), lambda x, d: x.unflatten(d, (1, -1))),
  "permute": (lambda x, d: x.permute(d, *range(1, x.ndim)), lambda x, d: x.permute(d, *range(1, x.ndim))),
}


@pytest.mark.parametrize("past", ["end", "start", "far"])
@pytest.mark.parametrize("shape", [(), (2, 3)], ids=str)
@pytest.mark.parametrize("name", sorted(DIM_OPS))
def test_out_of_range_dims_raise_like_torch(name, shape, past):
  """Just past either end, and far past: torch raises IndexError (RuntimeError where the call is wrong anyway,
  e.g. splitting a 0-d tensor or permuting with the wrong number of dims)."""
  ours, theirs = DIM_OPS[name]
  ndim = max(len(shape), 1)
  d = {"end": ndim, "start": -ndim - 1, "far": 7}[past]
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
  assert_raises_like(lambda: ours(Tensor(x), d), lambda: theirs(torch.from_numpy(x), d))


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "logcumsumexp", "flatten start", "squeeze"])
def test_zero_d_tensors_accept_dims_0_and_minus_1(name):
  ours, theirs = DIM_OPS[name]
  for d in (0, -1):
    check(ours(Tensor(np.float32(2.5)), d), theirs(torch.tensor(2.5), d), dtypes.float32)


def test_repeated_squeeze_dims_raise_like_torch():
  x = np.ones((1, 3), np.float32)
  assert_raises_like(lambda: Tensor(x).squeeze((0, -2)), lambda: torch.from_numpy(x).squeeze((0, -2)), ["(0, -2)"])


# ---- rearrange: einops patterns
BAD_PATTERNS = {
  "name starting with a digit": ("2b c -> c 2b", ["'2b'"]),
  "name starting with _": ("_x c -> c _x", ["'_x'"]),
  "name ending with _": ("x_ c -> c x_", ["'x_'"]),
  "two ellipses": ("... ... -> ...", ["'...'", "left"]),
  "two ellipses, one unicode": ("a \u2026 ... -> a", ["'...'", "left"]),
  "ellipsis in parentheses on the left": ("(a ...) -> a ...", ["'...'", "parentheses"]),
  "unclosed bracket": ("a (b -> a b", ["parentheses"]),
  "unopened bracket": ("a b) -> a b", ["parentheses"]),
  "nested brackets": ("((a b)) -> a b", ["parentheses"]),
  "two arrows": ("a b -> b -> a", ["'->'", "2"]),
  "no arrow": ("a b", ["'->'", "0"]),
  "name only on the left": ("a b -> a", ["['b'] only on the left"]),
  "names differ": ("a b -> a c", ["['b'] only on the left", "['c'] only on the right"]),
  "repeated name": ("a a -> a", ["['a'] repeated on the left"]),
}


@pytest.mark.parametrize("name", sorted(BAD_PATTERNS))
def test_malformed_rearrange_pattern_is_an_assertion_and_value_error(name):
  pattern, fragments = BAD_PATTERNS[name]
  for expected in (AssertionError, ValueError):
    with pytest.raises(expected) as info:
      f23().rearrange(pattern)
    for fragment in fragments:
      assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"


@pytest.mark.parametrize("pattern", ["\u2026 c -> c \u2026", "a \u2026 -> (\u2026 a)"])
def test_rearrange_accepts_the_unicode_ellipsis(pattern):
  x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  want = np.moveaxis(x, -1, 0) if pattern.startswith("\u2026") else np.moveaxis(x, 0, -1).reshape(24)
  check(Tensor(x).rearrange(pattern), want, dtypes.int32)
