"""safe_load and safe_save against the safetensors package, the format's own implementation: every malformed file
one refuses, the other refuses too (ValueError naming the file and the tensor), and valid files of every shared dtype
cross between the two with their exact bytes."""
import json
import os
import pickle
import struct

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as st_numpy
from safetensors import SafetensorError, safe_open

from refgrad import Tensor
from refgrad.nn.state import safe_load, safe_save

RNG = np.random.default_rng(27)


def st_file(header, data: bytes = b"", raw: bytes | None = None) -> bytes:
  """A safetensors file from a header (a JSON value, or its raw bytes) and the data after it."""
  text = json.dumps(header).encode() if raw is None else raw
  text += b" " * (-len(text) % 8)
  return struct.pack("<Q", len(text)) + text + data


def f32(shape, offsets) -> dict:
  return {"dtype": "F32", "shape": shape, "data_offsets": offsets}


EIGHT = bytes(range(8))
ONE_TENSOR = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'  # of EIGHT
DEEP = b'{"w":' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def with_extra_field(value: bytes) -> bytes:
  """A valid one-tensor file whose entry has an extra field (ignored by both readers) holding `value`."""
  return st_file(None, EIGHT, b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":' + value + b"}}")


def nested(levels: int) -> bytes:
  return b"[" * levels + b"]" * levels
# (case, file bytes, the tensor the message must name, or None for a file-level fault)
MALFORMED = [
  ("negative offset: the header's own bytes as weights", st_file({"w": f32([4], [-16, 0])}, EIGHT * 2), "w"),
  ("offset past the end", st_file({"w": f32([2], [8, 16])}, EIGHT), "w"),
  ("end before begin", st_file({"w": f32([0], [8, 0])}, EIGHT), "w"),
  ("float offsets", st_file({"w": f32([2], [0.0, 8.0])}, EIGHT), "w"),
  ("string offsets", st_file({"w": f32([2], ["0", "8"])}, EIGHT), "w"),
  ("three offsets", st_file({"w": f32([2], [0, 8, 8])}, EIGHT), "w"),
  ("offsets not a list", st_file({"w": f32([2], None)}, EIGHT), "w"),
  ("offset beyond u64", st_file({"w": f32([2], [0, 2**70])}, EIGHT), "w"),
  ("length not shape*itemsize", st_file({"w": f32([3], [0, 8])}, EIGHT), "w"),
  ("shape product overflows u64", st_file({"w": f32([2**62, 2**62], [0, 8])}, EIGHT), "w"),
  ("overlapping ranges", st_file({"w": f32([2], [0, 8]), "v": f32([1], [4, 8])}, EIGHT), "v"),
  ("two tensors on one range", st_file({"w": f32([2], [0, 8]), "v": f32([2], [0, 8])}, EIGHT), "w"),
  ("a gap before a tensor", st_file({"w": f32([1], [4, 8])}, EIGHT), "w"),
  ("trailing bytes after the last tensor", st_file({"w": f32([1], [0, 4])}, EIGHT), "w"),
  ("duplicate key, different entries",
   st_file(None, EIGHT, b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                        b'"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'), "w"),
  ("duplicate field inside an entry",
   st_file(None, EIGHT, b'{"w":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}}'), "dtype"),
  ("duplicate __metadata__", st_file(None, b"", b'{"__metadata__":{},"__metadata__":{"a":"b"}}'), "__metadata__"),
  ("header length larger than the file", struct.pack("<Q", 1000) + b"{}", None),
  ("header length over the format's 100 MB limit", struct.pack("<Q", 2**40) + b"{}", None),
  ("shorter than the length field", b"abc", None),
  ("non-JSON header", st_file(None, EIGHT, b"{not json}"), None),
  ("header not UTF-8", st_file(None, b"", b'{"\xff":1}'), None),
  ("JSON then garbage", st_file(None, EIGHT, ONE_TENSOR + b"xx"), None),
  ("empty header", struct.pack("<Q", 0), None),
  ("header a list", st_file([1, 2]), None),
  ("header a string", st_file("w"), None),
  ("entry not an object", st_file({"w": [1]}, EIGHT), "w"),
  ("entry missing its shape", st_file({"w": {"dtype": "F32", "data_offsets": [0, 8]}}, EIGHT), "w"),
  ("unknown dtype", st_file({"w": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, EIGHT), "w"),
  ("dtype spelled in lower case", st_file({"w": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}}, EIGHT), "w"),
  ("dtype not a string", st_file({"w": {"dtype": 1, "shape": [2], "data_offsets": [0, 8]}}, EIGHT), "w"),
  ("dtype a list", st_file({"w": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}, EIGHT), "w"),
  ("negative shape entry", st_file({"w": f32([-2], [0, 8])}, EIGHT), "w"),
  ("float shape entry", st_file({"w": f32([2.0], [0, 8])}, EIGHT), "w"),
  ("boolean shape entry", st_file({"w": f32([True], [0, 4])}, EIGHT[:4]), "w"),
  ("shape not a list", st_file({"w": f32(2, [0, 8])}, EIGHT), "w"),
  ("deeply nested header", st_file(None, b"", DEEP), None),
  ("128 levels deep, in an ignored field", with_extra_field(nested(126)), None),  # 2 objects + 126 arrays
  ("NaN in an ignored field", with_extra_field(b"NaN"), None),
  ("Infinity in an ignored field", with_extra_field(b"-Infinity"), None),
  ("__metadata__ with an int value", st_file({"__metadata__": {"epoch": 1}}), "__metadata__"),
  ("__metadata__ a list", st_file({"__metadata__": ["a"]}), "__metadata__"),
  ("__metadata__ shaped like a tensor", st_file({"__metadata__": f32([2], [0, 8])}, EIGHT), "__metadata__"),
]


REASONS = {  # what refgrad's message says, per case
  "negative offset: the header's own bytes as weights": r"data_offsets .* non-negative integers",
  "offset past the end": r"needs bytes \[8, 16\) of 8: file truncated",
  "end before begin": r"end before they begin",
  "float offsets": r"data_offsets .* non-negative integers",
  "string offsets": r"data_offsets .* non-negative integers",
  "three offsets": r"is not \[begin, end\]",
  "offsets not a list": r"is not \[begin, end\]",
  "offset beyond u64": r"data_offsets .* non-negative integers",
  "length not shape*itemsize": r"do not hold shape \(3,\) of F32",
  "shape product overflows u64": r"do not hold shape",
  "overlapping ranges": r"overlap tensor 'w'",
  "two tensors on one range": r"overlap tensor 'w'",
  "a gap before a tensor": r"leaving bytes \[0, 4\) to no tensor",
  "trailing bytes after the last tensor": r"bytes \[4, 8\) after tensor 'w' belong to no tensor",
  "duplicate key, different entries": r"key 'w' appears twice",
  "duplicate field inside an entry": r"key 'dtype' appears twice",
  "duplicate __metadata__": r"key '__metadata__' appears twice",
  "header length larger than the file": r"header says 1000 bytes, file has 2",
  "header length over the format's 100 MB limit": r"over the format's limit",
  "shorter than the length field": r"not a safetensors file",
  "non-JSON header": r"corrupt safetensors header",
  "header not UTF-8": r"corrupt safetensors header: 'utf-8' codec",
  "JSON then garbage": r"corrupt safetensors header: Extra data",
  "empty header": r"corrupt safetensors header",
  "header a list": r"expected a JSON object, got list",
  "header a string": r"expected a JSON object, got str",
  "entry not an object": r"not a JSON object",
  "entry missing its shape": r"missing shape",
  "unknown dtype": r"dtype 'F33' is not one refgrad reads",
  "dtype spelled in lower case": r"dtype 'f32' is not one refgrad reads",
  "dtype not a string": r"dtype 1 is not one refgrad reads",
  "dtype a list": r"dtype \['F32'\] is not one refgrad reads",
  "negative shape entry": r"shape \[-2\] is not a list of non-negative integers",
  "float shape entry": r"shape \[2.0\] is not",
  "boolean shape entry": r"shape \[True\] is not",
  "shape not a list": r"shape 2 is not a list",
  "deeply nested header": r"nested too deeply",
  "128 levels deep, in an ignored field": r"nested more than 127 levels deep",
  "NaN in an ignored field": r"NaN is not JSON",
  "Infinity in an ignored field": r"-Infinity is not JSON",
  "__metadata__ with an int value": r"'__metadata__' must map strings to strings",
  "__metadata__ a list": r"'__metadata__' must map strings to strings",
  "__metadata__ shaped like a tensor": r"'__metadata__' must map strings to strings",
}


@pytest.mark.parametrize("case, data, tensor", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_malformed_file_is_refused_by_refgrad_and_by_safetensors(tmp_path, case, data, tensor):
  path = tmp_path / "model.safetensors"
  path.write_bytes(data)
  with pytest.raises(SafetensorError):
    st_numpy.load_file(str(path))
  with pytest.raises(SafetensorError):
    safe_open(str(path), "np")
  with pytest.raises(ValueError, match=REASONS[case]) as info:
    safe_load(path)
  assert str(path) in str(info.value)
  if tensor is not None:
    assert repr(tensor) in str(info.value)


def test_a_key_given_twice_is_refused_even_when_both_entries_agree(tmp_path):
  # stricter than the safetensors package, which keeps the last: which of two entries was meant is not knowable
  path = tmp_path / "twice.safetensors"
  entry = b'{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
  path.write_bytes(st_file(None, EIGHT, b'{"w":' + entry + b',"w":' + entry + b"}"))
  with pytest.raises(ValueError, match="key 'w' appears twice"):
    safe_load(path)


# every dtype both refgrad and the safetensors package read, with values spanning each dtype's bit patterns
SHARED_DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
                 np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
SHAPES = [(2, 3), (), (0,), (3, 0, 2), (7,)]


def random_arrays() -> dict[str, np.ndarray]:
  """One array per (dtype, shape): random bytes (NaN payloads and infinities included), bools 0 or 1."""
  arrays = {}
  for dt in SHARED_DTYPES:
    for shape in SHAPES:
      count, itemsize = int(np.prod(shape)), np.dtype(dt).itemsize
      if dt is np.bool_:
        raw = RNG.integers(0, 2, count, dtype=np.uint8).tobytes()
      else:
        raw = RNG.integers(0, 256, count * itemsize, dtype=np.uint8).tobytes()
      arrays[f"{np.dtype(dt).name}.{'x'.join(map(str, shape)) or 'scalar'}"] = np.frombuffer(raw, dt).reshape(shape)
  return arrays


def assert_same_bits(got: np.ndarray, want: np.ndarray, name: str) -> None:
  assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, not {want.dtype}"
  assert got.shape == want.shape, f"{name}: shape {got.shape}, not {want.shape}"
  assert got.tobytes() == want.tobytes(), f"{name}: values differ"


def test_a_file_written_by_safetensors_loads_with_the_same_values(tmp_path, refgrad_device):
  arrays = random_arrays()
  path = tmp_path / "theirs.safetensors"
  st_numpy.save_file(arrays, str(path), metadata={"format": "np"})
  loaded = safe_load(path, device=refgrad_device)
  assert loaded.keys() == arrays.keys()
  for name, want in arrays.items():
    assert loaded[name].device.split(":")[0] == refgrad_device.split(":")[0]
    assert_same_bits(loaded[name].numpy(), want, name)


def test_a_file_written_by_refgrad_loads_in_safetensors_with_the_same_values(tmp_path, refgrad_device):
  arrays = random_arrays()
  path = tmp_path / "ours.safetensors"
  safe_save({name: Tensor(a, device=refgrad_device) for name, a in arrays.items()}, path, metadata={"step": "12"})
  loaded = st_numpy.load_file(str(path))
  assert loaded.keys() == arrays.keys()
  for name, want in arrays.items():
    assert_same_bits(loaded[name], want, name)
  with safe_open(str(path), "np") as f:
    assert f.metadata() == {"step": "12"}


@pytest.mark.parametrize("metadata", [{"epoch": 3}, {"lr": 0.1}, {"tags": ["a"]}, {1: "a"}, {"none": None}])
def test_safe_save_refuses_metadata_that_is_not_strings(tmp_path, metadata):
  path = tmp_path / "m.safetensors"
  with pytest.raises(TypeError):  # the safetensors package refuses the same metadata
    st_numpy.save_file({"w": np.zeros(2, np.float32)}, str(tmp_path / "theirs.safetensors"), metadata=metadata)
  with pytest.raises(ValueError, match="metadata .* is not a string to a string"):
    safe_save({"w": Tensor.zeros(2)}, path, metadata=metadata)
  assert not path.exists()


def test_safe_save_refuses_a_tensor_named_like_the_metadata_entry(tmp_path):
  path = tmp_path / "m.safetensors"
  with pytest.raises(ValueError, match="'__metadata__' cannot name a tensor"):
    safe_save({"__metadata__": Tensor.zeros(2)}, path)
  with pytest.raises(ValueError, match="1 cannot name a tensor"):
    safe_save({1: Tensor.zeros(2)}, path)
  with pytest.raises(TypeError, match="'w' is a ndarray, not a Tensor"):
    safe_save({"w": np.zeros(2)}, path)
  assert not path.exists()


ACCEPTED = [
  ("null __metadata__, an extra field", st_file({"__metadata__": None, "w": {**f32([2], [0, 8]), "note": 1}}, EIGHT)),
  ("127 levels deep, in an ignored field", with_extra_field(nested(125))),
  ("whitespace before the header", st_file(None, EIGHT, b" " + ONE_TENSOR)),
  ("data not 8-byte aligned", struct.pack("<Q", len(ONE_TENSOR)) + ONE_TENSOR + EIGHT),
]


@pytest.mark.parametrize("case, data", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_what_safetensors_accepts_at_the_edges_refgrad_accepts_with_the_same_values(tmp_path, case, data):
  path = tmp_path / "edge.safetensors"
  path.write_bytes(data)
  want = st_numpy.load_file(str(path))["w"]
  np.testing.assert_array_equal(want.view(np.uint8), np.frombuffer(EIGHT, np.uint8))
  got = safe_load(path)["w"].numpy()
  assert got.tobytes() == want.tobytes()


def torch_saved_objects():
  """A checkpoint as torch users write one: a state dict of every dtype torch.save stores (views of one storage,
  transposes, expands, a permute, 0-d, empty, a Parameter, a tensor with a Python attribute) inside other
  containers."""
  import torch
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6) - 11.5
  g = torch.Generator().manual_seed(3)
  state = {
    "f32": torch.randn(3, 4, generator=g), "transposed": base.t(), "strided": base[1:3, ::2], "row": base[2],
    "expanded": torch.ones(3, 1).expand(3, 4), "permuted": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1),
    "f16": torch.randn(5, generator=g).half(), "bf16": torch.randn(2, 3, generator=g).bfloat16(),
    "f64": torch.tensor([1e300, -0.0]), "bool": torch.tensor([True, False, True]), "i8": torch.tensor([-128, 7]).char(),
    "u8": torch.tensor([0, 255], dtype=torch.uint8), "i16": torch.tensor([-3], dtype=torch.int16),
    "i32": torch.tensor([1, -1], dtype=torch.int32), "i64": torch.tensor([-2**62, 5]),
    "u16": torch.tensor([65535], dtype=torch.uint16), "u32": torch.tensor([2**32 - 1], dtype=torch.uint32),
    "u64": torch.tensor([2**63 + 3], dtype=torch.uint64), "zero_d": torch.tensor(3.5), "empty": torch.zeros(0, 3),
    "param": torch.nn.Parameter(torch.full((2,), 0.25)),
  }
  state["with_attribute"] = torch.arange(6.0).reshape(2, 3).t()
  state["with_attribute"].note = "pickled through _rebuild_from_type_v2"
  return {"model": state, "epoch": 3, "history": [torch.ones(2), (torch.zeros(1), "note")]}


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_reads_what_torch_save_wrote(tmp_path, refgrad_device, zip_format):
  """torch_load was missing (tinygrad's nn.state has it): every tensor has torch's dtype, shape and bits, views of a
  shared storage read their own elements, and the containers around them come back as they were saved."""
  import torch

  from refgrad.nn.state import torch_load
  saved = torch_saved_objects()
  path = tmp_path / "checkpoint.pt"
  torch.save(saved, path, _use_new_zipfile_serialization=zip_format)
  loaded = torch_load(path)
  assert loaded["epoch"] == 3 and loaded["model"].keys() == saved["model"].keys()
  for name, want in saved["model"].items():
    got = loaded["model"][name]
    assert isinstance(got, Tensor) and got.dtype.name == str(want.dtype).removeprefix("torch."), name
    want = want.detach().contiguous()
    want_np = want.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if want.dtype == torch.bfloat16 else want.numpy()
    assert_same_bits(got.numpy(), want_np, name)
  ones, (zero, note) = loaded["history"]
  assert ones.tolist() == [1.0, 1.0] and zero.tolist() == [0.0] and note == "note"


def test_a_torch_state_dict_loads_into_the_layer(tmp_path, refgrad_device):
  import torch

  from refgrad import nn
  from refgrad.nn.state import load_state_dict, torch_load
  theirs = torch.nn.Linear(3, 2)
  torch.save(theirs.state_dict(), tmp_path / "linear.pt")
  ours = nn.Linear(3, 2)
  load_state_dict(ours, torch_load(tmp_path / "linear.pt"))
  x = RNG.standard_normal((4, 3)).astype(np.float32)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("content", [b"", bytes(range(7, 107)), pickle.dumps({"a": 1})],
                         ids=["empty", "noise", "pickle"])
def test_torch_load_refuses_what_torch_load_refuses(tmp_path, content):
  """A file torch.load cannot read is refused with torch's exception types (or ValueError naming the file)."""
  from refgrad.nn.state import torch_load
  path = tmp_path / "bad.pt"
  path.write_bytes(content)
  with pytest.raises((EOFError, pickle.UnpicklingError, ValueError)):
    torch_load(path)


class _Runs:
  def __reduce__(self):
    return (exec, ("import os; os.environ['REFGRAD_TORCH_LOAD_RAN'] = '1'",))


class _LoadsALibrary:
  def __reduce__(self):  # numpy's own module, but a function that loads any shared library
    return (np.ctypeslib.load_library, ("libc.so.6", "/lib/x86_64-linux-gnu"))


class _ReadsAFile:
  def __reduce__(self):
    return (np.fromfile, ("/proc/self/environ", np.uint8))


def test_torch_load_calls_no_function_a_checkpoint_names(tmp_path, monkeypatch):
  """Only torch's rebuilders, containers, plain builtins and numpy's array and scalar rebuilders are looked up, by
  exact name: a checkpoint naming exec, or another function of numpy's, gets a stand-in object, and its tensors and
  numpy values still load."""
  import torch

  from refgrad.nn.state import torch_load
  monkeypatch.delenv("REFGRAD_TORCH_LOAD_RAN", raising=False)
  checkpoint = {"w": torch.tensor([1.5]), "hook": _Runs(), "kept": {1, 2}, "library": _LoadsALibrary(),
                "file": _ReadsAFile(), "array": np.arange(3, dtype=np.int16), "scalar": np.float32(2.5)}
  torch.save(checkpoint, tmp_path / "c.pt")
  loaded = torch_load(tmp_path / "c.pt")
  assert "REFGRAD_TORCH_LOAD_RAN" not in os.environ
  assert loaded["w"].tolist() == [1.5] and loaded["kept"] == {1, 2} and not isinstance(loaded["hook"], dict)
  assert type(loaded["library"]).__module__ == type(loaded["file"]).__module__ == "refgrad.nn.torch_file"
  np.testing.assert_array_equal(loaded["array"], checkpoint["array"])
  assert loaded["array"].dtype == np.int16 and loaded["scalar"] == np.float32(2.5)


def test_safe_save_refuses_a_symbolic_shape_naming_it(tmp_path):
  """A tensor of symbolic shape raised json's 'Object of type UOp is not JSON serializable'."""
  from refgrad import Variable
  n = Variable("n", 1, 4).bind(2)
  with pytest.raises(ValueError, match="tensor 'rows' has symbolic shape"):
    safe_save({"rows": Tensor.ones(4, 3)[:n]}, tmp_path / "s.safetensors")
  assert not (tmp_path / "s.safetensors").exists()


def test_safe_load_metadata_reads_the_header_safetensors_wrote(tmp_path):
  """tinygrad's safe_load_metadata (missing): the file's bytes, where the data starts, and the header holding the
  metadata, as the safetensors package wrote them."""
  from refgrad.nn.state import safe_load_metadata
  path = tmp_path / "m.safetensors"
  st_numpy.save_file({"w": np.arange(3, dtype=np.int16)}, str(path), metadata={"step": "7"})
  data, start, header = safe_load_metadata(path)
  raw = path.read_bytes()
  assert data.dtype.name == "uint8" and data.numpy().tobytes() == raw
  assert start == 8 + struct.unpack("<Q", raw[:8])[0] and raw[start:] == np.arange(3, dtype=np.int16).tobytes()
  assert header["__metadata__"] == {"step": "7"} and header["w"]["shape"] == [3] and header["w"]["dtype"] == "I16"
