"""The CNN training step's kernels under the CPU heuristic (codegen/opt.py, tile_opts): the convolutions get
three-axis tiles whose every amount the random opt draws reach, and the tiled kernels give what the reference gives,
bit for bit (UPCAST and THREAD keep each output's order of operations), at edge values and in a training step."""
import numpy as np
import pytest

from examples import cnn
from refgrad import Device, Tensor
from refgrad.codegen.contract import Opt
from refgrad.codegen.opt import TILE_OUTPUTS, default_opts, heuristic_amounts
from refgrad.codegen.pipeline import lowered_kernel
from refgrad.nn.optim import Adam
from refgrad.nn.state import get_parameters
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.uop import prod


def conv_step_kernels() -> list:
  """The kernels of a small CNN's forward and backward (two convolutions, ReLU, max pooling), as scheduled ASTs."""
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((24, 1, 14, 14)).astype(np.float32))
  w1 = Tensor(rng.standard_normal((8, 1, 3, 3)).astype(np.float32)).requires_grad_()
  w2 = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32)).requires_grad_()
  loss = x.conv2d(w1).relu().max_pool2d(2).conv2d(w2).relu().max_pool2d(2).sum()
  return [item.ast for item in Tensor.schedule(*loss.gradient(w1, w2))]


def test_a_convolution_forward_tiles_its_row_and_output_channels():
  """The input row (contiguous along x) is shared by a tile of output channels; a 4x4 spatial tile, the old choice,
  ran the CNN's second convolution 10x slower on CLANG."""
  rng = np.random.default_rng(1)
  x = Tensor(rng.standard_normal((192, 8, 6, 6)).astype(np.float32))
  w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
  opts = default_opts(*lowered_kernel(x.conv2d(w).schedule()[-1].ast), 8, threads=2)
  # output (batch, channel, y, x): all of x, 4 channels, 2 rows, threads over the batch
  assert opts == (Opt("UPCAST", 3, 4), Opt("UPCAST", 1, 4), Opt("UPCAST", 2, 2), Opt("THREAD", 0, 2))


def test_heuristic_tiles_stay_within_the_budget_and_the_random_draws():
  """Every UPCAST amount is at least 2 and one the random opt lists draw (so `refgrad check` and `fuzz --opts` prove
  the opts the heuristic applies), a reduction's tile at most TILE_OUTPUTS outputs."""
  tiled = 0
  for ast in conv_step_kernels():
    sink, shape = lowered_kernel(ast)
    upcasts = [opt for opt in default_opts(sink, shape, 8, threads=2) if opt.kind == "UPCAST"]
    assert all(opt.amount >= 2 and opt.amount in heuristic_amounts(8, 2) for opt in upcasts)
    assert prod(opt.amount for opt in upcasts) <= TILE_OUTPUTS
    tiled += len(upcasts) == 3
  assert tiled >= 3  # the forward and both gradients of the convolutions


def edge_images() -> np.ndarray:
  """Images holding 0, -0.0, ties inside pooling windows, a realized-looking constant block and large values."""
  rng = np.random.default_rng(2)
  images = rng.standard_normal((12, 1, 14, 14)).astype(np.float32)
  images[0] = 0.0
  images[1] = -0.0
  images[2, 0, ::2, ::2] = images[2, 0, 1::2, 1::2] = 1.5  # ties for the max
  images[3] *= np.float32(1e30)
  images[4, 0, :7] = -0.0
  return images


@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_the_tiled_convolution_step_matches_the_reference(device):
  """Forward and gradients of a two-convolution network, kernel by kernel against PYTHON with the device's own
  heuristic opts (check_against_reference with no opts chooser)."""
  if device not in Device.available():
    pytest.skip(f"{device} is not available here")
  rng = np.random.default_rng(3)
  w1, w2 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32), rng.standard_normal((16, 8, 3, 3)).astype(np.float32)

  def step(x, a, b):
    a.requires_grad_()
    b.requires_grad_()
    out = x.conv2d(a).relu().max_pool2d(2).conv2d(b).relu().max_pool2d(2)
    return (out, *out.sum().gradient(a, b))
  report = check_against_reference(step, edge_images(), w1, w2, device=device)
  assert report.kernels and all(kernel.comparison.ok for kernel in report.kernels)


def cnn_losses(steps: int) -> list[float]:
  """The losses of the first `steps` Adam steps of examples/cnn.py on CLANG (48 images)."""
  Device.DEFAULT = "CLANG"
  Tensor.manual_seed(0)
  images, labels = cnn.shapes(48)
  model, x, y = cnn.CNN(), Tensor(images), Tensor(labels)
  opt = Adam(get_parameters(model), lr=0.01)

  def step() -> float:
    opt.zero_grad()
    (loss := model(x).sparse_categorical_crossentropy(y)).backward()
    opt.step()
    return loss.item()
  with Tensor.train():
    return [step() for _ in range(steps)]


def test_cnn_training_losses_are_the_same_bits_with_and_without_the_heuristic(monkeypatch):
  """The heuristic's tiles and threads change no bit: the CNN's losses equal those of unoptimized kernels
  (REFGRAD_OPTS="") step for step."""
  if "CLANG" not in Device.available():
    pytest.skip("CLANG is not available here")
  default = Device.DEFAULT
  try:
    tiled = cnn_losses(4)
    monkeypatch.setenv("REFGRAD_OPTS", "")
    plain = cnn_losses(4)
  finally:
    Device.DEFAULT = default
  assert [np.float32(v).tobytes() for v in tiled] == [np.float32(v).tobytes() for v in plain]
