"""Optimizes kernel.ll at -O3 (loop vectorization on) for an AVX-512 x86-64 CPU, with llvmlite only, in a child
process given LIMIT seconds. Nothing is run, so any host will do. On the bug LLVM is still optimizing at the limit
(exit status 1; it took 484 s here); exit status 0 means it optimized the kernel in time (a fraction of a second
with loop vectorization off)."""
import multiprocessing
import sys
import time
from pathlib import Path

CPU = "skylake-avx512"
LIMIT = 6.0  # seconds: twenty times what it takes without loop vectorization


def optimize(vectorize: bool) -> None:
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu=CPU, opt=3)
  module = llvm.parse_assembly((Path(__file__).parent / "kernel.ll").read_text())
  module.verify()
  module.triple, module.data_layout = machine.triple, str(machine.target_data)
  tuning = llvm.create_pipeline_tuning_options(speed_level=3)
  tuning.loop_vectorization = vectorize
  passes = llvm.create_pass_builder(machine, tuning)
  passes.getModulePassManager().run(module, passes)


def timed(vectorize: bool) -> float | None:
  """Seconds the optimization took in a child process, or None if it was still running after LIMIT seconds."""
  child = multiprocessing.get_context("spawn").Process(target=optimize, args=(vectorize,))
  began = time.monotonic()
  child.start()
  child.join(LIMIT)
  if child.is_alive():
    child.kill()
    child.join()
    return None
  if child.exitcode != 0:
    sys.exit(f"the optimizer failed (exit status {child.exitcode})")
  return time.monotonic() - began


if __name__ == "__main__":
  import llvmlite
  import llvmlite.binding as llvm
  print(f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}, target CPU {CPU}",
        flush=True)
  print(f"without loop vectorization: optimized in {timed(False):.2f} s", flush=True)
  seconds = timed(True)
  if seconds is None:
    print(f"with loop vectorization: still optimizing after {LIMIT:g} s")
    sys.exit(1)
  print(f"with loop vectorization: optimized in {seconds:.2f} s")
