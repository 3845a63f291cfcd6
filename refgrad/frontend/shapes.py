"""Shape arguments and their errors, shared by Tensor and every frontend mixin: the one place that says what a
valid dim, shape or broadcast is."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from refgrad.uop import UOp

Scalar = int | float | bool
Shape = tuple[int, ...]


class ShapeError(RuntimeError, ValueError):
  """Shapes that do not fit together (broadcast, reshape, matmul). Catchable as RuntimeError or ValueError."""


class SizeTypeError(TypeError, ValueError):
  """A shape argument holding something other than ints: torch's TypeError, and tinygrad's ValueError."""


# ---- argument helpers
def is_int(x: Any) -> bool:
  """A Python or numpy int (np.prod of a shape, a dim read from an array's shape), not a bool."""
  return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def normalize_dim(dim: int, ndim: int) -> int:
  """A dim in [-ndim, ndim) as a non-negative index; IndexError otherwise (0-d tensors accept -1 and 0)."""
  if not is_int(dim):
    raise TypeError(f"dim must be an int, got {type(dim).__name__}")
  size = max(ndim, 1)
  if not -size <= dim < size:
    raise IndexError(f"Dimension out of range (expected to be in range of [{-size}, {size - 1}], but got {dim})")
  return int(dim) % size


def shape_args(shape: Sequence[Any]) -> tuple:
  """Accept f(2, 3) and f((2, 3)) alike."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    return tuple(shape[0])
  return tuple(shape)


def is_size(x: Any) -> bool:
  """An int (not a bool) or a symbolic size (an expression of bound Variables, refgrad/symbolic_shapes.py)."""
  return (isinstance(x, (int, np.integer)) and not isinstance(x, bool)) or (isinstance(x, UOp) and x.dtype.kind == "i")


def is_nonnegative_size(x: Any) -> bool:
  """A size that is never negative (for a symbolic one: for no value of its Variables)."""
  return is_size(x) and (x.vmin >= 0 if isinstance(x, UOp) else x >= 0)


def check_shape(shape: tuple, what: str) -> Shape:
  """A shape of non-negative ints (or symbolic sizes); TypeError or ValueError naming `what` otherwise."""
  if any(isinstance(s, UOp) for s in shape):
    if not all(is_nonnegative_size(s) for s in shape):
      raise TypeError(f"{what}: sizes must be non-negative ints or bound Variables, got {shape}")
    return tuple(shape)
  for s in shape:
    if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
      raise SizeTypeError(f"{what}: sizes must be ints, got {shape}")
    if s < 0:
      raise ShapeError(f"{what}: negative dimension in shape {shape}")  # torch: RuntimeError; tinygrad: ValueError
  return tuple(int(s) for s in shape)


@functools.lru_cache(maxsize=4096)  # every binary op of two shapes asks; a training step asks the same few again
def broadcast_shape(*shapes: Shape) -> Shape:
  """numpy's broadcast of several shapes; ShapeError naming the shapes and the first dimension that differs."""
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for axis, sizes in enumerate(zip(*padded)):
    non_one = {s for s in sizes if s != 1}
    if len(non_one) > 1:
      raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together: "
                       f"sizes {sorted(non_one, key=str)} differ at dimension {axis}")
    out.append(non_one.pop() if non_one else 1)
  return tuple(out)
