"""sort, argsort, topk and masked_select.

Two ways to sort each row along the last axis, both stable (equal values keep their order) with NaN above every
number, as in torch:
- a short row ranks every element against every other (a (..., n, n) comparison folded by two reductions, as
  tinygrad's indices): a few kernels, O(n^2) work, so only while `numel * n` is at most PAIRWISE_LIMIT;
- a long row that needs no gradient goes through a bitonic sorting network: padded to a power of two m, log2(m)
  merge stages of compare-and-exchange steps over the whole row (each one kernel per carried tensor), O(m log^2 m)
  work. Values and their original indices travel together; an exchange compares (value, index) pairs, so ties
  stay in order and the padding (indices n and up) sorts last.
Either way the values are only moved, never recomputed, so they keep every bit (-0.0, NaN payloads). The pairwise
sort `gather`s them, so their gradient reaches the input through gather's rule; the network is not differentiated
(its backward would be one fused kernel through every stage), so a row that needs a gradient is ranked pairwise.
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


# numel * n up to which a sort ranks pairwise: past it, the network's ~log2(n)^2 kernels cost less than the
# comparisons (a randperm(60000): 3.6e9 of them, about 40 s on PYTHON and 20 s on CLANG here, extrapolated from
# n = 20,000; the network: 272 kernels, 2.2 and 5.3 s with CLANG's compiles)
PAIRWISE_LIMIT = 1 << 27


def _before(b: tuple[Any, Any], a: tuple[Any, Any], n: int, descending: bool) -> Any:
  """Where the (value, index) pair b sorts strictly before pair a: by value, then by index; padding (an index of n
  or more) after every element of the row."""
  (b_value, b_index), (a_value, a_index) = b, a
  b_key, a_key = (v.cast(dtypes.int8) if v.dtype == dtypes.bool else v for v in (b_value, a_value))
  by_value = _ahead(b_key, a_key, descending) | (_tied(b_key, a_key) & b_index.lt(a_index))
  padding = b_index.ge(n) | a_index.ge(n)
  return padding.where(b_index.lt(a_index), by_value)


def _exchange(pairs: tuple[Any, Any], block: int, reverse_upper: bool, n: int, descending: bool) -> tuple[Any, Any]:
  """One step of the network: in each block of `block` elements, the lower half's elements are compared with the
  upper half's (in reverse order when reverse_upper: the first step of a merge), and each pair is put in order."""
  *lead, m = pairs[0].shape
  half = block // 2
  blocked = [t.reshape(*lead, m // block, block) for t in pairs]
  lower = tuple(t.shrink(tuple((0, s) for s in t.shape[:-1]) + ((0, half),)) for t in blocked)
  upper = tuple(t.shrink(tuple((0, s) for s in t.shape[:-1]) + ((half, block),)) for t in blocked)
  if reverse_upper:
    upper = tuple(t.flip(-1) for t in upper)
  swap = _before(upper, lower, n, descending)
  out = []
  for low, up in zip(lower, upper):
    new_low, new_up = swap.where(up, low), swap.where(low, up)
    out.append(new_low.cat(new_up.flip(-1) if reverse_upper else new_up, dim=-1).reshape(*lead, m).contiguous())
  return out[0], out[1]


def network_sort(x: Any, descending: bool) -> tuple[Any, Any]:
  """(values, int32 indices) of each row along the last axis in stable sorted order, by a bitonic network."""
  *lead, n = x.shape
  m = 1 << (n - 1).bit_length()
  values = x.pad(tuple((0, 0) for _ in lead) + ((0, m - n),))
  index = x.arange(m, dtype=dtypes.int32, device=x.device).reshape(*(1 for _ in lead), m).expand(*lead, m)
  pairs = (values, index)
  block = 2
  while block <= m:  # merge sorted runs of block/2 into runs of block: a reversed compare, then half-cleaners
    pairs = _exchange(pairs, block, True, n, descending)
    step = block // 2
    while step >= 2:
      pairs = _exchange(pairs, step, False, n, descending)
      step //= 2
    pairs[0].realize(pairs[1])  # a merge at a time: one schedule of the whole network ran 3x slower on PYTHON
    block *= 2
  keep = tuple((0, s) for s in lead) + ((0, n),)
  return pairs[0].shrink(keep), pairs[1].shrink(keep)


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
    n = last.shape[-1]
    if isinstance(n, int) and n > 1 and last.numel() * n > PAIRWISE_LIMIT and not last.requires_grad:
      values, order = network_sort(last, descending)
      return values.transpose(d, -1), order.transpose(d, -1)
    order = sorted_order(last, descending)
    return last.gather(-1, order).transpose(d, -1), order.transpose(d, -1)

  def argsort(self, dim: int = -1, descending: bool = False) -> Self:
    """The int32 indices that sort self along dim (`sort`'s second result): stable, NaN largest.

    >>> Tensor([3.0, 1.0, 2.0, 1.0]).argsort(descending=True).tolist()
    [0, 2, 1, 3]
    """
    return self.sort(dim, descending)[1]

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
