"""Training-step benchmark: the MLP and CNN of examples/ on each device and in torch (CPU), ms per step and
the ratio, plus the number of kernels each step runs (it must not grow from step to step).

Each refgrad step is measured twice in the same run, in alternating blocks: without the schedule cache
(REFGRAD_SCHEDULE_CACHE=0: every step schedules its graph again) and with it (refgrad/schedule.py), and the
machine's load average is printed with the figures (medians of the steps after the first two).

Run: python bench/train.py [--devices PYTHON CLANG] [--steps 10]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples import cnn, mlp  # noqa: E402
from refgrad import Device, Tensor, execute  # noqa: E402
from refgrad.nn.optim import Adam  # noqa: E402
from refgrad.nn.state import get_parameters  # noqa: E402


def kernel_counter() -> list[int]:
  """Count the kernels run_schedule launches (wraps it; returns the list it appends to)."""
  counts: list[int] = []
  original = execute.run_schedule

  def counting(items):
    if counts:
      counts[-1] += len(items)
    original(items)
  import refgrad.tensor
  refgrad.tensor.run_schedule = counting
  return counts


def refgrad_steps(model_name: str, device: str, steps: int, counts: list[int], blocks: int = 3) -> dict[str, float]:
  """Median seconds per step without ("0") and with ("1") the schedule cache, and the same for the main thread's CPU
  time ("cpu0", "cpu1": the Python work, which a loaded machine slows less than the wall clock): `blocks` blocks of
  `steps` steps each way, alternating, so that a change in the machine's load falls on both."""
  Device.DEFAULT = device
  Tensor.manual_seed(0)
  x_np, y_np = mlp.spirals() if model_name == "mlp" else cnn.shapes()
  model = mlp.MLP() if model_name == "mlp" else cnn.CNN()
  x, y = Tensor(x_np), Tensor(y_np)
  opt = Adam(get_parameters(model), lr=0.01)
  times: dict[str, list[float]] = {"0": [], "1": [], "cpu0": [], "cpu1": []}
  with Tensor.train():
    for block in range(2 * blocks):
      cache = str(block % 2)
      os.environ["REFGRAD_SCHEDULE_CACHE"] = cache
      for step in range(steps + 2):
        counts.append(0)
        start, cpu = time.perf_counter(), time.thread_time()
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        opt.step()
        loss.item()
        if block > 1 or step >= 2:  # the first steps compile, and fill the cache
          times[cache].append(time.perf_counter() - start)
          times["cpu" + cache].append(time.thread_time() - cpu)
  os.environ.pop("REFGRAD_SCHEDULE_CACHE")
  return {key: float(np.median(values)) for key, values in times.items()}


def torch_steps(model_name: str, steps: int) -> float:
  torch.manual_seed(0)
  x_np, y_np = mlp.spirals() if model_name == "mlp" else cnn.shapes()
  if model_name == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 3))
  else:
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(64, 3))
  x, y = torch.tensor(x_np), torch.tensor(y_np, dtype=torch.long)
  opt = torch.optim.Adam(model.parameters(), lr=0.01)
  times = []
  for _ in range(steps + 2):
    start = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - start)
  return float(np.median(times[2:]))


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--devices", nargs="*", default=Device.available())
  parser.add_argument("--steps", type=int, default=10)
  args = parser.parse_args()
  counts = kernel_counter()
  print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
  print("ms per step (median), without the schedule cache -> with it; cpu: the main thread's CPU time")
  print(f"{'model':5s} {'device':8s} {'uncached':>9s} {'ms/step':>8s} {'speedup':>7s} {'cpu':>15s} {'speedup':>7s} "
        f"{'torch ms':>9s} {'ratio':>7s}  kernels per step")
  for model_name in ("mlp", "cnn"):
    reference = torch_steps(model_name, args.steps)
    for device in args.devices:
      counts.clear()
      ms = {key: seconds * 1e3 for key, seconds in refgrad_steps(model_name, device, args.steps, counts).items()}
      steady = "constant" if len(set(counts[1:])) == 1 else "GROWING"
      print(f"{model_name:5s} {device:8s} {ms['0']:9.1f} {ms['1']:8.1f} {ms['0'] / ms['1']:6.2f}x "
            f"{ms['cpu0']:7.1f}->{ms['cpu1']:6.1f} {ms['cpu0'] / ms['cpu1']:6.2f}x {reference * 1e3:9.2f} "
            f"{ms['1'] / reference / 1e3:6.1f}x  {counts[1]} ({steady})")
  print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
  main()
