"""The one timing helper the benchmark scripts share."""
from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[..., object], repeat: int = 5, setup: Callable[[], tuple] | None = None) -> float:
  """Seconds of the fastest of `repeat` calls, after one warm-up call (compile caches). With `setup`, each call is
  fn(*setup()), the setup untimed: fresh inputs, so no call can reuse what an earlier one computed."""
  times = []
  for _ in range(repeat + 1):
    args = setup() if setup is not None else ()
    start = time.perf_counter()
    fn(*args)
    times.append(time.perf_counter() - start)
  return min(times[1:])
