"""The LLVM device's standalone reproducer: `kernel.ll`, the module as the device compiles it (the renderer's IR with
the target's triple and data layout), and `driver.py`, which needs only llvmlite, ctypes and numpy. The driver
compiles kernel.ll as refgrad_llvm.LLVMCompiler does (the host CPU's name and features as recorded here, the same
optimization pipeline and tuning, the object file linked by LLVM's ORC JIT), fills the buffers with the case's
inputs, calls the kernel and judges buffer 0 (refgrad/standalone.py)."""
from __future__ import annotations

import textwrap
from typing import Any

from refgrad.device import DeviceImpl
from refgrad.standalone import PY_CHECKER, PYTHON_DRIVER_RUN, RUN_SCRIPT, StandaloneCase, py_data
from refgrad_llvm import CODE_MODEL, OPT_LEVEL, RELOCATION, host_target, host_target_machine, toolchain
from refgrad_llvm.isolation import LLVMCrash

# The driver's own code after its data: the compile below must stay the one LLVMCompiler.compile_here runs
# (parse, verify, the per-module default pipeline at OPT_LEVEL with SLP vectorization and loop unrolling on, loop
# vectorization as the device chose, an object file for the target machine) and JITRuntime.load links.
DRIVER_CODE = textwrap.dedent("""\


  def target_machine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=CPU, features=FEATURES, opt=OPT_LEVEL,
                                                                 reloc=RELOCATION, codemodel=CODE_MODEL)


  def compile_kernel(machine):
    \"\"\"kernel.ll -> the object file, as refgrad's LLVM device compiles it.\"\"\"
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.ll")) as f:
      module = llvm.parse_assembly(f.read())
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    tuning.slp_vectorization = tuning.loop_unrolling = True
    tuning.loop_vectorization = LOOP_VECTORIZE
    passes = llvm.create_pass_builder(machine, tuning)
    passes.getModulePassManager().run(module, passes)
    return machine.emit_object(module)


  def run_kernel(machine):
    \"\"\"The buffers after one launch (a threaded kernel: each of its thread ranges in turn).\"\"\"
    jit = llvm.create_lljit_compiler(machine)
    library = (llvm.JITLibraryBuilder().add_object_img(compile_kernel(machine)).add_current_process()
               .export_symbol(KERNEL).link(jit, KERNEL))
    arguments = [ctypes.c_void_p] * len(INIT) + [ctypes.c_int64] * 2 * bool(THREAD_RANGES)
    kernel = ctypes.CFUNCTYPE(None, *arguments)(library[KERNEL])
    buffers = [np.zeros(max(len(data), 1), np.uint8) for data in INIT]
    for buffer, data in zip(buffers, INIT):
      buffer[:len(data)] = np.frombuffer(data, np.uint8)
    pointers = [b.ctypes.data for b in buffers]
    for thread_range in THREAD_RANGES or [()]:
      kernel(*pointers, *thread_range)
    return buffers


  def main():
    if (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()) != (CPU, FEATURES):
      print(f"note: compiled for the CPU recorded ({CPU}); this machine's CPU or features differ")
    output = run_kernel(target_machine())[0][:len(EXPECTED)].tobytes()
    bad = check(output, EXPECTED, SKIP, ABS_BOUND, SIZE, EXP_BITS, MAN_BITS, ULP_BOUND)
    print(f"{bad} of {int((~SKIP).sum())} judged lanes differ from the reference")
    sys.exit(1 if bad else 0)


  if __name__ == "__main__":
    main()
""")


def target_lines() -> str:
  """The triple and data layout LLVMCompiler.parse gives every module (those of the host's target machine)."""
  machine = host_target_machine()
  return f'target datalayout = "{machine.target_data}"\ntarget triple = "{machine.triple}"\n'


def llvm_reproducer(case: StandaloneCase, loop_vectorize: bool = True) -> dict[str, str]:
  """{'kernel.ll': the module, 'driver.py': its driver}. `loop_vectorize` False: the device compiled the kernel
  without loop vectorization (LLVM aborted with it)."""
  versions = toolchain().versions
  triple, cpu, features = host_target()
  name = case.program.name
  module = (f"; refgrad standalone reproducer: kernel {name} on {case.device or 'LLVM'} ({versions})\n"
            f"; compiled for CPU {cpu}; run it with driver.py beside it (python driver.py)\n"
            + target_lines() + "\n" + case.source)
  ranges = case.program.thread_ranges() if case.program.threads > 1 else None
  header = (f'"""refgrad standalone reproducer: kernel {name} (kernel.ll) on {case.device or "LLVM"}\n'
            f"compiled with {versions}; needs llvmlite, ctypes and numpy alone\n"
            f"run: python driver.py  (in this folder)\n"
            f"exit status 0: the output matches the reference; 1: it does not (the lanes that differ are printed);\n"
            f"killed by SIGABRT while compiling: LLVM's own assertion failed on kernel.ll\n"
            f'"""\n'
            "import ctypes\nimport os\nimport sys\n\nimport llvmlite.binding as llvm\n")
  settings = (f"KERNEL, THREAD_RANGES = {name!r}, {ranges!r}\n"
              f"TRIPLE, CPU, FEATURES = {triple!r}, {cpu!r}, {features!r}\n"
              f"OPT_LEVEL, RELOCATION, CODE_MODEL, LOOP_VECTORIZE = {OPT_LEVEL}, {RELOCATION!r}, {CODE_MODEL!r}, "
              f"{loop_vectorize}\n")
  driver = header + PY_CHECKER + "\n\n" + py_data(case) + settings + DRIVER_CODE
  return {"kernel.ll": module, "driver.py": driver, RUN_SCRIPT: PYTHON_DRIVER_RUN}


def aborts_vectorized(compiler: Any, source: str) -> bool:
  """True if LLVM aborts compiling `source` with loop vectorization (in the device's compile child), so the device
  compiled it without."""
  try:
    compiler.child.compile(source, vectorize=True)
  except LLVMCrash:
    return True
  return False


def llvm_standalone(case: StandaloneCase, device: DeviceImpl) -> dict[str, str]:
  """The hook DeviceImpl.standalone: the reproducer compiles kernel.ll as the device did, without loop vectorization
  where LLVM aborts with it; for a kernel the device failed to compile, with it, so the driver aborts as LLVM did."""
  return llvm_reproducer(case, bool(case.device_error) or not aborts_vectorized(device.compiler, case.source))
