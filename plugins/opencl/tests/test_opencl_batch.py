"""OPENCL's compile_batch: one OpenCL program per distinct prelude of a batch (float64 kernels carry more of it),
its kernels renamed so that kernels of one name share it, built once and loaded once per program; a kernel that
does not build fails its batch with the build log, and refgrad's splitting names it. tests/test_batch_compile.py
checks the contract (values, cache entries) on every device."""
import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad.codegen.contract import split_batch_binary
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile_batch

pytestmark = pytest.mark.skipif("OPENCL" not in Device.available(), reason="OpenCL is not available here")
X = np.linspace(-4.0, 4.0, 24)


def affine(scale: float, dtype=np.float32):
  """x * scale + 0.5 over X in `dtype`: its program (kernel E_24 whatever the scale), the buffers it runs on (output
  first) and what it computes."""
  x = X.astype(dtype)
  item = (Tensor(x, device="OPENCL").realize() * scale + 0.5).schedule()[-1]
  return compile_ast(item.ast, Device["OPENCL"].caps), item.buffers, x * dtype(scale) + dtype(0.5)


def computes(runtime, binary: bytes, kernel) -> tuple[np.ndarray, object]:
  """What the kernel's binary, loaded by `runtime`, writes, and its runner."""
  program, buffers, _ = kernel
  runner = runtime.load(binary, program)
  runner(*(b.handle for b in buffers))
  return buffers[0].numpy(), runner


def fresh_runtime():
  from refgrad_opencl.runtime import CLRuntime
  runtime = Device["OPENCL"].runtime
  return CLRuntime(runtime.context, runtime.queue, runtime.device, runtime.limits)


def test_a_batch_is_one_program_per_prelude_and_each_kernel_computes_its_own():
  device = Device["OPENCL"]
  kernels = [affine(1.25), affine(-3.0), affine(2.0, np.float64), affine(0.5), affine(7.0, np.float64)]
  assert len({program.name for program, _, _ in kernels}) == 1
  binaries = device.compiler.compile_batch([device.render(program) for program, _, _ in kernels])
  libraries = [split_batch_binary(b)[1] for b in binaries]
  assert len(set(libraries)) == 2 and libraries[0] == libraries[1] == libraries[3] != libraries[2] == libraries[4]
  runtime, runners = fresh_runtime(), []
  for kernel, binary in reversed(list(zip(kernels, binaries))):
    got, runner = computes(runtime, binary, kernel)
    np.testing.assert_array_equal(got, kernel[2])
    runners.append(runner)
  assert len({id(runner.program) for runner in runners}) == 2  # each program loaded once for all its kernels
  np.testing.assert_array_equal(computes(fresh_runtime(), binaries[3], kernels[3])[0], kernels[3][2])  # alone


def test_a_kernel_that_does_not_build_fails_its_batch_and_is_named_alone(tmp_path, monkeypatch):
  from refgrad_opencl.runtime import CompileError
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  device = Device["OPENCL"]
  kernels = [affine(1.25), affine(-3.0), affine(0.5)]
  sources = [device.render(program) for program, _, _ in kernels]
  broken = sources[1].replace("__kernel void E_24(", "__kernel void broken_kernel(").replace("{\n", "{\n  oops;\n", 1)
  with pytest.raises(CompileError, match="build log"):
    device.compiler.compile_batch([sources[0], broken, sources[2]])
  with pytest.raises(CompileError, match="oops") as info:
    cached_compile_batch(device.compiler, [sources[0], broken, sources[2]])
  assert "broken_kernel" in str(info.value) and "b0_E_24" not in str(info.value)  # the kernel alone
  runtime = fresh_runtime()
  for kernel, binary in zip(kernels[::2], cached_compile_batch(device.compiler, sources[::2])):
    np.testing.assert_array_equal(computes(runtime, binary, kernel)[0], kernel[2])


def test_a_source_without_one_kernel_cannot_join_a_batch():
  from refgrad_opencl.runtime import CompileError
  good = Device["OPENCL"].render(affine(1.5)[0])
  with pytest.raises(CompileError, match="one __kernel each; this one has 2"):
    Device["OPENCL"].compiler.compile_batch([good, good + "\n__kernel void other(__global float* x) {}\n"])


def test_the_cache_keeps_the_checked_source_and_the_runtime_loads_the_build_the_compiler_made(monkeypatch):
  """Asking PoCL for a program's binary compiles every kernel of it again (a second or more for a batch), so the
  compile cache keeps the source its build checked, and the runtime loads that build; another process builds it
  again from the source."""
  from refgrad_opencl import runtime as cl_runtime
  kernel = affine(2.5)
  source = Device["OPENCL"].render(kernel[0])
  for process in ("this", "another"):
    monkeypatch.setattr(cl_runtime, "BUILDS", cl_runtime.ProgramBuilds(cl_runtime.KEPT_BUILDS))
    if process == "this":
      binary = Device["OPENCL"].compiler.compile(source)
      (built,) = cl_runtime.BUILDS.recent
    got, runner = computes(fresh_runtime(), binary, kernel)
    assert binary == source.encode() and (runner.program is built) == (process == "this")
    np.testing.assert_array_equal(got, kernel[2])
