"""Compile cache keys cover everything that changes a binary, so a cache folder shared between machines never
hands one machine a binary built for another: two targets give two keys, and one target always the same key."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from refgrad import Device

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pyloops"


def clang_dry_run(cpu: str, features: list[str]) -> str:
  """What `clang -march=native -### -x c -c /dev/null` prints (on stderr) for a CPU."""
  flags = " ".join(f'"-target-feature" "{f}"' for f in features)
  return (f'clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n "/usr/bin/clang" "-cc1" "-triple" "x86_64-pc-linux-gnu"'
          f' "-mrelax-all" "-target-cpu" "{cpu}" {flags} "-o" "null.o" "-x" "c" "/dev/null"\n')


def test_clang_target_flags_read_clang_and_gcc_dry_runs():
  from refgrad_clang import target_flags
  assert target_flags(clang_dry_run("znver3", ["+avx2", "-avx512f"])) == \
    "-target-cpu znver3 -target-feature +avx2 -target-feature -avx512f"
  gcc = ("COLLECT_GCC_OPTIONS='-march=native' '-c'\n /usr/lib/gcc/x86_64-linux-gnu/12/cc1 -quiet /dev/null "
         "-march=skylake -mmmx -mno-sse4a -mtune=skylake -o /tmp/ccX1.s\n")
  assert target_flags(gcc) == "-march=skylake -mmmx -mno-sse4a -mtune=skylake"
  assert target_flags("cc: error: unrecognized option '-###'") == ""


@pytest.fixture
def clang_on_cpu(monkeypatch):
  """Make the dry run of -march=native report a chosen CPU: returns a function cpu, features -> CLANG cache key."""
  refgrad_clang = pytest.importorskip("refgrad_clang")
  path, _ = refgrad_clang.find_compiler()
  real_run = subprocess.run
  target = {}

  def run(command, **kwargs):
    if "-###" in command:
      return subprocess.CompletedProcess(command, 0, "", clang_dry_run(*target["cpu"]))
    return real_run(command, **kwargs)

  def key(cpu: str, features: list[str]) -> str:
    target["cpu"] = (cpu, features)
    refgrad_clang.native_target.cache_clear()
    return refgrad_clang.ClangCompiler(path).cache_key
  monkeypatch.setattr(refgrad_clang.subprocess, "run", run)
  yield key
  refgrad_clang.native_target.cache_clear()


def test_clang_key_names_the_resolved_target(clang_on_cpu):
  skylake = clang_on_cpu("skylake", ["+avx2", "+fma"])
  assert "-target-cpu skylake" in skylake and "-target-feature +fma" in skylake and "-O2" in skylake
  assert clang_on_cpu("znver3", ["+avx2", "+fma"]) != skylake
  assert clang_on_cpu("skylake", ["+avx2", "-fma"]) != skylake
  assert clang_on_cpu("skylake", ["+avx2", "+fma"]) == skylake


def test_clang_key_is_stable_and_resolves_native_once_per_process(monkeypatch):
  refgrad_clang = pytest.importorskip("refgrad_clang")
  path, _ = refgrad_clang.find_compiler()
  refgrad_clang.native_target.cache_clear()
  dry_runs = []
  real_run = subprocess.run

  def counting_run(command, **kwargs):
    if "-###" in command:
      dry_runs.append(command)
    return real_run(command, **kwargs)
  monkeypatch.setattr(refgrad_clang.subprocess, "run", counting_run)
  first, second = refgrad_clang.ClangCompiler(path).cache_key, refgrad_clang.ClangCompiler(path).cache_key
  assert first == second and "native" not in first.split("|")[-1] and len(dry_runs) == 1
  if "clang" in Path(path).name:
    assert "-target-cpu " in first


@pytest.mark.skipif("LLVM" not in Device.available(), reason="LLVM is not available here")
def test_llvm_key_names_triple_cpu_and_features(monkeypatch):
  import refgrad_llvm
  real = refgrad_llvm.host_target()
  here = refgrad_llvm.LLVMCompiler().cache_key
  assert here == refgrad_llvm.LLVMCompiler().cache_key and all(part in here for part in real)
  monkeypatch.setattr(refgrad_llvm, "host_target", lambda: ("x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma"))
  other = refgrad_llvm.LLVMCompiler().cache_key
  monkeypatch.setattr(refgrad_llvm, "host_target", lambda: ("x86_64-unknown-linux-gnu", "znver3", "+avx2,-fma"))
  assert len({here, other, refgrad_llvm.LLVMCompiler().cache_key}) == 3


def fake_cl_device(name: str, driver: str) -> SimpleNamespace:
  platform = SimpleNamespace(name="Portable Computing Language", version="OpenCL 3.0 PoCL 3.1")
  return SimpleNamespace(platform=platform, name=name, version="OpenCL 3.0 PoCL", driver_version=driver)


@pytest.mark.skipif("OPENCL" not in Device.available(), reason="OPENCL is not available here")
def test_opencl_key_names_platform_device_driver_and_options():
  from refgrad_opencl.runtime import BUILD_OPTIONS, CLCompiler
  real = Device["OPENCL"].compiler
  assert CLCompiler(real.context, real.device).cache_key == real.cache_key
  assert real.device.driver_version in real.cache_key and " ".join(BUILD_OPTIONS) in real.cache_key
  keys = {CLCompiler(None, fake_cl_device(name, driver)).cache_key
          for name, driver in [("pthread-skylake", "3.1"), ("pthread-znver3", "3.1"), ("pthread-skylake", "4.0")]}
  assert len(keys) == 3


def test_pyloops_key_names_the_python_version(monkeypatch):
  monkeypatch.syspath_prepend(str(EXAMPLE))
  from refgrad_pyloops import PythonCompiler
  here = PythonCompiler().cache_key
  assert here == PythonCompiler().cache_key and sys.version in here
  monkeypatch.setattr(sys, "version", "3.99.0 (main) [a future Python]")
  assert PythonCompiler().cache_key != here


def test_a_jit_backend_gets_its_own_folder_in_the_cache(tmp_path, monkeypatch):
  """backend_cache_dir: inside REFGRAD_CACHE (so it moves with a shared cache), one folder per backend, created on
  first use; names that could leave the cache are refused; pruning refgrad's entries leaves the backend's files."""
  from refgrad.compile_cache import backend_cache_dir, prune_cache
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  numba, driver = backend_cache_dir("NUMBA"), backend_cache_dir("my-gpu_jit.v2")
  assert numba.is_dir() and driver.is_dir() and numba != driver
  assert numba.parent == driver.parent and tmp_path in numba.parents
  for bad in ("", "..", "a/b", "../x", "a\\b", "."):
    with pytest.raises(ValueError, match="not a valid folder name"):
      backend_cache_dir(bad)
  (numba / "kernel.nbi").write_bytes(b"x" * 4096)
  prune_cache(limit=0)
  assert (numba / "kernel.nbi").exists()
