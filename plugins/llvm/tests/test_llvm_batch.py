"""LLVM's compile_batch: one module and one object file for a batch, its kernels renamed so that kernels of one name
share it, linked once per process; a batch LLVM rejects or aborts on raises (the caller lives), and refgrad's
splitting then compiles the others and finds the culprit. tests/test_batch_compile.py checks the contract (values,
cache entries) on every device."""
import sys
import warnings

import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad.codegen.contract import split_batch_binary
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile_batch

pytestmark = pytest.mark.skipif("LLVM" not in Device.available(), reason="llvmlite is not available here")
SCALES = (1.25, -3.0, 0.5, 7.0, 2.0)
X = np.linspace(-4.0, 4.0, 24, dtype=np.float32)


def scaled(scale: float):
  """The program of x * scale + 0.5 over X (kernel E_24 whatever the scale), and what it computes."""
  program = compile_ast((Tensor(X, device="LLVM") * scale + 0.5).schedule()[-1].ast, Device["LLVM"].caps)
  return program, X * np.float32(scale) + np.float32(0.5)


def run(runtime, binary: bytes, program) -> np.ndarray:
  out = np.zeros(len(X), dtype=np.float32)
  runtime.load(binary, program)(out.view(np.uint8), X.view(np.uint8))
  return out


def test_a_batch_of_kernels_of_one_name_is_one_library_and_each_computes_its_own():
  from refgrad_llvm import JITRuntime
  device = Device["LLVM"]
  kernels = [scaled(s) for s in SCALES]
  assert len({program.name for program, _ in kernels}) == 1
  binaries = device.compiler.compile_batch([device.render(program) for program, _ in kernels])
  libraries = {split_batch_binary(b)[1] for b in binaries}
  assert len(libraries) == 1 and len({split_batch_binary(b)[0] for b in binaries}) == len(SCALES)
  runtime = JITRuntime()
  runners = []
  for (program, expected), binary in reversed(list(zip(kernels, binaries))):
    np.testing.assert_array_equal(run(runtime, binary, program), expected)
    runners.append(runtime.load(binary, program))
  assert len(runtime.linked) == 1  # linked once for all its kernels
  program, expected = kernels[2]
  np.testing.assert_array_equal(run(JITRuntime(), binaries[2], program), expected)  # alone, in another JIT


def test_a_batch_llvm_rejects_raises_with_the_ir_of_the_kernel():
  from refgrad_llvm import LLVMCompileError
  device = Device["LLVM"]
  good = device.render(scaled(1.5)[0])
  with pytest.raises(LLVMCompileError, match="LLVM rejected this program") as info:
    device.compiler.compile_batch([good, "define void @f() {\n  ret i32\n}\n", good])
  assert "ret i32" in str(info.value) and "E_24" not in str(info.value)


# A compile child that aborts, as LLVM does on an assertion, on a batch or kernel whose IR carries ABORT_VECTORIZED
# while loop vectorization is on; everything else it compiles for real.
ABORTING_CHILD = """
import os
import refgrad_llvm
from refgrad_llvm.isolation import main
compile_here, compile_batch_here = refgrad_llvm.LLVMCompiler.compile_here, refgrad_llvm.LLVMCompiler.compile_batch_here
def aborting(real):
  def compile(self, sources, vectorize=True):
    if vectorize and "ABORT_VECTORIZED" in "".join(sources):
      os.abort()
    return real(self, sources, vectorize)
  return compile
refgrad_llvm.LLVMCompiler.compile_here = aborting(compile_here)
refgrad_llvm.LLVMCompiler.compile_batch_here = aborting(compile_batch_here)
main()
"""


def test_a_batch_llvm_aborts_on_is_split_and_its_culprit_compiled_without_vectorization(tmp_path, monkeypatch):
  from refgrad_llvm import JITRuntime, LLVMCompiler
  from refgrad_llvm.isolation import CompileChild, LLVMCrash
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = LLVMCompiler()
  compiler.child = CompileChild()
  compiler.child.command = (sys.executable, "-c", ABORTING_CHILD)
  kernels = [scaled(s) for s in SCALES]
  sources = [Device["LLVM"].render(program) for program, _ in kernels]
  sources[3] = "; ABORT_VECTORIZED\n" + sources[3]
  try:
    with pytest.raises(LLVMCrash, match="signal 6"):
      compiler.compile_batch(sources)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      binaries = cached_compile_batch(compiler, sources)
  finally:
    compiler.child.close()
  messages = {category: [str(w.message).split(" (")[0] for w in caught if w.category is category]
              for category in (RuntimeWarning, ResourceWarning)}
  assert messages == {RuntimeWarning: ["LLVM aborted while optimizing kernel E_24"], ResourceWarning: []}
  runtime = JITRuntime()
  for (program, expected), binary in zip(kernels, binaries):
    np.testing.assert_array_equal(run(runtime, binary, program), expected)
  assert split_batch_binary(binaries[3]) is None  # the culprit was compiled alone
