"""The root of Tensor's mixins. Free functions of the frontend test `isinstance(x, TensorBase)` and build new tensors
through an existing one (`type(x)(...)`, `x.arange(...)`), so no frontend module imports refgrad.tensor.

Mixin methods return `Self`, so editors and type checkers see a Tensor's methods on their results."""
from __future__ import annotations

import functools
from typing import Any

from refgrad.dtype import compute_dtype

try:
  from typing import Self
except ImportError:  # Python 3.10: the annotations are strings nobody evaluates at run time
  Self = Any


class TensorBase:
  __slots__ = ()


def half_in_float32(fn: Any) -> Any:
  """A method of float16/bfloat16 tensors runs on self cast to float32 and rounds its result (or each of its results)
  once at the end, as torch does: rounding intermediates in half precision would cost many ULP, and a sum of
  squares or of many terms overflows half's range (65504) long before the result does."""
  @functools.wraps(fn)
  def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
    if compute_dtype(self.dtype) == self.dtype:
      return fn(self, *args, **kwargs)
    out = fn(self.cast(compute_dtype(self.dtype)), *args, **kwargs)
    return tuple(t.cast(self.dtype) for t in out) if isinstance(out, tuple) else out.cast(self.dtype)
  return wrapper
