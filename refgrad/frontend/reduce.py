"""Reductions and matmul. Only ADD, MUL and MAX reduce natively; min, mean, argmax ... build on them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from refgrad.dtype import DType, dtypes, least_upper_dtype, least_upper_float, to_dtype
from refgrad.uop import Ops, UOp, prod

# The dtype a sum accumulates in (tinygrad's rule): small ints widen, half and bfloat16 sum in float32.
SUM_ACC_DTYPE: dict[DType, DType] = {
  dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32,
  dtypes.uint8: dtypes.uint32, dtypes.uint16: dtypes.uint32,
  dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32,
}
RETURNS_INPUT_DTYPE = frozenset({dtypes.float16, dtypes.bfloat16})


def reduce_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
  from refgrad.tensor import normalize_dim
  if axis is None:
    return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  normalized = tuple(normalize_dim(a, ndim) for a in axes)
  if len(set(normalized)) != len(normalized):
    raise RuntimeError(f"dim {axes} appears multiple times in the list of dims")
  return tuple(sorted(normalized))


class ReduceMixin:
  __slots__ = ()

  def _reduce(self, op: Ops, axis: Any = None, keepdim: bool = False) -> Any:
    axes = reduce_axes(axis, self.ndim)
    if self.ndim == 0:
      return self
    reduced = self._from(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
    if keepdim:
      return reduced
    return reduced.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def sum(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | str | None = None) -> Any:
    acc = to_dtype(acc_dtype) if acc_dtype is not None else SUM_ACC_DTYPE.get(self.dtype, self.dtype)
    out = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
    return out.cast(self.dtype) if acc_dtype is None and self.dtype in RETURNS_INPUT_DTYPE else out

  def prod(self, axis: Any = None, keepdim: bool = False, acc_dtype: DType | str | None = None) -> Any:
    acc = to_dtype(acc_dtype) if acc_dtype is not None else SUM_ACC_DTYPE.get(self.dtype, self.dtype)
    out = self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
    return out.cast(self.dtype) if acc_dtype is None and self.dtype in RETURNS_INPUT_DTYPE else out

  def max(self, axis: Any = None, keepdim: bool = False) -> Any:
    self._check_nonempty(axis, "max")
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: Any = None, keepdim: bool = False) -> Any:
    """min is max of the order-reversed values: -x for floats, ~x for ints and bools (exact for all)."""
    self._check_nonempty(axis, "min")
    flipped = self.neg() if dtypes.is_float(self.dtype) else self.bitwise_not()
    out = flipped._reduce(Ops.MAX, axis, keepdim)
    return out.neg() if dtypes.is_float(self.dtype) else out.bitwise_not()

  def _check_nonempty(self, axis: Any, what: str) -> None:
    axes = reduce_axes(axis, self.ndim)
    if self.ndim and prod(self.shape[a] for a in axes) == 0:
      raise RuntimeError(f"{what}(): cannot reduce over a zero-size dimension of a tensor of shape {self.shape}")

  def mean(self, axis: Any = None, keepdim: bool = False) -> Any:
    axes = reduce_axes(axis, self.ndim) if self.ndim else ()  # a 0-d tensor accepts axis 0 and -1
    count = prod(self.shape[a] for a in axes)
    out_dtype = least_upper_float(self.dtype)
    total = self.cast(out_dtype).sum(axis, keepdim)
    return total.div(count) if count else total * float("nan")

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Any:
    """Index of the first maximum (NaN counts as the maximum, as in torch); int32."""
    if axis is None:  # index into the flattened tensor; keepdim keeps every dim as size 1, as torch does
      flat = self.flatten().argmax(0)
      return flat.reshape((1,) * self.ndim) if keepdim else flat
    from refgrad.tensor import normalize_dim
    ax = normalize_dim(axis, self.ndim)
    self._check_nonempty(ax, "argmax")
    if self.ndim == 0:
      return self._const(0, dtypes.int32)
    n = self.shape[ax]
    best = self.max(ax, keepdim=True)
    hit = self.eq(best) | (self.isnan() & best.isnan()) if dtypes.is_float(self.dtype) else self.eq(best)
    countdown = self.arange(n, 0, -1, dtype=dtypes.int32, device=self.device)
    countdown = countdown.reshape((n,) + (1,) * (self.ndim - ax - 1))
    first = hit.where(countdown, 0).max(ax, keepdim=keepdim)
    return (n - first).cast(dtypes.int32)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Any:
    flipped = self.neg() if dtypes.is_float(self.dtype) else self.bitwise_not()
    return flipped.argmax(axis, keepdim)

  # ---- linear algebra
  def dot(self, w: Any) -> Any:
    """Matrix product with broadcasting over batch dims, like torch.matmul."""
    x = self
    if x.ndim == 0 or w.ndim == 0:
      raise RuntimeError(f"both arguments to matmul need at least 1 dimension, got {x.ndim}D and {w.ndim}D")
    k_x, k_w = x.shape[-1], w.shape[-2] if w.ndim > 1 else w.shape[0]
    if k_x != k_w:
      from refgrad.tensor import ShapeError
      raise ShapeError(f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, x.shape))} and "
                       f"{'x'.join(map(str, w.shape))}): inner sizes {k_x} and {k_w} differ")
    out_dtype = least_upper_dtype(x.dtype, w.dtype)
    x2 = x.cast(out_dtype) if x.ndim > 1 else x.cast(out_dtype).reshape(1, k_x)  # (..., M, K)
    w2 = w.cast(out_dtype) if w.ndim > 1 else w.cast(out_dtype).reshape(k_w, 1)  # (..., K, N)
    x_mat = x2.reshape(*x2.shape[:-1], 1, k_x)  # (..., M, 1, K)
    w_mat = w2.transpose(-1, -2).unsqueeze(-3)  # (..., 1, N, K)
    product = (x_mat * w_mat).sum(-1).cast(out_dtype)  # (..., M, N); small ints sum wider, then wrap, as tinygrad
    if x.ndim == 1:
      product = product.squeeze(-2)
    return product.squeeze(-1) if w.ndim == 1 else product

  def matmul(self, w: Any, reverse: bool = False) -> Any:
    return w.dot(self) if reverse else self.dot(w)

  def __matmul__(self, w: Any) -> Any:
    return self.dot(w)

  def __rmatmul__(self, w: Any) -> Any:
    return self._to_tensor(w).dot(self)
