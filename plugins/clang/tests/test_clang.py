"""The CLANG plugin: discovery, compile errors, the compile cache, a missing compiler, and the other C compiler
configurations (GCC, CLANG_O3)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad.compile_cache import cache_dir, cached_compile

pytestmark = pytest.mark.skipif("CLANG" not in Device.available(), reason="refgrad-clang is not installed here")


def test_clang_is_found_through_its_entry_point():
  spec = next(s for s in Device.specs() if s.name == "CLANG")
  assert spec.plugin == "refgrad-clang" and spec.unavailable_reason is None


def test_compile_error_shows_numbered_source_and_stderr():
  from refgrad_clang import CompileError
  compiler = Device["CLANG"].compiler
  with pytest.raises(CompileError) as info:
    compiler.compile("int main( { return 0; }\n")
  message = str(info.value)
  assert "   1 | int main( { return 0; }" in message and "error" in message


class CountingCompiler:
  cache_key = "counting-test-compiler"

  def __init__(self):
    self.calls = 0

  def compile(self, source: str) -> bytes:
    self.calls += 1
    return source.encode()[::-1]


def test_cache_is_content_addressed_and_rebuilds_corrupt_entries(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = CountingCompiler()
  assert cached_compile(compiler, "abc") == b"cba"
  assert cached_compile(compiler, "abc") == b"cba" and compiler.calls == 1
  (entry,) = [p for p in cache_dir().rglob("*.bin")]
  entry.write_bytes(entry.read_bytes()[:-1])  # truncated
  assert cached_compile(compiler, "abc") == b"cba" and compiler.calls == 2
  data = bytearray(entry.read_bytes())
  data[-1] ^= 0xFF  # corrupt
  entry.write_bytes(bytes(data))
  assert cached_compile(compiler, "abc") == b"cba" and compiler.calls == 3
  assert not [p for p in tmp_path.rglob(".tmp-*")]  # no temporary files left behind


def test_missing_compiler_makes_clang_unavailable_not_import_errors(tmp_path):
  env = {"PATH": str(tmp_path), "CC": "no-such-cc", "HOME": str(tmp_path)}
  code = ("import refgrad; from refgrad import Device; s = [s for s in Device.specs() if s.name == 'CLANG'][0];"
          "print(s.unavailable_reason)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
  assert "no C compiler found: tried clang, no-such-cc, cc" in out.stdout
  fail = subprocess.run([sys.executable, "-c", "from refgrad import Tensor; Tensor([1], device='CLANG')"],
                        capture_output=True, text=True, env=env)
  assert fail.returncode != 0 and "device CLANG is unavailable: no C compiler found" in fail.stderr


def test_parallel_processes_share_the_cache_safely(tmp_path):
  code = ("import numpy as np; from refgrad import Tensor;"
          "x = Tensor(np.arange(64, dtype=np.float32), device='CLANG');"
          "print(float(((x * 3 + 1) * x).sum().item()))")
  env = {**os.environ, "REFGRAD_CACHE": str(tmp_path)}
  procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]
  outputs = [p.communicate()[0].strip() for p in procs]
  expected = float(((np.arange(64) * 3 + 1) * np.arange(64)).sum())
  assert all(p.returncode == 0 for p in procs) and {float(o) for o in outputs} == {expected}


def test_values_on_clang_match_numpy():
  x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
  t = Tensor(x, device="CLANG")
  np.testing.assert_array_equal((t * 2 - 1).numpy(), x * 2 - 1)
  np.testing.assert_allclose((t @ t.T).numpy(), x @ x.T, rtol=1e-6)


# ---- the C backend's other compiler configurations: GCC, CLANG_O3 (refgrad_clang.C_COMPILERS)

def compiler_configs():
  from refgrad_clang import C_COMPILERS
  return C_COMPILERS


@pytest.mark.parametrize("name", ["CLANG", "GCC", "CLANG_O3"])
def test_each_compiler_configuration_computes_like_numpy(name):
  if name not in Device.available():
    pytest.skip(f"{name}'s compiler is not installed here")
  x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
  n = np.array([2 ** 31 - 1, -7, 5, -(2 ** 31)], dtype=np.int32)
  np.testing.assert_array_equal((Tensor(x, device=name) * 3 - 1).sum(1).numpy(), (x * 3 - 1).sum(1, dtype=np.float32))
  with np.errstate(over="ignore"):
    np.testing.assert_array_equal((Tensor(n, device=name) + 1).numpy(), n + np.int32(1))  # -fwrapv: wraps


def test_every_compiler_configuration_keeps_the_spec_flags_and_has_its_own_cache_key():
  configs = [c for c in compiler_configs() if c.device in Device.available()]
  keys = [Device[c.device].compiler.cache_key for c in configs]
  assert len(set(keys)) == len(keys)
  for config, key in zip(configs, keys):
    compiler = Device[config.device].compiler
    assert compiler.flags == config.flags and compiler.version in key and " ".join(config.flags) in key
    assert {"-fwrapv", "-ffp-contract=off", "-fno-fast-math"} <= set(config.flags)


def test_a_configuration_whose_compiler_is_missing_says_what_it_tried(tmp_path):
  env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
  code = ("import json; from refgrad import Device;"
          "print(json.dumps({s.name: s.unavailable_reason for s in Device.specs()}))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
  reasons = json.loads(out)
  assert reasons["GCC"] == "no C compiler found: tried gcc"
  assert reasons["CLANG_O3"] == "no C compiler found: tried clang"


@pytest.mark.parametrize("name", ["GCC", "CLANG_O3"])
def test_refgrad_check_passes_on_the_other_compilers(name):
  """Their own conformance run, on one row of the matrix (the full `refgrad check --device GCC` passes every case;
  the test suite's device parametrization leaves these devices out: tests/conftest.py)."""
  if name not in Device.available():
    pytest.skip(f"{name}'s compiler is not installed here")
  run = subprocess.run([sys.executable, "-m", "refgrad.cli", "check", "--device", name, "--only", "MOD", "-q"],
                       capture_output=True, text=True, timeout=600)
  assert run.returncode == 0 and f"{name}: " in run.stdout and " 0 failed" in run.stdout, run.stdout + run.stderr


def narrow_sum(v0, v1):
  """sum(v0 + v1) in v0's dtype, wrapping, as one REDUCE_AXIS kernel (a `refgrad fuzz` finding's program on GCC)."""
  from refgrad.uop import Ops, UOp
  added = UOp(Ops.ADD, v0.dtype, (v0.uop, v1.uop))
  return v0._from(UOp(Ops.REDUCE_AXIS, v0.dtype, (added,), (Ops.ADD, (0,))))


@pytest.mark.parametrize("name", ["CLANG", "GCC", "CLANG_O3"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16])
def test_sums_of_narrow_integers_wrap_as_the_reference_does(name, dtype):
  """GCC 12's loop vectorizer got these wrong (bugs/gcc-narrow-int-sum-vectorizer); the GCC device turns it off."""
  from refgrad.testing.oracle.reference import check_against_reference
  if name not in Device.available():
    pytest.skip(f"{name}'s compiler is not installed here")
  info = np.iinfo(dtype)
  edges = np.array([info.min, info.max, info.min + 1, info.max - 1, -1, 0, 1], dtype=dtype)
  rng = np.random.default_rng(7)
  x = np.concatenate([edges, rng.integers(info.min, info.max, 60, endpoint=True, dtype=dtype)])  # 67: a remainder
  y = np.concatenate([rng.integers(-8, 9, 60, dtype=dtype), edges[::-1]])
  check_against_reference(narrow_sum, x, y, device=name)


KERNEL_SOURCE = """#include <math.h>
void E_64(float* restrict data0, const float* restrict data1) {
  for (int i = 0; i < 64; i++) data0[i] = sinf(data1[i]) * 3.5f + 1.0f;
}
"""


@pytest.mark.parametrize("planted", [(), ("-ffast-math",)], ids=["CLANG", "fast-math"])
def test_linking_directly_builds_the_drivers_library_byte_for_byte(planted):
  """The compile runs `clang -c`, then the linker command clang's dry run printed; the library must be the one
  clang's one-step build links, byte for byte. -ffast-math makes the driver add crtfastmath.o (which switches a
  process that loads the library to flush-to-zero): a link line learnt without the flags would lose it."""
  import refgrad_clang
  base = Device["CLANG"].compiler
  if refgrad_clang.link_command(base.path, base.flags + planted) is None:
    pytest.skip(f"{base.version} links through its driver only (its dry run is not one linker command)")
  flags = base.flags + planted
  direct = refgrad_clang.ClangCompiler(base.path, flags).compile(KERNEL_SOURCE)
  through_driver = refgrad_clang.ClangCompiler(base.path, flags, link_directly=False).compile(KERNEL_SOURCE)
  assert direct == through_driver

