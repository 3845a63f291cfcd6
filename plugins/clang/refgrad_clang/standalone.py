"""The CLANG device's standalone reproducer: one C file holding the kernel as compiled, its inputs, the reference's
output and a main() that runs the kernel and judges its output (refgrad/standalone.py). Its header comment gives the
command that builds and runs it with the device's own compiler and flags; it needs no refgrad."""
from __future__ import annotations

import os

from refgrad.standalone import C_CHECKER, KERNEL_BEGIN, KERNEL_END, RUN_SCRIPT, StandaloneCase, c_main, run_script

# flags that build a shared library; a standalone program is an executable
LIBRARY_ONLY_FLAGS = ("-fPIC", "-shared")


def build_command(compiler: str, flags: tuple[str, ...], libraries: tuple[str, ...], path: str = "repro.c") -> str:
  """The shell command that compiles and runs the reproducer at `path` as the device compiles its kernels."""
  kept = " ".join(f for f in flags if f not in LIBRARY_ONLY_FLAGS)
  binary = os.path.splitext(os.path.basename(path))[0]
  return f"{compiler} {kept} {path} -o {binary} {' '.join(libraries)} && ./{binary}"


def kernel_call(case: StandaloneCase) -> str:
  """C text calling the kernel on the buffer copies: once, or once per thread range of a threaded kernel (the
  ranges one after another: the result must not depend on how they are spread over threads)."""
  args = ", ".join(f"(void *)buf{i}" for i in range(len(case.buffers)))
  if case.program.threads <= 1:
    return f"{case.program.name}({args});"
  return " ".join(f"{case.program.name}({args}, {start}LL, {end}LL);" for start, end in case.program.thread_ranges())


def c_reproducer(case: StandaloneCase, compiler: str, flags: tuple[str, ...], libraries: tuple[str, ...],
                 version: str) -> dict[str, str]:
  """The whole reproducer in one file, repro.c, and the script that builds and runs it."""
  header = (f"/* refgrad standalone reproducer: kernel {case.program.name} on {case.device or 'a C device'}\n"
            f"   compiler: {version}\n"
            f"   build and run: {build_command(os.path.basename(compiler), flags, libraries)}\n"
            f"   exit status 0: the output matches the reference; 1: it does not (the lanes that differ are printed)\n"
            f"*/\n")
  body = f"{KERNEL_BEGIN}\n{case.source}\n{KERNEL_END}\n\n{C_CHECKER}\n{c_main(case, kernel_call(case))}"
  run = run_script(build_command(os.path.basename(compiler), flags, libraries))
  return {"repro.c": header + body, RUN_SCRIPT: run}
