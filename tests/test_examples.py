"""The training examples: shortened runs learn on every device, and a run gives the same loss curve on every
device from the same seed (float tolerance: reductions may sum in another order, rtol 1e-4 over 8 steps)."""
import numpy as np
import pytest

from examples import cnn, mlp
from refgrad import Device, Tensor
from refgrad.nn.optim import Adam
from refgrad.nn.state import get_parameters

# the full learning runs on the two devices issue 6 names; every device gets the loss-curve comparison below
LEARNING_DEVICES = [d for d in ("PYTHON", "CLANG") if d in Device.available()]


@pytest.fixture
def learning_device(request):
  previous = Device.DEFAULT
  yield request.param
  Device.DEFAULT = previous


@pytest.mark.parametrize("learning_device", LEARNING_DEVICES, indirect=True)
def test_mlp_learns_the_spirals(learning_device):
  result = mlp.train(steps=60, device=learning_device, quiet=True)
  assert result["accuracy"] >= 0.9 and result["loss"] < 0.3


@pytest.mark.parametrize("learning_device", LEARNING_DEVICES, indirect=True)
def test_cnn_learns_the_shapes(learning_device):
  result = cnn.train(steps=25, device=learning_device, quiet=True)
  assert result["accuracy"] >= 0.9


def loss_curve(device: str, steps: int = 8) -> list[float]:
  previous = Device.DEFAULT
  Device.DEFAULT = device
  try:
    Tensor.manual_seed(0)
    x_np, y_np = mlp.spirals()
    model, x, y = mlp.MLP(), Tensor(x_np), Tensor(y_np)
    opt = Adam(get_parameters(model), lr=0.01)
    curve = []
    with Tensor.train():
      for _ in range(steps):
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve
  finally:
    Device.DEFAULT = previous


def test_same_loss_curve_as_the_reference(refgrad_device):
  np.testing.assert_allclose(loss_curve(refgrad_device), loss_curve("PYTHON"), rtol=1e-4)
