"""nn functional workloads on each available device against torch (CPU): conv2d and scaled dot-product attention.

Run: python bench/api.py [--devices CLANG PYTHON] [--repeat 3]
Each timing is the best of `repeat` runs after one warm-up run (which compiles), from lazy graph to the result in a
numpy array (PYTHON: one run).
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual name
from timing import best_time

from refgrad import Device, Tensor


def workloads() -> list[tuple[str, list[np.ndarray], Callable, Callable, float]]:
  """(name, inputs, refgrad fn of tensors, torch fn of tensors, flops)."""
  rng = np.random.default_rng(0)
  conv_in = [rng.standard_normal(s, dtype=np.float32) for s in ((8, 32, 32, 32), (64, 32, 3, 3))]
  attn_in = [rng.standard_normal((4, 8, 128, 64), dtype=np.float32) for _ in range(3)]
  return [
    ("conv2d 8x32x32x32 * 64x32x3x3, pad 1", conv_in, lambda x, w: x.conv2d(w, padding=1),
     lambda x, w: F.conv2d(x, w, padding=1), 2 * 8 * 64 * 32 * 32 * 32 * 9),
    ("attention 4x8 heads, 128 tokens, dim 64", attn_in, lambda q, k, v: q.scaled_dot_product_attention(k, v),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v), 2 * 2 * 4 * 8 * 128 * 128 * 64),
  ]


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--devices", nargs="*", default=Device.available())
  parser.add_argument("--repeat", type=int, default=3)
  args = parser.parse_args()
  torch.set_num_threads(os.cpu_count() or 1)  # CLANG and LLVM run long kernels on every core (the THREAD opt)
  print(f"{'workload':42s} {'device':8s} {'torch ms':>9s} {'refgrad ms':>11s} {'ratio':>8s} {'GFLOPS':>7s}")
  for name, arrays, rg_fn, torch_fn, flops in workloads():
    torch_in = [torch.from_numpy(a) for a in arrays]
    t_torch = best_time(lambda fn=torch_fn, xs=torch_in: fn(*xs), args.repeat)
    for device in args.devices:
      # fresh input tensors for every run: the same graph on the same tensors would find its intermediate kernels'
      # results already computed (realize remembers them for autograd) and run only the last kernel
      inputs = lambda xs=arrays, d=device: tuple(Tensor(a, device=d).realize() for a in xs)  # noqa: E731
      # numpy() waits for the result (realize alone may return before an asynchronous device finishes)
      t_rg = best_time(lambda *xs, fn=rg_fn: fn(*xs).numpy(), 1 if device == "PYTHON" else args.repeat, inputs)
      print(f"{name:42s} {device:8s} {t_torch * 1e3:9.2f} {t_rg * 1e3:11.2f} {t_rg / t_torch:7.1f}x "
            f"{flops / t_rg / 1e9:7.2f}")


if __name__ == "__main__":
  main()
