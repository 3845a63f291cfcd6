"""Train a small CNN on generated 14x14 images of three shapes (no downloads).

The shapes are a horizontal bar, a vertical bar and a diagonal, with noise and at random positions.

    python examples/cnn.py [--steps 60] [--device CLANG] [--shard CLANG,CLANG:1]

Reaches at least 90% training accuracy within 60 steps on every device.
"""
from __future__ import annotations

import numpy as np

from refgrad import Tensor, nn

try:
  from examples.training import fit, main
except ImportError:  # run as a script from the examples folder
  from training import fit, main  # type: ignore[no-redef]

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


def train(steps: int = 60, device: str | None = None, seed: int = 0, quiet: bool = False,
          shard: tuple[str, ...] | None = None) -> dict[str, float]:
  """Train and return {'loss', 'accuracy', 'steps_per_second'}; `shard`: data-parallel over these devices."""
  return fit(CNN, shapes(seed=seed), steps, device, seed, quiet, shard)


if __name__ == "__main__":
  main(__doc__.splitlines()[0], 60, train)
