"""Reading files written by torch.save: the zip format (torch's default since 1.6) and the legacy one
(`_use_new_zipfile_serialization=False`). Both pickle the saved object; a tensor is a persistent id naming a
storage (its element type, key and size) plus a call to `torch._utils._rebuild_tensor_v2` (or `_v3`, which names
the dtype, for dtypes without a typed storage class: uint16/32/64) with its offset, shape and strides in elements.
The zip keeps each storage in `<archive>/data/<key>`; the legacy file is five pickles (a magic number, the protocol
version, system information, the object, its storages' keys) followed by each storage as an int64 element count and
its raw little-endian bytes.

A checkpoint may come from anyone. Every pickle of either format goes through refgrad.safe_pickle, which looks up
only the exact names of ALLOWED; every other name becomes an inert stand-in. Every storage size, offset, shape and
stride is checked with Python integers before numpy sees it (refgrad/nn/untrusted.py), and every fault is a
ValueError naming the file (docs/untrusted-input.md says what is promised, and where).
"""
from __future__ import annotations

import functools
import io
import math
import struct
import warnings
import zipfile
import zlib
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
  from numpy._core import multiarray  # numpy 2
except ImportError:
  from numpy.core import multiarray

from refgrad.dtype import DType, dtypes
from refgrad.nn.untrusted import is_count, shape_fault, view_fault
from refgrad.safe_pickle import UnsafePickleError, safe_load, shown
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
UNTYPED = dtypes.uint8  # an UntypedStorage counts bytes; its tensors name their dtype (_rebuild_tensor_v3)
ZIP_MAGIC = b"PK\x03\x04"
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c
LEGACY_PROTOCOL = 1001  # the only version torch has written
# a view reading its storage's elements more than this many times over (overlapping windows, not an expand) is
# refused: it would be copied, and a small file could ask for any number of copies
OVERLAP_LIMIT = 64
# deflate expands at most 1032:1; a member claiming more is corrupt (or a bomb), whatever it would decompress to
MAX_DEFLATE_RATIO = 1032


class StandIn:
  """What an object of a class (or the result of a function) outside ALLOWED unpickles as: nothing of the named code
  runs; the arguments and state the pickle gave it are kept. `module` and `name` say what the pickle named."""
  module = name = ""

  def __init__(self, *args: Any, **kwargs: Any):
    self.args = args

  def __setstate__(self, state: Any) -> None:
    self.state = state

  def __repr__(self) -> str:
    return f"StandIn({self.module}.{self.name})"


class _Storage:
  """A storage of the file: its element type, key, declared size, and its bytes once found (None while the legacy
  format's object pickle is first read: the bytes follow it)."""
  def __init__(self, dtype: DType, key: str, numel: int, data: bytes | None):
    self.dtype, self.key, self.numel, self.data = dtype, key, numel, data


class _Reader:
  """One torch.save file being read: its path for messages, the storages found, the names it stood in for. What a
  pickle may build is bounded by `size`, the file's bytes."""

  def __init__(self, path: str | Path, size: int, read_storage: Callable[[str, int], bytes | None]):
    self.source, self.read_storage = f"torch_load {path}", read_storage
    self.storages: dict[str, _Storage] = {}
    self.stand_ins: dict[str, type] = {}
    rebuilders = {name: _bind(self, rebuild) for name, rebuild in TORCH_REBUILDERS.items()}
    self.allowed = {**_plain_names(size, self.source), **rebuilders, **TORCH_TYPES}

  def fault(self, why: str) -> UnsafePickleError:
    return UnsafePickleError(f"{self.source}: {why}")

  def load(self, f: io.BytesIO) -> Any:
    return safe_load(f, self.allowed, self.source, stand_in=self.stand_in, persistent=self.persistent,
                     check_state=self.check_state)

  def check_state(self, obj: Any, state: Any) -> None:
    """numpy's dtypes and arrays take their state in C: only the states numpy itself writes for the dtypes and
    arrays the allow-list makes (the byte order may differ; the bytes must fill the shape exactly)."""
    if isinstance(obj, np.dtype) and not _numpy_dtype_state(obj, state):
      raise self.fault(f"numpy dtype {obj} with state {shown(state)}, not one numpy writes for it")
    if isinstance(obj, np.ndarray) and not _numpy_array_state(state):
      raise self.fault(f"a numpy array with state {shown(state)}, not a dtype, shape and bytes that fill it")

  def stand_in(self, module: str, name: str) -> type:
    if module.split(".")[0] == "torch":  # torch's own names are known: one refgrad does not read is not data
      raise NotImplementedError(f"{self.source}: {module}.{name} is not supported (dense tensors, Parameters and "
                                "the containers holding them are)")
    full = f"{module}.{name}"
    if full not in self.stand_ins:
      self.stand_ins[full] = type(name, (StandIn,), {"module": module, "name": name, "__module__": __name__})
    return self.stand_ins[full]

  def persistent(self, pid: Any) -> _Storage:
    """A storage's id: ('storage', element type, key, location, element count[, legacy view metadata])."""
    if not (isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
      raise self.fault(f"unknown persistent id {shown(pid)}")
    storage_type, key, numel = pid[1], pid[2], pid[4]
    if len(pid) == 6 and pid[5] is not None:
      raise NotImplementedError(f"{self.source}: storage views (written by torch before 1.0) are not supported")
    if not _is_key(key) or not is_count(numel):
      raise self.fault(f"storage id {shown(pid)} needs a key and a non-negative element count")
    dtype = UNTYPED if storage_type is _UntypedStorage else storage_type
    if not isinstance(dtype, DType):
      raise self.fault(f"storage {key!r} has element type {shown(storage_type)}, not one of torch's storages")
    key = str(key)
    if key not in self.storages:
      self.storages[key] = _Storage(dtype, key, numel, self.read_storage(key, numel * dtype.itemsize))
    elif (self.storages[key].dtype, self.storages[key].numel) != (dtype, numel):
      raise self.fault(f"storage {key!r} is named with two element types or sizes")
    return self.storages[key]

  def tensor(self, storage: Any, offset: Any, size: Any, stride: Any, dtype: Any) -> Any:
    """The tensor a storage's bytes hold at an element offset with element strides, every number checked first;
    a copy, so tensors sharing a storage are independent, as torch.load's are not but tinygrad's disk tensors are.
    None while the storage's bytes are not read yet (the legacy format's first pass)."""
    if not isinstance(storage, _Storage):
      raise self.fault(f"a tensor's storage is {shown(storage)}, not a storage id")
    if not isinstance(dtype, DType):
      raise self.fault(f"a tensor of storage {storage.key!r} has dtype {shown(dtype)}, not one of torch's")
    elements = storage.numel * storage.dtype.itemsize // dtype.itemsize  # of the tensor's dtype
    if (why := shape_fault(size, dtype.itemsize)) or (why := view_fault(offset, tuple(size), stride, elements)):
      raise self.fault(f"a tensor of storage {storage.key!r}: {why}")
    if storage.data is None:
      return None
    if 0 in size:  # reads nothing, whatever its offset and strides say
      return Tensor(np.zeros(tuple(size), dtype.np))
    # an axis of stride 0 repeats one element (torch's expand): read once, expanded lazily, so a small file's
    # expanded tensor costs its stored elements; other overlapping views (windows) are copied, within a bound
    stored = tuple(1 if s == 0 else n for n, s in zip(size, stride))
    if math.prod(stored) > OVERLAP_LIMIT * elements:
      raise self.fault(f"a tensor of storage {storage.key!r}: shape {tuple(size)} with strides {tuple(stride)} "
                       f"reads its {elements} elements {math.prod(stored) // elements} times over")
    flat = np.frombuffer(storage.data, dtype=dtype.np, count=len(storage.data) // dtype.itemsize)
    # the checks above bound each (n - 1) * stride by the storage, so no byte stride overflows; a size-1 axis never
    # steps, whatever its stride
    strides = tuple(s * dtype.itemsize if n > 1 else 0 for n, s in zip(stored, stride))
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=stored, strides=strides, writeable=False)
    loaded = Tensor(_normalized(view))
    return loaded if stored == tuple(size) else loaded.expand(tuple(size))

  def warn_stand_ins(self) -> None:
    if self.stand_ins:
      warnings.warn(f"{self.source}: the checkpoint names {', '.join(sorted(self.stand_ins))}, which refgrad does not "
                    "look up; each loaded as an inert refgrad.nn.torch_file.StandIn", stacklevel=4)


def _numpy_dtype_state(dtype: np.dtype, state: Any) -> bool:
  own = dtype.__reduce__()[2]
  return (isinstance(state, tuple) and len(state) == len(own) and state[0] == own[0] and state[2:] == own[2:]
          and state[1] in ("<", ">", "|", "="))


def _numpy_array_state(state: Any) -> bool:
  """(1, shape, dtype, is_fortran, bytes) with a plain dtype and exactly the bytes the shape needs."""
  if not (isinstance(state, tuple) and len(state) == 5 and state[0] == 1 and isinstance(state[2], np.dtype)):
    return False
  _, shape, dtype, fortran, data = state
  return (not dtype.hasobject and isinstance(fortran, bool) and isinstance(data, (bytes, bytearray))
          and isinstance(shape, tuple) and shape_fault(shape, dtype.itemsize) is None
          and len(data) == math.prod(shape) * dtype.itemsize)


def _is_key(key: Any) -> bool:
  """A storage's key as torch writes it (a str, or an int in old files); never a container, whose str() could recurse
  thousands of levels deep."""
  return isinstance(key, str) or (isinstance(key, int) and not isinstance(key, bool))


def _normalized(view: np.ndarray) -> np.ndarray:
  """A copy of view; a bool's byte is 0 or 1 (a corrupt file's other bytes would be true to numpy and not to a
  compiled kernel's bit operations)."""
  return view != 0 if view.dtype == np.bool_ else np.array(view, copy=True)


def _rebuild_v2(reader: _Reader, storage: Any, offset: Any, size: Any, stride: Any, *_: Any) -> Any:
  return reader.tensor(storage, offset, size, stride, getattr(storage, "dtype", None))


def _rebuild_v3(reader: _Reader, storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any,
                hooks: Any, dtype: Any, *_: Any) -> Any:
  return reader.tensor(storage, offset, size, stride, dtype)


def _rebuild_parameter(reader: _Reader, data: Any, *_: Any) -> Any:
  return data  # a saved nn.Parameter is its tensor, as tinygrad's torch_load gives it


def _rebuild_from_type(reader: _Reader, rebuild: Any, new_type: Any, args: Any, state: Any) -> Any:
  """A tensor with Python attributes (t.note = 1): the tensor, without them. `rebuild` came from this pickle, so it
  is a name ALLOWED gave or a stand-in."""
  if not isinstance(args, tuple):
    raise reader.fault(f"_rebuild_from_type_v2's arguments are {shown(args)}, not a tuple")
  return rebuild(*args)


def _bind(reader: _Reader, rebuild: Callable[..., Any]) -> Callable[..., Any]:
  return lambda *args: rebuild(reader, *args)


class _UntypedStorage:
  """torch.storage.UntypedStorage, as a storage id names it."""


TORCH_REBUILDERS = {("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2, ("torch._utils", "_rebuild_tensor_v3"):
                    _rebuild_v3, ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
                    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type}
TORCH_TYPES: dict[tuple[str, str], Any] = {
  ("torch", "Size"): tuple, ("torch._tensor", "Tensor"): None, ("torch", "Tensor"): None,
  ("torch.storage", "UntypedStorage"): _UntypedStorage, ("torch", "UntypedStorage"): _UntypedStorage,
  **{("torch", name): dtype for name, dtype in {**STORAGE_DTYPES, **TORCH_DTYPES}.items()},
}


def _plain_names(limit: int, source: str) -> dict[tuple[str, str], Any]:
  """The classes and functions plain values, numpy arrays and numpy scalars pickle with, by exact name. A whole
  module is never allowed (numpy.ctypeslib's load_library would load any shared library, builtins' eval run any
  code). The containers and byte strings are bounded by the file's size: `bytearray(2**34)` or `list(range(2**31))`
  in a small file would exhaust memory."""
  bounded = {name: _bounded(kind, limit, source) for name, kind in
             {"set": set, "frozenset": frozenset, "list": list, "tuple": tuple, "dict": dict, "bytes": bytes,
              "bytearray": bytearray}.items()}
  builtins = {**bounded, "slice": slice, "range": range, "complex": complex, "int": int, "float": float,
              "bool": bool, "str": str}
  names = {("builtins", name): value for name, value in builtins.items()}
  names |= {("collections", name): _bounded(kind, limit, source) for name, kind in
            {"OrderedDict": OrderedDict, "Counter": Counter, "deque": deque}.items()}
  names |= {("collections", "defaultdict"): defaultdict,
            ("_codecs", "encode"): _bounded(functools.partial(_latin1, source), limit, source),
            ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): functools.partial(_numpy_dtype, source)}
  for core in ("numpy.core", "numpy._core"):
    names |= {(f"{core}.multiarray", "_reconstruct"): _bounded_array(limit, source),
              (f"{core}.multiarray", "scalar"): multiarray.scalar,
              (f"{core}.numeric", "_frombuffer"): functools.partial(_array_from_bytes, source)}
  return names


def _array_from_bytes(source: str, data: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
  """How pickle protocol 5 rebuilds a numpy array: its bytes, dtype, shape and order. The bytes came from the file,
  so they bound the array (numpy refuses a shape they do not fill)."""
  if not isinstance(data, (bytes, bytearray)) or order not in ("C", "F") or shape_fault(shape, 1):
    raise UnsafePickleError(f"{source}: a numpy array of {type(data).__name__}, shape {shown(shape)}, order "
                            f"{shown(order)}")
  return np.frombuffer(data, dtype=_numpy_dtype(source, dtype)).reshape(shape, order=order).copy()


def _numpy_dtype(source: str, *args: Any) -> np.dtype:
  """numpy.dtype, refusing object dtypes: an object array fills every element when made, so a small file could
  claim billions of them (and torch's weights_only loader refuses them too)."""
  dtype = np.dtype(*args)
  if dtype.hasobject:
    raise UnsafePickleError(f"{source}: numpy dtype {dtype} holds Python objects, which a checkpoint may not")
  return dtype


def _bounded_array(limit: int, source: str) -> Callable[..., np.ndarray]:
  """numpy's array rebuilder (it makes an array of a shape, then BUILD gives its bytes), for plain ndarrays of at
  most `limit` bytes."""
  def reconstruct(kind: Any, shape: Any, dtype: Any) -> np.ndarray:
    sizes = shape if isinstance(shape, tuple) else (shape,)
    if kind is not np.ndarray or not all(is_count(n) for n in sizes) or math.prod(sizes) > limit:
      raise UnsafePickleError(f"{source}: numpy array of {shown(kind)} and shape {shown(shape)} in a file of {limit} "
                              "bytes")
    return multiarray._reconstruct(kind, shape, _numpy_dtype(source, dtype))
  return reconstruct


def _latin1(source: str, text: Any, encoding: Any = "latin1", *_: Any) -> bytes:
  """_codecs.encode as a protocol-2 pickle uses it for bytes: a str and a text encoding (never a codec like zlib)."""
  if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
    raise UnsafePickleError(f"{source}: _codecs.encode({shown(text)}, {shown(encoding)}) is not how a pickle stores "
                            "bytes")
  return text.encode(encoding)


def _bounded(make: Callable[..., Any], limit: int, source: str) -> Callable[..., Any]:
  """`make`, refusing an argument that would build more items than the file has bytes (a range, or a count)."""
  def checked(*args: Any, **kwargs: Any) -> Any:
    for arg in args:
      size = len(arg) if isinstance(arg, range) else arg if isinstance(arg, int) else 0
      if size > limit:
        raise UnsafePickleError(f"{source}: {getattr(make, '__name__', make)}() of {size} items in a file of {limit} "
                                "bytes")
    return make(*args, **kwargs)
  return checked


def _zip_member(archive: zipfile.ZipFile, name: str, path: str | Path) -> bytes:
  """A member's bytes, its size checked before it is decompressed; every fault of the archive a ValueError (of the
  kind an unpickler's callbacks raise, which safe_pickle passes on as it is)."""
  info = archive.getinfo(name)
  if info.file_size > max(info.compress_size, 1) * MAX_DEFLATE_RATIO:
    raise UnsafePickleError(f"torch_load {path}: member {name!r} claims {info.file_size} bytes from "
                            f"{info.compress_size}")
  try:
    return archive.read(info)
  except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError) as e:
    raise UnsafePickleError(f"torch_load {path}: member {name!r} cannot be read: {e}") from None


def _load_zip(raw: bytes, path: str | Path) -> Any:
  try:
    archive = zipfile.ZipFile(io.BytesIO(raw))
  except (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, struct.error) as e:
    raise ValueError(f"torch_load {path}: a corrupt zip archive: {e}") from None
  with archive:
    names = archive.namelist()
    if (twice := sorted(n for n, count in Counter(names).items() if count > 1)):
      raise ValueError(f"torch_load {path}: the archive holds {twice[0]!r} twice")
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1:
      raise ValueError(f"torch_load {path}: a zip file without one <archive>/data.pkl is not a torch.save file")
    base = pickles[0].split("/")[0]
    if f"{base}/byteorder" in names:
      order = _zip_member(archive, f"{base}/byteorder", path).strip()
      if order == b"big":
        raise NotImplementedError(f"torch_load {path}: a big-endian file is not supported")
      if order != b"little":
        raise ValueError(f"torch_load {path}: byteorder {order[:20]!r} is neither 'little' nor 'big'")

    def read(key: str, size: int) -> bytes:
      name = f"{base}/data/{key}"
      if name not in names:
        raise UnsafePickleError(f"torch_load {path}: storage {key!r} is missing from the archive")
      data = _zip_member(archive, name, path)
      if len(data) < size:
        raise UnsafePickleError(f"torch_load {path}: storage {key!r} holds {len(data)} bytes, its id declares {size}")
      return data[:size]
    reader = _Reader(path, len(raw), read)
    result = reader.load(io.BytesIO(_zip_member(archive, pickles[0], path)))
  reader.warn_stand_ins()
  return result


def _load_legacy(raw: bytes, path: str | Path) -> Any:
  """Five pickles, then the storages. The object's pickle names storages whose bytes come after it, so it is read
  twice: once to learn the storages and where it ends, once more with their bytes, building the tensors."""
  f = io.BytesIO(raw)
  reader = _Reader(path, len(raw), lambda key, size: None)
  try:
    magic = reader.load(f)
  except UnsafePickleError:
    magic = None
  if magic != LEGACY_MAGIC:
    raise ValueError(f"torch_load {path}: not a torch.save file (neither a zip archive nor the legacy format)")
  if (protocol := reader.load(f)) != LEGACY_PROTOCOL:
    raise ValueError(f"torch_load {path}: legacy protocol version {shown(protocol)}, not {LEGACY_PROTOCOL}")
  sys_info = reader.load(f)
  if isinstance(sys_info, dict) and sys_info.get("little_endian", True) is False:
    raise NotImplementedError(f"torch_load {path}: a big-endian file is not supported")
  start = f.tell()
  reader.load(f)
  keys = reader.load(f)
  data = _legacy_storages(f, keys, reader.storages, path)
  again = _Reader(path, len(raw), lambda key, size: data[key])
  result = again.load(io.BytesIO(raw[start:]))
  again.warn_stand_ins()
  return result


def _legacy_storages(f: io.BytesIO, keys: Any, storages: dict[str, _Storage], path: str | Path) -> dict[str, bytes]:
  """Each storage's bytes, in the order of `keys`: an int64 element count, which must be the one its id declared,
  then the bytes. Every storage the object names must be there once."""
  if not isinstance(keys, list) or not all(map(_is_key, keys)) or sorted(map(str, keys)) != sorted(storages):
    raise ValueError(f"torch_load {path}: the storage keys {shown(keys)} are not the storages the object names, "
                     "once each")
  data = {}
  for key in map(str, keys):
    storage = storages[key]
    count = f.read(8)
    if len(count) < 8 or struct.unpack("<q", count)[0] != storage.numel:
      raise ValueError(f"torch_load {path}: storage {key!r}'s element count is not the {storage.numel} its id "
                       "declared (truncated or corrupt file)")
    size = storage.numel * storage.dtype.itemsize
    if size > len(f.getbuffer()) - f.tell():  # checked before reading: f.read(2**66) raises OverflowError
      raise ValueError(f"torch_load {path}: truncated file: storage {key!r} needs {size} bytes")
    data[key] = f.read(size)
  return data


def torch_load(path: str | Path) -> Any:
  """What torch.save wrote to path, its tensors as refgrad Tensors (on the default device; a saved Parameter is its
  tensor): a state dict comes back as a dict of name -> Tensor, as tinygrad's torch_load gives it. The file may come
  from anyone: no code it names runs (objects of classes refgrad does not read load as inert `StandIn`s, with a
  warning), and a file that is not a valid checkpoint raises ValueError naming it.

  >>> import torch, tempfile, os
  >>> p = os.path.join(tempfile.mkdtemp(), "w.pt")
  >>> torch.save({"w": torch.arange(6).reshape(2, 3).t()}, p)
  >>> torch_load(p)["w"].tolist()
  [[0, 3], [1, 4], [2, 5]]
  """
  raw = Path(path).read_bytes()
  # a zip archive as torch tells one: by its first local header (zipfile.is_zipfile looks for an end record in the
  # last 64 KiB, which a legacy file's storage bytes can hold by chance)
  return _load_zip(raw, path) if raw.startswith(ZIP_MAGIC) else _load_legacy(raw, path)
