"""LLVM split reductions (8 accumulator lanes) with the loop vectorizer kept off their loop except for float
accumulators (today's refgrad_llvm.render.LOOP_VECTORIZED_ACCUMULATORS) against vectorizing every one (the rule
before), in one run: per dtype and op, the compile of a fresh kernel and the kernel's best of 20 runs; then
every REDUCE row of the conformance check on LLVM with an empty cache (the compiles, in one batch).

Run: python bench/split_reductions.py [--rows 4096] [--long 65536]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
import refgrad_llvm.render as llvm_render  # noqa: E402
from timing import best_time  # noqa: E402  (bench/ is on sys.path when a script runs)

from refgrad import Tensor  # noqa: E402
from refgrad.testing.conformance.run import run_conformance  # noqa: E402

RULES = {"before: every lane loop vectorized": {"i1", "i8", "i16", "i32", "i64", "float", "double"},
         "now: float accumulators only": set(llvm_render.LOOP_VECTORIZED_ACCUMULATORS)}
DTYPES = (np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64)


def fresh_cache(fn: Callable[[], object]) -> float:
  """Seconds fn takes with an empty compile cache (a kernel this process loaded before would still be reused)."""
  with tempfile.TemporaryDirectory() as tmp:
    os.environ["REFGRAD_CACHE"] = tmp
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    del os.environ["REFGRAD_CACHE"]
  return seconds


def reduction(rows: int, length: int, dtype, op: str, salt: int) -> tuple[float, float]:
  """(seconds of the first realize, a fresh kernel's compile included; seconds of the best of 20 runs after)."""
  data = np.random.default_rng(salt).integers(-100, 100, size=(rows, length)).astype(dtype)
  x = Tensor(data, device="LLVM").realize()
  # a constant of its own makes the kernel new to every cache: the compile is really timed
  run = lambda: (getattr(x, op)(axis=1) + salt).realize()  # noqa: E731
  first = fresh_cache(run)
  return first, best_time(run, repeat=20)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--rows", type=int, default=4096, help="rows and row length of the square case")
  parser.add_argument("--long", type=int, default=65536, help="row length of the long case (64 rows)")
  parser.add_argument("--conformance", type=int, help=argparse.SUPPRESS)  # a child timing one rule (its index)
  args = parser.parse_args()
  if args.conformance is not None:  # in a process of its own: no kernel loaded by an earlier rule is reused
    llvm_render.LOOP_VECTORIZED_ACCUMULATORS = list(RULES.values())[args.conformance]
    print(f"{fresh_cache(lambda: run_conformance('LLVM', only='REDUCE')):.1f}")
    return
  shapes = [(args.rows, args.rows), (64, args.long)]
  print(f"{'dtype':8s} {'op':4s} {'shape':>12s}  " + "  ".join(f"{name:>40s}" for name in RULES))
  salt = 0
  for dtype in DTYPES:
    for op in ("sum", "max"):
      for shape in shapes:
        cells = []
        for rule in RULES.values():
          llvm_render.LOOP_VECTORIZED_ACCUMULATORS = rule
          salt += 1
          first, best = reduction(*shape, dtype, op, salt)
          cells.append(f"first {first * 1e3:8.1f} ms, run {best * 1e3:7.2f} ms")
        print(f"{np.dtype(dtype).name:8s} {op:4s} {str(shape):>12s}  " + "  ".join(f"{c:>40s}" for c in cells))
  for index, name in enumerate(RULES):
    seconds = subprocess.run([sys.executable, __file__, "--conformance", str(index)], capture_output=True, text=True,
                             check=True).stdout.strip()
    print(f"the conformance check's REDUCE rows on LLVM, a fresh process and cache, {name}: {seconds} s")


if __name__ == "__main__":
  main()
