"""TinyJit from several threads (refgrad/jit.py): calls of one jitted function take turns and each gets the values of
its own inputs, even when other threads replay before it reads them; a thread's plain realizes or jitted calls made
while another thread captures are neither recorded nor refused; two jitted functions run in two threads at once."""
import threading

import numpy as np

from refgrad import Tensor, TinyJit

WAIT = 60  # seconds a thread waits for another before the test fails (a deadlock, not a timing assertion)


def run_threads(*targets) -> None:
  """Run each target in its own thread; re-raise the first exception any of them raised."""
  errors: list[BaseException] = []

  def guarded(target):
    try:
      target()
    except BaseException as error:  # noqa: BLE001 (re-raised in the main thread)
      errors.append(error)
  threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
  for t in threads:
    t.start()
  for t in threads:
    t.join(WAIT)
  assert not any(t.is_alive() for t in threads), "a thread is still running: a deadlock"
  if errors:
    raise errors[0]


def test_threads_hammering_one_jitted_function_each_get_their_own_values(refgrad_device):
  """4 threads x 100 calls with distinct inputs; every call's results are read only after all 4 threads have made
  their call of the round, so other threads' replays ran in between: each must still hold its own input's values."""
  f, n_threads, calls = TinyJit(lambda a, b: ((a * b + 1).sum(0), a.max())), 4, 100
  rounds = threading.Barrier(n_threads, timeout=WAIT)
  wrong: list[tuple[int, int]] = []
  replayed: dict[int, set[int]] = {}  # per thread, the ids of the tensors its replays returned

  def worker(k: int):
    rng = np.random.default_rng(k)
    for i in range(calls):
      a, b = rng.standard_normal((5, 8), dtype=np.float32), rng.standard_normal((5, 8), dtype=np.float32)
      total, top = f(Tensor(a, device=refgrad_device), Tensor(b, device=refgrad_device))
      rounds.wait()
      if not (np.allclose(total.numpy(), (a * b + 1).sum(0), rtol=1e-5, atol=1e-5) and top.item() == a.max()):
        wrong.append((k, i))
      if i > 0:  # the first plain call and the capture are in round 0
        replayed.setdefault(k, set()).add(id(total))
  run_threads(*(lambda k=k: worker(k) for k in range(n_threads)))
  assert wrong == []
  assert f.captured is not None and f.captured.replays == n_threads * calls - 2
  # within a thread, the same tensors written again (tinygrad's results); each thread its own
  assert all(len(ids) == 1 for ids in replayed.values())
  assert len(set.union(*replayed.values())) == n_threads


def square_sum(x, between=lambda: None):
  y = (x + 1).realize()
  between()
  return (y * y).sum()


class Gate:
  """Holds a jitted function's body on its capture call until another thread has done its work."""

  def __init__(self):
    self.capturing, self.done, self.runs = threading.Event(), threading.Event(), 0

  def hold_on_capture(self):
    self.runs += 1
    if self.runs == 2:  # the second call is the capture
      self.capturing.set()
      assert self.done.wait(WAIT), "the other thread never finished"


def test_plain_realizes_and_jitted_calls_while_another_thread_captures(refgrad_device):
  """Thread A's capture is held open while thread B realizes (a new tensor, a lazy tensor made before the capture)
  and replays another jitted function: A records only its own launches, B sees no error and its values, and A's
  replays leave B's tensors alone."""
  dev = refgrad_device
  gate = Gate()
  f = TinyJit(lambda x: square_sum(x, gate.hold_on_capture))
  reference = TinyJit(square_sum)  # the same kernels, captured alone
  for i in range(3):
    reference(Tensor([float(i)] * 4, device=dev))
  g = TinyJit(lambda x: x * 3 - 1)
  for i in range(3):  # captured before A's capture begins: B's calls replay
    g(Tensor([float(i)], device=dev))
  state = Tensor(np.zeros(6, np.float32), device=dev).realize()  # B's, made before the capture, changed inside it
  seen: dict[str, list] = {"plain": [], "g": []}

  def thread_b():
    assert gate.capturing.wait(WAIT)
    try:
      state.replace(Tensor(np.arange(6, dtype=np.float32), device=dev) * 2).realize()
      for i in range(5):
        seen["plain"].append(((Tensor([float(i), 2.0], device=dev) * 10).sum()).item())
        seen["g"].append(g(Tensor([float(i)], device=dev)).item())
    finally:
      gate.done.set()

  def thread_a():
    for i in range(4):
      assert f(Tensor([float(i)] * 4, device=dev)).item() == 4 * (i + 1) ** 2
  run_threads(thread_a, thread_b)
  assert seen == {"plain": [10.0 * i + 20.0 for i in range(5)], "g": [3.0 * i - 1 for i in range(5)]}
  assert len(f.jit_cache) == len(reference.jit_cache)
  state.replace(Tensor(np.full(6, 7.0, np.float32), device=dev) * 1).realize()  # B moves its tensor on
  assert f(Tensor([5.0] * 4, device=dev)).item() == 144.0
  np.testing.assert_array_equal(state.numpy(), np.full(6, 7.0, np.float32))  # A's replay did not point it back


def test_two_jitted_functions_in_two_threads(refgrad_device):
  """Each thread captures and replays its own function at the same time (their captures take turns); a running
  state (an accumulator the function updates) follows the plain function's."""
  dev, calls = refgrad_device, 30
  totals = {"sum": Tensor(np.zeros(3, np.float32), device=dev).realize()}
  f_sum = TinyJit(lambda x: totals["sum"].assign(totals["sum"] + x).realize())
  f_max = TinyJit(lambda x: (x.exp2() * x).max(0))
  results: dict[str, list] = {"sum": [], "max": []}

  def summing():
    for i in range(calls):
      f_sum(Tensor(np.full(3, float(i), np.float32), device=dev))
      results["sum"].append(totals["sum"].numpy().copy())

  def maxing():
    rng = np.random.default_rng(1)
    for _ in range(calls):
      x = rng.standard_normal((4, 3), dtype=np.float32)
      results["max"].append((f_max(Tensor(x, device=dev)).numpy(), (np.exp2(x) * x).max(0)))
  run_threads(summing, maxing)
  for i, got in enumerate(results["sum"]):
    np.testing.assert_array_equal(got, np.full(3, i * (i + 1) / 2, np.float32))
  for got, want in results["max"]:
    np.testing.assert_allclose(got, want, rtol=1e-5)
  assert f_sum.captured.replays == f_max.captured.replays == calls - 2


def test_state_a_jitted_function_updates_from_several_threads_loses_no_call(refgrad_device):
  """4 threads x 50 calls add their inputs into one accumulator: the calls take turns, so the sum has every input
  (whole numbers, exact in float32, so any order of the calls gives the same total)."""
  dev, n_threads, calls = refgrad_device, 4, 50
  total = Tensor(np.zeros(2, np.float32), device=dev).realize()
  add = TinyJit(lambda x: total.assign(total + x).realize())

  def worker(k: int):
    for i in range(calls):
      add(Tensor(np.array([k + 1, i], np.float32), device=dev))
  run_threads(*(lambda k=k: worker(k) for k in range(n_threads)))
  want = [calls * sum(range(1, n_threads + 1)), n_threads * sum(range(calls))]
  np.testing.assert_array_equal(total.numpy(), np.array(want, np.float32))
