"""GPU-shaped programs (refgrad/codegen/gpu.py) on the PYTHON interpreter: the same program a GPU device runs must
give the plain program's result. PYGPU is the interpreter handed the capabilities of a GPU, so every kernel it runs
is GPU-shaped (grid of at most 3 axes, work-groups, reductions split across a group through local memory), once
with a group's items interleaved over a reduction (GPU) and once with a contiguous run each (CPU OpenCL)."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from refgrad import Device, Tensor, dtypes
from refgrad.codegen.linearize import compile_ast
from refgrad.device import Capabilities, DeviceImpl
from refgrad.interp import kernel
from refgrad.interp.device import PythonAllocator
from refgrad.testing.reference import check_against_reference, undefined_lanes
from refgrad.testing.strategies import tensor_programs
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


def test_lockstep_interpreter_rejects_local_stores_inside_loops():
  x = Tensor(np.arange(4000, dtype=np.int32)).realize()
  program = program_of(x.sum())
  store = next(i for i, u in enumerate(program.uops) if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_LOCAL)
  loop_start = next(i for i, u in enumerate(program.uops) if u.op is Ops.RANGE)
  loop_end = next(i for i, u in enumerate(program.uops) if u.op is Ops.ENDRANGE)
  uops = list(program.uops)
  uops.insert(loop_end, uops.pop(store))
  assert loop_start < uops.index(program.uops[store]) < loop_end + 1
  broken = type(program)(program.name, tuple(uops), program.global_shape, program.key, program.local_shape)
  with pytest.raises(NotImplementedError, match="local-memory STORE inside a loop"):
    kernel.PythonKernel(broken)


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(program=tensor_programs(transcendentals=False))
def test_random_programs_gpu_shaped_match_plain(pygpu, program):
  """Kernel by kernel against the plain reference, with SPEC.md's bounds: a grouped reduction sums floats in another
  order (programs sum floats too), bit-exact everywhere else."""
  check_against_reference(program.run, *program.inputs, device=pygpu)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(program=tensor_programs(transcendentals=False, max_steps=4))
def test_gpu_shaped_programs_survive_tiny_blocks(pygpu, program):
  """With 4-element blocks the interpreter must still keep each work-group (and its local memory) in one block."""
  old = kernel.BLOCK_ELEMENTS
  kernel.BLOCK_ELEMENTS = 4
  try:
    check_against_reference(program.run, *program.inputs, device=pygpu)
  finally:
    kernel.BLOCK_ELEMENTS = old
