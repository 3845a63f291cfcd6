"""Data-parallel training over virtual devices: the MLP of examples/mlp.py on one device and sharded over two
instances of it, measured in one run.

Run: python bench/multi.py [--devices CLANG LLVM] [--steps 30]
Prints per device: the step time on one device and over two (after the first steps, which compile), their ratio,
the kernels and transfers a sharded step runs, and the largest difference between the two loss curves. On one
machine the two instances share its cores, so the ratio is the cost of the copies, all-reduces and extra kernels,
not a speedup.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples import mlp  # noqa: E402
from refgrad import Device, Tensor, execute  # noqa: E402
from refgrad.nn.optim import Adam  # noqa: E402
from refgrad.nn.state import get_parameters  # noqa: E402

WARMUP = 3


def run(device: str, shard: tuple[str, ...] | None, steps: int) -> tuple[float, list[float], dict[str, int]]:
  """Median seconds per step after WARMUP, the loss curve, and the items of one step by kind."""
  Device.DEFAULT = device
  Tensor.manual_seed(0)
  x_np, y_np = mlp.spirals()
  x, y, model = Tensor(x_np), Tensor(y_np), mlp.MLP()
  if shard:
    x, y = x.shard(shard, axis=0), y.shard(shard, axis=0)
    for p in get_parameters(model):
      p.shard_(shard)
  opt = Adam(get_parameters(model), lr=0.01)
  times, losses, kinds = [], [], {}
  with Tensor.train():
    for step in range(steps):
      start = time.perf_counter()
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      if step == WARMUP:
        kinds = count_items(opt, loss)
      else:
        opt.step()
      losses.append(loss.item())
      times.append(time.perf_counter() - start)
  return float(np.median(times[WARMUP + 1:])), losses, kinds


def count_items(opt: Adam, loss: Tensor) -> dict[str, int]:
  """Run one step's update and loss while counting what run_schedule launches."""
  execute.CAPTURE = []
  try:
    opt.step()
    loss.realize()
    launched = list(execute.CAPTURE)
  finally:
    execute.CAPTURE = None
  kinds: dict[str, int] = {}
  for runner, item in launched:
    kind = "kernels" if runner is not None else item.ast.op.name.lower()
    kinds[kind] = kinds.get(kind, 0) + 1
  return kinds


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--devices", nargs="+", default=["CLANG", "LLVM"])
  parser.add_argument("--steps", type=int, default=30)
  args = parser.parse_args()
  print(f"{'device':8} {'one device':>11} {'two':>9} {'ratio':>6}  items of a sharded step       loss curves differ by")
  for device in args.devices:
    one, one_losses, _ = run(device, None, args.steps)
    two, two_losses, kinds = run(device, (device, f"{device}:1"), args.steps)
    worst = float(np.max(np.abs(np.array(two_losses) - np.array(one_losses)) / np.abs(np.array(one_losses))))
    items = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"{device:8} {one * 1e3:9.1f}ms {two * 1e3:7.1f}ms {two / one:5.2f}x  {items:30} {worst:.1e} (relative)")


if __name__ == "__main__":
  main()
