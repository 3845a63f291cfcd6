"""The operations of the IR: `Ops`, every ALU op's facts in one record (`OP_FACTS`), and the groups rules match on
(`GroupOp`, read off the records). The bottom layer: it imports only dtypes, so the op semantics (refgrad/alu.py),
the IR (refgrad/uop.py) and everything above can use it. What an op computes is refgrad/alu.py's; how each backend
writes it is its renderer's rule table (docs/writing-a-backend.md)."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import auto

from refgrad.dtype import DType, dtypes


class _OpsType(type):
  """Ops's metaclass: each `name = auto()` of the class body becomes a member (an instance named `name`, numbered
  from 1 in order), which the class lists (`__members__`, iteration, `Ops["ADD"]`), as an Enum's. Not enum.Enum:
  Python 3.11's EnumType has a __getattr__, which sends every attribute read on the class through a Python-level
  hook, so `Ops.ADD` cost 0.2 us, as much as a function call, and graph code reads ops tens of thousands of times a
  training step (0.04 us now)."""

  def __new__(mcs, name: str, bases: tuple, namespace: dict) -> type:
    names = [key for key, value in namespace.items() if isinstance(value, auto)]
    cls = super().__new__(mcs, name, bases, {k: v for k, v in namespace.items() if k not in names})
    cls.__members__ = {}
    for number, member_name in enumerate(names, 1):
      member = object.__new__(cls)
      member.name, member.value = member_name, number
      cls.__members__[member_name] = member
      type.__setattr__(cls, member_name, member)
    return cls

  def __iter__(cls) -> Iterator[Ops]:
    return iter(cls.__members__.values())

  def __len__(cls) -> int:
    return len(cls.__members__)

  def __getitem__(cls, name: str) -> Ops:
    return cls.__members__[name]


class Ops(metaclass=_OpsType):
  """The op of a UOp; members compare and hash by identity (object's own ==, in C)."""
  __slots__ = ("name", "value")
  name: str
  value: int
  __members__: dict[str, Ops]

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

  def __reduce__(self) -> tuple:
    return getattr, (Ops, self.name)  # the member itself, in another process or in a copy


@dataclass(frozen=True)
class OpFacts:
  """What an ALU op is, as every layer reads it: typing (alu.py checks it), exactness (the oracle kit holds a backend
  to it), cost (the optimizer and the scheduler weigh kernels by it), spelling (formulas in messages). docs/SPEC.md
  states the same facts in prose; tests/test_spec_tables.py keeps the two equal."""
  arity: int
  kinds: str  # the dtype kinds it is defined on: 'b' bool, 'i' signed int, 'u' unsigned int, 'f' float
  commutative: bool = False
  comparison: bool = False  # its result is bool, whatever its operands' dtype
  # None: bit-exact. Else the most ULPs a backend's result may be from the reference, per float dtype ...
  ulp_bound: Mapping[DType, int] | None = None
  ulp_range: float = math.inf  # ... for |x| up to this (beyond it, only a number in the op's range is required)
  cost: int = 1  # about how many multiply-adds it costs
  infix: str = ""  # how a formula writes it between its operands (Python's spelling), for sizes and rules shown

  @property
  def transcendental(self) -> bool:
    """The inexact ops: computed by a library to within ulp_bound, not correctly rounded."""
    return self.ulp_bound is not None


LIBM_ULPS: Mapping[DType, int] = {dtypes.float16: 1, dtypes.bfloat16: 1, dtypes.float32: 2, dtypes.float64: 2}
# A libm exp2/log2/sin/sqrt call costs about as much as this many multiply-adds (measured on CLANG: a 512K-element
# exp kernel takes 2.7 ms, a 512K x 64 multiply-add reduction about 1 ms).
LIBM_COST = 16

# On bool, ADD is OR, MUL is AND and MAX is OR (numpy's and torch's meaning); NEG has no bool meaning. SIN's argument
# reduction of larger |x| differs between libraries, so its bound holds for |x| <= 1e4 only.
OP_FACTS: dict[Ops, OpFacts] = {
  Ops.NEG: OpFacts(1, "iuf"), Ops.RECIP: OpFacts(1, "f"), Ops.SQRT: OpFacts(1, "f", cost=LIBM_COST),
  Ops.EXP2: OpFacts(1, "f", ulp_bound=LIBM_ULPS, cost=LIBM_COST),
  Ops.LOG2: OpFacts(1, "f", ulp_bound=LIBM_ULPS, cost=LIBM_COST),
  Ops.SIN: OpFacts(1, "f", ulp_bound=LIBM_ULPS, ulp_range=1e4, cost=LIBM_COST), Ops.TRUNC: OpFacts(1, "f"),
  Ops.ADD: OpFacts(2, "biuf", commutative=True, infix="+"), Ops.MUL: OpFacts(2, "biuf", commutative=True, infix="*"),
  Ops.FDIV: OpFacts(2, "f", infix="/"), Ops.IDIV: OpFacts(2, "iu", infix="//"), Ops.MOD: OpFacts(2, "iuf", infix="%"),
  Ops.MAX: OpFacts(2, "biuf", commutative=True),
  Ops.CMPLT: OpFacts(2, "biuf", comparison=True, infix="<"),
  Ops.CMPNE: OpFacts(2, "biuf", commutative=True, comparison=True, infix="!="),
  Ops.AND: OpFacts(2, "biu", commutative=True, infix="&"), Ops.OR: OpFacts(2, "biu", commutative=True, infix="|"),
  Ops.XOR: OpFacts(2, "biu", commutative=True, infix="^"), Ops.SHL: OpFacts(2, "iu", infix="<<"),
  Ops.SHR: OpFacts(2, "iu", infix=">>"),
  Ops.WHERE: OpFacts(3, "biuf"),
}


def infix(op: Ops) -> str:
  """How a formula writes `op` between its operands ('' for an op written as a call)."""
  facts = OP_FACTS.get(op)
  return "" if facts is None else facts.infix


def _ops_where(test: Callable[[OpFacts], bool]) -> frozenset[Ops]:
  return frozenset(op for op, facts in OP_FACTS.items() if test(facts))


class GroupOp:
  Unary = _ops_where(lambda f: f.arity == 1)
  Binary = _ops_where(lambda f: f.arity == 2)
  Ternary = _ops_where(lambda f: f.arity == 3)
  ALU = frozenset(OP_FACTS)
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Comparison = _ops_where(lambda f: f.comparison)
  Commutative = _ops_where(lambda f: f.commutative)
  Transcendental = _ops_where(lambda f: f.transcendental)
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  ReduceOps = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
