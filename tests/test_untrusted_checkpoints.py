"""Checkpoint files from strangers: torch_load and safe_load never run code a file names, never read outside its
bytes, and refuse what is not a valid file with a ValueError naming it. Each hostile file is built here the way
torch.save builds a valid one (a pickle with storage ids), with one number or name changed; where torch reads the
same bytes, torch.load(weights_only=True) is the oracle for what a valid file holds."""
import io
import os
import pickle
import struct
import warnings
import zipfile
from collections import Counter, OrderedDict, deque

import numpy as np
import pytest
import torch
from test_state_files import f32, st_file

from refgrad.nn.state import safe_load, torch_load
from refgrad.nn.torch_file import LEGACY_MAGIC, StandIn

STORAGE = object()  # stands for the one storage of the files below; the pickler writes its id


class Rebuild:
  """Pickles as torch.save pickles a tensor: _rebuild_tensor_v2 of a storage, an offset, a shape and strides."""
  def __init__(self, offset, size, stride):
    self.args = (STORAGE, offset, tuple(size), tuple(stride), False, OrderedDict())

  def __reduce__(self):
    return (torch._utils._rebuild_tensor_v2, self.args)


class Runs:
  """Pickles as a call of os.system: if it ever runs, the canary file appears."""
  def __init__(self, canary):
    self.canary = canary

  def __reduce__(self):
    return (os.system, (f"touch {self.canary}",))


def pickled(obj, storage_id=("storage", torch.FloatStorage, "0", "cpu", 4)) -> bytes:
  class Pickler(pickle.Pickler):
    def persistent_id(self, o):
      return storage_id if o is STORAGE else None
  out = io.BytesIO()
  Pickler(out, protocol=2).dump(obj)
  return out.getvalue()


def zip_checkpoint(data_pkl: bytes, storage: bytes = struct.pack("<4f", 1, 2, 3, 4)) -> bytes:
  out = io.BytesIO()
  with zipfile.ZipFile(out, "w") as z:
    z.writestr("archive/data.pkl", data_pkl)
    z.writestr("archive/byteorder", "little")
    z.writestr("archive/data/0", storage)
    z.writestr("archive/version", "3\n")
  return out.getvalue()


def legacy_checkpoint(obj_pkl: bytes, first: tuple = (LEGACY_MAGIC, 1001, {"little_endian": True}),
                      keys=("0",), storage: bytes = struct.pack("<q4f", 4, 1, 2, 3, 4)) -> bytes:
  """The five pickles and the storage; `keys` as a list, or pickled as it is if not a tuple."""
  keys = list(keys) if isinstance(keys, tuple) else keys
  return b"".join(pickle.dumps(p, protocol=2) for p in first) + obj_pkl + pickle.dumps(keys, 2) + storage


def checkpoint(fmt: str, obj) -> bytes:
  """obj saved in a zip or legacy file whose storage "0" holds float32 1, 2, 3, 4 (the legacy id has a sixth entry,
  the view metadata torch no longer writes)."""
  if fmt == "zip":
    return zip_checkpoint(pickled(obj))
  return legacy_checkpoint(pickled(obj, ("storage", torch.FloatStorage, "0", "cpu", 4, None)))


def write(tmp_path, data: bytes):
  path = tmp_path / "downloaded.pt"
  path.write_bytes(data)
  return path


def torch_reads(path) -> bool:
  try:
    torch.load(path, weights_only=True)
    return True
  except Exception:
    return False


@pytest.mark.parametrize("position", ["magic", "protocol", "sys_info", "object", "keys"])
def test_no_pickle_of_a_legacy_file_runs_code(tmp_path, position):
  """_load_legacy read the magic number, protocol, system information and storage keys with plain pickle.load: a
  file whose first pickle calls os.system ran it, and only then was refused."""
  canary = tmp_path / "canary"
  parts = {"magic": LEGACY_MAGIC, "protocol": 1001, "sys_info": {"little_endian": True},
           "object": {"w": Rebuild(0, [4], [1])}, "keys": ["0"]}
  parts[position] = [Runs(canary), parts[position]] if position in ("object", "sys_info") else Runs(canary)
  data = b"".join(pickled(parts[name]) for name in ("magic", "protocol", "sys_info", "object", "keys"))
  path = write(tmp_path, data + struct.pack("<q4f", 4, 1, 2, 3, 4))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
      loaded = torch_load(path)
    except ValueError as e:
      assert str(path) in str(e)
    else:  # a stand-in where the checkpoint's own values are: the tensor still loads, the call never ran
      assert position in ("object", "sys_info")
      if position == "object":
        assert isinstance(loaded[0], StandIn) and loaded[1]["w"].tolist() == [1, 2, 3, 4]
  assert not canary.exists()


def test_a_stand_in_is_named_in_a_warning(tmp_path):
  canary = tmp_path / "canary"
  path = write(tmp_path, zip_checkpoint(pickled({"w": Rebuild(0, [2], [1]), "hook": Runs(canary)})))
  with pytest.warns(UserWarning, match=r"names posix\.system.*StandIn"):
    loaded = torch_load(path)
  assert type(loaded["hook"]).__name__ == "system" and loaded["hook"].args == (f"touch {canary}",)
  assert loaded["w"].tolist() == [1.0, 2.0] and not canary.exists()


# (offset, shape, strides) that reach outside a 4-element storage, or that torch refuses
OUT_OF_BOUNDS = {
  "negative offset": (-2, [4], [1]),
  "negative stride": (3, [4], [-1]),
  "stride -4096": (0, [2], [-4096]),
  "stride -2**40": (0, [2, 2], [-2**40, 1]),
  "stride 2**70": (0, [2], [2**70]),
  "past the end": (1, [4], [1]),
  "last element past the end": (0, [2, 2], [2, 3]),
  "offset 2**64 - 1": (2**64 - 1, [1], [1]),
  "more strides than sizes": (0, [2], [1, 1]),
  "a float stride": (0, [2], [1.0]),
  "a bool offset": (True, [2], [1]),
  "a negative size": (0, [-1], [1]),
  "shape [0, 2**63]": (0, [0, 2**63], [1, 1]),
}


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("case", OUT_OF_BOUNDS, ids=list(OUT_OF_BOUNDS))
def test_a_view_outside_its_storage_is_refused(tmp_path, case, fmt):
  """_tensor checked only the upper end, with a sum that negative strides make small: offset -2 loaded memory of the
  process, strides of -4096 crashed it. torch refuses every one of these too."""
  path = write(tmp_path, checkpoint(fmt, {"w": Rebuild(*OUT_OF_BOUNDS[case])}))
  with pytest.raises(ValueError, match="storage '0'") as info:
    torch_load(path)
  assert str(path) in str(info.value)
  assert not torch_reads(path)


def test_a_tensor_of_more_dimensions_than_an_array_has_is_refused_naming_it(tmp_path):
  """torch reads a 65-dimensional tensor; a numpy array, which holds a refgrad tensor's values, has at most 64."""
  path = write(tmp_path, checkpoint("zip", {"w": Rebuild(0, [1] * 65, [1] * 65)}))
  with pytest.raises(ValueError, match="65 dimensions, over the 64") as info:
    torch_load(path)
  assert str(path) in str(info.value) and torch_reads(path)


# views at the edges of a 4-element storage that torch reads: refgrad gives what torch gives, bit for bit
IN_BOUNDS = {
  "the whole storage": (0, [4], [1]),
  "the last element": (3, [1], [1]),
  "a huge stride on a size-1 axis": (3, [1, 1], [2**62, 2**62]),
  "an expanded element": (2, [3, 2], [0, 0]),
  "an empty view past the end": (9, [0, 5], [1, 2**40]),
  "0-d at the end": (3, [], []),
  "a transposed pair": (0, [2, 2], [1, 2]),
  "a negative stride on a size-1 axis": (1, [1], [-1]),
  "negative strides of an empty view": (1, [0, 1], [-1, -1]),
}


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
@pytest.mark.parametrize("case", IN_BOUNDS, ids=list(IN_BOUNDS))
def test_a_view_inside_its_storage_loads_as_torch_loads_it(tmp_path, case, fmt):
  path = write(tmp_path, checkpoint(fmt, {"w": Rebuild(*IN_BOUNDS[case])}))
  want = torch.load(path, weights_only=True)["w"].numpy()
  got = torch_load(path)["w"].numpy()
  assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_a_legacy_storage_count_must_be_the_declared_one(tmp_path):
  """A negative count made f.read(-n) read the rest of the file as the storage; a different one misread it."""
  obj = pickled({"w": Rebuild(0, [4], [1])}, ("storage", torch.FloatStorage, "0", "cpu", 4, None))
  for count in (-8, 3, 5, 2**62):
    path = write(tmp_path, legacy_checkpoint(obj, storage=struct.pack("<q4f", count, 1, 2, 3, 4)))
    with pytest.raises(ValueError, match="element count is not the 4 its id declared"):
      torch_load(path)
    assert not torch_reads(path)


@pytest.mark.parametrize("keys", [("0", "0"), (), ("1",), "0", ("0", "1")])
def test_legacy_storage_keys_must_name_the_storages_once(tmp_path, keys):
  obj = pickled({"w": Rebuild(0, [4], [1])}, ("storage", torch.FloatStorage, "0", "cpu", 4, None))
  path = write(tmp_path, legacy_checkpoint(obj, keys=keys))
  with pytest.raises(ValueError, match="once each"):
    torch_load(path)


@pytest.mark.parametrize("storage_id, why", [
  (("storage", torch.FloatStorage, "0", "cpu", 5), "holds 16 bytes, its id declares 20"),
  (("storage", torch.FloatStorage, "0", "cpu", -1), "non-negative element count"),
  (("storage", torch.FloatStorage, "1", "cpu", 4), "storage '1' is missing"),
  (("storage", "FloatStorage", "0", "cpu", 4), "not one of torch's storages"),
  (("storage", torch.FloatStorage), "unknown persistent id"),
])
def test_a_storage_id_that_does_not_match_the_archive_is_refused(tmp_path, storage_id, why):
  path = write(tmp_path, zip_checkpoint(pickled({"w": Rebuild(0, [4], [1])}, storage_id)))
  with pytest.raises(ValueError, match=why) as info:
    torch_load(path)
  assert str(path) in str(info.value)


class Big:
  def __init__(self, make, arg):
    self.make, self.arg = make, arg

  def __reduce__(self):
    return (self.make, (self.arg,))


@pytest.mark.parametrize("obj", [Big(bytearray, 2**34), Big(bytes, 2**34), Big(list, range(2**31)),
                                 Big(set, range(2**40))], ids=["bytearray", "bytes", "list", "set"])
def test_a_small_file_cannot_build_a_huge_container(tmp_path, obj):
  """bytearray(2**34) in a 300-byte file would take 16 GiB before anything else is checked."""
  path = write(tmp_path, zip_checkpoint(pickled({"w": Rebuild(0, [4], [1]), "x": obj})))
  with pytest.raises(ValueError, match=r"\(\) of \d+ items in a file of \d+ bytes") as info:
    torch_load(path)
  assert str(path) in str(info.value)


def test_an_object_array_is_refused(tmp_path):
  torch_file = tmp_path / "objects.pt"
  torch.save({"a": np.array([1, "x"], dtype=object)}, torch_file)
  with pytest.raises(ValueError, match="holds Python objects"):
    torch_load(torch_file)


def test_bool_bytes_other_than_0_and_1_load_as_true(tmp_path, refgrad_device):
  """A compiled kernel's bit operations see a bool's byte: 2 ^ 1 is 3, true, where not-true is false."""
  storage = bytes([0, 1, 2, 255])
  path = write(tmp_path, zip_checkpoint(pickled({"b": Rebuild(0, [4], [1])},
                                                ("storage", torch.BoolStorage, "0", "cpu", 4)), storage))
  from refgrad import Tensor
  got = torch_load(path)["b"].to(refgrad_device)
  assert got.numpy().view(np.uint8).tolist() == [0, 1, 1, 1]
  assert (got ^ Tensor([True] * 4, device=refgrad_device)).tolist() == [True, False, False, False]
  st = tmp_path / "b.safetensors"
  st.write_bytes(st_file({"b": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}}, storage))
  assert safe_load(st)["b"].numpy().view(np.uint8).tolist() == [0, 1, 1, 1]


@pytest.mark.parametrize("shape", [[0, 2**63], [0, 2**62, 4], [2**63, 0]])
def test_a_safetensors_shape_no_array_can_have_is_refused_naming_the_tensor(tmp_path, shape):
  """numpy's bare 'Maximum allowed dimension exceeded' named neither the file nor the tensor."""
  path = tmp_path / "empty.safetensors"
  path.write_bytes(st_file({"w": f32(shape, [0, 0])}))
  with pytest.raises(ValueError, match="'w'.*too large for any array") as info:
    safe_load(path)
  assert str(path) in str(info.value)


@pytest.mark.parametrize("damage", ["truncated", "bad crc", "zip bomb header", "two data.pkl", "byteorder garbage"])
def test_a_damaged_archive_is_a_value_error_naming_the_file(tmp_path, damage):
  good = zip_checkpoint(pickled({"w": Rebuild(0, [4], [1])}))
  data = {"truncated": good[:len(good) // 2] + good[-22:],  # the end record survives, the members do not
          "bad crc": good.replace(struct.pack("<4f", 1, 2, 3, 4), struct.pack("<4f", 1, 2, 3, 5)),
          "zip bomb header": _with_claimed_size(good, "archive/data/0", 2**40),
          "two data.pkl": _with_extra_member(good, "archive/data.pkl", pickled({})),
          "byteorder garbage": _with_extra_member(good, "other/x", b"", byteorder=b"middle")}[damage]
  path = write(tmp_path, data)
  with pytest.raises(ValueError) as info, warnings.catch_warnings():
    warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it writes
    torch_load(path)
  assert str(path) in str(info.value)


def _with_claimed_size(data: bytes, name: str, size: int) -> bytes:
  """The archive with `name`'s uncompressed size in the central directory claimed as `size` (zip64 not needed:
  the field is patched to 0xFFFFFFFF-1 when size does not fit)."""
  at = data.rindex(name.encode()) - 46  # the central directory header precedes the name by 46 bytes
  return data[:at + 24] + struct.pack("<I", min(size, 0xFFFFFFFE)) + data[at + 28:]


def _with_extra_member(data: bytes, name: str, content: bytes, byteorder: bytes | None = None) -> bytes:
  out = io.BytesIO(data)
  with warnings.catch_warnings(), zipfile.ZipFile(out, "a") as z:
    warnings.simplefilter("ignore")
    z.writestr(name, content)
  if byteorder is not None:
    return out.getvalue().replace(b"little", byteorder.ljust(6)[:6])
  return out.getvalue()


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_plain_values_load_as_saved_in_every_pickle_protocol(tmp_path, protocol, zip_format):
  """The allow-list names what each protocol pickles plain values with: Python 2's names for builtins in protocol 2
  (range was a stand-in there), numpy's _frombuffer in protocol 5 (a numpy array was a stand-in there)."""
  values = {"range": range(3, 9, 2), "set": {1, 2}, "frozenset": frozenset("ab"), "bytes": b"x\x00\xff",
            "bytearray": bytearray(b"ab"), "complex": complex(1, -2), "slice": slice(1, None, 3), "big": -2**70,
            "deque": deque([1, "a"]), "counter": Counter("aab"), "ordered": OrderedDict(b=1, a=2), "none": None,
            "array": np.arange(6, dtype=np.float16).reshape(2, 3).T, "scalar": np.int64(-3), "text": "é\u2603"}
  path = tmp_path / "values.pt"
  torch.save({**values, "w": torch.tensor([0.5, -0.0])}, path, _use_new_zipfile_serialization=zip_format,
             pickle_protocol=protocol)
  loaded = torch_load(path)
  assert loaded["w"].numpy().tobytes() == np.array([0.5, -0.0], np.float32).tobytes()
  for name, want in values.items():
    got = loaded[name]
    assert type(got) is type(want), name
    if isinstance(want, np.ndarray):
      assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), name
    else:
      assert got == want, name


def test_a_legacy_file_whose_storage_holds_a_zip_end_record_loads(tmp_path):
  """zipfile.is_zipfile finds an end-of-archive record anywhere in a file's last 64 KiB: a legacy checkpoint whose
  weights held those 22 bytes was read as a broken zip archive. torch looks at the first bytes, and so does refgrad."""
  end_record = b"PK\x05\x06" + bytes(18)
  weights = torch.frombuffer(bytearray(end_record + bytes(2)), dtype=torch.float32)  # 24 bytes: 6 floats
  path = tmp_path / "legacy.pt"
  torch.save({"w": weights}, path, _use_new_zipfile_serialization=False)
  assert zipfile.is_zipfile(path)
  assert torch_load(path)["w"].numpy().tobytes() == torch.load(path)["w"].numpy().tobytes()


def test_a_memo_index_far_past_the_pickle_loads_as_torch_loads_it(tmp_path):
  """pickle's C unpickler keeps its memo in an array: LONG_BINPUT 4294967295 in a 300-byte file asked for 32 GiB
  (MemoryError). torch's weights_only unpickler, and now refgrad's, keep a dict."""
  obj = pickled({"w": Rebuild(0, [4], [1])})
  at = obj.index(b"q\x01")  # the first BINPUT after the dict's: make it LONG_BINPUT 2**32 - 1
  path = write(tmp_path, zip_checkpoint(obj[:at] + b"r\xff\xff\xff\xff" + obj[at + 2:]))
  assert torch_load(path)["w"].tolist() == torch.load(path, weights_only=True)["w"].tolist()


def test_a_numpy_state_numpy_never_writes_is_refused(tmp_path):
  """numpy's dtype __setstate__ is C code that trusts its state: a dict made it return NULL without an exception
  (SystemError)."""
  path = tmp_path / "np.pt"
  torch.save({"a": np.arange(3, dtype=np.float32)}, path, pickle_protocol=2)
  raw = path.read_bytes()
  with zipfile.ZipFile(path) as z:
    name = next(n for n in z.namelist() if n.endswith("data.pkl"))
    pkl = z.read(name)
  state = pkl.index(b"K\x03X\x01\x00\x00\x00<")  # the dtype's state tuple: (3, '<', None, ...)
  bad = pkl[:state] + b"}" + pkl[state:]  # a dict where the version was: the state is now a dict's tuple
  out = io.BytesIO()
  with zipfile.ZipFile(io.BytesIO(raw)) as z, zipfile.ZipFile(out, "w") as w:
    for info in z.infolist():
      w.writestr(info.filename, bad if info.filename == name else z.read(info))
  path.write_bytes(out.getvalue())
  with pytest.raises(ValueError, match=str(path)):
    torch_load(path)


def test_an_expanded_tensor_loads_without_copying_its_repeats(tmp_path):
  """A stride-0 axis repeats one element, as torch's expand: the loaded tensor is that element expanded, so a small
  file's 2**31-row tensor costs its stored row. Windows reading a storage more than 64 times over are refused."""
  path = write(tmp_path, checkpoint("zip", {"w": Rebuild(1, [2**31, 2], [0, 1])}))
  loaded = torch_load(path)["w"]
  assert loaded.shape == (2**31, 2) and loaded[-3:].tolist() == torch.load(path)["w"][-3:].tolist()
  path = write(tmp_path, checkpoint("zip", {"w": Rebuild(0, [2**20, 1], [0, 1]), "v": Rebuild(0, [300, 2], [0, 1])}))
  assert torch_load(path)["v"].shape == (300, 2)


def test_overlapping_windows_are_refused_past_64_reads_of_their_storage(tmp_path):
  """20 axes of size 2 and stride 1 reach element 20 of a 32-element storage, reading it 2**20 / 32 times over."""
  storage = struct.pack("<32f", *range(32))
  within = {"w": Rebuild(0, [2] * 5, [1] * 5)}  # 32 elements of a 32-element storage: copied
  path = write(tmp_path, zip_checkpoint(pickled(within, ("storage", torch.FloatStorage, "0", "cpu", 32)), storage))
  assert torch_load(path)["w"].numpy().tobytes() == torch.load(path)["w"].numpy().tobytes()
  path = write(tmp_path, zip_checkpoint(pickled({"w": Rebuild(0, [2] * 20, [1] * 20)},
                                                ("storage", torch.FloatStorage, "0", "cpu", 32)), storage))
  with pytest.raises(ValueError, match="32768 times over"):
    torch_load(path)
  assert torch_reads(path)


def test_legacy_storage_keys_that_are_containers_are_refused(tmp_path):
  """str() of 3000 nested lists as a storage key raised RecursionError."""
  obj = pickled({"w": Rebuild(0, [4], [1])}, ("storage", torch.FloatStorage, "0", "cpu", 4, None))
  first = b"".join(pickle.dumps(p, protocol=2) for p in (LEGACY_MAGIC, 1001, {"little_endian": True}))
  # ["0", [[[...]]]] 3000 lists deep, in opcodes (pickle.dumps itself would recurse that deep)
  keys = b"\x80\x02](X\x01\x00\x00\x000" + b"]" * 3000 + b"a" * 2999 + b"e."
  path = write(tmp_path, first + obj + keys + struct.pack("<q4f", 4, 1, 2, 3, 4))
  with pytest.raises(ValueError, match="once each"):
    torch_load(path)


def test_a_legacy_storage_larger_than_the_file_is_refused(tmp_path):
  """An element count of 2**62 (declared by the id and the section alike) made f.read overflow."""
  obj = pickled({"w": Rebuild(0, [4], [1])}, ("storage", torch.FloatStorage, "0", "cpu", 2**62, None))
  path = write(tmp_path, legacy_checkpoint(obj, storage=struct.pack("<q4f", 2**62, 1, 2, 3, 4)))
  with pytest.raises(ValueError, match="truncated file"):
    torch_load(path)


@pytest.mark.parametrize("field", ["shape", "data_offsets"])
def test_a_json_negative_zero_in_a_safetensors_header_is_refused(tmp_path, field):
  """Python's json reads -0 as the int 0; the safetensors library reads it as the float -0.0 and refuses it."""
  from safetensors import SafetensorError
  from safetensors.numpy import load_file
  entry = {"shape": b"[2]", "data_offsets": b"[0,8]"}
  entry[field] = entry[field].replace(b"[0" if field == "data_offsets" else b"[2", b"[-0" if field ==
                                      "data_offsets" else b"[-0,2")
  header = b'{"w":{"dtype":"F32","shape":' + entry["shape"] + b',"data_offsets":' + entry["data_offsets"] + b"}}"
  path = tmp_path / "z.safetensors"
  path.write_bytes(st_file(None, bytes(8), header))
  with pytest.raises(SafetensorError):
    load_file(str(path))
  with pytest.raises(ValueError, match="'w'"):
    safe_load(path)
