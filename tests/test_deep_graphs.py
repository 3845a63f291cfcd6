"""Lazy graphs far deeper than Python's recursion limit (the scheduler builds kernels by recursion): loops of
hundreds of unrealized steps, as iterative code writes them, give numpy's values bit for bit on every device."""
import numpy as np
import pytest

from refgrad import Tensor

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device

STEPS = 400  # 800 nodes in a chain: past the 1000 frames Python allows, at three a node


def test_an_elementwise_loop_never_realized():
  x, want = Tensor([1.0, -2.0, 0.5, -0.0]), np.float32([1.0, -2.0, 0.5, -0.0])
  for _ in range(STEPS):
    x = x * 1.001 + 0.5
    want = want * np.float32(1.001) + np.float32(0.5)
  np.testing.assert_array_equal(x.numpy(), want)


def test_a_loop_of_contiguous_steps():
  x, want = Tensor([3.0, -1.0]), np.float32([3.0, -1.0])
  for _ in range(STEPS // 2):
    x = (x * 0.75 - 0.25).contiguous()
    want = want * np.float32(0.75) - np.float32(0.25)
  np.testing.assert_array_equal(x.numpy(), want)


def test_a_loop_of_assigns_into_a_realized_tensor():
  w, want = Tensor([1.0, 2.0, -4.0]).contiguous().realize(), np.float32([1.0, 2.0, -4.0])
  for _ in range(STEPS // 2):
    w.assign(w * 0.999 + 0.25)
    want = want * np.float32(0.999) + np.float32(0.25)
  np.testing.assert_array_equal(w.numpy(), want)


def test_a_loop_of_reductions_feeding_the_next_step():
  """Integer sums and maxima (exact in any order) broadcast back into every step."""
  start = np.arange(48, dtype=np.int32).reshape(6, 8) * 37 % 101
  y, want = Tensor(start), start.copy()
  for _ in range(STEPS // 4):
    y = (y * 3 + y.sum(0, keepdim=True) - y.max(1, keepdim=True)) & 1023
    want = (want * 3 + want.sum(0, keepdims=True) - want.max(1, keepdims=True)) & 1023
  np.testing.assert_array_equal(y.numpy(), want)
