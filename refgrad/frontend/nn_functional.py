"""nn functional methods of Tensor: linear and einsum, convolution and pooling, interpolation, normalization,
attention, activations, losses and dropout. Everything is a composition of other Tensor methods.

Convolutions and pools read sliding windows built by `_pool` from movement ops only (no copy), then reduce them.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad.dtype import DType, compute_dtype, dtypes, least_upper_dtype, least_upper_float, to_dtype
from refgrad.frontend import special
from refgrad.frontend.base import Self, TensorBase, half_in_float32
from refgrad.frontend.einsum import evaluate_einsum
from refgrad.frontend.movement import InvalidArgumentError
from refgrad.frontend.reduce import accumulation_dtype, triangle_mask
from refgrad.frontend.shapes import ShapeError, is_int, normalize_dim
from refgrad.frontend.templates import graph_template
from refgrad.gradient import custom_gradient
from refgrad.uop import prod

REDUCTIONS = ("mean", "sum", "none")
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946




def _tuple(value: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
  """An int repeated n times, or a sequence of n ints: TypeError for other values, InvalidArgumentError (a
  RuntimeError, as torch raises, and a ValueError, as tinygrad does) for a sequence of another length."""
  values = (value,) * n if isinstance(value, int) else tuple(value) if isinstance(value, Sequence) else None
  if values is None or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
    raise TypeError(f"{what} must be an int or a sequence of {n} ints, got {value!r}")
  if len(values) != n:
    raise InvalidArgumentError(f"{what} must be an int or a sequence of {n} ints, got {value!r}")
  return values


def _positive(values: tuple[int, ...], what: str) -> tuple[int, ...]:
  """values, each at least 1: a stride, dilation or kernel size of 0 raised ZeroDivisionError deep inside, or (a
  dilation, a transposed conv's stride) computed something silently. InvalidArgumentError, torch's RuntimeError."""
  if any(v < 1 for v in values):
    raise InvalidArgumentError(f"{what} must be positive, got {values}")
  return values


def _pad_pairs(padding: int | Sequence[int], n: int) -> list[tuple[int, int]]:
  """(before, after) per spatial dim from an int, one int per dim, or a flat torch-style list (last dim first)."""
  if isinstance(padding, int):
    return [(padding, padding)] * n
  padding = tuple(padding)
  if len(padding) == n:
    return [(p, p) for p in padding]
  if len(padding) == 2 * n:
    return [(padding[2 * i], padding[2 * i + 1]) for i in reversed(range(n))]
  raise InvalidArgumentError(f"padding must be an int, {n} ints or {2 * n} ints, got {padding!r}")


class ConvPaddingError(ValueError, RuntimeError):
  """A padding string a convolution does not take, or 'same' with a stride: torch's nn layers raise ValueError, its
  functional conv RuntimeError. An output_padding not below stride or dilation too (torch's RuntimeError)."""


class TargetDTypeError(RuntimeError, TypeError):
  """nll_loss with float or bool targets: torch's RuntimeError (they would be compared with the class numbers)."""


class LabelSmoothingError(ValueError, RuntimeError, AssertionError):
  """label_smoothing outside [0, 1]: torch's RuntimeError, tinygrad's AssertionError (a ValueError here before)."""


def conv_padding_pairs(padding: int | Sequence[int] | str, kernel: Sequence[int], stride: Sequence[int],
                       dilation: Sequence[int]) -> list[tuple[int, int]]:
  """(before, after) per spatial dim: from ints as _pad_pairs reads them, or from torch's strings. 'valid' pads
  nothing; 'same' pads dilation*(k-1) in all per dim, the odd one at the end as torch does, so that the output keeps
  the input's size, which only a stride of 1 can do."""
  if not isinstance(padding, str):
    return _pad_pairs(padding, len(kernel))
  if padding == "valid":
    return [(0, 0)] * len(kernel)
  if padding != "same":
    raise ConvPaddingError(f"invalid padding string {padding!r}, should be one of 'valid', 'same'")
  if any(s != 1 for s in stride):
    raise ConvPaddingError(f"padding='same' is not supported for strided convolutions (stride {tuple(stride)})")
  return [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation)]


def _spatial_pad(x: Any, pairs: list[tuple[int, int]], value: float = 0.0) -> Any:
  lead = ((0, 0),) * (x.ndim - len(pairs))
  return x.pad(lead + tuple(pairs), value=value)


def _window_count(size: int, kernel: int, stride: int, dilation: int) -> int:
  return (size - dilation * (kernel - 1) - 1) // stride + 1


def _one_hot_on(index: Any, classes: int, axis: int) -> Any:
  """bool, True where index equals the class; the class dim is inserted at `axis` (compares along it only)."""
  return _one_hot_against(index, index.arange(classes, device=index.device), axis)


def _one_hot_against(index: Any, classes: Any, axis: int) -> Any:
  """_one_hot_on with the classes given as a 1-d tensor of 0 .. C-1."""
  shape = [1] * (index.ndim + 1)
  shape[axis] = classes.shape[0]
  return index.unsqueeze(axis).eq(classes.reshape(shape))


def _take(x: Any, axis: int, index: np.ndarray) -> Any:
  """x indexed by the host ints `index` along axis: a one-hot select and a sum along that axis only (exact)."""
  n = x.shape[axis]
  moved = x.transpose(axis, -1).unsqueeze(-2)  # (..., 1, n)
  pick = type(x)(index.reshape(-1, 1) == np.arange(n).reshape(1, -1), device=x.device)  # (m, n)
  out = pick.where(moved, x._const(0)).sum(-1).cast(x.dtype)
  return out.transpose(axis, -1)


class NNFunctionalMixin(TensorBase):
  __slots__ = ()

  # ---- linear algebra
  @graph_template
  def linear(self, weight: Any, bias: Any = None, dtype: DType | str | None = None) -> Self:
    """self @ weight + bias, with weight of shape (in, out) as in tinygrad (a 1-d weight multiplies elementwise);
    a dtype casts all three to it first.

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
    [[3.5]]
    """
    if dtype is not None:
      dt = to_dtype(dtype)
      return self.cast(dt).linear(weight.cast(dt), None if bias is None else bias.cast(dt))
    out = self * weight if weight.ndim == 1 else self.dot(weight)
    return out if bias is None else out + bias

  @staticmethod
  def einsum(formula: str, *operands: Any, acc_dtype: DType | str | None = None,
             dtype: DType | str | None = None) -> Self:
    """Einstein summation, e.g. "ij,jk->ik", with "...", implicit output and repeated letters (diagonals).

    >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
    [3, 7]
    """
    xs = tuple(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else operands
    return evaluate_einsum(formula, xs, accumulation_dtype(acc_dtype, dtype))

  # ---- windows, convolution, pooling
  def _pool(self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> Self:
    """Sliding windows over the last len(kernel) dims: shape (..., *out, *kernel), a view made of movement ops."""
    n = len(kernel)
    lead, sizes = self.shape[:-n], self.shape[-n:]
    outs = [_window_count(i, k, s, d) for i, k, s, d in zip(sizes, kernel, stride, dilation)]
    if any(o <= 0 for o in outs):
      raise ShapeError(f"kernel {kernel} with dilation {dilation} is larger than the (padded) input {sizes}")
    if all(k <= s and d == 1 for k, s, d in zip(kernel, stride, dilation)):
      return self._pool_disjoint(kernel, stride, outs)
    # window element (o, k) is x[o*s + k*d]: repeat the input along a new dim, then read the copies with a row
    # length of i + d, so that row k starts k*d later; then keep every s-th column
    repeats = [-(-k * (i + d) // i) for k, i, d in zip(kernel, sizes, dilation)]
    x = self.reshape(*lead, *[v for i in sizes for v in (1, i)])
    x = x.expand(*lead, *[v for r, i in zip(repeats, sizes) for v in (r, i)])
    x = x.reshape(*lead, *[r * i for r, i in zip(repeats, sizes)])
    x = x.shrink(tuple((0, s) for s in lead) + tuple((0, k * (i + d)) for k, i, d in zip(kernel, sizes, dilation)))
    x = x.reshape(*lead, *[v for k, i, d in zip(kernel, sizes, dilation) for v in (k, i + d)])
    cols = tuple((0, 0) for _ in lead) + tuple(p for o, s, i, d in zip(outs, stride, sizes, dilation)
                                               for p in ((0, 0), (0, o * s - i - d)))
    x = x.pad(cols)  # to exactly o*s columns (a negative pad crops)
    x = x.reshape(*lead, *[v for k, o, s in zip(kernel, outs, stride) for v in (k, o, s)])
    x = x.shrink(tuple((0, s) for s in lead) + tuple(r for k, o in zip(kernel, outs) for r in ((0, k), (0, o), (0, 1))))
    x = x.reshape(*lead, *[v for k, o in zip(kernel, outs) for v in (k, o)])
    nl = len(lead)
    return x.permute(*range(nl), *[nl + 2 * j + 1 for j in range(n)], *[nl + 2 * j for j in range(n)])

  def _pool_disjoint(self, kernel: tuple[int, ...], stride: tuple[int, ...], outs: list[int]) -> Self:
    """Windows that do not overlap (k <= s, no dilation): split each dim into (out, stride), keep k of each."""
    n, lead = len(kernel), self.shape[:-len(kernel)]
    x = _spatial_pad(self, [(0, o * s - i) for o, s, i in zip(outs, stride, self.shape[-n:])])
    x = x.reshape(*lead, *[v for o, s in zip(outs, stride) for v in (o, s)])
    x = x.shrink(tuple((0, s) for s in lead) + tuple(r for o, k in zip(outs, kernel) for r in ((0, o), (0, k))))
    nl = len(lead)
    return x.permute(*range(nl), *[nl + 2 * j for j in range(n)], *[nl + 2 * j + 1 for j in range(n)])

  @graph_template
  def conv2d(self, weight: Any, bias: Any = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
             acc_dtype: DType | str | None = None, dtype: DType | str | None = None) -> Self:
    """Convolution (cross-correlation, as torch) of (N, C_in, *spatial) with weight (C_out, C_in/groups, *kernel);
    1, 2 or 3 spatial dims. padding: an int, one per dim, flat (before, after) pairs, last dim first, or torch's
    'valid' (none) or 'same' (the output keeps the input's size; stride 1 only).

    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    kernel = weight.shape[2:]
    n = len(kernel)
    _check_conv(self, weight, groups, bias)
    x, w = self._conv_operands(weight)
    stride_, dilation_ = _positive(_tuple(stride, n, "stride"), "stride"), _positive(_tuple(dilation, n, "dilation"),
                                                                                  "dilation")
    pairs = conv_padding_pairs(padding, kernel, stride_, dilation_)
    windows = _spatial_pad(x, pairs)._pool(kernel, stride_, dilation_)  # (N, C_in, *out, *k)
    batch, cin, outs = x.shape[0], weight.shape[1], windows.shape[2:2 + n]
    per_group = weight.shape[0] // groups
    windows = windows.reshape(batch, groups, 1, cin, *outs, *kernel)  # channels split into (groups, cin)
    windows = windows.permute(0, 1, 2, *range(4, 4 + n), 3, *range(4 + n, 4 + 2 * n))  # (N, g, 1, *out, cin, *k)
    w = w.reshape(1, groups, per_group, *[1] * n, cin, *kernel)
    reduce_axes = tuple(range(3 + n, 4 + 2 * n))
    acc, wide = accumulation_dtype(acc_dtype, dtype), compute_dtype(x.dtype)  # half products in float32, as dot's
    out = (windows.cast(wide) * w.cast(wide)).sum(reduce_axes, dtype=acc).cast(acc or x.dtype)
    out = out.reshape(batch, weight.shape[0], *outs)
    return out if bias is None else out + bias.reshape(1, -1, *[1] * n)

  def _conv_operands(self, weight: Any) -> tuple[Self, Self]:
    dt = least_upper_dtype(self.dtype, weight.dtype)
    return self.cast(dt), weight.cast(dt)

  def conv_transpose2d(self, weight: Any, bias: Any = None, groups: int = 1, stride: int | Sequence[int] = 1,
                       dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                       output_padding: int | Sequence[int] = 0) -> Self:
    """Transposed convolution with weight (C_in, C_out/groups, *kernel), as torch's conv_transpose: the input is
    spread out by stride, padded by dilation*(k-1) - padding (+ output_padding at the end), and convolved with the
    flipped kernel.

    >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    kernel = weight.shape[2:]
    n = len(kernel)
    stride_, dilation_ = _positive(_tuple(stride, n, "stride"), "stride"), _positive(_tuple(dilation, n, "dilation"),
                                                                                  "dilation")
    padding_, extra = _tuple(padding, n, "padding"), _tuple(output_padding, n, "output_padding")
    _check_conv_transpose(self, weight, groups, stride_, dilation_, extra)
    x = _spread(self, stride_)
    pads = [(d * (k - 1) - p, d * (k - 1) - p + e) for k, d, p, e in zip(kernel, dilation_, padding_, extra)]
    x = _spatial_pad(x, pads)
    w = weight.reshape(groups, weight.shape[0] // groups, weight.shape[1], *kernel).transpose(1, 2)
    w = w.reshape(weight.shape[1] * groups, weight.shape[0] // groups, *kernel).flip(*range(2, 2 + n))
    return x.conv2d(w, bias, groups, dilation=dilation_)

  @half_in_float32
  def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: Any = None, dilation: Any = 1,
                 padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Self:
    """Average over windows of the last len(kernel_size) dims (an int means 2 dims). Padding counts in the divisor
    when count_include_pad; the extra windows of ceil_mode never do.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d().tolist()
    [[[[2.5]]]]
    """
    plan = PoolPlan.make(self, kernel_size, stride, dilation, padding, ceil_mode)
    sums = plan.windows(self.cast(least_upper_float(self.dtype)), 0.0).sum(plan.axes)
    if not plan.ceil_extra_any() and (count_include_pad or not plan.padded()):
      return sums / prod(plan.kernel)
    ones = self.ones(*self.shape[-plan.n:], dtype=sums.dtype, device=self.device)
    counted = _spatial_pad(ones, plan.pads, 1.0 if count_include_pad else 0.0)
    divisor = _spatial_pad(counted, plan.ceil_extra)._pool(plan.kernel, plan.stride, plan.dilation).sum(plan.axes)
    return sums / divisor

  @graph_template
  def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: Any = None, dilation: Any = 1,
                 padding: Any = 0, ceil_mode: bool = False, return_indices: bool = False) -> Self | tuple[Self, Self]:
    """Maximum over windows of the last len(kernel_size) dims (an int means 2 dims); padding never wins. With
    return_indices, also where each maximum is, as an int32 index into the pooled dims flattened (torch's choice:
    the first of equal maxima, the last NaN).

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d().tolist()
    [[[[4.0]]]]
    """
    plan = PoolPlan.make(self, kernel_size, stride, dilation, padding, ceil_mode)
    windows = plan.windows(self, dtypes.min(self.dtype))
    best = windows.max(plan.axes)
    return (best, _argmax_of_windows(self, plan, windows, best)) if return_indices else best

  def max_unpool2d(self, indices: Any, kernel_size: int | Sequence[int] = (2, 2), stride: Any = None,
                   dilation: Any = 1, padding: Any = 0, output_size: Sequence[int] | None = None) -> Self:
    """The inverse of max_pool2d with return_indices: zeros of the pooled input's size, each value put back at its
    index. The size is output_size's last dims, else (n - 1) * stride - 2 * padding + dilation * (k - 1) + 1.

    >>> Tensor([[[[4.0]]]]).max_unpool2d(Tensor([[[[3]]]])).tolist()
    [[[[0.0, 0.0], [0.0, 4.0]]]]
    """
    n = len(_tuple(kernel_size, 2, "kernel_size") if isinstance(kernel_size, int) else tuple(kernel_size))
    if output_size is None:
      kernel = _tuple(kernel_size, n, "kernel_size")
      stride_ = kernel if stride is None or stride == () else _tuple(stride, n, "stride")
      dilation_ = _tuple(dilation, n, "dilation")
      pads = _pad_pairs(padding, n)
      sizes = tuple((m - 1) * s - b - a + d * (k - 1) + 1 for m, s, (b, a), d, k in
                    zip(self.shape[-n:], stride_, pads, dilation_, kernel))
    else:
      sizes = tuple(output_size)[-n:]
    if self.shape != indices.shape:
      raise ShapeError(f"max_unpool2d: indices of shape {indices.shape} do not match the values' {self.shape}")
    lead = self.shape[:-n]
    flat = self.zeros(*lead, prod(sizes), dtype=self.dtype, device=self.device)
    out = flat.scatter(-1, indices.reshape(*lead, -1), self.reshape(*lead, -1))
    return out.reshape(*lead, *sizes)

  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Self:
    """Resize the last len(size) dims: "linear" (n-linear), "nearest" or "nearest-exact", with torch's source
    coordinates (computed in float32 like torch for every dtype but float64). Integer tensors keep their dtype:
    "linear" then works like torch's uint8 kernel (fixed-point weights, each dim rounded half up, last dim first).

    >>> Tensor([[[1.0, 3.0]]]).interpolate((4,)).tolist()
    [[[1.0, 1.5, 2.5, 3.0]]]
    """
    size = tuple(size)
    if mode not in INTERPOLATE_INDEX:
      raise ValueError(f"interpolate: mode must be one of {tuple(INTERPOLATE_INDEX)}, got {mode!r}")
    if align_corners and mode != "linear":
      raise ValueError(f"align_corners can only be set with mode 'linear', got mode {mode!r}")
    if len(size) > self.ndim or not all(isinstance(s, int) and s > 0 for s in size):
      raise InvalidArgumentError(f"interpolate: size {size} must be positive ints, at most one per dim of shape "
                                 f"{self.shape}")
    x, passes = self, list(zip(range(self.ndim - len(size), self.ndim), size))
    integer = mode == "linear" and dtypes.is_int(self.dtype)  # torch's uint8 rule: last dim first, each pass rounded
    for axis, out in (reversed(passes) if integer else passes):
      x = (_interpolate_linear_int if integer else INTERPOLATE_INDEX[mode])(x, axis, out, align_corners)
    return x

  # ---- normalization
  @half_in_float32
  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
    """(x - mean) / sqrt(var + eps) over axis (biased variance, no affine parameters).

    >>> Tensor([[1.0, 3.0]]).layernorm(eps=0.0).tolist()
    [[-1.0, 1.0]]
    """
    y = self - self.mean(axis, keepdim=True)
    return y * ((y * y).mean(axis, keepdim=True) + eps).rsqrt()

  def batchnorm(self, weight: Any, bias: Any, mean: Any, invstd: Any, axis: int | Sequence[int] = 1) -> Self:
    """(x - mean) * weight * invstd + bias, the parameters laid along `axis` (weight and bias may be None).

    >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0, 1.0]), Tensor([2.0, 2.0])).tolist()
    [[0.0, 2.0]]
    """
    axes = tuple(normalize_dim(a, self.ndim) for a in ((axis,) if is_int(axis) else axis))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    params = [t for t in (weight, bias, mean, invstd) if t is not None]
    out_dtype = least_upper_float(least_upper_dtype(self.dtype, *(t.dtype for t in params)))
    x = self.cast(compute_dtype(out_dtype)) - mean.reshape(shape)  # half and bfloat16 round once, at the end
    if weight is not None:
      x = x * weight.reshape(shape)
    out = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return (out if bias is None else out + bias.reshape(shape)).cast(out_dtype)

  # ---- attention
  def scaled_dot_product_attention(self, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                   is_causal: bool = False) -> Self:
    """softmax(q @ k^T / sqrt(d) + mask) @ v; a bool attn_mask keeps the True positions, a float one is added.

    >>> q = Tensor.ones(1, 2, 4)
    >>> q.scaled_dot_product_attention(q, Tensor([[[1.0], [3.0]]])).tolist()
    [[[2.0], [2.0]]]
    """
    if is_causal and attn_mask is not None:
      raise RuntimeError("scaled_dot_product_attention: an explicit attn_mask must not be set when is_causal=True")
    if self.ndim < 2 or key.ndim < 2 or value.ndim < 2:
      raise ShapeError(f"attention needs at least 2-d query, key and value, got {self.shape}, {key.shape}, "
                         f"{value.shape}")
    # half and bfloat16 attention runs in float32 and rounds once, as torch's: softmax weights rounded to half lose
    # their sum's digits (70000 weights of half(1/70000) sum to 1.001)
    out_dtype = least_upper_float(least_upper_dtype(self.dtype, key.dtype, value.dtype))
    query, key, value = (t.cast(compute_dtype(out_dtype)) for t in (self, key, value))
    scores = query.matmul(key.transpose(-2, -1)) * (1.0 / math.sqrt(self.shape[-1]))
    if is_causal:
      attn_mask = triangle_mask(self, self.shape[-2], key.shape[-2], 0, False)
    if attn_mask is not None:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
    return scores.softmax(-1).dropout(dropout_p).matmul(value).cast(out_dtype)

  # ---- activations
  def softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
    """exp(x - max) / sum(exp(x - max)) along axis, optionally computed in dtype (half and bfloat16 in float32,
    rounded once: their sum of exponentials passes 65504 beyond 65504 elements).

    >>> Tensor([0.0, 0.0]).softmax().tolist()
    [0.5, 0.5]
    """
    return self.cast(to_dtype(dtype) if dtype else least_upper_float(self.dtype))._softmax(axis)

  @half_in_float32
  def _softmax(self, axis: int) -> Self:
    if self._empty_along(axis):
      return self
    e = (self - self.max(axis, keepdim=True)).exp()
    return custom_gradient(e / e.sum(axis, keepdim=True), ("softmax", axis), self)

  def log_softmax(self, axis: int = -1, dtype: DType | str | None = None) -> Self:
    """x - max - log(sum(exp(x - max))) along axis, optionally computed in dtype (half and bfloat16 in float32,
    rounded once).

    >>> Tensor([0.0, 0.0]).log_softmax().exp().tolist()
    [0.5, 0.5]
    """
    return self.cast(to_dtype(dtype) if dtype else least_upper_float(self.dtype))._log_softmax(axis)

  @half_in_float32
  def _log_softmax(self, axis: int) -> Self:
    if self._empty_along(axis):
      return self
    shifted = self - self.max(axis, keepdim=True)
    return custom_gradient(shifted - shifted.exp().sum(axis, keepdim=True).log(), ("log_softmax", axis), self)

  def _empty_along(self, axis: int) -> bool:
    return self.ndim > 0 and self.shape[normalize_dim(axis, self.ndim)] == 0

  def relu6(self) -> Self:
    """min(max(x, 0), 6).

    >>> Tensor([-1.0, 3.0, 9.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return custom_gradient(self.relu().minimum(6), ("hardtanh", 0.0, 6.0), self)

  def leakyrelu(self, neg_slope: float = 0.01) -> Self:
    """x for x >= 0, neg_slope * x below.

    >>> Tensor([-2.0, 3.0]).leakyrelu(0.5).tolist()
    [-1.0, 3.0]
    """
    return self.gt(0).where(self, self * neg_slope)  # the slope at 0 is neg_slope, as in torch

  def leaky_relu(self, neg_slope: float = 0.01) -> Self:
    """leakyrelu under its tinygrad 0.10.3 and torch name."""
    return self.leakyrelu(neg_slope)

  def elu(self, alpha: float = 1.0) -> Self:
    """x for x > 0, alpha * (exp(x) - 1) below (via expm1, accurate near 0).

    >>> Tensor([0.0, 2.0]).elu().tolist()
    [0.0, 2.0]
    """
    x = self._float()
    return custom_gradient(x.gt(0).where(x, special.expm1(x) * alpha), ("elu", alpha, 1.0), x)

  def celu(self, alpha: float = 1.0) -> Self:
    """x for x > 0, alpha * (exp(x / alpha) - 1) below.

    >>> Tensor([0.0, 2.0]).celu().tolist()
    [0.0, 2.0]
    """
    x = self._float()
    return custom_gradient(x.gt(0).where(x, special.expm1(x / alpha) * alpha), ("elu", alpha, 1 / alpha), x)

  def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Self:
    """gamma * elu(x, alpha), by default with the self-normalizing constants.

    >>> Tensor([0.0]).selu().tolist()
    [0.0]
    """
    return self.elu(alpha) * gamma

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
    """clamp(alpha * x + beta, 0, 1).

    >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 1.0]
    """
    z = self._float() * alpha + beta
    return custom_gradient(z.clamp(0, 1), ("hardtanh", 0.0, 1.0), z)

  def silu(self) -> Self:
    """x * sigmoid(x).

    >>> Tensor([0.0]).silu().tolist()
    [0.0]
    """
    return self * self.sigmoid()

  def swish(self) -> Self:
    """Alias of silu.

    >>> Tensor([0.0]).swish().tolist()
    [0.0]
    """
    return self.silu()

  @half_in_float32  # x * relu6(x + 3) in half is inf from 10923 on
  def hardswish(self) -> Self:
    """x * relu6(x + 3) / 6.

    >>> Tensor([-4.0, 0.0, 4.0]).hardswish().tolist()
    [-0.0, 0.0, 4.0]
    """
    x = self._float()
    return custom_gradient(x * (x + 3).relu6() / 6, ("hardswish",), x)

  @half_in_float32  # one rounding: bfloat16 gelu(-2) was 3% off through 1 + tanh(...) rounded to 8 bits
  def gelu(self, approximate: str = "tanh") -> Self:
    """GELU. tinygrad's default is the tanh approximation (torch's gelu(approximate="tanh")); approximate="none"
    gives the exact x * Phi(x) (torch's default).

    >>> Tensor([0.0]).gelu().tolist()
    [0.0]
    """
    x = self._float()
    if approximate == "none":
      return x * 0.5 * (1.0 + (x * (1 / math.sqrt(2))).erf())
    if approximate != "tanh":
      raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    return x * 0.5 * (1.0 + ((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)).tanh())

  @half_in_float32  # one rounding: a half sigmoid(-17) is a subnormal, 50% off before the product
  def quick_gelu(self) -> Self:
    """x * sigmoid(1.702 x).

    >>> Tensor([0.0]).quick_gelu().tolist()
    [0.0]
    """
    return self * (self._float() * 1.702).sigmoid()

  def mish(self) -> Self:
    """x * tanh(softplus(x)).

    >>> Tensor([0.0]).mish().tolist()
    [0.0]
    """
    return self * self.softplus().tanh()

  @half_in_float32  # exp(beta x) in half is inf from 11.1 on (softplus(12) was inf)
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Self:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (as torch).

    >>> Tensor([0.0, 30.0]).softplus().tolist()
    [0.6931471824645996, 30.0]
    """
    x = self._float()
    scaled = x * beta
    return custom_gradient(scaled.gt(threshold).where(x, special.log1p(scaled.exp()) / beta),
                           ("softplus", beta, threshold), x)

  @half_in_float32  # softplus(-x) runs in float32 too
  def logsigmoid(self) -> Self:
    """log(sigmoid(x)) = -softplus(-x), stable for large |x|.

    >>> Tensor([-100.0]).logsigmoid().tolist()
    [-100.0]
    """
    x = self._float()
    return custom_gradient(-(-x).softplus(), ("logsigmoid",), x)

  def softsign(self) -> Self:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 1.0]).softsign().tolist()
    [-0.75, 0.5]
    """
    x = self._float()
    return x / (1 + x.abs())

  def hardtanh(self, min_val: float = -1, max_val: float = 1) -> Self:
    """clamp(x, min_val, max_val).

    >>> Tensor([-3.0, 0.5, 2.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    return custom_gradient(self.clamp(min_val, max_val), ("hardtanh", min_val, max_val), self)

  # ---- losses
  def _do_reduction(self, reduction: str) -> Self:
    if reduction not in REDUCTIONS:
      raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return self.mean() if reduction == "mean" else self.sum() if reduction == "sum" else self

  def binary_crossentropy(self, Y: Any, reduction: str = "mean") -> Self:  # noqa: N803 -- tinygrad's name
    """-(Y log(p) + (1 - Y) log(1 - p)) for probabilities p = self; logs are clamped at -100, as torch.

    >>> round(Tensor([0.5]).binary_crossentropy(Tensor([1.0])).item(), 6)
    0.693147
    """
    _check_same_shape(self, Y, "binary_crossentropy")
    p = self._float()
    # torch's order of terms, so that its zeros are +0.0 where torch's are (p = 0 with Y = 0 was -0.0)
    loss = (Y - 1) * (1 - p).log().maximum(-100.0) - Y * p.log().maximum(-100.0)
    return custom_gradient(loss, ("binary_crossentropy",), p, Y.cast(p.dtype))._do_reduction(reduction)

  def binary_crossentropy_logits(self, Y: Any, reduction: str = "mean", pos_weight: Any = None) -> Self:  # noqa: N803
    """binary_crossentropy(sigmoid(self), Y) computed stably from logits; pos_weight scales the positive term.

    >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 6)
    0.693147
    """
    _check_same_shape(self, Y, "binary_crossentropy_logits")
    x = self._float()
    # -log(sigmoid(x)) = softplus(-x); its rule knows the derivative at x = 0, where |x| and relu(-x) have kinks
    log_sig_neg = custom_gradient(special.log1p((-x.abs()).exp()) + (-x).relu(), ("softplus", 1.0, math.inf), -x)
    weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * Y
    return ((1 - Y) * x + weight * log_sig_neg)._do_reduction(reduction)

  def sparse_categorical_crossentropy(self, Y: Any, ignore_index: int = -1, label_smoothing: float = 0.0,  # noqa: N803
                                      reduction: str = "mean") -> Self:
    """Cross entropy of logits (..., C) with integer labels Y (...); labels equal to ignore_index count for
    nothing (and not in the mean); label_smoothing mixes in the uniform distribution.

    >>> round(Tensor([[0.0, 0.0]]).sparse_categorical_crossentropy(Tensor([1])).item(), 6)
    0.693147
    """
    _check_has_classes(self, "sparse_categorical_crossentropy")
    if Y.shape != self.shape[:-1]:
      raise ShapeError(f"sparse_categorical_crossentropy: labels of shape {Y.shape} do not match logits of shape "
                         f"{self.shape} (expected {self.shape[:-1]})")
    _check_smoothing(label_smoothing)
    classes = Y.arange(self.shape[-1], device=Y.device)  # a buffer: made outside the template, which holds none
    return self._sparse_crossentropy(Y, classes, ignore_index, label_smoothing, reduction)

  @graph_template
  @half_in_float32
  def _sparse_crossentropy(self, Y: Any, classes: Any, ignore_index: int, label_smoothing: float,  # noqa: N803
                           reduction: str) -> Self:
    log_probs = self.log_softmax(-1)
    keep = Y.ne(ignore_index)
    picked = _one_hot_against(Y, classes, -1).where(log_probs, 0.0).sum(-1)
    loss = keep.where(-((1 - label_smoothing) * picked + label_smoothing * log_probs.mean(-1)), 0.0)  # torch's +0.0
    return _weighted_mean(loss, keep) if reduction == "mean" else loss._do_reduction(reduction)

  def cross_entropy(self, Y: Any, reduction: str = "mean", label_smoothing: float = 0.0) -> Self:  # noqa: N803
    """Cross entropy of logits (N, C, ...) with class indices (N, ...) or class probabilities (N, C, ...), as
    torch.nn.functional.cross_entropy.

    >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([0])).item(), 6)
    0.693147
    """
    _check_smoothing(label_smoothing)
    _check_has_classes(self, "cross_entropy")
    axis = 1 if self.ndim > 1 else 0
    target = Y
    if dtypes.is_int(target.dtype):
      if target.shape != self.shape[:axis] + self.shape[axis + 1:]:
        raise ShapeError(f"cross_entropy: class indices of shape {target.shape} do not match logits of shape "
                           f"{self.shape}")
      target = _one_hot_on(target, self.shape[axis], axis).cast(least_upper_float(self.dtype))
    elif target.shape != self.shape:
      raise ShapeError(f"cross_entropy: probabilities of shape {target.shape} do not match logits of shape "
                         f"{self.shape}")
    out_dtype = least_upper_float(least_upper_dtype(self.dtype, target.dtype))
    wide = compute_dtype(out_dtype)  # half and bfloat16 losses are computed in float32 and rounded once
    target = target.cast(wide) * (1 - label_smoothing) + label_smoothing / self.shape[axis]
    loss = -(self.cast(wide).log_softmax(axis) * target).sum(axis)
    return loss._do_reduction(reduction).cast(out_dtype)

  def nll_loss(self, Y: Any, weight: Any = None, ignore_index: int | None = None,  # noqa: N803
               reduction: str = "mean") -> Self:
    """Negative log likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...), weighted per class;
    the mean divides by the total weight of the counted targets, as torch.

    >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).item()
    2.0
    """
    _check_has_classes(self, "nll_loss")
    axis = 1 if self.ndim > 1 else 0
    if not dtypes.is_int(Y.dtype):
      raise TargetDTypeError(f"nll_loss: targets must be class indices of an integer dtype, got {Y.dtype.name}")
    if Y.shape != self.shape[:axis] + self.shape[axis + 1:]:
      raise ShapeError(f"nll_loss: targets of shape {Y.shape} do not match input of shape {self.shape}")
    hot = _one_hot_on(Y, self.shape[axis], axis)
    picked = hot.where(self, 0.0).sum(axis)
    if weight is None:
      w = picked.ones_like()
    else:
      w = hot.where(weight.reshape(-1, *[1] * (self.ndim - axis - 1)), 0.0).sum(axis)
    loss = -picked * w
    if ignore_index is not None:
      w = w * Y.ne(ignore_index)
      loss = Y.ne(ignore_index).where(loss, 0.0)  # +0.0, as torch's (-picked * 0 was -0.0)
    return _weighted_mean(loss, w) if reduction == "mean" else loss._do_reduction(reduction)

  # ---- training helpers
  def dropout(self, p: float = 0.5) -> Self:
    """In training mode (Tensor.training), zero each element with probability p and scale the rest by 1/(1-p).

    >>> Tensor([1.0, 2.0]).dropout(0.5).tolist()  # not training: unchanged
    [1.0, 2.0]
    """
    if not 0 <= p <= 1:
      raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not type(self).training or p == 0:
      return self
    if p == 1:  # zeros, still a function of self: its gradient is zeros, as torch's (it had none)
      return custom_gradient(self.zeros_like(), ("constant",), self)
    keep = type(self).rand(*self.shape, device=self.device).ge(p)
    return keep.where(self, 0) * (1 / (1 - p))

  def sequential(self, ll: Sequence[Callable[[Any], Any]]) -> Self:
    """Apply the callables in order.

    >>> Tensor([-1.0, 2.0]).sequential([Tensor.relu, lambda t: t * 2]).tolist()
    [0.0, 4.0]
    """
    return functools.reduce(lambda x, f: f(x), ll, self)


# ---- argument checks
def _weighted_mean(loss: Any, weight: Any) -> Any:
  """sum(loss) / sum(weight), both summed and divided in the accumulation dtype and rounded once to loss's dtype: a
  half-precision batch's total loss passes 65504 long before its mean does."""
  wide = compute_dtype(loss.dtype)
  return (loss.cast(wide).sum() / weight.cast(wide).sum()).cast(loss.dtype)


def _check_same_shape(x: Any, y: Any, what: str) -> None:
  if x.shape != y.shape:
    raise ShapeError(f"{what}: target shape {y.shape} must match input shape {x.shape}")


def _check_has_classes(x: Any, what: str) -> None:
  if x.ndim == 0:  # no class dim: it failed with 'tuple index out of range'
    raise ShapeError(f"{what}: the input needs a class dim, got a 0-d tensor")


def _check_smoothing(label_smoothing: float) -> None:
  if not 0.0 <= label_smoothing <= 1.0:
    raise LabelSmoothingError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")


def _check_conv(x: Any, weight: Any, groups: int, bias: Any) -> None:
  if weight.ndim < 3 or x.ndim != weight.ndim:
    raise ShapeError(f"conv: input of shape {x.shape} needs {weight.ndim} dims for a weight of shape "
                       f"{weight.shape} (N, C, *spatial)")
  if not isinstance(groups, int) or groups < 1 or weight.shape[0] % groups:
    raise ShapeError(f"conv: groups={groups} must divide the {weight.shape[0]} output channels of weight "
                       f"{weight.shape}")
  if x.shape[1] != weight.shape[1] * groups:
    raise ShapeError(f"conv: input of shape {x.shape} has {x.shape[1]} channels, but weight of shape "
                       f"{weight.shape} with groups={groups} expects {weight.shape[1] * groups}")
  if bias is not None and bias.shape != (weight.shape[0],):
    raise ShapeError(f"conv: bias of shape {bias.shape} must be ({weight.shape[0]},)")


def _check_conv_transpose(x: Any, weight: Any, groups: int, stride: tuple, dilation: tuple, extra: tuple) -> None:
  if weight.ndim < 3 or x.ndim != weight.ndim or x.shape[1] != weight.shape[0] or weight.shape[0] % groups:
    raise ShapeError(f"conv_transpose: input of shape {x.shape} does not fit weight of shape {weight.shape} "
                       f"(C_in, C_out/groups, *kernel) with groups={groups}")
  for e, s, d in zip(extra, stride, dilation):
    if e >= max(s, d):
      raise ConvPaddingError(f"output_padding {extra} must be smaller than either stride {stride} or dilation "
                             f"{dilation}")


def _spread(x: Any, stride: tuple[int, ...]) -> Any:
  """Insert stride-1 zeros between neighbours along each spatial dim (the input of a strided transpose conv)."""
  for axis, s in zip(range(x.ndim - len(stride), x.ndim), stride):
    if s > 1 and x.shape[axis] > 0:
      size = x.shape[axis]
      x = x.unsqueeze(axis + 1)
      x = x.pad(tuple((0, s - 1) if i == axis + 1 else (0, 0) for i in range(x.ndim)))
      x = x.reshape(*x.shape[:axis], size * s, *x.shape[axis + 2:])
      x = x.shrink(tuple((0, size * s - s + 1) if i == axis else None for i in range(x.ndim)))
  return x


def _argmax_of_windows(x: Any, plan: PoolPlan, windows: Any, best: Any) -> Any:
  """Where each window's maximum is in x's pooled dims flattened: the first of equal maxima in the window's order,
  which is the smallest position, or, where the maximum is NaN, the last NaN (torch's). Padding is never picked."""
  spatial = x.shape[-plan.n:]
  size = prod(spatial)
  position = x.arange(size, dtype=dtypes.int32, device=x.device).reshape(spatial)
  position = plan.windows(position, -1)  # padding: -1
  real = position.ge(0)
  expanded = tuple(1 for _ in plan.axes)
  top = best.reshape(*best.shape, *expanded)
  first = size - (real & windows.eq(top)).where(size - position, 0).max(plan.axes)
  if not dtypes.is_float(x.dtype):
    return first
  last_nan = (real & windows.isnan()).where(position, -1).max(plan.axes)
  return best.isnan().where(last_nan, first)


class PoolPlan:
  """Kernel, stride, dilation, padding and the extra right padding that ceil_mode needs, for the pools."""

  def __init__(self, kernel: tuple, stride: tuple, dilation: tuple, pads: list, ceil_extra: list):
    self.kernel, self.stride, self.dilation, self.pads, self.ceil_extra = kernel, stride, dilation, pads, ceil_extra
    self.n = len(kernel)
    self.axes = tuple(range(-self.n, 0))

  @staticmethod
  def make(x: Any, kernel_size: Any, stride: Any, dilation: Any, padding: Any, ceil_mode: bool) -> PoolPlan:
    kernel = _tuple(kernel_size, 2, "kernel_size") if isinstance(kernel_size, int) else tuple(kernel_size)
    n = len(_positive(kernel, "kernel_size"))
    if n > x.ndim:
      raise ShapeError(f"pool: kernel {kernel} has more dims than the input of shape {x.shape}")
    stride_ = kernel if stride is None or stride == () else _positive(_tuple(stride, n, "stride"), "stride")
    dilation_ = _positive(_tuple(dilation, n, "dilation"), "dilation")
    pads = _pad_pairs(padding, n)
    if isinstance(padding, int) or len(padding) == n:  # torch's rule, for its (symmetric) forms of padding
      halves = tuple((d * (k - 1) + 1) // 2 for k, d in zip(kernel, dilation_))
      if any(b > h for (b, _), h in zip(pads, halves)):  # else a window could lie in the padding alone: -inf, or 0/0
        raise InvalidArgumentError(f"pool: padding {padding} should be at most half of the effective kernel size, "
                                   f"{halves} (kernel {kernel}, dilation {dilation_})")
    extra = []
    for size, k, s, d, (b, a) in zip(x.shape[-n:], kernel, stride_, dilation_, pads):
      span = size + b + a - d * (k - 1) - 1
      outs = (-(-span // s) if ceil_mode else span // s) + 1
      if ceil_mode and (outs - 1) * s >= size + b:  # the last window must start inside the input or left padding
        outs -= 1
      extra.append((0, max(0, (outs - 1) * s + d * (k - 1) + 1 - (size + b + a))))
    return PoolPlan(kernel, stride_, dilation_, pads, extra)

  def padded(self) -> bool:
    return any(p != (0, 0) for p in self.pads)

  def ceil_extra_any(self) -> bool:
    return any(e != (0, 0) for e in self.ceil_extra)

  def windows(self, x: Any, fill: Any) -> Any:
    x = _spatial_pad(x, [(b, a + e[1]) for (b, a), e in zip(self.pads, self.ceil_extra)], fill)
    return x._pool(self.kernel, self.stride, self.dilation)


# ---- interpolate: source indices computed on the host like torch's CPU kernels, then an exact one-hot select
def _source_scale(n: int, m: int, align_corners: bool, ft: type) -> Any:
  if align_corners:
    return ft((n - 1) / (m - 1)) if m > 1 else ft(0)
  return ft(n) / ft(m)


def _interpolate_linear(x: Any, axis: int, m: int, align_corners: bool) -> Any:
  n = x.shape[axis]
  ft = np.float64 if x.dtype == dtypes.float64 else np.float32
  scale, i = _source_scale(n, m, align_corners, ft), np.arange(m).astype(ft)
  src = scale * i if align_corners else np.maximum(scale * (i + ft(0.5)) - ft(0.5), ft(0))
  low = np.minimum(src.astype(np.int64), n - 1)
  high = np.minimum(low + 1, n - 1)
  frac = np.clip(src - low.astype(ft), 0, 1).astype(ft)
  shape = [1] * x.ndim
  shape[axis] = m
  compute = compute_dtype(least_upper_float(x.dtype))
  w_high = type(x)(frac.reshape(shape), device=x.device).cast(compute)
  xf = x.cast(compute)
  out = _take(xf, axis, low) * (1 - w_high) + _take(xf, axis, high) * w_high
  return out.cast(least_upper_float(x.dtype))


def _fixed_point_weights(n: int, m: int, align_corners: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
  """torch's integer linear weights: low and high source indices, and their float64 weights as integers with
  `bits` fractional bits, the most that keep the largest weight below 2**15 (int16)."""
  i = np.arange(m, dtype=np.float64)
  if align_corners:
    src = i * ((n - 1) / (m - 1) if m > 1 else 0.0)
  else:
    src = np.maximum((i + 0.5) * (n / m) - 0.5, 0.0)
  low = np.minimum(src.astype(np.int64), n - 1)
  frac = np.clip(src - low, 0.0, 1.0)
  weights = np.stack([1.0 - frac, frac])
  bits = max(b for b in range(16) if int(0.5 + weights.max() * 2 ** b) < 2 ** 15)
  return low, np.minimum(low + 1, n - 1), np.floor(weights * 2 ** bits + 0.5).astype(np.int64), bits


def _interpolate_linear_int(x: Any, axis: int, m: int, align_corners: bool) -> Any:
  """One linear pass in integer arithmetic, rounded half up and clamped to x's dtype (torch's uint8 kernel)."""
  low, high, weights, bits = _fixed_point_weights(x.shape[axis], m, align_corners)
  shape = [1] * x.ndim
  shape[axis] = m
  w_low, w_high = (type(x)(w.reshape(shape), device=x.device) for w in weights)
  wide = x.cast(dtypes.int64)
  acc = _take(wide, axis, low) * w_low + _take(wide, axis, high) * w_high + (1 << (bits - 1))
  return (acc >> bits).clip(dtypes.min(x.dtype), dtypes.max(x.dtype)).cast(x.dtype)


def _nearest(offset: float) -> Callable[[Any, int, int, bool], Any]:
  def resize(x: Any, axis: int, m: int, align_corners: bool) -> Any:
    n = x.shape[axis]
    scale = np.float32(n) / np.float32(m)
    index = np.minimum(np.floor((np.arange(m).astype(np.float32) + np.float32(offset)) * scale).astype(np.int64),
                       n - 1)
    return _take(x, axis, index)
  return resize


INTERPOLATE_INDEX: dict[str, Callable[[Any, int, int, bool], Any]] = {
  "linear": _interpolate_linear, "nearest": _nearest(0.0), "nearest-exact": _nearest(0.5),
}
