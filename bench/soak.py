"""A long `refgrad fuzz` campaign, watching its resident memory: does anything grow without bound?

Run: python bench/soak.py [--device CLANG] [--minutes 2] [--interval 15]
Starts `refgrad fuzz` on the device (its findings go to a temporary folder) and prints the resident memory (VmRSS)
of the campaign's process and of its worker process(es) every `interval` seconds, then the ratio of the total at
the end to the total after one minute. Target (issue 12): within 1.25x, however long the campaign runs.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM_SECONDS = 60  # the reference point: caches are filled, imports done


def rss_mb(pid: int) -> float:
  """Resident memory of a process in MB, 0 if it has exited."""
  try:
    status = Path(f"/proc/{pid}/status").read_text()
  except OSError:
    return 0.0
  line = next((line for line in status.splitlines() if line.startswith("VmRSS:")), "VmRSS: 0 kB")
  return int(line.split()[1]) / 1024


def descendants(pid: int) -> list[int]:
  """Every live process below `pid` (the fuzz workers), found through their parent ids in /proc."""
  parents = {}
  for stat in Path("/proc").glob("[0-9]*/stat"):
    try:
      fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
      continue
    parents[int(stat.parent.name)] = int(fields[1])
  found, frontier = [], [pid]
  while frontier:
    children = [child for child, parent in parents.items() if parent in frontier]
    found += children
    frontier = children
  return found


def soak(device: str, minutes: float, interval: float) -> None:
  seconds = minutes * 60
  with tempfile.TemporaryDirectory(prefix="refgrad-soak-") as findings:
    command = [sys.executable, "-m", "refgrad.cli", "fuzz", "--device", device, "--seconds", str(seconds),
               "--findings", findings]
    fuzz = subprocess.Popen(command)
    started, samples = time.monotonic(), []
    print(f"{'t (s)':>6} {'fuzz MB':>8} {'workers MB':>10} {'total MB':>9}", flush=True)
    while fuzz.poll() is None:
      time.sleep(interval)
      main, workers = rss_mb(fuzz.pid), sum(rss_mb(pid) for pid in descendants(fuzz.pid))
      if main and fuzz.poll() is None:
        samples.append((time.monotonic() - started, main + workers))
        print(f"{samples[-1][0]:6.0f} {main:8.0f} {workers:10.0f} {main + workers:9.0f}", flush=True)
  warm = next((total for t, total in samples if t >= WARM_SECONDS), None)
  if warm is None:
    print(f"the campaign ended before {WARM_SECONDS} s: no ratio (try --minutes 2 or more)")
    return
  print(f"{device}: {samples[-1][1]:.0f} MB at the end ({samples[-1][0]:.0f} s), {warm:.0f} MB after one minute: "
        f"ratio {samples[-1][1] / warm:.2f} (target <= 1.25); peak {max(total for _, total in samples):.0f} MB")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--device", default="CLANG")
  parser.add_argument("--minutes", type=float, default=2.0)
  parser.add_argument("--interval", type=float, default=15.0, help="seconds between memory readings")
  args = parser.parse_args()
  soak(args.device, args.minutes, args.interval)


if __name__ == "__main__":
  main()
