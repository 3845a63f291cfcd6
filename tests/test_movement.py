"""Movement ops and basic indexing, on contiguous and non-contiguous inputs, checked against torch (numpy for
negative-step slices, which torch does not have)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from helpers import NP_DTYPE, VIEW_BASES, check, edge_values, to_numpy, to_torch, view_pair

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

# name: (refgrad op, torch op); one lambda serves both when the APIs agree
SAME = lambda f: (f, f)  # noqa: E731
CASES = {
  "reshape": SAME(lambda t: t.reshape(6, 4)),
  "reshape_tuple": SAME(lambda t: t.reshape((4, 3, 2))),
  "reshape_infer": SAME(lambda t: t.reshape(4, -1, 2)),
  "reshape_flat": SAME(lambda t: t.reshape(-1)),
  "reshape_none": (lambda t: t.reshape(None, -1), lambda t: t.reshape(2, -1)),
  "reshape_none_last": (lambda t: t.reshape(3, 2, None), lambda t: t.reshape(3, 2, 4)),
  "view": (lambda t: t.view(3, 8), lambda t: t.reshape(3, 8)),  # torch's view refuses non-contiguous inputs
  "permute": SAME(lambda t: t.permute(2, 0, 1)),
  "permute_tuple_negative": SAME(lambda t: t.permute((-1, 1, 0))),
  "transpose": SAME(lambda t: t.transpose(0, 2)),
  "transpose_negative": SAME(lambda t: t.transpose(-1, -2)),
  "T": (lambda t: t.T, lambda t: t.permute(1, 0, 2)),  # tinygrad's transpose(); torch's reverses every dim
  "expand": SAME(lambda t: t.reshape(2, 3, 1, 4).expand(2, 3, 5, 4)),
  "expand_minus_one_new_dims": SAME(lambda t: t.reshape(2, 3, 1, 4).expand(3, -1, -1, 2, -1)),
  "expand_tuple": SAME(lambda t: t[:, :1].expand((2, 3, 4))),
  "pad_last": (lambda t: t.pad((1, 2)), lambda t: F.pad(t, (1, 2))),
  "pad_three_dims": (lambda t: t.pad((1, 2, 0, 1, 2, 0)), lambda t: F.pad(t, (1, 2, 0, 1, 2, 0))),
  "pad_negative": (lambda t: t.pad((-1, 2, 0, -2)), lambda t: F.pad(t, (-1, 2, 0, -2))),
  "pad_value": (lambda t: t.pad((1, 1, 1, 0), value=-3.5), lambda t: F.pad(t, (1, 1, 1, 0), value=-3.5)),
  "pad_pairs": (lambda t: t.pad(((1, 0), None, (0, 2))), lambda t: F.pad(t, (0, 2, 0, 0, 1, 0))),
  "pad_pairs_negative_value": (lambda t: t.pad(((0, 0), (-1, 1), (2, -3)), value=7.0),
                               lambda t: F.pad(t, (2, -3, -1, 1), value=7.0)),
  "shrink": (lambda t: t.shrink(((0, 1), (1, 3), None)), lambda t: t[0:1, 1:3, :]),
  "shrink_empty": (lambda t: t.shrink(((1, 1), None, (2, 4))), lambda t: t[1:1, :, 2:4]),
  "flip": SAME(lambda t: t.flip(0)),
  "flip_two": SAME(lambda t: t.flip(0, 2)),
  "flip_negative_tuple": SAME(lambda t: t.flip((-1,))),
  "squeeze_all": SAME(lambda t: t.reshape(2, 1, 3, 1, 4).squeeze()),
  "squeeze_dim": SAME(lambda t: t.reshape(2, 1, 3, 1, 4).squeeze(1)),
  "squeeze_negative": SAME(lambda t: t.reshape(2, 1, 3, 1, 4).squeeze(-2)),
  "squeeze_not_one": SAME(lambda t: t.squeeze(0)),
  "unsqueeze": SAME(lambda t: t.unsqueeze(0)),
  "unsqueeze_middle": SAME(lambda t: t.unsqueeze(2)),
  "unsqueeze_negative": SAME(lambda t: t.unsqueeze(-1)),
  "flatten": SAME(lambda t: t.flatten()),
  "flatten_start": SAME(lambda t: t.flatten(1)),
  "flatten_range": SAME(lambda t: t.flatten(0, 1)),
  "flatten_negative": SAME(lambda t: t.flatten(-2, -1)),
  "getitem_int": SAME(lambda t: t[1]),
  "getitem_negative_int": SAME(lambda t: t[-1, -3]),
  "getitem_all_ints": SAME(lambda t: t[1, 2, 3]),
  "getitem_slice": SAME(lambda t: t[:, 1:]),
  "getitem_slice_negative_bounds": SAME(lambda t: t[:, -2:, :-1]),
  "getitem_step": SAME(lambda t: t[:, ::2, 1::3]),
  "getitem_slice_past_end": SAME(lambda t: t[:, 1:100, -100:2]),
  "getitem_empty_slice": SAME(lambda t: t[:, 2:1]),
  "getitem_none": SAME(lambda t: t[None, :, None, 1]),
  "getitem_ellipsis": SAME(lambda t: t[..., 2]),
  "getitem_ellipsis_middle": SAME(lambda t: t[1, ..., None, 1:3]),
  "getitem_ellipsis_only": SAME(lambda t: t[...]),
  "getitem_mixed": SAME(lambda t: t[-1, None, 0:3:2, ...]),
  "getitem_negative_step": (lambda t: t[:, ::-1], lambda t: to_numpy(t)[:, ::-1]),
  "getitem_negative_step_bounds": (lambda t: t[1, 2:0:-1, ::-3], lambda t: to_numpy(t)[1, 2:0:-1, ::-3]),
  "getitem_negative_step_ellipsis": (lambda t: t[..., -1::-2], lambda t: to_numpy(t)[..., -1::-2]),
  "chain_permute_reshape_slice": (lambda t: t.permute(1, 0, 2).reshape(3, 8)[::-2, 1:].flip(0),
                                  lambda t: to_numpy(t.permute(1, 0, 2).reshape(3, 8))[::-2, 1:][::-1]),
  "chain_pad_expand_shrink": (lambda t: t[:, :1].pad(((0, 0), (0, 0), (1, 1))).expand(2, 5, 6)[:, 1:4, ::5],
                              lambda t: F.pad(t[:, :1], (1, 1)).expand(2, 5, 6)[:, 1:4, ::5]),
  "chain_transpose_flatten_unsqueeze": SAME(lambda t: t.transpose(0, 1).flatten(1).unsqueeze(1)[1:, :, 3:7]),
  "chain_expand_permute_reshape": SAME(lambda t: t[:, None].expand(2, 2, 3, 4).permute(3, 1, 0, 2).reshape(8, 6)),
}


@pytest.mark.parametrize("base", list(VIEW_BASES))
@pytest.mark.parametrize("case", list(CASES))
def test_movement(case, base):
  ours, theirs = CASES[case]
  t, tt = view_pair(base)
  check(ours(t), theirs(tt), dtypes.float32)


@pytest.mark.parametrize("dtype", [dtypes.bool, dtypes.int8, dtypes.uint64, dtypes.bfloat16, dtypes.float64],
                         ids=["bool", "int8", "uint64", "bfloat16", "float64"])
@pytest.mark.parametrize("case", ["permute", "pad_three_dims", "getitem_negative_step_bounds", "flip_two",
                                  "chain_pad_expand_shrink", "expand_minus_one_new_dims"])
def test_movement_dtypes(case, dtype):
  ours, theirs = CASES[case]
  a = (np.arange(24).reshape(2, 3, 4) % 5).astype(NP_DTYPE[dtype])
  if dtype in (dtypes.uint64,):  # torch lacks uint64 ops; its movement ops only need storage, so use int64 and convert
    check(ours(Tensor(a)), np.asarray(theirs(torch.from_numpy(a.astype(np.int64)))).astype(np.uint64), dtype)
  else:
    check(ours(Tensor(a)), theirs(to_torch(a)), dtype)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.int32], ids=lambda d: d.name)
def test_pad_with_negative_zero(dtype):
  a = np.array([[1.5, -0.0], [0.0, -2.0]]).astype(NP_DTYPE[dtype])
  want = np.pad(a, ((1, 0), (0, 2)), constant_values=-0.0)  # the pads of a float are -0.0 (torch's F.pad too)
  check(Tensor(a).pad((0, 2, 1, 0), value=-0.0), want, dtype)


I64 = np.int64  # sizes computed with numpy (np.prod(shape), array.shape arithmetic) are numpy ints
NUMPY_INT_ARGS = {
  "reshape": (lambda t: t.reshape(I64(6), I64(-1)), lambda t: t.reshape(6, -1)),
  "view": (lambda t: t.view(np.prod(t.shape)), lambda t: t.reshape(24)),
  "pad": (lambda t: t.pad((I64(1), np.int32(2))), lambda t: F.pad(t, (1, 2))),
  "pad_pairs": (lambda t: t.pad(((np.uint8(1), I64(0)), None, None)), lambda t: F.pad(t, (0, 0, 0, 0, 1, 0))),
  "squeeze": (lambda t: t[:1].squeeze(I64(0)), lambda t: t[:1].squeeze(0)),
  "unflatten": (lambda t: t.unflatten(I64(2), (I64(2), I64(2))), lambda t: t.unflatten(2, (2, 2))),
  "repeat": (lambda t: t.repeat(I64(1), I64(2), I64(1)), lambda t: t.repeat(1, 2, 1)),
  "repeat_interleave": (lambda t: t.repeat_interleave(I64(2), 1), lambda t: t.repeat_interleave(2, 1)),
  "roll": (lambda t: t.roll(I64(1), I64(0)), lambda t: t.roll(1, 0)),
  "split": (lambda t: t.split(I64(3), 2)[1], lambda t: t.split(3, 2)[1]),
  "split_list": (lambda t: t.split([I64(1), I64(3)], 2)[1], lambda t: t.split([1, 3], 2)[1]),
  "chunk": (lambda t: t.chunk(I64(2), 2)[1], lambda t: t.chunk(2, 2)[1]),
  "rearrange": (lambda t: t.rearrange("a b (c d) -> a c b d", c=I64(2)),
                lambda t: t.reshape(2, 3, 2, 2).transpose(1, 2)),
}


@pytest.mark.parametrize("name", list(NUMPY_INT_ARGS))
def test_numpy_int_arguments(name):
  ours, theirs = NUMPY_INT_ARGS[name]
  t, tt = view_pair("permuted")
  got = ours(t)
  assert all(type(s) is int for s in got.shape), got.shape
  check(got, theirs(tt), dtypes.float32)


def test_pad_int_value_keeps_dtype():
  a = np.arange(6, dtype=np.int16).reshape(2, 3)
  check(Tensor(a).pad((1, 0, 0, 1), value=7), F.pad(torch.from_numpy(a), (1, 0, 0, 1), value=7), dtypes.int16)


@pytest.mark.parametrize("shape, new", [((), (1, 1)), ((1,), ()), ((0, 3), (3, 0, 2)), ((2, 0), (-1,)),
                                        ((4,), (2, 1, 2))])
def test_reshape_edge_shapes(shape, new):
  a = np.zeros(shape, np.float32)
  check(Tensor(a).reshape(new), torch.from_numpy(a).reshape(new), dtypes.float32)


@pytest.mark.parametrize("new", [[3, 2], (2, -1, 1), (6,), ()], ids=str)
def test_reshape_takes_the_shape_as_a_keyword(new):
  a = np.arange(6 if new else 1, dtype=np.int32)
  check(Tensor(a).reshape(shape=new), torch.from_numpy(a).reshape(shape=new), dtypes.int32)


def test_zero_d():
  t, tt = Tensor(3.5), torch.tensor(3.5)
  check(t.reshape(1, 1), tt.reshape(1, 1), dtypes.float32)
  check(t.unsqueeze(0), tt.unsqueeze(0), dtypes.float32)
  check(t.expand(2, 3), tt.expand(2, 3), dtypes.float32)
  check(t.flatten(), tt.flatten(), dtypes.float32)
  check(t[None, ...], tt[None, ...], dtypes.float32)
  check(t.squeeze(), tt.squeeze(), dtypes.float32)
  check(t.T, tt, dtypes.float32)


def test_T_swaps_the_first_two_dims_as_tinygrad_and_keeps_one_dim():  # noqa: N802 -- the property's name
  """tinygrad's `.T` is transpose(): dims 0 and 1 (numpy's swapaxes is the oracle); a 1-d tensor's is itself, as
  torch's (tinygrad raises IndexError)."""
  a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  check(Tensor(a).T, np.swapaxes(a, 0, 1), dtypes.float32)
  check(Tensor(a[0, 0]).T, torch.from_numpy(a[0, 0]), dtypes.float32)


def test_zero_d_transpose_and_unflatten_as_torch():
  t, tt = Tensor(3.5), torch.tensor(3.5)
  check(t.transpose(0, -1), tt.transpose(0, -1), dtypes.float32)  # IndexError before (list index out of range)
  with pytest.raises(RuntimeError, match="no dims"):  # an IndexError too, as tinygrad; was 'tuple index out of range'
    t.unflatten(0, (1,))
  with pytest.raises(RuntimeError):
    tt.unflatten(0, (1,))


def test_movement_after_realize():
  t, tt = view_pair("sliced")
  v, tv = t.permute(2, 0, 1)[::2], tt.permute(2, 0, 1)[::2]
  v.realize()
  check(v, tv, dtypes.float32)
  check(v.reshape(2, 6).flip(1)[:, 1:].T, tv.reshape(2, 6).flip(1)[:, 1:].T, dtypes.float32)
  check(t, tt, dtypes.float32)  # the tensor the view was taken from is unchanged


def test_elementwise_on_views():
  t, tt = view_pair("permuted")
  u, tu = view_pair("flipped")
  check(t[:, ::-1] * u + 1, torch.from_numpy(to_numpy(tt)[:, ::-1].copy()) * tu + 1, dtypes.float32)
  check(t.T.reshape(4, 6) - u.reshape(4, 6), tt.permute(1, 0, 2).reshape(4, 6) - tu.reshape(4, 6), dtypes.float32)


# Flat torch-style paddings of every length, per mode; amounts stay where torch's result is defined (reflect: below
# the size; circular: at most what a negative pad leaves). Outside constant mode torch wants one or two leading dims
# more than the padded ones, so each length has its input shape.
PAD_INPUT_SHAPES = {2: (2, 3, 5), 4: (2, 3, 5, 4), 6: (1, 2, 3, 5, 4), 8: (2, 3, 5, 4)}
FLAT_PADS = [(0, 2), (-1, 1), (2, -1, 0, 0), (0, 2, 2, 0), (-1, 0, 1, 2), (1, 1, -2, 2, 0, 1), (2, 0, 1, -1, 1, 1),
             (0, 0, 0, 0, 2, 2), (-2, 1, 0, 0, -1, 2, 1, 0)]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("flat", FLAT_PADS, ids=str)
def test_pad_flat_tuples(flat, mode):
  """The last pair pads the last dim, the one before it the dim before, like torch.nn.functional.pad."""
  if mode != "constant" and len(flat) == 8:
    pytest.skip("torch pads at most 3 dims in this mode")
  a = np.resize(edge_values(dtypes.float32), PAD_INPUT_SHAPES[len(flat)])
  check(Tensor(a).pad(flat, mode=mode), F.pad(torch.from_numpy(a), flat, mode=mode), dtypes.float32)


def test_pad_circular_reads_dims_from_the_end():
  a = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
  check(Tensor(a).pad((0, 2, 3, 2), mode="circular"), F.pad(torch.from_numpy(a), (0, 2, 3, 2), mode="circular"),
        dtypes.float32)
