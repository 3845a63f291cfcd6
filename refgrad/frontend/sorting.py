"""sort, topk and masked_select.

A sort ranks every element of a row against every other (a (..., n, n) comparison, as tinygrad's sort computes its
indices), so n is expected to be modest (rows of thousands, not millions). Ties keep their order (a stable sort);
NaN sorts above every number, as in torch. The values are `gather`ed at the sorted indices, so their gradient
reaches the input through gather's rule.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from refgrad.dtype import dtypes
from refgrad.frontend.base import Self, TensorBase
from refgrad.frontend.shapes import normalize_dim


class TopKRangeError(RuntimeError, ValueError):
  """k larger than the dim: torch raises RuntimeError, tinygrad ValueError."""


def _ahead(key_j: Any, key_i: Any, descending: bool) -> Any:
  """Where key j sorts strictly ahead of key i: smaller (larger if descending), NaN counting as the largest."""
  if not dtypes.is_float(key_j.dtype):
    return key_j.gt(key_i) if descending else key_j.lt(key_i)
  nan_j, nan_i = key_j.isnan(), key_i.isnan()
  if descending:
    return key_j.gt(key_i) | (nan_j & nan_i.logical_not())
  return key_j.lt(key_i) | (nan_i & nan_j.logical_not())


def _tied(key_j: Any, key_i: Any) -> Any:
  same = key_j.eq(key_i)
  return same | (key_j.isnan() & key_i.isnan()) if dtypes.is_float(key_j.dtype) else same


def sorted_order(x: Any, descending: bool) -> Any:
  """For each row along the last axis, the int32 indices of its elements in stable sorted order."""
  n = x.shape[-1]
  keys = x.detach().cast(dtypes.int8) if x.dtype == dtypes.bool else x.detach()
  key_i, key_j = keys.unsqueeze(-1), keys.unsqueeze(-2)  # [..., i, j]
  position = x.arange(n, dtype=dtypes.int32, device=x.device)
  earlier = position.unsqueeze(-1).gt(position)  # [i, j]: j < i
  before_i = _ahead(key_j, key_i, descending) | (_tied(key_j, key_i) & earlier)
  rank = before_i.cast(dtypes.int32).sum(-1)  # [..., i]: how many elements sort ahead of element i
  at_rank = rank.unsqueeze(-1).eq(position)  # [..., i, r]: element i lands at place r
  return at_rank.where(position.unsqueeze(-1), 0).sum(-2)


class SortingMixin(TensorBase):
  __slots__ = ()

  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
    """(values, indices) sorted along dim, ascending unless descending; stable (equal values keep their order); NaN
    is the largest value, as in torch. Indices are int32 (tinygrad; torch gives int64).

    >>> [t.tolist() for t in Tensor([3.0, 1.0, 2.0, 1.0]).sort()]
    [[1.0, 1.0, 2.0, 3.0], [1, 3, 2, 0]]
    """
    d = normalize_dim(dim, self.ndim)
    if self.ndim == 0:
      return self, self._const(0, dtypes.int32)
    last = self.transpose(d, -1)
    order = sorted_order(last, descending)
    return last.gather(-1, order).transpose(d, -1), order.transpose(d, -1)

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]:
    """(values, indices) of the k largest (smallest unless largest) elements along dim, in sorted order (also when
    sorted_ is False, which lets any order be returned); ties go to the earlier element.

    >>> [t.tolist() for t in Tensor([1, 5, 3, 5]).topk(2)]
    [[5, 5], [1, 3]]
    """
    d = normalize_dim(dim, self.ndim)
    size = self.shape[d] if self.ndim else 1
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= size:
      raise TopKRangeError(f"topk: k={k!r} is out of range for dim {dim} of size {size} (shape {self.shape})")
    values, indices = self.sort(d, descending=largest)
    if self.ndim == 0:
      return values, indices
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return values.shrink(keep), indices.shrink(keep)

  def masked_select(self, mask: Any) -> Self:
    """The elements of self where mask (bool) is True, both broadcast to one shape, as a 1-d tensor in row-major
    order (torch's broadcasting; tinygrad broadcasts only the mask). Its length depends on the mask's values, so
    the mask is realized here.

    >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False])).tolist()
    [1, 3]
    """
    mask = self._to_tensor(mask)
    if mask.dtype != dtypes.bool:
      raise RuntimeError(f"masked_select expects a bool mask, got {mask.dtype.name}")
    x, mask = self._broadcasted(mask, match_dtype=False)
    picked = mask.flatten().numpy().nonzero()[0].astype(np.int32)
    return x.flatten().gather(0, type(self)(picked, device=x.device))
