"""GPU-shaped programs (refgrad/codegen/gpu.py) on the PYTHON interpreter: the same program a GPU device runs must
give the plain program's result. PYGPU is the interpreter handed the capabilities of a GPU, so every kernel it runs
is GPU-shaped (grid of at most 3 axes, work-groups, reductions split across a group through local memory), once
with a group's items interleaved over a reduction (GPU) and once with a contiguous run each (CPU OpenCL)."""
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings

from refgrad import Device, Tensor, dtypes
from refgrad.codegen.contract import Capabilities
from refgrad.codegen.opt import OptError, parse_opts
from refgrad.codegen.pipeline import compile_ast, random_kernel_opts
from refgrad.device import DeviceImpl
from refgrad.interp import kernel
from refgrad.interp.device import PythonAllocator
from refgrad.testing.oracle.reference import check_against_reference, undefined_lanes
from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS, tensor_programs
from refgrad.uop import Ops

GPU_CAPS = Capabilities(local_memory=1 << 15, max_global_size=(1 << 31,) * 3, max_local_size=256)


class ListingRenderer:
  def __init__(self, caps):
    self.caps = caps

  def render(self, program) -> str:
    return program.listing()


@pytest.fixture(scope="module", params=[True, False], ids=["interleaved", "contiguous"])
def pygpu(request):
  name, caps = f"PYGPU{int(request.param)}", replace(GPU_CAPS, interleaved_groups=request.param)
  Device.register(name, lambda: DeviceImpl(name, PythonAllocator(), renderer=ListingRenderer(caps),
                                           interpret=kernel.PythonKernel))
  try:
    yield name
  finally:
    Device.remove(name)


def program_of(t: Tensor, caps=GPU_CAPS):
  return compile_ast(t.schedule()[-1].ast, caps)


def ops_of(program) -> set:
  return {u.op for u in program.uops}


def undefined_of(t: Tensor):
  return undefined_lanes(t)


def test_long_reductions_with_few_outputs_use_local_memory():
  x = Tensor(np.arange(5000, dtype=np.float32)).realize()
  full = program_of(x.sum())
  assert {Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.LOCAL_INDEX} <= ops_of(full) and full.local_shape == (256,)
  rows = program_of(x.reshape(10, 500).max(1))
  assert rows.global_shape == (10 * 256,) and rows.local_shape == (256,) and Ops.GROUP_INDEX in ops_of(rows)
  wide = program_of(x.reshape(2500, 2).sum(1))  # many outputs, short reductions: plain loops
  assert Ops.DEFINE_LOCAL not in ops_of(wide) and wide.global_shape == (2500,)


def test_grids_have_at_most_three_axes_innermost_first():
  x = Tensor(np.arange(2 * 3 * 4 * 5 * 7, dtype=np.int32).reshape(2, 3, 4, 5, 7)).realize()
  program = program_of((x + 1).permute(4, 3, 2, 1, 0).contiguous())
  assert program.global_shape == (2, 3, 7 * 5 * 4) and program.local_shape == (2, 3, 35)
  assert len(program_of(x.sum(4)).global_shape) <= 3


def test_plain_devices_get_plain_programs():
  x = Tensor(np.arange(5000, dtype=np.float32)).realize()
  program = compile_ast(x.sum().schedule()[-1].ast)
  assert program.local_shape == () and Ops.DEFINE_LOCAL not in ops_of(program)


@pytest.mark.parametrize("build", [
  lambda x: x.sum(), lambda x: x.max(), lambda x: x.reshape(8, 125).sum(1), lambda x: x.reshape(8, 125).min(0),
  lambda x: x.reshape(2, 2, 2, 5, 25).sum((3, 4)), lambda x: x.reshape(10, 100).max(1) + x.reshape(10, 100).sum(1),
  lambda x: (x.reshape(4, 250) > 500).sum(1), lambda x: x.reshape(5, 200).cast(dtypes.int8).max(1),
  lambda x: x[:120].reshape(2, 3, 4, 5).sum(3),
  lambda x: x.cast(dtypes.float16).max(), lambda x: (x > 3).reshape(2, 500).max(1),
], ids=["sum", "max", "rows", "cols", "two-axes", "two-reduces", "bool-count", "int8-max", "4d", "half", "any"])
def test_gpu_shaped_program_runs_on_python_like_the_plain_one(pygpu, build):
  """Integer-valued data keeps float sums exact, so any order of accumulation gives the same bits."""
  data = (np.arange(1000) % 37 - 11).astype(np.float32)
  expected = build(Tensor(data, device="PYTHON")).numpy()
  got = build(Tensor(data, device=pygpu))
  program = program_of(got, Device[pygpu].caps)
  assert program.local_shape and len(program.global_shape) <= 3
  np.testing.assert_array_equal(got.numpy(), expected)


def test_undefined_lanes_travel_through_local_memory(pygpu):
  a = np.arange(-300, 300, dtype=np.int32)
  b = np.where(np.arange(600) == 17, 0, 3).astype(np.int32)
  for device in ("PYTHON", pygpu):
    out = (Tensor(a, device=device).idiv(Tensor(b, device=device))).reshape(2, 300).sum(1).realize()
    assert undefined_of(out).tolist() == [True, False], device


def test_lockstep_interpreter_rejects_local_loads_outside_the_loops_of_their_stores():
  x = Tensor(np.arange(4000, dtype=np.int32)).realize()
  program = program_of(x.sum())
  store = next(i for i, u in enumerate(program.uops) if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_LOCAL)
  loop_start = next(i for i, u in enumerate(program.uops) if u.op is Ops.RANGE)
  loop_end = next(i for i, u in enumerate(program.uops) if u.op is Ops.ENDRANGE)
  uops = list(program.uops)
  uops.insert(loop_end, uops.pop(store))
  assert loop_start < uops.index(program.uops[store]) < loop_end + 1
  broken = type(program)(program.name, tuple(uops), program.global_shape, program.key, program.local_shape)
  with pytest.raises(NotImplementedError, match="local-memory LOAD outside a loop its STOREs are in"):
    kernel.PythonKernel(broken)


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)


@SETTINGS
@given(program=tensor_programs(transcendentals=False))
def test_random_programs_gpu_shaped_match_plain(pygpu, program):
  """Kernel by kernel against the plain reference, with SPEC.md's bounds: a grouped reduction sums floats in another
  order (programs sum floats too), bit-exact everywhere else."""
  check_against_reference(program.run, *program.inputs, device=pygpu)


@settings(max_examples=40, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)
@given(program=tensor_programs(transcendentals=False, max_steps=4))
def test_gpu_shaped_programs_survive_tiny_blocks(pygpu, program):
  """With 4-element blocks the interpreter must still keep each work-group (and its local memory) in one block."""
  old = kernel.BLOCK_ELEMENTS
  kernel.BLOCK_ELEMENTS = 4
  try:
    check_against_reference(program.run, *program.inputs, device=pygpu)
  finally:
    kernel.BLOCK_ELEMENTS = old


@pytest.mark.parametrize("opts", ["GROUP(0,2)", "GROUP(0,3)", "GROUP(0,7)", "GROUP(0,100)", "UNROLL(0,2) GROUP(0,5)"])
def test_work_groups_of_any_size_share_a_reduction(pygpu, opts):
  """GROUP sets a grouped reduction's items per work-group, powers of two or not (the last round of a group of 7
  over 5000 iterations is partial). A full sum whose order matters (+-3e38 and small values), a row max, a sum
  over two axes; each against the plain reference, and the program shaped as asked."""
  rng = np.random.default_rng(4)
  x = rng.standard_normal(5000).astype(np.float32)
  x[[10, 4000]] = np.float32(3e38), np.float32(-3e38)
  for fn in (lambda t: t.sum(), lambda t: t.reshape(10, 500).max(1), lambda t: t.reshape(10, 50, 10).sum((0, 2))):
    report = check_against_reference(fn, x, device=pygpu, opts=lambda ast: parse_opts(opts))
    assert report.kernels and all(k.comparison.ok for k in report.kernels)
    program = compile_ast(fn(Tensor(x)).schedule()[-1].ast, GPU_CAPS, parse_opts(opts))
    assert program.local_shape[0] == parse_opts(opts)[-1].amount and Ops.DEFINE_LOCAL in ops_of(program)


@pytest.mark.parametrize("opts, local", [("LOCAL(0,4)", (4, 1)), ("LOCAL(1,5)", (1, 5)),
                                         ("LOCAL(0,2) LOCAL(1,2)", (2, 2)), ("UPCAST(1,2) LOCAL(0,8)", (8, 1))])
def test_local_sizes_choose_plain_work_groups(pygpu, opts, local):
  """LOCAL sets the work-group shape of a kernel and keeps its reductions per item (no local memory)."""
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((10, 64)).astype(np.float32), rng.standard_normal((64, 16)).astype(np.float32)
  report = check_against_reference(lambda x, y: x @ y, a, b, device=pygpu, opts=lambda ast: parse_opts(opts))
  assert report.kernels and all(k.comparison.ok for k in report.kernels)
  program = compile_ast((Tensor(a) @ Tensor(b)).schedule()[-1].ast, GPU_CAPS, parse_opts(opts))
  assert program.local_shape == local and Ops.DEFINE_LOCAL not in ops_of(program)


@pytest.mark.parametrize("case, opts", [
  ("matmul", "LOCAL(0,4) LOCAL(1,4) LOCALTILE(0,4)"), ("matmul", "LOCALTILE(0,8)"),
  ("matmul", "LOCAL(1,2) LOCALTILE(0,6)"),
  ("matmul", "LOCAL(0,8) LOCAL(1,16) LOCALTILE(0,2)"), ("matmul", "PADTO(1,3) LOCAL(0,3) LOCAL(1,4) LOCALTILE(0,3)"),
  ("row max", "LOCAL(0,8) LOCALTILE(0,4)"), ("batched", "LOCAL(0,4) LOCAL(1,2) LOCAL(2,2) LOCALTILE(0,3)"),
  ("matmul", "UNROLL(0,2) LOCAL(0,4) LOCAL(1,2) LOCALTILE(0,3)"),
  ("two matmuls", "LOCAL(0,4) LOCAL(1,4) LOCALTILE(0,4) LOCALTILE(1,4)"),
])
def test_local_memory_tiles_keep_the_values(pygpu, case, opts):
  """LOCALTILE stages a block of each shared load in local memory (both matmul operands under a 2-d work-group; a
  row max read by a row of items; a batched matmul on a 3-d grid), any block size that divides the loop, padded
  grids included: against the plain reference, with the tiles where they should be."""
  rng = np.random.default_rng(6)
  fn, shapes = {"matmul": (lambda x, y: x @ y, [(16, 24), (24, 8)]),
                "row max": (lambda x, y: (x * y).max(0), [(24, 16), (24, 1)]),
                "batched": (lambda x, y: x @ y, [(2, 8, 12), (2, 12, 4)]),
                "two matmuls": (lambda x, y: x @ y + (x * 2) @ y, [(16, 24), (24, 8)])}[case]
  inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  inputs[0].flat[5] = np.float32(3e38)
  report = check_against_reference(fn, *inputs, device=pygpu, opts=lambda ast: parse_opts(opts))
  assert report.kernels and all(k.comparison.ok for k in report.kernels)
  program = compile_ast(fn(*(Tensor(x) for x in inputs)).schedule()[-1].ast, GPU_CAPS, parse_opts(opts))
  first_loop = next(i for i, u in enumerate(program.uops) if u.op is Ops.RANGE)
  locals_at = [i for i, u in enumerate(program.uops) if u.op is Ops.DEFINE_LOCAL]
  barriers_at = [i for i, u in enumerate(program.uops) if u.op is Ops.BARRIER]
  assert locals_at and max(locals_at) < first_loop < min(barriers_at)  # declared at the top, synchronized per block


@pytest.mark.parametrize("build, opts, message", [
  (lambda x: x + 1, "GROUP(0,4)", "no reduction a work-group can share"),
  (lambda x: x.sum(), "GROUP(0,1)", "at least 2 and at most 256"),
  (lambda x: x.reshape(50, 100).sum(1), "GROUP(0,200)", "at least 2 and at most 100"),
  (lambda x: x.reshape(10, 500).sum(1), "LOCAL(0,3)", "grid \\(10,\\) has no axis 0 that 3 items divide"),
  (lambda x: x.reshape(10, 500).sum(1), "LOCAL(1,2)", "has no axis 1"),
  (lambda x: x.sum(), "GROUP(0,4) LOCAL(0,1)", "either share its reductions or run plain items"),
  (lambda x: x.reshape(50, 100).sum(1), "UPCAST(0,2) GROUP(0,4)", "no reduction a work-group can share"),
  (lambda x: x.reshape(50, 100).sum(1), "LOCALTILE(0,3)", "cannot run in blocks of 3"),
  (lambda x: x.reshape(50, 100).sum(1), "LOCALTILE(1,4)", "no reduce loop 1"),
  (lambda x: x.reshape(50, 100).sum(1), "LOCALTILE(0,4)", "no load of reduce loop 0 is read by several items"),
  (lambda x: x.reshape(50, 100).sum(1), "GROUP(0,4) LOCALTILE(0,4)", "either share its reductions or run plain"),
  (lambda x: x.reshape(50, 100).sum(0), "UPCAST(0,2) LOCALTILE(0,4)", "stores several outputs per item"),
  (lambda x: (lambda y: y.reshape(25, 200) @ y.reshape(200, 25))(x.cast(dtypes.float64).contiguous()),
   "LOCAL(0,25) LOCAL(1,5) LOCALTILE(0,100)", "more than the device's 32768 bytes"),
])
def test_work_group_opts_that_do_not_fit_are_refused(build, opts, message):
  ast = build(Tensor(np.ones(5000, np.float32))).schedule()[-1].ast
  with pytest.raises(OptError, match=message):
    compile_ast(ast, GPU_CAPS, parse_opts(opts))


def test_work_group_opts_are_refused_on_devices_without_work_groups():
  ast = Tensor(np.ones(5000, np.float32)).sum().schedule()[-1].ast
  for caps in (None, Capabilities(upcast_lanes=8, threads=2)):
    with pytest.raises(OptError, match="for devices that launch them"):
      compile_ast(ast, caps, parse_opts("GROUP(0,4)"))


def test_random_opts_for_a_gpu_end_in_work_group_opts_that_compile():
  x = Tensor(np.ones((64, 300), np.float32))
  asts = [item.ast for t in (x.sum(1), x.max(), x @ x.T) for item in t.schedule() if not item.is_transfer]
  rng = random.Random(0)
  drawn = [(ast, random_kernel_opts(ast, GPU_CAPS, rng)) for ast in asts for _ in range(100)]
  kinds = {opts[-1].kind for _, opts in drawn}
  assert {"GROUP", "LOCAL", "LOCALTILE"} <= kinds
  for ast, opts in drawn:
    compile_ast(ast, GPU_CAPS, opts)
