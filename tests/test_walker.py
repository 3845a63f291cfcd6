"""The renderers' shared walker (refgrad/codegen/walker.py): a renderer is one {op: rule} table over it. The C-style
table covers every op a program can hold, and a walker without a rule for an op says which renderer and op."""
import pytest

from refgrad import Tensor
from refgrad.codegen.cstyle import C_RULES
from refgrad.codegen.pipeline import compile_ast
from refgrad.codegen.walker import ProgramWalker
from refgrad.ops import OP_FACTS
from refgrad.uop import Ops, UOp

# what a CPU program holds besides ALU ops, and what a GPU-shaped one adds (docs/writing-a-backend.md)
PROGRAM_OPS = {Ops.PARAM, Ops.SPECIAL, Ops.CONST, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.DEFINE_ACC,
               Ops.RANGE, Ops.ENDRANGE, Ops.ACCUMULATE}
GPU_OPS = {Ops.LOCAL_INDEX, Ops.GROUP_INDEX, Ops.DEFINE_LOCAL, Ops.BARRIER}


def test_the_c_table_renders_every_op_of_a_program():
  assert set(C_RULES) == set(OP_FACTS) | PROGRAM_OPS | GPU_OPS


def _call(op: Ops):
  """An ALU op as a call on its operands: MUL(v2, v3)."""
  return lambda w, dtype, *operands: f"{op.name}({', '.join(operands)})"


def _store(w, u: UOp) -> None:
  buffer, index, value = (w.operand(s) for s in u.src)
  w.lines.append(f"{buffer}[{index}] = {value}")


class Listing(ProgramWalker):
  """A walker that writes each value as `v<i> = <its rule's text>`: what a renderer of one's own writes."""
  rules = {Ops.PARAM: lambda w, u: None, Ops.SPECIAL: lambda w, u: f"gidx{u.arg[0]}",
           Ops.CONST: lambda w, u: repr(u.arg), Ops.LOAD: lambda w, u: f"{w.operand(u.src[0])}[{w.operand(u.src[1])}]",
           Ops.STORE: _store, **{op: _call(op) for op in OP_FACTS}}

  def __init__(self, program):
    super().__init__(program)
    self.names: dict[UOp, str] = {p: f"data{p.arg[0]}" for p in program.params}
    self.lines: list[str] = []

  def operand(self, u: UOp) -> str:
    return self.names[u]

  def bind(self, i: int, u: UOp, value: str) -> None:
    self.names[u] = f"v{i}"
    self.lines.append(f"v{i} = {value}")


def test_a_walker_of_ones_own_renders_through_its_table():
  program = compile_ast((Tensor([1.0, 2.0]).contiguous().realize() * 3 + 1).schedule()[-1].ast)
  walker = Listing(program)
  walker.walk((i, None) for i in range(len(program.uops)))
  values = dict(line.split(" = ") for line in walker.lines)  # e.g. v1 = gidx0, v3 = data1[v1], v5 = MUL(v3, v4)
  assert "gidx0" in values.values() and sum(v.startswith(("MUL(", "ADD(")) for v in values.values()) == 2
  assert walker.lines[-1].startswith("data0[")


def test_an_op_without_a_rule_names_the_renderer_and_the_op():
  program = compile_ast((Tensor([1.0, 2.0]).contiguous().realize().sum()).schedule()[-1].ast)
  walker = Listing(program)
  with pytest.raises(NotImplementedError, match=r"Listing has no rule for Ops\.DEFINE_ACC"):
    walker.walk((i, None) for i in range(len(program.uops)))
