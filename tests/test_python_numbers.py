"""Python numbers entering a Tensor (docs/SPEC.md, "Python numbers"): the dtype an int gets by itself, wrapping into
an integer dtype where the value is stored or combined by +, -, *, &, |, ^, exact comparisons, and a clear error
everywhere else. The oracle is Python's own integer arithmetic taken modulo 2**bits, written out here; torch checks
the float cases and the error types."""
import operator

import numpy as np
import pytest
import torch

from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")

# the edges the issue named, and their negatives
EDGES = [2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 2**70]
VALUES = EDGES + [-v for v in EDGES] + [0, -1, 255, -129]
INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]


def fits_64_bits(v: int) -> bool:
  return -2**63 <= v < 2**64


def wrapped(v: int, dt) -> int:
  """v modulo 2**bits, read back as dt reads its bits."""
  bits = np.iinfo(dt.np).bits
  v %= 2**bits
  return v - 2**bits if np.iinfo(dt.np).min < 0 and v >= 2**(bits - 1) else v


def inferred(v: int):
  """The dtype torch would give (int64), narrowed to int32 when it holds v, and uint64 where torch refuses."""
  for dt in (dtypes.int32, dtypes.int64, dtypes.uint64):
    if np.iinfo(dt.np).min <= v <= np.iinfo(dt.np).max:
      return dt
  return None


@pytest.mark.parametrize("v", VALUES)
def test_an_int_by_itself_gets_the_dtype_that_holds_it(v):
  want = inferred(v)
  for make in (lambda: Tensor(v), lambda: Tensor([v, 1]), lambda: Tensor.full((2,), v)):
    if want is None:
      with pytest.raises(OverflowError, match="does not fit any integer dtype"):
        make()
      continue
    t = make()
    assert t.dtype == want
    assert t.reshape(-1)[0].item() == v


@pytest.mark.parametrize("v", VALUES)
@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
def test_an_int_given_an_integer_dtype_wraps_like_c(v, dt):
  makers = {"Tensor(v)": lambda: Tensor(v, dtype=dt), "Tensor([v])": lambda: Tensor([v, 1], dtype=dt),
            "full": lambda: Tensor.full((2,), v, dtype=dt), "setitem": lambda: _set_first(Tensor([0, 1], dtype=dt), v)}
  for name, make in makers.items():
    if not fits_64_bits(v):
      with pytest.raises(OverflowError):
        make()
      continue
    assert make().reshape(-1)[0].item() == wrapped(v, dt), name


def _set_first(t: Tensor, v: int) -> Tensor:
  t[0] = v
  return t


@pytest.mark.parametrize("v", VALUES)
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.int64], ids=str)
def test_ring_ops_with_an_int_are_exact_modulo_two_to_the_bits(v, dt):
  base = [1, -2, 7] if dt != dtypes.uint8 else [1, 2, 255]
  t = Tensor(base, dtype=dt)
  realized = (t + 0).realize()  # a realized intermediate, not only a constant-folded leaf
  ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "r-": lambda a, b: b - a, "*": lambda a, b: a * b,
         "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b}
  for name, op in ops.items():
    for x in (t, realized):
      if not fits_64_bits(v):
        with pytest.raises(OverflowError):
          op(x, v)
        continue
      want = [wrapped(op(a, v), dt) for a in base]
      assert op(x, v).tolist() == want, f"{base} {name} {v}"


@pytest.mark.parametrize("v", VALUES)
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint64], ids=str)
def test_comparisons_with_an_int_outside_the_dtype_are_exact(v, dt):
  base = [0, 1, int(np.iinfo(dt.np).max), int(np.iinfo(dt.np).min)]
  t = Tensor(base, dtype=dt)
  ops = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
         "==": lambda a, b: a == b, "!=": lambda a, b: a != b}
  for name, op in ops.items():
    assert op(t, v).tolist() == [op(a, v) for a in base], f"{base} {name} {v}"
    assert op(v, t).tolist() == [op(v, a) for a in base], f"{v} {name} {base}"
  low, high = min(v, 0), max(v, 0)  # a bound outside the dtype clips nothing: exact without it
  assert t.clip(low, high).tolist() == [min(max(a, low), high) for a in base]


@pytest.mark.parametrize("v", [2**31, -2**31 - 1, 2**40, 2**63])
def test_ops_where_wrapping_would_be_wrong_refuse_the_int(v):
  t = Tensor([1, -2], dtype=dtypes.int32)
  refused = {"//": lambda: t // v, "%": lambda: t % v, "idiv": lambda: t.idiv(v), "pow": lambda: t.pow(v),
             "<<": lambda: t << v, "maximum": lambda: t.maximum(v) if v > 0 else t.minimum(v)}
  for name, op in refused.items():
    with pytest.raises(RuntimeError, match="without overflow") as info:
      op()
    assert isinstance(info.value, OverflowError), name
  # the side of max/min where the value does not matter is exact
  assert (t.minimum(v) if v > 0 else t.maximum(v)).tolist() == [1, -2]


@pytest.mark.parametrize("v", [2**31, 2**63 - 1, 2**64, 2**70, -2**70])
def test_a_large_int_next_to_a_float_tensor_rounds_as_torch(v):
  x = [1.5, -0.0]
  got = (Tensor(x) + v).numpy()
  want = (torch.tensor(x) + float(v)).numpy()
  np.testing.assert_array_equal(got, want)
  with pytest.raises(OverflowError, match="too large"):
    Tensor(x) + 2**1100


@pytest.mark.parametrize("start", [2**31 - 2, 2**63 - 2, -2**31 - 1, 2**64 - 3])
def test_arange_over_large_ints_holds_them(start):
  got = Tensor.arange(start, start + 3)
  assert got.tolist() == [start, start + 1, start + 2]
  assert got.dtype == inferred(start + 2 if start > 0 else start)
  assert Tensor.arange(0, 300, 100, dtype=dtypes.int8).tolist() == [wrapped(v, dtypes.int8) for v in (0, 100, 200)]


def test_the_readme_int8_example_wraps():
  i = Tensor([7, -7, 255], dtype=dtypes.int8)
  values = [7, -7, -1]
  assert i.tolist() == values
  assert (i // 2).tolist() == [v // 2 for v in values]
  assert i.idiv(2).tolist() == [int(v / 2) for v in values]
  assert (i * 2).tolist() == [wrapped(v * 2, dtypes.int8) for v in values]


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.bool], ids=str)
def test_only_float_tensors_require_gradients(dt):
  makers = {"Tensor": lambda: Tensor([1, 0], dtype=dt, requires_grad=True),
            "full": lambda: Tensor.full((2,), 1, dtype=dt, requires_grad=True),
            "requires_grad_": lambda: Tensor([1, 0], dtype=dt).requires_grad_(),
            "attribute": lambda: setattr(Tensor([1, 0], dtype=dt), "requires_grad", True)}
  for make in makers.values():
    with pytest.raises(RuntimeError, match=f"floating point.*{dt.name}"):
      make()
    with pytest.raises(RuntimeError):  # torch refuses the same
      torch.tensor([1, 0], dtype=getattr(torch, dt.name), requires_grad=True)
  assert Tensor([1, 0], dtype=dt, requires_grad=False).requires_grad is False


def test_a_float_tensor_from_ints_gets_its_gradient():
  t = Tensor([1, 2], requires_grad=False).float().requires_grad_()
  (t * 3).sum().backward()
  assert t.grad.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "floordiv", "lt", "eq"])
def test_a_numpy_scalar_on_the_left_gives_a_tensor(op):
  """numpy's operators defer to the tensor's reflected ones, as they do to torch's: the result was an ndarray."""
  def apply(x):
    return getattr(operator, op)(np.float32(1.5), x)
  a = np.array([1.0, -2.0, 4.0], np.float32)
  got, want = apply(Tensor(a)), apply(torch.from_numpy(a))
  assert isinstance(got, Tensor), type(got)
  np.testing.assert_array_equal(got.numpy(), want.numpy(), strict=True)
