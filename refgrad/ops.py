"""The operations of the IR: `Ops` and the groups rules match on (`GroupOp`). The bottom layer: it imports nothing
from refgrad, so the op semantics (refgrad/alu.py), the IR (refgrad/uop.py) and everything above can use it."""
from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
  # unary ALU
  NEG = auto(); RECIP = auto(); SQRT = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); TRUNC = auto()  # noqa: E702
  # binary ALU
  ADD = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
  # ternary ALU
  WHERE = auto()
  # type changes
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # leaves
  CONST = auto(); DEVICE = auto(); BUFFER = auto()  # noqa: E702
  # tensor graph: movement, reduce, realization points
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  REDUCE_AXIS = auto(); CONTIGUOUS = auto(); COPY = auto(); ASSIGN = auto(); DETACH = auto()  # noqa: E702
  # autograd only: the value of src[0], with a gradient from a named rule in gradient.py (arg: the rule's key)
  CUSTOM_GRAD = auto()
  # a tensor over several devices: src[i] is device i's part; arg (axis, bounds): the axis split between the parts
  # (None: each part is the whole tensor) and the range of it each part holds (refgrad/multi.py)
  MULTI = auto()
  # the combination (arg[0]: ADD, MUL or MAX) of partial results held by several devices, on device arg[1]
  ALLREDUCE = auto()
  # symbolic sizes: a variable (arg (name, min, max)) and a variable bound to a value (src (DEFINE_VAR, CONST))
  DEFINE_VAR = auto(); BIND = auto()  # noqa: E702
  # kernel programs
  PARAM = auto(); SPECIAL = auto(); RANGE = auto(); REDUCE = auto(); LOAD = auto(); STORE = auto()  # noqa: E702
  DEFINE_ACC = auto(); ACCUMULATE = auto(); ENDRANGE = auto(); SINK = auto()  # noqa: E702
  # GPU-shaped kernel programs (codegen/gpu.py): work-group indices, local memory, barriers
  LOCAL_INDEX = auto(); GROUP_INDEX = auto(); DEFINE_LOCAL = auto(); BARRIER = auto()  # noqa: E702

  def __repr__(self) -> str:
    return f"Ops.{self.name}"


class GroupOp:
  Unary = frozenset({Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE,
                      Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE})
  Transcendental = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})  # a libm call, not one instruction
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  ReduceOps = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
