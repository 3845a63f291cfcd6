"""Model state: finding parameters, state dicts, and the safetensors file format.

safetensors: 8 bytes little-endian header length N, then N bytes of JSON mapping each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows; an optional
"__metadata__" entry maps strings to strings), then the raw little-endian data.
"""
from __future__ import annotations

import json
import math
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.nn.torch_file import torch_load  # noqa: F401  (tinygrad's nn.state.torch_load)
from refgrad.nn.untrusted import shape_fault
from refgrad.symbolic_shapes import is_symbolic_shape
from refgrad.tensor import Tensor
from refgrad.uop import Ops

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16,
  "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
CODE_OF = {dt: code for code, dt in SAFETENSORS_DTYPES.items()}


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from obj's attributes, lists, tuples and dicts, named by its path ("l1.weight"); a
  namedtuple's by its field names, as tinygrad does."""
  if isinstance(obj, tensor_type):
    return {prefix.strip("."): obj}
  if hasattr(obj, "_asdict"):
    items = obj._asdict().items()
  elif isinstance(obj, (list, tuple)):
    items = enumerate(obj)
  elif isinstance(obj, dict):
    items = obj.items()
  elif hasattr(obj, "__dict__"):
    items = vars(obj).items()
  else:
    return {}
  found: dict[str, Tensor] = {}
  for key, value in items:
    found.update(get_state_dict(value, f"{prefix}{key}.", tensor_type))
  return found


def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of get_state_dict, each once."""
  seen: dict[int, Tensor] = {}
  for t in get_state_dict(obj).values():
    seen.setdefault(id(t), t)
  return list(seen.values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Make the model's tensors hold the values and return those tensors. Every key is checked before anything changes: a
  failure leaves the model untouched. strict=True requires every key of the model (KeyError naming the missing
  ones); keys the model does not have are skipped with a warning, as tinygrad does (torch raises: a checkpoint with
  extra entries, a BatchNorm's num_batches_tracked say, loads in tinygrad code). consume deletes the loaded entries
  from state_dict (tinygrad's, to free memory early). verbose and realize are tinygrad's progress bar and scheduling
  choice: refgrad prints nothing and always realizes the loaded values. As in tinygrad (Tensor.replace), a tensor
  takes the loaded value's dtype (torch casts to the model's), and a tensor over several devices keeps its devices
  and split axis."""
  own = get_state_dict(model)
  missing = sorted(set(own) - set(state_dict))
  unexpected = sorted(set(state_dict) - set(own))
  if strict and missing:
    extra = f", unexpected keys {unexpected}" if unexpected else ""
    raise KeyError(f"load_state_dict: missing keys {missing}{extra}")
  if unexpected:
    warnings.warn(f"load_state_dict: {len(unexpected)} keys the model does not have were not loaded: {unexpected[:8]}",
                  stacklevel=2)
  for name in own.keys() & state_dict.keys():
    # () and (1,) load into each other, as in tinygrad: torch's BatchNorm num_batches_tracked is 0-d, ours (1,)
    if own[name].shape != state_dict[name].shape and {own[name].shape, state_dict[name].shape} != {(), (1,)}:
      raise ValueError(f"load_state_dict: Shape mismatch in layer `{name}`: Expected shape {own[name].shape}, but "
                       f"found {state_dict[name].shape} in state dict.")
  loaded = []
  for name, target in own.items():
    if name in state_dict:
      value = _placed_like(state_dict[name].reshape(target.shape), target)
      target.replace(value.contiguous().realize())
      if consume:
        del state_dict[name]
      loaded.append(target)
  return loaded


def _placed_like(value: Tensor, target: Tensor) -> Tensor:
  """value on target's device; on target's devices with its split (axis and ranges) when target is sharded and
  value is not on those devices (tinygrad shards by the target's axis; a plain .to() would replicate a weight split
  in two). A value sharded on the target's devices already keeps its split, as in tinygrad."""
  if not isinstance(target.device, tuple) or value.device == target.device:
    return value.to(target.device)
  node = target.uop
  if node.op is not Ops.MULTI or node.arg[0] is None:
    return value.shard(target.device)
  axis, bounds = node.arg
  return value.shard(target.device, axis, splits=tuple(end - start for start, end in bounds))


# The safetensors library's own limits: a header over 100 MB is refused before it is parsed, JSON nested 128
# levels deep (serde_json's recursion limit) is refused, and every integer in it (shape entries, offsets) is a u64.
MAX_HEADER_BYTES = 100_000_000
MAX_JSON_DEPTH = 127
U64_LIMIT = 2**64


def safe_save(tensors: dict[str, Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
  """Write a safetensors file the safetensors library reads back; names and metadata it would refuse raise
  ValueError before anything is written."""
  header: dict[str, Any] = {"__metadata__": _checked_metadata(metadata, path)} if metadata else {}
  blobs, offset = [], 0
  for name, t in tensors.items():
    data = np.ascontiguousarray(_checked_tensor(name, t, path).numpy()).tobytes()
    header[name] = {"dtype": CODE_OF[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as the reference implementation does
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for blob in blobs:
      f.write(blob)


def _checked_metadata(metadata: Any, path: str | Path) -> dict[str, str]:
  if not isinstance(metadata, dict):
    raise ValueError(f"safe_save {path}: metadata must be a dict of strings to strings, not {type(metadata).__name__}")
  for key, value in metadata.items():
    if not isinstance(key, str) or not isinstance(value, str):
      raise ValueError(f"safe_save {path}: metadata {key!r}: {value!r} is not a string to a string (the safetensors "
                       "format stores only strings there)")
  return dict(metadata)


def _checked_tensor(name: Any, t: Any, path: str | Path) -> Tensor:
  if not isinstance(name, str) or name == "__metadata__":
    raise ValueError(f"safe_save {path}: {name!r} cannot name a tensor (names are strings, and '__metadata__' is the "
                     "header's metadata entry)")
  if not isinstance(t, Tensor):
    raise TypeError(f"safe_save {path}: {name!r} is a {type(t).__name__}, not a Tensor")
  if t.dtype not in CODE_OF:
    raise ValueError(f"safe_save {path}: tensor {name!r} has dtype {t.dtype.name}, which safetensors cannot store")
  if is_symbolic_shape(t.shape):
    raise ValueError(f"safe_save {path}: tensor {name!r} has symbolic shape {t.shape}; a file holds concrete shapes "
                     "(save a copy of the bound size: t.numpy())")
  return t


class _HeaderFault(Exception):
  """What json.loads' hooks find wrong, turned into the ValueError naming the file by _read_header."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """A JSON object's dict; a key given twice raises (json.loads would keep the last silently)."""
  seen: dict[str, Any] = {}
  for key, value in pairs:
    if key in seen:
      raise _HeaderFault(f"key {key!r} appears twice")
    seen[key] = value
  return seen


def _no_constants(name: str) -> Any:
  raise _HeaderFault(f"{name} is not JSON")  # Python's json reads NaN and Infinity; the format's parser does not


def _depth(value: Any) -> int:
  """How deeply a parsed JSON value nests objects and arrays (iteratively: no recursion limit of its own)."""
  depth, level = 0, [value] if isinstance(value, (dict, list)) else []
  while level:
    depth += 1
    level = [c for v in level for c in (v.values() if isinstance(v, dict) else v) if isinstance(c, (dict, list))]
  return depth


def _read_header(raw: bytes, path: str | Path) -> tuple[dict[str, Any], int]:
  if len(raw) < 8:
    raise ValueError(f"{path}: not a safetensors file (only {len(raw)} bytes)")
  (size,) = struct.unpack("<Q", raw[:8])
  if size > MAX_HEADER_BYTES:
    raise ValueError(f"{path}: corrupt safetensors header: it claims {size} bytes, over the format's limit of "
                     f"{MAX_HEADER_BYTES}")
  if size > len(raw) - 8:
    raise ValueError(f"{path}: truncated safetensors file: header says {size} bytes, file has {len(raw) - 8}")
  try:
    header = json.loads(raw[8:8 + size].decode("utf-8"), object_pairs_hook=_no_duplicates,
                        parse_constant=_no_constants, parse_int=_json_int)
  except (_HeaderFault, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: corrupt safetensors header: {e}") from None
  except RecursionError:
    raise ValueError(f"{path}: corrupt safetensors header: nested too deeply") from None
  if _depth(header) > MAX_JSON_DEPTH:
    raise ValueError(f"{path}: corrupt safetensors header: nested more than {MAX_JSON_DEPTH} levels deep")
  if not isinstance(header, dict):
    raise ValueError(f"{path}: corrupt safetensors header: expected a JSON object, got {type(header).__name__}")
  return header, 8 + size


class _NegativeZero(int):
  """JSON's `-0`: Python's json reads it as the int 0, the safetensors library as the float -0.0, which is no u64."""


def _json_int(text: str) -> int:
  return _NegativeZero(0) if text == "-0" else int(text)


def _is_u64(value: Any) -> bool:
  return type(value) is int and 0 <= value < U64_LIMIT  # neither a bool nor a -0


def _check_metadata(value: Any, path: str | Path) -> None:
  """`__metadata__` is absent, null, or an object of strings, as the safetensors library requires."""
  if value is None:
    return
  if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
    raise ValueError(f"{path}: corrupt safetensors header: '__metadata__' must map strings to strings, got "
                     f"{value!r:.200}")


def _parse_entry(name: str, info: Any, path: str | Path) -> tuple[DType, tuple[int, ...], int, int]:
  """(dtype, shape, begin, end) of one tensor's header entry, each field checked as the safetensors library does."""
  def bad(why: str) -> ValueError:
    return ValueError(f"{path}: tensor {name!r} has a corrupt entry: {why} (entry {info!r:.200})")
  if not isinstance(info, dict):
    raise bad("not a JSON object")
  if (missing := [k for k in ("dtype", "shape", "data_offsets") if k not in info]):
    raise bad(f"missing {', '.join(missing)}")
  code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
  if not isinstance(code, str) or code not in SAFETENSORS_DTYPES:
    raise bad(f"dtype {code!r} is not one refgrad reads ({', '.join(SAFETENSORS_DTYPES)})")
  if not isinstance(shape, list) or not all(_is_u64(n) for n in shape):
    raise bad(f"shape {shape!r} is not a list of non-negative integers")
  if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_u64(n) for n in offsets):
    raise bad(f"data_offsets {offsets!r} is not [begin, end] of non-negative integers")
  dtype, (begin, end) = SAFETENSORS_DTYPES[code], offsets
  if end < begin:
    raise bad(f"data_offsets {offsets!r} end before they begin")
  if end - begin != math.prod(shape) * dtype.itemsize:
    raise bad(f"bytes [{begin}, {end}) do not hold shape {tuple(shape)} of {code} ({dtype.itemsize} bytes each)")
  if (why := shape_fault(shape, dtype.itemsize)):  # an empty shape can still be one no array has: [0, 2**63]
    raise bad(why)
  return dtype, tuple(shape), begin, end


def _check_layout(entries: dict[str, tuple[DType, tuple[int, ...], int, int]], data_size: int,
                  path: str | Path) -> None:
  """The tensors tile the data exactly, as the safetensors library requires: no overlap, no gap, nothing after."""
  covered, last = 0, None
  for name, (_, _, begin, end) in sorted(entries.items(), key=lambda e: (e[1][2], e[1][3])):
    if end > data_size:
      raise ValueError(f"{path}: tensor {name!r} needs bytes [{begin}, {end}) of {data_size}: file truncated or "
                       "corrupt")
    if begin < covered:
      raise ValueError(f"{path}: tensor {name!r}: bytes [{begin}, {end}) overlap tensor {last!r}, which ends at "
                       f"{covered}")
    if begin > covered:
      raise ValueError(f"{path}: tensor {name!r} starts at byte {begin}, leaving bytes [{covered}, {begin}) to no "
                       "tensor")
    covered, last = end, name
  if covered != data_size:
    raise ValueError(f"{path}: bytes [{covered}, {data_size}) after tensor {last!r} belong to no tensor (the "
                     "safetensors format refuses trailing data)")


def safe_load_metadata(path: str | Path) -> tuple[Tensor, int, dict[str, Any]]:
  """tinygrad's: (the file's bytes as a uint8 Tensor, where its data starts, its JSON header with the
  '__metadata__' entry), the header checked as safe_load checks it."""
  raw = Path(path).read_bytes()
  header, start = _read_header(raw, path)
  _check_metadata(header.get("__metadata__"), path)
  return Tensor(np.frombuffer(raw, dtype=np.uint8).copy()), start, header


def safe_load(path: str | Path, device: str | None = None) -> dict[str, Tensor]:
  """Read a safetensors file, refusing (ValueError naming the file and the tensor) every file the safetensors
  library refuses; stricter only in refusing a key given twice even when both entries agree and a shape no array can
  have (an empty [0, 2**63]). A bool byte other than 0 and 1 loads as True."""
  raw = Path(path).read_bytes()
  header, start = _read_header(raw, path)
  _check_metadata(header.pop("__metadata__", None), path)
  entries = {name: _parse_entry(name, info, path) for name, info in header.items()}
  _check_layout(entries, len(raw) - start, path)
  out: dict[str, Tensor] = {}
  for name, (dtype, shape, begin, _) in entries.items():
    array = np.frombuffer(raw, dtype=dtype.np, count=math.prod(shape), offset=start + begin).reshape(shape)
    # a bool's byte is 0 or 1: a corrupt file's other bytes would be true to numpy, not to a kernel's bit operations
    out[name] = Tensor(array != 0 if dtype == dtypes.bool else array.copy(), device=device)
  return out
