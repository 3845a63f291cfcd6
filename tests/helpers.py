"""Helpers the test files share (`from helpers import ...`): dtype lists, numpy <-> torch conversion, edge values,
and one value check used by every test file.

The oracle is torch (CPU) wherever torch implements the op for the dtype, numpy otherwise (torch has only
storage-level support for uint16, uint32 and uint64).
"""
import contextlib
import shutil
import socket
import subprocess
import time
import traceback
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import torch

from refgrad import Tensor, dtypes
from refgrad.codegen.contract import UnsupportedDTypeError
from refgrad.device import DeviceImpl

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
              dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
INT_DTYPES = [d for d in ALL_DTYPES if d.kind in "iu"]
FLOAT_DTYPES = [d for d in ALL_DTYPES if d.kind == "f"]
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES

BF16 = np.dtype(ml_dtypes.bfloat16)
NP_DTYPE = {d: (BF16 if d.name == "bfloat16" else np.dtype(d.name)) for d in ALL_DTYPES}
TORCH_DTYPE = {d: getattr(torch, d.name) for d in ALL_DTYPES if d.name not in ("uint16", "uint32", "uint64")}


def declared_unsupported(error: BaseException) -> bool:
  """True if `error` is the device's declared-capabilities check refusing a kernel: an UnsupportedDTypeError raised
  by DeviceImpl.check_dtypes, which raises only for dtypes outside the device's Capabilities.dtypes. The same error
  raised anywhere else (a compiler or runtime giving up on a dtype its device claims) is a failure."""
  frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
  return isinstance(error, UnsupportedDTypeError) and bool(frames) and \
    frames[-1].f_code is DeviceImpl.check_dtypes.__code__


def ids(dts):
  return [d.name for d in dts]


def torch_ok(*dts) -> bool:
  """True if torch computes on all these dtypes (not just stores them)."""
  return all(d in TORCH_DTYPE for d in dts)


def to_torch(a: np.ndarray) -> torch.Tensor:
  a = np.asarray(a)
  if a.dtype == BF16:
    return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
  return torch.from_numpy(np.array(a))


def to_numpy(x) -> np.ndarray:
  if isinstance(x, torch.Tensor):
    return x.float().numpy().astype(BF16) if x.dtype == torch.bfloat16 else x.numpy()
  return np.asarray(x)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Representable values between a and b of one float dtype (+0 and -0 are one point, inf is past the max)."""
  bits = a.dtype.itemsize * 8
  ints = {16: np.int16, 32: np.int32, 64: np.int64}[bits]
  mag_mask = (1 << (bits - 1)) - 1

  def ordered(x):
    return [-(v & mag_mask) if v < 0 else v for v in np.ascontiguousarray(x).view(ints).ravel().tolist()]
  return np.array([abs(p - q) for p, q in zip(ordered(a), ordered(b))], dtype=object).reshape(a.shape)


def check(got: Tensor, want, dtype=None, ulp=0, atol=0.0, mask=None, signed_zeros: bool = True):
  """got has want's shape, the expected dtype and want's values (want: torch tensor, numpy array or list).

  Ints and bools must match exactly. Floats must match bit for bit (all NaNs equal; -0.0 != +0.0 unless
  signed_zeros=False) unless `ulp` or `atol` (numbers, or arrays with a bound per lane) allow slack. `mask`
  (a broadcastable bool array) picks the lanes compared.
  """
  want = to_numpy(want)
  if dtype is not None:
    assert got.dtype == dtype, f"dtype {got.dtype}, expected {dtype}"
    want = want.astype(NP_DTYPE[dtype]) if want.dtype != NP_DTYPE[dtype] else want
  g = got.numpy()
  assert g.dtype == want.dtype, f"numpy dtype {g.dtype}, expected {want.dtype}"
  assert g.shape == want.shape, f"shape {g.shape}, expected {want.shape}"
  keep = np.ones(g.shape, bool) if mask is None else np.broadcast_to(mask, g.shape)
  if g.dtype.kind != "f" and g.dtype != BF16:
    bad = (g != want) & keep
  else:
    g64, w64 = g.astype(np.float64), want.astype(np.float64)
    if not signed_zeros:
      g64, w64 = g64 + 0.0, w64 + 0.0
    nan_g, nan_w = np.isnan(g64), np.isnan(w64)
    same = (np.signbit(g64) == np.signbit(w64)) & (g64 == w64)
    if np.any(ulp):
      same |= ulp_distance(g, want) <= ulp
    if np.any(atol):
      same |= np.abs(g64 - w64) <= atol
    bad = ((nan_g != nan_w) | (~nan_g & ~nan_w & ~same)) & keep
  if bad.any():
    where = np.argwhere(bad)[:8]
    lanes = ", ".join(f"{tuple(int(i) for i in w)}: got {g[tuple(w)]!r} want {want[tuple(w)]!r}" for w in where)
    raise AssertionError(f"{int(bad.sum())} of {bad.size} lanes differ ({lanes})")


def edge_values(dt) -> np.ndarray:
  """A small array of interesting values of dtype dt: zeros, ones, extremes, NaN and infinities."""
  if dt == dtypes.bool:
    return np.array([False, True])
  if dt.kind in "iu":
    info = np.iinfo(NP_DTYPE[dt])
    vals = [0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min]
    if dt.kind == "i":
      vals += [-1, -2, -3, -7, -100, info.min + 1]
    return np.array(sorted({v for v in vals if info.min <= v <= info.max}), dtype=NP_DTYPE[dt])
  big = float(ml_dtypes.finfo(NP_DTYPE[dt]).max)
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, -7.0, 100.0, 1e-3, big, -big, np.inf, -np.inf, np.nan]
  return np.array(vals, dtype=np.float64).astype(NP_DTYPE[dt])


def training_step(model, optimizer):
  """One full-batch cross-entropy training step of model, the function a test runs plain or jitted."""
  def step(x, y):
    optimizer.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    optimizer.step()
    return loss
  return step


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@contextlib.contextmanager
def local_redis() -> Iterator[str | None]:
  """A redis-server of the caller's own on 127.0.0.1 (nothing saved to disk), stopped at the end; its URL, or None
  when redis-server or the redis client is not installed (.ci/run installs both)."""
  server = shutil.which("redis-server")
  try:
    import redis
  except ImportError:
    server = None
  if server is None:
    yield None
    return
  port = free_port()
  process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL)
  client = redis.Redis(port=port)
  for _ in range(100):
    try:
      client.ping()
      break
    except redis.ConnectionError:
      time.sleep(0.05)
  try:
    yield f"redis://127.0.0.1:{port}"
  finally:
    process.kill()
    process.wait()
