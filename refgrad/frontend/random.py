"""Random numbers that are the same on every device: Threefry-2x32 (20 rounds, Salmon et al. 2011, "Parallel random
numbers: as easy as 1, 2, 3") written with ordinary uint32 ops (add, xor, rotate as two shifts and an or), so every
backend, the interpreter included, computes identical bits.

Element i of a request gets the counter (offset + i) as two 32-bit words and the key (seed low, seed high); the
offset then advances by the number of elements, so successive calls draw fresh counters. `manual_seed` sets the
key and resets the offset to 0.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from refgrad.alu import exec_cast
from refgrad.dtype import DType, dtypes, to_dtype
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.reduce import triangle_mask
from refgrad.frontend.shapes import check_shape, is_int, shape_args
from refgrad.registry import Device
from refgrad.symbolic_shapes import is_symbolic_shape, max_shape
from refgrad.uop import prod

MASK32 = 0xFFFFFFFF
THREEFRY_PARITY = 0x1BD11BDA
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# uniform floats: the unsigned type of the same width, its mantissa bits, and the bits of 1.0
UNIFORM_BITS: dict[DType, tuple[DType, int, int]] = {
  dtypes.float16: (dtypes.uint16, 10, 0x3C00), dtypes.bfloat16: (dtypes.uint16, 7, 0x3F80),
  dtypes.float32: (dtypes.uint32, 23, 0x3F800000), dtypes.float64: (dtypes.uint64, 52, 0x3FF0000000000000),
}


@dataclass
class RandomState:
  seed: int
  counter: int = 0


STATE = RandomState(int(time.time()))
# While a TinyJit captures a call (refgrad/jit.py): each draw's parameter tensor and its count, so that a replay draws
# the next counters of the stream instead of repeating the captured call's numbers
DRAWS: list[tuple[Any, int]] | None = None


def _rotl(x: Any, r: int) -> Any:
  return (x << r) | (x >> (32 - r))


def threefry2x32(key: tuple[Any, Any], x0: Any, x1: Any) -> tuple[Any, Any]:
  """Threefry-2x32-20 of the uint32 counter words (x0, x1) under a key of two 32-bit words (ints or uint32 tensors)."""
  ks = (key[0], key[1], key[0] ^ key[1] ^ THREEFRY_PARITY)
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for group in range(5):  # 5 groups of 4 rounds, a key injection after each
    for r in THREEFRY_ROTATIONS[group % 2]:
      x0 = x0 + x1
      x1 = _rotl(x1, r) ^ x0
    x0 = x0 + ks[(group + 1) % 3]
    x1 = x1 + ks[(group + 2) % 3] + (group + 1)
  return x0, x1


def draw_parameters(n: int) -> np.ndarray:
  """The key and the counter offset of the next n counters of the stream, as 4 uint32 words; the stream advances."""
  offset = STATE.counter
  STATE.counter += n
  return np.array([STATE.seed & MASK32, (STATE.seed >> 32) & MASK32, offset & MASK32, (offset >> 32) & MASK32],
                  np.uint32)


def random_words(cls: type, n: int, device: str) -> tuple[Any, Any]:
  """Two uint32 tensors of n random words each, from the next n counters of the stream. The key and the counter
  offset are read from a small buffer rather than baked in as constants, so every call of one size runs the same
  kernel (no recompiling per call or per seed). `cls` is the Tensor class."""
  params = cls(draw_parameters(n), device=device)
  if DRAWS is not None:
    DRAWS.append((params, n))
  key_low, key_high, offset_low, offset_high = (params[i] for i in range(4))
  low = cls.arange(n, dtype=dtypes.uint32, device=device) + offset_low
  high = low.lt(offset_low).cast(dtypes.uint32) + offset_high  # carry when the low word wrapped around
  return threefry2x32((key_low, key_high), low, high)


def _uniform(cls: type, n: int, dtype: DType, device: str) -> Any:
  """n floats in [0, 1): random mantissa bits under the exponent of 1.0, minus 1 (exact)."""
  uint, mantissa, one = UNIFORM_BITS[dtype]
  x0, x1 = random_words(cls, n, device)
  if dtype == dtypes.float64:
    bits = ((x0.cast(uint) << 32) | x1.cast(uint)) >> (64 - mantissa)
  else:
    bits = (x0 >> (32 - mantissa)).cast(uint)
  return (bits | one).bitcast(dtype) - 1.0


def _normal(cls: type, n: int, dtype: DType, device: str) -> Any:
  """Box-Muller on the two words of each counter: u1 in (0, 1], u2 in [0, 1), computed in float32 (float64 for
  float64) and rounded once to dtype."""
  x0, x1 = random_words(cls, n, device)
  if dtype == dtypes.float64:
    u1, u2 = (x0.cast(dtype) + 1.0) * 2.0 ** -32, x1.cast(dtype) * 2.0 ** -32
  else:
    u1 = ((x0 >> 8) + 1).cast(dtypes.float32) * 2.0 ** -24
    u2 = (x1 >> 8).cast(dtypes.float32) * 2.0 ** -24
  return ((u1.log() * -2.0).sqrt() * (u2 * (2 * math.pi)).cos()).cast(dtype)


def _shape(shape: tuple) -> tuple[int, ...]:
  checked = check_shape(shape_args(shape), "random")
  if is_symbolic_shape(checked):  # the stream would advance by a count known only when the kernels run
    raise ValueError(f"random numbers of a symbolic shape {checked} are not supported (as in tinygrad); draw them "
                     f"for the largest shape {max_shape(checked)} and shrink")
  return checked


def _leaf(cls: type, drawn: Any, requires_grad: bool | None) -> Any:
  """The drawn values as a tensor of their own that requires grad if asked, as tinygrad's requires_grad_ on its
  result: asked of the first draw, the gradient went to that temporary (w = Tensor.normal(3, requires_grad=True)
  never got a .grad)."""
  return drawn if requires_grad is None else cls(drawn.detach(), requires_grad=requires_grad)


def _fan(n: int) -> int:
  """An initializer's fan, 1 when it is 0: then the tensor has no element to scale (torch returns it, as here; the
  division raised ZeroDivisionError)."""
  return n or 1


def _float_dtype(dtype: Any) -> DType:
  dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
  if not dtypes.is_float(dt):
    raise TypeError(f"random floats need a float dtype, got {dt.name}")
  return dt


def _finish(cls: type, flat: Any, shape: tuple[int, ...], kwargs: dict) -> Any:
  return cls(flat.reshape(shape).uop, **kwargs)


def _below_high(drawn: Any, low: float, high: float) -> Any:
  """drawn with the values that rounded up to high moved to the largest value of its dtype below high (low if none
  is above low): rand is below 1, but rand * (high - low) + low rounds to high when the spread is small next to
  high's ULP (1 in 32 of float16 uniform(100, 101) was 101; torch never gives high)."""
  top = exec_cast(np.array(float(high)), drawn.dtype)
  below = max(float(np.nextafter(top, top.dtype.type(-np.inf))), float(exec_cast(np.array(float(low)), drawn.dtype)))
  return drawn.lt(float(top)).where(drawn, below)


class RandomArgumentError(RuntimeError, ValueError):
  """Bounds no draw can meet (randint's low >= high, or a range its dtype does not hold): torch's RuntimeError, and
  the ValueError refgrad raised before."""


class FanError(ValueError, IndexError):
  """An initializer's fan of a 0-d shape: torch's ValueError, and the IndexError tinygrad's shape[0] raises."""


class MultinomialError(RuntimeError, ValueError, AssertionError):
  """Weights or a count multinomial cannot sample: torch's RuntimeError (ValueError for the count), and the
  AssertionError tinygrad raises."""


class RandomMixin(TensorBase):
  __slots__ = ()

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Set the seed and restart the stream: the same calls then give the same numbers, on every device.

    >>> Tensor.manual_seed(42); a = Tensor.rand(3).tolist()
    >>> Tensor.manual_seed(42); a == Tensor.rand(3).tolist()
    True
    """
    if not is_int(seed):
      raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
    STATE.seed, STATE.counter = int(seed) & ((1 << 64) - 1), 0

  @classmethod
  def rand(cls, *shape: Any, device: str | None = None, dtype: Any = None, contiguous: bool = True,
           **kwargs: Any) -> Self:
    """Uniform in [0, 1). `contiguous` is tinygrad's scheduling hint; the numbers are the same either way.

    >>> Tensor.manual_seed(0); t = Tensor.rand(2, 3); t.shape, bool((t >= 0).all().item() and (t < 1).all().item())
    ((2, 3), True)
    """
    shape_ = _shape(shape)
    return _finish(cls, _uniform(cls, prod(shape_), _float_dtype(dtype), Device.canonicalize(device)), shape_, kwargs)

  @classmethod
  def randn(cls, *shape: Any, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Self:
    """Standard normal (Box-Muller).

    >>> Tensor.manual_seed(0); Tensor.randn(2, 2).shape
    (2, 2)
    """
    shape_, dt = _shape(shape), to_dtype(dtype) if dtype is not None else dtypes.default_float
    drawn = _normal(cls, prod(shape_), dt if dtypes.is_float(dt) else dtypes.default_float, Device.canonicalize(device))
    return _finish(cls, drawn.cast(dt), shape_, kwargs)  # another dtype casts the floats, as tinygrad does

  @classmethod
  def randint(cls, *shape: Any, low: int = 0, high: int = 10, device: str | None = None, dtype: Any = dtypes.int32,
              **kwargs: Any) -> Self:
    """Uniform integers in [low, high) (64 random bits reduced mod the range: bias below range / 2**64).

    >>> Tensor.manual_seed(0); v = Tensor.randint(100, low=3, high=5).tolist(); set(v) <= {3, 4}
    True
    """
    for name, v in (("low", low), ("high", high)):
      if not is_int(v):
        raise TypeError(f"randint: {name} must be an int, got {v!r}")
    low, high, dt = int(low), int(high), to_dtype(dtype)
    if not dtypes.is_int(dt):
      raise TypeError(f"randint: dtype must be an integer dtype, got {dt.name}")
    if high <= low:
      raise RandomArgumentError(f"randint: low must be less than high, got low={low} >= high={high}")
    if low < dtypes.min(dt) or high - 1 > dtypes.max(dt):  # the values would wrap into the dtype: out of [low, high)
      raise RandomArgumentError(f"randint: [{low}, {high}) is out of the range of {dt.name}, [{dtypes.min(dt)}, "
                                f"{dtypes.max(dt)}]")
    shape_ = _shape(shape)
    x0, x1 = random_words(cls, prod(shape_), Device.canonicalize(device))
    bits = (x0.cast(dtypes.uint64) << 32) | x1.cast(dtypes.uint64)
    spread = bits if high - low == 1 << 64 else bits % (high - low)  # the whole 64-bit range: every bit pattern
    value = spread.cast(dtypes.int64) + low
    return _finish(cls, value.cast(dt), shape_, kwargs)

  @classmethod
  def randperm(cls, n: int, *, device: str | None = None, dtype: Any = dtypes.int32, **kwargs: Any) -> Self:
    """A random permutation of 0 .. n-1: the order that sorts n random 64-bit keys (a sort compares every pair, so n
    is expected to be modest).

    >>> Tensor.manual_seed(0); sorted(Tensor.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
      raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    dt = to_dtype(dtype)
    if not dtypes.is_int(dt):
      raise TypeError(f"randperm: dtype must be an integer dtype, got {dt.name}")
    x0, x1 = random_words(cls, n, Device.canonicalize(device))
    keys = (x0.cast(dtypes.uint64) << 32) | x1.cast(dtypes.uint64)
    return _finish(cls, keys.sort()[1].cast(dt), (n,), kwargs)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Self:
    """Normal with the given mean and standard deviation.

    >>> Tensor.manual_seed(0); Tensor.normal(3, mean=5.0, std=0.0).tolist()
    [5.0, 5.0, 5.0]
    """
    requires_grad = kwargs.pop("requires_grad", None)
    return _leaf(cls, (cls.randn(*shape, **kwargs) * std) + mean, requires_grad)

  @classmethod
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Self:
    """Uniform in [low, high).

    >>> Tensor.manual_seed(0); t = Tensor.uniform(100, low=-2.0, high=-1.0); bool((t < -1).all().item())
    True
    """
    dtype, requires_grad = kwargs.pop("dtype", None), kwargs.pop("requires_grad", None)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dtypes.is_float(dt):
      drawn = cls.rand(*shape, dtype=dt, **kwargs) * (high - low) + low
      return _leaf(cls, _below_high(drawn, low, high) if low < high else drawn, requires_grad)
    # an integer dtype: the spread is cast, then low added (tinygrad)
    return _leaf(cls, (cls.rand(*shape, **kwargs) * (high - low)).cast(dt) + low, requires_grad)

  @classmethod
  def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel).

    >>> Tensor.manual_seed(0); bool((Tensor.scaled_uniform(4, 4).abs() <= 0.25).all().item())
    True
    """
    requires_grad = kwargs.pop("requires_grad", None)
    return _leaf(cls, cls.uniform(*shape, low=-1.0, high=1.0, **kwargs) * (_fan(prod(_shape(shape))) ** -0.5),
                 requires_grad)

  @classmethod
  def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
    """Uniform in +-sqrt(6 / (fan_out + fan_in)) with fan_out = shape[0], fan_in = prod(shape[1:]).

    >>> Tensor.manual_seed(0); bool((Tensor.glorot_uniform(3, 3).abs() <= 1.0).all().item())
    True
    """
    shape_ = _shape(shape)
    if not shape_:
      raise FanError("glorot_uniform: fan in and fan out cannot be computed for a 0-d shape ()")
    bound = math.sqrt(6 / _fan(shape_[0] + prod(shape_[1:])))
    requires_grad = kwargs.pop("requires_grad", None)
    return _leaf(cls, cls.uniform(*shape_, low=-1.0, high=1.0, **kwargs) * bound, requires_grad)

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
    """Uniform in +-sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)), fan_in = prod(shape[1:]).

    >>> Tensor.manual_seed(0); Tensor.kaiming_uniform(4, 2).shape
    (4, 2)
    """
    shape_ = _shape(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(_fan(prod(shape_[1:])))
    return cls.uniform(*shape_, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
    """Normal with std gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)), fan_in = prod(shape[1:]).

    >>> Tensor.manual_seed(0); Tensor.kaiming_normal(4, 2).shape
    (4, 2)
    """
    shape_ = _shape(shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(_fan(prod(shape_[1:])))
    return cls.normal(*shape_, mean=0.0, std=std, **kwargs)

  def rand_like(self, **kwargs: Any) -> Self:
    """rand with this tensor's shape, device and (float) dtype.

    >>> Tensor.manual_seed(0); Tensor.zeros(2, 3, dtype="float16").rand_like().dtype
    dtypes.float16
    """
    dtype = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
    return type(self).rand(*self.shape, device=kwargs.pop("device", self.device), dtype=dtype, **kwargs)

  def randn_like(self, **kwargs: Any) -> Self:
    """randn with this tensor's shape, device and (float) dtype.

    >>> Tensor.manual_seed(0); Tensor.zeros(5).randn_like().shape
    (5,)
    """
    dtype = kwargs.pop("dtype", self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float)
    return type(self).randn(*self.shape, device=kwargs.pop("device", self.device), dtype=dtype, **kwargs)

  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
    """Sample category indices (int32) from the weights in the last dim of a 1-d or 2-d tensor. With replacement:
    inverse-CDF sampling; without: the Gumbel-top-k trick.

    >>> Tensor.manual_seed(0); Tensor([0.0, 1.0, 0.0]).multinomial(4, replacement=True).tolist()
    [1, 1, 1, 1]
    """
    if self.ndim not in (1, 2):
      raise MultinomialError(f"multinomial: weights must be 1-d or 2-d, got shape {self.shape}")
    if not is_int(num_samples) or num_samples < 1:
      raise MultinomialError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    if self.shape[-1] == 0:
      raise MultinomialError(f"multinomial: weights of shape {self.shape} have no category to sample")
    if not replacement and num_samples > self.shape[-1]:
      raise MultinomialError(f"multinomial: cannot sample {num_samples} > {self.shape[-1]} categories without "
                             f"replacement")
    num_samples, weights = int(num_samples), self.reshape(-1, self.shape[-1]).cast(dtypes.float32)
    _check_weights(weights, self.shape)
    samples = (_with_replacement if replacement else _without_replacement)(weights, num_samples)
    return samples if self.ndim == 2 else samples.reshape(num_samples)


def _check_weights(weights: Any, shape: tuple[int, ...]) -> None:
  """torch's RuntimeError for rows no distribution has, read back from the device (as torch does): a negative,
  infinite or NaN weight, or a row summing to 0. Sampling them gave indices silently ([0, 0] drew category 1,
  [1, -1, 2] drew 1 and 2)."""
  finite = weights.isinf().logical_not() & weights.isnan().logical_not()
  flags = [weights.lt(0).any(), finite.logical_not().any(), weights.where(finite, 0).sum(1).le(0).any()]
  found = flags[0].stack(*flags[1:]).tolist()
  for bad, what in zip(found, ("encountering probability entry < 0", "encountering probability entry = infinity or "
                               "NaN", "sum of probabilities <= 0")):
    if bad:
      raise MultinomialError(f"multinomial: invalid multinomial distribution ({what}) in weights of shape "
                             f"{shape}")


def _with_replacement(weights: Any, k: int) -> Any:
  """Index of the first cumulative weight above u * total, for k uniforms u per row (compares along one dim)."""
  cdf = weights.cumsum(1)
  rows, n = weights.shape
  target = weights.rand(rows, k, 1, device=weights.device) * cdf[:, -1:].unsqueeze(1)
  return cdf.unsqueeze(1).le(target).sum(2).minimum(n - 1).cast(dtypes.int32)


def _without_replacement(weights: Any, k: int) -> Any:
  """Gumbel-top-k: the k largest of log(w) + Gumbel noise. Each key's rank is the number of keys ahead of it (ties
  go to the lower index), and sample r is the category of rank r: three kernels whatever k is. The keys are
  realized first: fused into the ranking, each of the n * n comparisons of a row would draw and log both its keys
  again (a kernel of thousands of nodes, seconds to compile)."""
  rows, n = weights.shape
  u = weights.rand(rows, n, device=weights.device)
  keys = (weights.log() - (-(1.0 - u).log()).log()).contiguous()  # 1 - u is in (0, 1]
  mine, other = keys.unsqueeze(2), keys.unsqueeze(1)  # [row, j, i]: key j against key i
  ahead = other.gt(mine) | (other.eq(mine) & triangle_mask(weights, n, n, -1, False))
  rank = ahead.sum(2).cast(dtypes.int32)  # (rows, n)
  slots = weights.arange(k, dtype=dtypes.int32, device=weights.device).reshape(1, k, 1)
  categories = weights.arange(n, dtype=dtypes.int32, device=weights.device).reshape(1, 1, n)
  return rank.unsqueeze(1).eq(slots).where(categories, 0).sum(2).cast(dtypes.int32)
