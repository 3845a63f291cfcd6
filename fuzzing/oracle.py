"""The oracle process: writes the seed files, then answers what torch (`torch.load(weights_only=True)`) and the
safetensors package load from a candidate file. It runs apart from the harness, which forks a child per candidate:
a fork of a process holding torch takes about 20 ms, of one without it 8.

Requests and replies are marshal values framed by an 8-byte length (marshal runs no code when it loads).
"""
from __future__ import annotations

import marshal
import os
import struct
import sys
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fuzzing.normal import normal


def send(stream: BinaryIO, value: Any) -> None:
  body = marshal.dumps(value)
  stream.write(struct.pack("<Q", len(body)) + body)
  stream.flush()


def receive(stream: BinaryIO) -> Any:
  """The next framed value; EOFError when the other side is gone."""
  head = stream.read(8)
  if len(head) < 8:
    raise EOFError("the other process closed its pipe")
  (size,) = struct.unpack("<Q", head)
  body = stream.read(size)
  if len(body) < size:
    raise EOFError("the other process closed its pipe mid-message")
  return marshal.loads(body)


def torch_objects() -> dict[str, Any]:
  """What the torch seeds hold: every dtype torch stores (random bits: NaN payloads, -0.0, subnormals), views of
  shared storages at offsets with other strides, 0-d and empty tensors, nested containers with Parameters, the
  dtypes refgrad does not read, and numpy values (which torch's weights_only refuses and refgrad reads)."""
  import torch
  generator = torch.Generator().manual_seed(45)

  def bits(dtype: Any, shape: tuple[int, ...]) -> Any:
    n = int(np.prod(shape)) * dtype.itemsize
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=generator).view(dtype).reshape(shape)
  stored = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16,
            torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64]
  dtypes = {str(dt).removeprefix("torch."): bits(dt, (2, 3)) for dt in stored}
  dtypes["bool"] = torch.tensor([[True, False, True], [False, False, True]])
  dtypes["nan_payloads"] = torch.from_numpy(np.array([0x7FC00001, 0xFFA00000, 0x7F800001, 0x80000000, 1],
                                                     dtype=np.uint32).view(np.float32))
  base = torch.arange(24, dtype=torch.float32)
  views = {"transposed": base.view(4, 6).t(), "strided": base[3:17:2], "narrow": base.view(4, 6)[1:3, 2:5],
           "expanded": torch.tensor([1.0, 2.0, 3.0]).expand(4, 3), "head": base[:6], "tail": base[6:].view(3, 6),
           "scalar": torch.tensor(2.5), "int_scalar": torch.tensor(7), "empty": torch.zeros(0),
           "empty_3d": torch.zeros(2, 0, 3), "empty_at_end": base[24:]}
  noted = torch.arange(6.0).reshape(2, 3).t()
  noted.note = "pickled through _rebuild_from_type_v2"
  weight = torch.nn.Parameter(bits(torch.float32, (3, 2)))
  nested = OrderedDict(
    model=OrderedDict(weight=weight, bias=torch.nn.Parameter(torch.zeros(3)), noted=noted),
    optimizer={"state": {0: {"step": torch.tensor(3.0), "exp_avg": bits(torch.float32, (3, 2))}},
               "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1]}]},
    epoch=3, name="run", flags=[True, False, None], shape=torch.Size([2, 3]), floats=[float("nan"), -0.0, 1e308],
    big=2**70, raw=b"\x00\xff", dtype=torch.float16)
  return {"dtypes": dtypes, "views": views, "nested": nested, "small": {"w": torch.tensor([1.5, -2.0])},
          "unsupported": {"complex": torch.ones(2, dtype=torch.complex64), "float8": torch.ones(2).to(
            torch.float8_e4m3fn)},
          "numpy": {"array": np.arange(4, dtype=np.int16), "scalar": np.float32(2.5), "w": torch.ones(2)}}


def write_seeds(folder: Path) -> list[str]:
  """Seed files written by torch.save (both formats), the safetensors package and refgrad's safe_save; their names
  say their format: zip-*, legacy-*, safetensors-*."""
  import ml_dtypes
  import safetensors.numpy
  import torch

  from refgrad import Tensor
  from refgrad.nn.state import safe_save
  folder.mkdir(parents=True, exist_ok=True)
  for name, obj in torch_objects().items():
    torch.save(obj, folder / f"zip-{name}.pt")
    torch.save(obj, folder / f"legacy-{name}.pt", _use_new_zipfile_serialization=False)
  rng = np.random.default_rng(45)
  arrays = {dt: rng.integers(0, 256, 6 * np.dtype(dt).itemsize, dtype=np.uint8).view(dt).reshape(2, 3)
            for dt in ["u1", "i1", "i2", "u2", "f2", "i4", "u4", "f4", "f8", "i8", "u8"]}
  arrays.update({"bool": np.array([True, False]), "scalar": np.array(1.5, np.float32), "empty": np.zeros((0, 3))})
  safetensors.numpy.save_file(arrays, str(folder / "safetensors-numpy.safetensors"), metadata={"step": "7"})
  safetensors.numpy.save_file({"w": arrays["f4"]}, str(folder / "safetensors-single.safetensors"))
  bf16 = rng.integers(0, 2**16, 4, dtype=np.uint16).view(ml_dtypes.bfloat16)
  safe_save({"bf16": Tensor(bf16), "i64": Tensor(arrays["i8"]), "scalar": Tensor(np.array(2.5, np.float32))},
            folder / "safetensors-refgrad.safetensors", metadata={"by": "refgrad"})
  return sorted(p.name for p in folder.iterdir())


def _torch_load(path: str) -> Any:
  import torch
  return normal(torch.load(path, weights_only=True))


def _safetensors_load(path: str) -> Any:
  """The tensors, by name in sorted order, as safetensors.numpy loads them (through safetensors.torch for a dtype
  numpy lacks, bfloat16: numpy's loader raises KeyError for it after the same checks)."""
  import safetensors.numpy
  import safetensors.torch
  data = Path(path).read_bytes()
  try:
    loaded = safetensors.numpy.load(data)
  except KeyError:
    return normal(dict(sorted(safetensors.torch.load(data).items())))
  return ("dict", tuple((("str", k), ("tensor", a.dtype.name, a.shape, a.tobytes()))
                        for k, a in sorted(loaded.items())))


def _safetensors_metadata(path: str) -> Any:
  from safetensors import safe_open
  with safe_open(path, framework="numpy") as f:
    return f.metadata()


ORACLES = {"torch_load": _torch_load, "safe_load": _safetensors_load, "safe_load_metadata": _safetensors_metadata}


def answer(reader: str, path: str) -> dict[str, Any]:
  """{"loaded": True, "value": normalized} or {"loaded": False, "error": what the oracle raised}."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      return {"loaded": True, "value": ORACLES[reader](path)}
  except Exception as e:  # the oracle refusing the file, in whatever words: the harness only needs that it refused
    return {"loaded": False, "error": f"{type(e).__name__}: {e}"[:300]}


def serve(seed_dir: str) -> None:
  """Write the seeds, send their names, then answer (reader, path) requests until stdin closes. Stray prints of
  torch or numpy go to stderr: stdout carries only the framed replies."""
  replies = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  send(replies, write_seeds(Path(seed_dir)))
  while True:
    try:
      reader, path = receive(sys.stdin.buffer)
    except EOFError:
      return
    send(replies, answer(reader, path))


if __name__ == "__main__":
  serve(sys.argv[1])
