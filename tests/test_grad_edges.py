"""Gradients at the points where formulas break, with torch's autograd as the oracle (issue 11).

Every differentiable Tensor method is evaluated at edge points: signed zeros, the smallest normal and subnormal,
+-1e-30, the kinks and clamp bounds (+-1, +-3, 6), and magnitudes where exp over- or underflows in float32 or
float64 (+-20, +-88, +-300, +-1e4). Elementwise methods see every edge point at once (binary ones every pair, so
both operand orders); reductions, scans and losses draw rows of edge points from hypothesis, which also makes
ties for max/min. Wherever torch's value or gradient is a number, refgrad's must be close to it, and never NaN.

Differences from torch that are deliberate are documented in docs/SPEC.md ("Gradients") and tested here as such.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual torch alias
from helpers import ACTIVATIONS, weighted_backward
from hypothesis import given, settings
from hypothesis import strategies as st

from refgrad import Tensor

pytestmark = pytest.mark.usefixtures("refgrad_device")

DTYPES = {"float32": np.float32, "float64": np.float64}
# float64: refgrad's transcendentals are within a few ulp. float32: lanes where torch's own float32 result is off
# are only checked for NaN; elsewhere a result may still cancel (1 - tanh(6)^2 is 0.5% of an ulp of tanh(6)).
RTOL = {"float32": 5e-3, "float64": 1e-9}
MAGNITUDES = (1e-30, 1.0, 3.0, 6.0, 20.0, 88.0, 300.0, 1e4)
# not representable: a ratio of an integer to one of them lies just beside an integer and rounds onto it in float32
# and float64 (1 / 0.1 is 10.0, the quotient 9 and a bit), where a rule that rounds a / b instead of taking the
# quotient its forward used goes wrong (x % y's gradient did)
INEXACT = (0.1, 1e-3)


def edge_points(dt: type) -> list[float]:
  """Where gradient formulas break, a set of its own beside the oracle kit's edge values (refgrad.testing.edges,
  which the forward value tests read): signed zeros, the smallest subnormal and normal, and of both signs the kinks
  and clamp bounds, the magnitudes where exp over- or underflows in float32 or float64, and values whose ratios
  round onto integers."""
  info = np.finfo(dt)
  tiny, subnormal = float(info.tiny), float(info.smallest_subnormal)
  return [0.0, -0.0] + [s * m for m in (subnormal, tiny, *INEXACT, *MAGNITUDES) for s in (1.0, -1.0)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_pairs_have_quotients_that_round_onto_an_integer(dtype):
  """The binary tests see pairs whose float quotient is an integer that their exact quotient is not."""
  points = [float(p) for p in np.array(edge_points(DTYPES[dtype]), DTYPES[dtype]) if np.isfinite(p) and p != 0]
  with np.errstate(over="ignore"):
    quotients = {(x, y): np.divide(DTYPES[dtype](x), DTYPES[dtype](y)) for x in points for y in points}
  rounded_onto = [(x, y) for (x, y), q in quotients.items()
                  if q == np.trunc(q) and abs(q) < 2 ** 20 and Fraction(x) % Fraction(y) != 0]
  assert len(rounded_onto) >= 4


def check_against_torch(ours: np.ndarray, theirs: np.ndarray, exact: np.ndarray, what: str, rtol: float,
                        atol: float) -> None:
  """Where torch gives a number, refgrad gives no NaN; where torch's result is finite and agrees with the float64
  result `exact` (so is not itself lost to rounding), refgrad's is close to it."""
  nan = np.isnan(ours) & ~np.isnan(theirs)
  assert not nan.any(), f"{what}: NaN where torch gives {theirs[nan]} (at flat index {np.flatnonzero(nan)})"

  def close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf - inf: those lanes are not compared anyway
      return np.abs(a - b) <= atol + rtol * np.abs(b)
  reliable = np.isfinite(theirs) & close(theirs, exact)
  bad = reliable & ~close(ours, exact)
  assert not bad.any(), f"{what}: refgrad {ours[bad]}, torch {exact[bad]} (at flat index {np.flatnonzero(bad)})"


def compare(rg_fn, torch_fn, arrays: list[np.ndarray], rtol: float, atol: float = 0.0) -> None:
  """Value and gradient of sum(f(*arrays) * w) with fixed weights w (helpers.weighted_backward), refgrad against
  torch in the same dtype and against torch in float64 on the same inputs. Results below the smallest normal number
  may round differently (subnormals), so they are only compared absolutely."""
  dt = arrays[0].dtype
  atol = max(atol, float(np.finfo(dt).tiny))

  def weights_for(shape):  # in the inputs' dtype, so that the float64 run has the same weights
    return np.random.default_rng(11).uniform(0.5, 1.5, shape).astype(dt)
  theirs = weighted_backward(torch_fn, arrays, weights_for, torch.tensor)
  exact = weighted_backward(torch_fn, [a.astype(np.float64) for a in arrays], weights_for, torch.tensor)
  ours = weighted_backward(rg_fn, arrays, weights_for)
  assert ours[0].shape == theirs[0].shape
  for i, (got, want, want64) in enumerate(zip(ours, theirs, exact)):
    what = "value" if i == 0 else f"gradient of input {i - 1}"
    check_against_torch(got.astype(np.float64), want.astype(np.float64), want64, what, rtol, atol)


# ---------------------------------------------------------------- elementwise: every edge point at once
UNARY = {
  "neg": (lambda x: -x, lambda x: -x),
  "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal),
  "sqrt": (lambda x: x.sqrt(), torch.sqrt),
  "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt),
  "exp": (lambda x: x.exp(), torch.exp),
  "exp2": (lambda x: x.exp2(), torch.exp2),
  "log": (lambda x: x.log(), torch.log),
  "log2": (lambda x: x.log2(), torch.log2),
  "sin": (lambda x: x.sin(), torch.sin),
  "cos": (lambda x: x.cos(), torch.cos),
  "tan": (lambda x: x.tan(), torch.tan),
  "asin": (lambda x: x.asin(), torch.asin),
  "acos": (lambda x: x.acos(), torch.acos),
  "atan": (lambda x: x.atan(), torch.atan),
  "sinh": (lambda x: x.sinh(), torch.sinh),
  "cosh": (lambda x: x.cosh(), torch.cosh),
  "tanh": (lambda x: x.tanh(), torch.tanh),
  "asinh": (lambda x: x.asinh(), torch.asinh),
  "acosh": (lambda x: x.acosh(), torch.acosh),
  "atanh": (lambda x: x.atanh(), torch.atanh),
  "erf": (lambda x: x.erf(), torch.erf),
  "abs": (lambda x: x.abs(), torch.abs),
  "square": (lambda x: x.square(), torch.square),
  "sign": (lambda x: x.sign() * x, lambda x: x.sign() * x),
  "trunc": (lambda x: x.trunc() + x, lambda x: x.trunc() + x),
  "floor": (lambda x: x.floor() + x, lambda x: x.floor() + x),
  "ceil": (lambda x: x.ceil() + x, lambda x: x.ceil() + x),
  "round": (lambda x: x.round() + x, lambda x: x.round() + x),
  # all but celu with an alpha whose reciprocal float32 does not hold: torch's float64 backward rounds it, off by
  # more as |x| grows (celu 0.5 is tested here)
  **{name: fns for name, fns in ACTIVATIONS.items() if name != "celu 1.3"},
  "softplus beta threshold": (lambda x: x.softplus(2.0, 5.0), lambda x: F.softplus(x, 2.0, 5.0)),
  "clamp": (lambda x: x.clamp(-1, 1), lambda x: x.clamp(-1, 1)),
  "clamp min": (lambda x: x.clamp(min_=0), lambda x: x.clamp(min=0)),
  "clip max": (lambda x: x.clip(max_=3), lambda x: x.clip(max=3)),
  "clamp min > max": (lambda x: x.clamp(1, -1), lambda x: x.clamp(1, -1)),
  "pow int 2": (lambda x: x ** 2, lambda x: x ** 2),
  "pow int 3": (lambda x: x ** 3, lambda x: x ** 3),
  "pow int -1": (lambda x: x ** -1, lambda x: x ** -1),
  "pow 0.0": (lambda x: x ** 0.0, lambda x: x ** 0.0),
  "pow 0.5": (lambda x: x ** 0.5, lambda x: x ** 0.5),
  "pow 3.0": (lambda x: x ** 3.0, lambda x: x ** 3.0),
  "pow 8.0": (lambda x: x ** 8.0, lambda x: x ** 8.0),
  "pow -2.0": (lambda x: x ** -2.0, lambda x: x ** -2.0),
  "pow 2.5": (lambda x: x ** 2.5, lambda x: x ** 2.5),
  "rpow 2.0": (lambda x: 2.0 ** x, lambda x: 2.0 ** x),
  "rpow 0.5": (lambda x: 0.5 ** x, lambda x: 0.5 ** x),
  "rpow 0.0": (lambda x: 0.0 ** x, lambda x: 0.0 ** x),
  "rpow -2.0": (lambda x: (-2.0) ** x, lambda x: (-2.0) ** x),
  "rpow 1.0": (lambda x: 1.0 ** x, lambda x: 1.0 ** x),
  "add scalar": (lambda x: x + 1e-30, lambda x: x + 1e-30),
  "rsub scalar": (lambda x: 3 - x, lambda x: 3 - x),
  "rdiv scalar": (lambda x: 1.0 / x, lambda x: 1.0 / x),
  "maximum scalar": (lambda x: x.maximum(1.0), lambda x: torch.maximum(x, torch.tensor(1.0, dtype=x.dtype))),
  "minimum scalar": (lambda x: x.minimum(0.0), lambda x: torch.minimum(x, torch.tensor(0.0, dtype=x.dtype))),
  "lerp": (lambda x: x.lerp(Tensor(2.0, dtype=x.dtype), 0.25), lambda x: torch.lerp(x, torch.tensor(2.0, dtype=x.dtype),
                                                                                          0.25)),
}


# torch's float64 backward of hardsigmoid rounds 1/6 to float32 (and celu's 1/alpha: celu is tested with an alpha
# whose reciprocal float32 holds exactly), so it is only good to about 1e-7 relative
LOOSER_IN_FLOAT64 = {"hardsigmoid": 1e-7}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_at_every_edge_point(name, dtype):
  rg, th = UNARY[name]
  rtol = max(RTOL[dtype], LOOSER_IN_FLOAT64.get(name, 0.0)) if dtype == "float64" else RTOL[dtype]
  compare(rg, th, [np.array(edge_points(DTYPES[dtype]), dtype=DTYPES[dtype])], rtol)


BINARY = {
  "add": (lambda x, y: x + y, lambda x, y: x + y),
  "sub": (lambda x, y: x - y, lambda x, y: x - y),
  "mul": (lambda x, y: x * y, lambda x, y: x * y),
  "div": (lambda x, y: x / y, lambda x, y: x / y),
  "pow": (lambda x, y: x ** y, lambda x, y: x ** y),
  "maximum": (lambda x, y: x.maximum(y), torch.maximum),
  "minimum": (lambda x, y: x.minimum(y), torch.minimum),
  "mod": (lambda x, y: x % y, lambda x, y: x % y),
  "clamp by tensors": (lambda x, y: x.clamp(y, 1.0), lambda x, y: x.clamp(y, torch.tensor(1.0, dtype=x.dtype))),
  "lerp weight": (lambda x, y: Tensor(1.0, dtype=x.dtype).lerp(x, y),
                  lambda x, y: torch.lerp(torch.tensor(1.0, dtype=x.dtype), x, y)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_at_every_pair_of_edge_points(name, dtype):
  points = np.array(edge_points(DTYPES[dtype]), dtype=DTYPES[dtype])
  x, y = np.meshgrid(points, points, indexing="ij")  # every (x, y) pair, so both orders of every two points
  rg, th = BINARY[name]
  compare(rg, th, [x.copy(), y.copy()], RTOL[dtype])


# ---------------------------------------------------------------- x % y: y's gradient is minus the quotient
INF, NAN = float("inf"), float("nan")
MOD_POINTS = {  # (x, y) pairs by what they test
  "exact integer quotient": [(6.0, 3.0), (-6.0, 3.0), (6.0, -3.0), (-6.0, -3.0), (1.0, 0.5), (-0.75, 0.25)],
  # a / b rounds up onto an integer the exact quotient is below (in magnitude): trunc(a / b) is one too far
  "quotient rounds onto an integer": [(-0.5, -0.001), (0.5, 0.001), (-0.5, 0.001), (1.0, 0.1), (3.0, 0.1),
                                      (-3.0, 0.1), (3.0, -0.001), (1.0, -0.1), (0.5, 0.1), (20.0, 0.1)],
  "quotient just above an integer": [(1.0, 1 / 3), (-1.0, 1 / 3), (2.0, 0.2 / 3), (1.0, -1 / 3), (-1.0, -1 / 3)],
  "tiny y": [(1.0, 5e-324), (-1.0, 5e-324), (1.0, 1e-300), (1e-300, 3e-301), (-1e-300, 3e-301), (5e-324, 5e-324)],
  "huge y": [(1.0, 1e300), (-1.0, 1e300), (1.0, -1e300), (1e300, 3e299), (-1e300, 3e299), (1e308, 1e-5)],
  "signed zeros": [(0.0, 2.0), (-0.0, 2.0), (0.0, -2.0), (-0.0, -2.0), (3.0, 0.0), (3.0, -0.0), (-3.0, 0.0),
                   (0.0, 0.0), (-0.0, -0.0)],
  "infinities and NaN": [(INF, 2.0), (-INF, 2.0), (3.0, INF), (-3.0, INF), (3.0, -INF), (-3.0, -INF), (INF, INF),
                         (NAN, 1.0), (1.0, NAN)],
}


def mod_gradients(x: np.ndarray, y: np.ndarray, make=Tensor) -> list[np.ndarray]:
  """The gradients of sum(x % y), in refgrad or (make=torch.tensor) torch."""
  return weighted_backward(lambda a, b: a % b, [x, y], np.ones, make)[1:]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("what", MOD_POINTS)
def test_mod_gradient_is_minus_the_quotient_of_the_remainder(what, dtype):
  """d(x % y)/dy is -(x // y), the integer quotient that the remainder x % y is left by: -0.5 % -0.001 is -0.00099..
  (0.001 is a little more than 1/1000, so 499 fits), and -0.5 / -0.001 rounds to 500.0, which is not it. Exactly
  torch's, infinities and NaNs included (x is inf: the value is NaN, and so is y's gradient)."""
  with np.errstate(all="ignore"):
    x, y = (np.array(column, dtype=DTYPES[dtype]) for column in zip(*MOD_POINTS[what]))
  for ours, theirs in zip(mod_gradients(x, y), mod_gradients(x, y, torch.tensor)):
    np.testing.assert_array_equal(ours, theirs)


def test_half_mod_gradient_is_minus_the_exact_quotient():
  """float16 (computed through float32): -(x // y) of the half inputs, which float64 holds exactly, rounded to half,
  wherever it is below 2048 (beyond, half holds every other integer, and y's two contributions, -trunc and +1 where
  the remainder's sign is fixed, may round twice: 1 ulp). torch's own half backward is off by one from 1024 up
  (-137.875 % -0.07739 gives 1782, 1781 is the quotient), so torch in float64 is the oracle."""
  rng = np.random.default_rng(29)
  y = (rng.choice([-1.0, 1.0], 2000) * 10.0 ** rng.uniform(-3, 1, 2000)).astype(np.float16)
  nudge = rng.choice([0.0, 1e-3, -1e-3, 0.3], 2000)  # exactly k y, just beside it (rounded to half), or between
  x = (y.astype(np.float64) * (rng.integers(-2047, 2048, 2000) + nudge)).astype(np.float16)
  _, ours = mod_gradients(x, y)
  _, exact = mod_gradients(x.astype(np.float64), y.astype(np.float64), torch.tensor)
  below = np.abs(exact) < 2048
  assert below.sum() > 1900
  np.testing.assert_array_equal(ours[below], exact[below].astype(np.float16))


# ---------------------------------------------------------------- reductions, scans, losses: rows of edge points
LABELS = np.array([0, 3, 1], dtype=np.int32)
PROBS = np.array([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
ROWS = {
  "sum": (lambda x: x.sum(1), lambda x: x.sum(1)),
  "mean": (lambda x: x.mean(), lambda x: x.mean()),
  "prod": (lambda x: x.prod(1), lambda x: x.prod(1)),
  "max": (lambda x: x.max(1), lambda x: x.amax(1)),
  "max all": (lambda x: x.max(), lambda x: x.max()),
  "min": (lambda x: x.min(1), lambda x: x.amin(1)),
  "min all": (lambda x: x.min(), lambda x: x.min()),
  "logsumexp": (lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
  "logsumexp all": (lambda x: x.logsumexp(), lambda x: x.logsumexp((0, 1))),
  "softmax": (lambda x: x.softmax(1), lambda x: x.softmax(1)),
  "softmax axis 0": (lambda x: x.softmax(0), lambda x: x.softmax(0)),
  "log_softmax": (lambda x: x.log_softmax(), lambda x: x.log_softmax(-1)),
  "var": (lambda x: x.var(1), lambda x: x.var(1)),
  "std": (lambda x: x.std(1), lambda x: x.std(1)),
  "std all correction 0": (lambda x: x.std(correction=0), lambda x: x.std(correction=0)),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
  "cumprod": (lambda x: x.cumprod(1), lambda x: x.cumprod(1)),
  "logcumsumexp": (lambda x: x.logcumsumexp(1), lambda x: x.logcumsumexp(1)),
  "matmul": (lambda x: x @ x.T, lambda x: x @ x.T),
  "layernorm": (lambda x: x.layernorm(), lambda x: F.layer_norm(x, (4,))),
  "cross_entropy": (lambda x: x.cross_entropy(Tensor(LABELS)),
                    lambda x: F.cross_entropy(x, torch.tensor(LABELS, dtype=torch.int64))),
  "cross_entropy probabilities smoothed": (
    lambda x: x.cross_entropy(Tensor(PROBS.astype(x.dtype.np)), label_smoothing=0.1),
    lambda x: F.cross_entropy(x, torch.tensor(PROBS, dtype=x.dtype), label_smoothing=0.1)),
  "sparse_categorical_crossentropy": (
    lambda x: x.sparse_categorical_crossentropy(Tensor(LABELS)),
    lambda x: F.cross_entropy(x, torch.tensor(LABELS, dtype=torch.int64))),
  "nll_loss": (lambda x: x.log_softmax().nll_loss(Tensor(LABELS)),
               lambda x: F.nll_loss(x.log_softmax(-1), torch.tensor(LABELS, dtype=torch.int64))),
  "binary_crossentropy": (
    lambda x: x.sigmoid().binary_crossentropy(Tensor(PROBS.astype(x.dtype.np))),
    lambda x: F.binary_cross_entropy(x.sigmoid(), torch.tensor(PROBS, dtype=x.dtype))),
  "binary_crossentropy_logits": (
    lambda x: x.binary_crossentropy_logits(Tensor(PROBS.astype(x.dtype.np))),
    lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(PROBS, dtype=x.dtype))),
}


def edge_rows(dt: type) -> st.SearchStrategy:
  """A 3x4 array of edge points; drawing from 20 values makes ties within a row common. Without subnormals: torch's
  product gradients divide by the element, and a subnormal one rounds the upstream gradient away."""
  points = [p for p in edge_points(dt) if p == 0 or abs(p) >= np.finfo(dt).tiny]
  return st.lists(st.sampled_from(points), min_size=12, max_size=12).map(
    lambda v: np.array(v, dtype=dt).reshape(3, 4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ROWS)
def test_rows_of_edge_points(name, dtype):
  rg, th = ROWS[name]

  @settings(max_examples=15, derandomize=True, deadline=None, database=None)
  @given(edge_rows(DTYPES[dtype]))
  def check(x):
    # sums of terms 1e8 apart (1e4 squared next to 1) keep only an absolute accuracy, relative to the largest term
    scale = float(np.abs(x.astype(np.float64)).max()) ** 2
    compare(rg, th, [x], RTOL[dtype], atol=RTOL[dtype] * 1e-6 * scale)
  check()


# ---------------------------------------------------------------- issue 11's table, in float32, torch at run time
REGRESSIONS = [
  ("tanh", [0.0]), ("gelu tanh", [0.0, 350.0, -350.0]), ("sigmoid", [-300.0]), ("softplus", [-350.0, 350.0]),
  ("pow 8.0", [0.0]), ("pow 0.0", [0.0]), ("relu", [0.0]), ("erf", [0.0]), ("rpow 2.0", [0.0]), ("pow 0.5", [1.0]),
  ("elu", [0.0, 1e-30, -1e-30]), ("mish", [88.0, 300.0, -20.0]), ("logsigmoid", [20.0, -300.0]),
  ("clamp", [-1.0, 1.0]),
]


@pytest.mark.parametrize("name, points", REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_issue_11_gradient(name, points):
  rg, th = UNARY[name]
  x, tx = Tensor(points, requires_grad=True), torch.tensor(points, requires_grad=True)
  rg(x).sum().backward()
  th(tx).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=0)


# ---------------------------------------------------------------- piecewise-constant ops: zero gradients
FLAT = {
  "sign": lambda x: x.sign(), "floor": lambda x: x.floor(), "ceil": lambda x: x.ceil(),
  "round": lambda x: x.round(), "trunc": lambda x: x.trunc(), "lt": lambda x: x.lt(0.5).float(),
  "eq": lambda x: x.eq(1.0).float(), "int cast": lambda x: x.int().float(), "argmax": lambda x: x.argmax().float(),
  "floordiv": lambda x: x // 2.0,
}


@pytest.mark.parametrize("name", FLAT)
def test_piecewise_constant_ops_give_zero_gradients(name):
  x = Tensor([-1.5, 0.0, 0.5, 1.0, 2.5], requires_grad=True)
  FLAT[name](x).sum().backward()
  assert x.grad.tolist() == [0.0] * 5
  (grad,) = FLAT[name](x).sum().gradient(x)  # no "not part of the graph" error either
  assert grad.tolist() == [0.0] * 5


def test_detached_input_is_still_not_part_of_the_graph():
  x = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="not part of"):
    (x.detach() * 2).sum().gradient(x)


# ---------------------------------------------------------------- custom-gradient nodes cost no forward kernels
@pytest.mark.parametrize("name", ["tanh", "sigmoid", "gelu tanh", "mish", "softplus", "clamp", "pow 2.5", "elu"])
def test_custom_gradients_add_no_kernels(name):
  from refgrad.uop import Ops
  x = Tensor(np.linspace(-3, 3, 8, dtype=np.float32))
  out = UNARY[name][0](x)
  assert any(u.op is Ops.CUSTOM_GRAD for u in out.uop.toposort)
  stripped = out.uop.substitute({u: u.src[0] for u in out.uop.toposort if u.op is Ops.CUSTOM_GRAD})
  assert len(out.schedule()) == len(Tensor(stripped).schedule()) == 1


JOINS = {
  "cat with empty parts": (lambda *ts: Tensor.cat(*ts), lambda *ts: torch.cat(ts), [(2, 3), (0, 3), (0,), (1, 3)]),
  "cat of empty parts only": (lambda *ts: Tensor.cat(*ts, dim=1), lambda *ts: torch.cat(ts, 1), [(2, 0), (2, 0)]),
  "stack of empty tensors": (lambda *ts: Tensor.stack(*ts, dim=1), lambda *ts: torch.stack(ts, 1), [(0, 2), (0, 2)]),
}


@pytest.mark.parametrize("name", JOINS)
def test_zero_size_inputs_of_cat_and_stack_get_zero_size_gradients(name):
  rg_fn, torch_fn, shapes = JOINS[name]
  arrays = [np.arange(np.prod(s), dtype=np.float32).reshape(s) + 1 for s in shapes]
  ours = [Tensor(a, requires_grad=True) for a in arrays]
  theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
  out_t = torch_fn(*theirs)
  weights = np.arange(out_t.numel(), dtype=np.float32).reshape(tuple(out_t.shape))
  (rg_fn(*ours) * Tensor(weights)).sum().backward()
  (out_t * torch.tensor(weights)).sum().backward()
  for a, t in zip(ours, theirs):
    assert a.grad is not None and a.grad.shape == tuple(t.grad.shape)
    np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())


# ---------------------------------------------------------------- a zero gradient stays zero (docs/SPEC.md)
OVERFLOW_POINTS = [0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 88.0, -88.0, 89.0, -89.0, 300.0, -300.0, 709.0, 710.0, -710.0,
                   1e4, -1e4]


def exact_sigmoid_derivative(points: list[float]) -> np.ndarray:
  """sigmoid'(x) = e^-|x| / (1 + e^-|x|)^2, in float64 without overflow."""
  e = np.exp(-np.abs(np.array(points, np.float64)))
  return e / (1 + e) ** 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_overflowing_exp_quotient_differentiates_to_its_limit(dtype):
  """exp(x) / (1 + exp(x)) where exp overflows: the value is NaN (inf / inf, as in torch) but the gradient is the
  derivative's value, 0 to the dtype's precision (torch: NaN; tinygrad: 0). Elsewhere it is torch's (which
  cancels to 0 from x = 20 in float32, as the composite does)."""
  points = np.array(OVERFLOW_POINTS, DTYPES[dtype])
  x, tx = Tensor(points, requires_grad=True), torch.tensor(points, requires_grad=True)
  (x.exp() / (1 + x.exp())).sum().backward()
  (tx.exp() / (1 + tx.exp())).sum().backward()
  ours, theirs, exact = x.grad.numpy().astype(np.float64), tx.grad.double().numpy(), exact_sigmoid_derivative(points)
  tiny = float(np.finfo(DTYPES[dtype]).tiny)
  check_against_torch(ours, theirs, exact, "gradient", RTOL[dtype], tiny)
  overflowed = np.isnan(theirs)
  assert overflowed.sum() >= 2  # points where exp overflows are among those tested (float64: 710 and 1e4)
  np.testing.assert_allclose(ours[overflowed], exact[overflowed], rtol=0, atol=tiny)


ZERO_TIMES_INFINITE = {  # name: (function, points where its local derivative is infinite but the gradient is 0)
  "minimum of exp": (lambda x: x.exp().minimum(5.0), [300.0, 1e4]),
  "sqrt times 0": (lambda x: x.sqrt() * 0, [0.0]),
  "log times 0": (lambda x: x.log() * 0, [0.0]),
  "reciprocal in an untaken where": (lambda x: x.ge(0).where(0.0, x.reciprocal()), [0.0]),
  "exp over exp": (lambda x: x.exp() / x.exp(), [300.0]),
  "1 over exp": (lambda x: 1 / x.exp(), [300.0]),
}


@pytest.mark.parametrize("name", ZERO_TIMES_INFINITE)
def test_zero_gradient_through_an_infinite_derivative_is_zero(name):
  fn, points = ZERO_TIMES_INFINITE[name]
  x = Tensor(points, requires_grad=True)
  (grad,) = fn(x).sum().gradient(x)
  assert grad.tolist() == [0.0] * len(points)


NONZERO_TIMES_INFINITE = {  # torch's NaN or infinity stays: the incoming gradient is not 0
  "1 over exp": (lambda x: 1 / x.exp(), [-300.0]),
  "sqrt": (lambda x: x.sqrt(), [0.0]),
  "log": (lambda x: x.log(), [0.0, -1.0]),
  "x over x": (lambda x: x / x, [0.0]),
  "reciprocal": (lambda x: x.reciprocal(), [0.0, -0.0]),
}


@pytest.mark.parametrize("name", NONZERO_TIMES_INFINITE)
def test_nonzero_gradient_through_an_infinite_derivative_is_torchs(name):
  fn, points = NONZERO_TIMES_INFINITE[name]
  x, tx = Tensor(points, requires_grad=True), torch.tensor(points, requires_grad=True)
  fn(x).sum().backward()
  fn(tx).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("points", [[2.0, -0.0, 0.0], [float("inf"), float("nan"), -3.5]], ids=["finite", "special"])
def test_pow_zero_gives_zero_gradients(points):
  """x ** 0 is ones that still depend on x: the gradient is zeros (torch), not 'not part of the graph'."""
  x, tx = Tensor(points, requires_grad=True), torch.tensor(points, requires_grad=True)
  out, tout = x ** 0, tx ** 0
  np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
  (grad,) = (out * 3).sum().gradient(x)
  (tout * 3).sum().backward()
  np.testing.assert_array_equal(grad.numpy(), tx.grad.numpy())
  out.sum().backward()
  assert x.grad.tolist() == [0.0] * 3
