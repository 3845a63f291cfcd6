"""An independent reading of where a torch file's tensors point, to prove a read outside the file where comparing
bytes cannot (the bytes past a storage are often zeros, which any file holds): the file's pickle is read by Python's
pure unpickler with every name a stand-in except torch's rebuilders, which record each tensor's storage, offset,
sizes and strides; a view reaches outside when, computed with Python ints, its lowest element is below 0 or its
highest at or past the elements its storage's bytes hold. A reader that loads such a file has read outside it.
"""
from __future__ import annotations

import io
import pickle
import zipfile
from typing import Any

from fuzzing.mutators import LEGACY_PICKLES, STORAGE_ITEMSIZE
from fuzzing.pickles import split_pickles

DTYPE_ITEMSIZE = {"float16": 2, "half": 2, "bfloat16": 2, "float32": 4, "float": 4, "float64": 8, "double": 8,
                  "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
                  "uint64": 8}


class _Anything:
  """What every name but torch's rebuilders unpickles as: callable, buildable, inert."""

  def __init__(self, *args: Any, **kwargs: Any):
    pass

  def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
    return _Anything()

  def __setstate__(self, state: Any) -> None:
    pass


class _Kind:
  """A storage class or dtype named by the pickle, with its element size."""

  def __init__(self, itemsize: int):
    self.itemsize = itemsize


class _Recorder(pickle._Unpickler):  # the pure-Python unpickler: its memo is a dict, so a huge index costs nothing
  def __init__(self, blob: bytes):
    super().__init__(io.BytesIO(blob))
    self.storages: dict[str, int] = {}  # key -> itemsize of the first persistent id naming it, as readers cache
    self.views: list[tuple[str, int, Any, Any, int]] = []

  def find_class(self, module: str, name: str) -> Any:
    if module.split(".")[0] != "torch":
      return _Anything
    if name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
      return self._rebuild
    if name == "_rebuild_parameter":
      return lambda data, *_: data
    if name == "_rebuild_from_type_v2":
      return lambda fn, _, args, *__: fn(*args)
    if name.endswith("Storage") or name in DTYPE_ITEMSIZE:
      return _Kind(STORAGE_ITEMSIZE.get(name.removesuffix("Storage"), DTYPE_ITEMSIZE.get(name, 1)))
    return _Anything

  def persistent_load(self, pid: Any) -> Any:
    if isinstance(pid, tuple) and len(pid) >= 5:
      self.storages.setdefault(str(pid[2]), pid[1].itemsize if isinstance(pid[1], _Kind) else 1)
      return str(pid[2])
    return _Anything()

  def _rebuild(self, key: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _Anything:
    dtype = rest[2] if len(rest) >= 3 and isinstance(rest[2], _Kind) else None  # _v3 names the dtype
    if isinstance(key, str) and key in self.storages:
      self.views.append((key, offset, size, stride, dtype.itemsize if dtype else self.storages[key]))
    return _Anything()


def _reaches_outside(offset: Any, size: Any, stride: Any, elements: int) -> bool:
  if not all(isinstance(v, int) for v in (offset, *size, *stride)) or len(size) != len(stride):
    return False  # not a view a reader can build: it must refuse it in its own way
  if any(n <= 0 for n in size):
    return False  # no element, nothing read
  low = offset + sum(min(0, (n - 1) * s) for n, s in zip(size, stride))
  high = offset + sum(max(0, (n - 1) * s) for n, s in zip(size, stride))
  return low < 0 or high >= elements


def _outside(recorder: _Recorder, lengths: dict[str, int]) -> list[str]:
  found = []
  for key, offset, size, stride, itemsize in recorder.views:
    if key in lengths and isinstance(size, tuple) and isinstance(stride, tuple) and \
        _reaches_outside(offset, size, stride, lengths[key] // itemsize):
      found.append(f"storage {key!r} of {lengths[key]} bytes, offset {offset}, sizes {size}, strides {stride}")
  return found


def _recorded(blob: bytes) -> _Recorder | None:
  recorder = _Recorder(blob)
  try:
    recorder.load()
  except Exception:  # a pickle this reading cannot finish proves nothing
    return None
  return recorder


def zip_views_outside(data: bytes) -> list[str]:
  """The views of a zip torch file reaching outside their storage member (the pickle read is the first
  <archive>/data.pkl, the storages <archive>/data/<key>)."""
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
      names = archive.namelist()
      pickles = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
      if not pickles or (recorder := _recorded(archive.read(pickles[0]))) is None:
        return []
      base = pickles[0].split("/")[0]
      lengths = {key: archive.getinfo(f"{base}/data/{key}").file_size for key in recorder.storages
                 if f"{base}/data/{key}" in names}
  except Exception:  # an archive this reading cannot open proves nothing
    return []
  return _outside(recorder, lengths)


def legacy_views_outside(data: bytes) -> list[str]:
  """The views of a legacy torch file reaching outside their storage record (an int64 element count, then the
  bytes, in the order of the storage keys pickle)."""
  pickles, tail = split_pickles(data, len(LEGACY_PICKLES))
  if len(pickles) < 5 or (recorder := _recorded(b"".join(op.raw for op in pickles[3]))) is None or \
      (keys := _recorded_keys(b"".join(op.raw for op in pickles[4]))) is None:
    return []
  lengths, pos = {}, 0
  for key in keys:
    if key not in recorder.storages or pos + 8 > len(tail):
      break
    count = int.from_bytes(tail[pos:pos + 8], "little", signed=True)
    lengths[key] = max(0, min(count * recorder.storages[key], len(tail) - pos - 8))
    pos += 8 + max(0, count * recorder.storages[key])
  return _outside(recorder, lengths)


def _recorded_keys(blob: bytes) -> list[str] | None:
  recorder = _Recorder(blob)
  try:
    keys = recorder.load()
  except Exception:  # as in _recorded
    return None
  return [str(k) for k in keys] if isinstance(keys, list) else None


def views_outside(data: bytes) -> list[str]:
  """The views of a torch file (either format) that reach outside their storage."""
  return zip_views_outside(data) if zipfile.is_zipfile(io.BytesIO(data)) else legacy_views_outside(data)
