"""PYLOOPS: the smallest complete refgrad backend, for docs/writing-a-backend.md.

It renders a linear program to Python source with one loop per thread axis and per reduce, "compiles" it
with Python's own compiler, and runs it on numpy buffers. Each primitive op calls refgrad's alu.py on
scalars, so the semantics are right by construction and the example can focus on the plugin contract.
"""
from __future__ import annotations

import marshal
import math
import sys

import numpy as np

from refgrad.codegen.contract import Capabilities
from refgrad.device import DeviceImpl, DeviceSpec
from refgrad.hookspecs import hookimpl
from refgrad.uop import GroupOp, Ops, UOp


class NumpyAllocator:
  """Memory: one numpy byte array per buffer."""

  def alloc(self, nbytes: int) -> np.ndarray:
    return np.zeros(nbytes, dtype=np.uint8)

  def free(self, handle: np.ndarray) -> None:
    pass

  def copyin(self, handle: np.ndarray, src: memoryview) -> None:
    handle[:] = np.frombuffer(src, dtype=np.uint8)

  def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = handle


class PyLoopsRenderer:
  """Program -> Python source. Values are numpy scalars named after their position in the program."""
  caps = Capabilities()

  def render(self, program) -> str:
    lines = [f"def {program.name}({', '.join(f'data{p.arg[0]}' for p in program.params)}):"]
    depth = 1
    for axis, size in enumerate(program.global_shape):
      if size > 1:
        lines.append("  " * depth + f"for gidx{axis} in range({size}):")
        depth += 1
    names: dict[UOp, str] = {p: f"data{p.arg[0]}" for p in program.params}
    for i, u in enumerate(program.uops):
      line, names[u], depth = self.line(i, u, names, depth)
      if line:
        lines.append("  " * depth + line)
        if u.op is Ops.RANGE:
          depth += 1
    return "\n".join(lines + ["  " * depth + "pass"]) + "\n"

  def line(self, i: int, u: UOp, names: dict[UOp, str], depth: int) -> tuple[str, str, int]:
    src = [names.get(s, "") for s in u.src]
    name = f"v{i}"
    if u.op is Ops.PARAM:
      return "", names[u], depth
    if u.op is Ops.SPECIAL:
      return "", f"np.int64(gidx{u.arg[0]})", depth
    if u.op is Ops.RANGE:
      return f"for {name} in range({u.arg[1]}):", f"np.int64({name})", depth
    if u.op is Ops.ENDRANGE:
      return "", "", depth - 1
    if u.op is Ops.CONST:  # inf and nan have no literal: float('inf') spells them
      value = f"float('{u.arg}')" if isinstance(u.arg, float) and not math.isfinite(u.arg) else repr(u.arg)
      return f"{name} = np.array({value}, dtype=dtypes.{u.dtype.name}.np)", name, depth
    if u.op is Ops.DEFINE_ACC:
      return f"{name} = np.array(alu.reduce_identity(Ops.{u.arg[1].name}, dtypes.{u.dtype.name}), " \
             f"dtype=dtypes.{u.dtype.name}.np)", name, depth
    if u.op is Ops.ACCUMULATE:
      acc = u.src[0]
      return f"{src[0]} = alu.exec_alu(Ops.{acc.arg[1].name}, dtypes.{acc.dtype.name}, {src[0]}, {src[1]})", "", depth
    if u.op is Ops.LOAD:
      value = f"{src[0]}.view(dtypes.{u.dtype.name}.np)[{src[1]}]"
      if len(u.src) > 2:  # gated: never touch memory when the lane is masked off
        value = f"({value} if {src[2]} else np.zeros((), dtypes.{u.dtype.name}.np))"
      return f"{name} = np.asarray({value})", name, depth
    if u.op is Ops.STORE:
      return f"{src[0]}.view(dtypes.{u.src[2].dtype.name}.np)[{src[1]}] = {src[2]}", "", depth
    if u.op in (Ops.CAST, Ops.BITCAST):
      fn = "exec_cast" if u.op is Ops.CAST else "exec_bitcast"
      return f"{name} = alu.{fn}(np.asarray({src[0]}), dtypes.{u.dtype.name})", name, depth
    if u.op in GroupOp.ALU:
      return f"{name} = alu.exec_alu(Ops.{u.op.name}, dtypes.{u.dtype.name}, {', '.join(src)})", name, depth
    raise NotImplementedError(f"PYLOOPS cannot render {u.op}")


class PythonCompiler:
  """Source -> bytes: Python's own compiler, marshalled. refgrad caches the bytes by content, under a key that
  names this Python: bytecode and the marshal format change between Python versions."""

  def __init__(self):
    self.cache_key = f"pyloops|{sys.version}|marshal {marshal.version}"

  def compile(self, source: str) -> bytes:
    return marshal.dumps(compile(source, "<pyloops kernel>", "exec"))


class PythonRuntime:
  """Bytes -> a runner that takes the buffers' handles (output first)."""

  def load(self, binary: bytes, program):
    from refgrad import alu
    from refgrad.dtype import dtypes
    namespace = {"np": np, "alu": alu, "dtypes": dtypes, "Ops": Ops}
    exec(marshal.loads(binary), namespace)
    return namespace[program.name]


def make_device() -> DeviceImpl:
  return DeviceImpl("PYLOOPS", NumpyAllocator(), renderer=PyLoopsRenderer(), compiler=PythonCompiler(),
                    runtime=PythonRuntime())


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("PYLOOPS", make_device, plugin="refgrad-pyloops", version="0.1.0")]
