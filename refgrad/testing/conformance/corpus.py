"""The check's corpus of Tensor programs (elementwise, reductions, matmul, conv, indexing, hashing, sharded and
symbolic ones), each checked kernel by kernel as a whole, also under random legal opt lists, replayed by the jit,
at the sizes where the optimizer's heuristic takes each branch, and with every kernel under its largest opts of one
kind."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from refgrad.codegen.contract import Opt, OptList
from refgrad.codegen.opt import apply_opts, heuristic_amounts, legal_opts
from refgrad.codegen.pipeline import lowered_kernel, random_kernel_opts
from refgrad.dtype import DType, dtypes, from_numpy
from refgrad.registry import Device
from refgrad.symbolic_shapes import Variable
from refgrad.testing.conformance.results import PASS, CaseResult, UnitOutcome
from refgrad.testing.oracle.jit_replay import check_jit_replay, check_jit_state
from refgrad.testing.oracle.prepare import PlannedCheck
from refgrad.testing.oracle.reference import ReferenceReport, check_against_reference
from refgrad.uop import UOp


def _corpus() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
  rng = np.random.default_rng(1234)
  x = rng.standard_normal((8, 12)).astype(np.float32)
  w = rng.standard_normal((12, 5)).astype(np.float32)
  img = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
  kern = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  ints = rng.integers(-1000, 1000, (6, 10)).astype(np.int32)
  n = Variable("rows", 1, 8).bind(5)  # made here, not at import: until a Variable exists, schedules skip looking
  return {
    "elementwise chain": (lambda t: ((t * 1.5 - 2) * t + 0.25).maximum(t.abs() * 0.5), [x]),
    "transcendentals": (lambda t: t.exp2() + t.abs().log2() + t.sin() + t.abs().sqrt(), [x]),
    "sum and max over axes": (lambda t: t.sum(0) + t.max(0) - t.min(0), [x]),
    "full reductions": (lambda t: t.sum() * t.mean() + t.max(), [x]),
    "matmul": (lambda a, b: a @ b, [x, w]),
    "conv via windows": (lambda i, k: _conv2d(i, k), [img, kern]),
    "indexing and padding": (lambda t: t[1:7:2, ::-3].pad(((1, 2), (3, 0))) + t[::-1][:6, 4:8].flip(1).sum(), [x]),
    "integer arithmetic": (lambda t: (t // 7) * 3 + t % 5 - (t >> 2) ^ (t << 1), [ints]),
    # sums kept in 8 and 16 bits wrap, over rows long enough for a vectorized loop and its remainder (GCC 12's loop
    # vectorizer got them wrong: bugs/gcc-narrow-int-sum-vectorizer)
    "narrow integer sums": (lambda a, b: (a + b).sum(acc_dtype=dtypes.int8) * 2 + (b.cast(dtypes.int16) * 700)
                            .sum(acc_dtype=dtypes.int16).cast(dtypes.int8), [_narrow(rng), _narrow(rng)]),
    "updates in place": (_update_in_place, [x, x[::-1].copy()]),
    "argmax and comparisons": (lambda t: t.argmax(1) + (t > 0).sum(1), [x]),
    "random-looking hash": (lambda t: ((t.cast(dtypes.uint32) * 2654435761) ^ (t.cast(dtypes.uint32) >> 13)), [ints]),
    # over two instances of the device: each part's kernels, the copies and all-reduces between them
    "sharded sums and maxima": (lambda t: _sharded(t, 0).sum(0) * _sharded(t, 1).max(1).sum(), [x]),
    "sharded matmul, gathered": (lambda a, b: (_sharded(a, 0) @ _sharded(b, None)).to("PYTHON"), [x, w]),
    "sharded integers, resharded": (lambda t: (_sharded(t, 1) * 3 + _sharded(t, 0)).sum(1), [ints]),
    # sizes known only at launch: kernels compiled for a Variable, run with a bound value below its largest
    "symbolic rows": (lambda t: _rows(t, n).sum(0) * _rows(t, n).max(0) + _rows(t, n).mean(), [x]),
    "symbolic reshape and pad": (lambda t: _rows(t, n).T.reshape(12 * n).exp().reshape(12, n)
                                 .pad((None, (1, 8 - n))).sum(1), [x]),
  }


def _narrow(rng: np.random.Generator) -> np.ndarray:
  """67 int8 values, the extremes among them."""
  return np.concatenate([[-128, 127, -127, 126, -1, 0, 1], rng.integers(-128, 128, 60)]).astype(np.int8)


def _update_in_place(a: Any, b: Any) -> Any:
  """Writes into a slice of one argument and all of the other, then reads both: a jit replay must land each write in
  the tensors of its own call."""
  a[1:5] = a[1:5] * b[1:5] + 1
  b += a
  return (a * b).sum(0)


def _heuristic_corpus() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
  """Programs at the sizes where the kernel optimizer's heuristic (codegen/opt.py, default_opts) takes each of its
  branches on a CPU device, so the opts it chooses (a 16-wide tile on an 8-lane device, threads) are checked as the
  device runs them; the corpus above is too small to leave the unoptimized branch."""
  rng = np.random.default_rng(4321)
  square = rng.standard_normal((256, 256)).astype(np.float32)
  ints = rng.integers(-2 ** 20, 2 ** 20, (256, 256)).astype(np.int32)
  a, b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  thin, wide = rng.standard_normal((3, 512)).astype(np.float32), rng.standard_normal((512, 64)).astype(np.float32)
  image = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
  return {
    "heuristic: column sums (a tile of twice the lanes)": (lambda t: t.sum(0), [square]),
    "heuristic: integer column sums and maxima": (lambda t: t.sum(0) + t.max(0), [ints]),
    "heuristic: float64 column sums (a tile of float64 lanes)": (lambda t: t.sum(0), [square.astype(np.float64)]),
    "heuristic: row sums (a split reduction, no tile)": (lambda t: t.sum(1), [square]),
    "heuristic: matmul (two tiles and threads)": (lambda x, w: x @ w, [a, b]),
    "heuristic: a 3-row matmul (a small axis tiled whole)": (lambda x, w: x @ w, [thin, wide]),
    "heuristic: a pooling gradient (an elementwise tile)": (_pooling_gradient, [image]),
  }


def _pooling_gradient(image: Any) -> Any:
  image.requires_grad_()
  return image.max_pool2d(2).sum().gradient(image)[0]


# Programs whose every kernel runs with the largest legal opts of one kind, one per axis: integer reductions unrolled
# and padded (random draws rarely unroll an integer reduce; an unroll that drops an integer lane went unseen).
FORCED_OPTS = ("UNROLL", "PADLOOP")


def _integer_reductions() -> tuple[Callable[..., Any], list[np.ndarray]]:
  rng = np.random.default_rng(77)
  return (lambda a, b: (a.sum(1) * 3 + a.max(1), b.sum(1) - b.max(1)),
          [rng.integers(-1000, 1000, (6, 24)).astype(np.int32), rng.integers(-9, 9, (5, 13)).astype(np.int64)])


def _rows(t: Any, n: Any) -> Any:
  """The first n rows of t (n: a bound Variable)."""
  return t.shrink(((0, n),) + (None,) * (t.ndim - 1))


def _sharded(t: Any, axis: int | None) -> Any:
  """t split along axis (None: copied) over two reference instances, which the check maps to the device's."""
  return t.shard(("PYTHON", "PYTHON:1"), axis=axis)


def _conv2d(image: Any, weight: Any) -> Any:
  """A 3x3 valid convolution from movement ops, sums and a multiply (independent of Tensor.conv2d)."""
  n, c, h, w = image.shape
  o, _, kh, kw = weight.shape
  windows = [image[:, :, i:i + h - kh + 1, j:j + w - kw + 1] for i in range(kh) for j in range(kw)]
  total = None
  for k, win in enumerate(windows):
    term = (win.unsqueeze(1) * weight[:, :, k // kw, k % kw].reshape(1, o, c, 1, 1)).sum(2)
    total = term if total is None else total + term
  return total


def _stateful_step(weights: Any, velocity: Any) -> Callable[..., Any]:
  """A training-like step over state it closes over: it reads the weights, then updates the velocity (assign), a
  slice of the weights (setitem) and all of them (in place), and realizes none of it; only the loss is read."""
  def step(x: Any, target: Any) -> Any:
    loss = ((x * weights).sum(1) - target).square().mean()
    velocity.assign(velocity * 0.75 + x.mean(0) * loss)
    weights[1:3] = weights[1:3] - velocity[1:3] * 0.5
    weights.__iadd__(velocity * 0.25)  # `weights += ...`, which a closure cannot write without nonlocal
    return loss
  return step


def _stateful_case() -> tuple[Callable[..., Any], list[np.ndarray], list[np.ndarray]]:
  """The step, its inputs (a batch and targets) and its state's initial values (weights, a zero velocity)."""
  rng = np.random.default_rng(61)
  inputs = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)]
  return _stateful_step, inputs, [np.float32([0.5, -1.25, 2.0]), np.zeros(3, np.float32)]


# Programs of the corpus that also run jitted: run, captured, then replayed this many times, each call's inputs new.
REPLAYED = ("matmul", "conv via windows", "full reductions", "integer arithmetic", "updates in place")


REPLAYS = 3


def _other_inputs(inputs: list[np.ndarray], count: int) -> list[list[np.ndarray]]:
  """`count` more sets of inputs like these (shapes, dtypes, magnitudes), each different in order and in value (so a
  replay of stale inputs cannot pass by a max or a sum that does not see the order)."""
  rng = np.random.default_rng(99)
  def other(x: np.ndarray, k: int) -> np.ndarray:
    shuffled = rng.permutation(x.reshape(-1)).reshape(x.shape)
    return shuffled * x.dtype.type(1 + 0.25 * k) if x.dtype.kind == "f" else shuffled + x.dtype.type(k)
  return [[other(x, k) for x in inputs] for k in range(1, count + 1)]


# Each corpus program also runs under this many random legal opt lists (refgrad/codegen/opt.py), one row each: the
# device's own heuristic runs in the plain rows, and these prove the optimizer's other choices on the device too.
OPT_DRAWS = 2


@dataclass
class ProgramCase:
  """A corpus program, checked kernel by kernel as a whole (its own row); with `opts_seed`, under random legal opt
  lists drawn from that seed."""
  label: str
  fn: Callable[..., Any]
  inputs: list[np.ndarray]
  dtypes: tuple[DType, ...] = ()
  opts_seed: int | None = None
  replay: bool = False  # run jitted (refgrad/jit.py) on new inputs: replays must give the plain call's bits
  state: list[np.ndarray] | None = None  # with replay: fn makes a step over state tensors of these values
  forced: str | None = None  # every kernel under its largest legal opts of this kind (FORCED_OPTS), one per axis

  @property
  def rows(self) -> set[str]:
    return {self.label}

  def opts_on(self, device: str) -> Callable[[UOp], OptList] | None:
    """What chooses each kernel's opts on `device` (None: its own heuristic); a fresh draw each time, so a run again
    draws the same opts."""
    caps = Device[device].caps
    if self.forced is not None:
      return lambda ast: largest_opts(ast, self.forced, caps)
    if self.opts_seed is not None:
      rng = random.Random(self.opts_seed)
      return lambda ast: random_kernel_opts(ast, caps, rng)
    return None

  def planned(self, device: str) -> PlannedCheck | None:
    """What run checks against the reference, for compiling its kernels ahead (None: a jit replay)."""
    return None if self.replay else (self.fn, tuple(self.inputs), self.opts_on(device))

  def run(self, device: str) -> UnitOutcome:
    if self.replay:
      calls = [self.inputs, *_other_inputs(self.inputs, 1 + REPLAYS)]
      _, lanes = (check_jit_replay(self.fn, calls, device) if self.state is None else
                  check_jit_state(self.fn, self.state, calls, device))
      return UnitOutcome([CaseResult(self.label, "program", PASS, 0, lanes, 0)], [])
    report: ReferenceReport = check_against_reference(self.fn, *self.inputs, device=device,
                                                      opts=self.opts_on(device))
    return UnitOutcome([CaseResult(self.label, "program", PASS, report.worst_ulp, report.checked,
                                   report.undefined + report.unbounded)],
                       [k.program for k in report.kernels if k.program is not None])


def largest_opts(ast: UOp, kind: str, caps: Any) -> OptList:
  """For each axis of the kernel it applies to, the legal opt of this kind with the largest amount (every reduce loop
  unrolled, for one), each chosen after the ones before it have applied."""
  sink, shape = lowered_kernel(ast)
  chosen: list[Opt] = []
  amounts = heuristic_amounts(caps.upcast_lanes, caps.threads)
  while found := [o for o in legal_opts(sink, amounts) if o.kind == kind and o.axis not in {c.axis for c in chosen}]:
    chosen.append(max(found, key=lambda o: o.amount))
    sink, shape = apply_opts(sink, shape, chosen[-1:])
  return tuple(chosen)


def corpus_cases() -> list[ProgramCase]:
  """The corpus as the check runs it: each program plainly, under OPT_DRAWS random opt lists and (REPLAYED) through
  the jit; then the heuristic's programs and the forced opts."""
  corpus = _corpus()
  cases = [ProgramCase(name, fn, inputs) for name, (fn, inputs) in corpus.items()]
  cases += [ProgramCase(f"{name}, opts draw {draw}", fn, inputs, opts_seed=draw)
            for name, (fn, inputs) in corpus.items() for draw in range(1, OPT_DRAWS + 1)]
  cases += [ProgramCase(f"{name}, jit replay", fn, inputs, replay=True)
            for name, (fn, inputs) in corpus.items() if name in REPLAYED]
  make_step, inputs, state = _stateful_case()
  cases.append(ProgramCase("a step updating its state lazily, jit state", make_step, inputs, replay=True, state=state))
  cases += [ProgramCase(name, fn, inputs, tuple(dict.fromkeys(from_numpy(x.dtype) for x in inputs)))
            for name, (fn, inputs) in _heuristic_corpus().items()]
  return cases + [ProgramCase(f"integer reductions, opts: {kind} of every kernel", *_integer_reductions(), forced=kind)
                  for kind in FORCED_OPTS]
