"""Reductions and matmul. Only ADD, MUL and MAX reduce natively; min, mean, argmax ... build on them."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from refgrad.dtype import DType, compute_dtype, dtypes, least_upper_dtype, least_upper_float, to_dtype
from refgrad.frontend import special
from refgrad.frontend.base import Self, TensorBase, half_in_float32
from refgrad.frontend.shapes import ShapeError, is_int, normalize_dim
from refgrad.gradient import custom_gradient
from refgrad.symbolic_shapes import canonical, is_symbolic, size_const
from refgrad.uop import Ops, UOp, prod

# The dtype a sum accumulates in (tinygrad's rule): small ints widen, half and bfloat16 sum in their compute dtype
# (float32) and return their own dtype.
SUM_ACC_DTYPE: dict[DType, DType] = {
  dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
  dtypes.uint8: dtypes.uint32, dtypes.uint16: dtypes.uint32,
  **{dt: compute_dtype(dt) for dt in dtypes.floats if compute_dtype(dt) != dt},
}
RETURNS_INPUT_DTYPE = frozenset(dt for dt in dtypes.floats if compute_dtype(dt) != dt)


class EmptyReductionError(IndexError, RuntimeError):
  """argmax/argmin over no element: torch's IndexError (a RuntimeError here before)."""


def reduce_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if is_int(axis) else tuple(axis)
  normalized = tuple(normalize_dim(a, ndim) for a in axes)
  if len(set(normalized)) != len(normalized):
    raise RuntimeError(f"dim {axes} appears multiple times in the list of dims")
  return tuple(sorted(normalized))


def accumulation_dtype(acc_dtype: DType | str | None, dtype: DType | str | None) -> DType | None:
  """The dtype a reduction accumulates in and returns: `dtype` (tinygrad 0.10.3's and torch's name) or `acc_dtype`
  (tinygrad 0.10.2's); None when neither is given."""
  if acc_dtype is not None and dtype is not None:
    raise TypeError(f"give dtype or acc_dtype (its older name), not both: got dtype={dtype!r}, acc_dtype={acc_dtype!r}")
  chosen = dtype if dtype is not None else acc_dtype
  return None if chosen is None else to_dtype(chosen)


class ReduceMixin(TensorBase):
  __slots__ = ()

  def _reduce(self, op: Ops, axis: Any = None, keepdim: bool = False) -> Self:
    axes = reduce_axes(axis, self.ndim)
    if self.ndim == 0:  # a 0-d tensor reduces as its one element would: the sum of a lone -0.0 is +0.0
      return self.reshape(1)._reduce(op, 0)
    reduced = self._from(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
    if keepdim:
      return reduced
    return reduced.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _accumulate(self, op: Ops, axis: Any, keepdim: bool, acc_dtype: DType | str | None,
                  dtype: DType | str | None) -> Self:
    """sum and prod: dtype (or acc_dtype) is cast to first and is the result's dtype; by default small ints accumulate
    in 32 bits and half/bfloat16 in float32 (and return their own dtype)."""
    chosen = accumulation_dtype(acc_dtype, dtype)
    out = self.cast(chosen or SUM_ACC_DTYPE.get(self.dtype, self.dtype))._reduce(op, axis, keepdim)
    return out.cast(self.dtype) if chosen is None and self.dtype in RETURNS_INPUT_DTYPE else out

  def sum(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | str | None = None,
          dtype: DType | str | None = None) -> Self:
    return self._accumulate(Ops.ADD, axis, keepdim, acc_dtype, dtype)

  def prod(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | str | None = None,
           dtype: DType | str | None = None) -> Self:
    return self._accumulate(Ops.MUL, axis, keepdim, acc_dtype, dtype)

  def max(self, axis: Any = None, keepdim: bool = False) -> Self:
    """The largest value; over nothing, the smallest value of the dtype (-inf for floats), as in tinygrad (torch
    raises there).

    >>> Tensor([]).max().item()
    -inf
    """
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: Any = None, keepdim: bool = False) -> Self:
    """min is max of the order-reversed values: -x for floats, ~x for ints and bools (exact for all); over nothing,
    the largest value of the dtype (inf for floats)."""
    flipped = self.neg() if dtypes.is_float(self.dtype) else self.bitwise_not()
    out = flipped._reduce(Ops.MAX, axis, keepdim)
    return out.neg() if dtypes.is_float(self.dtype) else out.bitwise_not()

  def _check_nonempty(self, axis: Any, what: str) -> None:
    axes = reduce_axes(axis, self.ndim)
    if self.ndim and prod(self.shape[a] for a in axes) == 0:
      raise EmptyReductionError(f"{what}(): cannot reduce over a zero-size dimension of a tensor of shape "
                                f"{self.shape}")

  @half_in_float32
  def mean(self, axis: Any = None, keepdim: bool = False) -> Self:
    """The sum divided by the count, both in the accumulation dtype (float32 for half and bfloat16, which round once
    at the end, so [60000] * 4 in half has mean 60000, not inf); ints give float32; an empty mean is NaN.

    >>> Tensor([1, 2]).mean().item()
    1.5
    """
    count = self._reduced_count(axis)
    x = self.cast(least_upper_float(self.dtype))
    total = x.sum(axis, keepdim)
    if is_symbolic(count):
      return total.div(self._count_tensor(count, x.dtype))
    return total.div(count) if count else total * float("nan")

  def _count_tensor(self, count: Any, dtype: DType) -> Self:
    """A symbolic count as a 0-d tensor: a constant the kernel computes from the variables it is given."""
    return self._from(size_const(canonical(count), dtype, self.device))

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
    """Index of the first maximum (NaN counts as the maximum, as in torch); int32. Over no element, IndexError."""
    self._check_nonempty(axis, "argmax")
    if axis is None:  # index into the flattened tensor; keepdim keeps every dim as size 1, as torch does
      flat = self.flatten().argmax(0)
      return flat.reshape((1,) * self.ndim) if keepdim else flat
    ax = normalize_dim(axis, self.ndim)
    if self.ndim == 0:
      return self._const(0, dtypes.int32)
    n = self.shape[ax]
    best = self.max(ax, keepdim=True)
    hit = self.eq(best) | (self.isnan() & best.isnan()) if dtypes.is_float(self.dtype) else self.eq(best)
    if isinstance(n, int):
      countdown = self.arange(n, 0, -1, dtype=dtypes.int32, device=self.device)
    else:  # a symbolic arange counts up only
      countdown = n - self.arange(0, n, dtype=dtypes.int32, device=self.device)
    countdown = countdown.reshape((n,) + (1,) * (self.ndim - ax - 1))
    first = hit.where(countdown, 0).max(ax, keepdim=keepdim)
    return (n - first).cast(dtypes.int32)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
    self._check_nonempty(axis, "argmin")
    flipped = self.neg() if dtypes.is_float(self.dtype) else self.bitwise_not()
    return flipped.argmax(axis, keepdim)

  # ---- statistics
  @half_in_float32
  def var(self, axis: Any = None, keepdim: bool = False, correction: int | float = 1) -> Self:
    """Variance: the sum of squared deviations divided by max(0, N - correction) (ints give float32).

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().item()
    1.6666666269302368
    """
    x = self.cast(least_upper_float(self.dtype))
    squares = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    count = self._reduced_count(axis)
    if is_symbolic(count):
      return squares.div((self._count_tensor(count, x.dtype) - correction).maximum(0))
    return squares.div(max(0, count - correction))

  @half_in_float32
  def std(self, axis: Any = None, keepdim: bool = False, correction: int | float = 1) -> Self:
    """Standard deviation: var(...).sqrt().

    >>> Tensor([1.0, 3.0]).std().item()
    1.4142135381698608
    """
    var = self.var(axis, keepdim, correction)
    return custom_gradient(var.sqrt(), ("std",), var)

  @half_in_float32
  def var_mean(self, axis: Any = None, keepdim: bool = False, correction: int | float = 1) -> tuple[Self, Self]:
    """(var, mean) in one call.

    >>> [t.item() for t in Tensor([1.0, 3.0]).var_mean()]
    [2.0, 2.0]
    """
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  @half_in_float32
  def std_mean(self, axis: Any = None, keepdim: bool = False, correction: int | float = 1) -> tuple[Self, Self]:
    """(std, mean) in one call.

    >>> [t.item() for t in Tensor([1.0, 3.0]).std_mean(correction=0)]
    [1.0, 2.0]
    """
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def _reduced_count(self, axis: Any) -> int:
    axes = reduce_axes(axis, self.ndim) if self.ndim else ()
    return prod(self.shape[a] for a in axes)

  def any(self, axis: Any = None, keepdim: bool = False) -> Self:
    """True where any element along axis is nonzero (NaN counts as nonzero).

    >>> Tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

  def all(self, axis: Any = None, keepdim: bool = False) -> Self:
    """True where every element along axis is nonzero; an empty reduction is True.

    >>> Tensor([[1, 1], [0, 1]]).all(1).tolist()
    [True, False]
    """
    return self.logical_not().any(axis, keepdim).logical_not()

  @half_in_float32
  def logsumexp(self, axis: Any = None, keepdim: bool = False) -> Self:
    """log(sum(exp(x))), shifted by the maximum so nothing overflows; infinite maxima pass through, as in torch.

    >>> round(Tensor([0.0, 0.0]).logsumexp().item(), 6)
    0.693147
    """
    x = self.cast(least_upper_float(self.dtype))
    if self._reduced_count(axis) == 0 and x.ndim:
      return x.exp().sum(axis, keepdim).log()
    top = x.max(axis, keepdim=True)
    top = top.isinf().where(0.0, top)
    out = custom_gradient((x - top).exp().sum(axis, keepdim=True).log() + top, ("logsumexp",), x)
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in _axes(axis, x.ndim)))

  # ---- scans
  def cumsum(self, axis: int = 0) -> Self:
    """Cumulative sum along axis, in sum's dtype (small ints widen to 32 bits, as tinygrad).

    >>> Tensor([1, 2, 3, 4]).cumsum().tolist()
    [1, 3, 6, 10]
    """
    acc = SUM_ACC_DTYPE.get(self.dtype, self.dtype)
    out = _scan(self.cast(acc), axis, SCANS["add"])
    return out.cast(self.dtype) if self.dtype in RETURNS_INPUT_DTYPE else out

  def cumprod(self, axis: int = 0) -> Self:
    """Cumulative product along axis, in prod's dtype.

    >>> Tensor([1, 2, 3, 4]).cumprod().tolist()
    [1, 2, 6, 24]
    """
    acc = SUM_ACC_DTYPE.get(self.dtype, self.dtype)
    out = _scan(self.cast(acc), axis, SCANS["mul"])
    return out.cast(self.dtype) if self.dtype in RETURNS_INPUT_DTYPE else out

  def cummax(self, axis: int = 0) -> Self:
    """Running maximum along axis (values only, as tinygrad); NaN propagates.

    >>> Tensor([1, 3, 2, 5]).cummax().tolist()
    [1, 3, 3, 5]
    """
    return _scan(self, axis, SCANS["max"])

  @half_in_float32
  def logcumsumexp(self, axis: int = 0) -> Self:
    """log(cumsum(exp(x))) along axis, computed without overflow (ints give float32).

    >>> [round(v, 4) for v in Tensor([0.0, 0.0, 0.0]).logcumsumexp().tolist()]
    [0.0, 0.6931, 1.0986]
    """
    return _scan(self.cast(least_upper_float(self.dtype)), axis, SCANS["logaddexp"])

  # ---- triangles
  def triu(self, diagonal: int = 0) -> Self:
    """Keep the elements on and above the diagonal-th diagonal of the last two dims, zero the rest.

    >>> Tensor([[1, 2], [3, 4]]).triu().tolist()
    [[1, 2], [0, 4]]
    """
    return self._triangle(diagonal, upper=True)

  def tril(self, diagonal: int = 0) -> Self:
    """Keep the elements on and below the diagonal-th diagonal of the last two dims, zero the rest.

    >>> Tensor([[1, 2], [3, 4]]).tril().tolist()
    [[1, 0], [3, 4]]
    """
    return self._triangle(diagonal, upper=False)

  def _triangle(self, diagonal: int, upper: bool) -> Self:
    if self.ndim < 2:
      raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions, got shape "
                         f"{self.shape}")
    if not isinstance(diagonal, int) or isinstance(diagonal, bool):
      raise TypeError(f"diagonal must be an int, got {type(diagonal).__name__}")
    keep = triangle_mask(self, self.shape[-2], self.shape[-1], diagonal, upper)
    return keep.where(self, self._const(0))

  # ---- linear algebra
  def dot(self, w: Any, acc_dtype: DType | str | None = None, dtype: DType | str | None = None) -> Self:
    """Matrix product with broadcasting over batch dims, like torch.matmul; dtype (or acc_dtype) sets the
    accumulation dtype (and the result's).

    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([1, 1])).tolist()
    [3, 7]
    """
    x = self
    if x.ndim == 0 or w.ndim == 0:
      raise RuntimeError(f"both arguments to matmul need at least 1 dimension, got {x.ndim}D and {w.ndim}D")
    k_x, k_w = x.shape[-1], w.shape[-2] if w.ndim > 1 else w.shape[0]
    if k_x != k_w:
      raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, x.shape))} and "
                       f"{'x'.join(map(str, w.shape))}): inner sizes {k_x} and {k_w} differ")
    out_dtype = least_upper_dtype(x.dtype, w.dtype)
    x2 = x.cast(out_dtype) if x.ndim > 1 else x.cast(out_dtype).reshape(1, k_x)  # (..., M, K)
    w2 = w.cast(out_dtype) if w.ndim > 1 else w.cast(out_dtype).reshape(k_w, 1)  # (..., K, N)
    x_mat = x2.reshape(*x2.shape[:-1], 1, k_x)  # (..., M, 1, K)
    w_mat = w2.transpose(-1, -2).unsqueeze(-3)  # (..., 1, N, K)
    # (..., M, N); small ints sum wider, then wrap, as tinygrad. Half products are exact in float32, as torch's: in
    # half, 300 * 300 overflowed and [300, 300] @ [300, -299] was NaN (torch: 300)
    acc, wide = accumulation_dtype(acc_dtype, dtype), compute_dtype(out_dtype)
    product = (x_mat.cast(wide) * w_mat.cast(wide)).sum(-1, dtype=acc).cast(acc or out_dtype)
    if x.ndim == 1:
      product = product.squeeze(-2)
    return product.squeeze(-1) if w.ndim == 1 else product

  def matmul(self, w: Any, reverse: bool = False, acc_dtype: DType | str | None = None,
             dtype: DType | str | None = None) -> Self:
    """self @ w (w @ self if reverse).

    >>> Tensor([[1.0, 2.0]]).matmul(Tensor([[3.0], [4.0]])).tolist()
    [[11.0]]
    """
    acc = accumulation_dtype(acc_dtype, dtype)
    return w.dot(self, acc) if reverse else self.dot(w, acc)

  def __matmul__(self, w: Any) -> Self:
    return self.dot(w)

  def __rmatmul__(self, w: Any) -> Self:
    return self._to_tensor(w).dot(self)


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
  return reduce_axes(axis, ndim) if ndim else ()


def triangle_mask(like: Any, rows: int, cols: int, diagonal: int, upper: bool) -> Any:
  """(rows, cols) bool on like's device: col - row >= diagonal (upper) or col - row <= diagonal (lower)."""
  row = like.arange(rows, device=like.device).reshape(rows, 1)
  col = like.arange(cols, device=like.device).reshape(1, cols)
  offset = col - row
  return offset.ge(diagonal) if upper else offset.le(diagonal)


# ---- scans: a windowed reduce inside blocks of SCAN_BLOCK, and the same scan over the block totals, so the work
# is O(n * SCAN_BLOCK) rather than the O(n^2) of one window per element
SCAN_BLOCK = 32


class Scan:
  """An associative scan: how to reduce a window, combine two partial results, and the identity to pad with."""

  def __init__(self, reduce: Callable[[Any], Any], combine: Callable[[Any, Any], Any], identity: Callable[[Any], Any]):
    self.reduce, self.combine, self.identity = reduce, combine, identity


def _logaddexp(a: Any, b: Any) -> Any:
  top = a.maximum(b)
  return top.isinf().where(top, top + special.log1p((-(a - b).abs()).exp()))


SCANS: dict[str, Scan] = {
  "add": Scan(lambda w: w.sum(-1), lambda a, b: a + b, lambda t: 0),
  "mul": Scan(lambda w: w.prod(-1), lambda a, b: a * b, lambda t: 1),
  "max": Scan(lambda w: w.max(-1), lambda a, b: a.maximum(b), lambda t: dtypes.min(t.dtype)),
  "logaddexp": Scan(lambda w: w.logsumexp(-1), _logaddexp, lambda t: -math.inf),
}


def _scan(x: Any, axis: int, scan: Scan) -> Any:
  ax = normalize_dim(axis, x.ndim)  # IndexError for a bad axis, 0-d tensors included (they take 0 and -1)
  if x.ndim == 0:
    return x
  if x.shape[ax] == 0:
    return x
  moved = x.transpose(ax, -1)
  return _scan_last(moved, scan).transpose(ax, -1)


def _scan_last(x: Any, scan: Scan) -> Any:
  """Inclusive scan along the last dim."""
  n = x.shape[-1]
  if n <= SCAN_BLOCK:
    windows = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)  # [..., i, j] = x[..., j]
    keep = triangle_mask(x, n, n, 0, False)  # j <= i
    return scan.reduce(keep.where(windows, x._const(scan.identity(x))))
  blocks = -(-n // SCAN_BLOCK)
  padded = x.pad(((0, 0),) * (x.ndim - 1) + ((0, blocks * SCAN_BLOCK - n),))
  inner = _scan_last(padded.reshape(*x.shape[:-1], blocks, SCAN_BLOCK), scan)
  totals = inner[..., SCAN_BLOCK - 1]
  before = _scan_last(totals, scan).pad(((0, 0),) * (x.ndim - 1) + ((1, 0),), value=scan.identity(x))
  before = before[..., :blocks]  # the scan of all earlier blocks, identity for the first
  out = scan.combine(before.unsqueeze(-1), inner)
  return out.reshape(*x.shape[:-1], blocks * SCAN_BLOCK)[..., :n]
