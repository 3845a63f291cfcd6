"""The one timing helper the benchmark scripts share."""
from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeat: int = 5) -> float:
  """Seconds of the fastest of `repeat` calls, after one warm-up call (compile caches)."""
  fn()
  times = []
  for _ in range(repeat):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)
