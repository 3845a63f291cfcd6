"""Elementwise functions built from the primitives, against torch: inverse trig and hyperbolic functions, erf,
rounding, clamp, lerp, isinf/isclose, shifts by tensors, reverse and in-place operators, and the cast shortcuts.
Shapes cover 0-d, 0-size, broadcasting and non-contiguous inputs."""
import operator

import numpy as np
import pytest
import torch
from helpers import NP_DTYPE, check, to_numpy, to_torch

from refgrad import Tensor, dtypes
from refgrad.dtype import least_upper_dtype

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

D = dtypes
SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan]


def spread(lo, hi, dtype, n=48):
  pts = np.concatenate([np.linspace(lo, hi, n), [1e-30, -1e-7, 0.3, 2.5], SPECIALS])
  with np.errstate(over="ignore"):
    return pts.astype(NP_DTYPE[dtype])


def reference(torch_fn, values, out):
  """torch in float64, rounded once to the output dtype (torch's float64 results are within 1 ULP)."""
  with np.errstate(all="ignore"):
    return to_numpy(torch_fn(torch.from_numpy(values.astype(np.float64)))).astype(NP_DTYPE[out])


# name: (input range, ULP bound for float32/float64 as a function of x). Half dtypes compute in float32 and round
# once, so they are within 1 ULP. Bounds, from the constructions in frontend/special.py: the polynomial fits are
# below 0.01 ULP; atan's reduction (t-1)/(t+1) and the pi/2, pi/4 additions (hi + lo constants) add at most ~2 ULP;
# asin/acos/asinh/acosh/atanh feed atan or log1p a ratio within ~2 ULP through a condition number <= 1, plus log's
# 2 ULP; erf is polynomial (+ exp(-x^2) * Q, whose error is absolute and far below 1 ULP of erf); tanh is built on
# expm1, which inherits exp(x) = exp2(x * log2(e))'s ~|x|/2 ULP; sinh and cosh likewise (the same +|x| rule as exp).
MATH = {
  "atan": ((-50, 50), lambda x: 4), "asin": ((-1.2, 1.2), lambda x: 4), "acos": ((-1.2, 1.2), lambda x: 4),
  "asinh": ((-1e3, 1e3), lambda x: 4), "acosh": ((-2, 1e3), lambda x: 4), "atanh": ((-1.1, 1.1), lambda x: 4),
  "erf": ((-7, 7), lambda x: 4), "tanh": ((-12, 12), lambda x: 4 + np.abs(x)),
  "sinh": ((-80, 80), lambda x: 4 + np.abs(x)), "cosh": ((-80, 80), lambda x: 4 + np.abs(x)),
  # sin / cos: a few ULP each (cos carries pi/2 - x exactly) and a division
  "tan": ((-1.5, 1.5), lambda x: 6),
}
MATH_DTYPES = [D.float32, D.float64, D.float16, D.bfloat16]


@pytest.mark.parametrize("dtype", MATH_DTYPES, ids=[d.name for d in MATH_DTYPES])
@pytest.mark.parametrize("name", list(MATH))
def test_math(name, dtype):
  (lo, hi), bound = MATH[name]
  v = spread(lo, hi, dtype)
  ulp = 1 if dtype.itemsize == 2 else bound(np.nan_to_num(v.astype(np.float64), posinf=0, neginf=0))
  check(getattr(Tensor(v), name)(), reference(getattr(torch, name), v, dtype), dtype, ulp=ulp)


@pytest.mark.parametrize("name", ["atan", "asin", "erf", "rsqrt", "sinh"])
def test_math_int_input_is_float32(name):
  v = np.array([0, 1, -1, 3], np.int32)
  want = reference(getattr(torch, name), v, D.float32)
  check(getattr(Tensor(v), name)(), want, D.float32, ulp=4)


def test_math_tiny_and_special_values_exact():
  # odd functions keep the sign of zero and are x itself for tiny x; limits are exact
  v = np.array([0.0, -0.0, 1e-30, -1e-30, np.inf, -np.inf], np.float32)
  tv = torch.from_numpy(v)
  for name in ("atan", "asin", "asinh", "atanh", "erf", "tanh", "sinh"):  # erf(x) = x * 1.1283791...: 1 rounding
    check(getattr(Tensor(v[:4]), name)(), getattr(torch, name)(tv[:4]), D.float32, ulp=1 if name == "erf" else 0)
  for name in ("atan", "asinh", "erf", "tanh", "sinh", "cosh"):
    check(getattr(Tensor(v[4:]), name)(), getattr(torch, name)(tv[4:]), D.float32)


SHAPES = [(), (0,), (3, 0), (5,), (2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary_shapes(shape):
  v = np.random.default_rng(0).uniform(-0.9, 0.9, shape).astype(np.float32)
  check(Tensor(v).asin(), torch.from_numpy(v).double().asin().float(), D.float32, ulp=4)
  check(Tensor(v).square(), torch.from_numpy(v).square(), D.float32)


def test_unary_non_contiguous():
  v = np.random.default_rng(1).uniform(-3, 3, (4, 6)).astype(np.float32)
  t, tt = Tensor(v), torch.from_numpy(v).double()
  check(t.T[::2].erf(), tt.T[::2].erf().float(), D.float32, ulp=4)
  check(t[1:2].expand(3, 6).atan(), tt[1:2].expand(3, 6).atan().float(), D.float32, ulp=4)
  check(t.flip(1).cosh(), tt.flip(1).cosh().float(), D.float32, ulp=8)


# ---- rounding: exact
ROUND_VALUES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 2.7, -2.7, 1e20, -1e20, 0.0, -0.0, np.inf, -np.inf,
                np.nan, 4503599627370497.0]


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16], ids=["float32", "float64", "float16"])
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round"])
def test_rounding(name, dtype):
  with np.errstate(over="ignore"):
    v = np.array(ROUND_VALUES).astype(NP_DTYPE[dtype])
  check(getattr(Tensor(v), name)(), getattr(torch, name)(torch.from_numpy(v)), dtype)


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round"])
def test_rounding_ints_unchanged(name):
  v = np.array([-3, 0, 7], np.int16)
  check(getattr(Tensor(v), name)(), v, D.int16)


@pytest.mark.parametrize("dtype", [D.float32, D.int32, D.int8, D.uint8, D.bool], ids=lambda d: d.name)
def test_sign_square(dtype):
  v = np.array([-3, -1, 0, 2, 5] if dtype != D.uint8 else [0, 1, 2, 200, 255]).astype(NP_DTYPE[dtype])
  if dtype == D.float32:
    v = np.concatenate([v, np.array([-0.0, np.nan, -np.inf], np.float32)])
  check(Tensor(v).sign(), torch.sign(to_torch(v)), dtype)
  if dtype != D.bool:
    check(Tensor(v).square(), to_torch(v) * to_torch(v), dtype)


def test_rsqrt_reciprocal():
  v = np.array([4.0, 0.25, 2.0, 0.0, -0.0, np.inf, -1.0, np.nan], np.float32)
  check(Tensor(v).rsqrt(), torch.from_numpy(v).rsqrt(), D.float32, ulp=1)  # two correctly rounded steps
  check(Tensor(v).reciprocal(), torch.from_numpy(v).reciprocal(), D.float32)
  check(Tensor(np.array([2, 4], np.int32)).reciprocal(), torch.tensor([0.5, 0.25]), D.float32)


# ---- clamp, lerp
@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16, D.bfloat16], ids=lambda d: d.name)
def test_copysign_every_pair_of_special_values(dtype):
  """|x| with y's sign bit: -0.0, -inf and NaN signs included, against torch."""
  v = np.array(SPECIALS + [2.5, -1e-30], np.float64)
  x, y = (Tensor(a.astype(np.float32)).cast(dtype) for a in np.meshgrid(v, v))  # -1e-30 is -0.0 in half
  xv, yv = (torch.from_numpy(t.float().numpy().astype(np.float64)) for t in (x, y))
  check(x.copysign(y), to_numpy(torch.copysign(xv, yv)).astype(NP_DTYPE[dtype]), dtype)
  neg_nan = Tensor(np.array([-np.nan, np.nan], np.float32)).cast(dtype)
  assert neg_nan.signbit().tolist() == [True, False]


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16, D.int8, D.int64, D.uint8, D.bool],
                         ids=lambda d: d.name)
def test_signbit(dtype):
  v = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, 127, -128], np.float64)
  with np.errstate(invalid="ignore"):
    a = (v if dtype.kind == "f" else np.nan_to_num(v, posinf=5, neginf=-5)).astype(NP_DTYPE[dtype])
  check(Tensor(a).signbit(), torch.signbit(torch.from_numpy(a)), D.bool)


def test_copysign_ints_scalars_and_broadcast():
  """ints keep the broadcast dtype (tinygrad), with torch's values; a scalar sign; shapes broadcast; 0-d and empty."""
  a, b = np.array([[-3], [0], [7]], np.int32), np.array([1, -1, 0, -5], np.int32)
  want = torch.copysign(torch.from_numpy(a).double(), torch.from_numpy(b).double()).int()
  check(Tensor(a).copysign(Tensor(b)), want, D.int32)
  check(Tensor([1.5, -2.0]).copysign(-0.0), torch.copysign(torch.tensor([1.5, -2.0]), -0.0), D.float32)
  check(Tensor(-0.0).copysign(Tensor(1.0)), torch.copysign(torch.tensor(-0.0), torch.tensor(1.0)), D.float32)
  assert Tensor.ones(2, 0).copysign(Tensor.ones(1, 0)).shape == (2, 0)


def test_copysign_gradient_at_edges():
  """torch's: +-1 by whether the sign changed, 0 at x = +-0; the sign operand gets zeros. (At x = +-inf torch's
  out / x is NaN; the derivative there is +-1, which refgrad gives.)"""
  x = np.array([-2.0, 0.0, -0.0, 3.0, -1e-30, 5.0], np.float32)
  y = np.array([1.0, -1.0, 1.0, -0.0, np.inf, np.nan], np.float32)
  tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
  want = torch.autograd.grad(torch.copysign(tx, ty).sum(), (tx, ty))
  rx, ry = Tensor(x, requires_grad=True), Tensor(y, requires_grad=True)
  got = rx.copysign(ry).sum().gradient(rx, ry)
  check(got[0], want[0], D.float32)
  check(got[1], want[1], D.float32)
  inf = Tensor([np.inf, -np.inf], requires_grad=True)
  check(inf.copysign(Tensor([-1.0, -1.0])).sum().gradient(inf)[0], np.array([-1.0, 1.0], np.float32), D.float32)


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (None, 0.5), (0, None), (2.0, -2.0)], ids=str)
def test_clamp(bounds):
  v = np.array([-3.0, -1.0, 0.0, 0.7, 1.0, 5.0, np.nan, np.inf], np.float32)
  lo, hi = bounds
  want = torch.clamp(torch.from_numpy(v), lo, hi)
  check(Tensor(v).clamp(lo, hi), want, D.float32, signed_zeros=False)
  check(Tensor(v).clip(lo, hi), want, D.float32, signed_zeros=False)


def test_clamp_tensor_bounds_broadcast_and_promotion():
  v = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
  lo = np.array([[-2], [0], [1]], np.int32)
  check(Tensor(v).clamp(Tensor(lo), 3), torch.clamp(torch.from_numpy(v), torch.from_numpy(lo), torch.tensor(3)),
        D.int32)
  check(Tensor(v).clamp(0.5), torch.clamp(torch.from_numpy(v), 0.5), D.float32)
  check(Tensor(v.astype(np.uint8)).clamp(max_=3), torch.clamp(torch.from_numpy(v.astype(np.uint8)), max=3), D.uint8)


@pytest.mark.parametrize("weight", [0.0, 0.25, 0.5, 1.0, -0.5, 1.5])
def test_lerp_scalar_weight(weight):
  a = np.array([0.0, 1.0, -2.5, 1e10, 3.0], np.float32)
  b = np.array([10.0, 1.0, 7.5, -1e10, 3.1], np.float32)
  check(Tensor(a).lerp(Tensor(b), weight), torch.lerp(torch.from_numpy(a), torch.from_numpy(b), weight), D.float32,
        ulp=1)  # torch may fuse the multiply-add (one rounding instead of two)


def test_lerp_tensor_weight_broadcast():
  a = np.random.default_rng(2).standard_normal((3, 1)).astype(np.float32)
  b = np.random.default_rng(3).standard_normal((1, 4)).astype(np.float32)
  w = np.array([0.1, 0.6, 0.9, 0.3], np.float32)
  want = torch.lerp(torch.from_numpy(a).expand(3, 4), torch.from_numpy(b).expand(3, 4), torch.from_numpy(w))
  check(Tensor(a).lerp(Tensor(b), Tensor(w)), want, D.float32, ulp=1)


@pytest.mark.parametrize("dtype", [D.float16, D.bfloat16], ids=["float16", "bfloat16"])
def test_half_lerp_computes_in_float32_like_torch(dtype):
  """end - x of half values far apart overflowed: float16 lerp(-65504, 20, 0.3) was inf (torch: -45856); bfloat16
  results were off by several ULP from the rounded difference. torch computes in float32 and rounds once."""
  a = np.array([-65504, -60000, -100, -11.5, -5, 1000], np.float32)
  b = np.array([20, 60000, 300, 20, 11.5, -65504], np.float32)
  w = np.array([0.3, 0.7, 0.5, 0.9, 0.1, 0.3], np.float32)
  ta, tb, tw = (to_torch(v.astype(NP_DTYPE[dtype])) for v in (a, b, w))
  want = torch.lerp(ta.double(), tb.double(), tw.double()).to(ta.dtype)
  t = [Tensor(v).cast(dtype) for v in (a, b, w)]
  check(t[0].lerp(t[1], t[2]), want, dtype, ulp=1)
  check(t[0].lerp(t[1], 0.3), torch.lerp(ta.double(), tb.double(), 0.3).to(ta.dtype), dtype, ulp=1)


# ---- predicates
@pytest.mark.parametrize("pos, neg", [(True, True), (True, False), (False, True), (False, False)])
def test_isinf_isnan_isfinite(pos, neg):
  v = np.array([1.0, np.inf, -np.inf, np.nan, -0.0], np.float32)
  tv = torch.from_numpy(v)
  want = (torch.isposinf(tv) & pos) | (torch.isneginf(tv) & neg)
  check(Tensor(v).isinf(pos, neg), want, D.bool)
  check(Tensor(v).isnan(), torch.isnan(tv), D.bool)
  check(Tensor(v).isfinite(), torch.isfinite(tv), D.bool)
  check(Tensor(np.array([1, 2], np.int8)).isinf(pos, neg), torch.tensor([False, False]), D.bool)


@pytest.mark.parametrize("kw", [{}, {"rtol": 0.0, "atol": 0.1}, {"equal_nan": True}, {"rtol": 0.5, "atol": 0.0}],
                         ids=str)
def test_isclose(kw):
  a = np.array([1.0, 1.0 + 1e-6, 2.0, np.inf, np.inf, np.nan, 0.0, 100.0], np.float32).reshape(-1, 1)
  b = np.array([1.0, 2.05, np.inf, -np.inf, np.nan, 1e-9], np.float32).reshape(1, -1)
  want = torch.isclose(*torch.broadcast_tensors(torch.from_numpy(a), torch.from_numpy(b)), **kw)
  check(Tensor(a).isclose(Tensor(b), **kw), want, D.bool)


def test_isclose_ints():
  a, b = np.array([1, 5, 100], np.int32), np.array([1, 6, 101], np.int32)
  check(Tensor(a).isclose(Tensor(b), rtol=0.01, atol=0), torch.isclose(torch.from_numpy(a), torch.from_numpy(b),
                                                                        rtol=0.01, atol=0), D.bool)


def test_logical_not():
  v = np.array([0, 3, -1], np.int32)
  check(Tensor(v).logical_not(), torch.logical_not(torch.from_numpy(v)), D.bool)
  check(Tensor(np.array([0.0, np.nan], np.float32)).logical_not(), torch.tensor([True, False]), D.bool)


# ---- NaN propagation of maximum/minimum/max/min
def test_max_min_propagate_nan():
  v = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, -1.0]], np.float32)
  tv = torch.from_numpy(v)
  check(Tensor(v).max(1), tv.amax(1), D.float32)
  check(Tensor(v).min(0), tv.amin(0), D.float32)
  check(Tensor(v).maximum(2.0), torch.maximum(tv, torch.tensor(2.0)), D.float32)
  check(Tensor(v).minimum(Tensor(v[::-1].copy())), torch.minimum(tv, tv.flip(0)), D.float32)


# ---- arithmetic forms: reverse, methods, in-place
INT_VALUES = np.array([-7, -3, -1, 0, 1, 2, 5, 9], np.int32)


@pytest.mark.parametrize("op", ["sub", "div", "idiv", "mod", "floordiv"])
def test_reverse_methods(op):
  v = INT_VALUES[INT_VALUES != 0]
  tv = torch.from_numpy(v)
  torch_fns = {"sub": lambda x: 10 - x, "div": lambda x: 10 / x,
               "idiv": lambda x: torch.div(10, x, rounding_mode="trunc"),
               "mod": lambda x: torch.remainder(torch.tensor(10, dtype=torch.int32), x),
               "floordiv": lambda x: torch.div(10, x, rounding_mode="floor")}
  want = torch_fns[op](tv)
  # torch's 10 / x is reciprocal(x) * 10, rounded twice; refgrad's division is correctly rounded
  check(getattr(Tensor(v), op)(10, reverse=True), want, D.float32 if op == "div" else D.int32, ulp=1)


def test_idiv_truncates_and_mod_takes_divisor_sign():
  a, b = np.array([7, -7, 7, -7], np.int64), np.array([2, 2, -2, -2], np.int64)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  check(Tensor(a).idiv(Tensor(b)), torch.div(ta, tb, rounding_mode="trunc"), D.int64)
  check(Tensor(a).mod(Tensor(b)), torch.remainder(ta, tb), D.int64)
  check(Tensor(a.astype(np.float32)).idiv(2.0), torch.div(ta.float(), 2.0, rounding_mode="trunc"), D.float32)
  check(Tensor(a).div(Tensor(b), rounding_mode="floor"), torch.div(ta, tb, rounding_mode="floor"), D.int64)


@pytest.mark.parametrize("dtype", [D.int8, D.int16, D.int32, D.int64], ids=["int8", "int16", "int32", "int64"])
def test_min_divided_by_minus_one_wraps_on_every_device(dtype):
  """MIN // -1, MIN idiv -1 and MIN % -1 are the wrapped quotient MIN and 0 (torch's int8 and int16 answers; its int32
  and int64 kernels trap): IDIV and MOD leave these lanes undefined, and CLANG's // gave 0 where PYTHON gave MIN."""
  lo = np.iinfo(NP_DTYPE[dtype]).min
  a, b = np.array([lo, lo, 7, -7], NP_DTYPE[dtype]), np.array([-1, 1, -1, -1], NP_DTYPE[dtype])
  quotient, zero = np.array([lo, lo, -7, 7], NP_DTYPE[dtype]), np.zeros(4, NP_DTYPE[dtype])
  for got in (Tensor(a) // Tensor(b), Tensor(a).idiv(Tensor(b)), Tensor(a) // -1):
    check(got, quotient, dtype)
  check(Tensor(a) % Tensor(b), zero, dtype)


def test_float_floordiv_mod_exact_quotient_like_torch():
  a = np.array([1.0, -1.0, 0.3, 5.0, -5.0, 1e30, 7.0], np.float32).reshape(-1, 1)
  b = np.array([0.1, -0.1, 0.1, 3.0, np.inf, -np.inf, 1e-30], np.float32).reshape(1, -1)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  check(Tensor(a) // Tensor(b), ta // tb, D.float32)
  check(Tensor(a) % Tensor(b), ta % tb, D.float32)


INPLACE = {"iadd": operator.iadd, "isub": operator.isub, "imul": operator.imul, "itruediv": operator.itruediv,
           "ifloordiv": operator.ifloordiv, "imod": operator.imod, "ipow": operator.ipow, "iand": operator.iand,
           "ior": operator.ior, "ixor": operator.ixor, "ilshift": operator.ilshift, "irshift": operator.irshift}


@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_operators(name):
  is_float = name in ("itruediv", "ipow")
  dt = np.float32 if is_float else np.int32
  v = np.array([[3, 6, 9], [1, 4, 7]], dt)
  other = np.array([2, 1, 3], dt)  # broadcast along dim 0
  t, tt = Tensor(v), torch.from_numpy(v.copy())
  keep = t
  INPLACE[name](t, Tensor(other))
  INPLACE[name](tt, torch.from_numpy(other))
  assert t is keep
  check(t, tt, D.float32 if is_float else D.int32, ulp=2 if name == "ipow" else 0)  # pow: see test_elementwise


def test_inplace_matmul_and_cast_down():
  a = np.eye(3, dtype=np.float32) * 2
  t = Tensor(a)
  t @= Tensor(a)
  check(t, torch.from_numpy(a) @ torch.from_numpy(a), D.float32)
  h = Tensor(np.array([1.0, 2.0], np.float16))
  h += Tensor(np.array([0.5, 0.25], np.float32))  # float32 result stored back as float16, as torch
  check(h, torch.tensor([1.5, 2.25], dtype=torch.float16), D.float16)


# ---- shifts with tensor amounts and promotion
@pytest.mark.parametrize("da, db", [(D.int8, D.int8), (D.uint16, D.uint16), (D.int8, D.int32), (D.int64, D.int16)],
                         ids=lambda d: d.name)
def test_shift_by_tensor(da, db):
  """A tensor shift amount promotes like any binary op (torch does the same); numpy shifts wrap like refgrad."""
  a = np.array([1, -1, 5, -128, 64]).astype(NP_DTYPE[da]).reshape(-1, 1)
  b = np.array([0, 1, 3, 6]).astype(NP_DTYPE[db]).reshape(1, -1)
  out = least_upper_dtype(da, db)
  wa, wb = a.astype(NP_DTYPE[out]), b.astype(NP_DTYPE[out])
  check(Tensor(a) << Tensor(b), np.left_shift(wa, wb), out)
  check(Tensor(a) >> Tensor(b), np.right_shift(wa, wb), out)
  if da == db and da != D.uint16:
    check(Tensor(a) << Tensor(b), torch.from_numpy(a) << torch.from_numpy(b), out)


def test_reverse_shift():
  v = np.array([0, 1, 3], np.int32)
  check(1 << Tensor(v), 1 << torch.from_numpy(v), D.int32)
  check(64 >> Tensor(v), 64 >> torch.from_numpy(v), D.int32)


# ---- casts
@pytest.mark.parametrize("method, dtype", [("float", D.float32), ("half", D.float16), ("int", D.int32),
                                           ("bool", D.bool)])
def test_cast_shortcuts(method, dtype):
  v = np.array([[1.7, -2.2], [0.0, 3.0]], np.float64)
  t, tt = Tensor(v).T, torch.from_numpy(v).T  # non-contiguous
  check(getattr(t, method)(), getattr(tt, method)(), dtype)


# ---- dtypes helpers
def test_dtype_helpers():
  assert dtypes.finfo(D.float16) == (5, 10) and dtypes.finfo(D.bfloat16) == (8, 7)
  assert dtypes.finfo(D.float64) == (11, 52)
  with pytest.raises(TypeError, match="int32"):
    dtypes.finfo(D.int32)
  assert dtypes.as_const(300, D.int8) == 44 and dtypes.as_const(2.7, D.float16) == 2.7 and dtypes.as_const(3, D.bool)
  assert set(dtypes.ints) == {d for d in dtypes.fields().values() if d.kind in "iu"}
  assert dtypes.floats == (D.float16, D.bfloat16, D.float32, D.float64)
  assert (dtypes.half, dtypes.double, dtypes.long, dtypes.uchar) == (D.float16, D.float64, D.int64, D.uint8)
  assert (dtypes.min(D.int8), dtypes.max(D.uint16), dtypes.min(D.float32)) == (-128, 65535, float("-inf"))
  assert least_upper_dtype(D.int8, D.uint8) == D.int16 and least_upper_dtype(D.uint64, D.int64) == D.float16
