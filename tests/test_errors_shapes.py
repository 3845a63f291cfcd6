"""Bad shapes, dims and movement arguments (broadcast, reshape, expand, permute, pad, squeeze, repeat, roll, split,
cat, stack, meshgrid, rearrange, and every op that takes a dim): the exception class torch raises for the same
mistake, and a message that names the offending shapes, dims or values."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812 -- the usual torch alias
from helpers import check, f23, raises_like, tf23

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


# name: (our call, the same mistake in torch or None, expected exception class (or classes), message fragments)
ERRORS = {
  "broadcast": (lambda: f23() + Tensor.ones(4, 3), lambda: tf23() + torch.ones(4, 3), ValueError, ["(2, 3)", "(4, 3)"]),
  "broadcast_runtime": (lambda: f23() * Tensor.ones(2, 1, 2), lambda: tf23() * torch.ones(2, 1, 2), RuntimeError,
                        ["(2, 3)", "(2, 1, 2)"]),
  "where_broadcast": (lambda: Tensor([True, False]).where(f23(), 0), lambda: torch.where(torch.tensor([True, False]),
                      tf23(), 0), RuntimeError, ["(2,)", "(2, 3)"]),
  "reshape": (lambda: f23().reshape(4, 2), lambda: tf23().reshape(4, 2), RuntimeError, ["(4, 2)", "6"]),
  "reshape_value_error": (lambda: f23().reshape(5, -1), lambda: tf23().reshape(5, -1), ValueError, ["(5, -1)", "6"]),
  "reshape_two_inferred": (lambda: f23().reshape(-1, -1), lambda: tf23().reshape(-1, -1), RuntimeError, ["-1"]),
  "view": (lambda: f23().view(7), lambda: tf23().view(7), RuntimeError, ["(7,)", "6"]),
  "expand": (lambda: f23().expand(4, 3), lambda: tf23().expand(4, 3), RuntimeError, ["4", "(2, 3)"]),
  "expand_fewer_dims": (lambda: f23().expand(3), lambda: tf23().expand(3), RuntimeError, ["(2, 3)"]),
  "permute_not_permutation": (lambda: f23().permute(0, 0), lambda: tf23().permute(0, 0), RuntimeError, ["(0, 0)"]),
  "permute_too_few": (lambda: f23().permute(1,), lambda: tf23().permute(1,), RuntimeError, ["(1,)"]),
  "permute_bad_dim": (lambda: f23().permute(0, 2), lambda: tf23().permute(0, 2), IndexError, ["2"]),
  "flip_repeated": (lambda: f23().flip(0, 0), lambda: tf23().flip(0, 0), RuntimeError, ["0"]),
  "shrink_out_of_bounds": (lambda: f23().shrink(((0, 3), None)), None, ValueError, ["(0, 3)", "2"]),
  "unsqueeze_bad_dim": (lambda: f23().unsqueeze(4), lambda: tf23().unsqueeze(4), IndexError, ["4"]),
  "squeeze_bad_dim_tuple": (lambda: f23().squeeze((0, 2)), lambda: tf23().squeeze((0, 2)), IndexError, ["2"]),
  "squeeze_repeated_dims": (lambda: Tensor.ones(1, 3).squeeze((0, -2)), lambda: torch.ones(1, 3).squeeze((0, -2)),
                            Exception, ["(0, -2)"]),
  "pad_too_long": (lambda: f23().pad((1, 1, 1, 1, 1, 1)), lambda: F.pad(tf23(), (1,) * 6), RuntimeError,
                   ["(1, 1, 1, 1, 1, 1)"]),
  "pad_negative_size": (lambda: f23().pad((-2, -2)), lambda: F.pad(tf23(), (-2, -2)), RuntimeError,
                        ["(-2, -2)", "(2, 3)"]),
  "pad_unknown_mode": (lambda: f23().pad((1, 1), mode="wrap"), lambda: F.pad(tf23(), (1, 1), mode="wrap"),
                       NotImplementedError, ["wrap"]),
  # torch raises RuntimeError here, tinygrad NotImplementedError: a bad argument value is a ValueError in Python
  "pad_reflect_value": (lambda: f23().pad((1, 1), mode="reflect", value=2.0), lambda: F.pad(tf23(), (1, 1),
                        mode="reflect", value=2.0), (ValueError, RuntimeError), ["reflect", "2.0"]),
  "pad_reflect_too_large": (lambda: f23().pad((3, 0), mode="reflect"), lambda: F.pad(tf23(), (3, 0), mode="reflect"),
                            RuntimeError, ["(3, 0)", "3", "(2, 3)"]),
  "pad_circular_wraps_twice": (lambda: f23().pad((4, 0), mode="circular"), lambda: F.pad(tf23()[None], (4, 0),
                               mode="circular"), RuntimeError, ["(4, 0)", "3"]),
  # torch accepts this pad but copies memory it never wrote; tinygrad raises NotImplementedError
  "pad_circular_wraps_cropped": (lambda: Tensor.ones(1, 1, 5, 5).pad((3, -5, 1, -5), mode="circular"), None,
                                 NotImplementedError, ["(1, -5)", "dim 2", "size 5", "0 elements"]),
  "pad_replicate_empty": (lambda: Tensor.zeros(2, 0).pad((1, 1), mode="replicate"), None, ValueError, ["(2, 0)"]),
  "pad_pairs_count": (lambda: f23().pad(((1, 1),)), None, ValueError, ["1", "(2, 3)"]),
  "pad_not_ints": (lambda: f23().pad((1.5, 1)), lambda: F.pad(tf23(), (1.5, 1)), TypeError, ["1.5"]),
  "unflatten_sizes": (lambda: f23().unflatten(1, (2, 2)), lambda: tf23().unflatten(1, (2, 2)), RuntimeError,
                      ["(2, 2)", "3"]),
  "unflatten_bad_dim": (lambda: f23().unflatten(2, (1, 3)), lambda: tf23().unflatten(2, (1, 3)), IndexError, ["2"]),
  "repeat_too_few": (lambda: f23().repeat(2), lambda: tf23().repeat(2), RuntimeError, ["(2,)", "(2, 3)"]),
  "repeat_negative": (lambda: f23().repeat(1, -1), lambda: tf23().repeat(1, -1), RuntimeError, ["-1"]),
  "repeat_interleave_counts": (lambda: f23().repeat_interleave([1, 2], dim=1), lambda: tf23().repeat_interleave(
                               torch.tensor([1, 2]), dim=1), RuntimeError, ["3", "[1, 2]"]),
  "repeat_interleave_bad_dim": (lambda: f23().repeat_interleave(2, dim=3), lambda: tf23().repeat_interleave(2, dim=3),
                                IndexError, ["3"]),
  "roll_mismatch": (lambda: f23().roll((1, 2), (0,)), lambda: tf23().roll((1, 2), (0,)), RuntimeError,
                    ["(1, 2)", "(0,)"]),
  "split_sizes_sum": (lambda: f23().split([1, 1], 1), lambda: tf23().split([1, 1], 1), RuntimeError, ["(1, 1)", "3"]),
  "split_zero": (lambda: f23().split(0), lambda: tf23().split(0), RuntimeError, ["0"]),
  "chunk_zero": (lambda: f23().chunk(0), lambda: tf23().chunk(0), RuntimeError, ["0"]),
  "cat_sizes": (lambda: f23().cat(Tensor.ones(2, 4)), lambda: torch.cat([tf23(), torch.ones(2, 4)]), RuntimeError,
                ["(2, 3)", "(2, 4)", "0"]),
  "cat_ndim": (lambda: f23().cat(Tensor.ones(3), dim=1), lambda: torch.cat([tf23(), torch.ones(3)], 1), RuntimeError,
               ["(2, 3)", "(3,)"]),
  # torch's RuntimeError and tinygrad's IndexError
  "cat_0d": (lambda: Tensor(1.0).cat(Tensor(2.0)), lambda: torch.cat([torch.tensor(1.0), torch.tensor(2.0)]),
             (RuntimeError, IndexError), ["zero-dimensional", "0"]),
  "cat_empty_list": (lambda: Tensor.cat([]), lambda: torch.cat([]), ValueError, ["non-empty"]),
  "cat_not_tensor": (lambda: f23().cat([1, 2]), None, TypeError, ["list"]),
  "stack_shapes": (lambda: f23().stack(Tensor.ones(3, 2)), lambda: torch.stack([tf23(), torch.ones(3, 2)]),
                   RuntimeError, ["(2, 3)", "(3, 2)", "1"]),
  "stack_bad_dim": (lambda: f23().stack(f23(), dim=4), lambda: torch.stack([tf23(), tf23()], 4), IndexError, ["4"]),
  "meshgrid_2d": (lambda: f23().meshgrid(Tensor([1])), lambda: torch.meshgrid(tf23(), torch.tensor([1]),
                  indexing="ij"), RuntimeError, ["(2, 3)"]),
  "meshgrid_indexing": (lambda: Tensor([1]).meshgrid(Tensor([2]), indexing="ji"), lambda: torch.meshgrid(
                        torch.tensor([1]), torch.tensor([2]), indexing="ji"), ValueError, ["'ji'"]),
  "rearrange_axis_count": (lambda: f23().rearrange("a b c -> c b a"), None, RuntimeError, ["3 axes", "(2, 3)"]),
  "rearrange_size": (lambda: f23().rearrange("a (b c) -> a b c", b=2), None, ValueError, ["3", "['b', 'c']"]),
  # tinygrad's asserts: AssertionError
  "rearrange_underdetermined": (lambda: Tensor.zeros(8, 1).rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=2), None,
                                AssertionError, ["['a2', 'a3']"]),
  "rearrange_permuted_axis_size": (lambda: Tensor.zeros(8, 1).rearrange("(a1 a2 a3) b -> b a3 a2 a1", a1=2, a2=2,
                                   b=2), None, AssertionError, ["['b']", "[2]", "1"]),
}

# malformed einops patterns: a ValueError and an AssertionError (tinygrad's asserts)
BAD_PATTERNS = {
  "name starting with a digit": ("2b c -> c 2b", ["'2b'"]),
  "name starting with _": ("_x c -> c _x", ["'_x'"]),
  "name ending with _": ("x_ c -> c x_", ["'x_'"]),
  "two ellipses": ("... ... -> ...", ["'...'", "left"]),
  "two ellipses, one unicode": ("a \u2026 ... -> a", ["'...'", "left"]),
  "ellipsis in parentheses on the left": ("(a ...) -> a ...", ["'...'", "parentheses"]),
  "unclosed bracket": ("a (b -> a b", ["parentheses"]),
  "unopened bracket": ("a b) -> a b", ["parentheses"]),
  "nested brackets": ("((a b)) -> a b", ["parentheses"]),
  "two arrows": ("a b -> b -> a", ["'->'", "2"]),
  "no arrow": ("a b", ["'->'", "0"]),
  "name only on the left": ("a b -> a", ["['b'] only on the left"]),
  "names differ": ("a b -> a c", ["['b'] only on the left", "['c'] only on the right", "a b -> a c"]),
  "repeated name": ("a a -> a", ["['a'] repeated on the left"]),
}
ERRORS.update({f"rearrange {name}": (lambda pattern=pattern: f23().rearrange(pattern), None,
                                     (ValueError, AssertionError), fragments)
               for name, (pattern, fragments) in BAD_PATTERNS.items()})


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's deprecation warnings for some of these calls
@pytest.mark.parametrize("name", list(ERRORS))
def test_error(name):
  raises_like(*ERRORS[name])


def gather_index(x):
  return np.zeros(x.shape, np.int64)


def outward(d):
  """One further from 0: unsqueeze and stack take dims of the result, which has one dim more."""
  return d + (d > 0) - (d < 0)


# name: (our call, torch's call), both given the tensor and the dim
DIM_OPS = {
  "all": (lambda x, d: x.all(d), lambda x, d: x.all(d)),
  "any": (lambda x, d: x.any(d), lambda x, d: x.any(d)),
  "argmax": (lambda x, d: x.argmax(d), lambda x, d: x.argmax(d)),
  "argmin": (lambda x, d: x.argmin(d), lambda x, d: x.argmin(d)),
  "cummax": (lambda x, d: x.cummax(d), lambda x, d: x.cummax(d).values),
  "cumprod": (lambda x, d: x.cumprod(d), lambda x, d: x.cumprod(d)),
  "cumsum": (lambda x, d: x.cumsum(d), lambda x, d: x.cumsum(d)),
  "logcumsumexp": (lambda x, d: x.logcumsumexp(d), lambda x, d: x.logcumsumexp(d)),
  "logsumexp": (lambda x, d: x.logsumexp(d), lambda x, d: x.logsumexp(d)),
  "softmax": (lambda x, d: x.softmax(d), lambda x, d: x.softmax(d)),
  "log_softmax": (lambda x, d: x.log_softmax(d), lambda x, d: x.log_softmax(d)),
  "max": (lambda x, d: x.max(d), lambda x, d: x.amax(d)),
  "min": (lambda x, d: x.min(d), lambda x, d: x.amin(d)),
  "sum": (lambda x, d: x.sum(d), lambda x, d: x.sum(d)),
  "sum of two dims": (lambda x, d: x.sum((0, d)), lambda x, d: x.sum((0, d))),
  "mean": (lambda x, d: x.mean(d), lambda x, d: x.mean(d)),
  "prod": (lambda x, d: x.prod(d), lambda x, d: x.prod(d)),
  "var": (lambda x, d: x.var(d), lambda x, d: x.var(d)),
  "std_mean": (lambda x, d: x.std_mean(d), lambda x, d: torch.std_mean(x, d)),
  "flatten start": (lambda x, d: x.flatten(d), lambda x, d: x.flatten(d)),
  "flatten end": (lambda x, d: x.flatten(0, d), lambda x, d: x.flatten(0, d)),
  "flip": (lambda x, d: x.flip(d), lambda x, d: x.flip(d)),
  "gather": (lambda x, d: x.gather(d, Tensor(gather_index(x))),
             lambda x, d: x.gather(d, torch.tensor(gather_index(x)))),
  "repeat_interleave": (lambda x, d: x.repeat_interleave(2, d), lambda x, d: x.repeat_interleave(2, d)),
  "roll": (lambda x, d: x.roll(1, d), lambda x, d: x.roll(1, d)),
  "size": (lambda x, d: x.size(d), lambda x, d: x.size(d)),
  "split": (lambda x, d: x.split(1, d), lambda x, d: x.split(1, d)),
  "chunk": (lambda x, d: x.chunk(1, d), lambda x, d: x.chunk(1, d)),
  "squeeze": (lambda x, d: x.squeeze(d), lambda x, d: x.squeeze(d)),
  "squeeze of two dims": (lambda x, d: x.squeeze((0, d)), lambda x, d: x.squeeze((0, d))),
  "unsqueeze": (lambda x, d: x.unsqueeze(outward(d)), lambda x, d: x.unsqueeze(outward(d))),
  "stack": (lambda x, d: x.stack(x, dim=outward(d)), lambda x, d: torch.stack([x, x], outward(d))),
  "cat": (lambda x, d: x.cat(x, dim=d), lambda x, d: torch.cat([x, x], d)),
  "transpose": (lambda x, d: x.transpose(0, d), lambda x, d: x.transpose(0, d)),
  "unflatten": (lambda x, d: x.unflatten(d, (1, -1)), lambda x, d: x.unflatten(d, (1, -1))),
  "permute": (lambda x, d: x.permute(d, *range(1, x.ndim)), lambda x, d: x.permute(d, *range(1, x.ndim))),
}


@pytest.mark.parametrize("past", ["end", "start", "far"])
@pytest.mark.parametrize("shape", [(), (2, 3)], ids=str)
@pytest.mark.parametrize("name", sorted(DIM_OPS))
def test_out_of_range_dims_raise_like_torch(name, shape, past):
  """Just past either end, and far past: torch raises IndexError, whose message names the dim (RuntimeError where
  the call is wrong anyway, e.g. splitting a 0-d tensor or permuting with the wrong number of dims)."""
  ours, theirs = DIM_OPS[name]
  ndim = max(len(shape), 1)
  d = {"end": ndim, "start": -ndim - 1, "far": 7}[past]
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
  error, torch_error = raises_like(lambda: ours(Tensor(x), d), lambda: theirs(torch.from_numpy(x), d))
  if isinstance(torch_error, IndexError):
    assert str(outward(d) if name in ("unsqueeze", "stack") else d) in str(error), str(error)


# the other side of the rule: a 0-d tensor takes dims 0 and -1
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "logcumsumexp", "flatten start", "squeeze"])
def test_zero_d_tensors_accept_dims_0_and_minus_1(name):
  ours, theirs = DIM_OPS[name]
  for d in (0, -1):
    check(ours(Tensor(np.float32(2.5)), d), theirs(torch.tensor(2.5), d), dtypes.float32)
