"""The CLANG plugin: discovery, compile errors, the compile cache, and a missing compiler."""
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
