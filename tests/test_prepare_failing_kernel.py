"""DeviceImpl.prepare with a kernel that does not compile in its batch: the batch is split until the other kernels
compile, they load at once (none is compiled again when it runs) and compute what the reference computes, and the
kernel that fails raises its own error, showing only its own code, when its turn comes, as without prepare."""
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import check

import refgrad.compile_cache as compile_cache
from refgrad import Device, Tensor
from refgrad.codegen.pipeline import compile_ast
from refgrad.device import LRU
from refgrad.uop import Ops

sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402

INSTANCE = 5  # a numbered instance of the device under test, whose runners only these tests load
X = np.linspace(-3.0, 5.0, 16, dtype=np.float32).reshape(4, 4)
Y = np.linspace(0.5, 2.0, 16, dtype=np.float32).reshape(4, 4)
PROGRAMS = [  # one kernel each; only the fourth has a MAX, the op the faulty compilers reject
  lambda x, y: x + y, lambda x, y: x * y - 1.0, lambda x, y: (x - y).sum(1), lambda x, y: x.maximum(y) * 2.0,
  lambda x, y: x / y, lambda x, y: (x * 3.0).sum(0), lambda x, y: x * x + y, lambda x, y: (x + 2.0) * (y - 0.5),
]
FAILING = 3
KERNEL = re.compile(r"void @?(\w+)\(")  # a kernel's signature in C, OpenCL C or LLVM IR


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setattr(compile_cache, "_cache_estimate", None)


def outputs_on(device: str) -> list[Tensor]:
  x, y = Tensor(X, device=device), Tensor(Y, device=device)
  return [fn(x, y) for fn in PROGRAMS]


def prepare_all(device: str, outputs: list[Tensor]) -> list:
  """Prepare every kernel of the outputs' schedule in one call, as realize does; returns the kernels' programs."""
  impl = Device[device]
  asts = [item.ast for item in outputs[0].schedule(*outputs[1:]) if not item.is_transfer]
  impl.prepare([(ast, None) for ast in asts])
  return [compile_ast(ast, impl.caps) for ast in asts]


def has_max(program) -> bool:
  return any(u.op is Ops.MAX for u in program.uops)


def check_the_others(outputs: list[Tensor]) -> None:
  for i, (fn, out) in enumerate(zip(PROGRAMS, outputs)):
    if i != FAILING:
      check(out, fn(Tensor(X, device="PYTHON"), Tensor(Y, device="PYTHON")).numpy())


def test_the_kernels_of_a_batch_with_one_that_does_not_compile_load_at_once(fresh_cache, monkeypatch):
  with broken_devices.registered():
    device = "BATCHED_COMPILE_ERROR"
    impl, compiler = Device[device], Device[device].compiler
    monkeypatch.setattr(impl, "_runners", LRU(impl.runner_cache))
    monkeypatch.setattr(compiler, "batches", [])
    monkeypatch.setattr(compiler, "singles", 0)
    outputs = outputs_on(device)
    programs = prepare_all(device, outputs)
    assert len(programs) == len(PROGRAMS) and sum(map(has_max, programs)) == 1
    runs = len(compiler.batches) + compiler.singles  # halves down to the failing kernel: two runs a level
    assert compiler.batches[0] == len(programs) and runs <= 1 + 2 * math.ceil(math.log2(len(programs)))
    assert len(impl._runners) == len(programs) - 1
    check_the_others(outputs)
    assert len(compiler.batches) + compiler.singles == runs  # nothing compiled when they ran
    with pytest.raises(RuntimeError, match="cannot take MAX"):
      outputs[FAILING].realize()


class FailsOnMax:
  """A device's renderer whose kernels with a MAX op are not valid code (the body starts with a bad line)."""

  def __init__(self, renderer):
    self.renderer, self.caps = renderer, renderer.caps

  def render(self, program) -> str:
    source = self.renderer.render(program)
    if not has_max(program):
      return source
    kernel = list(KERNEL.finditer(source))[-1]
    return source[:kernel.end()] + source[kernel.end():].replace("{\n", "{\n  not code at all;\n", 1)


class Counting:
  """A compiler that records the size of each batch it is given (1 for `compile`)."""

  def __init__(self, compiler, calls: list[int]):
    self.compiler, self.cache_key, self.calls = compiler, compiler.cache_key, calls

  def compile(self, source: str) -> bytes:
    self.calls.append(1)
    return self.compiler.compile(source)

  def compile_batch(self, sources: list[str]) -> list[bytes]:
    self.calls.append(len(sources))
    return self.compiler.compile_batch(sources)


def test_a_real_compiler_loads_the_rest_of_the_batch_and_names_the_kernel_it_rejects(refgrad_device, fresh_cache,
                                                                                     monkeypatch):
  device = f"{refgrad_device}:{INSTANCE}"
  impl = Device[device]
  if getattr(impl.compiler, "compile_batch", None) is None:
    pytest.skip(f"{refgrad_device} compiles one kernel at a time")
  monkeypatch.setattr(impl, "_runners", LRU(impl.runner_cache))
  monkeypatch.setattr(impl, "renderer", FailsOnMax(impl.renderer))
  calls = []
  monkeypatch.setattr(impl, "compiler", Counting(impl.compiler, calls))
  outputs = outputs_on(device)
  programs = prepare_all(device, outputs)
  assert calls[0] == len(programs) and len(calls) <= 1 + 2 * math.ceil(math.log2(len(programs)))
  assert len(impl._runners) == len(programs) - 1
  runs = len(calls)
  check_the_others(outputs)
  assert len(calls) == runs  # nothing compiled when they ran
  with pytest.raises(Exception, match="not code at all") as info:
    outputs[FAILING].realize()
  failing = next(p for p in programs if has_max(p))
  assert KERNEL.findall(str(info.value)) == [failing.name]  # its own code alone, not the batch's
