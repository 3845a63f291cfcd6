"""Train a small CNN on generated 14x14 images of three shapes (horizontal bar, vertical bar, diagonal),
with noise and random positions. No downloads.

    python examples/cnn.py [--steps 60] [--device CLANG]

Reaches at least 90% training accuracy within 60 steps on every device.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from refgrad import Device, Tensor, nn
from refgrad.nn.optim import Adam
from refgrad.nn.state import get_parameters

try:
  from examples.mlp import progress
except ImportError:  # run as a script from the examples folder
  from mlp import progress  # type: ignore[no-redef]

SIDE = 14


def shapes(n: int = 192, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  images = rng.normal(0, 0.3, (n, 1, SIDE, SIDE)).astype(np.float32)
  labels = rng.integers(0, 3, n).astype(np.int32)
  for image, label in zip(images, labels):
    r, c = rng.integers(2, SIDE - 6, 2)
    if label == 0:
      image[0, r, c:c + 5] += 1.5
    elif label == 1:
      image[0, r:r + 5, c] += 1.5
    else:
      image[0, np.arange(r, r + 5), np.arange(c, c + 5)] += 1.5
  return images, labels


class CNN:
  def __init__(self, classes: int = 3):
    self.c1 = nn.Conv2d(1, 8, 3)
    self.c2 = nn.Conv2d(8, 16, 3)
    self.fc = nn.Linear(16 * 2 * 2, classes)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.c1(x).relu().max_pool2d(2)      # (N, 8, 6, 6)
    x = self.c2(x).relu().max_pool2d(2)      # (N, 16, 2, 2)
    return self.fc(x.flatten(1))


def train(steps: int = 60, device: str | None = None, seed: int = 0, quiet: bool = False) -> dict[str, float]:
  if device:
    Device.DEFAULT = device
  Tensor.manual_seed(seed)
  x_np, y_np = shapes(seed=seed)
  x, y = Tensor(x_np), Tensor(y_np)
  model = CNN()
  opt = Adam(get_parameters(model), lr=0.01)
  start, loss_value = time.perf_counter(), float("nan")
  with Tensor.train():
    for step in range(1, steps + 1):
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      loss_value = loss.item()
      if not quiet:
        progress(step, steps, loss_value)
  elapsed = time.perf_counter() - start
  accuracy = float((model(x).argmax(1).numpy() == y_np).mean())
  return {"loss": loss_value, "accuracy": accuracy, "steps_per_second": steps / elapsed}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--device", default=None)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  result = train(args.steps, args.device, args.seed)
  print(f"device {Device.DEFAULT}: loss {result['loss']:.4f}, accuracy {result['accuracy']:.1%}, "
        f"{result['steps_per_second']:.1f} steps/s")


if __name__ == "__main__":
  main()
