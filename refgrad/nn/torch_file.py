"""Reading files written by torch.save: the zip format (torch's default since 1.6) and the legacy one
(`_use_new_zipfile_serialization=False`). Both pickle the saved object; a tensor is a persistent id naming a
storage (its element type, key and size) plus a call to `torch._utils._rebuild_tensor_v2` (or `_v3`, which names
the dtype, for dtypes without a typed storage class: uint16/32/64) with its offset, shape and strides in elements.
The zip keeps each storage in `<archive>/data/<key>`; the legacy file keeps them after the pickles, in the order of
a pickled list of keys, each as an int64 element count and the raw little-endian bytes.
"""
from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.dtype import DType, dtypes
from refgrad.tensor import Tensor

STORAGE_DTYPES: dict[str, DType] = {
  "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16, "FloatStorage": dtypes.float32,
  "DoubleStorage": dtypes.float64, "BoolStorage": dtypes.bool, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
  "ShortStorage": dtypes.int16, "IntStorage": dtypes.int32, "LongStorage": dtypes.int64,
}
TORCH_DTYPES: dict[str, DType] = {
  "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "float32": dtypes.float32,
  "float": dtypes.float32, "float64": dtypes.float64, "double": dtypes.float64, "bool": dtypes.bool,
  "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16, "int32": dtypes.int32,
  "uint32": dtypes.uint32, "int64": dtypes.int64, "uint64": dtypes.uint64,
}
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
# What an unpickled checkpoint may name besides torch's rebuilders: the classes and functions that plain values,
# numpy arrays and numpy scalars pickle with, by exact name. A whole module is never allowed (numpy.ctypeslib's
# load_library would load any shared library, builtins' eval run any code); anything else unpickles as an empty
# stand-in object, so a checkpoint holding, say, an argparse.Namespace still loads its tensors.
PLAIN_NAMES = {
  "collections": {"OrderedDict", "defaultdict", "Counter", "deque"},
  "builtins": {"set", "frozenset", "slice", "range", "complex", "bytearray", "dict", "list", "tuple", "int", "float",
               "bool", "str", "bytes"},
  "_codecs": {"encode"},
  "numpy": {"ndarray", "dtype"},
  "numpy.core.multiarray": {"_reconstruct", "scalar"},
  "numpy._core.multiarray": {"_reconstruct", "scalar"},
}
PLAIN_NAMES["__builtin__"] = PLAIN_NAMES["builtins"]  # a Python 2 pickle's name for it


class _Storage:
  """A storage of the file: its bytes once found (None while a legacy file's pickle is read) and element type."""
  def __init__(self, dtype: DType | None, key: str, numel: int):
    self.dtype, self.key, self.numel, self.data = dtype, key, numel, None


class _Stub:
  """What an object of a class outside PLAIN_NAMES (and torch's) unpickles as."""
  def __init__(self, *args: Any, **kwargs: Any):
    self.args = args

  def __setstate__(self, state: Any) -> None:
    self.state = state


def _tensor(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], dtype: DType) -> Tensor:
  """The tensor a storage's bytes hold at an element offset with element strides; a copy, so tensors sharing a
  storage are independent, as torch.load's are not but tinygrad's disk tensors are."""
  flat = np.frombuffer(storage.data, dtype=dtype.np)
  if size and min(size) > 0 and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= flat.size:
    raise ValueError(f"torch_load: a tensor of shape {tuple(size)} at offset {offset} with strides {tuple(stride)} "
                     f"reads past its storage {storage.key!r} of {flat.size} {dtype.name} elements")
  view = np.lib.stride_tricks.as_strided(flat[offset:], shape=tuple(size),
                                         strides=tuple(s * dtype.itemsize for s in stride), writeable=False)
  return Tensor(np.array(view, copy=True))


def _rebuild_v2(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> Tensor:
  return _pending(storage, offset, size, stride, storage.dtype)


def _rebuild_v3(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], requires_grad: bool,
                hooks: Any, dtype: DType, *_: Any) -> Tensor:
  return _pending(storage, offset, size, stride, dtype)


def _rebuild_parameter(data: Any, *_: Any) -> Any:
  return data  # a saved nn.Parameter is its tensor, as tinygrad's torch_load gives it


def _pending(storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
             dtype: DType | None) -> Any:
  if dtype is None:
    raise ValueError(f"torch_load: storage {storage.key!r} has no element type")
  if storage.data is None:  # legacy: the bytes come after this pickle; build the tensor once they are read
    return _Later(lambda: _tensor(storage, offset, tuple(size), tuple(stride), dtype))
  return _tensor(storage, offset, tuple(size), tuple(stride), dtype)


class _Later:
  """A legacy file's tensor, made once its storage's bytes are read (they follow the pickle that names it)."""
  def __init__(self, make: Callable[[], Tensor]):
    self.make = make


def _rebuild_from_type(rebuild: Callable[..., Any], new_type: Any, args: tuple, state: Any) -> Any:
  return rebuild(*args)  # a tensor with Python attributes (t.note = 1): the tensor, without them


TORCH_NAMES: dict[str, Any] = {"_rebuild_tensor_v2": _rebuild_v2, "_rebuild_tensor_v3": _rebuild_v3,
                               "_rebuild_parameter": _rebuild_parameter, "_rebuild_from_type_v2": _rebuild_from_type,
                               "Tensor": None, "Size": tuple, **STORAGE_DTYPES,
                               **TORCH_DTYPES, "UntypedStorage": None}


class _Unpickler(pickle.Unpickler):
  def __init__(self, file: io.BytesIO, storages: dict[str, _Storage], read: Callable[[str], bytes | None]):
    super().__init__(file)
    self.storages, self.read = storages, read

  def find_class(self, module: str, name: str) -> Any:
    root = module.split(".")[0]
    if root == "torch":
      if name not in TORCH_NAMES:
        raise NotImplementedError(f"torch_load: {module}.{name} is not supported (dense tensors, Parameters and "
                                  "the containers holding them are)")
      return TORCH_NAMES[name]
    return super().find_class(module, name) if name in PLAIN_NAMES.get(module, ()) else _Stub

  def persistent_load(self, pid: Any) -> _Storage:
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
      raise pickle.UnpicklingError(f"torch_load: unknown persistent id {pid!r}")
    _, dtype, key, _, numel = pid[:5]
    key = str(key)
    if key not in self.storages:
      self.storages[key] = _Storage(dtype, key, numel)
      self.storages[key].data = self.read(key)
    return self.storages[key]


def _resolve(obj: Any) -> Any:
  """obj with every legacy _Later made into its tensor, through the containers a state dict uses."""
  if isinstance(obj, _Later):
    return obj.make()
  if isinstance(obj, dict):
    for key, value in obj.items():
      obj[key] = _resolve(value)
    return obj
  if isinstance(obj, list):
    obj[:] = [_resolve(v) for v in obj]
    return obj
  if isinstance(obj, tuple):
    return type(obj)(*map(_resolve, obj)) if hasattr(obj, "_fields") else tuple(map(_resolve, obj))
  return obj


def _load_zip(raw: bytes, path: str | Path) -> Any:
  with zipfile.ZipFile(io.BytesIO(raw)) as archive:
    names = archive.namelist()
    pickles = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if not pickles:
      raise ValueError(f"torch_load {path}: a zip file without <archive>/data.pkl is not a torch.save file")
    base = pickles[0].split("/")[0]
    byteorder = f"{base}/byteorder"
    if byteorder in names and archive.read(byteorder).strip() != b"little":
      raise NotImplementedError(f"torch_load {path}: a big-endian file is not supported")

    def read(key: str) -> bytes:
      try:
        return archive.read(f"{base}/data/{key}")
      except KeyError:
        raise ValueError(f"torch_load {path}: storage {key!r} is missing from the archive") from None
    return _Unpickler(io.BytesIO(archive.read(pickles[0])), {}, read).load()


def _load_legacy(raw: bytes, path: str | Path) -> Any:
  f = io.BytesIO(raw)
  if pickle.load(f) != LEGACY_MAGIC:
    raise ValueError(f"torch_load {path}: not a torch.save file (neither a zip archive nor the legacy format)")
  pickle.load(f)  # the protocol version
  sys_info = pickle.load(f)
  if isinstance(sys_info, dict) and not sys_info.get("little_endian", True):
    raise NotImplementedError(f"torch_load {path}: a big-endian file is not supported")
  storages: dict[str, _Storage] = {}
  result = _Unpickler(f, storages, lambda key: None).load()
  for key in pickle.load(f):
    storage = storages[str(key)]
    (count,) = struct.unpack("<q", f.read(8))
    itemsize = storage.dtype.itemsize if storage.dtype is not None else 1
    storage.data = f.read(count * itemsize)
    if len(storage.data) != count * itemsize:
      raise ValueError(f"torch_load {path}: truncated file: storage {key!r} needs {count * itemsize} bytes")
  return _resolve(result)


def torch_load(path: str | Path) -> Any:
  """What torch.save wrote to path, its tensors as refgrad Tensors (on the default device; a saved Parameter is its
  tensor): a state dict comes back as a dict of name -> Tensor, as tinygrad's torch_load gives it.

  >>> import torch, tempfile, os
  >>> p = os.path.join(tempfile.mkdtemp(), "w.pt")
  >>> torch.save({"w": torch.arange(6).reshape(2, 3).t()}, p)
  >>> torch_load(p)["w"].tolist()
  [[0, 3], [1, 4], [2, 5]]
  """
  raw = Path(path).read_bytes()
  return _load_zip(raw, path) if zipfile.is_zipfile(io.BytesIO(raw)) else _load_legacy(raw, path)
