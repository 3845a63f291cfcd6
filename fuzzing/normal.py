"""What a loaded object holds, as plain data (tuples of str, int and bytes, which marshal carries between processes)
that is equal for torch's and refgrad's loads of the same file exactly when they hold the same values: a tensor is
its dtype name, shape and bytes (so NaN payloads and -0.0 count), a float its 8 bytes, a container its kind and items
in order. A torch.Parameter and torch.Size normalize as the tensor and tuple refgrad gives for them.
"""
from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

MAX_DEPTH = 200  # deeper than any state dict; past it a value is ("deep",), so normalizing never exhausts the stack


def _tensor_bytes(obj: Any) -> tuple[str, tuple[int, ...], bytes] | None:
  """(dtype name, shape, bytes) of a refgrad Tensor, torch.Tensor or numpy array; None for anything else."""
  from refgrad.tensor import Tensor
  if isinstance(obj, Tensor):
    return obj.dtype.name, tuple(obj.shape), np.ascontiguousarray(obj.numpy()).tobytes()
  if isinstance(obj, np.ndarray):
    return f"numpy.{obj.dtype.str}", obj.shape, np.ascontiguousarray(obj).tobytes() if obj.dtype != object else b""
  torch = sys.modules.get("torch")
  if torch is not None and isinstance(obj, torch.Tensor):
    flat = obj.detach().contiguous().reshape(-1)
    return str(obj.dtype).removeprefix("torch."), tuple(obj.shape), flat.view(torch.uint8).numpy().tobytes()
  return None


def _dtype_name(obj: Any) -> str | None:
  from refgrad.dtype import DType
  if isinstance(obj, DType):
    return obj.name
  torch = sys.modules.get("torch")
  if torch is not None and type(obj).__name__ == "StorageType" and hasattr(obj, "dtype"):
    obj = obj.dtype  # a storage class named as a value: refgrad gives its element type, as for a torch dtype
  return str(obj).removeprefix("torch.") if torch is not None and isinstance(obj, torch.dtype) else None


def normal(obj: Any, depth: int = 0, active: frozenset[int] = frozenset()) -> Any:
  """obj as plain, comparable data (see the module's docstring); a container inside itself is ("cycle",)."""
  if depth > MAX_DEPTH:
    return ("deep",)
  if id(obj) in active:
    return ("cycle",)
  if (tensor := _tensor_bytes(obj)) is not None:
    return ("tensor", *tensor)
  if (name := _dtype_name(obj)) is not None:
    return ("dtype", name)
  inner = active | {id(obj)}
  if isinstance(obj, dict):
    return ("dict", tuple((normal(k, depth + 1, inner), normal(v, depth + 1, inner)) for k, v in obj.items()))
  if isinstance(obj, (list, tuple)):  # torch.Size is a tuple, as refgrad loads it
    return ("list" if isinstance(obj, list) else "tuple", tuple(normal(v, depth + 1, inner) for v in obj))
  if isinstance(obj, (set, frozenset)):
    return ("set", tuple(sorted(repr(normal(v, depth + 1, inner)) for v in obj)))
  if isinstance(obj, float):
    return ("float", struct.pack("<d", obj))
  if obj is None or isinstance(obj, (bool, int, str, bytes)):
    return (type(obj).__name__, obj)
  return ("object", f"{type(obj).__module__}.{type(obj).__qualname__}", repr(obj)[:80])


def arrays(obj: Any, depth: int = 0, active: frozenset[int] = frozenset()) -> Iterator[tuple[str, int, bytes]]:
  """(dtype name, itemsize, bytes) of every tensor and array inside obj, including a stand-in object's attributes."""
  if depth > MAX_DEPTH or id(obj) in active:
    return
  if (tensor := _tensor_bytes(obj)) is not None:
    itemsize = obj.dtype.itemsize
    yield tensor[0], itemsize, tensor[2]
    return
  inner = active | {id(obj)}
  if isinstance(obj, dict):
    children = [*obj.keys(), *obj.values()]
  elif isinstance(obj, (list, tuple, set, frozenset)):
    children = list(obj)
  else:
    children = list(vars(obj).values()) if hasattr(obj, "__dict__") and not isinstance(obj, type) else []
  for child in children:
    yield from arrays(child, depth + 1, inner)


def outside(obj: Any, corpus: bytes) -> str | None:
  """Where obj holds bytes that occur nowhere in corpus: an element of a tensor or array whose itemsize bytes are at
  no offset of the file (or of its decompressed members), which only a read outside the file can give. Bool arrays
  and 1-byte elements are skipped: every byte value occurs in almost any file, so they would prove nothing."""
  windows: dict[int, set[bytes]] = {}
  for dtype, itemsize, data in arrays(obj):
    if itemsize < 2:
      continue
    if itemsize not in windows:
      windows[itemsize] = {corpus[i:i + itemsize] for i in range(len(corpus) - itemsize + 1)}
    for element in np.unique(np.frombuffer(data, dtype=np.dtype((np.void, itemsize)))):
      if element.tobytes() not in windows[itemsize]:
        return f"a {dtype} element {element.tobytes().hex()} is at no offset of the file's {len(corpus)} bytes"
  return None
