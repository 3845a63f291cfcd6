"""Capture and replay (refgrad/jit.py): a training step of examples/mlp.py and examples/cnn.py, plain and jitted.

Run: python bench/jit.py [--devices CLANG LLVM] [--steps 20]
Prints per step: the plain step, the scheduling inside it, the jitted replay, and the replay's own overhead (the
replay minus the same launches made back to back with their handles ready), per kernel and as a share of the
plain step's scheduling time (target: under 10% for the 40-kernel MLP step).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import refgrad.tensor  # noqa: E402
from examples import cnn, mlp  # noqa: E402
from refgrad import Device, Tensor, TinyJit  # noqa: E402
from refgrad.nn.optim import Adam  # noqa: E402
from refgrad.nn.state import get_parameters  # noqa: E402


def training_step(model_name: str):
  Tensor.manual_seed(0)
  x_np, y_np = mlp.spirals() if model_name == "mlp" else cnn.shapes()
  model = mlp.MLP() if model_name == "mlp" else cnn.CNN()
  optimizer = Adam(get_parameters(model), lr=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    optimizer.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    optimizer.step()
    return loss
  return step, x_np, y_np


def timed_scheduling() -> list[float]:
  """Wrap create_schedule as the Tensor module calls it; returns the list of seconds it appends to."""
  spent: list[float] = []
  original = refgrad.tensor.create_schedule

  def timed(*args, **kwargs):
    start = time.perf_counter()
    result = original(*args, **kwargs)
    spent.append(time.perf_counter() - start)
    return result
  refgrad.tensor.create_schedule = timed
  return spent


def plain_steps(model_name: str, steps: int) -> tuple[float, float]:
  step, x_np, y_np = training_step(model_name)
  spent = timed_scheduling()
  times, scheduling = [], []
  with Tensor.train():
    for _ in range(steps + 2):
      spent.clear()
      start = time.perf_counter()
      step(Tensor(x_np), Tensor(y_np)).item()
      times.append(time.perf_counter() - start)
      scheduling.append(sum(spent))
  return float(np.median(times[2:])), float(np.median(scheduling[2:]))


def jit_steps(model_name: str, steps: int, device: str) -> tuple[float, float, int]:
  step, x_np, y_np = training_step(model_name)
  jitted = TinyJit(step)
  times = []
  with Tensor.train():
    for _ in range(steps + 2):
      x, y = Tensor(x_np), Tensor(y_np)
      start = time.perf_counter()
      jitted(x, y)
      Device[device].synchronize()
      times.append(time.perf_counter() - start)
  launches = [(launch.runner, [b.handle for b in launch.buffers]) for launch in jitted.captured.launches
              if launch.runner is not None]
  bare = []
  for _ in range(steps):
    start = time.perf_counter()
    for runner, handles in launches:
      runner(*handles)
    Device[device].synchronize()
    bare.append(time.perf_counter() - start)
  return float(np.median(times[2:])), float(np.median(bare)), len(jitted.captured.launches)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--devices", nargs="*", default=Device.available())
  parser.add_argument("--steps", type=int, default=20)
  args = parser.parse_args()
  print(f"{'model':5s} {'device':7s} {'plain ms':>9s} {'sched ms':>9s} {'replay ms':>10s} {'kernels':>8s} "
        f"{'launches ms':>12s} {'overhead/kernel us':>19s} {'overhead/sched':>15s}")
  for device in args.devices:
    Device.DEFAULT = device
    for model_name in ("mlp", "cnn"):
      plain, scheduling = plain_steps(model_name, args.steps)
      replay, bare, count = jit_steps(model_name, args.steps, device)
      overhead = max(replay - bare, 0.0)
      print(f"{model_name:5s} {device:7s} {plain * 1e3:9.2f} {scheduling * 1e3:9.2f} {replay * 1e3:10.2f} "
            f"{count:8d} {bare * 1e3:12.2f} {overhead / count * 1e6:19.1f} {overhead / scheduling:14.1%}")


if __name__ == "__main__":
  main()
