"""Movement functions built from the six movement primitives (pad modes, squeeze/unflatten, repeat,
repeat_interleave, roll, split, chunk, cat, stack, meshgrid, rearrange) against torch, on contiguous and
non-contiguous inputs, 0-size and 0-d tensors, and several dtypes. These ops only move data, so every value must
match bit for bit."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from helpers import NP_DTYPE, check, edge_values, to_numpy, view_pair

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

def pad_oracle(a, pairs, mode):
  """numpy reference for pad with negative amounts: reflect and replicate grow first and then crop, circular crops
  first (what torch does; the test below checks these rules against torch where torch accepts the shape)."""
  a = np.asarray(a)
  np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
  crop = tuple(slice(-min(b, 0), s + min(e, 0)) for (b, e), s in zip(pairs, a.shape))
  grow = [(max(b, 0), max(e, 0)) for b, e in pairs]
  if mode == "circular":
    return np.pad(a[crop], grow, mode=np_mode)
  grown = np.pad(a, grow, mode=np_mode)
  return grown[tuple(slice(-min(b, 0), s + min(e, 0)) for (b, e), s in zip(pairs, grown.shape))]


def torch_pairs(flat, ndim):
  pairs = [(0, 0)] * ndim
  for i in range(len(flat) // 2):
    pairs[ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
  return pairs


def pad_case(flat_or_pairs, mode):
  grouped = isinstance(flat_or_pairs[0], tuple)
  def theirs(tt):
    pairs = [p or (0, 0) for p in flat_or_pairs] if grouped else torch_pairs(flat_or_pairs, tt.ndim)
    return pad_oracle(to_numpy(tt), pairs, mode)
  return (lambda t: t.pad(flat_or_pairs, mode=mode)), theirs


def rearranged(tt, split, order, out):
  return tt.reshape(split).permute(order).reshape(out)


SAME = lambda f: (f, f)  # noqa: E731
CASES = {
  "pad_reflect": pad_case((1, 2), "reflect"),
  "pad_reflect_two_dims_negative": pad_case((2, -1, -1, 1), "reflect"),
  "pad_reflect_grouped": pad_case(((1, 0), (2, 2), None), "reflect"),
  "pad_replicate": pad_case((3, 1, 0, 2), "replicate"),
  "pad_replicate_grouped_negative": pad_case(((-1, 2), None, (1, -3)), "replicate"),
  "pad_circular": pad_case((4, 2), "circular"),
  "pad_circular_all_dims": pad_case(((1, 1), (0, 3), (2, 1)), "circular"),
  "pad_circular_negative": pad_case((2, -1, -2, 1), "circular"),
  "squeeze_tuple": SAME(lambda t: t.reshape(2, 1, 3, 1, 4).squeeze((1, -2))),
  "squeeze_tuple_keeps_non_one": SAME(lambda t: t.reshape(2, 1, 3, 4).squeeze((0, 1))),
  "unflatten": SAME(lambda t: t.unflatten(2, (2, 2))),
  "unflatten_infer_negative_dim": SAME(lambda t: t.unflatten(-2, (-1, 1))),
  "repeat": SAME(lambda t: t.repeat(2, 1, 3)),
  "repeat_new_dims": SAME(lambda t: t.repeat(2, 1, 2, 1)),
  "repeat_zero": SAME(lambda t: t.repeat(1, 0, 2)),
  "repeat_interleave": SAME(lambda t: t.repeat_interleave(2, dim=1)),
  "repeat_interleave_flat": SAME(lambda t: t.repeat_interleave(3)),
  "repeat_interleave_counts": (lambda t: t.repeat_interleave([1, 0, 2], dim=-2),
                               lambda t: t.repeat_interleave(torch.tensor([1, 0, 2]), dim=-2)),
  "roll_flat": SAME(lambda t: t.roll(5)),
  "roll_dims": SAME(lambda t: t.roll((1, -2), (0, 2))),
  "roll_wraps_more_than_size": SAME(lambda t: t.roll(7, -1)),
  "roll_same_dim_twice": SAME(lambda t: t.roll((1, 1), (1, 1))),
  "split": SAME(lambda t: t.split(3, -1)),
  "split_sizes": SAME(lambda t: t.split([1, 0, 2], 1)),
  "chunk": SAME(lambda t: t.chunk(3, 2)),
  "chunk_more_than_size": SAME(lambda t: t.chunk(5, 0)),
  "cat": (lambda t: t.cat(t.flip(0), t[:, :1], dim=1), lambda t: torch.cat([t, t.flip(0), t[:, :1]], dim=1)),
  "cat_last_dim_class_call": (lambda t: Tensor.cat([t, t[..., ::3]], dim=-1),
                              lambda t: torch.cat([t, t[..., ::3]], dim=-1)),
  "cat_skips_legacy_empty": (lambda t: t.cat(Tensor.zeros(0), dim=0), lambda t: torch.cat([t, torch.zeros(0)])),
  "stack": (lambda t: t.stack(t.flip(1), dim=1), lambda t: torch.stack([t, t.flip(1)], dim=1)),
  "stack_last": (lambda t: Tensor.stack([t, t, t], dim=-1), lambda t: torch.stack([t, t, t], dim=-1)),
  "rearrange_permute": (lambda t: t.rearrange("a b c -> c a b"), lambda t: t.permute(2, 0, 1)),
  "rearrange_merge": (lambda t: t.rearrange("a b c -> a (c b)"), lambda t: t.permute(0, 2, 1).reshape(2, 12)),
  "rearrange_split_merge": (lambda t: t.rearrange("a b (c d) -> (a c) b d", d=2),
                            lambda t: rearranged(t, (2, 3, 2, 2), (0, 2, 1, 3), (4, 3, 2))),
  "rearrange_ellipsis": (lambda t: t.rearrange("a ... -> ... a"), lambda t: t.permute(1, 2, 0)),
  "rearrange_unit_axes": (lambda t: t.rearrange("a b c -> a 1 b () c"), lambda t: t.reshape(2, 1, 3, 1, 4)),
}


def check_pieces(got, want, dtype):
  if isinstance(want, (tuple, list)):
    assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{len(got)} pieces, expected {len(want)}"
    for g, w in zip(got, want):
      check(g, w, dtype)
  else:
    check(got, want, dtype)


# Each case runs on the contiguous base and on one of the views, in turn (every compiled kernel costs time).
VIEWS = ["permuted", "sliced", "expanded"]  # of helpers.VIEW_BASES
CASE_BASES = [(case, base) for i, case in enumerate(CASES) for base in ("contiguous", VIEWS[i % len(VIEWS)])]


@pytest.mark.parametrize("case, base", CASE_BASES)
def test_movement_api(case, base):
  ours, theirs = CASES[case]
  t, tt = view_pair(base)
  check_pieces(ours(t), theirs(tt), dtypes.float32)


@pytest.mark.parametrize("flat, mode", [((1, 2), "reflect"), ((2, -1), "reflect"), ((-2, 2, 1, 1), "reflect"),
                                        ((3, -1), "replicate"), ((-3, 3), "replicate"), ((2, -1), "circular"),
                                        ((-2, 2), "circular"), ((4, 1, -1, 2), "circular")])
def test_pad_oracle_agrees_with_torch(flat, mode):
  a = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
  want = F.pad(torch.from_numpy(a), flat, mode=mode)
  np.testing.assert_array_equal(pad_oracle(a, torch_pairs(flat, 3), mode), want.numpy())
  check(Tensor(a).pad(flat, mode=mode), want, dtypes.float32)


DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float64]


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
@pytest.mark.parametrize("case", ["pad_reflect_two_dims_negative", "pad_circular_negative", "roll_dims", "cat",
                                  "rearrange_split_merge"])
def test_movement_api_dtypes(case, dtype):
  """Edge values (NaN, -0.0, infinities, extremes) move unchanged; the torch oracle runs on the same bits as int64
  (or float64 for floats) and is converted back."""
  ours, theirs = CASES[case]
  values = np.resize(edge_values(dtype), (2, 3, 4))
  wide = values.astype(np.float64 if dtype.kind == "f" else np.int64)
  want = theirs(torch.from_numpy(wide))
  want = [to_numpy(w).astype(NP_DTYPE[dtype]) for w in want] if isinstance(want, tuple) else \
    to_numpy(want).astype(NP_DTYPE[dtype])
  check_pieces(ours(Tensor(values)), want, dtype)


def test_cat_promotes_dtypes():
  a, b = np.arange(4, dtype=np.int8).reshape(2, 2), np.array([[0.5, -0.0]], dtype=np.float16)
  check(Tensor(a).cat(Tensor(b)), torch.cat([torch.from_numpy(a), torch.from_numpy(b)]), dtypes.float16)
  check(Tensor([True]).cat(Tensor([3])), torch.cat([torch.tensor([True]), torch.tensor([3], dtype=torch.int32)]),
        dtypes.int32)


ZERO_SIZE = {
  "pad_replicate": (lambda t: t.pad((1, 1)), lambda t: F.pad(t, (1, 1))),
  "pad_circular_zero_size_dim_untouched": (lambda t: t.pad((2, 1), mode="circular"),
                                           lambda t: torch.from_numpy(pad_oracle(t, [(0, 0), (0, 0), (2, 1)],
                                                                                 "circular"))),
  "repeat": SAME(lambda t: t.repeat(2, 3, 1)),
  "repeat_interleave": SAME(lambda t: t.repeat_interleave(2, 1)),
  "roll": SAME(lambda t: t.roll((1, 2), (1, 2))),
  "split": SAME(lambda t: t.split(1, 1)),
  "split_empty_dim": SAME(lambda t: t.split(2, 1)),
  "chunk_empty_dim": SAME(lambda t: t.chunk(2, 1)),
  "cat_empty_dim": (lambda t: t.cat(t, t[:, :, :1], dim=2), lambda t: torch.cat([t, t, t[:, :, :1]], dim=2)),
  "cat_along_empty": (lambda t: t.cat(Tensor.ones(2, 2, 3), dim=1), lambda t: torch.cat([t, torch.ones(2, 2, 3)], 1)),
  "stack": (lambda t: t.stack(t, dim=0), lambda t: torch.stack([t, t])),
  "unflatten": SAME(lambda t: t.unflatten(1, (0, 5))),
  "rearrange": (lambda t: t.rearrange("a b c -> (c a) b"), lambda t: t.permute(2, 0, 1).reshape(6, 0)),
}


@pytest.mark.parametrize("case", list(ZERO_SIZE))
def test_zero_size(case):
  ours, theirs = ZERO_SIZE[case]
  a = np.zeros((2, 0, 3), np.float32)
  check_pieces(ours(Tensor(a)), theirs(torch.from_numpy(a)), dtypes.float32)


def test_zero_d():
  t, tt = Tensor(2.5), torch.tensor(2.5)
  check(t.repeat(2, 3), tt.repeat(2, 3), dtypes.float32)
  check(t.repeat(), tt.repeat(()), dtypes.float32)
  check(t.roll(3), tt.roll(3), dtypes.float32)
  check(t.repeat_interleave(3), tt.repeat_interleave(3), dtypes.float32)
  check(Tensor.stack([t, t * 2]), torch.stack([tt, tt * 2]), dtypes.float32)
  check(t.squeeze((0,)), tt.squeeze((0,)), dtypes.float32)
  check(t.pad(()), tt, dtypes.float32)
  check(t.rearrange(" -> 1 1"), tt.reshape(1, 1), dtypes.float32)
  for got, want in zip(t.meshgrid(Tensor([1.0, 2.0])), torch.meshgrid(tt, torch.tensor([1.0, 2.0]), indexing="ij")):
    check(got, want, dtypes.float32)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
  xs = [np.arange(3, dtype=np.int32), np.arange(10, 14, dtype=np.int32), np.array([-1, 7], dtype=np.int32)]
  base = Tensor(np.arange(8, dtype=np.int32))[::2]  # a sliced view as the first input
  ours = base.meshgrid(*(Tensor(x) for x in xs[1:]), indexing=indexing)
  theirs = torch.meshgrid(torch.arange(8, dtype=torch.int32)[::2], *(torch.from_numpy(x) for x in xs[1:]),
                          indexing=indexing)
  assert len(ours) == 3
  for got, want in zip(ours, theirs):
    check(got, want, dtypes.int32)
  for got, want in zip(Tensor.meshgrid([Tensor(xs[0]), Tensor(xs[1])], indexing=indexing),
                       torch.meshgrid(torch.from_numpy(xs[0]), torch.from_numpy(xs[1]), indexing=indexing)):
    check(got, want, dtypes.int32)


def test_split_chunk_match_torch_piece_counts():
  for n, k in [(5, 2), (6, 4), (7, 7), (3, 5), (0, 3)]:
    t, tt = Tensor.arange(n), torch.arange(n, dtype=torch.int32)
    assert [p.shape for p in t.chunk(k)] == [tuple(p.shape) for p in tt.chunk(k)], (n, k)
    if n:
      assert [p.shape for p in t.split(k)] == [tuple(p.shape) for p in tt.split(k)], (n, k)


def test_movement_ops_are_one_kernel():
  """Pure movement (pads, roll, repeat, rearrange) fuses into the consumer: one kernel, no copies."""
  t = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
  out = t.pad((1, 1), mode="circular").roll(1, 0).repeat(1, 2, 1).rearrange("a b c -> c (a b)") + 1
  assert len(out.schedule()) == 1
  joined = Tensor.cat([t, t.pad((1, 2), mode="reflect")[..., :4], t.pad((0, 0, 1, 0), mode="replicate")[:, :3]],
                      dim=1)
  assert len(joined.schedule()) == 1


@pytest.mark.parametrize("pattern", ["\u2026 c -> c \u2026", "a \u2026 -> (\u2026 a)"])
def test_rearrange_accepts_the_unicode_ellipsis(pattern):
  x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
  want = np.moveaxis(x, -1, 0) if pattern.startswith("\u2026") else np.moveaxis(x, 0, -1).reshape(24)
  check(Tensor(x).rearrange(pattern), want, dtypes.int32)
