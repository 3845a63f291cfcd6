"""What one OpenCL program build costs on this machine's OpenCL platform, with the OPENCL device's build options and
with them minus the -cl-std it sets: CPU seconds a build of a fresh one-kernel program (each build's source differs,
so no cache answers), the two option sets alternating, best of the rounds.

Run: python bench/opencl_build.py [--builds 30] [--rounds 3]
PoCL parses its OpenCL C header for every program; what that header declares depends on the OpenCL C version.
"""
from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time

os.environ.setdefault("POCL_CACHE_DIR", tempfile.mkdtemp(prefix="bench-pocl-"))  # an empty PoCL cache, this run's own

import pyopencl as cl  # noqa: E402
from refgrad_opencl.runtime import BUILD_OPTIONS  # noqa: E402

SERIAL = itertools.count()


def build_seconds(context: cl.Context, options: list[str], builds: int) -> float:
  """CPU seconds a build, over `builds` programs never built before."""
  start = time.process_time()
  for _ in range(builds):
    source = f"__kernel void k(__global float* a) {{ a[get_global_id(0)] = a[0] + {next(SERIAL)}.0f; }}"
    cl.Program(context, source).build(options=options)
  return (time.process_time() - start) / builds


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--builds", type=int, default=30)
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args()
  context = cl.create_some_context(interactive=False)
  device = context.devices[0]
  print(f"{device.platform.name.strip()} {device.platform.version.strip()}: {device.name.strip()}")
  variants = {"device's options": list(BUILD_OPTIONS),
              "without -cl-std": [o for o in BUILD_OPTIONS if not o.startswith("-cl-std=")]}
  build_seconds(context, variants["device's options"], 1)  # the platform's first build loads its libraries
  best = dict.fromkeys(variants, float("inf"))
  for _ in range(args.rounds):
    for name, options in variants.items():
      best[name] = min(best[name], build_seconds(context, options, args.builds))
  for name, seconds in best.items():
    print(f"  {name:18} {' '.join(variants[name]):60} {1000 * seconds:6.1f} ms CPU a build")
  ratio = best["without -cl-std"] / best["device's options"]
  print(f"  the device's options build in {1 / ratio:.2f}x the CPU ({ratio:.2f}x faster)")


if __name__ == "__main__":
  main()
