"""Layers. Each holds its parameters as Tensor attributes and computes its forward pass in `__call__`;
initialisation follows tinygrad (uniform in +-1/sqrt(fan_in) for weights and biases of linear layers)."""
from __future__ import annotations

import math
from typing import Any

from refgrad.dtype import compute_dtype
from refgrad.frontend.indexing import IndexDTypeError
from refgrad.frontend.nn_functional import conv_padding_pairs
from refgrad.frontend.shapes import ShapeError
from refgrad.tensor import Tensor


def _pair(x: int | tuple[int, ...], n: int) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n


def _bias(fan_in: int, size: int) -> Tensor:
  bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
  return Tensor.uniform(size, low=-bound, high=bound)


class Linear:
  """y = x @ W.T + b.
  >>> Linear(3, 2)(Tensor.ones(4, 3)).shape
  (4, 2)
  """

  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5))
    self.bias = _bias(in_features, out_features) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.linear(self.weight.transpose(), self.bias)


class Conv2d:
  """2-d (or n-d, by the kernel's length) convolution over (N, C, *spatial) inputs. padding may also be torch's
  'valid' or 'same' (stride 1 only); another string raises ValueError here, not at the first call.

  >>> Conv2d(1, 2, 3, padding="same")(Tensor.ones(1, 1, 5, 4)).shape
  (1, 2, 5, 4)
  """

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = _pair(kernel_size, 2)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    if isinstance(padding, str):
      n = len(self.kernel_size)
      conv_padding_pairs(padding, self.kernel_size, _pair(stride, n), _pair(dilation, n))
    self.weight = Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5))
    fan_in = in_channels // groups * math.prod(self.kernel_size)
    self.bias = _bias(fan_in, out_channels) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,  # noqa: N802
           padding: int | tuple[int, ...] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
  """A Conv2d with a 1-d kernel: it convolves (N, C, L) inputs."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
  """The transpose (gradient) of a Conv2d; weight shape (in, out // groups, *kernel)."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int = 1,
               padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.weight = Tensor.kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size, a=math.sqrt(5))
    self.output_padding = output_padding

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                              self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,  # noqa: N802
                    padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
                    bias: bool = True) -> ConvTranspose2d:
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation,
                         groups, bias)


class BatchNorm:
  """Batch normalisation over dim 1. In training mode (Tensor.training) it uses the batch's statistics and
  updates the running ones; otherwise it uses the running statistics."""

  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = Tensor.ones(sz) if affine else None
    self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
    self.num_batches_tracked = Tensor.zeros(1, dtype="int64", requires_grad=False)  # long, as tinygrad
    if track_running_stats:
      self.running_mean = Tensor.zeros(sz, requires_grad=False)
      self.running_var = Tensor.ones(sz, requires_grad=False)

  def __call__(self, x: Tensor) -> Tensor:
    axes = tuple(a for a in range(x.ndim) if a != 1)
    if Tensor.training or not self.track_running_stats:
      n = x.numel() // x.shape[1] if x.shape[1] else 0
      if n == 1:  # one value per channel: every output would be 0 (its bias), and the unbiased variance 0/0
        raise ValueError(f"BatchNorm: expected more than 1 value per channel when using batch statistics, got input "
                         f"of shape {x.shape}")
      mean, var = x.mean(axis=axes), x.var(axis=axes, correction=0)  # each in float32 for half x, rounded once
      if Tensor.training and self.track_running_stats:
        unbiased = var.detach() * (n / max(n - 1, 1))
        self.running_mean.replace((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
        self.running_var.replace((1 - self.momentum) * self.running_var + self.momentum * unbiased)
        self.num_batches_tracked.replace(self.num_batches_tracked + 1)
    else:
      mean, var = self.running_mean, self.running_var
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm2d = BatchNorm


class LayerNorm:
  """Normalise over the last len(normalized_shape) dims, then scale and shift."""

  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = _pair(normalized_shape, 1)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
      raise ShapeError(f"LayerNorm over {self.normalized_shape} cannot normalise an input of shape {x.shape}")
    out = x.layernorm(axis=self.axis, eps=self.eps)
    return out if self.weight is None else out * self.weight + self.bias


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channel dim of (N, C, H, W) inputs."""

  def __call__(self, x: Tensor) -> Tensor:
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def _channel_affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
  """Scale and shift along dim 1 (channels) of an (N, C, ...) tensor."""
  if weight is None:
    return x
  shape = (1, -1) + (1,) * (x.ndim - 2)
  return x * weight.reshape(shape) + bias.reshape(shape)


class GroupNorm:
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_groups < 1 or num_channels % num_groups:  # else the groups would straddle channels silently
      raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels) if affine else None
    self.bias = Tensor.zeros(num_channels) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    out = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    return _channel_affine(out, self.weight, self.bias)


class InstanceNorm:
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight = Tensor.ones(num_features) if affine else None
    self.bias = Tensor.zeros(num_features) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    out = x.reshape(x.shape[0], x.shape[1], -1).layernorm(eps=self.eps).reshape(x.shape)
    return _channel_affine(out, self.weight, self.bias)


class RMSNorm:
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight = Tensor.ones(dim) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    wide = x.cast(compute_dtype(x.dtype))  # half and bfloat16: x * x passes 65504 from |x| = 256
    out = (wide * ((wide * wide).mean(-1, keepdim=True) + self.eps).rsqrt()).cast(x.dtype)
    return out if self.weight is None else out * self.weight


class Embedding:
  """Rows of a (vocab_size, embed_size) table, picked by integer indices."""

  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    if idx.dtype.kind not in "iu":
      raise IndexDTypeError(f"Embedding needs integer indices, got {idx.dtype.name}")
    hits = idx.unsqueeze(-1).eq(Tensor.arange(self.vocab_sz, device=idx.device)).cast(self.weight.dtype)
    return hits @ self.weight


class LSTMCell:
  """One step of an LSTM: (x, (h, c)) -> (h', c')."""

  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1 / math.sqrt(hidden_size)
    self.hidden_size = hidden_size
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-bound, high=bound)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-bound, high=bound)
    self.bias_ih = Tensor.uniform(hidden_size * 4, low=-bound, high=bound) if bias else None
    self.bias_hh = Tensor.uniform(hidden_size * 4, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """x is (batch, input_size), or (input_size,) for one unbatched step (torch's); the state defaults to zeros
    on x's device."""
    if hc is None:
      zeros = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
      hc = (zeros, zeros)
    h, c = hc
    gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, -1)
    c_next = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_next.tanh(), c_next


__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm", "BatchNorm2d",
           "LayerNorm", "LayerNorm2d", "GroupNorm", "InstanceNorm", "RMSNorm", "Embedding", "LSTMCell"]


def __getattr__(name: str) -> Any:
  if name in ("optim", "state"):
    import importlib
    return importlib.import_module(f"refgrad.nn.{name}")
  raise AttributeError(name)
