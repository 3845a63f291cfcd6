"""Programs per second on graph devices (issue 46), fresh and warm compile caches, against PYTHON in the same run.

Each device runs the same `refgrad fuzz` campaign (seed 0, the first N programs) twice in fresh processes sharing one
new compile-cache folder: the first run compiles every graph (a fresh cache), the second finds torch.compile's FX
graphs and jax's executables on disk (a warm cache). PYTHON, which compiles nothing, runs the same programs as the
baseline. Prints programs/s and the ratio to PYTHON.

    python bench/graph_devices.py                 # INDUCTOR, XLA, TORCH; 40 programs
    python bench/graph_devices.py --devices XLA --programs 100
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

# each framework's on-disk compile cache, pointed at the run's folder
CACHE_ENV = {"INDUCTOR": "TORCHINDUCTOR_CACHE_DIR", "XLA": "JAX_COMPILATION_CACHE_DIR"}


def campaign(device: str, programs: int, cache: str) -> tuple[int, float]:
  """(programs run, seconds) of one campaign in a fresh process."""
  env = dict(os.environ, **({CACHE_ENV[device]: cache} if device in CACHE_ENV else {}))
  if device == "XLA":
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # cache every executable, not only slow ones
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
  with tempfile.TemporaryDirectory() as findings:
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "refgrad.cli", "fuzz", "--device", device, "--seconds", "3600",
                          "--max-programs", str(programs), "--findings", findings], capture_output=True, text=True,
                         env=env)
    seconds = time.perf_counter() - started
  ran = re.search(r"(\d+) programs in", run.stdout)
  if ran is None:
    raise RuntimeError(f"refgrad fuzz --device {device} printed no count:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
  return int(ran.group(1)), seconds


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--devices", default="INDUCTOR,XLA,TORCH")
  parser.add_argument("--programs", type=int, default=40)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as cache:
    count, seconds = campaign("PYTHON", args.programs, cache)
    baseline = count / seconds
    print(f"{'device':10s} {'cache':6s} {'programs':>8s} {'seconds':>8s} {'programs/s':>10s} {'vs PYTHON':>9s}")
    print(f"{'PYTHON':10s} {'-':6s} {count:8d} {seconds:8.1f} {baseline:10.2f} {1.0:8.2f}x")
    for device in args.devices.split(","):
      for label in ("fresh", "warm"):
        count, seconds = campaign(device, args.programs, cache)
        rate = count / seconds
        print(f"{device:10s} {label:6s} {count:8d} {seconds:8.1f} {rate:10.2f} {rate / baseline:8.2f}x")


if __name__ == "__main__":
  main()
