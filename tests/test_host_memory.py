"""HostAllocator's buffers carry their address (HostMemory.address), which CPU kernels are launched with: it must
be where numpy reads and writes the buffer's bytes, for the buffer's whole life."""
import ctypes

import numpy as np

from refgrad import Tensor
from refgrad.backend_helpers import HostAllocator, HostMemory


def test_the_address_is_where_the_bytes_are():
  allocator = HostAllocator()
  memory = allocator.alloc(16)
  assert isinstance(memory, HostMemory) and memory.address == memory.ctypes.data
  ctypes.memmove(memory.address, bytes(range(16)), 16)  # written at the address, read through numpy
  out = bytearray(16)
  allocator.copyout(memoryview(out), memory)
  assert out == bytes(range(16))
  allocator.copyin(memory, memoryview(b"\xff" * 16))  # written through numpy, read at the address
  assert ctypes.string_at(memory.address, 16) == b"\xff" * 16


def test_an_empty_buffer_gets_memory_of_its_own():
  first, second = HostAllocator().alloc(0), HostAllocator().alloc(0)
  assert first.nbytes == second.nbytes == 1 and first.address != second.address


def test_clang_kernels_read_and_write_buffers_at_their_addresses():
  a = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
  got = ((Tensor(a, device="CLANG") * 3 + 1).sum(1)).numpy()
  np.testing.assert_array_equal(got, (a * np.float32(3) + np.float32(1)).sum(1))


def test_a_freed_array_serves_the_next_buffer_of_its_size_zeroed():
  allocator = HostAllocator()
  memory = allocator.alloc(64)
  memory[:] = 7
  allocator.free(memory)
  again = allocator.alloc(64)
  assert again is memory and again.address == again.ctypes.data and not again.any()
  assert allocator.alloc(64) is not memory  # handed out once only


def test_the_pool_keeps_at_most_pool_bytes(monkeypatch):
  monkeypatch.setattr(HostAllocator, "POOL_BYTES", 100)
  allocator = HostAllocator()
  big, small = allocator.alloc(80), allocator.alloc(40)
  allocator.free(big)
  allocator.free(small)  # 120 bytes in all: not kept
  assert allocator.alloc(40) is not small and allocator.alloc(80) is big
