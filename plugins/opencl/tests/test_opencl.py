"""The OPENCL plugin: discovery and the GPU alias, build errors, device limits, the local-memory reduction, the
compile cache, honest dtypes, and an unavailable platform. Values are checked on every device elsewhere."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refgrad import Device, Tensor, dtypes
from refgrad.codegen.contract import UnsupportedDTypeError
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import cached_compile
from refgrad.device import DeviceImpl
from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS
from refgrad.uop import Ops

pytestmark = pytest.mark.skipif("OPENCL" not in Device.available(), reason="OpenCL is not available here")


@pytest.fixture(scope="module")
def opencl():
  return Device["OPENCL"]


def program_of(t: Tensor):
  return compile_ast(t.schedule()[-1].ast, Device["OPENCL"].caps)


def test_opencl_is_found_through_its_entry_point_and_names_its_device():
  import pyopencl as cl
  spec = next(s for s in Device.specs() if s.name == "OPENCL")
  device = Device["OPENCL"].compiler.device
  assert spec.plugin == "refgrad-opencl" and spec.unavailable_reason is None
  assert device.platform.name.strip() in spec.version and device.name.strip() in spec.version
  assert isinstance(device, cl.Device)


def test_gpu_is_an_alias_of_opencl():
  assert Device.canonicalize("gpu") == "OPENCL" and Device["GPU"] is Device["OPENCL"]
  np.testing.assert_array_equal((Tensor([1, 2, 3], device="GPU") * 2).numpy(), [2, 4, 6])


def test_build_failure_shows_numbered_source_and_build_log(opencl):
  from refgrad_opencl.runtime import CompileError
  with pytest.raises(CompileError) as info:
    opencl.compiler.compile("__kernel void broken(__global float* x) {\n  x[0] = undefined_name;\n}\n")
  message = str(info.value)
  assert "   2 |   x[0] = undefined_name;" in message and "build log:" in message and "undefined_name" in \
    message.split("build log:")[1]


def test_the_renderer_writes_opencl_c(opencl):
  x = Tensor(np.arange(5000, dtype=np.float32), device="OPENCL").realize()
  source = opencl.render(program_of(x.sum()))
  for piece in ("__kernel void", "__global float*", "__local float", "get_local_id(0)", "barrier(CLK_LOCAL_MEM_FENCE)",
                "if (", "as_uint"):
    assert piece in source, piece


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.float16])
def test_local_memory_reductions_match_numpy(dtype):
  rng = np.random.default_rng(0)
  data = rng.integers(-1000, 1000, 300_001).astype(dtype.np)  # integer values: every float order is exact
  x = Tensor(data, device="OPENCL")
  total = x.sum() if dtype != dtypes.float16 else x.max()
  assert Ops.DEFINE_LOCAL in {u.op for u in program_of(total).uops}
  expected = data.astype(np.float64).sum() if dtype != dtypes.float16 else data.max()
  assert total.item() == expected
  rows = x[:300_000].reshape(6, 50_000)
  assert Ops.BARRIER in {u.op for u in program_of(rows.max(1)).uops}
  np.testing.assert_array_equal(rows.max(1).numpy(), data[:300_000].reshape(6, 50_000).max(1))
  np.testing.assert_array_equal(rows.min(1).numpy(), data[:300_000].reshape(6, 50_000).min(1))


def test_float_sum_in_local_memory_is_within_the_spec_bound():
  data = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
  got = Tensor(data, device="OPENCL").sum().item()
  exact = np.sum(data.astype(np.float64))
  gamma = len(data) * 2.0 ** -24 / (1 - len(data) * 2.0 ** -24)
  assert abs(got - exact) <= gamma * np.abs(data.astype(np.float64)).sum()


def small_limits(opencl, **changes):
  from dataclasses import replace

  from refgrad_opencl.runtime import CLRuntime
  runtime = opencl.runtime
  return CLRuntime(runtime.context, runtime.queue, runtime.device, replace(runtime.limits, **changes))


def run_with(runtime, opencl, t: Tensor, caps=None) -> np.ndarray:
  item = t.schedule()[-1]
  program = compile_ast(item.ast, caps or opencl.caps)
  runner = runtime.load(cached_compile(opencl.compiler, opencl.render(program)), program)
  runner(*(b.handle for b in item.buffers))
  return item.buffers[0].numpy()


@pytest.mark.parametrize("interleaved", [True, False], ids=["gpu-layout", "cpu-layout"])
def test_both_layouts_of_grouped_reductions_run_on_opencl(opencl, interleaved):
  from dataclasses import replace
  caps = replace(opencl.caps, interleaved_groups=interleaved)
  data = np.arange(-5000, 5001, dtype=np.int64)
  x = Tensor(data, device="OPENCL")
  for t, expected in ((x.sum(), data.sum()), (x[:10000].reshape(4, 2500).max(1), data[:10000].reshape(4, 2500).max(1))):
    assert Ops.DEFINE_LOCAL in {u.op for u in compile_ast(t.schedule()[-1].ast, caps).uops}
    np.testing.assert_array_equal(run_with(opencl.runtime, opencl, t, caps).reshape(np.shape(expected)), expected)


def test_plain_kernels_shrink_their_work_groups_to_the_device_limit(opencl):
  runtime = small_limits(opencl, max_work_group_size=3, max_work_item_sizes=(3, 3, 3))
  data = np.arange(4096, dtype=np.float32)
  out = run_with(runtime, opencl, Tensor(data, device="OPENCL") * 2 + 1)
  np.testing.assert_array_equal(out, data * 2 + 1)


def test_grouped_kernels_beyond_the_device_limits_raise_clearly(opencl):
  from refgrad_opencl.runtime import LaunchError
  x = Tensor(np.arange(100_000, dtype=np.int32), device="OPENCL")
  with pytest.raises(LaunchError, match=r"needs work-groups of \(256,\) work-items, but .* allows at most 64"):
    run_with(small_limits(opencl, max_work_group_size=64), opencl, x.sum())
  with pytest.raises(LaunchError, match="bytes of local memory"):
    run_with(small_limits(opencl, local_memory=16), opencl, x.sum())


def test_codegen_respects_the_device_limits():
  from refgrad_opencl.dialect import DeviceLimits, capabilities
  limits = DeviceLimits(frozenset(), local_memory=64, max_work_group_size=8, max_work_item_sizes=(8, 8, 8))
  x = Tensor(np.arange(100_000, dtype=np.int32)).realize()
  program = compile_ast(x.sum().schedule()[-1].ast, capabilities(limits))
  assert program.local_shape == (8,)
  wide = compile_ast((x.reshape(10, 10_000) + 1).contiguous().schedule()[-1].ast, capabilities(limits))
  assert wide.global_shape == (10_000, 10) and np.prod(wide.local_shape) <= 8


def test_compile_cache_hits_and_reloads_the_binary(opencl, tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  x = Tensor(np.arange(64, dtype=np.float32), device="OPENCL")
  t = (x * 1.25 + 0.75) * x
  source = opencl.render(program_of(t))
  binary = cached_compile(opencl.compiler, source)
  assert list(tmp_path.rglob("*.bin"))

  def no_build(source: str) -> bytes:
    raise AssertionError("the cache should have answered")
  monkeypatch.setattr(opencl.compiler, "compile", no_build)
  assert cached_compile(opencl.compiler, source) == binary
  out = run_with(opencl.runtime, opencl, t)
  np.testing.assert_array_equal(out, (np.arange(64, dtype=np.float32) * 1.25 + 0.75) * np.arange(64))


def test_a_device_without_fp64_claims_no_float64_and_says_so(opencl):
  from refgrad_opencl.dialect import DeviceLimits, capabilities, opencl_dialect

  from refgrad.codegen.cstyle import CStyleRenderer
  limits = DeviceLimits(frozenset({"cl_khr_byte_addressable_store"}), 1 << 15, 256, (256, 256, 256))
  assert dtypes.float64 not in capabilities(limits).dtypes and dtypes.float16 in capabilities(limits).dtypes
  no_fp64 = DeviceImpl("NOFP64", opencl.allocator, renderer=CStyleRenderer(opencl_dialect(limits)),
                       compiler=opencl.compiler, runtime=opencl.runtime)
  program = compile_ast((Tensor([1.5], dtype=dtypes.float64) * 2).schedule()[-1].ast, no_fp64.caps)
  with pytest.raises(UnsupportedDTypeError, match="device NOFP64 does not support float64"):
    no_fp64.get_runner(program)


def test_no_platform_makes_opencl_unavailable_without_breaking_import(tmp_path):
  env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path), "OPENCL_VENDOR_PATH": str(tmp_path)}
  code = "import refgrad; s = [s for s in refgrad.Device.specs() if s.name == 'OPENCL'][0]; print(s.unavailable_reason)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
  assert "no OpenCL platform" in out.stdout
  fail = subprocess.run([sys.executable, "-c", "from refgrad import Tensor; Tensor([1], device='GPU').numpy()"],
                        capture_output=True, text=True, env=env)
  assert fail.returncode != 0 and "device OPENCL is unavailable: no OpenCL platform" in fail.stderr


@settings(max_examples=30, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)
@given(data=st.data())
def test_random_reductions_in_local_memory_match_the_reference(data):
  """Shapes large enough for work-groups of many items, every reduce op and dtype, against PYTHON bit for bit
  (sums of floats are kept exact by small integer values)."""
  dtype = data.draw(st.sampled_from([dtypes.int32, dtypes.int8, dtypes.uint64, dtypes.float32, dtypes.float16,
                                     dtypes.bfloat16, dtypes.float64, dtypes.bool]))
  shape = tuple(data.draw(st.lists(st.integers(1, 30), min_size=1, max_size=3)))
  shape = shape[:-1] + (shape[-1] * data.draw(st.sampled_from([1, 7, 60])),)
  axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
  op = data.draw(st.sampled_from(["sum", "max", "min"]))
  values = np.random.default_rng(data.draw(st.integers(0, 99))).integers(-3, 4, shape).astype(dtype.np)
  results = [getattr(Tensor(values, device=device), op)(axes).numpy() for device in ("PYTHON", "OPENCL")]
  np.testing.assert_array_equal(results[1], results[0])


def test_no_pyopencl_makes_opencl_unavailable():
  code = ("import sys; sys.modules['pyopencl'] = None; import refgrad;"
          "print([s.unavailable_reason for s in refgrad.Device.specs() if s.name == 'OPENCL'][0])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.startswith("pyopencl is not installed")


def test_bitcast_of_an_op_made_nan_is_undefined_not_a_mismatch():
  """Fuzz finding: PoCL's 0/0 is a positive NaN, x86's a negative one; SPEC.md leaves those bits unspecified."""
  from refgrad.testing.oracle.compare import compare
  from refgrad.testing.oracle.reference import undefined_lanes
  zeros = np.zeros(3, dtype=np.float32)
  results = []
  for device in ("PYTHON", "OPENCL"):
    out = (-(Tensor(zeros, device=device) / Tensor(zeros, device=device))).bitcast(dtypes.int32).realize()
    results.append((out.numpy(), undefined_lanes(out)))
  (expected, undefined), (actual, _) = results
  assert undefined is not None and undefined.all() and compare(actual, expected, undefined).ok


@pytest.mark.parametrize("opts", ["LOCAL(0,16) LOCAL(1,16) LOCALTILE(0,16)", "LOCAL(0,8) LOCAL(1,4) LOCALTILE(0,5)",
                                  "GROUP(0,7)", "LOCAL(0,3)", "PADTO(1,5) LOCAL(0,5) LOCAL(1,2) LOCALTILE(0,4)"])
def test_work_group_opts_and_local_tiles_run_on_opencl(opencl, opts):
  """The real device under the work-group opts: local-memory tiles with their barriers inside the loop, groups of
  7 items sharing a reduction, odd work-group shapes; values against the reference kernel by kernel."""
  from refgrad.codegen.opt import parse_opts
  from refgrad.testing.oracle.reference import check_against_reference
  rng = np.random.default_rng(9)
  a, b = rng.standard_normal((32, 80)).astype(np.float32), rng.standard_normal((80, 48)).astype(np.float32)
  fn = (lambda x, y: x @ y) if "GROUP" not in opts else (lambda x, y: x.sum(1) + y.sum(0)[:32])
  report = check_against_reference(fn, a, b, device="OPENCL", opts=lambda ast: parse_opts(opts))
  assert report.kernels and all(k.comparison.ok for k in report.kernels)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
@pytest.mark.parametrize("op", ["exp2", "trunc"])
def test_exp2_and_trunc_of_a_nan_the_compiler_sees_are_nan(opencl, op, dtype):
  """Fuzz finding: PoCL dropped the store of exp2(NAN + x) and trunc(NAN + x), leaving what the output held."""
  from refgrad.testing.oracle.reference import check_against_reference
  if dtype not in opencl.caps.dtypes:
    pytest.skip(f"{opencl.name} does not support {dtype.name}")
  x = np.array([0.0, -0.0, 2.5, -3.75, np.inf, -np.inf, np.nan], dtype=dtype.np)
  out = getattr(Tensor(x, device="OPENCL") + float("nan"), op)().numpy()
  assert np.isnan(out).all(), out
  check_against_reference(lambda t: getattr(t + float("nan"), op)(), x, device="OPENCL")
  check_against_reference(lambda t: getattr(t, op)(), x, device="OPENCL")
