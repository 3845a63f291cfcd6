"""The schedule cache (refgrad/schedule.py: a graph's schedule keyed by its structure, its buffers as slots): graphs
of one structure over other buffers and values reuse a schedule and compute their own values (checked against
numpy); graphs that differ only in a dtype, a device, an input realized earlier, a buffer read twice, a Variable's
value, a constant's sign or an assign's target each get a schedule of their own."""
import numpy as np
import pytest

from refgrad import Tensor, Variable, schedule
from refgrad.schedule import graph_structure

pytestmark = pytest.mark.usefixtures("refgrad_device")


@pytest.fixture
def scheduled(monkeypatch):
  """Counts the graphs scheduled from scratch (a cache miss), with an empty cache."""
  monkeypatch.setattr(schedule, "_SCHEDULES", schedule.LRU(schedule.SCHEDULE_CACHE_SIZE))
  monkeypatch.delenv("REFGRAD_SCHEDULE_CACHE", raising=False)
  misses = []
  real = schedule.schedule_graph
  monkeypatch.setattr(schedule, "schedule_graph", lambda nodes: (misses.append(nodes), real(nodes))[1])
  return misses


def key(*tensors: Tensor) -> tuple:
  return graph_structure([t.uop for t in tensors]).key


def softmax_rows(x: Tensor) -> Tensor:
  """A graph of several kernels (a reduce expanded back) with intermediate buffers."""
  e = (x - x.max(1, keepdim=True)).exp()
  return e / e.sum(1, keepdim=True)


def np_softmax_rows(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)


def test_graphs_of_one_structure_share_a_schedule_and_get_their_own_values(scheduled):
  rng = np.random.default_rng(0)
  arrays = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
  for x in arrays:
    np.testing.assert_allclose(softmax_rows(Tensor(x)).numpy(), np_softmax_rows(x), rtol=1e-5)
  assert len(scheduled) == 1


def test_a_training_step_is_scheduled_once(scheduled):
  """Gradient steps over a new weight buffer each step: the steps after the first two schedule nothing new, and the
  weights follow numpy's."""
  rng = np.random.default_rng(1)
  x, w0 = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
  w = Tensor(w0, requires_grad=True)
  want, misses = w0.copy(), []
  with Tensor.train():
    for _ in range(4):
      w.grad = None
      (Tensor(x) @ w).square().sum().backward()
      w.replace((w - 0.01 * w.grad).detach()).realize()
      want = want - 0.01 * (2 * x.T @ (x @ want))
      misses.append(len(scheduled))
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-4, atol=1e-6)
  assert misses[1] == misses[2] == misses[3]


# graphs like a * 3 + b but for one thing: (the graph, numpy's value of it)
VARIANTS = {
  "another dtype": (lambda a, b: a.cast("int32") * 3 + b.cast("int32"),
                    lambda xa, xb: xa.astype(np.int32) * 3 + xb.astype(np.int32)),
  "one buffer read twice": (lambda a, b: a * 3 + a, lambda xa, xb: xa * 3 + xa),
  "another constant": (lambda a, b: a * 4 + b, lambda xa, xb: xa * 4 + xb),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_graphs_that_differ_only_in_their_inputs_get_their_own_schedule(scheduled, variant):
  make, want = VARIANTS[variant]
  xa, xb = np.array([1.5, -2.0, 3.0], np.float32), np.array([4.0, 0.5, -6.0], np.float32)
  a, b = Tensor(xa).realize(), Tensor(xb).realize()
  first, second = a * 3 + b, make(a, b)
  assert key(first) != key(second)
  np.testing.assert_array_equal(first.numpy(), xa * 3 + xb)
  np.testing.assert_array_equal(second.numpy(), want(xa, xb))


def test_buffers_in_other_roles_share_a_schedule(scheduled):
  """b * 3 + a is a * 3 + b with the slots' buffers swapped: one schedule, each graph its own values."""
  xa, xb = np.array([1.5, -2.0, 3.0], np.float32), np.array([4.0, 0.5, -6.0], np.float32)
  a, b = Tensor(xa).realize(), Tensor(xb).realize()
  scheduled.clear()
  np.testing.assert_array_equal((a * 3 + b).numpy(), xa * 3 + xb)
  np.testing.assert_array_equal((b * 3 + a).numpy(), xb * 3 + xa)
  assert len(scheduled) == 1


def test_another_device_gets_its_own_schedule(scheduled, refgrad_device):
  x = np.arange(6, dtype=np.float32)
  here, there = Tensor(x) * 2, Tensor(x, device=f"{refgrad_device}:1") * 2
  assert key(here) != key(there)
  np.testing.assert_array_equal(here.numpy(), x * 2)
  np.testing.assert_array_equal(there.numpy(), x * 2)
  assert len(scheduled) == 2


def test_an_input_realized_earlier_is_read_not_recomputed(scheduled):
  """A node an earlier realize computed (kept for autograd) is a leaf of the next graph: its structure differs from
  the same graph computed from scratch, and both give numpy's values."""
  x = np.array([1.0, -2.0, 3.0], np.float32)
  w = Tensor(x, requires_grad=True)
  h = w * 2
  fresh = key((h + 1).sum())
  h.realize()  # keeps its graph node (w wants a gradient), now in schedule._REALIZED
  again = (h + 1).sum()
  assert fresh != key(again)
  assert again.item() == float((x * 2 + 1).sum())
  assert len(scheduled) == 2  # h, then the sum reading h's buffer


def test_a_variable_s_value_is_part_of_the_key(scheduled):
  n = Variable("n", 1, 8)
  x = np.arange(8, dtype=np.float32)
  sums = [Tensor(x).shrink(((0, n.bind(v)),)).sum() for v in (3, 5)]
  assert key(sums[0]) != key(sums[1])
  assert [s.item() for s in sums] == [float(x[:3].sum()), float(x[:5].sum())]


def test_negative_zero_is_not_zero(scheduled):
  x = np.array([1.0, 2.0], np.float32)
  got = [(Tensor(x) * c).numpy() for c in (0.0, -0.0, 0.0)]
  assert [np.signbit(g).tolist() for g in got] == [[False, False], [True, True], [False, False]]
  assert len(scheduled) == 2


def test_assign_writes_its_own_target(scheduled):
  a, b = Tensor([1.0, 2.0]).contiguous().realize(), Tensor([10.0, 20.0]).contiguous().realize()
  scheduled.clear()
  a.assign(a + 1).realize()
  b.assign(b + 1).realize()
  assert len(scheduled) == 1
  assert a.tolist() == [2.0, 3.0] and b.tolist() == [11.0, 21.0]


def test_the_cache_gives_the_schedule_the_scheduler_gives(monkeypatch):
  x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
  cached = [softmax_rows(Tensor(x)).schedule() for _ in range(2)][1]
  monkeypatch.setenv("REFGRAD_SCHEDULE_CACHE", "0")
  fresh = softmax_rows(Tensor(x)).schedule()
  assert [item.ast for item in cached] == [item.ast for item in fresh]
  assert [[b.size for b in item.buffers] for item in cached] == [[b.size for b in item.buffers] for item in fresh]


def test_writes_through_views_land_in_their_own_bases(scheduled):
  """The same write through a view of two tensors (one structure): each base gets its own write."""
  xa, xb = np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(6, 12, dtype=np.float32).reshape(2, 3)
  a, b = Tensor(xa).contiguous().realize(), Tensor(xb).contiguous().realize()
  for t, x in ((a, xa), (b, xb)):
    t[:, 1:] = t[:, :2] * 2
    x[:, 1:] = x[:, :2] * 2
  np.testing.assert_array_equal(a.numpy(), xa)
  np.testing.assert_array_equal(b.numpy(), xb)

