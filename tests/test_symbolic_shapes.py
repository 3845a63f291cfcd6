"""Symbolic shapes (refgrad/symbolic_shapes.py): tensors whose sizes are bound Variables, on every device, against
numpy for every bound value including the ends of the range; one compiled kernel serves every value;
schedule_with_vars and run_schedule with other values; gradients through symbolic shrinks; the errors."""
import numpy as np
import pytest

from refgrad import Tensor, TinyJit, Variable
from refgrad.codegen.pipeline import _compile
from refgrad.execute import run_schedule
from refgrad.schedule import realized_buffer

ROWS = 6


def data(shape, seed=0):
  values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  values.reshape(-1)[:4] = [0.0, -0.0, 3e38, -1e-45][:values.size]
  return values


def rows(t, n):
  return t.shrink(((0, n),) + (None,) * (t.ndim - 1))


# (name, program on a (ROWS, 4) tensor and the bound Variable n, numpy program on the first n rows)
PROGRAMS = [
  ("sum0", lambda t, n: rows(t, n).sum(0), lambda a: a.sum(0)),
  ("sum1", lambda t, n: rows(t, n).sum(1), lambda a: a.sum(1)),
  ("mean", lambda t, n: rows(t, n).mean(), lambda a: a.mean() if a.size else np.float32(np.nan)),
  ("max_keepdim", lambda t, n: rows(t, n).max(1, keepdim=True), lambda a: a.max(1, keepdims=True)),
  ("elementwise", lambda t, n: (rows(t, n) * 2 - 1).exp2() + rows(t, n), lambda a: np.exp2(a * 2 - 1) + a),
  ("reshape_split", lambda t, n: rows(t, n).reshape(n, 2, 2).sum(2), lambda a: a.reshape(-1, 2, 2).sum(2)),
  ("reshape_merge", lambda t, n: rows(t, n).reshape(n * 4), lambda a: a.reshape(-1)),
  ("transpose_reshape", lambda t, n: rows(t, n).T.reshape(4 * n), lambda a: a.T.reshape(-1)),
  ("flip", lambda t, n: rows(t, n).flip(0) + 1, lambda a: a[::-1] + 1),
  ("pad_to_max", lambda t, n: rows(t, n).pad(((1, ROWS - n), (0, 0)), value=-1.0),
   lambda a: np.pad(a, ((1, ROWS - len(a)), (0, 0)), constant_values=-1.0)),
  ("expand", lambda t, n: t[:1].expand(n, 4) * 3, lambda a: np.broadcast_to(a[:1] * 3 if len(a) else
                                                                              np.zeros((1, 4), np.float32), a.shape)),
  ("matmul_rows", lambda t, n: rows(t, n) @ t[:4].T, None),
  ("matmul_contract", lambda t, n: rows(t, n).T @ rows(t, n), None),
  # over the symbolic axis (TypeError from arange(n, 0, -1) before)
  ("argmax0", lambda t, n: rows(t, n).argmax(0), lambda a: a.argmax(0).astype(np.int32)),
  ("argmin0_keepdim", lambda t, n: rows(t, n).argmin(0, keepdim=True), lambda a: a.argmin(0)[None].astype(np.int32)),
]


@pytest.mark.parametrize("name, program, expected", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_programs_match_numpy_for_every_value(refgrad_device, name, program, expected):
  a = data((ROWS, 4))
  t = Tensor(a, device=refgrad_device)
  n = Variable("n", 0 if name not in ("mean", "argmax0", "argmin0_keepdim") else 1, ROWS)
  for value in range(n.arg[1], ROWS + 1):
    out = program(t, n.bind(value)).numpy()
    part = a[:value]
    want = expected(part) if expected is not None else program_numpy(name, part, a)
    with np.errstate(all="ignore"):
      np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6, err_msg=f"n={value}")


def program_numpy(name, part, a):
  return part @ a[:4].T if name == "matmul_rows" else part.T @ part


def test_one_kernel_is_compiled_for_every_value(refgrad_device):
  t = Tensor(data((ROWS, 4)), device=refgrad_device).realize()
  n = Variable("n", 1, ROWS)
  asts = set()
  (rows(t, n.bind(1)).exp().sum(0)).numpy()  # compiles
  before = _compile.cache_info().misses
  for value in range(1, ROWS + 1):
    out = rows(t, n.bind(value)).exp().sum(0)
    asts |= {item.ast for item in out.schedule()}
    out.numpy()
  assert len(asts) == 1 and _compile.cache_info().misses == before


def test_schedule_with_vars_runs_for_other_values():
  a = data((ROWS, 4))
  n = Variable("n", 1, ROWS)
  out = rows(Tensor(a, device="PYTHON"), n.bind(2)).sum(0)
  items, var_vals = out.schedule_with_vars()
  assert var_vals == {n: 2} and len(items) == 1
  for value in (1, 4, ROWS):
    run_schedule(items, {n: value})
    np.testing.assert_allclose(items[0].buffers[0].numpy(), a[:value].sum(0), rtol=1e-6)


def test_a_realized_symbolic_intermediate_is_read_back(refgrad_device):
  a = data((ROWS, 4))
  n = Variable("n", 0, ROWS).bind(4)
  s = (rows(Tensor(a, device=refgrad_device), n) * 2).realize()
  assert realized_buffer(s.uop) is not None and realized_buffer(s.uop).size == ROWS * 4
  np.testing.assert_array_equal((s + 1).numpy(), a[:4] * 2 + 1)
  assert s.numpy().shape == (4, 4)


def test_gradient_through_a_symbolic_shrink(refgrad_device):
  a = data((ROWS, 3))
  x = Tensor(a, device=refgrad_device, requires_grad=True)
  n = Variable("n", 0, ROWS).bind(3)
  (rows(x, n) * rows(x, n)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), np.concatenate([2 * a[:3], np.zeros((3, 3), np.float32)]), rtol=1e-6)


def test_creation_with_symbolic_sizes():
  n = Variable("n", 0, ROWS).bind(2)
  assert Tensor.empty(n, 3, device="PYTHON").shape == (n, 3)
  np.testing.assert_array_equal(Tensor.full((n, 2), 2.5, device="PYTHON").numpy(), np.full((2, 2), 2.5))
  np.testing.assert_array_equal(Tensor.ones(n, 3, device="PYTHON").sum(0).numpy(), [2, 2, 2])
  np.testing.assert_array_equal(Tensor.ones(1, 3, device="PYTHON").expand(n, 3).numpy(), np.ones((2, 3)))
  np.testing.assert_array_equal((Tensor.zeros(4, 3, device="PYTHON")[:1].expand(n, 3) + 1).sum(0).numpy(), [2, 2, 2])


def test_slicing_with_a_bound_variable_is_a_shrink():
  a = data((ROWS, 4))
  t = Tensor(a, device="PYTHON")
  n = Variable("n", 1, 4).bind(3)
  np.testing.assert_array_equal(t[:n].numpy(), a[:3])
  np.testing.assert_array_equal(t[1:n + 1, :n].numpy(), a[1:4, :3])
  np.testing.assert_array_equal(t[2:, :n].sum(0).numpy(), a[2:, :3].sum(0))
  with pytest.raises(IndexError, match="non-negative"):
    t[-2:n]


def test_equal_sizes_are_one_node_however_they_were_built():
  from refgrad.uop import size_sum
  n = Variable("n", 0, ROWS).bind(2)
  assert size_sum((n, 1), (ROWS - n, 1)) == ROWS
  assert size_sum((4 * n, 1)) is size_sum((n * 4, 1)) is size_sum((n, 3), (n, 1))
  t = rows(Tensor.ones(ROWS, 1, device="PYTHON"), n)
  np.testing.assert_array_equal((t.pad(((1, 0), (0, 0))) + t.pad(((0, 1), (0, 0)))).numpy(), [[1], [2], [1]])


def test_bind_and_unbind():
  n = Variable("n", 1, 10)
  assert n.bind(3).unbind() == (n, 3)
  assert Variable("n", 1, 10) is n  # one node per (name, range): a Variable is a value, not an object with identity


@pytest.mark.parametrize("make, error, match", [
  (lambda: Variable("n", 1, 10).bind(11), ValueError, r"11 is outside \[1, 10\]"),
  (lambda: Variable("n", 1, 10).bind(0), ValueError, "outside"),
  (lambda: Variable("n", 1, 10).bind(2.5), TypeError, "int"),
  (lambda: Variable("n", 5, 2), ValueError, "min_val <= max_val"),
  (lambda: Variable("", 0, 2), TypeError, "name"),
  (lambda: Variable("n", -1, 2), ValueError, "0 <= min_val"),
  (lambda: Tensor.ones(4, 2).shrink(((0, Variable("n", 1, 8).bind(5)), None)), RuntimeError, "does not fit"),
  (lambda: rows(Tensor.ones(4, 2), Variable("n", 1, 4).bind(3)).reshape(4, 2), ValueError, "invalid"),
  (lambda: rows(Tensor.ones(4, 2), Variable("n", 1, 4).bind(3)).pad(((0, 1), (0, 0)), mode="reflect"),
   NotImplementedError, "constant"),
  (lambda: rows(Tensor.ones(4, 2), Variable("n", 1, 4).bind(3)).shard(("PYTHON", "PYTHON:1")), NotImplementedError,
   r"symbolic shape \(n=3, 2\)"),
])
def test_errors(make, error, match):
  with pytest.raises(error, match=match):
    make()


def test_values_outside_the_range_are_refused_at_launch():
  n = Variable("n", 1, 4)
  items, _ = rows(Tensor.ones(4, 2, device="PYTHON"), n.bind(2)).sum(0).schedule_with_vars()
  with pytest.raises(ValueError, match=r"'n' = 5 is outside its range \[1, 4\]"):
    run_schedule(items, {n: 5})


def test_one_variable_bound_to_two_values_in_one_kernel_is_refused():
  n = Variable("n", 1, 4)
  t = Tensor.ones(4, 2, device="PYTHON")
  with pytest.raises(ValueError, match="bound to both"):
    (rows(t, n.bind(2)).sum(0) + rows(t, n.bind(3)).sum(0)).numpy()


def test_tinyjit_replays_with_new_values_of_the_inputs_variables(refgrad_device, monkeypatch):
  """A jitted function of a symbolic input: later calls bind the Variable to new values and replay the captured
  kernels (no scheduling) for them; results are bit for bit the plain function's, viewed with the new values."""
  import refgrad.tensor
  n = Variable("n", 1, ROWS)
  a = data((ROWS, 3))
  base = Tensor(a, device=refgrad_device).realize()

  def fn(x):
    return (x * 2).sum(0) + x.max(), x.exp() - 1

  jitted = TinyJit(fn)
  for call, value in enumerate([3, 5, 2, ROWS, 1, 4]):
    x = rows(base, n.bind(value)).contiguous().realize()
    if call >= 2:
      monkeypatch.setattr(refgrad.tensor, "create_schedule", lambda *_: pytest.fail("a replay scheduled"))
    total, shifted = jitted(x)
    monkeypatch.undo()
    plain_total, plain_shifted = fn(rows(base, n.bind(value)).contiguous())
    assert shifted.shape[0].unbind() == (n, value)
    np.testing.assert_array_equal(total.numpy(), plain_total.numpy())
    np.testing.assert_array_equal(shifted.numpy(), plain_shifted.numpy())
  assert jitted.captured is not None and jitted.captured.replays == 4


def test_while_a_variable_lives_a_graph_without_sizes_schedules_as_before_and_a_symbolic_one_gets_its_values():
  """unbind_graph gives a kernel graph that holds no size back as it is, with no values (the scheduler asks of every
  kernel while any Variable exists); beside it, a symbolic kernel still reads its Variable's value."""
  from refgrad.schedule import create_schedule
  from refgrad.symbolic_shapes import in_use, unbind_graph
  n = Variable("n", 1, ROWS).bind(4)
  a, b = data((ROWS, 4)), data((ROWS, 4), seed=1)
  assert in_use()
  items, _ = create_schedule([(Tensor(a) * Tensor(b) + 1).sum(1).uop])
  assert all(item.var_vals == () for item in items)
  assert all(unbind_graph(item.ast) == (item.ast, {}) for item in items)
  np.testing.assert_allclose((Tensor(a) * Tensor(b) + 1).sum(1).numpy(), (a * b + 1).sum(1), rtol=1e-6)
  got = rows(Tensor(a), n).sum(0).numpy()
  np.testing.assert_allclose(got, a[:4].sum(0), rtol=1e-6)


def test_an_int_index_beside_a_symbolic_slice(refgrad_device):
  """t[1, :n, 2] and t[-2, 1:n + 1] with n bound: a view of numpy's elements (TypeError 'slice indices must be
  integers' before), and a write through one for several values of n; an int out of range is still an IndexError."""
  a = data((2, ROWS, 3))
  for value in (1, 3, ROWS - 1):
    n = Variable("n", 1, ROWS - 1).bind(value)
    t = Tensor(a, device=refgrad_device)
    np.testing.assert_array_equal(t[1, :n, 2].numpy(), a[1, :value, 2])
    np.testing.assert_array_equal(t[-2, 1:n + 1].numpy(), a[0, 1:value + 1])
    target = Tensor(a, device=refgrad_device).contiguous().realize()
    target[1, :n, -1] = 7.5
    expected = a.copy()
    expected[1, :value, -1] = 7.5
    np.testing.assert_array_equal(target.numpy(), expected)
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 2"):
      t[2, :n]


def test_concrete_indices_of_a_tensor_of_symbolic_shape(refgrad_device):
  """t[:, :1], t[:, 1:3] and t[0:2] of a (n, 4) tensor, x[1] and x[1:3, :] of a (4, n) one: numpy's elements (each
  raised TypeError "'UOp' object cannot be interpreted as an integer" before)."""
  a = data((ROWS, 4))
  for value in (2, 3, ROWS):
    n = Variable("n", 1, ROWS).bind(value)
    t, x = Tensor(a, device=refgrad_device)[:n], Tensor(a.T.copy(), device=refgrad_device)[:, :n]
    np.testing.assert_array_equal(t[:, :1].squeeze(1).numpy(), a[:value, 0])
    np.testing.assert_array_equal(t[:, 1:3].numpy(), a[:value, 1:3])
    np.testing.assert_array_equal(t[0:2].numpy(), a[0:2])
    np.testing.assert_array_equal(x[1].numpy(), a.T[1, :value])
    np.testing.assert_array_equal(x[1:3, :].numpy(), a.T[1:3, :value])
    assert t[:, 2].shape == (n,) and x[1].shape == (n,)
