"""assign, setitem and in-place operators on views, against torch's in-place semantics (numpy's where torch has no
view: negative steps, flip).

A view (reshape, permute, slices of any step, ints, None, unsqueeze, flip, detach) shares its base's data: writing it
writes the base, every other view of the base sees the write, and tensors computed before the write keep the old
values. The hypothesis test draws a base (realized or lazy), a chain of views, which of them are realized before the
write, a write into one of them (assign, setitem with a scalar or a broadcast value, +=) and what is realized after
it, and compares the base, every view and a tensor computed before the write with numpy and torch doing the same."""
import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from helpers import NP_DTYPE, TORCH_DTYPE, check
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refgrad import Tensor, TinyJit, Variable, dtypes
from refgrad.schedule import realized_buffer

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])
DTYPES = [dtypes.float32, dtypes.int32, dtypes.float16]


# ---- the three worlds: refgrad, numpy and (where it has the view) torch
@dataclass
class Op:
  """One view step or write as refgrad, numpy and torch spell it; torch is None where torch has no such view."""
  ours: Callable
  numpy: Callable
  torch: Callable | None


def np_basic(a: np.ndarray, index: tuple) -> np.ndarray:
  """numpy's view for a basic index (a trailing ... keeps an all-int index a 0-d view, not a scalar copy)."""
  return a[index + (Ellipsis,)] if Ellipsis not in index else a[index]


def np_view_reshape(a: np.ndarray, shape: tuple) -> np.ndarray:
  return np.reshape(a, shape, copy=False)  # ValueError where numpy would need a copy


@st.composite
def basic_index(draw, shape: tuple, negative_steps: bool) -> tuple:
  """ints, slices (steps up to 3, negative ones if allowed, bounds past the ends) and at most one None."""
  items: list[Any] = []
  for size in shape[:draw(st.integers(0, len(shape)))]:
    if size and draw(st.booleans()):
      items.append(draw(st.integers(-size, size - 1)))
    else:
      bound = st.none() | st.integers(-size - 1, size + 1)
      items.append(slice(draw(bound), draw(bound), draw(st.sampled_from([1, 2, 3, -1, -2][:5 if negative_steps
                                                                                           else 3]))))
  if draw(st.booleans()):
    items.insert(draw(st.integers(0, len(items))), None)
  return tuple(items)


def reshapes(shape: tuple) -> list[tuple]:
  """Shapes of the same size: flat, a dim split in two, two neighbours merged, a 1 added or removed."""
  out = [(int(np.prod(shape)),), shape + (1,), tuple(s for s in shape if s != 1)]
  for d, s in enumerate(shape):
    out += [shape[:d] + (k, s // k) + shape[d + 1:] for k in range(2, s) if s % k == 0]
    if d + 1 < len(shape):
      out.append(shape[:d] + (s * shape[d + 1],) + shape[d + 2:])
  return out


@st.composite
def view_step(draw, a: np.ndarray, ta: torch.Tensor | None) -> Op | None:
  """A view step that numpy (and torch, unless ta is None) can take as a view of a (and ta, the same view in torch);
  None if the drawn reshape would be a copy there."""
  kinds = ["index", "index", "reshape", "unsqueeze", "flip", "detach"] + ["permute"] * (a.ndim >= 2)
  kind = draw(st.sampled_from(kinds))
  if kind == "index":
    index = draw(basic_index(a.shape, negative_steps=True))
    torch_ok = all(not isinstance(i, slice) or (i.step or 1) > 0 for i in index)
    return Op(lambda t: t[index], lambda x: np_basic(x, index), (lambda t: t[index]) if torch_ok else None)
  if kind == "reshape":
    shape = draw(st.sampled_from(reshapes(a.shape)))
    try:
      np_view_reshape(a, shape)
      if ta is not None:
        ta.view(shape)
    except (ValueError, RuntimeError):
      return None
    return Op(lambda t: t.reshape(shape), lambda x: np_view_reshape(x, shape), lambda t: t.view(shape))
  if kind == "unsqueeze":
    d = draw(st.integers(0, a.ndim))
    return Op(lambda t: t.unsqueeze(d), lambda x: np.expand_dims(x, d), lambda t: t.unsqueeze(d))
  if kind == "flip":
    dims = tuple(draw(st.sets(st.integers(0, a.ndim - 1), min_size=1))) if a.ndim else ()
    flips = tuple(slice(None, None, -1 if d in dims else 1) for d in range(a.ndim))
    return Op(lambda t: t.flip(dims), lambda x: np_basic(x, flips), None)  # torch's flip is a copy
  if kind == "detach":
    return Op(lambda t: t.detach(), lambda x: x[...], lambda t: t.detach())
  order = tuple(draw(st.permutations(range(a.ndim))))
  return Op(lambda t: t.permute(order), lambda x: x.transpose(order), lambda t: t.permute(order))


def written_values(shape: tuple, dtype: Any) -> np.ndarray:
  """-100, -101, ...: unlike any value of a base (1, 2, ...)."""
  return (-100 - np.arange(int(np.prod(shape)))).reshape(shape).astype(NP_DTYPE[dtype])


@st.composite
def value_for(draw, shape: tuple, dtype: Any) -> tuple[Any, Any]:
  """A value that broadcasts to shape, as refgrad takes it and as numpy/torch take it: a Python number (-0.0
  sometimes) or a tensor of a shape with some dims 1 and maybe fewer dims; its values are negative, unlike the
  base's."""
  if draw(st.booleans()):
    number = draw(st.sampled_from([-7, -0.0, -2.5])) if dtype.kind == "f" else -7
    return number, number
  dims = shape[draw(st.integers(0, len(shape))):]
  vshape = tuple(s if draw(st.booleans()) else 1 for s in dims)
  v = written_values(vshape, dtype)
  return Tensor(v), v


@st.composite
def write_op(draw, shape: tuple, dtype: Any, with_torch: bool) -> Op:
  kind = draw(st.sampled_from(["assign", "setitem", "iadd"]))
  if kind == "assign":
    v = written_values(shape, dtype)

    def np_assign(x: np.ndarray) -> None:
      x[...] = v
    return Op(lambda t: t.assign(Tensor(v)), np_assign, lambda t: t.copy_(torch.from_numpy(v)))
  if kind == "setitem":
    index = draw(basic_index(shape, negative_steps=not with_torch))
    ours, theirs = draw(value_for(np_basic(np.empty(shape), index).shape, dtype))
    torch_value = torch.from_numpy(theirs) if isinstance(theirs, np.ndarray) else theirs

    def set_ours(t: Tensor) -> None:
      t[index] = ours

    def set_numpy(x: np.ndarray) -> None:
      x[index] = theirs

    def set_torch(t: torch.Tensor) -> None:
      t[index] = torch_value
    return Op(set_ours, set_numpy, set_torch)
  ours, theirs = draw(value_for(shape, dtype))
  torch_value = torch.from_numpy(theirs) if isinstance(theirs, np.ndarray) else theirs

  def add_ours(t: Tensor) -> None:
    t += ours

  def add_numpy(x: np.ndarray) -> None:
    x += theirs

  def add_torch(t: torch.Tensor) -> None:
    t += torch_value
  return Op(add_ours, add_numpy, add_torch)


@dataclass
class Program:
  shape: tuple
  dtype: Any
  lazy_base: bool
  steps: list[Op]
  realized_before: list[bool]  # per tensor of the chain (base first)
  kept: int  # the tensor of which a copy is computed before the write
  target: int  # the tensor written
  write: Op
  realize_after: int | None  # the tensor realized after the write
  with_torch: bool


@st.composite
def programs(draw) -> Program:
  shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
  dtype = draw(st.sampled_from(DTYPES))
  chain: list[np.ndarray] = [np.zeros(shape, np.float32)]
  ta: torch.Tensor | None = torch.zeros(shape)
  steps = []
  for _ in range(draw(st.integers(1, 4))):
    step = draw(view_step(chain[-1], ta))
    if step is not None:
      steps.append(step)
      chain.append(step.numpy(chain[-1]))
      ta = step.torch(ta) if ta is not None and step.torch is not None else None
  n = len(chain)
  target = draw(st.integers(0, n - 1))
  write = draw(write_op(chain[target].shape, dtype, ta is not None))
  return Program(shape, dtype, draw(st.booleans()), steps, [draw(st.booleans()) for _ in range(n)],
                 draw(st.integers(0, n - 1)), target, write, draw(st.none() | st.integers(0, n - 1)), ta is not None)


def run_numpy(p: Program, data: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
  chain = [data.copy()]
  for step in p.steps:
    chain.append(step.numpy(chain[-1]))
  kept = chain[p.kept].copy()
  p.write.numpy(chain[p.target])
  return chain, kept


def run_torch(p: Program, data: np.ndarray) -> tuple[list[torch.Tensor], torch.Tensor]:
  chain = [torch.from_numpy(data.copy())]
  for step in p.steps:
    chain.append(step.torch(chain[-1]))
  kept = chain[p.kept] * 1
  p.write.torch(chain[p.target])
  return chain, kept


def run_ours(p: Program, data: np.ndarray) -> tuple[list[Tensor], Tensor]:
  chain = [Tensor(data).contiguous() if p.lazy_base else Tensor(data).realize()]
  for step in p.steps:
    chain.append(step.ours(chain[-1]))
  for t, realize in zip(chain, p.realized_before):
    if realize:
      t.realize()
  kept = chain[p.kept] * 1
  p.write.ours(chain[p.target])
  if p.realize_after is not None:
    chain[p.realize_after].realize()
  return chain, kept


@SETTINGS
@given(p=programs())
def test_writes_through_views_match_numpy_and_torch(p):
  data = np.arange(1, int(np.prod(p.shape)) + 1).reshape(p.shape).astype(NP_DTYPE[p.dtype])
  ours, ours_kept = run_ours(p, data)
  want, want_kept = run_numpy(p, data)
  for got, expected in zip(ours, want):
    check(got, expected, p.dtype)
  check(ours_kept, want_kept, p.dtype)
  if p.with_torch:
    theirs, theirs_kept = run_torch(p, data)
    for got, expected in zip(ours, theirs):
      check(got, expected, p.dtype)
    check(ours_kept, theirs_kept, p.dtype)


# ---- the reproducers and the points users hit
def test_assign_into_a_slice_writes_the_tensor():  # issue 25, item 3
  a = Tensor.full((4,), 1.0).contiguous().realize()
  a[:2].assign(Tensor.full((2,), 2.0).contiguous().realize()).realize()
  check(a, np.array([2, 2, 1, 1], np.float32), dtypes.float32)
  assert len(a.schedule()) == 0, "realizing the view lands the write in its base's buffer"


def test_kv_cache_filled_through_slices_like_torch():
  rng = np.random.default_rng(0)
  steps = [rng.standard_normal((2, 1, 3)).astype(np.float32) for _ in range(5)]
  cache, want = Tensor.zeros(2, 5, 3).contiguous().realize(), torch.zeros(2, 5, 3)
  for pos, kv in enumerate(steps):
    cache[:, pos:pos + 1].assign(Tensor(kv)).realize()
    want[:, pos:pos + 1].copy_(torch.from_numpy(kv))
    assert len(cache.schedule()) == 0, "the cache stays one buffer, not a chain of writes"
    check(cache, want, dtypes.float32)


def test_in_place_operators_on_views():
  a, want = Tensor.arange(6).contiguous().realize(), torch.arange(6, dtype=torch.int32)
  v, tv = a[1:5:2], want[1:5:2]
  v += 10
  tv += 10
  v *= 3
  tv *= 3
  check(v, tv, dtypes.int32)
  check(a, want, dtypes.int32)


def test_setitem_on_views_of_views():
  a, want = Tensor(np.arange(6, dtype=np.float32)).realize(), torch.arange(6, dtype=torch.float32)
  a[0][...] = 5  # a 0-d view
  want[0][...] = 5
  a.reshape(2, 3)[1] = -1
  want.view(2, 3)[1] = -1
  a.reshape(3, 2).T[1, :2] = np.array([7.0, 8.0], np.float32)
  want.view(3, 2).T[1, :2] = torch.tensor([7.0, 8.0])
  check(a, want, dtypes.float32)
  b, tb = Tensor([[1, 2], [3, 4]]).realize(), torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
  b[0][1] = 5
  tb[0][1] = 5
  check(b, tb, dtypes.int32)


def test_setitem_on_a_reshape_of_a_lazy_computation():
  Tensor.manual_seed(0)
  z = Tensor.rand(8, 8)
  Tensor.manual_seed(0)
  want = Tensor.rand(8, 8).numpy()  # the same draw, as data
  z[:3] = 1
  want[:3] = 1
  check(z, want, dtypes.float32)
  y = (Tensor.ones(64).contiguous().realize() * 2).reshape(8, 8)
  y[0] = 5
  expected = np.full((8, 8), 2, np.float32)
  expected[0] = 5
  check(y, expected, dtypes.float32)


def test_other_views_see_a_write_and_computed_tensors_do_not():
  a, ta = Tensor(np.arange(12, dtype=np.float32)).realize(), torch.arange(12, dtype=torch.float32)
  rows, trows = a.reshape(3, 4), ta.view(3, 4)
  col, tcol = rows[:, 1], trows[:, 1]
  col.realize()  # a realized view follows its base too
  doubled, tdoubled = a * 2, ta * 2
  rows[1] = 0
  trows[1] = 0
  for got, want in ((a, ta), (rows, trows), (col, tcol), (doubled, tdoubled)):
    check(got, want, dtypes.float32)
  a.assign(Tensor.full((12,), 3.0))  # a write to the base: its views see it
  ta.copy_(torch.full((12,), 3.0))
  check(col, tcol, dtypes.float32)


def test_copies_are_not_views():
  a = Tensor(np.arange(4, dtype=np.float32)).realize()
  for copy in (a[[0, 1]], a.pad((1, 1)), a.repeat(2), a.roll(1), Tensor.cat(a), a.contiguous(), a * 1):
    copy[0] = 9
  check(a, np.arange(4, dtype=np.float32), dtypes.float32)


def test_writes_through_an_expand_raise_and_change_nothing():
  base = Tensor([[1.0], [2.0]]).realize()
  e, te = base.expand(2, 3), torch.tensor([[1.0], [2.0]]).expand(2, 3)
  for write in (lambda t: t.__iadd__(1), lambda t: t.__setitem__(0, 5.0)):
    with pytest.raises(RuntimeError, match="single memory location"):
      write(te)
    with pytest.raises(RuntimeError, match=r"expanded view.*\(2, 3\).*\(2, 1\)"):
      write(e)
  with pytest.raises(RuntimeError, match="expanded"):
    Tensor([1.0]).expand(3)[0] = 5  # the expanded tensor is dropped, but its view still overlaps
  check(base, np.array([[1.0], [2.0]], np.float32), dtypes.float32)
  with pytest.raises(RuntimeError, match="expanded"):
    e[:, 0] = 5.0  # stricter than torch, which writes this view that does not overlap itself (docs/architecture.md)
  empty = Tensor.zeros(1, 2).contiguous().expand(0, 2)
  empty += 1  # nothing is written, as in torch


def test_setitem_with_requires_grad_raises_but_a_detached_view_writes():
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  for write in (lambda: w.__setitem__(0, 5.0), lambda: w[1:].__setitem__(0, 5.0),
                lambda: Tensor.zeros(3).__setitem__(0, w[0] * 2)):
    with pytest.raises(NotImplementedError, match="requires grad"):
      write()
  tw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
  w.detach()[0] = 5.0
  tw.detach()[0] = 5.0
  check(w, tw.detach(), dtypes.float32)
  (w * w).sum().backward()
  (tw * tw).sum().backward()
  check(w.grad, tw.grad, dtypes.float32)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.float16, dtypes.float32], ids=lambda d: d.name)
def test_edges_empty_zero_d_and_signed_zero(dtype):
  a = Tensor(np.arange(6).astype(NP_DTYPE[dtype])).realize()
  want = torch.arange(6).to(TORCH_DTYPE[dtype])
  a[2:2] = 1  # empty slices write nothing
  want[2:2] = 1
  a[4:1].assign(Tensor.empty(0, dtype=dtype))
  a[3] += 125  # a 0-d view; int8 wraps like torch's
  want[3] += 125
  a.reshape(2, 3)[:, ::2] *= 2
  want.view(2, 3)[:, ::2] *= 2
  if dtype.kind == "f":
    a[1:2] = -0.0
    want[1:2] = -0.0
    a[0].assign(Tensor(-0.0, dtype=dtype))
    want[0].copy_(torch.tensor(-0.0))
  check(a, want, dtype)
  s = Tensor(np.array(3, NP_DTYPE[dtype])).realize()
  s[...] = 5
  s.reshape(1)[0] += 1
  check(s, np.array(6, NP_DTYPE[dtype]), dtype)


def test_a_write_through_a_view_changes_the_base_node():
  # what TinyJit watches to find the inputs a jitted function wrote
  t = Tensor.zeros(2, 2).contiguous().realize()
  before = t.uop
  t.reshape(4)[1:3].assign(Tensor([1.0, 2.0]))
  assert t.uop is not before
  check(t, np.array([[0, 1], [2, 0]], np.float32), dtypes.float32)


def test_jitted_writes_through_views_of_inputs():
  @TinyJit
  def fill(cache, kv):
    cache[:, 1:2].assign(kv).realize()

  @TinyJit
  def bump(t):
    v = t.reshape(2, 2)
    v[0] += 1

  for i in range(4):
    cache, kv = Tensor.zeros(2, 3).contiguous().realize(), Tensor([[i + 1.0], [-i - 1.0]]).realize()
    fill(cache, kv)
    check(cache, np.array([[0, i + 1, 0], [0, -i - 1, 0]], np.float32), dtypes.float32)
    t = Tensor.full((4,), float(i)).contiguous().realize()
    bump(t)
    check(t, np.array([i + 1, i + 1, i, i], np.float32), dtypes.float32)


def test_a_realized_view_does_not_keep_a_dropped_graph_alive():
  mid = (Tensor(np.arange(4, dtype=np.float32)) * 2).contiguous()
  view = (mid + 1).reshape(2, 2)
  view.realize()
  freed = weakref.ref(realized_buffer(mid.uop))
  del mid
  gc.collect()
  assert freed() is None, "the view holds its dropped base's graph (and its buffers)"
  check(view, np.arange(4, dtype=np.float32).reshape(2, 2) * 2 + 1, dtypes.float32)


def _views_outliving_their_base(make, write):
  """Views of a tensor (one realized, one lazy, one of a sibling that writes) that `write` then writes, and that
  outlive it: the base is dropped before any view is read."""
  base = make(np.arange(12, dtype=np.float32).reshape(3, 4))
  row, col, done = base[1], base.reshape(12)[1::4], base[:, 1:]
  done.realize() if isinstance(done, Tensor) else None
  write(base, done)
  return row, col, done


@pytest.mark.parametrize("how", ["setitem", "through_a_view", "assign", "iadd"])
def test_views_read_after_their_written_base_is_dropped(how):
  writes = {"setitem": lambda b, v: b.__setitem__((1, 1), 55.0),
            "through_a_view": lambda b, v: v.__setitem__((slice(None), 0), -1.0),
            "assign": lambda b, v: b.assign(b * 2) if isinstance(b, Tensor) else b.copy_(b * 2),
            "iadd": lambda b, v: b.__iadd__(1.0)}
  ours = _views_outliving_their_base(lambda a: Tensor(a).realize(), writes[how])
  gc.collect()
  theirs = _views_outliving_their_base(torch.tensor, writes[how])
  for got, want in zip(ours, theirs):
    check(got, want, dtypes.float32)


def test_writes_through_symbolic_slices():  # tinygrad's KV cache: cache[:, start:start+n] with a bound Variable
  start = Variable("start", 0, 6)
  cache, want = Tensor.zeros(2, 8).contiguous().realize(), np.zeros((2, 8), np.float32)
  for pos in (0, 3, 6):
    s = start.bind(pos)
    cache[:, s:s + 2].assign(Tensor.full((2, 2), pos + 1.0)).realize()
    want[:, pos:pos + 2] = pos + 1
    check(cache, want, dtypes.float32)
  n = Variable("n", 1, 8).bind(3)
  t = Tensor(np.arange(8, dtype=np.float32)).realize()
  t[:n] = -1
  check(t, np.array([-1, -1, -1, 3, 4, 5, 6, 7], np.float32), dtypes.float32)
