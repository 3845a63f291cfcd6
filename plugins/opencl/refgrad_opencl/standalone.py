"""The OPENCL device's standalone reproducer: `kernel.cl`, the OpenCL C the device built, and `driver.py`, which needs
only pyopencl and numpy. The driver builds kernel.cl with the device's build options, copies the case's inputs into
one buffer per parameter, launches the kernel with the global and local sizes the device launched it with
(CLRuntime.launch_sizes), reads back buffer 0 and judges it (refgrad/standalone.py)."""
from __future__ import annotations

import textwrap

import pyopencl as cl

from refgrad.device import DeviceImpl
from refgrad.standalone import PY_CHECKER, PYTHON_DRIVER_RUN, RUN_SCRIPT, StandaloneCase, py_data

# The driver's own code after its data: the same device choice as refgrad_opencl.find_device (the device recorded,
# else the first GPU, else the first device), one in-order queue and blocking copies, as CLAllocator and CLRuntime.
DRIVER_CODE = textwrap.dedent("""\


  def find_device():
    devices = []
    for platform in cl.get_platforms():
      try:
        devices += platform.get_devices()
      except cl.Error:  # a platform without devices
        continue
    named = [d for d in devices if (d.platform.name.strip(), d.name.strip()) == (PLATFORM, DEVICE)]
    chosen = (named or [d for d in devices if d.type & cl.device_type.GPU] or devices)[0]
    if not named:
      print(f"note: {DEVICE} ({PLATFORM}) is not here; running on {chosen.name.strip()}")
    return chosen


  def run_kernel(device):
    \"\"\"Buffer 0's bytes after one launch.\"\"\"
    context = cl.Context([device])
    queue = cl.CommandQueue(context, device)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.cl")) as f:
      program = cl.Program(context, f.read()).build(options=BUILD_OPTIONS, devices=[device])
    buffers = [cl.Buffer(context, cl.mem_flags.READ_WRITE, max(len(data), 1)) for data in INIT]
    for buffer, data in zip(buffers, INIT):
      if data:
        cl.enqueue_copy(queue, buffer, np.frombuffer(data, np.uint8), is_blocking=True)
    if GLOBAL_SIZE is not None:  # None: an empty grid, never launched
      cl.Kernel(program, KERNEL)(queue, GLOBAL_SIZE, LOCAL_SIZE, *buffers)
    output = np.zeros(len(EXPECTED), np.uint8)
    if output.size:
      cl.enqueue_copy(queue, output, buffers[0], is_blocking=True)
    return output.tobytes()


  def main():
    bad = check(run_kernel(find_device()), EXPECTED, SKIP, ABS_BOUND, SIZE, EXP_BITS, MAN_BITS, ULP_BOUND)
    print(f"{bad} of {int((~SKIP).sum())} judged lanes differ from the reference")
    sys.exit(1 if bad else 0)


  if __name__ == "__main__":
    main()
""")


def launch_sizes(case: StandaloneCase, impl: DeviceImpl) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
  """(global, local) sizes the OPENCL device `impl` launches the case's program with (its loaded kernel's limits); the
  program's own for a kernel the device failed to build (the driver fails building it too, before any launch)."""
  if case.device_error:
    return case.program.global_shape or (1,), case.program.local_shape
  return impl.runtime.launch_sizes(case.program, impl.get_runner(case.program).kernel)


def opencl_reproducer(case: StandaloneCase, impl: DeviceImpl) -> dict[str, str]:
  """{'kernel.cl': the source, 'driver.py': its driver}, for the program as `impl` (an OPENCL device) builds and
  launches it."""
  device: cl.Device = impl.runtime.device
  global_size, local_size = launch_sizes(case, impl)
  header = (f'"""refgrad standalone reproducer: kernel {case.program.name} (kernel.cl) on {case.device or "OPENCL"}\n'
            f"device: {device.name.strip()}, driver {device.driver_version}\n"
            f"platform: {device.platform.name.strip()}, {device.platform.version.strip()}\n"
            f"built with pyopencl {cl.VERSION_TEXT}; needs pyopencl and numpy alone\n"
            f"run: python driver.py  (in this folder)\n"
            f"exit status 0: the output matches the reference; 1: it does not (the lanes that differ are printed)\n"
            f'"""\n'
            "import os\nimport sys\n\nimport pyopencl as cl\n")
  settings = (f"KERNEL, BUILD_OPTIONS = {case.program.name!r}, {list(impl.runtime.options)!r}\n"
              f"GLOBAL_SIZE, LOCAL_SIZE = {global_size!r}, {local_size!r}\n"
              f"PLATFORM, DEVICE = {device.platform.name.strip()!r}, {device.name.strip()!r}\n")
  driver = header + PY_CHECKER + "\n\n" + py_data(case) + settings + DRIVER_CODE
  return {"kernel.cl": case.source, "driver.py": driver, RUN_SCRIPT: PYTHON_DRIVER_RUN}
