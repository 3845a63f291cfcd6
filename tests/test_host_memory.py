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
