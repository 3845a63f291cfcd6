"""Capture and replay (refgrad/jit.py): replays give the function's own results on new inputs, on every device,
without scheduling or compiling; a jitted training step follows the plain one's loss curve bit for bit; calls a
capture cannot replay are refused with the reason; a captured jit pickles without its function; the oracle
(testing/jit_check.py) catches a replay that reads a stale input."""
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import training_step

import refgrad.tensor
from refgrad import Device, Tensor, TinyJit, dtypes
from refgrad.buffer import Buffer, PickledValueError
from refgrad.jit import CapturedCall, JitError, JitWarning, tensors_in
from refgrad.nn.optim import SGD, Adam
from refgrad.nn.state import get_parameters
from refgrad.testing.oracle.jit_replay import ReplayMismatch, check_jit_replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from examples import mlp  # noqa: E402


def attention_block(q, k, v):
  return q.scaled_dot_product_attention(k, v).sum(-1), (q @ k.transpose(-1, -2)).max()


def input_sets(shapes, n=4, seed=0, dtype=np.float32):
  rng = np.random.default_rng(seed)
  return [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(n)]


@pytest.mark.parametrize("fn, shapes", [
  (lambda a, b: (a @ b).relu() + 1, [(5, 7), (7, 3)]),
  (attention_block, [(2, 4, 8), (2, 4, 8), (2, 4, 8)]),
  (lambda a: (a.exp().sum(0), a.max(), a[1:, ::2] * -0.0), [(6, 4)]),
  (lambda a: a.sum() + 1, [()]),
  (lambda a: (a * 2, a.sum()), [(0, 3)]),
])
def test_replays_give_the_functions_own_results_on_new_inputs(refgrad_device, fn, shapes):
  """Each call's inputs differ; replays are compared bit for bit with the plain function on the same device, and
  the plain function with the reference. 0-d and empty inputs too."""
  calls = input_sets(shapes)
  outputs = [t.numel() for t in tensors_in(fn(*(Tensor(x) for x in calls[0])))]
  inputs = sum(x.size for x in calls[0])
  assert check_jit_replay(fn, calls, device=refgrad_device) == (2, 2 * (sum(outputs) + inputs))


def test_replays_neither_schedule_nor_compile(monkeypatch):
  """The third call runs with scheduling made to fail: it only launches (compiling comes after scheduling)."""
  jitted = TinyJit(lambda a, b: (a * b).sum(1) + a.max())
  calls = input_sets([(8, 16), (8, 16)], n=3)
  for inputs in calls[:2]:
    jitted(*(Tensor(x) for x in inputs))
  def refuse(*args, **kwargs):
    raise AssertionError("a replay scheduled kernels")
  inputs = [Tensor(x) for x in calls[2]]
  with monkeypatch.context() as patch:
    patch.setattr(refgrad.tensor, "create_schedule", refuse)
    result = jitted(*inputs)
  got = result.numpy()
  a, b = calls[2]
  np.testing.assert_allclose(got, (a * b).sum(1) + a.max(), rtol=1e-5)


def train(model, optimizer, steps: int, jit: bool) -> list[float]:
  x_np, y_np = mlp.spirals()
  step = training_step(model, optimizer)
  run = TinyJit(step) if jit else step
  with Tensor.train():
    return [run(Tensor(x_np), Tensor(y_np)).item() for _ in range(steps)]


def test_a_jitted_adam_step_follows_the_plain_loss_curve_bit_for_bit(refgrad_device):
  """Parameters and optimizer state get new buffers every step (Tensor.replace): each replay reads them where the
  last step left them and writes new buffers. (Adam at lr 0.01 as in test_examples.py, so a cold suite compiles
  these kernels once.)"""
  assert_jit_trains_like_plain(refgrad_device, lambda p: Adam(p, lr=0.01))


def test_a_jitted_sgd_momentum_step_follows_the_plain_loss_curve_bit_for_bit():
  """Another optimizer's state (one momentum buffer per parameter, no step counters), on the reference."""
  assert_jit_trains_like_plain("PYTHON", lambda p: SGD(p, lr=0.1, momentum=0.9))


def assert_jit_trains_like_plain(device, make_optimizer):
  curves, weights = [], []
  for jit in (False, True):
    Device.DEFAULT, previous = device, Device.DEFAULT
    try:
      Tensor.manual_seed(1)
      model = mlp.MLP()
      curves.append(train(model, make_optimizer(get_parameters(model)), steps=7, jit=jit))
      weights.append([p.numpy() for p in get_parameters(model)])
    finally:
      Device.DEFAULT = previous
  assert curves[0] == curves[1] and curves[0][-1] < curves[0][0]
  assert all(np.array_equal(a, b) for a, b in zip(*weights))


@pytest.mark.parametrize("second, message", [
  ((np.ones((4, 3), np.float32),),
   r"\(\[4, 3\] float32 on PYTHON\) differ from the captured call's \(\[2, 3\] float32"),
  ((np.ones((2, 3), np.float64),), "float64"),
  ((np.ones((2, 3), np.float32), np.ones(2, np.float32)), r"\(\[2, 3\] float32 on PYTHON, \[2\] float32"),
])
def test_a_call_the_capture_cannot_replay_is_refused(second, message):
  jitted = TinyJit(lambda *ts: sum(t.sum() for t in ts))
  for _ in range(2):
    jitted(Tensor(np.ones((2, 3), np.float32)))
  with pytest.raises(JitError, match=message):
    jitted(*(Tensor(x) for x in second))
  jitted.reset()
  assert jitted(*(Tensor(x) for x in second)).item() == sum(x.sum() for x in second)  # captured afresh


def test_one_tensor_passed_twice_is_part_of_what_a_replay_must_match():
  jitted = TinyJit(lambda a, b: a * 10 + b)
  x = Tensor([1.0, 2.0])
  for _ in range(2):
    jitted(x, x)
  with pytest.raises(JitError, match="the same tensor as input 0"):
    jitted(Tensor([1.0, 2.0]), Tensor([5.0, 6.0]))
  y = Tensor([3.0, 4.0])
  assert jitted(y, y).tolist() == [33.0, 44.0]


def test_a_call_on_another_device_is_refused():
  devices = [d for d in Device.available() if d != "PYTHON"]
  if not devices:
    pytest.skip("only PYTHON is installed: no second device to call with")
  jitted = TinyJit(lambda t: t + 1)
  for _ in range(2):
    jitted(Tensor([1.0, 2.0]))
  with pytest.raises(JitError, match=f"on {devices[0]}"):
    jitted(Tensor([1.0, 2.0], device=devices[0]))


def test_results_of_a_replay_are_the_captured_tensors_written_again():
  jitted = TinyJit(lambda t: t * 2)
  first = [jitted(Tensor([float(i)])) for i in range(2)]
  third = jitted(Tensor([5.0]))
  assert third is first[1] and third.tolist() == [10.0] and first[0].tolist() == [0.0]
  assert jitted(Tensor([7.0])) is third and third.dtype == dtypes.float32 and third.tolist() == [14.0]


class StaleInputCall(CapturedCall):
  """A planted replay bug: the captured call's input buffers are read again instead of the new inputs."""

  def buffer_map(self, inputs):
    return super().buffer_map(self.inputs)


def stale_jit(fn):
  jitted = TinyJit(fn)
  original = jitted._capture

  def capture(*args):
    result = original(*args)
    jitted.captured.__class__ = StaleInputCall
    return result
  jitted._capture = capture
  return jitted


def test_the_oracle_catches_a_replay_that_reads_a_stale_input(refgrad_device):
  calls = input_sets([(3, 5)], n=3)
  with pytest.raises(ReplayMismatch, match="call 2 \\(replayed by the jit\\)"):
    check_jit_replay(lambda a: a.exp() + 1, calls, device=refgrad_device, jit=stale_jit)
  assert check_jit_replay(lambda a: a.exp() + 1, calls, device=refgrad_device) == (1, 30)


def test_the_replay_oracle_needs_three_calls():
  with pytest.raises(ValueError, match="at least 3 sets of inputs"):
    check_jit_replay(lambda a: a + 1, input_sets([(2,)], n=2), device="PYTHON")


def test_the_docstring_example_runs():
  import doctest

  import refgrad.jit
  test = doctest.DocTestParser().get_doctest(refgrad.jit.TinyJit.__doc__, {}, "TinyJit", refgrad.jit.__file__, 0)
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
  runner.run(test)
  assert runner.summarize(verbose=False).failed == 0 and test.examples


def test_refgrad_check_replays_its_programs_and_catches_a_stale_replay(refgrad_device, monkeypatch):
  """The check's "jit replay" rows: on the device, captured programs replayed on new inputs pass; with the planted
  stale-input jit they fail, naming the replayed call."""
  from functools import partial

  from refgrad.testing.conformance import corpus
  from refgrad.testing.conformance.results import FAIL, PASS
  from refgrad.testing.conformance.run import run_conformance
  run = run_conformance(refgrad_device, only="jit replay")
  assert len(run.results) == len(corpus.REPLAYED) and all(r.status == PASS for r in run.results)
  monkeypatch.setattr(corpus, "check_jit_replay", partial(check_jit_replay, jit=stale_jit))
  broken = run_conformance(refgrad_device, only="jit replay")
  assert broken.results and all(r.status == FAIL and "replayed by the jit" in r.detail
                                for r in broken.results)


def test_a_pickled_jit_replays_without_its_function_from_the_state_it_was_pickled_with(refgrad_device):
  """As in tinygrad, a captured jit pickles with its launches and buffers, not its function (a local one here): the
  unpickled jit updates its own copy of the weights step after step (checked against numpy), while the original's
  weights stay where they were; an argument it updates in place is updated, keywords in any order."""
  weights = Tensor([1.0, -2.0, 0.5], device=refgrad_device).contiguous().realize()

  def step(x, scale):
    loss = (weights * x).sum()
    weights.assign(weights - scale * x * weights)
    scale += 1
    return loss

  jitted = TinyJit(step)
  rng = np.random.default_rng(3)
  want = np.array([1.0, -2.0, 0.5], np.float32)
  for _ in range(3):
    x, scale = rng.standard_normal(3).astype(np.float32), np.float32(0.25)
    jitted(Tensor(x, device=refgrad_device), Tensor([scale], device=refgrad_device)).numpy()
    want -= scale * x * want
  unpickled = pickle.loads(pickle.dumps(jitted))
  kept = want.copy()
  for i in range(3):
    x, scale = rng.standard_normal(3).astype(np.float32), Tensor([[-0.0, 0.5, -0.5][i]], device=refgrad_device)
    loss = unpickled(scale=scale, x=Tensor(x, device=refgrad_device))
    np.testing.assert_allclose(loss.item(), (want * x).sum(), rtol=1e-6)
    assert scale.tolist() == [[1.0, 1.5, 0.5][i]]
    want -= np.float32([-0.0, 0.5, -0.5][i]) * x * want
  np.testing.assert_array_equal(weights.numpy(), kept)
  unpickled.reset()
  with pytest.raises(JitError, match="step was unpickled with its captured kernels only"):
    unpickled(Tensor(x, device=refgrad_device), Tensor([1.0], device=refgrad_device))


@pytest.mark.parametrize("swap", ["a shorter input", "an input of another dtype", "one buffer fewer"])
def test_an_unpickled_jit_whose_launch_buffers_do_not_fit_its_kernel_is_refused(refgrad_device, swap):
  """A crafted or corrupt pickle: a kernel compiled for 1024 floats per input must not be handed a shorter buffer,
  which it would read past the end of."""
  jitted = TinyJit(lambda a, b: (a * b + 1).realize())
  for _ in range(3):
    jitted(Tensor.ones(1024, device=refgrad_device).contiguous(), Tensor.ones(1024, device=refgrad_device).contiguous())
  (launch,) = [launch for launch in jitted.captured.launches if launch.runner is not None]
  out, first, *rest = launch.buffers
  other = {"a shorter input": Buffer(refgrad_device, 4, dtypes.float32),
           "an input of another dtype": Buffer(refgrad_device, 1024, dtypes.int32), "one buffer fewer": None}[swap]
  launch.buffers = (out, *rest) if other is None else (out, other.copyin(np.zeros(other.size, other.dtype.np)), *rest)
  with pytest.raises(PickledValueError, match="unpickling a TinyJit: a launch's buffers .* are not its kernel's "
                                              r"\(1024 float32, 1024 float32, 1024 float32, on one device\)"):
    pickle.loads(pickle.dumps(jitted))


def add_one(t):
  return t + 1


def test_a_jit_pickled_before_its_capture_keeps_its_function():
  unpickled = pickle.loads(pickle.dumps(TinyJit(add_one, prune=True)))
  assert unpickled.prune and [unpickled(Tensor([float(i)])).item() for i in range(4)] == [1.0, 2.0, 3.0, 4.0]



def scaler_class() -> type:
  """A model whose call is a jitted method (the decorator runs once, on the class): a new class, so a new jit."""
  class Scaler:
    def __init__(self, value: float, device: str):
      self.w = Tensor(np.full(2, value, np.float32), device=device).contiguous().realize()

    @TinyJit
    def __call__(self, x: Tensor) -> Tensor:
      return (x * self.w).realize()
  return Scaler


def test_a_jitted_method_follows_its_instance_or_refuses_another(refgrad_device):
  """A @TinyJit method is one jit for the class (as tinygrad's): replayed for a second instance, it read the first
  one's weights ([1, 1] for an instance of weights 2, silently). Its own instance replays right (numpy); another
  instance raises JitError."""
  scaler = scaler_class()
  a, b = scaler(1.0, refgrad_device), scaler(2.0, refgrad_device)
  x = np.array([1.0, 3.0], np.float32)
  for _ in range(3):
    np.testing.assert_array_equal(a(Tensor(x, device=refgrad_device)).numpy(), x * 1.0)
  with pytest.raises(JitError, match="another Scaler instance"):
    b(Tensor(x, device=refgrad_device))
  a.w.assign(Tensor(np.full(2, 5.0, np.float32), device=refgrad_device))
  np.testing.assert_array_equal(a(Tensor(x, device=refgrad_device)).numpy(), x * 5.0)


def test_a_changed_python_argument_warns_that_replays_use_the_captured_value(refgrad_device):
  """tinygrad replays a Python number argument's captured value silently; here the replay computes with it too (the
  kernels hold it as a constant) and says so with a JitWarning, once. Unchanged values (NaN too) do not warn."""
  @TinyJit
  def scaled(x, scale, tag="a"):
    return (x * scale).realize()

  x = np.array([1.0, -2.0, 0.5], np.float32)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for _ in range(4):
      np.testing.assert_array_equal(scaled(Tensor(x, device=refgrad_device), 2.0, tag="a").numpy(), x * 2)
  with pytest.warns(JitWarning, match=r"2\.0 -> 3\.0.*captured values"):
    got = scaled(Tensor(x, device=refgrad_device), 3.0, tag="a").numpy()
  np.testing.assert_array_equal(got, x * 2)  # the captured scale, as tinygrad's replay
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # once per capture
    scaled(Tensor(x, device=refgrad_device), 4.0, tag="b")
  scaled.reset()
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for _ in range(3):
      np.testing.assert_array_equal(scaled(Tensor(x, device=refgrad_device), float("nan")).numpy(), x * np.nan)
