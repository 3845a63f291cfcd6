"""PYTHON device vs plain numpy on four workloads; prints times, ratios and peak memory (tracemalloc).

Run: python bench/interp.py
Targets (issue 2): elementwise and reductions within 5x of numpy, matmul within 400x of numpy's BLAS,
peak memory below 4x the size of inputs plus outputs.
"""
from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np
from timing import best_time

from refgrad import Tensor

N = 1 << 22  # 4M values
SIDE = 2048
MM = 256


def peak_bytes(fn: Callable[[], object]) -> int:
  tracemalloc.start()
  tracemalloc.reset_peak()
  fn()
  peak = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  return peak


def chain_np(x: np.ndarray) -> np.ndarray:
  return ((x * 2.0 + 1.0) * x - 3.0) * 0.5 + x


def chain_rg(x: Tensor) -> Tensor:
  return ((x * 2.0 + 1.0) * x - 3.0) * 0.5 + x


def workloads() -> list[tuple[str, Callable, Callable, int]]:
  rng = np.random.default_rng(0)
  vec = rng.standard_normal(N, dtype=np.float32)
  mat = rng.standard_normal((SIDE, SIDE), dtype=np.float32)
  a = rng.standard_normal((MM, MM), dtype=np.float32)
  b = rng.standard_normal((MM, MM), dtype=np.float32)
  tv, tm, ta, tb = Tensor(vec), Tensor(mat), Tensor(a), Tensor(b)
  return [
    ("elementwise chain, 6 ops, 4M f32", lambda: chain_np(vec), lambda: chain_rg(tv).realize(), 2 * vec.nbytes),
    ("full sum, 4M f32", lambda: vec.sum(), lambda: tv.sum().realize(), vec.nbytes + 4),
    ("axis-1 sum, 2048x2048 f32", lambda: mat.sum(1), lambda: tm.sum(1).realize(), mat.nbytes + SIDE * 4),
    ("matmul 256x256x256 f32", lambda: a @ b, lambda: (ta @ tb).realize(), 3 * a.nbytes),
  ]


def main() -> None:
  print(f"{'workload':36s} {'numpy ms':>10s} {'PYTHON ms':>10s} {'ratio':>8s} {'peak MB':>9s} {'peak/io':>8s}")
  for name, np_fn, rg_fn, io_bytes in workloads():
    t_np, t_rg = best_time(np_fn), best_time(rg_fn)
    peak = peak_bytes(rg_fn)
    print(f"{name:36s} {t_np * 1e3:10.2f} {t_rg * 1e3:10.2f} {t_rg / t_np:7.1f}x {peak / 1e6:9.1f} "
          f"{peak / io_bytes:7.2f}x")


if __name__ == "__main__":
  main()
