"""The XLA flags the device needs, set in the environment before jax starts its CPU backend: XLA reads XLA_FLAGS
once, when the backend is first made (the first computation, not `import jax`); make_device sets them first.
They are configuration of the device under test, as refgrad's own C backends' -ffp-contract=off, not workarounds of
XLA's optimizer (README.md):

* `--xla_cpu_max_isa=AVX`: XLA's CPU compiler lets LLVM fuse a multiply and an add into an FMA (SPEC.md: no fused
  multiply-add), which a float32 `a*b + c` showed (`(1+2**-12)**2 - (1+2**-11)` gave 2**-24, not 0). No flag turns
  the fusion off; without AVX2 the CPU has no FMA instruction to fuse into.
* `--xla_allow_excess_precision=false`: XLA may otherwise keep float16/bfloat16 intermediates in float32, so a chain
  of half-precision ops would round once instead of after every op.
"""
from __future__ import annotations

import os

FLAGS = ("--xla_cpu_max_isa=AVX", "--xla_allow_excess_precision=false")


def set_xla_flags() -> None:
  """Add FLAGS to XLA_FLAGS, keeping what the user set; a flag the user gave another value to is left alone."""
  current = os.environ.get("XLA_FLAGS", "")
  given = {word.split("=")[0] for word in current.split()}
  missing = [flag for flag in FLAGS if flag.split("=")[0] not in given]
  os.environ["XLA_FLAGS"] = " ".join([current, *missing]).strip()

