"""The kernel optimizer (refgrad/codegen/opt.py): every opt list the fuzzer can draw gives, on every device, what the
unoptimized reference gives (bit for bit where SPEC.md says exact, within the reduction bound where an unroll
reassociates a float sum); illegal opts are refused with the reason; the device heuristics tile long reductions."""
import functools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refgrad import Device, Tensor
from refgrad.codegen.contract import Opt, opts_text
from refgrad.codegen.opt import OptError, apply_opts, default_opts, legal_opts, parse_opts
from refgrad.codegen.pipeline import compile_ast, lowered_kernel, random_kernel_opts
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS, alu_kernels, claimed_dtypes, tensor_programs
from refgrad.uop import Ops

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS)


def with_random_opts(seed: int, device: str):
  """An opts chooser for check_against_reference: a random legal opt list per kernel for the device (work-group
  opts too where it launches work-groups), from this seed."""
  rng, caps = random.Random(seed), Device[device].caps
  return lambda ast: random_kernel_opts(ast, caps, rng, max_opts=3)


def agrees_with_opts(data, strategy, device, seed):
  """A program of `strategy` over the dtypes the device claims (so no draw is rejected), under random opts."""
  claimed = claimed_dtypes(device)
  program = data.draw(strategy(dtype_choices=claimed, allowed=claimed), label="program")
  check_against_reference(program.run, *program.inputs, device=device, opts=with_random_opts(seed, device))


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32))
def test_random_kernels_under_random_opts_match_the_reference(refgrad_device, data, seed):
  agrees_with_opts(data, alu_kernels, refgrad_device, seed)


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32))
def test_random_programs_under_random_opts_match_the_reference(refgrad_device, data, seed):
  agrees_with_opts(data, functools.partial(tensor_programs, transcendentals=False), refgrad_device, seed)


SHAPED = {
  "matmul": (lambda a, b: a @ b, [(12, 16), (16, 24)]),
  "matmul, k not a multiple": (lambda a, b: a @ b, [(8, 13), (13, 16)]),
  "batched matmul": (lambda a, b: a @ b, [(2, 4, 8), (2, 8, 6)]),
  "two reduces in one kernel": (lambda a, b: (a.sum(1, keepdim=True) + a.max(1, keepdim=True)) * b, [(8, 16), (8, 1)]),
  "softmax (dependent reduces)": (lambda a, b: (a - b).softmax(1), [(8, 16), (8, 1)]),
  "conv2d": (lambda a, b: a.conv2d(b, padding=1), [(2, 3, 8, 8), (4, 3, 3, 3)]),
}


@pytest.mark.parametrize("case", list(SHAPED))
def test_every_legal_single_opt_keeps_the_values(refgrad_device, case):
  """Each opt on its own, at the edges of what is legal (the smallest and largest amounts that divide)."""
  fn, shapes = SHAPED[case]
  rng = np.random.default_rng(0)
  inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  for item in fn(*(Tensor(x) for x in inputs)).schedule():
    if item.is_transfer:
      continue
    for opt in legal_opts(lowered_kernel(item.ast)[0]):
      chooser = lambda ast, opt=opt: _if_legal(ast, opt)  # noqa: E731
      report = check_against_reference(fn, *inputs, device=refgrad_device, opts=chooser)
      assert all(k.comparison.ok for k in report.kernels), f"{case} under {opt}"


def _if_legal(ast, opt: Opt):
  try:
    apply_opts(*lowered_kernel(ast), (opt,))
    return (opt,)
  except OptError:
    return ()


def test_opt_lists_print_parse_and_replay():
  opts = (Opt("UPCAST", 1, 4), Opt("UPCAST", 0, 2), Opt("UNROLL", 0, 4))
  assert opts_text(opts) == "UPCAST(1,4) UPCAST(0,2) UNROLL(0,4)" and parse_opts(opts_text(opts)) == opts
  a, b = Tensor(np.ones((8, 16), np.float32)), Tensor(np.ones((16, 12), np.float32))
  ast = (a @ b).schedule()[-1].ast
  program = compile_ast(ast, None, opts)
  assert program.opts == opts and "opts=UPCAST(1,4) UPCAST(0,2) UNROLL(0,4)" in program.listing()
  assert program.global_shape == (4, 3)
  assert compile_ast(ast, None, parse_opts(opts_text(opts))) is program  # the same list replays the same program
  accumulators = [u for u in program.uops if u.op is Ops.DEFINE_ACC]
  assert len(accumulators) == 8 and sum(u.op is Ops.RANGE for u in program.uops) == 1  # one loop for the tile


@pytest.mark.parametrize("opt, message", [
  (Opt("UPCAST", 1, 5), "thread axis 1 of size 12 cannot be split by 5"),
  (Opt("UPCAST", 1, 1), "must be at least 2"),
  (Opt("UPCAST", 7, 2), "no thread axis 7"),
  (Opt("UNROLL", 0, 3), "reduce loop 0 of size 16 cannot be split by 3"),
  (Opt("UNROLL", 3, 2), "no reduce loop 3"),
  (Opt("THREAD", 1, 2), "axis 1 is not the outermost thread axis"),
  (Opt("THREAD", 0, 9), "thread axis 0 of size 8 cannot run on 9 threads"),
  (Opt("PADTO", 1, 4), "thread axis 1 of size 12 needs no padding to a multiple of 4"),
  (Opt("PADTO", 7, 4), "PADTO: the kernel has no thread axis 7"),
  (Opt("PADLOOP", 0, 8), "reduce loop 0 of size 16 needs no padding to a multiple of 8"),
  (Opt("PADLOOP", 2, 3), "PADLOOP: the kernel has no reduce loop 2"),
  (Opt("SWAP", 0, 0), "reduce loops 0 and 0 are not two loops of one reduction"),
  (Opt("SWAP", 0, 1), "SWAP: the kernel has no reduce loop 1"),
  (Opt("TILE", 0, 5), "TILE: reduce loop 0 of size 16 cannot be split by 5"),
])
def test_illegal_opts_are_refused_with_the_reason(opt, message):
  a, b = Tensor(np.ones((8, 16), np.float32)), Tensor(np.ones((16, 12), np.float32))
  with pytest.raises(OptError, match=message):
    compile_ast((a @ b).schedule()[-1].ast, None, (opt,))
  with pytest.raises(OptError, match="unknown opt 'TILES'"):
    parse_opts("TILES(0,4)")
  with pytest.raises(OptError, match="cannot read opts"):
    parse_opts("UPCAST(1,4) UNROL(0;4)")


def test_the_cpu_heuristic_tiles_long_reductions_only():
  big = (Tensor(np.ones((64, 64), np.float32)) @ Tensor(np.ones((64, 64), np.float32))).schedule()[-1].ast
  small = (Tensor(np.ones((4, 4), np.float32)) @ Tensor(np.ones((4, 4), np.float32))).schedule()[-1].ast
  elementwise = (Tensor(np.ones((512, 512), np.float32)) + 1).schedule()[-1].ast
  assert default_opts(*lowered_kernel(big), 8) == (Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 4))
  assert default_opts(*lowered_kernel(small), 8) == () and default_opts(*lowered_kernel(elementwise), 8) == ()
  assert default_opts(*lowered_kernel(big), 0) == ()


def test_the_cpu_heuristic_threads_only_kernels_worth_waking_threads_for():
  def ast(n):
    return (Tensor(np.ones((n, n), np.float32)) @ Tensor(np.ones((n, n), np.float32))).schedule()[-1].ast
  assert default_opts(*lowered_kernel(ast(128)), 8, threads=2) == \
    (Opt("UPCAST", 1, 8), Opt("UPCAST", 0, 4), Opt("THREAD", 0, 2))
  assert Opt("THREAD", 0, 2) not in default_opts(*lowered_kernel(ast(64)), 8, threads=2)


@pytest.mark.parametrize("opts", ["THREAD(0,2)", "THREAD(0,3)", "UPCAST(1,4) THREAD(0,5)", "THREAD(0,7) UNROLL(0,2)"])
def test_threaded_kernels_cover_every_output_once(refgrad_device, opts):
  """Ranges of unequal length (7 rows over 3 or 5 threads), with and without other opts: every output written by
  exactly one range, the values those of the unthreaded kernel."""
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((7, 12)).astype(np.float32), rng.standard_normal((12, 8)).astype(np.float32)
  report = check_against_reference(lambda x, y: x @ y, a, b, device=refgrad_device, opts=lambda ast: parse_opts(opts))
  assert report.kernels and all(k.comparison.ok for k in report.kernels)
  program = compile_ast((Tensor(a) @ Tensor(b)).schedule()[-1].ast, None, parse_opts(opts))
  covered = [i for start, end in program.thread_ranges() for i in range(start, end)]
  assert covered == list(range(7))


def test_refgrad_opts_overrides_the_heuristic(monkeypatch):
  big = (Tensor(np.ones((64, 64), np.float32)) @ Tensor(np.ones((64, 64), np.float32))).schedule()[-1].ast
  monkeypatch.setenv("REFGRAD_OPTS", "UNROLL(0,8)")
  assert default_opts(*lowered_kernel(big), 8) == (Opt("UNROLL", 0, 8),)
  monkeypatch.setenv("REFGRAD_OPTS", "")
  assert default_opts(*lowered_kernel(big), 8) == ()


@pytest.mark.parametrize("shape", [(64, 64, 64), (96, 80, 72), (33, 64, 17)])
def test_tiled_matmul_on_each_device_matches_numpy(refgrad_device, shape):
  """Large enough for the heuristic to tile (where the device has one); an odd size leaves that axis untiled."""
  m, k, n = shape
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  got = (Tensor(a, device=refgrad_device) @ Tensor(b, device=refgrad_device)).numpy()
  bound = 2 * k * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))  # SPEC.md's order-free sum bound
  assert np.all(np.abs(got - a.astype(np.float64) @ b.astype(np.float64)) <= bound)
  program = compile_ast((Tensor(a) @ Tensor(b)).schedule()[-1].ast, Device[refgrad_device].caps)
  assert bool(program.opts) == (Device[refgrad_device].caps.upcast_lanes > 1 and m % 2 == 0 and n % 2 == 0)


def test_the_heuristic_tiles_only_where_a_tile_shares_loads_and_the_loop_does_not_vectorize():
  """A row sum's tile would share no load; q @ k^T reads both operands contiguously along the reduce (the split
  reduction vectorizes it): neither gets a tile, both get threads. A matmul's second operand is strided along the
  reduce, so it is tiled."""
  rng = np.random.default_rng(0)
  rows = Tensor(rng.standard_normal((64, 4096)).astype(np.float32)).sum(1).schedule()[-1].ast
  q, k = (Tensor(rng.standard_normal((4, 128, 64)).astype(np.float32)) for _ in range(2))
  scores = (q @ k.transpose(-1, -2)).schedule()[-1].ast
  matmul = (q @ k.transpose(-1, -2).contiguous()).schedule()[-1].ast
  assert default_opts(*lowered_kernel(rows), 8, threads=2) == ()
  assert default_opts(*lowered_kernel(scores), 8, threads=2) == (Opt("THREAD", 0, 2),)
  assert default_opts(*lowered_kernel(matmul), 8, threads=2) == \
    (Opt("UPCAST", 2, 8), Opt("UPCAST", 1, 4), Opt("THREAD", 0, 2))


def test_the_heuristic_tiles_a_column_sum_along_its_contiguous_outputs():
  """A column sum reads one element per cache line along its loop; a tile of neighbouring columns reads vectors."""
  columns = Tensor(np.ones((2048, 256), np.float32)).sum(0).schedule()[-1].ast
  assert default_opts(*lowered_kernel(columns), 8, threads=2) == (Opt("UPCAST", 0, 16), Opt("THREAD", 0, 2))


def loop_nest(program) -> list[tuple[int, int]]:
  return [u.arg for u in program.uops if u.op is Ops.RANGE]


@pytest.mark.parametrize("opts", ["SWAP(0,1)", "TILE(0,4)", "TILE(1,2) SWAP(0,2)", "TILE(0,3) TILE(1,5) UPCAST(0,2)"])
def test_loop_interchange_and_tiling_keep_the_values(refgrad_device, opts):
  """A sum over a strided (rows) and a contiguous (columns) axis, its two loops interchanged and tiled; a max too,
  whose result must be bit-exact in any order. Values against numpy and the unoptimized reference."""
  rng = np.random.default_rng(3)
  x = rng.standard_normal((2, 12, 10)).astype(np.float32)
  x[0, 11, 9] = np.float32(3e38)
  x[1] = -np.abs(x[1]) - 1  # row 1's max is a tie of -0.0 and +0.0, which any loop order must resolve alike
  x[1, 0, 3], x[1, 7, 0] = -0.0, 0.0
  for fn in (lambda t: t.sum((1, 2)), lambda t: t.max((1, 2))):
    report = check_against_reference(fn, x, device=refgrad_device, opts=lambda ast: parse_opts(opts))
    assert report.kernels and all(k.comparison.ok for k in report.kernels)
  got = Tensor(x, device=refgrad_device)
  assert np.array_equal(got.max((1, 2)).numpy(), x.max((1, 2)))
  tie = Tensor(x, device=refgrad_device).max((1, 2)).numpy()[1]
  assert tie == 0 and not np.signbit(tie)  # the reference's MAX of -0.0 and +0.0 is +0.0 (SPEC.md)


def test_swap_and_tile_reorder_the_loop_nest():
  ast = Tensor(np.ones((12, 10), np.float32)).sum().schedule()[-1].ast
  assert loop_nest(compile_ast(ast, None, ())) == [(0, 12), (1, 10)]
  assert loop_nest(compile_ast(ast, None, parse_opts("SWAP(0,1)"))) == [(1, 10), (0, 12)]
  assert loop_nest(compile_ast(ast, None, parse_opts("TILE(0,4)"))) == [(0, 3), (1, 10), (2, 4)]
  legal = legal_opts(lowered_kernel(ast)[0])
  assert Opt("SWAP", 0, 1) in legal and Opt("TILE", 1, 2) in legal and Opt("SWAP", 1, 0) not in legal


def test_long_elementwise_kernels_with_transcendentals_are_threaded():
  big, small = (Tensor(np.ones(shape, np.float32)).exp().schedule()[-1].ast for shape in ((256, 256), (64, 64)))
  cheap = (Tensor(np.ones((256, 256), np.float32)) + 1).schedule()[-1].ast
  assert default_opts(*lowered_kernel(big), 8, threads=2) == (Opt("THREAD", 0, 2),)
  assert default_opts(*lowered_kernel(small), 8, threads=2) == ()
  assert default_opts(*lowered_kernel(cheap), 8, threads=2) == ()


@pytest.mark.parametrize("opts", ["PADTO(1,8) UPCAST(1,8)", "PADTO(0,4) UPCAST(0,4) PADLOOP(0,8) UNROLL(0,8)",
                                  "PADLOOP(0,4) UNROLL(0,4) PADTO(1,3) UPCAST(1,3) THREAD(0,5)"])
def test_padded_tiles_of_odd_shapes_keep_the_values(refgrad_device, opts):
  """37x29 @ 29x35 has no tile that divides it: padded, the extra threads and iterations read and write nothing.
  A max over the padded loop checks the identity the padding adds (a 0 would win over negative rows)."""
  rng = np.random.default_rng(7)
  a, b = rng.standard_normal((37, 29)).astype(np.float32), rng.standard_normal((29, 35)).astype(np.float32)
  chosen = lambda ast: parse_opts(opts)  # noqa: E731
  assert check_against_reference(lambda x, y: (x @ y).exp(), a, b, device=refgrad_device, opts=chosen).ok
  padded_max = lambda ast: parse_opts("PADTO(0,8) UPCAST(0,8) PADLOOP(0,8) UNROLL(0,8)")  # noqa: E731
  assert check_against_reference(lambda x: x.max(1), -np.abs(a) - 1, device=refgrad_device, opts=padded_max).ok
