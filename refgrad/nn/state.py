"""Model state: finding parameters, state dicts, and the safetensors file format.

safetensors: 8 bytes little-endian header length N, then N bytes of JSON mapping each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows; an optional
"__metadata__" entry maps strings to strings), then the raw little-endian data.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.tensor import Tensor

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
  "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
CODE_OF = {dt: code for code, dt in SAFETENSORS_DTYPES.items()}


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from obj's attributes, lists, tuples and dicts, named by its path ("l1.weight")."""
  if isinstance(obj, Tensor):
    return {prefix.strip("."): obj}
  if isinstance(obj, (list, tuple)):
    items = enumerate(obj)
  elif isinstance(obj, dict):
    items = obj.items()
  elif hasattr(obj, "__dict__"):
    items = vars(obj).items()
  else:
    return {}
  found: dict[str, Tensor] = {}
  for key, value in items:
    found.update(get_state_dict(value, f"{prefix}{key}."))
  return found


def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of get_state_dict, each once."""
  seen: dict[int, Tensor] = {}
  for t in get_state_dict(obj).values():
    seen.setdefault(id(t), t)
  return list(seen.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
  """Copy values into the model's tensors. Every key is checked before anything changes: a failure leaves the
  model untouched. strict=True also requires the same set of keys."""
  own = get_state_dict(model)
  missing = sorted(set(own) - set(state_dict))
  unexpected = sorted(set(state_dict) - set(own))
  if strict and (missing or unexpected):
    raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
  for name in own.keys() & state_dict.keys():
    if own[name].shape != state_dict[name].shape:
      raise ValueError(f"load_state_dict: {name!r} has shape {state_dict[name].shape}, the model expects "
                       f"{own[name].shape}")
  for name in own.keys() & state_dict.keys():
    value = state_dict[name].to(own[name].device).cast(own[name].dtype).contiguous().realize()
    own[name].replace(value)


def safe_save(tensors: dict[str, Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
  header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
  blobs, offset = [], 0
  for name, t in tensors.items():
    data = np.ascontiguousarray(t.numpy()).tobytes()
    header[name] = {"dtype": CODE_OF[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as the reference implementation does
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for blob in blobs:
      f.write(blob)


def _read_header(raw: bytes, path: str | Path) -> tuple[dict[str, Any], int]:
  if len(raw) < 8:
    raise ValueError(f"{path}: not a safetensors file (only {len(raw)} bytes)")
  (size,) = struct.unpack("<Q", raw[:8])
  if size > len(raw) - 8:
    raise ValueError(f"{path}: truncated safetensors file: header says {size} bytes, file has {len(raw) - 8}")
  try:
    header = json.loads(raw[8:8 + size])
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: corrupt safetensors header: {e}") from None
  if not isinstance(header, dict):
    raise ValueError(f"{path}: corrupt safetensors header: expected a JSON object")
  return header, 8 + size


def safe_load(path: str | Path, device: str | None = None) -> dict[str, Tensor]:
  """Read a safetensors file; a truncated or corrupt file raises ValueError naming the tensor at fault."""
  raw = Path(path).read_bytes()
  header, start = _read_header(raw, path)
  data_size = len(raw) - start
  out: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    try:
      dtype, shape, (begin, end) = SAFETENSORS_DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
    except (KeyError, TypeError, ValueError):
      raise ValueError(f"{path}: tensor {name!r} has a corrupt entry {info!r}") from None
    if end > data_size or begin > end or end - begin != int(np.prod(shape)) * dtype.itemsize:
      raise ValueError(f"{path}: tensor {name!r} needs bytes [{begin}, {end}) of {data_size}: file truncated or "
                       "corrupt")
    array = np.frombuffer(raw, dtype=dtype.np, count=int(np.prod(shape)), offset=start + begin).reshape(shape)
    out[name] = Tensor(array.copy(), device=device)
  return out
