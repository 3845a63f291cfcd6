"""TinyJit as tinygrad users write it (refgrad/jit.py): keyword arguments bound by name, updates of the arguments
and of other tensors landing in the tensors of each call, values assigned between calls read by the replays, random
draws advancing, pruning, and the tinygrad surface (jit_cache, AssertionError). Every value is compared with the
plain function run on the same inputs, or with numpy."""
import copy
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refgrad.jit
from refgrad import Tensor, TinyJit, Variable, dtypes
from refgrad.jit import CapturedCall, JitError
from refgrad.nn.optim import SGD
from refgrad.testing.oracle.jit_replay import ReplayMismatch, check_jit_replay


def on(device, values, dtype=dtypes.float32):
  return Tensor(np.asarray(values, dtype=dtype.np), device=device).contiguous().realize()


# ---- the reproducers of issue 25, items 1 and 2, on every device
def test_a_replay_binds_keyword_arguments_by_name(refgrad_device):
  f = TinyJit(lambda first, second: (first / second).realize())
  for _ in range(2):
    f(second=on(refgrad_device, [1.0]), first=on(refgrad_device, [4.0]))
  assert f(first=on(refgrad_device, [4.0]), second=on(refgrad_device, [1.0])).item() == 4.0
  assert f(on(refgrad_device, [9.0]), second=on(refgrad_device, [3.0])).item() == 3.0  # positional or keyword


def test_a_setitem_into_an_argument_lands_in_the_tensor_of_each_call(refgrad_device):
  @TinyJit
  def f(t, a):
    t[0:1] = a
  seen = []
  for i in range(1, 6):
    t = Tensor.zeros(2, device=refgrad_device).contiguous().realize()
    f(t, on(refgrad_device, [float(i)]))
    seen.append(t.tolist())
  assert seen == [[float(i), 0.0] for i in range(1, 6)]


def test_an_in_place_add_follows_whichever_tensor_is_passed(refgrad_device):
  @TinyJit
  def f(x):
    x += 1
    x.realize()
  x, y = on(refgrad_device, [0.0]), on(refgrad_device, [0.0])
  for _ in range(3):
    f(x)
  for _ in range(3):
    f(y)
  assert (x.item(), y.item()) == (3.0, 3.0)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int8])
def test_an_in_place_add_left_lazy_is_captured_too(refgrad_device, dtype):
  """tinygrad's test_jit_assign, and the same without the realize: the update still lands."""
  @TinyJit
  def f(a):
    a += 1
  a = on(refgrad_device, [0], dtype)
  for _ in range(5):
    f(a)
  assert a.item() == 5


def test_assign_into_a_closed_over_tensor_takes_each_calls_value(refgrad_device):
  dst = on(refgrad_device, [0.0])

  @TinyJit
  def f(a):
    dst.assign(a * 1).realize()
  got = []
  for i in range(1, 6):
    f(on(refgrad_device, [float(i)]))
    got.append(dst.item())
  assert got == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_an_assign_that_launches_no_kernel_is_replayed_too(refgrad_device):
  """dst.assign(a) makes dst read a's buffer: no kernel, but still an update a replay must make."""
  dst = on(refgrad_device, [0.0])
  f = TinyJit(lambda a: dst.assign(a).realize())
  got = []
  for i in range(1, 6):
    f(on(refgrad_device, [float(i)]))
    got.append(dst.item())
  assert got == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_the_argument_a_function_returns_is_the_one_of_this_call(refgrad_device):
  """tinygrad's test_jit_init_empty_alt: b.assign(a + 1) returns b."""
  f = TinyJit(lambda a, b: b.assign(a + 1))
  for i in range(5):
    a, b = on(refgrad_device, [float(i)]), Tensor.empty(1, device=refgrad_device)
    c = f(a, b)
    assert c is b and c.item() == i + 1


def test_values_held_before_a_replay_keep_their_values(refgrad_device):
  """Each replay writes updated state into new buffers: a tensor that shares the state's buffer from an earlier
  call keeps that call's value (no lost data; the alternating buffers of before lost it)."""
  x = on(refgrad_device, [0.0, 10.0])

  @TinyJit
  def step(a):
    x.assign(x + a).realize()
  snapshots = []
  for i in range(6):
    snapshots.append(Tensor(x.uop))  # the same node: it reads x's buffer of now
    step(on(refgrad_device, [1.0, float(i)]))
  expected, value = [], np.array([0.0, 10.0])
  for i in range(6):
    expected.append(value.copy())
    value = value + [1.0, i]
  assert [s.tolist() for s in snapshots] == [e.tolist() for e in expected]
  assert x.tolist() == value.tolist()


# ---- tensors the captured kernels read besides the arguments: what they hold now
def test_a_replay_reads_what_a_closed_over_tensor_holds_now(refgrad_device):
  w = on(refgrad_device, [1.0, 2.0])
  f = TinyJit(lambda x: (x * w).realize())
  for _ in range(3):
    f(on(refgrad_device, [1.0, 1.0]))
  w.assign(on(refgrad_device, [10.0, 20.0]))            # realized
  assert f(on(refgrad_device, [1.0, 2.0])).tolist() == [10.0, 40.0]
  w.assign(Tensor([3.0, 4.0], device=refgrad_device) * 2)  # lazy: realized by the replay
  assert f(on(refgrad_device, [1.0, 1.0])).tolist() == [6.0, 8.0]
  w.replace(on(refgrad_device, [1.0, 2.0], dtypes.float64))
  with pytest.raises(JitError, match="float64"):
    f(on(refgrad_device, [1.0, 1.0]))


class RunningTotal:
  """State kept by rebinding an attribute, not updating the tensor."""

  def __init__(self, device: str):
    self.total = on(device, [0.0, 0.0])

  def __call__(self, x: Tensor) -> Tensor:
    self.total = self.total + x
    return (self.total * 2).realize()


def test_state_rebound_by_the_function_is_refused_at_capture(refgrad_device):
  """`self.total = self.total + x` drops the tensor the kernels read: the replays read the capture's total on every
  call ([4, 8] each time, silently, before). The capture refuses it; the calls before it are right."""
  acc = RunningTotal(refgrad_device)
  f = TinyJit(acc.__call__)
  assert f(on(refgrad_device, [1.0, 2.0])).tolist() == [2.0, 4.0]
  with pytest.raises(JitError, match="rebound to a new tensor"):
    f(on(refgrad_device, [1.0, 2.0]))
  np.testing.assert_array_equal(acc.total.numpy(), np.array([2.0, 4.0], np.float32))


def test_a_step_adding_onto_the_last_calls_gradient_is_refused(refgrad_device):
  """Without zero_grad, backward() makes w.grad a new tensor (the last call's gradient plus this one's), which the
  jit cannot follow: the replays added the capture's stale gradient (values off from the 4th call, silently,
  before). The numpy oracle checks the calls before the capture."""
  w = on(refgrad_device, [1.0, 2.0, 3.0])
  opt = SGD([w], lr=0.1)

  def step(x: Tensor) -> Tensor:
    loss = (w * w * x).sum()
    loss.backward()
    opt.step()
    return loss.realize()
  f = TinyJit(step)
  with Tensor.train():
    assert f(on(refgrad_device, [1.0, 1.0, 1.0])).item() == pytest.approx(14.0)  # 1 + 4 + 9
    np.testing.assert_allclose(w.numpy(), np.array([0.8, 1.6, 2.4]), rtol=1e-6)  # w - 0.1 * 2w
    with pytest.raises(JitError, match="backward"):
      f(on(refgrad_device, [1.0, 1.0, 1.0]))


def test_a_read_tensor_rebound_between_calls_is_refused_at_the_replay(refgrad_device):
  """The jitted update reads w.grad, which backward() between calls makes anew and zero_grad drops: the replays
  read the capture's gradient (silently, before). The numpy oracle checks the plain and captured calls; the first
  replay raises."""
  w = Tensor([1.0, 1.0, 1.0], device=refgrad_device, requires_grad=True)
  f = TinyJit(lambda: w.assign(w.detach() - 0.25 * w.grad).sum().realize())
  ref = np.ones(3)
  for i, scale in enumerate((1.0, 2.0, 3.0)):
    (w * w * scale).sum().backward()
    if i == 2:
      with pytest.raises(JitError, match="is gone"):
        f()
      break
    ref = ref - 0.25 * 2 * scale * ref
    assert f().item() == pytest.approx(ref.sum())
    w.grad = None


def test_gradients_read_after_each_replay_are_that_calls(refgrad_device):
  """A whole step (zero_grad, backward, step) jitted: w.grad after each call is a lazy tensor no replay launched a
  kernel for; it read as the captured call's gradient after every replay (silently, as in tinygrad). numpy oracle:
  d/dw sum(w * w * x) = 2 * w * x, with w before the step."""
  w = on(refgrad_device, [1.0, 1.0, 1.0])
  opt = SGD([w], lr=0.01)

  def step(x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (w * w * x).sum()
    loss.backward()
    opt.step()
    return loss.realize()
  f, ref = TinyJit(step), np.ones(3)
  with Tensor.train():
    for i in range(5):
      x = np.array([1.0, 2.0, 3.0]) * (i + 1)
      f(on(refgrad_device, x))
      np.testing.assert_allclose(w.grad.numpy(), 2 * ref * x, rtol=1e-5)
      ref = ref - 0.01 * 2 * ref * x
      np.testing.assert_allclose(w.numpy(), ref, rtol=1e-5)


class KeepsLast:
  """Keeps a lazy intermediate of each call for later inspection."""

  def __init__(self, device: str):
    self.w, self.last = on(device, [2.0, -1.0]), None

  def __call__(self, x: Tensor) -> Tensor:
    self.last = (x * self.w).exp()
    return (x + self.w).realize()


def test_a_lazy_tensor_the_call_keeps_reads_as_each_calls(refgrad_device):
  keeper = KeepsLast(refgrad_device)
  f = TinyJit(keeper.__call__)
  for i in range(4):
    x = np.array([0.5, 1.0]) * i
    f(on(refgrad_device, x))
    np.testing.assert_allclose(keeper.last.numpy(), np.exp(x * np.array([2.0, -1.0])), rtol=1e-6)


def test_gradients_accumulated_over_jitted_calls_are_refused_at_capture(refgrad_device):
  """A jitted forward and backward without the step, called per micro-batch: each call's w.grad adds onto the last
  call's, which the jit cannot follow (the replays added the capture's: off by 1.0, silently, before)."""
  w = on(refgrad_device, [1.0, 2.0]).requires_grad_()

  def forward_backward(x: Tensor) -> Tensor:
    loss = (w * x).sum()
    loss.backward()
    return loss.realize()
  f = TinyJit(forward_backward)
  f(on(refgrad_device, [1.0, 1.0]))
  np.testing.assert_array_equal(w.grad.numpy(), np.array([1.0, 1.0], np.float32))
  with pytest.raises(JitError, match="dropped"):
    f(on(refgrad_device, [2.0, 3.0]))


MADE = {  # every way a tensor comes to be: each must be state a replay reads (tensor.LIVE holds it)
  "constructor": lambda device: Tensor([1.0, 2.0], device=device),
  "method result": lambda device: (Tensor.ones(2, device=device) * Tensor([1.0, 2.0], device=device)).realize(),
  "unpickled": lambda device: pickle.loads(pickle.dumps(on(device, [1.0, 2.0]))),
  "deep copy": lambda device: copy.deepcopy(on(device, [1.0, 2.0])),
}


@pytest.mark.parametrize("made", list(MADE))
def test_a_replay_reads_the_state_of_a_tensor_made_any_way(refgrad_device, made):
  w = MADE[made](refgrad_device)
  assert any(t is w for t in refgrad.jit.live_tensors())
  f = TinyJit(lambda x: (x * w).realize())
  for _ in range(3):
    f(on(refgrad_device, [1.0, 1.0]))
  w.assign(Tensor([3.0, 4.0], device=refgrad_device) * 2)
  np.testing.assert_array_equal(f(on(refgrad_device, [1.0, 2.0])).numpy(), np.array([6.0, 16.0], np.float32))


def test_state_the_function_leaves_lazy_is_read_as_each_call_left_it(refgrad_device):
  """The function reads its weights, then updates them without a realize: the update of the first (plain) call was
  still lazy when the capture began, and the replays read the weights as the capture found them, call after call."""
  weights = on(refgrad_device, [1.0, -2.0, 0.5])

  def step(x, decay):
    loss = (weights * x).sum()
    weights.assign(weights - decay * x * weights)
    return loss
  f = TinyJit(step)
  want = np.array([1.0, -2.0, 0.5], np.float32)
  for call in range(6):
    x, decay = np.float32([1, 2, 3]) * (call - 2), np.float32([0.25, -0.0, 0.5, 0.25, 0.125, 1.0][call])
    loss = f(on(refgrad_device, x), on(refgrad_device, [decay])).numpy()
    np.testing.assert_allclose(loss, (want * x).sum(), rtol=1e-6)
    want = want - decay * x * want
  np.testing.assert_allclose(weights.numpy(), want, rtol=1e-6)


class LazyCache:
  """State made lazily inside the first call (a KV cache on first use), read and then updated without a realize."""

  def __call__(self, x):
    if not hasattr(self, "cache"):
      self.cache = Tensor.zeros(4, device=x.device)
    total = (self.cache * x).sum()
    self.cache.assign(self.cache + x)
    return total


def read_then_update_through_a_view(state):
  window = state[1:3]
  return lambda x: ((window * x[:2]).sum(), window.assign(window + x[2:]))[0]


def update_a_transpose_then_read_twice(state):
  def step(x):
    before = state.sum(0)
    state.T.assign(state.T * 0.5 + x.reshape(2, 2))
    return before, state.max()
  return step


def in_place_operators(state):
  def step(x):
    state.__imul__(-0.5)
    state.__iadd__(x)
    return state.min()
  return step


LAZY_UPDATES = {
  "a view": read_then_update_through_a_view,
  "a transpose": update_a_transpose_then_read_twice,
  "in-place operators": in_place_operators,
  "state made in the first call": lambda state: LazyCache(),
}


@pytest.mark.parametrize("pattern", list(LAZY_UPDATES))
def test_state_updated_lazily_follows_the_plain_function(refgrad_device, pattern):
  """Each call's results, and the state at the end (not read in between, which would realize it), as in the plain
  function on its own copy of the state."""
  runs = []
  for jit in (False, True):
    state = on(refgrad_device, [1.0, -2.0, 0.5, -0.0])
    fn = LAZY_UPDATES[pattern](state.reshape(2, 2) if pattern == "a transpose" else state)
    f = TinyJit(fn) if jit else fn
    results = []
    for call in range(5):
      got = f(on(refgrad_device, np.float32([1, -2, 3, 0.5]) * (call - 1)))
      results.append([t.numpy() for t in (got if isinstance(got, tuple) else (got,))])
    runs.append((results, [state.numpy(), getattr(fn, "cache", state).numpy()]))
  (plain, plain_state), (jitted, jitted_state) = runs
  for call, (want, got) in enumerate(zip(plain, jitted)):
    for w, g in zip(want, got, strict=True):
      np.testing.assert_array_equal(g, w, err_msg=f"call {call}")
  for w, g in zip(plain_state, jitted_state, strict=True):
    np.testing.assert_array_equal(g, w)


def test_lazy_computed_state_assigned_between_calls_is_read_as_assigned(refgrad_device):
  """A closed-over tensor still lazy at the capture (computed from constants or from a buffer, or a bare constant)
  is realized then, so the replays read it as it is at each call; a lazy tensor that cannot be computed (an unbound
  Variable) is left to raise when its owner reads it."""
  unbound = Tensor.ones(3, Variable("n", 1, 5), device=refgrad_device) * 2
  from_constants = Tensor.ones(3, device=refgrad_device) * 2
  from_buffer = on(refgrad_device, [1.0, 2.0, 3.0]) * 3
  constant = Tensor.full((), 0.5, device=refgrad_device)
  f = TinyJit(lambda x: (from_constants * x + from_buffer - constant).realize())
  x = on(refgrad_device, [1.0, -0.0, 3.0])
  for _ in range(3):
    assert f(x).tolist() == [4.5, 5.5, 14.5]
  from_constants.assign(on(refgrad_device, [5.0, 5.0, 5.0]))
  from_buffer.assign(on(refgrad_device, [7.0, -0.0, 7.0]))
  constant[...] = 0.0  # a setitem: realized, not through the jit
  got = f(x).numpy()
  np.testing.assert_array_equal(got, np.float32([12.0, 0.0, 22.0]))
  assert np.signbit(got[1])  # 5 * -0.0 + -0.0 - 0.0
  with pytest.raises(ValueError, match="Variable 'n' is not bound"):
    unbound.realize()


def test_tinygrads_read_assign_cache_reads_the_new_value():
  """tinygrad's test_jitted_read_assign: a cache assigned outside the jit is read by the replays. tinygrad's own
  "bad" cache (assign of a realized tensor) is read stale there; here both caches read the new value."""
  class Cache:
    def __init__(self):
      self.cache = Tensor.zeros(1).contiguous().realize()
      self.jitted = TinyJit(self.read)

    def read(self, y, value=None):
      if value is not None:
        self.cache.assign(value).realize()
      return (self.cache + y).realize()
  cache = Cache()
  zero, one, two = Tensor([0.0]), Tensor([1.0]), Tensor([2.0])
  cache.read(zero, one)
  for i in range(5):
    cache.jitted(Tensor([float(i)]))
  assert cache.jitted(zero).item() == 1.0
  cache.read(zero, two)
  assert cache.jitted(zero).item() == 2.0


# ---- random numbers
def test_random_draws_advance_on_every_replay_as_in_the_plain_function(refgrad_device):
  def f(a):
    return (a * Tensor.rand(1, device=refgrad_device)).realize(), Tensor.randn(2, 3, device=refgrad_device) + a
  runs = []
  for jit in (False, True):
    Tensor.manual_seed(7)
    run = TinyJit(f) if jit else f
    runs.append([[t.numpy() for t in run(on(refgrad_device, [float(i + 1)]))] for i in range(5)])
  plain, jitted = runs
  for p, j in zip(plain, jitted):
    assert all(np.array_equal(a, b) for a, b in zip(p, j))
  assert len({p[0].item() / (i + 1) for i, p in enumerate(plain)}) == 5  # five different draws


def test_a_new_seed_between_replays_is_used():
  f = TinyJit(lambda: Tensor.rand(3).realize())
  Tensor.manual_seed(3)
  plain = [Tensor.rand(3).tolist() for _ in range(2)]
  Tensor.manual_seed(3)
  first = [f().tolist() for _ in range(3)]
  Tensor.manual_seed(3)
  again = [f().tolist() for _ in range(2)]
  assert first[:2] == plain and again == plain and first[2] != first[1]


def test_dropout_under_a_jit_matches_the_plain_step():
  def step(x):
    with Tensor.train():
      return x.dropout(0.5).sum().realize()
  x = Tensor.ones(64).contiguous().realize()
  results = []
  for run in (step, TinyJit(step)):
    Tensor.manual_seed(11)
    results.append([run(x).item() for _ in range(5)])
  assert results[0] == results[1] and len(set(results[0])) > 1


# ---- the tinygrad surface
def test_jit_cache_counts_the_launches_and_prune_drops_constant_kernels():
  weights = Tensor.rand(16).realize()

  def w2(x):
    return (weights * 2).contiguous() + x
  for prune, launches in ((False, 2), (True, 1)):
    jitted = TinyJit(w2, prune=prune)
    assert jitted.jit_cache == []
    for _ in range(4):
      a = Tensor.rand(16).realize()
      np.testing.assert_allclose(jitted(a).numpy(), weights.numpy() * 2 + a.numpy(), rtol=1e-6)
    assert len(jitted.jit_cache) == launches
    assert all(launch.prg is not None and launch.bufs for launch in jitted.jit_cache)


def test_prune_keeps_the_state_a_call_updates():
  """A counter the function increments depends on no argument, but it changes: pruning must not drop it."""
  counter = Tensor.zeros(1).contiguous().realize()

  @TinyJit
  def f(x):
    counter.assign(counter + 1).realize()
    return (x + 0).realize()
  f.prune = True
  for _ in range(5):
    f(Tensor([1.0]))
  assert counter.item() == 5.0


def test_a_mismatch_is_an_assertion_error_too():
  f = TinyJit(lambda a: (a + 1).realize())
  for _ in range(2):
    f(Tensor.ones(3))
  with pytest.raises(AssertionError):
    f(Tensor.ones(4))
  with pytest.raises(JitError):
    f(Tensor.ones(3, dtype=dtypes.int32))


def test_a_function_with_nothing_to_replay_is_refused_at_capture():
  f = TinyJit(lambda a, b: None)
  f(Tensor.ones(2), Tensor.ones(2))
  with pytest.raises(JitError, match="nothing to replay"):
    f(Tensor.ones(2), Tensor.ones(2))


def test_a_jit_inside_a_jit_is_refused():
  inner = TinyJit(lambda t: t + 1)
  outer = TinyJit(lambda t: (inner(t) * 3).realize())
  assert outer(Tensor([1.0])).item() == 6.0
  with pytest.raises(RuntimeError, match="TinyJit inside another TinyJit"):
    outer(Tensor([1.0]))


def test_a_jitted_clone_and_a_clone_of_a_replay_result():
  jitted = TinyJit(lambda a: a.clone().realize())
  for i in range(4):
    assert jitted(Tensor([float(i)]).realize()).item() == float(i)
  f = TinyJit(lambda x: (x + 1).realize())
  f(Tensor([0.0]))
  f(Tensor([0.0]))
  kept = f(Tensor([1.0])).clone().realize()
  later = f(Tensor([2.0]))
  assert (kept.item(), later.item()) == (2.0, 3.0)


# ---- the replay oracle: arguments by keyword, updated in place, aliased, drawn by hypothesis
FUNCTIONS = {
  "pure": lambda a, b: (a / (b * b + 1), (a - b).max()),
  "add in place": lambda a, b: a.__iadd__(b).realize(),
  "setitem": lambda a, b: a.__setitem__(slice(0, 1), b[0:1].reshape(a[0:1].shape)),
  "assign and return": lambda a, b: (a.assign(a * b + 1), b.sum()),
  "two updates": lambda a, b: (a.assign(a + b).realize(), b.assign(b - 1).realize(), None)[2],
}


def _call(draw_order, names, arrays):
  order = draw_order(st.permutations(names))
  return {name: arrays[names.index(name)] for name in order}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(FUNCTIONS)), keywords=st.booleans(), aliased=st.booleans())
def test_replays_match_the_function_in_results_and_updated_inputs(data, name, keywords, aliased):
  fn = FUNCTIONS[name]
  rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
  calls = []
  for _ in range(4):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = a if aliased else rng.standard_normal((2, 3)).astype(np.float32)
    calls.append(_call(data.draw, ["a", "b"], [a, b]) if keywords else [a, b])
  assert check_jit_replay(fn, calls, device="PYTHON")[0] == 2


class CapturedTensorsCall(CapturedCall):
  """Issue 25's second bug, planted: updates land in the captured call's tensors, not in this call's."""

  def replay(self, tensors, inputs, signature, values):
    return super().replay(self.arguments, inputs, signature, values)


def captured_tensors_jit(fn):
  jitted = TinyJit(fn)
  original = jitted._capture

  def capture(args, kwargs, tensors, *rest):
    result = original(args, kwargs, tensors, *rest)
    jitted.captured.__class__, jitted.captured.arguments = CapturedTensorsCall, tensors
    return result
  jitted._capture = capture
  return jitted


def test_the_oracle_catches_keyword_arguments_bound_by_call_order(monkeypatch):
  """Issue 25's first bug, planted: the call's tensors taken in the order the call gives its keywords."""
  rng = np.random.default_rng(0)
  calls = [{"b": rng.standard_normal(3).astype(np.float32) + 2, "a": rng.standard_normal(3).astype(np.float32)}
           for _ in range(2)]
  calls.append({name: rng.standard_normal(3).astype(np.float32) + 2 for name in ("a", "b")})
  fn = FUNCTIONS["pure"]
  assert check_jit_replay(fn, calls, device="PYTHON")[0] == 1
  monkeypatch.setattr(refgrad.jit, "in_parameter_order", lambda parameters, args, kwargs: [*args, *kwargs.values()])
  with pytest.raises(ReplayMismatch, match="call 2 \\(replayed by the jit\\)"):
    check_jit_replay(fn, calls, device="PYTHON")


def test_the_oracle_catches_updates_landing_in_the_captured_tensors():
  rng = np.random.default_rng(1)
  calls = [[rng.standard_normal(3).astype(np.float32) for _ in range(2)] for _ in range(3)]
  with pytest.raises(ReplayMismatch, match="input 0 after the call"):
    check_jit_replay(FUNCTIONS["add in place"], calls, device="PYTHON", jit=captured_tensors_jit)
  assert check_jit_replay(FUNCTIONS["add in place"], calls, device="PYTHON")[0] == 1


def state_only_step(total):
  """Updates its state from each call and returns a value that does not read it: only the state can show a replay
  that started from the state the capture found."""
  def step(x):
    total.assign(total * 0.5 + x)
    return x.sum()
  return step


def test_the_state_oracle_catches_a_replay_of_the_state_the_capture_found(refgrad_device, monkeypatch):
  """check_jit_state on the check's stateful step and on a step whose results never read its state: both pass with
  TinyJit; with the capture's realize of lazy state planted away (the bug the oracle was made for: the replays then
  compute from the state as it was at the capture), the first fails at the first replay and the second in the state."""
  from refgrad.testing.conformance import corpus
  from refgrad.testing.oracle.jit_replay import check_jit_state
  make_step, inputs, state = corpus._stateful_case()
  calls = [inputs, *corpus._other_inputs(inputs, 3)]
  small = [[np.float32([1.0, -2.0, 0.5]) * k] for k in (1, -3, 2, 0.25)]
  # lanes: each replay's result and inputs after it, then the state
  assert check_jit_state(make_step, state, calls, refgrad_device) == (2, 2 * (1 + 12 + 4) + 3 + 3)
  assert check_jit_state(state_only_step, [np.zeros(3, np.float32)], small, refgrad_device) == (2, 2 * (1 + 3) + 3)
  monkeypatch.setattr(refgrad.jit, "realize_lazy_state", lambda live, skip: None)
  with pytest.raises(ReplayMismatch, match="call 2 \\(replayed by the jit\\)"):
    check_jit_state(make_step, state, calls, refgrad_device)
  with pytest.raises(ReplayMismatch, match="state tensor 0 .* after 4 calls"):
    check_jit_state(state_only_step, [np.zeros(3, np.float32)], small, refgrad_device)


def test_the_state_oracle_needs_three_calls():
  from refgrad.testing.oracle.jit_replay import check_jit_state
  with pytest.raises(ValueError, match="at least 3 sets of inputs"):
    check_jit_state(state_only_step, [np.zeros(3, np.float32)], [[np.ones(3, np.float32)]] * 2, "PYTHON")


def test_refgrad_check_runs_a_stateful_step_through_the_jit_and_catches_stale_state(refgrad_device, monkeypatch):
  from refgrad.testing.conformance.results import FAIL, PASS
  from refgrad.testing.conformance.run import run_conformance
  run = run_conformance(refgrad_device, only="jit state")
  assert len(run.results) == 1 and run.results[0].status == PASS
  monkeypatch.setattr(refgrad.jit, "realize_lazy_state", lambda live, skip: None)
  broken = run_conformance(refgrad_device, only="jit state")
  assert [r.status for r in broken.results] == [FAIL] and "replayed by the jit" in broken.results[0].detail


def test_a_learning_rate_schedule_works_under_a_jit_without_a_recapture(refgrad_device):
  """An LR scheduler assigns into opt.lr between steps: the replays read the new rate, as the plain steps do."""
  from refgrad.nn.optim import SGD
  rng = np.random.default_rng(5)
  x_np, w_np = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((3, 1)).astype(np.float32)
  rates = [0.1, 0.05, 0.2, 0.0, 0.1, 0.01]
  weights = []
  for jit in (False, True):
    w = Tensor(w_np.copy(), device=refgrad_device, requires_grad=True)
    opt = SGD([w], lr=rates[0])

    def step(x, w=w, opt=opt):
      opt.zero_grad()
      loss = (x @ w).square().mean()
      loss.backward()
      opt.step()
      return loss
    run = TinyJit(step) if jit else step
    seen = []
    with Tensor.train():
      for rate in rates:
        opt.lr.assign(Tensor([rate], device=refgrad_device, dtype=opt.lr.dtype)).realize()
        run(Tensor(x_np, device=refgrad_device))
        seen.append(w.numpy().copy())
    weights.append(seen)
  for plain, jitted in zip(*weights):
    np.testing.assert_array_equal(jitted, plain)
  assert np.array_equal(weights[1][3], weights[1][2])  # the step at rate 0 left the weights alone


def test_a_write_through_a_view_argument_lands_in_the_tensor_it_views(refgrad_device):
  """f(cache[:, 1:3], x) writing its first argument: every call, replays too, writes that call's cache, as the plain
  function does; a view of another cache the same way lands there; another view is refused, not replayed."""
  cache = Tensor.zeros(2, 6, device=refgrad_device).contiguous().realize()
  f = TinyJit(lambda view, x: view.assign(view + x).realize())
  for i in range(4):
    f(cache[:, 1:3], on(refgrad_device, [[1.0, 2.0], [3.0, 4.0]]))
    expected = np.zeros((2, 6), np.float32)
    expected[:, 1:3] = (i + 1) * np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(cache.numpy(), expected)
  other = Tensor.zeros(2, 6, device=refgrad_device).contiguous().realize()
  f(other[:, 1:3], on(refgrad_device, [[5.0, 5.0], [5.0, 5.0]]))
  assert other.numpy()[:, 1:3].tolist() == [[5.0, 5.0], [5.0, 5.0]] and cache.numpy()[0, 1] == 4.0
  with pytest.raises(JitError, match="viewed by"):
    f(cache[:, 2:4], on(refgrad_device, [[1.0, 1.0], [1.0, 1.0]]))


def test_a_kv_cache_at_a_symbolic_position_fills_under_a_jit():
  from refgrad import Variable
  start = Variable("start", 0, 6)
  cache = Tensor.zeros(2, 8).contiguous().realize()
  write = TinyJit(lambda view, kv: view.assign(kv * 1).realize())
  for i in range(6):
    write(cache[:, start.bind(i):start.bind(i) + 1], Tensor.full((2, 1), float(i + 1)))
  assert cache.numpy()[0].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0]
  assert write.captured is not None and write.captured.replays == 4


# ---- values recorded on graph nodes (schedule._REALIZED) must not leak into or out of a capture
def test_a_value_computed_from_a_global_before_the_capture_is_computed_again_by_each_replay(refgrad_device,
                                                                                          collector_off):
  """The first call computes `weights * 2`; its node outlives the call (a reference cycle through its cached facts
  holds it until the collector runs), so the capture found it computed and skipped its kernel, and replays read it
  after `weights` was assigned."""
  weights = on(refgrad_device, [1.0, 2.0, 3.0, 4.0])
  f = TinyJit(lambda x: ((weights * 2).contiguous() + x).realize())
  for call in range(6):
    if call >= 3:
      weights.assign(on(refgrad_device, [10.0 * call] * 4)).realize()
    x = on(refgrad_device, [0.5 * call] * 4)
    np.testing.assert_array_equal(f(x).numpy(), weights.numpy() * 2 + x.numpy())
  assert len(f.jit_cache) == 2


def doubled_then_incremented(kept: list):
  """A jitted body that keeps its intermediate `x * 2` (a tensor holding that node, so the node outlives the call)."""
  def body(x):
    kept.append(doubled := (x * 2).contiguous())
    return (doubled + 1).realize()
  return body


def test_an_intermediate_of_the_captured_call_recomputed_after_replays_has_its_own_value(refgrad_device,
                                                                                        collector_off):
  """Replays write the captured call's intermediates again: a value recorded on one of their nodes (here `x * 2` for
  the captured call's x) would then be another call's. The tensor the captured call kept holds that buffer, written
  again by each replay, as in tinygrad."""
  kept = []
  f = TinyJit(doubled_then_incremented(kept))
  inputs = [on(refgrad_device, [float(i)] * 3) for i in range(5)]
  for x in inputs:
    f(x)
  for i, x in enumerate(inputs):
    np.testing.assert_array_equal(((x * 2).contiguous() * 1).numpy(), np.full(3, 2.0 * i, np.float32))
  np.testing.assert_array_equal(kept[1].numpy(), np.full(3, 2.0 * 4, np.float32))  # the last replay's


def test_the_oracle_catches_an_intermediate_left_recorded_on_a_node_the_replays_write(monkeypatch, collector_off):
  """The bug above, planted back: the oracle runs the function again on each jitted call's tensors after the
  replays, which then reads a value another call's replay wrote."""
  rng = np.random.default_rng(2)
  calls = [[rng.standard_normal(3).astype(np.float32)] for _ in range(4)]
  fn = doubled_then_incremented([])
  assert check_jit_replay(fn, calls, device="PYTHON")[0] == 2
  monkeypatch.setattr(refgrad.jit, "forget_rewritten", lambda launches: None)
  with pytest.raises(ReplayMismatch, match="after the replays, on call 1's tensors"):
    check_jit_replay(fn, calls, device="PYTHON")
