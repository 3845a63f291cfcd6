"""Symbolic shapes as tinygrad's users write them (docs/architecture.md, "Symbolic shapes"): a concrete tensor
reshaped to a shape holding a bound Variable, shrinks that fit the bound value, counts of symbolic axes, and what a
bound Variable can do. Each program runs with the size as a bound Variable and again with the size written as an
int, for values drawn by hypothesis over the whole range (both ends included), on every device; numpy is the oracle
where the program is short enough to write twice."""
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad import Tensor, TinyJit, Variable
from refgrad.jit import JitError
from refgrad.symbolic_shapes import size_value

LOW, HIGH = 1, 6
VALUES = st.sampled_from([LOW, HIGH]) | st.integers(LOW, HIGH)


def data(shape, seed=0):
  values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
  values.reshape(-1)[:3] = [0.0, -0.0, 1e30][:values.size]
  return values


def on(device, array):
  return Tensor(array, device=device)


# (name, program on x of shape (3, n) and y of shape (n, 4), with n a bound Variable or an int)
PROGRAMS = [
  ("elementwise", lambda x, y, n: (x * 2 + 1).exp2() - x),
  ("sum", lambda x, y, n: x.sum(1)),
  ("sum_all", lambda x, y, n: x.sum()),
  ("mean", lambda x, y, n: x.mean(1)),
  ("var", lambda x, y, n: x.var(1)),
  ("std_all", lambda x, y, n: x.std()),
  ("var_no_correction", lambda x, y, n: x.var(1, correction=0)),
  ("max", lambda x, y, n: x.max(1)),
  ("softmax", lambda x, y, n: x.softmax(1)),
  ("matmul", lambda x, y, n: x @ y),
  ("cat", lambda x, y, n: x.cat(x * 2, dim=1).sum(1)),
  ("cat_rows", lambda x, y, n: y.cat(y, dim=0).sum(0)),
  ("transpose_sum", lambda x, y, n: (x.T + 1).sum(0)),
  ("times_n", lambda x, y, n: x.sum(1) * n + n // 2),
  ("arange", lambda x, y, n: (Tensor.arange(0, n, device=x.device) * 3).cast(x.dtype).sum()),
  ("pad", lambda x, y, n: x.pad(((n, 1), (0, n))).sum(0)),
]


def concrete(result):
  """A result whose shape holds no Variable, to compare: symbolic dims are summed or reshaped to their value."""
  shape = tuple(size_value(s) for s in result.shape)
  return result.reshape(shape).numpy() if shape != result.shape else result.numpy()


@pytest.mark.parametrize("name, program", PROGRAMS, ids=[p[0] for p in PROGRAMS])
@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the device
@given(value=VALUES)
def test_symbolic_program_equals_the_program_with_ints(refgrad_device, name, program, value):
  n = Variable("n", LOW, HIGH).bind(value)
  x, y = data((3, value)), data((value, 4), seed=1)
  symbolic = program(on(refgrad_device, x).reshape(3, n), on(refgrad_device, y).reshape(n, 4), n)
  with_ints = program(on(refgrad_device, x), on(refgrad_device, y), value)
  np.testing.assert_allclose(concrete(symbolic), with_ints.numpy(), rtol=1e-5, atol=1e-5)


@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the device
@given(value=VALUES)
def test_gradients_through_a_symbolic_shape(refgrad_device, value):
  n = Variable("n", LOW, HIGH).bind(value)
  x, w = data((3, value)).clip(-2, 2), data((value,), seed=2)  # squares of 1e30 overflow: not the point here
  grads = []
  for size in (n, value):
    xt = on(refgrad_device, x).requires_grad_()
    wt = on(refgrad_device, w).requires_grad_()
    loss = ((xt.reshape(3, size) * wt.reshape(1, size)).relu().sum(1) ** 2).mean()
    loss.backward()
    grads.append((xt.grad.numpy(), wt.grad.numpy()))
  relu = np.maximum(x * w, 0)
  np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-6)
  np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-6)
  expected_w = (2 / 3 * relu.sum(1, keepdims=True) * (x * w > 0) * x).sum(0)
  np.testing.assert_allclose(grads[0][1], expected_w, rtol=1e-4, atol=1e-4)


def test_the_issue_examples(refgrad_device):
  vi = Variable("i", 1, 10).bind(3)
  t = Tensor.ones(3, 3, device=refgrad_device).reshape(3, vi)
  assert t.shape == (3, vi) and t.sum().item() == 9
  v = Variable("v", 0, 6).bind(3)
  shrunk = Tensor.arange(6, device=refgrad_device).float().reshape(1, 6).shrink((None, (v, v + 2)))
  assert shrunk.tolist() == [[3.0, 4.0]]
  assert vi.val == 3 and (vi * 4).val == 12 and (vi // 2).val == 1
  assert bool(vi > 0) and not bool(vi < 1)
  assert (Tensor(vi, device=refgrad_device) + 3).item() == 6
  assert (Tensor(3, device=refgrad_device) * vi).item() == 9
  assert Tensor.from_uop(vi * 4, device=refgrad_device).item() == 12
  assert Tensor.arange(0, vi, device=refgrad_device).reshape(3).tolist() == [0, 1, 2]
  padded = Tensor.ones(2, 2, device=refgrad_device).pad(((vi, vi), (vi, vi)))
  np.testing.assert_array_equal(padded.reshape(8, 8).numpy(), np.pad(np.ones((2, 2), np.float32), 3))
  np.testing.assert_allclose(t.var(1).reshape(3).numpy(), np.zeros(3))


def test_a_variable_in_a_shape_and_as_a_value():
  n = Variable("n", 1, 8).bind(2)
  t = Tensor.ones(4, 2).reshape(n * 4)
  assert (t * n).sum().item() == 16 and t.shape[0].val == 8
  assert (Tensor([1.5, 2.0]) * n).tolist() == [3.0, 4.0]  # a float tensor keeps its dtype
  assert (n * Tensor([1, 2])).dtype == Tensor([1, 2]).dtype


def test_comparisons_that_depend_on_the_value_are_refused():
  n = Variable("n", 1, 10).bind(3)
  with pytest.raises(ValueError, match="some values"):
    bool(n > 5)
  assert (n * 2 + 3 != 2 * n + 3) is False and (n + 1 != n) is True


@pytest.mark.parametrize("comparison, truth", [
  (lambda n, m: n < n, False), (lambda n, m: n >= n, True), (lambda n, m: n <= n + 1, True),
  (lambda n, m: n + 1 > n, True), (lambda n, m: 2 * n - n >= 1, True), (lambda n, m: n * 3 > n * 2 + 10, False),
  (lambda n, m: (n + m) - m < n, False), (lambda n, m: n.ne(n), False)])
def test_comparisons_of_sizes_with_common_terms_are_decided_by_their_difference(comparison, truth):
  """n < n and n <= n + 1 hold or fail for every value of n; they raised 'true for some values and false for
  others' (each side's range taken apart), so gather(index of shape (n, 1)) of a (n, 4) tensor raised."""
  n, m = Variable("n", 1, 10).bind(3), Variable("m", 0, 10).bind(4)
  assert bool(comparison(n, m)) is truth
  with pytest.raises(ValueError, match="some values"):
    bool(n < m)


def test_gather_along_a_symbolic_axis(refgrad_device):
  a = np.arange(32, dtype=np.float32).reshape(8, 4)
  for value in (1, 3, 8):
    n = Variable("n", 1, 8).bind(value)
    index = np.arange(value * 2).reshape(value, 2) % 4
    got = Tensor(a)[:n].gather(1, Tensor(index.astype(np.int32))[:n])
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(a[:value], index, 1))


def test_a_shrink_is_checked_at_the_bound_value_and_an_unbound_shape_is_lenient():
  v = Variable("v", 0, 6)
  with pytest.raises(RuntimeError, match="does not fit"):
    Tensor.arange(6).reshape(1, 6).shrink((None, (v.bind(5), v.bind(5) + 2)))
  w = Variable("w", 1, 5)
  assert Tensor.ones(3, 5).shrink(((0, 2), (w, w + 1))).shape == (2, 1)
  with pytest.raises(ValueError, match="'w' is not bound"):
    Tensor.ones(3, 5).shrink(((0, 2), (w, w + 1))).numpy()


def test_random_numbers_of_a_symbolic_shape_are_refused_and_leave_the_stream_alone():
  Tensor.manual_seed(7)
  expected = Tensor.rand(3).numpy()
  Tensor.manual_seed(7)
  n = Variable("n", 1, 10).bind(3)
  with pytest.raises(ValueError, match="symbolic shape"):
    Tensor.rand(2, n)
  with Tensor.train(), pytest.raises(ValueError, match="symbolic shape"):
    Tensor.ones(2, n).dropout(0.5)
  np.testing.assert_array_equal(Tensor.rand(3).numpy(), expected)


def test_pickle_keeps_values_and_symbolic_shape(refgrad_device):
  n = Variable("n", 1, 20).bind(10)
  t = Tensor.ones(10, n, device=refgrad_device).contiguous() * 2
  back = pickle.loads(pickle.dumps(t))
  assert back.shape == t.shape and back.device == refgrad_device and back.sum().item() == 200
  lazy = (Tensor.ones(10, n).contiguous() + Tensor.ones(10, n).contiguous()).sum(1)
  np.testing.assert_array_equal(pickle.loads(pickle.dumps(lazy)).numpy(), np.full(10, 20.0))


# ---- TinyJit over symbolic shapes: captured once, replayed for every value
def check_replays(refgrad_device, fn, make_args, values):
  """fn jitted, called with each value's arguments, against fn itself; the capture's launches serve every call."""
  jitted = TinyJit(fn)
  counts = []
  for value in values:
    n = Variable("n", LOW, HIGH).bind(value)
    got = jitted(*make_args(refgrad_device, n, value))
    want = fn(*make_args(refgrad_device, value, value))
    np.testing.assert_allclose(concrete(got), want.numpy(), rtol=1e-5, atol=1e-6)
    counts.append(len(jitted.jit_cache))
  assert jitted.captured is not None and jitted.captured.replays == len(values) - 2
  assert len(set(counts[1:])) == 1


JITTED = [
  ("plus_one", lambda a: (a + 1).realize(),
   lambda d, n, v: (on(d, data((3, v))).reshape(3, n),)),
  ("matmul", lambda a, b: (a @ b).realize(),
   lambda d, n, v: (on(d, data((3, v))).reshape(3, n), on(d, data((v, 5), 1)).reshape(n, 5))),
  ("attention", lambda q, k, v: q.scaled_dot_product_attention(k, v).realize(),
   lambda d, n, v: (on(d, data((2, 1, 4, 8))), on(d, data((2, v, 4, 8), 1)).reshape(2, n, 4, 8),
                    on(d, data((2, v, 4, 8), 2)).reshape(2, n, 4, 8))),
  ("var", lambda a: a.var(1).realize(), lambda d, n, v: (on(d, data((3, v))).reshape(3, n),)),
  ("cat", lambda a, b: a.cat(b, dim=1).realize(),
   lambda d, n, v: (on(d, data((3, v))).reshape(3, n), on(d, data((3, 2), 1)))),
]


@pytest.mark.parametrize("name, fn, make_args", JITTED, ids=[j[0] for j in JITTED])
def test_a_jit_replays_for_new_values(refgrad_device, name, fn, make_args):
  check_replays(refgrad_device, fn, make_args, [2, 3, LOW, HIGH, 4, 3])


def test_a_jit_takes_a_variable_argument_and_checks_the_shapes_again(refgrad_device):
  def window(a, v):
    return (a.shrink(((v, v + 2),)) * 2).realize()
  jitted = TinyJit(window)
  base = Tensor.arange(6, device=refgrad_device).float().realize()
  for start in [0, 1, 4, 2, 0]:
    got = jitted(base, Variable("v", 0, 6).bind(start))
    np.testing.assert_array_equal(got.numpy(), np.arange(6)[start:start + 2] * 2)
  assert len(jitted.jit_cache) == 1
  with pytest.raises(JitError, match="do not fit"):  # a plain call refuses it too: not zeros read past the end
    jitted(base, Variable("v", 0, 6).bind(5))
  with pytest.raises(RuntimeError, match="does not fit"):
    window(base, Variable("v", 0, 6).bind(5))


def test_a_jit_setitem_at_a_symbolic_offset(refgrad_device):
  def write(cache, kv, p):
    cache[:, p:p + 1] = kv
    return cache.sum().realize()
  jitted = TinyJit(write)
  cache = Tensor.zeros(2, 8, device=refgrad_device).contiguous().realize()
  expected = np.zeros((2, 8), np.float32)
  for i in range(7):
    total = jitted(cache, Tensor.full((2, 1), float(i + 1), device=refgrad_device), Variable("p", 0, 7).bind(i))
    expected[:, i] = i + 1
    np.testing.assert_array_equal(cache.numpy(), expected)
    assert total.item() == expected.sum()


def test_a_jit_refuses_a_write_into_an_argument_reshaped_to_a_symbolic_shape():
  @TinyJit
  def bump(a):
    a += 1
  base = Tensor.zeros(3, 2).contiguous().realize()
  with pytest.raises(JitError, match="symbolic shape"):
    bump(base.reshape(3, Variable("n", 1, 4).bind(2)))
