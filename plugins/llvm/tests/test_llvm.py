"""The LLVM plugin: discovery, verifier errors, the compile cache, a missing llvmlite, and values that need care."""
import json
import os
import re
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from refgrad import Device, Tensor, dtypes
from refgrad.codegen.contract import split_batch_binary
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile, cached_compile_batch

pytestmark = pytest.mark.skipif("LLVM" not in Device.available(), reason="refgrad-llvm or llvmlite is not installed")

NOT_DOMINATED = """define void @f(i1 %c) {
entry:
  br i1 %c, label %a, label %b
a:
  %x = add i32 1, 2
  br label %b
b:
  %y = add i32 %x, 1
  ret void
}
"""


def test_llvm_is_found_through_its_entry_point_with_its_versions():
  spec = next(s for s in Device.specs() if s.name == "LLVM")
  assert spec.plugin == "refgrad-llvm" and spec.unavailable_reason is None
  assert re.search(r"\(llvmlite [\d.]+\w*, LLVM \d+\.\d+", spec.version), spec.version


def test_verifier_error_shows_numbered_ir_and_llvms_message():
  from refgrad_llvm import LLVMCompileError
  with pytest.raises(LLVMCompileError) as info:
    Device["LLVM"].compiler.compile(NOT_DOMINATED)  # parses fine: only the verifier catches it
  message = str(info.value)
  assert "   8 |   %y = add i32 %x, 1" in message and "does not dominate" in message
  assert isinstance(info.value, RuntimeError)


def test_parse_error_shows_numbered_ir_and_llvms_message():
  from refgrad_llvm import LLVMCompileError
  with pytest.raises(LLVMCompileError) as info:
    Device["LLVM"].compiler.compile("define void @f() {\n  ret i32\n}\n")
  assert "   2 |   ret i32" in str(info.value) and "error" in str(info.value)


def test_rendered_ir_has_no_fast_math_and_nan_correct_comparisons():
  x = Tensor(np.arange(6, dtype=np.float32), device="LLVM")
  source = Device["LLVM"].render(compile_ast(((x < 2) | (x != 3)).where(x.maximum(1.0), x).schedule()[-1].ast))
  assert "fcmp olt" in source and "fcmp une" in source and "@llvm.maximum.f32" in source
  assert not re.search(r"\b(fast|reassoc|nnan|ninf|nsz|arcp|contract|afn)\b", source)


def test_second_compile_is_a_cache_hit_and_the_cached_object_runs(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  device = Device["LLVM"]
  x = Tensor(np.arange(40, dtype=np.float32), device="LLVM")
  program = compile_ast((x * 1.25 + 0.5).schedule()[-1].ast)
  source = device.render(program)
  calls = []
  compile_once = device.compiler.compile
  monkeypatch.setattr(device.compiler, "compile", lambda s: calls.append(s) or compile_once(s))
  binary = cached_compile(device.compiler, source)
  assert cached_compile(device.compiler, source) == binary and len(calls) == 1
  assert list(tmp_path.rglob("*.bin"))
  out = np.zeros(40, dtype=np.float32)
  device.runtime.load(binary, program)(out.view(np.uint8), np.arange(40, dtype=np.float32).view(np.uint8))
  np.testing.assert_array_equal(out, np.arange(40, dtype=np.float32) * 1.25 + 0.5)


def output_words(code: str, env: dict) -> list[str]:
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
  return done.stdout.split()


def test_another_process_reuses_the_cached_object(tmp_path):
  code = ("import numpy as np; from refgrad import Tensor; import refgrad_llvm; calls = [];"
          "compile_once = refgrad_llvm.LLVMCompiler.compile;"
          "refgrad_llvm.LLVMCompiler.compile = lambda self, s: calls.append(1) or compile_once(self, s);"
          "x = Tensor(np.arange(64, dtype=np.float32), device='LLVM');"
          "value = float(((x * 3 + 1) * x).sum().item()); print(len(calls), value)")
  env = {**os.environ, "REFGRAD_CACHE": str(tmp_path)}
  runs = [output_words(code, env) for _ in range(2)]
  expected = float(((np.arange(64) * 3 + 1) * np.arange(64)).sum())
  assert int(runs[0][0]) >= 1 and int(runs[1][0]) == 0
  assert float(runs[0][1]) == float(runs[1][1]) == expected


def test_missing_llvmlite_makes_llvm_unavailable_not_import_errors():
  block = "import sys; sys.modules['llvmlite'] = None;"  # importing llvmlite now raises ImportError
  code = block + "import refgrad; from refgrad import Device; print([s.unavailable_reason for s in Device.specs() " \
                 "if s.name == 'LLVM'][0])"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert "llvmlite cannot be imported" in out.stdout
  fail = subprocess.run([sys.executable, "-c", block + "from refgrad import Tensor; Tensor([1], device='LLVM')"],
                        capture_output=True, text=True)
  assert fail.returncode != 0 and "device LLVM is unavailable: llvmlite cannot be imported" in fail.stderr


def test_values_on_llvm_match_numpy():
  x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6)
  t = Tensor(x, device="LLVM")
  np.testing.assert_array_equal((t * 2 - 1).numpy(), x * 2 - 1)
  np.testing.assert_allclose((t @ t.T).numpy(), x @ x.T, rtol=1e-6)
  big = np.arange(1000, dtype=np.float64)
  assert Tensor(big, device="LLVM").sum().item() == big.sum()  # a reduce split over several accumulators


def test_undefined_lanes_never_trap_or_disturb_their_neighbours():
  a = np.array([7, -7, -128, 5, 100, -1] * 5, dtype=np.int8)
  b = np.array([2, 0, -1, 0, -3, 9] * 5, dtype=np.int8)
  defined = (b != 0) & ~((a == -128) & (b == -1))
  got = Tensor(a, device="LLVM").idiv(Tensor(b, device="LLVM")).numpy()
  np.testing.assert_array_equal(got[defined], np.trunc(a[defined] / b[defined]).astype(np.int8))
  shifted = (Tensor(a, device="LLVM") << Tensor(b, device="LLVM")).numpy()
  ok = (b >= 0) & (b < 8)
  np.testing.assert_array_equal(shifted[ok], (a[ok].astype(np.uint8) << b[ok].astype(np.uint8)).astype(np.int8))
  f = np.array([1.5, np.nan, np.inf, -1e30, 300.0, -2.5] * 5, dtype=np.float32)
  cast = Tensor(f, device="LLVM").cast(dtypes.uint8).numpy()
  fits = np.isfinite(f) & (np.trunc(f) >= 0) & (np.trunc(f) < 256)
  np.testing.assert_array_equal(cast[fits], np.trunc(f[fits]).astype(np.uint8))


def test_half_and_bfloat16_round_once_per_op():
  # float16 subnormals: 1.5 and 0.5 units of the smallest one are ties, rounded to even (2 units, and 0)
  tiny = Tensor(np.array([2.0 ** -24] * 2, np.float32), device="LLVM").cast(dtypes.float16)
  assert (tiny * Tensor(np.array([1.5, 0.5], np.float32), device="LLVM").cast(dtypes.float16)).numpy().tolist() == \
    [2.0 ** -23, 0.0]
  # float64 -> bfloat16 must not round through float32 (ml_dtypes' double rounding gives 1.0)
  b = Tensor(np.array([1 + 2 ** -8 + 2 ** -30]), device="LLVM").cast(dtypes.bfloat16).cast(dtypes.float64)
  assert b.numpy().tolist() == [1 + 2 ** -7]
  # int64 -> bfloat16 must not round through float64 (a false tie)
  c = Tensor(np.array([2 ** 62 + 2 ** 54 + 1], np.int64), device="LLVM").cast(dtypes.bfloat16).cast(dtypes.float64)
  assert c.numpy().tolist() == [float(2 ** 62 + 2 ** 55)]


# A child that aborts, as LLVM does on an assertion, when the IR carries a marker comment: with loop vectorization
# only (ABORT_VECTORIZED), or always (ABORT_ALWAYS). Everything else it compiles for real.
ABORTING_CHILD = """
import os
import refgrad_llvm
from refgrad_llvm.isolation import main
real = refgrad_llvm.LLVMCompiler.compile_here
def compile_here(self, source, vectorize=True):
  if "ABORT_ALWAYS" in source or ("ABORT_VECTORIZED" in source and vectorize):
    os.abort()
  return real(self, source, vectorize)
refgrad_llvm.LLVMCompiler.compile_here = compile_here
main()
"""


def scaled_kernel(marker: str, scale: float = 1.25):
  """IR of out = x * scale + 0.5 over 40 floats, with a marker comment, and a check that a binary computes what
  numpy does."""
  x = Tensor(np.arange(40, dtype=np.float32), device="LLVM")
  program = compile_ast((x * scale + 0.5).schedule()[-1].ast, Device["LLVM"].caps)
  source = f"; {marker}\n" + Device["LLVM"].render(program)

  def check(binary: bytes) -> None:
    out = np.zeros(40, dtype=np.float32)
    Device["LLVM"].runtime.load(binary, program)(out.view(np.uint8), np.arange(40, dtype=np.float32).view(np.uint8))
    np.testing.assert_array_equal(out, np.arange(40, dtype=np.float32) * np.float32(scale) + np.float32(0.5))
  return source, check


def test_batch_parts_hold_every_kernel_once_and_share_the_ir_evenly(monkeypatch):
  import refgrad_llvm
  monkeypatch.setattr(refgrad_llvm, "KERNELS_PER_PART", 2)
  sources = ["x" * size for size in (50, 10, 40, 10, 30, 20, 5)]
  parts = refgrad_llvm.batch_parts(sources, cores=3)
  assert sorted(i for part in parts for i in part) == list(range(7))
  assert [sum(len(sources[i]) for i in part) for part in parts] == [60, 55, 50]  # 50+10, 40+10+5, 30+20
  assert refgrad_llvm.batch_parts(sources, cores=1) == [list(range(7))]
  assert len(refgrad_llvm.batch_parts(sources[:5], cores=4)) == 2  # KERNELS_PER_PART each at least


def test_a_batch_in_parts_compiles_in_started_children_at_once_and_each_kernel_runs(monkeypatch):
  import refgrad_llvm
  from refgrad_llvm import LLVMCompileError
  from refgrad_llvm.isolation import CompileChildren

  monkeypatch.setattr(refgrad_llvm, "KERNELS_PER_PART", 2)
  monkeypatch.setattr(refgrad_llvm, "compile_cores", lambda: 3)
  monkeypatch.setattr(refgrad_llvm, "SPREAD_AFTER", 6)  # the second batch may start children
  compiler = refgrad_llvm.LLVMCompiler()
  compiler.child = CompileChildren()
  kernels = [scaled_kernel("part", scale) for scale in (1.25, -3.0, 0.1, 7.5, 1e30, -0.0)]
  sources = [source for source, _ in kernels]

  def libraries(binaries: list[bytes]) -> int:
    for (_, check), binary in zip(kernels, binaries):
      check(binary)
    return len({split_batch_binary(binary)[1] for binary in binaries})
  try:
    assert libraries(compiler.compile_batch(sources)) == 1 and len(compiler.child._every) == 1
    assert libraries(compiler.compile_batch(sources)) == 1  # the children it started are starting: no batch waits
    deadline = time.monotonic() + 120
    while compiler.child.available(3) < 3 and time.monotonic() < deadline:  # the two started for later batches
      time.sleep(0.05)
    assert libraries(compiler.compile_batch(sources[::-1])[::-1]) == 3  # a part in each child
    assert len(compiler.child._every) == 3
    with pytest.raises(LLVMCompileError, match="LLVM rejected this program"):  # refgrad then compiles it in halves
      compiler.compile_batch(sources[:5] + ["define void @f() {\n  ret i32\n}\n"])
  finally:
    compiler.child.close()


def test_llvm_aborting_ends_its_child_not_the_caller():
  from refgrad_llvm import LLVMCompileError, LLVMCompiler
  from refgrad_llvm.isolation import CompileChild
  compiler = LLVMCompiler()
  compiler.child = CompileChild()
  compiler.child.command = (sys.executable, "-c", ABORTING_CHILD)
  try:
    source, check = scaled_kernel("ABORT_VECTORIZED")
    with pytest.warns(RuntimeWarning, match=r"LLVM aborted while optimizing kernel E_40.*signal 6.*without loop vec"):
      check(compiler.compile(source))
    source, _ = scaled_kernel("ABORT_ALWAYS")
    with pytest.raises(LLVMCompileError, match=r"with and without loop vectorization \(.*signal 6") as info:
      with pytest.warns(RuntimeWarning, match="compiling it again without loop vectorization"):
        compiler.compile(source)
    assert "define void @E_40" in str(info.value)  # the numbered IR
    source, check = scaled_kernel("fine")
    check(compiler.compile(source))  # a new child took over
    with pytest.raises(LLVMCompileError, match="LLVM rejected this program"):  # bad IR is still an error, no abort
      compiler.compile("define void @f() {\n  ret i32\n}\n")
  finally:
    compiler.child.close()


# Compile children gone wrong in the two ways that would cache one kernel's code under another's source: one that
# answers each request with the answer to the request before it (a stale answer left in the channel), and one that
# names a batch's kernels in the wrong order.
LAGGING_CHILD = """
from refgrad_llvm import isolation
real_send, answers = isolation.send, []
def lagging(stream, message):
  if message != isolation.READY:
    answers.append(message)
    message = answers[-2] if len(answers) > 1 else message
  real_send(stream, message)
isolation.send = lagging
isolation.main()
"""
MISNAMING_CHILD = """
import refgrad_llvm
from refgrad_llvm.isolation import main
real = refgrad_llvm.LLVMCompiler.compile_batch_here
def misnaming(self, sources, vectorize=True):
  compiled, symbols = real(self, sources, vectorize)
  return compiled, symbols[::-1]
refgrad_llvm.LLVMCompiler.compile_batch_here = misnaming
main()
"""


def compiler_with_child(script: str):
  from refgrad_llvm import LLVMCompiler
  from refgrad_llvm.isolation import CompileChild
  compiler = LLVMCompiler()
  compiler.child = CompileChild()
  compiler.child.command = (sys.executable, "-c", script)
  return compiler


def test_an_answer_to_another_request_is_refused_and_nothing_wrong_is_cached(tmp_path, monkeypatch):
  from refgrad_llvm.isolation import ChannelError
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = compiler_with_child(LAGGING_CHILD)
  first = [scaled_kernel("first", scale) for scale in (1.25, -3.0)]
  second = [scaled_kernel("second", scale) for scale in (0.5, 7.0, -0.0)]
  try:
    for binary, (_, check) in zip(compiler.compile_batch([source for source, _ in first]), first):
      check(binary)
    with pytest.raises(ChannelError, match="answered another request"):  # it answers with the first batch's
      compiler.compile_batch([source for source, _ in second])
    binaries = cached_compile_batch(compiler, [source for source, _ in second])  # a new child answers this one
  finally:
    compiler.child.close()
  for binary, (_, check) in zip(binaries, second):
    check(binary)


def test_a_batch_whose_kernels_come_back_misnamed_is_refused_and_compiled_one_by_one(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  compiler = compiler_with_child(MISNAMING_CHILD)
  kernels = [scaled_kernel("misnamed", scale) for scale in (1.25, -3.0, 1e30)]
  sources = [source for source, _ in kernels]
  try:
    with pytest.raises(RuntimeError, match=r"named 3 kernels \['b2_E_40', 'b1_E_40', 'b0_E_40'\] for a batch of 3"):
      compiler.compile_batch(sources)
    binaries = cached_compile_batch(compiler, sources)
  finally:
    compiler.child.close()
  assert all(split_batch_binary(binary) is None for binary in binaries)  # each compiled alone
  for binary, (_, check) in zip(binaries, kernels):
    check(binary)


def test_a_loop_llvms_vectorizer_aborts_on_runs_and_matches_the_reference(tmp_path, monkeypatch):
  """refgrad fuzz finding: LLVM 22's loop vectorizer asserted ("VPlan cost model and legacy cost model disagreed")
  on a 9-iteration max of guarded remainders, and took the whole process with it."""
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))  # compiled here, not loaded from an earlier run's cache
  from refgrad.testing.oracle.reference import check_against_reference
  from refgrad.uop import Ops, UOp

  def mod(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.MOD, dtypes.int32, (a, b))

  def program(v0, v1, v2, v3, v4):
    int_min = v0._const(-2147483648, dtypes.int32).reshape(1).expand(v0.shape).uop
    add = UOp(Ops.ADD, dtypes.int32, (v1.uop, v2.uop))
    body = mod(mod(mod(v0.uop, int_min), add), mod(v3.uop, v4.uop))
    return v0._from(UOp(Ops.REDUCE_AXIS, dtypes.int32, (body,), (Ops.MAX, (0,))))

  x = np.array([-1399975365, -5, 1213567962, 6, 5, -2, 1931175714, 0, -7], dtype=np.int32)
  zeros = np.zeros(9, dtype=np.int32)
  ones = np.array([1, 3, -2, 7, 1, 1, 4, 5, -9], dtype=np.int32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # whether this LLVM still aborts there is LLVM's business
    check_against_reference(program, x, zeros, zeros, zeros, zeros, device="LLVM")
    check_against_reference(program, x, ones, ones, ones, x, device="LLVM")


# A compile child in which LLVM never finishes optimizing a kernel whose IR starts with "; hangs" (with loop
# vectorization on), as LLVM 22's loop vectorizer all but never finished on an int32 `**` kernel.
HANGING_CHILD = """
import time
import refgrad_llvm
from refgrad_llvm.isolation import main
real_one, real_batch = refgrad_llvm.LLVMCompiler.compile_here, refgrad_llvm.LLVMCompiler.compile_batch_here
def stall(sources, vectorize):
  if vectorize and any(source.startswith("; hangs") for source in sources):
    time.sleep(3600)
def one(self, source, vectorize=True):
  stall([source], vectorize)
  return real_one(self, source, vectorize)
def batch(self, sources, vectorize=True):
  stall(sources, vectorize)
  return real_batch(self, sources, vectorize)
refgrad_llvm.LLVMCompiler.compile_here, refgrad_llvm.LLVMCompiler.compile_batch_here = one, batch
main()
"""


def test_a_compile_past_its_time_limit_is_stopped_and_its_kernel_compiled_without_loop_vectorization(
    tmp_path, monkeypatch):
  import refgrad_llvm
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  monkeypatch.setattr(refgrad_llvm, "COMPILE_SECONDS", 1.0)
  monkeypatch.setattr(refgrad_llvm, "COMPILE_SECONDS_PER_KERNEL", 0.5)
  compiler = compiler_with_child(HANGING_CHILD)
  kernels = [scaled_kernel("fine", 1.25), scaled_kernel("hangs", -3.0), scaled_kernel("fine too", -0.0)]
  try:
    with pytest.warns(RuntimeWarning, match=r"LLVM ran past its time limit while optimizing kernel E_40 \(LLVM did "
                      r"not finish within 1 s.*\); compiling it again without loop vectorization"):
      binaries = cached_compile_batch(compiler, [source for source, _ in kernels])
  finally:
    compiler.child.close()
  assert all(split_batch_binary(binary) is None for binary in binaries)  # the batch ran out of time: one by one
  for binary, (_, check) in zip(binaries, kernels):
    check(binary)


def test_an_int_power_llvm_takes_minutes_to_vectorize_gives_exact_values_in_seconds(tmp_path, monkeypatch):
  """LLVM 22's loop vectorizer took 484 s over this 17x20 int32 `**` (bugs/llvm-loop-vectorizer-compile-time): past
  the time limit the kernel is compiled without it. The values are Python's exact powers, wrapped to 32 bits."""
  import refgrad_llvm
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  monkeypatch.setattr(refgrad_llvm, "COMPILE_SECONDS", 2.0)
  base = np.array([0, 1, -1, 2, -2, 3, 7, -7, 11, -3, 127, -128, 46341, 65536, 2**31 - 1, -2**31, 5], np.int32)
  exponent = np.array([0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 30, 31, 32, 33, 40, 63, 64, 100, 2**31 - 1, 9], np.int32)
  want = np.array([[pow(int(b), int(e), 2**32) for e in exponent] for b in base], np.uint32).view(np.int32)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # whether this LLVM still takes minutes is LLVM's business
    got = (Tensor(base.reshape(17, 1), device="LLVM") ** Tensor(exponent.reshape(1, 20), device="LLVM")).numpy()
  np.testing.assert_array_equal(got, want)


def test_a_process_that_compiled_ends_with_its_compile_child_closed(tmp_path):
  """Python's collector used to find the child's pipes and output file open at exit, and the child running: a
  ResourceWarning each under -X dev. Now the child is closed before the interpreter ends."""
  script = ("import numpy as np; from refgrad import Tensor; "
            "print((Tensor(np.array([-1.5, 0.0, 2.25], np.float32), device='LLVM') * 3).numpy().tolist())")
  run = subprocess.run([sys.executable, "-X", "dev", "-W", "always", "-c", script], capture_output=True, text=True,
                       env={**os.environ, "REFGRAD_CACHE": str(tmp_path)}, timeout=120)
  assert run.returncode == 0, run.stderr
  assert json.loads(run.stdout) == (np.array([-1.5, 0.0, 2.25], np.float32) * 3).tolist()
  assert "ResourceWarning" not in run.stderr, run.stderr


def test_one_table_renders_every_op_of_a_cpu_program():
  """LLVM_RULES, over the core's walker (refgrad/codegen/walker.py), has the rule of every ALU op of ops.py's
  OP_FACTS and of every other op a program that is not GPU-shaped holds."""
  from refgrad_llvm.render import LLVM_RULES

  from refgrad.ops import OP_FACTS
  from refgrad.uop import Ops
  program_ops = {Ops.PARAM, Ops.SPECIAL, Ops.CONST, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.DEFINE_ACC,
                 Ops.RANGE, Ops.ENDRANGE, Ops.ACCUMULATE}
  assert set(LLVM_RULES) == set(OP_FACTS) | program_ops


def max_of_rows(dtype) -> tuple[str, list[str]]:
  """The LLVM IR of a max over rows of 1031 and the renderer's code paths for it."""
  impl = Device["LLVM"]
  program = compile_ast(Tensor(np.zeros((3, 1031), dtype), device="LLVM").max(axis=1).schedule()[-1].ast, impl.caps)
  return impl.render(program), impl.renderer.code_paths(program)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.float16])
def test_the_loop_vectorizer_stays_off_split_reduction_lanes_except_float_accumulators(dtype):
  """The 8 lanes of a split reduction are a vector already: LLVM vectorizing their loop again took 2-4 s for one
  int8 kernel (0.1 s without) and made int64 and float64 reductions 3x slower; float accumulators (float32 and
  half) keep it (bench/split_reductions.py)."""
  source, paths = max_of_rows(dtype)
  assert "split reduction (8 accumulators)" in paths
  kept_off = '!{!"llvm.loop.vectorize.enable", i1 false}' in source and ", !llvm.loop !1" in source
  assert kept_off == (dtype not in (np.float32, np.float16)), source[-400:]


EDGE_ROWS = {
  np.int8: [[127] * 1031, [-128] * 1031, list(range(-128, 128)) * 4 + [5] * 7],
  np.int16: [[32767] * 1031, [-32768] * 1031, [(i * 977) % 65536 - 32768 for i in range(1031)]],
  np.int64: [[2**62] * 1031, [-(2**63)] * 1031, [(i * 2**40 + 7) * (-1) ** i for i in range(1031)]],
  np.float64: [[-0.0] * 1030 + [0.0], [np.nan] + [1.0] * 1030, [np.inf] * 3 + [-np.inf] * 1028],
}


@pytest.mark.parametrize("dtype", list(EDGE_ROWS))
def test_split_reductions_without_the_loop_vectorizer_match_numpy_at_the_edges(dtype):
  """Rows of 1031 (128 rounds of 8 lanes and a remainder of 7) at the values a wrong lane or a wrong remainder
  shows: extremes that wrap when summed, a NaN in lane 0, signed zeros and infinities."""
  rows = np.array(EDGE_ROWS[dtype], dtype)
  x = Tensor(rows, device="LLVM")
  np.testing.assert_array_equal(x.max(axis=1).numpy(), rows.max(axis=1))
  np.testing.assert_array_equal(x.min(axis=1).numpy(), rows.min(axis=1))
  with np.errstate(over="ignore", invalid="ignore"):
    expected_sum = rows.sum(axis=1, dtype=x.sum(axis=1).dtype.np)
  np.testing.assert_array_equal(x.sum(axis=1).numpy(), expected_sum)
