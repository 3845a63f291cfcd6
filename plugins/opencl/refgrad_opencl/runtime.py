"""The OPENCL device's parts on top of pyopencl: buffers, the compiler (source -> a checked source), and launches.

One in-order command queue carries every transfer and launch, so a kernel always sees the data copied in
before it, and a blocking read-back waits for every kernel queued before it: results are never read early.

A batch of kernels is one program (`CLCompiler.compile_batch`), built once: PoCL spends about 0.1 s of CPU in
its frontend per program, whatever its size, most of it parsing its OpenCL C header (0.5 s for the first program
of a process, which loads PoCL's kernel library), and then 35-50 ms a kernel at its first launch, generating and
linking the kernel's work-group function. What the compile cache keeps of a kernel is its source, checked by that
build, not the program's binary: asking PoCL for the binary compiles every kernel of the program for any work-group
size (measured: 0.13 s a one-kernel program, 10.6 s a fuzz batch of 34 kernels, twice its build and its kernels'
first launches together), and a launch compiles the kernel for its own work-group size again anyway. The runtime
loads the program the compiler built (ProgramBuilds); another process builds the source again, which PoCL's own
kernel cache makes quick when it built that source before (about 20 ms a program, 1 ms a kernel's first launch).
"""
from __future__ import annotations

import collections
import hashlib
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from refgrad.backend_helpers import numbered_source
from refgrad.codegen.contract import Program, batch_binary, split_batch_binary
from refgrad.codegen.gpu import largest_divisor
from refgrad.uop import Ops
from refgrad_opencl.dialect import DeviceLimits

# OpenCL's default float / and sqrt may be off by ulps (docs/SPEC.md asks for correctly rounded). No fast-math or
# mad options: every op rounds as the spec says. -w: generated code trips harmless warnings (x < x is false).
# -cl-std=CL1.2: the generated code needs nothing newer, every OpenCL 1.2+ device takes it, and the header PoCL
# parses for every program declares fewer builtins at 1.2 than at its default 3.0 (PoCL 3.1: 8% less CPU a build,
# bench/opencl_build.py)
BUILD_OPTIONS = ("-cl-std=CL1.2", "-cl-fp32-correctly-rounded-divide-sqrt", "-w")
GROUP_OPS = frozenset({Ops.LOCAL_INDEX, Ops.GROUP_INDEX, Ops.DEFINE_LOCAL, Ops.BARRIER})
KEPT_BUILDS = 8  # programs built by the compiler that stay alive until a runtime loads them (a batch: one or two)


class CompileError(RuntimeError):
  """The OpenCL compiler rejected a program: the message shows the numbered source and the build log."""


class LaunchError(RuntimeError):
  """A kernel needs more than the device allows (work-group size, local memory) and cannot be shrunk."""



def describe(device: cl.Device) -> str:
  return f"{device.platform.name.strip()}: {device.name.strip()}"


class CLAllocator:
  """Device buffers (cl.Buffer). Copies block until done, so the host memory can be reused at once."""

  def __init__(self, context: cl.Context, queue: cl.CommandQueue):
    self.context, self.queue = context, queue

  def alloc(self, nbytes: int) -> cl.Buffer:
    return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))  # OpenCL has no empty buffers

  def free(self, handle: cl.Buffer) -> None:
    handle.release()  # OpenCL frees it once the kernels queued with it have finished

  def copyin(self, handle: cl.Buffer, src: memoryview) -> None:
    if src.nbytes:
      cl.enqueue_copy(self.queue, handle, np.frombuffer(src, dtype=np.uint8), is_blocking=True)

  def copyout(self, dest: memoryview, handle: cl.Buffer) -> None:
    if dest.nbytes:
      cl.enqueue_copy(self.queue, np.frombuffer(dest, dtype=np.uint8), handle, is_blocking=True)


class ProgramBuilds:
  """OpenCL programs built from source in this process, found by context, build options and source, so that each
  is built once: CLCompiler builds a program to check that it compiles, and CLRuntime loads that build. The last
  `kept` built stay alive until a runtime takes them; a loaded one lives while a runner of one of its kernels does."""

  def __init__(self, kept: int):
    self.programs: weakref.WeakValueDictionary[tuple, cl.Program] = weakref.WeakValueDictionary()
    self.recent: collections.deque[cl.Program] = collections.deque(maxlen=kept)

  def get(self, context: cl.Context, device: cl.Device, source: str, options: tuple[str, ...]) -> cl.Program:
    """The program built from `source`, built now if it is not yet; CompileError with the build log if it fails."""
    key = (context.int_ptr, options, hashlib.sha256(source.encode()).digest())
    if (program := self.programs.get(key)) is None:
      program = cl.Program(context, source)
      try:
        program.build(options=list(options), devices=[device])
      except cl.RuntimeError as e:
        log = program.get_build_info(device, cl.program_build_info.LOG).strip() or str(e)
        raise CompileError(f"OpenCL ({describe(device)}) failed to build this program:\n"
                           f"{numbered_source(source)}\n\nbuild log:\n{log}") from None
      self.programs[key] = program
      self.recent.append(program)
    return program


BUILDS = ProgramBuilds(KEPT_BUILDS)


class CLCompiler:
  """OpenCL C -> the same OpenCL C, once a build proved that it compiles (the build is kept for CLRuntime to load).

  `options` are the build options (BUILD_OPTIONS unless given: refgrad selftest plants wrong ones); they are part
  of the cache key, whose `opencl source` says that an entry holds the source, never a program binary."""

  def __init__(self, context: cl.Context, device: cl.Device, options: tuple[str, ...] = BUILD_OPTIONS):
    self.context, self.device, self.options = context, device, options
    # the build is the driver's: which platform and device (PoCL's CPU device names the CPU it targets), with which
    # driver, and how
    identity = "|".join([device.platform.name, device.platform.version, device.name, device.version,
                         device.driver_version])
    self.cache_key = f"opencl source|{identity}|pyopencl {cl.VERSION_TEXT}|{' '.join(options)}"

  def with_options(self, options: tuple[str, ...]) -> CLCompiler:
    """This device's compiler building with other options (refgrad selftest plants wrong ones)."""
    return CLCompiler(self.context, self.device, options)

  def compile(self, source: str) -> bytes:
    BUILDS.get(self.context, self.device, source, self.options)
    return source.encode()

  def compile_batch(self, sources: Sequence[str]) -> list[bytes]:
    """One program per distinct prelude in the batch (usually one), each kernel renamed `b<i>_<name>` after its
    place in the batch, as two kernels may share a name. Each binary names its kernel in its program's source
    (`batch_binary`)."""
    kernels = [split_kernel(source) for source in sources]
    programs: dict[str, list[str]] = {}  # prelude -> the code of its kernels, renamed
    for i, (prelude, name, rest) in enumerate(kernels):
      programs.setdefault(prelude, []).append(f"\n__kernel void b{i}_{name}{rest}")
    built = {prelude: self.compile(prelude + "".join(code)) for prelude, code in programs.items()}
    return [batch_binary(f"b{i}_{name}", built[prelude]) for i, (prelude, name, _) in enumerate(kernels)]


KERNEL_SIGNATURE = re.compile(r"^__kernel void (\w+)(?=\()", re.MULTILINE)


def split_kernel(source: str) -> tuple[str, str, str]:
  """(the prelude, the kernel's name, the rest from its parameter list on) of a program CStyleRenderer rendered."""
  found = list(KERNEL_SIGNATURE.finditer(source))
  if len(found) != 1:
    raise CompileError(f"a batch takes programs of one __kernel each; this one has {len(found)}:\n"
                       f"{numbered_source(source)}")
  start = found[0]
  return source[:start.start()].removesuffix("\n"), start[1], source[start.end():]


class CLRuntime:
  """Loads checked sources (as CLCompiler's, built with `options`: the build CLCompiler made, else built here) and
  launches their kernels with the program's global and local shapes. The kernels of a batch share one program."""

  def __init__(self, context: cl.Context, queue: cl.CommandQueue, device: cl.Device, limits: DeviceLimits,
               options: tuple[str, ...] = BUILD_OPTIONS):
    self.context, self.queue, self.device, self.limits, self.options = context, queue, device, limits, options

  def with_options(self, options: tuple[str, ...]) -> CLRuntime:
    """This device's runtime loading sources built with other options (CLCompiler.with_options's)."""
    return CLRuntime(self.context, self.queue, self.device, self.limits, options)

  def synchronize(self) -> None:
    """Launches are asynchronous (reads wait for them anyway); this waits for all of them, e.g. for timing."""
    self.queue.finish()

  def load(self, binary: bytes, program: Program) -> Callable[..., None]:
    symbol, library = split_batch_binary(binary) or (program.name, binary)
    built = BUILDS.get(self.context, self.device, library.decode(), self.options)
    kernel = cl.Kernel(built, symbol)
    global_size, local_size = self.launch_sizes(program, kernel)

    def run(*handles: cl.Buffer) -> None:
      if global_size is not None:
        kernel(self.queue, global_size, local_size, *handles)
    run.kernel, run.program = kernel, built  # one build of a batch's program while a runner of one of its kernels lives
    return run

  def launch_sizes(self, program: Program, kernel: cl.Kernel) -> tuple[Any, Any]:
    """(global, local) sizes within the device's and this kernel's limits; (None, None) for an empty grid."""
    global_size = program.global_shape or (1,)
    if 0 in global_size:
      return None, None
    local_size = program.local_shape or (1,) * len(global_size)
    local_bytes = kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, self.device)
    if local_bytes > self.limits.local_memory:
      raise LaunchError(f"kernel {program.name} needs {local_bytes} bytes of local memory, but {describe(self.device)}"
                        f" has {self.limits.local_memory}")
    group_limit = min(self.limits.max_work_group_size,
                      kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device))
    if self.fits(local_size, group_limit):
      return global_size, local_size
    if any(u.op in GROUP_OPS for u in program.uops):
      raise LaunchError(f"kernel {program.name} needs work-groups of {local_size} work-items, but "
                        f"{describe(self.device)} allows at most {group_limit} "
                        f"({self.limits.max_work_item_sizes} per axis) for it")
    return global_size, self.smaller_local_size(global_size, group_limit)

  def fits(self, local_size: tuple[int, ...], group_limit: int) -> bool:
    sizes_ok = all(n <= limit for n, limit in zip(local_size, self.limits.max_work_item_sizes))
    return sizes_ok and int(np.prod(local_size)) <= group_limit

  def smaller_local_size(self, global_size: tuple[int, ...], group_limit: int) -> tuple[int, ...]:
    """Work-groups do not change a kernel without group ops: any sizes that divide the grid will do."""
    local = []
    for size, axis_limit in zip(global_size, self.limits.max_work_item_sizes):
      local.append(largest_divisor(size, min(group_limit, axis_limit)))
      group_limit //= local[-1]
    return tuple(local)
