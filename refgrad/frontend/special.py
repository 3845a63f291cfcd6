"""Special functions built from the primitives: expm1, log1p, atan and erf kernels, and their coefficient tables.

The polynomial coefficients are Chebyshev-economized (minimax-like) fits computed with mpmath at 40 digits
(`mpmath.chebyfit`), one table for float32 (also used by float16/bfloat16, which compute in float32) and one for
float64. Each table's fit error is far below half an ULP of its dtype, so what remains is rounding in the
evaluation, which the tests bound.
"""
from __future__ import annotations

import math
from typing import Any

from refgrad.dtype import dtypes
from refgrad.gradient import custom_gradient
from refgrad.uop import UOp

# atan(u) = u + u**3 * P(u**2) on |u| <= tan(pi/8); fit error 5e-10 (float32), 3e-17 (float64) relative to atan
ATAN_POLY = {
  dtypes.float32: (0.050481385120797445, -0.08624676145249494, 0.11071365021884794, -0.14284151193628614,
                   0.19999977258688387, -0.333333332792548),
  dtypes.float64: (-0.01917688711906226, 0.03923165829558719, -0.0508544973794026, 0.0585814891280221,
                   -0.06664511447381948, 0.07692183190826087, -0.09090904578123903, 0.11111111015256361,
                   -0.14285714284666542, 0.1999999999999552, -0.3333333333333333),
}
# erf(x) = x * P(x**2) on |x| < 1; relative fit error 1e-9 (float32), 1e-19 (float64)
ERF_POLY = {
  dtypes.float32: (7.875875062685488e-05, -0.000801686428716587, 0.005189087423433974, -0.026854212010626412,
                   0.11283594715160218, -0.37612626666720334, 1.1283791658483509),
  dtypes.float64: (5.957176147748911e-11, -1.1372848856791674e-09, 1.4659775274047436e-08, -1.6350312701054695e-07,
                   1.6461000484121368e-06, -1.4925595266831182e-05, 0.0001205533111164271, -0.000854832698083379,
                   0.0052239776248180145, -0.026866170645076792, 0.11283791670954879, -0.3761263890318375,
                   1.1283791670955126),
}
# erf(x) = 1 - exp(-x**2) * Q(x - mid) piecewise for 1 <= x < end (rows: end, mid, Q); erf is 1.0 beyond the last
# end in that dtype. Absolute error of erf from the fit: < 3e-10 (float32), < 5e-18 (float64).
ERFC_PIECES = {
  dtypes.float32: (
    (2.25, 1.625, (-5.390577213252583e-05, 0.00017122096134075183, -0.00047303999687200435, 0.0013883805080267624,
                   -0.003926424427774664, 0.010562248002170484, -0.026977899024918938, 0.0649620374189709,
                   -0.1460302367507094, 0.30226120965559644)),
    (4.0, 3.125, (7.281705959765708e-05, -0.0002911295808442627, 0.001036528513304955, -0.003906395228761428,
                  0.014313415058447696, -0.050602838941041756, 0.1724443521021736)),
  ),
  dtypes.float64: (
    (2.0, 1.5, (-4.932844202000261e-08, 1.8038197652346406e-07, -5.946998373950516e-07, 2.061689065129881e-06,
                -6.975285854904505e-06, 2.286543658874603e-05, -7.265888759557882e-05, 0.00022330981211640024,
                -0.0006619300686179933, 0.0018861348854630824, -0.005145957547915988, 0.013377340952802835,
                -0.03293090529956347, 0.07615103985548055, -0.16362291773256007, 0.3215854164543175)),
    (3.25, 2.625, (2.6751662613927904e-09, -1.1606175119399214e-08, 4.5473579725414893e-08, -1.8899321155400235e-07,
                   7.710105968677079e-07, -3.0662460781270224e-06, 1.1903368559778321e-05, -4.504374726393774e-05,
                   0.00016585339798383744, -0.0005930183723456537, 0.002054233414663634, -0.0068749086392535675,
                   0.022155102007593585, -0.06846950572892405, 0.201887554546017)),
    (6.0, 4.625, (-1.4753011917062674e-12, 8.825219730906356e-12, -4.103768250052303e-11, 2.383527698387152e-10,
                  -1.401480754025808e-09, 7.946712783377646e-09, -4.441146464267734e-08, 2.4509037869244533e-07,
                  -1.3334377499205751e-06, 7.147543774423848e-06, -3.772440196103744e-05, 0.0001959179786437399,
                  -0.0010004316607322968, 0.005018832390017592, -0.024712747294529092, 0.11931528862713212)),
  ),
}
TAN_PI_8 = math.tan(math.pi / 8)
LN_2 = math.log(2)
HALF_PI = (1.5707963267948966, 6.123233995736766e-17)  # float64 pairs: pi/2 and pi/4 to 106 bits
QUARTER_PI = (0.7853981633974483, 3.061616997868383e-17)


def table(tables: dict, x: Any) -> Any:
  """The float32 or float64 entry for x's dtype."""
  return tables[dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32]


def horner(z: Any, coeffs: tuple[float, ...]) -> Any:
  """coeffs[0] * z**(n-1) + ... + coeffs[-1], evaluated in z's dtype."""
  out = z * coeffs[0] + coeffs[1]
  for c in coeffs[2:]:
    out = out * z + c
  return out


def split_constant(value: tuple[float, float], x: Any) -> tuple[float, float]:
  """A constant given as a float64 pair (hi, lo) as a pair whose hi is rounded to x's dtype: adding hi and lo
  separately keeps the constant's full precision in the sum."""
  hi = UOp.const(x.dtype, value[0]).arg  # rounded to the dtype by alu.py
  return hi, (value[0] - hi) + value[1]


def with_sign_of(x: Any, magnitude: Any) -> Any:
  """An odd function's value at x from its value at |x|; zeros pass through with their sign."""
  return x.eq(0).where(x, x.lt(0).where(-magnitude, magnitude))


def expm1(x: Any) -> Any:
  """exp(x) - 1 without cancellation near 0: Kahan's trick for |x| < ln 2 (the error of u = exp(x) cancels in
  (u-1)/log(u)); beyond, u - 1 cancels little, and the correction x/log(u) would only add log's error."""
  u = x.exp()
  um1 = u - 1.0
  near_zero = u.eq(1.0).where(x, um1 * (x / u.log()))
  return custom_gradient(x.abs().lt(LN_2).where(near_zero, um1), ("expm1",), x)


def log1p(x: Any) -> Any:
  """log(1 + x) without cancellation near 0 (Kahan's trick: 1 + x is rounded, x / (u - 1) corrects for it)."""
  u = x + 1.0
  out = u.log() * (x / (u - 1.0))
  return custom_gradient(u.eq(1.0).where(x, u.eq(math.inf).where(u, out)), ("log1p",), x)


def atan_of_magnitude(a: Any) -> Any:
  """atan(a) for a >= 0 (inf and NaN too): a > 1 uses pi/2 - atan(1/a), a > tan(pi/8) uses pi/4 + atan((a-1)/(a+1)),
  leaving |u| <= tan(pi/8) for the polynomial."""
  big = a.gt(1.0)
  t = big.where(a.reciprocal(), a)
  mid = t.gt(TAN_PI_8)
  u = mid.where((t - 1.0) / (t + 1.0), t)
  z = u * u
  p = u + u * z * horner(z, table(ATAN_POLY, a))
  quarter_hi, quarter_lo = split_constant(QUARTER_PI, a)
  r = mid.where((p + quarter_lo) + quarter_hi, p)
  half_hi, half_lo = split_constant(HALF_PI, a)
  return big.where((half_lo - r) + half_hi, r)


def erf_of_magnitude(a: Any) -> Any:
  """erf(a) for a >= 0: a polynomial below 1, 1 - exp(-a**2) * Q piecewise above, 1.0 past the last piece.
  Thresholds are tested from the top with >=, so NaN falls through to the polynomial and stays NaN."""
  out = a * horner(a * a, table(ERF_POLY, a))
  pieces = table(ERFC_PIECES, a)
  start = 1.0
  tail = (-(a * a)).exp()
  for end, mid, coeffs in pieces:
    out = a.ge(start).where(1.0 - tail * horner(a - mid, coeffs), out)
    start = end
  return a.ge(start).where(1.0, out)
