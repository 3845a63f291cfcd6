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
from refgrad.codegen.walker import ProgramWalker
from refgrad.device import DeviceImpl
from refgrad.hookspecs import hookimpl
from refgrad.ops import OP_FACTS
from refgrad.registry import DeviceSpec
from refgrad.standalone import PY_CHECKER, PYTHON_DRIVER_RUN, RUN_SCRIPT, StandaloneCase, py_data
from refgrad.uop import Ops, UOp


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
  """Program -> Python source: a function with one `for` per thread axis and per `RANGE`."""
  caps = Capabilities()

  def render(self, program) -> str:
    return PyLoopsKernel(program).source()


class PyLoopsKernel(ProgramWalker):
  """One program being written: its lines, and the name of each value (numpy scalars, named after their position
  in the program). PYLOOPS_RULES says how each op is written."""

  def __init__(self, program):
    super().__init__(program)
    self.names: dict[UOp, str] = {p: f"data{p.arg[0]}" for p in program.params}
    self.lines = [f"def {program.name}({', '.join(self.names.values())}):"]
    self.depth = 1

  def emit(self, line: str) -> None:
    self.lines.append("  " * self.depth + line)

  def operand(self, u: UOp) -> str:
    return self.names[u]

  def bind(self, i: int, u: UOp, value: str) -> None:
    self.names[u] = f"v{i}"
    self.emit(f"v{i} = {value}")

  def source(self) -> str:
    for axis, size in enumerate(self.program.global_shape):
      if size > 1:
        self.emit(f"for gidx{axis} in range({size}):")
        self.depth += 1
    self.walk((i, None) for i in range(len(self.program.uops)))  # each uop on its own: no split reductions
    self.emit("pass")
    return "\n".join(self.lines) + "\n"


def _parameter(k: PyLoopsKernel, u: UOp) -> None:
  """A buffer is a parameter of the function (data0, data1, ...), named before the walk."""


def _thread_index(k: PyLoopsKernel, u: UOp) -> None:
  k.names[u] = f"np.int64(gidx{u.arg[0]})"


def _open_loop(k: PyLoopsKernel, u: UOp) -> None:
  k.emit(f"for ridx{u.arg[0]} in range({u.arg[1]}):")
  k.names[u] = f"np.int64(ridx{u.arg[0]})"
  k.depth += 1


def _close_loop(k: PyLoopsKernel, u: UOp) -> None:
  k.depth -= 1


def _constant(k: PyLoopsKernel, u: UOp) -> str:
  value = f"float('{u.arg}')" if isinstance(u.arg, float) and not math.isfinite(u.arg) else repr(u.arg)  # inf, nan
  return f"np.array({value}, dtype=dtypes.{u.dtype.name}.np)"


def _accumulator(k: PyLoopsKernel, u: UOp) -> str:
  return f"np.array(alu.reduce_identity(Ops.{u.arg[1].name}, dtypes.{u.dtype.name}), dtype=dtypes.{u.dtype.name}.np)"


def _accumulate(k: PyLoopsKernel, u: UOp) -> None:
  acc, value = (k.names[s] for s in u.src)
  k.emit(f"{acc} = {k.apply(u.src[0].arg[1], u.src[0].dtype, acc, value)}")


def _load(k: PyLoopsKernel, u: UOp) -> str:
  value = f"{k.names[u.src[0]]}.view(dtypes.{u.dtype.name}.np)[{k.names[u.src[1]]}]"
  if len(u.src) > 2:  # gated: never touch memory when the lane is masked off
    value = f"({value} if {k.names[u.src[2]]} else np.zeros((), dtypes.{u.dtype.name}.np))"
  return f"np.asarray({value})"


def _store(k: PyLoopsKernel, u: UOp) -> None:
  buffer, index, value = (k.names[s] for s in u.src)
  k.emit(f"{buffer}.view(dtypes.{u.src[2].dtype.name}.np)[{index}] = {value}")


def _cast(k: PyLoopsKernel, u: UOp) -> str:
  return f"alu.exec_cast(np.asarray({k.names[u.src[0]]}), dtypes.{u.dtype.name})"


def _bitcast(k: PyLoopsKernel, u: UOp) -> str:
  return f"alu.exec_bitcast(np.asarray({k.names[u.src[0]]}), dtypes.{u.dtype.name})"


def _alu(op: Ops):
  """An ALU op: alu.py's exec_alu on the operands, whose dtype the rule gets (a comparison's result is bool)."""
  def rule(k: PyLoopsKernel, dtype, *operands: str) -> str:
    result = "bool" if OP_FACTS[op].comparison else dtype.name
    return f"alu.exec_alu(Ops.{op.name}, dtypes.{result}, {', '.join(operands)})"
  return rule


PYLOOPS_RULES = {
  Ops.PARAM: _parameter, Ops.SPECIAL: _thread_index, Ops.RANGE: _open_loop, Ops.ENDRANGE: _close_loop,
  Ops.CONST: _constant, Ops.DEFINE_ACC: _accumulator, Ops.ACCUMULATE: _accumulate, Ops.LOAD: _load,
  Ops.STORE: _store, Ops.CAST: _cast, Ops.BITCAST: _bitcast, **{op: _alu(op) for op in OP_FACTS},
}
PyLoopsKernel.rules = PYLOOPS_RULES


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


def standalone_files(case: StandaloneCase, device: DeviceImpl) -> dict[str, str]:
  """kernel.py (the rendered function) and driver.py, which runs it on the case's buffers and judges buffer 0 with
  refgrad.standalone's checker. PYLOOPS kernels call refgrad's alu.py, so this driver imports refgrad; a real
  backend's reproducer needs only its own compiler or driver."""
  header = "import sys\n\nfrom refgrad import alu\nfrom refgrad.dtype import dtypes\nfrom refgrad.uop import Ops\n"
  driver = header + PY_CHECKER + "\n\n" + py_data(case) + f"KERNEL = {case.program.name!r}\n" + PYLOOPS_DRIVER
  return {"kernel.py": case.source, "driver.py": driver, RUN_SCRIPT: PYTHON_DRIVER_RUN}


PYLOOPS_DRIVER = """

def main():
  namespace = {"np": np, "alu": alu, "dtypes": dtypes, "Ops": Ops}
  with open("kernel.py") as f:
    exec(f.read(), namespace)
  buffers = [np.frombuffer(data, np.uint8).copy() for data in INIT]
  namespace[KERNEL](*buffers)
  bad = check(buffers[0][:len(EXPECTED)].tobytes(), EXPECTED, SKIP, ABS_BOUND, SIZE, EXP_BITS, MAN_BITS, ULP_BOUND)
  print(f"{bad} of {int((~SKIP).sum())} judged lanes differ from the reference")
  sys.exit(1 if bad else 0)


main()
"""


def make_device() -> DeviceImpl:
  return DeviceImpl("PYLOOPS", NumpyAllocator(), renderer=PyLoopsRenderer(), compiler=PythonCompiler(),
                    runtime=PythonRuntime(), standalone=standalone_files)


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec("PYLOOPS", make_device, plugin="refgrad-pyloops", version="0.1.0")]
