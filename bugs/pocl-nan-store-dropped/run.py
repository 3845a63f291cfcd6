"""Runs kernel.cl on the first OpenCL device, with only pyopencl and numpy. Each kernel writes NaN into a buffer
that holds 7.0. Exit status: 0 every store happened (fixed), 1 a store was dropped (the bug), 2 anything else."""
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

SENTINEL = 7.0  # what the output holds before the kernel runs

context = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(context)
device = context.devices[0]
print(f"{device.platform.version} | {device.name} | driver {device.driver_version}")
program = cl.Program(context, (Path(__file__).parent / "kernel.cl").read_text()).build()
verdicts = set()
for kernel in program.all_kernels():
  out = np.full(1, SENTINEL, np.float32)
  buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=out)
  kernel(queue, (1,), None, buffer)
  cl.enqueue_copy(queue, out, buffer)
  queue.finish()
  verdict = "ok" if np.isnan(out[0]) else "STORE DROPPED" if out[0] == SENTINEL else "WRONG VALUE"
  verdicts.add(verdict)
  print(f"{kernel.function_name}: out[0] = {out[0]} (expected nan): {verdict}")
sys.exit(2 if "WRONG VALUE" in verdicts else 1 if "STORE DROPPED" in verdicts else 0)
