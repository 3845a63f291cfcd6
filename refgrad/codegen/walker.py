"""The program walker renderers share: a linear `Program` is visited in order, each uop through its op's rule.

A renderer is a `ProgramWalker` subclass whose one table, `rules` ({op: rule}), says how each op is written in its
language: codegen/cstyle.py's `C_RULES` (C, and OpenCL C through its dialect), refgrad_llvm/render.py's
`LLVM_RULES`. A rule is a function of the renderer:
- an ALU op's rule (an op of refgrad/ops.py's OP_FACTS) gets the operand dtype and the values of the sources,
  `rule(renderer, dtype, *operands)`, so a reduction can apply its op's rule to accumulators as well;
- any other op's rule gets the uop, `rule(renderer, u)`.
It returns the uop's value in the target language (a C expression, an SSA name), or None for a statement (a loop,
a store), which writes its own lines. The renderer says where a value is read (`operand`) and what a value
becomes (`bind`: C declares a named constant, SSA keeps the instruction's name). A renderer that runs a reduce
loop over several accumulators walks `pieces` (which loops `splittable_reduce` lets it split) and renders each split
loop in `split_reduce`, visiting its body once per accumulator with `walk_body`; `code_paths` names the paths such a
renderer takes, for `refgrad check`'s coverage report.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import ClassVar

from refgrad.codegen.contract import Program
from refgrad.dtype import DType, dtypes
from refgrad.ops import OP_FACTS
from refgrad.uop import Ops, UOp

Rule = Callable[..., "str | None"]


class ProgramWalker:
  """Renders a program's uops in order through `rules`; subclasses say how values are read and bound."""
  rules: ClassVar[Mapping[Ops, Rule]] = {}

  def __init__(self, program: Program):
    self.program = program

  def walk(self, pieces: Iterable[tuple[int, int | None]]) -> None:
    """Render `pieces` in order: (i, None) is uop i, (start, end) a reduce loop to split over accumulators."""
    for i, end in pieces:
      if end is None:
        self.visit(i, self.program.uops[i])
      else:
        self.split_reduce(i, end)

  def visit(self, i: int, u: UOp) -> None:
    """Render uop i through the rule of its op, and bind the value the rule returns."""
    rule = self.rules.get(u.op)
    if rule is None:
      raise NotImplementedError(f"{type(self).__name__} has no rule for {u.op}")
    value = rule(self, u.src[-1].dtype, *(self.operand(s) for s in u.src)) if u.op in OP_FACTS else rule(self, u)
    if value is not None:
      self.bind(i, u, value)

  def apply(self, op: Ops, dtype: DType, *operands: str) -> str:
    """ALU op `op` on values of operand dtype `dtype` (the last operand's dtype: WHERE's condition is bool)."""
    return self.rules[op](self, dtype, *operands)

  def walk_body(self, start: int, end: int, accumulate: Callable[[int, UOp], None]) -> None:
    """The body of the reduce loop from `start` to `end`, once: each uop visited, the ACCUMULATE handed to
    `accumulate` (which adds to the copy's own accumulator)."""
    for i in range(start + 1, end):
      u = self.program.uops[i]
      if u.op is Ops.ACCUMULATE:
        accumulate(i, u)
      else:
        self.visit(i, u)

  def operand(self, u: UOp) -> str:
    """The value of an already rendered uop, where it is used."""
    raise NotImplementedError

  def bind(self, i: int, u: UOp, value: str) -> None:
    """Make `value` the value of uop i."""
    raise NotImplementedError

  def split_reduce(self, start: int, end: int) -> None:
    """Render the reduce loop from `start` to `end` over several accumulators."""
    raise NotImplementedError(f"{type(self).__name__} does not split reduce loops")


# ---- splitting reduce loops over several accumulators (the order of a reduction is free: SPEC.md)
def splittable_reduce(program: Program, start: int, lanes: int) -> bool:
  """The loop at `start` is innermost, feeds exactly one accumulator and runs at least 2*lanes times, so a
  renderer may run it as `lanes` independent accumulators (the order of a reduction is free: SPEC.md)."""
  end = program.loop_ends[start]
  body = program.uops[start + 1:end]
  return (lanes > 1 and program.uops[start].arg[1] >= 2 * lanes and not any(u.op is Ops.RANGE for u in body)
          and sum(u.op is Ops.ACCUMULATE for u in body) == 1)


def pieces(program: Program, start: int, stop: int, lanes: int) -> Iterator[tuple[int, int | None]]:
  """uops[start:stop] in render order: (i, end) for a reduce loop from i to end that splittable_reduce lets a
  renderer run over `lanes` accumulators, (i, None) for any other uop, to render on its own."""
  i = start
  while i < stop:
    end = program.loop_ends.get(i)
    if end is not None and splittable_reduce(program, i, lanes):
      yield i, end
      i = end + 1
    else:
      yield i, None
      i += 1


def code_paths(program: Program, lanes: int) -> list[str]:
  """The paths a renderer that splits reductions over `lanes` accumulators (see splittable_reduce) takes for
  a program, and the other shapes renderers special-case: what `refgrad check` reports as reached."""
  paths = set()
  for start, end in program.loop_ends.items():
    if splittable_reduce(program, start, lanes):
      paths.add(f"split reduction ({lanes} accumulators)")
      if program.uops[start].arg[1] % lanes:
        paths.add("split reduction remainder loop")
    elif any(u.op is Ops.ACCUMULATE for u in program.uops[start + 1:end]):
      paths.add("serial reduction loop")
  if any(u.op is Ops.DEFINE_LOCAL for u in program.uops):
    paths.add("grouped reduction (local memory and barriers)")
  if any(u.op is Ops.LOAD and len(u.src) > 2 for u in program.uops):
    paths.add("gated load (padding)")
  paths |= {f"{opt.kind} opt" for opt in program.opts} | {f"{opt.kind} by {opt.amount}" for opt in program.opts}
  paths |= {f"{u.dtype.name} arithmetic" for u in program.uops
            if u.dtype in (dtypes.float16, dtypes.bfloat16) and u.op not in (Ops.LOAD, Ops.PARAM)}
  return sorted(paths)
