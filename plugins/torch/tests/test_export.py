"""The torch exporter against the graph evaluator: every conformance cell eagerly, random tensor programs and random
kernels eagerly, a few graphs through torch.compile; compared by the oracle (tests/torch_oracle.py)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from refgrad_torch.export import NOT_EXPORTED, RULES, UNSUPPORTED, WIDE_UNSIGNED, Unsupported, run_on_torch
from torch_measure import check_batch, check_cell
from torch_oracle import TORCH_DIFFERS, check_on_torch, torch_may_differ

from refgrad.dtype import dtypes
from refgrad.interp.graph import EVALUATORS
from refgrad.tensor import Tensor
from refgrad.testing.conformance.batches import all_batches
from refgrad.testing.strategies import ALL, alu_kernels, tensor_programs
from refgrad.uop import Ops, UOp


def test_rules_cover_the_graph_evaluator() -> None:
  assert set(RULES) | set(NOT_EXPORTED) | {Ops.BUFFER} == set(EVALUATORS)  # BUFFERs are the function's arguments


def test_every_conformance_cell_eagerly() -> None:
  cells = [check_cell(batch, segment) for batch in all_batches(list(ALL)) for segment in batch.segments]
  failed = {(c.row, c.column) for c in cells if c.verdict == "fail"}
  assert failed == set(TORCH_DIFFERS)
  unsupported = [c for c in cells if c.verdict == "unsupported"]
  assert unsupported and all("on uint64:" in c.detail for c in unsupported)
  assert sum(c.verdict == "pass" for c in cells) > 700


def test_unsupported_is_raised_at_export_naming_op_and_dtype() -> None:
  x = Tensor(np.array([7, 2], np.uint64))
  with pytest.raises(Unsupported, match="IDIV on uint64: torch has no CPU kernel") as raised:
    run_on_torch((x // x).uop)
  assert (raised.value.op, raised.value.dtype) == (Ops.IDIV, dtypes.uint64) and (Ops.IDIV, dtypes.uint64) in UNSUPPORTED
  multi = UOp(Ops.MULTI, dtypes.float32, (Tensor([1.0]).uop,), (None, ((0, 1),)))
  with pytest.raises(Unsupported, match="several devices"):
    run_on_torch(multi)


def test_wide_unsigned_ops_torch_lacks_are_composed() -> None:
  """ADD, NEG, SHR, CMPLT, MAX, IDIV, MOD and reductions on uint16/32/64 at their edges (0, 1, the top bit, all ones),
  which torch has no CPU kernel for: computed on signed types, checked against the reference."""
  for dt in WIDE_UNSIGNED:
    top = 2 ** (8 * dt.itemsize)
    a = Tensor(np.array([0, 1, top // 2, top - 1, top // 2 - 1, 12345], dt.np))
    b = Tensor(np.array([top - 1, 3, 1, top // 2, 7, 0 if dt != dtypes.uint64 else 5], dt.np))
    shift = Tensor(np.array([0, 1, 7, dt.itemsize * 8 - 1, 3, 2], dt.np))
    parts = [a + b, -a, a >> shift, a << shift, (a < b).cast(dt), a.maximum(b), a.max().reshape(1), a.sum().reshape(1),
             a.prod().reshape(1)]
    if dt != dtypes.uint64:
      parts += [a // b, a._from(a.uop.alu(Ops.MOD, b.uop))]
    result = check_on_torch(parts[0].cat(*parts[1:]).uop)
    assert result.ok and result.checked >= 39, (dt, result)


def _edge_graph() -> UOp:
  """Lanes where torch's plain ops differ from SPEC.md and the rules compose the answer: MAX of signed zeros both
  ways, a max reduction of zeros, an integer divisor 0 and MIN / -1 (which raise or kill the process), and casts
  torch rounds twice."""
  zeros = Tensor([-0.0, 0.0, 0.0, -0.0])
  ints = Tensor(np.array([7, -2 ** 63, 5, -7], np.int64))
  divisors = Tensor(np.array([0, -1, 0, 2], np.int64))
  wide = Tensor(np.array([2 ** 62 + 2 ** 54 + 1, 2 ** 24 + 2 ** 16 + 1, -(2 ** 62 + 2 ** 54 + 1), 3], np.int64))
  narrow = Tensor(np.array([1 + 2 ** -8 + 2 ** -30, 1 + 2 ** -11 + 2 ** -40, 2.0 ** -140, -3.0]))
  signs = zeros.maximum(zeros.flip(0)) + zeros.reshape(2, 2).max(1).reshape(2, 1).expand(2, 2).reshape(4)
  quotients = (ints.idiv(divisors) + ints._from(ints.uop.alu(Ops.MOD, divisors.uop))).cast(dtypes.float32)
  casts = wide.cast(dtypes.bfloat16).cast(dtypes.float32) + narrow.cast(dtypes.bfloat16).cast(dtypes.float32)
  return (signs + quotients * 0 + casts + narrow.cast(dtypes.float16).cast(dtypes.float32)).uop


def test_rules_compose_what_torch_lacks() -> None:
  result = check_on_torch(_edge_graph())
  assert result.ok and result.checked > 0, result


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "inductor"])
def test_edge_graph_through_inductor(compile: bool) -> None:
  assert check_on_torch(_edge_graph(), compile).ok


def _accepts(root: UOp, ok: bool) -> bool:
  """A mismatch passes only where a disagreement listed in TORCH_DIFFERS can be the cause."""
  return ok or torch_may_differ(root)


def _check_random(program: object, compile: bool = False) -> None:
  root = program.build("PYTHON").uop
  try:
    result = check_on_torch(root, compile)
  except Unsupported as why:
    assert why.dtype in WIDE_UNSIGNED or why.op in NOT_EXPORTED, why
    return
  assert _accepts(root, result.ok), f"{program!r}\n{result}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(tensor_programs(sharded=False))
def test_random_programs_eagerly(program: object) -> None:
  _check_random(program)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(alu_kernels())
def test_random_kernels_eagerly(kernel: object) -> None:
  _check_random(kernel)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None,
          derandomize=True)
@given(alu_kernels(dtype_choices=(dtypes.float32, dtypes.int32, dtypes.float16, dtypes.int8)))
def test_random_kernels_through_inductor(kernel: object) -> None:
  _check_random(kernel, compile=True)


def test_a_conformance_batch_through_inductor() -> None:
  batch = next(b for b in all_batches([dtypes.int8]) if b.label == "int8 ops")
  assert all(cell.verdict == "pass" for cell in check_batch(batch)), [c for c in check_batch(batch)]
