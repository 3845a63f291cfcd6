"""OPENCL's build child (refgrad_opencl/isolation.py): new programs are built first in a child process, so PoCL's
compiler does not stay in this process's memory; build errors and a crashing child raise CompileError."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from refgrad import Device

pytestmark = pytest.mark.skipif("OPENCL" not in Device.available(), reason="OpenCL is not available here")

# several new kernels (elementwise, reductions on either axis, a broadcast), checked against numpy; prints the
# process's peak RSS growth in MB while they were built and run, and whether the build child ran
COMPUTATION = """
import json, sys
import numpy as np
from refgrad import Tensor
from refgrad_opencl import isolation
isolation.ENABLED = sys.argv[1] == "child"
def peak():
  status = open("/proc/self/status").read().splitlines()
  return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM"))
x = np.arange(1, 301, dtype=np.float32).reshape(20, 15) / 7
t = Tensor(x, device="OPENCL").realize()
before = peak()
got = [((t * 1.5 + 2).exp2().sum(axis=1)).numpy(), (t.max(axis=0) - t.sqrt().mean()).numpy(),
       (t.reshape(20, 15, 1) * t.reshape(20, 1, 15)).min(axis=0).numpy()]
want = [np.exp2(x * 1.5 + 2).sum(1), x.max(0) - np.sqrt(x).mean(), (x[:, :, None] * x[:, None, :]).min(0)]
for g, w in zip(got, want):
  np.testing.assert_allclose(g, w, rtol=1e-5)
print(json.dumps({"growth": peak() - before, "child": isolation.SHARED._process is not None}))
"""


def run_computation(mode: str, tmp_path) -> dict:
  env = {**os.environ, "POCL_CACHE_DIR": str(tmp_path / f"pocl-{mode}"), "REFGRAD_CACHE": str(tmp_path / mode)}
  env.pop("POCL_KERNEL_CACHE", None)
  done = subprocess.run([sys.executable, "-c", COMPUTATION, mode], env=env, capture_output=True, text=True,
                        timeout=300)
  assert done.returncode == 0, done.stderr
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_new_programs_built_in_the_child_leave_the_process_small(tmp_path):
  # measured: 29 MB of growth with the child, 150 MB when PoCL builds the new programs in-process
  child, here = run_computation("child", tmp_path), run_computation("here", tmp_path)
  assert child["child"] and not here["child"]
  assert child["growth"] < 60 and here["growth"] - child["growth"] > 50, (child, here)


@pytest.fixture
def compiler():
  """A compiler with a build child of its own (whose command a test may replace), closed afterwards."""
  from refgrad_opencl.isolation import BuildChild, helps
  from refgrad_opencl.runtime import CLCompiler
  shared = Device["OPENCL"].compiler
  if not helps(shared.device):
    pytest.skip("the build child is used only on PoCL with its kernel cache on")
  made = CLCompiler(shared.context, shared.device, shared.options, BuildChild())
  yield made
  made.child.close()


def kernel(name: str, value: str) -> str:
  return f"__kernel void {name}(__global float* x) {{\n  x[get_global_id(0)] = {value};\n}}\n"


def built_here(source: str) -> bool:
  from refgrad_opencl.runtime import BUILDS
  return any(key[2] == hashlib.sha256(source.encode()).digest() for key in BUILDS.programs.keys())


def test_a_build_error_shows_the_build_log_without_building_in_process(compiler):
  from refgrad_opencl.runtime import CompileError
  source = kernel("broken", "undefined_name_17")
  with pytest.raises(CompileError) as info:
    compiler.compile(source)
  message = str(info.value)
  assert "   2 |   x[get_global_id(0)] = undefined_name_17;" in message
  assert "undefined_name_17" in message.split("build log:")[1]
  assert compiler.child._process is not None and not built_here(source)


def test_a_program_the_child_built_is_not_built_in_process_by_the_compiler(compiler):
  source = kernel("fine", "3.25f")
  assert compiler.compile(source) == source.encode()
  assert compiler.child._process is not None and not built_here(source)


CRASHING_CHILD = ("import os, signal, sys\n"
                  "sys.stderr.write('PoCL fell over\\n'); sys.stderr.flush()\n"
                  "os.read(0, 1); os.kill(os.getpid(), signal.SIGSEGV)\n")


def test_a_child_that_dies_raises_compile_error_and_the_next_compile_starts_a_new_one(compiler):
  from refgrad_opencl.runtime import CompileError
  compiler.child.command = (sys.executable, "-c", CRASHING_CHILD)
  with pytest.raises(CompileError) as info:
    compiler.compile(kernel("victim", "1.0f"))
  message = str(info.value)
  assert "crashed on this program" in message and "   2 |   x[get_global_id(0)] = 1.0f;" in message
  assert "signal 11" in message and "PoCL fell over" in message
  del compiler.child.command  # the real child again
  source = kernel("after_crash", "2.0f")
  assert compiler.compile(source) == source.encode() and not built_here(source)


def test_a_forked_process_starts_its_own_child(compiler):
  source = kernel("before_fork", "4.0f")
  compiler.compile(source)
  parent_child = compiler.child._process.pid
  pid = os.fork()
  if pid == 0:  # the fork builds in a child of its own; its exit status tells the test
    try:
      compiler.compile(kernel("in_fork", "5.0f"))
      os._exit(0 if compiler.child._process.pid != parent_child else 1)
    except BaseException:
      os._exit(2)
  assert os.waitpid(pid, 0)[1] == 0
  assert compiler.child._process.pid == parent_child and compiler.compile(source) == source.encode()
