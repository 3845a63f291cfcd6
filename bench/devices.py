"""Each available device against numpy on the same workloads, plus compile latency (cold and warm cache), and
per kernel of a fresh batch, compiled and loaded one at a time or in one batch (compile_batch).

Run: python bench/devices.py [--devices CLANG PYTHON] [--batch 32] [--compile-only]
Targets: CLANG elementwise and reductions within 2x of numpy; a warm-cache compile lookup under 1 ms; a batch of 32
kernels at least 5x cheaper per kernel than one at a time on CLANG.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("POCL_KERNEL_CACHE", "0")  # PoCL's own kernel cache would make every "cold" build warm

from timing import best_time  # noqa: E402  (bench/ is on sys.path when a script runs)

from refgrad import Device, Tensor  # noqa: E402
from refgrad.codegen.pipeline import compile_ast  # noqa: E402
from refgrad.compile_cache import cached_compile, cached_compile_batch  # noqa: E402


def workloads(device: str) -> list[tuple[str, Callable, Callable, float]]:
  """(name, numpy fn, refgrad fn, flops or 0)."""
  rng = np.random.default_rng(0)
  vec = rng.standard_normal(1 << 22, dtype=np.float32)
  mat = rng.standard_normal((2048, 2048), dtype=np.float32)
  a256, b256 = (rng.standard_normal((256, 256), dtype=np.float32) for _ in range(2))
  a512, b512 = (rng.standard_normal((512, 512), dtype=np.float32) for _ in range(2))
  tv, tm = Tensor(vec, device=device), Tensor(mat, device=device)
  t256 = [Tensor(x, device=device) for x in (a256, b256)]
  t512 = [Tensor(x, device=device) for x in (a512, b512)]
  chain = lambda x: ((x * 2.0 + 1.0) * x - 3.0) * 0.5 + x  # noqa: E731
  return [
    ("elementwise chain, 6 ops, 4M f32", lambda: chain(vec), lambda: chain(tv).realize(), 0.0),
    ("full sum, 4M f32", lambda: vec.sum(), lambda: tv.sum().realize(), 0.0),
    ("axis-1 sum, 2048x2048 f32", lambda: mat.sum(1), lambda: tm.sum(1).realize(), 0.0),
    ("axis-0 sum, 2048x2048 f32", lambda: mat.sum(0), lambda: tm.sum(0).realize(), 0.0),
    ("matmul 256^3 f32", lambda: a256 @ b256, lambda: (t256[0] @ t256[1]).realize(), 2 * 256 ** 3),
    ("matmul 512^3 f32", lambda: a512 @ b512, lambda: (t512[0] @ t512[1]).realize(), 2 * 512 ** 3),
  ]


def finished(fn: Callable[[], object], device: str) -> Callable[[], None]:
  """fn, then wait for the device: OPENCL launches asynchronously, so realize() returns before the kernel ends."""
  def run() -> None:
    fn()
    Device[device].synchronize()
  return run


def compile_latency(device: str) -> tuple[float, float, float]:
  """Seconds to get a runnable binary for a fresh kernel: cold (empty cache) and warm (cached on disk), and
  to load that binary into a runner."""
  impl = Device[device]
  if impl.compiler is None:
    return 0.0, 0.0, 0.0
  x = Tensor(np.arange(16, dtype=np.float32), device=device)
  program = compile_ast(((x * 1.5 + 2.5) * x).schedule()[-1].ast, impl.caps)
  source = impl.render(program)
  with tempfile.TemporaryDirectory() as tmp:
    os.environ["REFGRAD_CACHE"] = tmp
    start = time.perf_counter()
    binary = cached_compile(impl.compiler, source)
    cold = time.perf_counter() - start
    warm = best_time(lambda: cached_compile(impl.compiler, source), repeat=20)
    del os.environ["REFGRAD_CACHE"]
  return cold, warm, best_time(lambda: impl.runtime.load(binary, program), repeat=5, setup=unloaded)


def unloaded() -> tuple:
  """No arguments, after collecting the runners of earlier loads: a runtime keeps a library loaded while a runner
  of it lives (CLANG loads a batch's library once), so each timed load is a real one."""
  gc.collect()
  return ()


def batch_latency(device: str, kernels: int) -> tuple[float, float]:
  """Seconds per kernel to compile and load `kernels` fresh tiny kernels, each in a compiler run of its own and all
  in one batch, each way into an empty compile cache."""
  impl = Device[device]
  x = Tensor(np.arange(16, dtype=np.float32), device=device)
  programs = [compile_ast((x * (1.5 + i) + 2.5).schedule()[-1].ast, impl.caps) for i in range(kernels)]
  sources = [impl.render(program) for program in programs]

  def compile_and_load(compile_all: Callable[[], list[bytes]]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
      os.environ["REFGRAD_CACHE"] = tmp
      start = time.perf_counter()
      runners = [impl.runtime.load(binary, program) for binary, program in zip(compile_all(), programs)]
      seconds = time.perf_counter() - start
      del os.environ["REFGRAD_CACHE"], runners
    return seconds / kernels
  alone = compile_and_load(lambda: [cached_compile(impl.compiler, source) for source in sources])
  return alone, compile_and_load(lambda: cached_compile_batch(impl.compiler, sources))


def links_directly(device: str) -> bool:
  """Whether the device is a refgrad-clang compiler that runs its driver's linker command itself (not gcc)."""
  try:
    from refgrad_clang import ClangCompiler, link_command
  except ImportError:
    return False
  compiler = Device[device].compiler
  return isinstance(compiler, ClangCompiler) and link_command(compiler.path, compiler.flags) is not None


def link_latency(device: str, kernels: int, rounds: int = 3) -> tuple[float, float]:
  """Median seconds a compile of one fresh tiny kernel takes with the compiler's driver linking in the same command
  and with `-c` then the driver's linker command run directly (ClangCompiler.link_directly), the two alternating."""
  compiler = Device[device].compiler
  x = Tensor(np.arange(16, dtype=np.float32), device=device)
  sources = [Device[device].render(compile_ast((x * (0.5 + i) - 1.5).schedule()[-1].ast, Device[device].caps))
             for i in range(kernels)]
  times: dict[bool, list[float]] = {False: [], True: []}
  for _ in range(rounds):
    for directly in (False, True):
      variant = type(compiler)(compiler.path, compiler.flags, link_directly=directly)
      for source in sources:
        start = time.perf_counter()
        variant.compile(source)
        times[directly].append(time.perf_counter() - start)
  return statistics.median(times[False]), statistics.median(times[True])


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--devices", nargs="*", default=Device.available())
  parser.add_argument("--batch", type=int, default=32, help="kernels in the batch of the batched compile latency")
  parser.add_argument("--compile-only", action="store_true", help="only the compile latencies, no workloads")
  args = parser.parse_args()
  for device in args.devices:
    cold, warm, load = compile_latency(device)
    print(f"\n{device}: compile latency cold {cold * 1e3:.1f} ms, warm-cache lookup {warm * 1e3:.3f} ms, "
          f"load {load * 1e3:.2f} ms")
    if getattr(Device[device].compiler, "compile_batch", None) is not None:
      alone, batched = batch_latency(device, args.batch)
      print(f"  {args.batch} fresh kernels, compile + load per kernel: one at a time {alone * 1e3:.1f} ms, "
            f"in one batch {batched * 1e3:.1f} ms ({alone / batched:.1f}x)")
    if links_directly(device):
      through_driver, directly = link_latency(device, args.batch)
      print(f"  a fresh kernel, compile and link: the driver linking {through_driver * 1e3:.1f} ms, `-c` then the "
            f"linker directly {directly * 1e3:.1f} ms ({through_driver / directly:.2f}x)")
    if args.compile_only:
      continue
    print(f"  {'workload':34s} {'numpy ms':>9s} {device + ' ms':>11s} {'ratio':>7s} {'GFLOPS':>7s}")
    for name, np_fn, rg_fn, flops in workloads(device):
      t_np, t_rg = best_time(np_fn), best_time(finished(rg_fn, device), repeat=3)
      gflops = f"{flops / t_rg / 1e9:7.2f}" if flops else ""
      print(f"  {name:34s} {t_np * 1e3:9.2f} {t_rg * 1e3:11.2f} {t_rg / t_np:6.1f}x {gflops}")


if __name__ == "__main__":
  main()
