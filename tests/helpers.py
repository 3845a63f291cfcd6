"""Helpers the test files share (`from helpers import ...`): dtype lists, numpy <-> torch conversion, edge values,
one value check used by every test file, the gradient check against torch (grads_match), the error check against
torch (raises_like) and the activations' table.

The oracle is torch (CPU) wherever torch implements the op for the dtype, numpy otherwise (torch has only
storage-level support for uint16, uint32 and uint64).
"""
import contextlib
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import traceback
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual torch alias

from refgrad import Tensor, dtypes
from refgrad.codegen.contract import UnsupportedDTypeError
from refgrad.device import DeviceImpl
from refgrad.testing.edges import edge_values as kit_edge_values

DTYPE_LIST = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
              dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
INT_DTYPES = [d for d in DTYPE_LIST if d.kind in "iu"]
FLOAT_DTYPES = [d for d in DTYPE_LIST if d.kind == "f"]
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES

BF16 = np.dtype(ml_dtypes.bfloat16)
NP_DTYPE = {d: (BF16 if d.name == "bfloat16" else np.dtype(d.name)) for d in DTYPE_LIST}
TORCH_DTYPE = {d: getattr(torch, d.name) for d in DTYPE_LIST if d.name not in ("uint16", "uint32", "uint64")}


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
  """The oracle kit's edge values of dtype dt (refgrad.testing.edges.edge_values: zeros, ones, extremes, NaN,
  infinities, subnormals) and a few ordinary values beside them, as one array."""
  # not edges: ordinary values the value tests' own list had, kept so they still see middling ints whose products
  # overflow the narrow dtypes (100) and negatives off the edges for division, remainders and rounding (-2.5 a tie)
  ordinary = [] if dt == dtypes.bool else [3, 100, -3, -100] if dt.kind in "iu" else [-2.5, -7.0]
  values = kit_edge_values(dt) + ordinary
  if dt.kind in "iu":
    info = np.iinfo(NP_DTYPE[dt])  # an ordinary value outside the dtype (-3 for uint8) is left out
    return np.array(sorted({v for v in values if info.min <= v <= info.max}), dtype=NP_DTYPE[dt])
  return np.array(values, dtype=np.float64).astype(NP_DTYPE[dt])


# Inputs of shape (2, 3, 4) built in different ways, so ops also run on permuted, sliced, flipped, expanded and padded
# views. Each entry builds the view from `make` (ndarray -> tensor) and `pad` (tensor, flat padding -> tensor).
VIEW_BASES = {
  "contiguous": lambda make, pad: make(np.arange(24).reshape(2, 3, 4)),
  "permuted": lambda make, pad: make(np.arange(24).reshape(4, 3, 2)).permute(2, 1, 0),
  "sliced": lambda make, pad: make(np.arange(120).reshape(4, 6, 5))[1:3, ::2, 1:5],
  "flipped": lambda make, pad: make(np.arange(24).reshape(2, 3, 4)).flip(1),
  "expanded": lambda make, pad: make(np.arange(12).reshape(1, 3, 4)).expand(2, 3, 4),
  "padded": lambda make, pad: pad(make(np.arange(12).reshape(2, 3, 2)), (1, 1)),
}


def view_pair(base: str, dtype=dtypes.float32, values: np.ndarray | None = None) -> tuple[Tensor, torch.Tensor]:
  """The same (2, 3, 4) view VIEW_BASES[base] as a refgrad Tensor and as a torch tensor. Its elements are their
  positions in the base (0, 1, 2, ...), or `values` at those positions (at least 120 of them)."""
  def elements(positions):
    return np.asarray(positions if values is None else np.asarray(values)[positions]).astype(NP_DTYPE[dtype])

  def make_refgrad(a):
    return Tensor(elements(a))

  def make_torch(a):
    return to_torch(elements(a))
  return VIEW_BASES[base](make_refgrad, Tensor.pad), VIEW_BASES[base](make_torch, F.pad)


def weighted_backward(fn, arrays: list[np.ndarray], weights_for, make=Tensor) -> list[np.ndarray]:
  """fn's value and d(sum(fn(*arrays) * w))/d(each input) as numpy arrays, with w = weights_for(output shape) in the
  inputs' dtype: in refgrad, or in torch with make=torch.tensor. An input that is not part of the graph gets a zero
  gradient."""
  inputs = [make(a, requires_grad=True) for a in arrays]
  out = fn(*inputs)
  (out * make(np.asarray(weights_for(tuple(out.shape)), dtype=arrays[0].dtype))).sum().backward()
  grads = [t.grad.numpy() if t.grad is not None else np.zeros_like(a) for a, t in zip(arrays, inputs)]
  return [out.detach().numpy(), *grads]


def grads_match(fn_rg, fn_torch, *arrays: np.ndarray, rtol: float = 1e-4) -> None:
  """Gradients of sum(f(*arrays) * w), w fixed random weights (weighted_backward), refgrad against torch autograd:
  the output shapes agree, each gradient has its input's dtype (inputs keep their numpy dtype), and the values agree
  within rtol plus an atol of 1e-6 relative to the largest gradient."""
  def weights_for(shape):
    return np.random.default_rng(1).standard_normal(shape)
  ours = weighted_backward(fn_rg, list(arrays), weights_for)
  theirs = weighted_backward(fn_torch, list(arrays), weights_for, torch.tensor)
  assert ours[0].shape == theirs[0].shape, f"shape {ours[0].shape}, torch {theirs[0].shape}"
  for a, got, want in zip(arrays, ours[1:], theirs[1:]):
    assert got.dtype == a.dtype, f"gradient dtype {got.dtype}, input dtype {a.dtype}"
    scale = float(np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6 * max(scale, 1.0))


def f23() -> Tensor:
  """The input of the error tables: arange(6) as a float32 (2, 3) tensor (tf23: the same in torch)."""
  return Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))


def tf23() -> torch.Tensor:
  return torch.arange(6, dtype=torch.float32).reshape(2, 3)


# The standard classes torch's errors belong to, most specific first (NotImplementedError is a RuntimeError)
TORCH_ERROR_CLASSES = (IndexError, TypeError, NotImplementedError, ValueError, RuntimeError)


def raises_like(ours, theirs=None, exc: type | tuple[type, ...] = Exception,
                fragments=()) -> tuple[BaseException, BaseException | None]:
  """`ours()` (and realizing the tensors it returns) raises an error that is an instance of `exc` (of each class in
  a tuple: one error can be tinygrad's class and torch's) and whose message holds every fragment. `theirs`, the same
  mistake in torch (or numpy), must raise too, and ours must be an instance of the standard class of torch's.
  Returns our error and torch's (None without `theirs`)."""
  with pytest.raises(Exception) as info:
    out = ours()
    for t in out if isinstance(out, (tuple, list)) else (out,):
      if isinstance(t, Tensor):
        t.realize()
  for cls in exc if isinstance(exc, tuple) else (exc,):
    assert isinstance(info.value, cls), f"raised {type(info.value).__name__}, expected {cls.__name__}"
  for fragment in fragments:
    assert fragment in str(info.value), f"{fragment!r} not in message {str(info.value)!r}"
  if theirs is None:
    return info.value, None
  with pytest.raises(Exception) as their_info:
    theirs()
  base = next(e for e in TORCH_ERROR_CLASSES if isinstance(their_info.value, e))
  assert isinstance(info.value, base), f"torch raises {base.__name__}, we raise {type(info.value).__name__}"
  return info.value, their_info.value


# The elementwise activations, each as (refgrad, torch): forward and gradient checks over ordinary inputs
# (test_method_gradients.py) and at every edge point (test_grad_edges.py) read this one table.
ACTIVATIONS = {
  "relu": (lambda x: x.relu(), torch.relu),
  "relu6": (lambda x: x.relu6(), F.relu6),
  "leakyrelu": (lambda x: x.leakyrelu(), F.leaky_relu),
  "leakyrelu 0.2": (lambda x: x.leakyrelu(0.2), lambda x: F.leaky_relu(x, 0.2)),
  "elu": (lambda x: x.elu(), F.elu),
  "elu 0.7": (lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7)),
  "celu": (lambda x: x.celu(), F.celu),
  "celu 0.5": (lambda x: x.celu(0.5), lambda x: F.celu(x, 0.5)),
  "celu 1.3": (lambda x: x.celu(1.3), lambda x: F.celu(x, 1.3)),
  "selu": (lambda x: x.selu(), F.selu),
  "selu 1.2 1.5": (lambda x: x.selu(1.2, 1.5), lambda x: 1.5 * F.elu(x, 1.2)),
  "leaky_relu 0.2": (lambda x: x.leaky_relu(0.2), lambda x: F.leaky_relu(x, 0.2)),
  "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid),
  "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
  "logsigmoid": (lambda x: x.logsigmoid(), F.logsigmoid),
  "silu": (lambda x: x.silu(), F.silu),
  "swish": (lambda x: x.swish(), F.silu),
  "hardswish": (lambda x: x.hardswish(), F.hardswish),
  "gelu tanh": (lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),
  "gelu none": (lambda x: x.gelu("none"), F.gelu),
  "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)),
  "mish": (lambda x: x.mish(), F.mish),
  "softplus": (lambda x: x.softplus(), F.softplus),
  "softplus beta 2": (lambda x: x.softplus(beta=2.0), lambda x: F.softplus(x, beta=2.0)),
  "softsign": (lambda x: x.softsign(), F.softsign),
  "hardtanh": (lambda x: x.hardtanh(), F.hardtanh),
  "hardtanh -0.5 2": (lambda x: x.hardtanh(-0.5, 2.0), lambda x: F.hardtanh(x, -0.5, 2.0)),
  "hardtanh -3 6": (lambda x: x.hardtanh(-3, 6), lambda x: F.hardtanh(x, -3, 6)),
}
# Each activation's forward bound in float32 against torch in float64, in ULP (test_nn_functional.py): the exp- and
# expm1-based ones follow exp's 3 + |x| rule (|x| <= 6 there); piecewise-linear ones are exact.
ACTIVATION_ULP = {
  "relu": 0, "relu6": 0, "leakyrelu": 0, "leakyrelu 0.2": 0, "elu": 10, "elu 0.7": 10, "celu": 10, "celu 0.5": 10,
  "celu 1.3": 10, "selu": 10, "selu 1.2 1.5": 10, "leaky_relu 0.2": 0,
  "hardsigmoid": 2, "sigmoid": 10, "logsigmoid": 12, "silu": 12, "swish": 12,
  "hardswish": 2, "gelu tanh": 16, "gelu none": 4, "quick_gelu": 14, "mish": 20, "softplus": 12,
  "softplus beta 2": 12, "softsign": 1, "hardtanh": 0, "hardtanh -0.5 2": 0, "hardtanh -3 6": 0,
}
assert ACTIVATION_ULP.keys() == ACTIVATIONS.keys()


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


def _campaign_is_under_way(log: str) -> bool:
  """What `refgrad fuzz` wrote to stderr (its plain dashboard) says every worker has reported and programs ran."""
  workers = re.search(r"starting (\d+) worker", log)
  reported = re.findall(r"^\S+: first report at [\d.]+ s, (\d+) program", log, re.M)
  totals = re.findall(r"\] (\d+) programs, ", log)
  return bool(workers) and len(reported) >= int(workers.group(1)) and max(map(int, reported + totals)) > 0


def interrupt_fuzz_under_way(process: subprocess.Popen, patience: float = 300, wait: float = 90) -> tuple[str, str]:
  """Press Ctrl-C on a `refgrad fuzz` process (text pipes, not --quiet) once its campaign is under way (every worker
  reported, programs ran: an event, not a fixed wait a loaded machine could outlast), or after `patience` seconds;
  its stdout and stderr once it ended (within `wait` seconds). It must still be running when Ctrl-C comes."""
  out: list[str] = []
  err: list[str] = []
  readers = [threading.Thread(target=lambda stream, lines: lines.extend(iter(stream.readline, "")), args=pair,
                              daemon=True) for pair in ((process.stdout, out), (process.stderr, err))]
  for reader in readers:
    reader.start()
  deadline = time.monotonic() + patience
  while not _campaign_is_under_way("".join(err)) and time.monotonic() < deadline and process.poll() is None:
    time.sleep(0.2)
  assert process.poll() is None, f"{process.args} stopped before Ctrl-C:\n{''.join(out)}{''.join(err)}"
  process.send_signal(signal.SIGINT)
  process.wait(timeout=wait)
  for reader in readers:
    reader.join(timeout=wait)
  return "".join(out), "".join(err)
