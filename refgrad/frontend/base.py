"""The root of Tensor's mixins. Free functions of the frontend test `isinstance(x, TensorBase)` and build new tensors
through an existing one (`type(x)(...)`, `x.arange(...)`), so no frontend module imports refgrad.tensor.

Mixin methods return `Self`, so editors and type checkers see a Tensor's methods on their results."""
from __future__ import annotations

from typing import Any

try:
  from typing import Self
except ImportError:  # Python 3.10: the annotations are strings nobody evaluates at run time
  Self = Any


class TensorBase:
  __slots__ = ()
