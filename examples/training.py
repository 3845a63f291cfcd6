"""What both examples share: the training loop, its progress bar, and the command line."""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from refgrad import Device, Tensor
from refgrad.nn.optim import Adam
from refgrad.nn.state import get_parameters
from refgrad.testing.terminal import ProgressBar


def fit(make_model: Callable[[], Any], data: tuple[np.ndarray, np.ndarray], steps: int, device: str | None,
        seed: int, quiet: bool, shard: tuple[str, ...] | None = None) -> dict[str, float]:
  """Full-batch Adam on (inputs, int labels); returns {'loss', 'accuracy', 'steps_per_second'}. With `shard`
  (device names) it trains data-parallel: the batch split over the devices, the parameters copied to each, the
  gradients' sums over the batch added across devices."""
  if device or shard:
    Device.DEFAULT = device or shard[0]
  Tensor.manual_seed(seed)
  x_np, y_np = data
  x, y = Tensor(x_np), Tensor(y_np)
  model = make_model()
  if shard:
    x, y = x.shard(shard, axis=0), y.shard(shard, axis=0)
    for p in get_parameters(model):
      p.shard_(shard)
  opt = Adam(get_parameters(model), lr=0.01)
  start, loss_value = time.perf_counter(), float("nan")
  with Tensor.train(), ProgressBar(steps, "training", quiet=quiet) as bar:
    for step in range(1, steps + 1):
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      loss_value = loss.item()
      bar.advance(label=f"step {step}/{steps} loss {loss_value:.4f}")
  elapsed = time.perf_counter() - start
  accuracy = float((model(x).argmax(1).numpy() == y_np).mean())
  return {"loss": loss_value, "accuracy": accuracy, "steps_per_second": steps / elapsed}


def main(description: str, default_steps: int, train: Callable[..., dict[str, float]]) -> None:
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--steps", type=int, default=default_steps)
  parser.add_argument("--device", default=None)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--shard", default=None, metavar="DEVICES",
                      help="train data-parallel over these devices, comma-separated (e.g. CLANG,CLANG:1)")
  args = parser.parse_args()
  shard = tuple(args.shard.split(",")) if args.shard else None
  result = train(args.steps, args.device, args.seed, shard=shard)
  print(f"device {Device.DEFAULT}: loss {result['loss']:.4f}, accuracy {result['accuracy']:.1%}, "
        f"{result['steps_per_second']:.1f} steps/s")
