"""docs/SPEC.md and the code are one truth: SPEC.md's tables (which dtypes each op takes, its arity, the
transcendentals' ULP bounds, the reduction identities, the UNDEFINED cases) are parsed and compared with the op
records (refgrad/ops.py's OP_FACTS) and alu.py's functions, so neither can change alone."""
import math
import re
from pathlib import Path

import numpy as np
import pytest

from refgrad import alu
from refgrad.dtype import ALL_DTYPES, DType, dtypes
from refgrad.ops import OP_FACTS, GroupOp, Ops

SPEC = (Path(__file__).parents[1] / "docs" / "SPEC.md").read_text()
KIND_WORDS = {"int": "iu", "signed": "i", "float": "f", "bool": "b", "all": "biuf", "any": "biuf"}
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


def section(title: str) -> str:
  start = SPEC.index(title)
  end = SPEC.find("\n#", start + len(title))
  return SPEC[start:end if end >= 0 else len(SPEC)]


def table_rows(text: str) -> list[list[str]]:
  """Rows of the markdown tables in `text` (header and rule lines dropped), cells stripped."""
  rows = [line for line in text.splitlines() if line.startswith("|") and not set(line) <= set("|- ")]
  return [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows[1:] if not row.startswith("| op |")]


def kinds_of(cell: str) -> set[str]:
  words = re.findall(r"[a-z]+", cell.split("→")[0])
  return set("".join(KIND_WORDS[w] for w in words if w in KIND_WORDS))


def primitive_rows() -> dict[Ops, list[str]]:
  rows = {}
  for cells in table_rows(section("## The primitive ops")):
    for name in cells[0].split():
      rows[Ops[name]] = cells
  return rows


def test_every_alu_op_is_in_the_spec_with_its_arity_and_dtypes():
  rows = primitive_rows()
  assert set(rows) == set(OP_FACTS)
  for op, cells in rows.items():
    assert int(cells[1]) == OP_FACTS[op].arity, op
    assert kinds_of(cells[2]) == set(OP_FACTS[op].kinds), (op, cells[2], OP_FACTS[op].kinds)


def test_ulp_bounds_and_the_sine_range_match():
  text = section("### Transcendentals")
  header = next(r for r in text.splitlines() if r.startswith("| op |"))
  columns = [c.strip() for c in header.strip("|").split("|")][1:]
  for line in text.splitlines():
    name = re.match(r"\| (EXP2|LOG2|SIN)\b", line)
    if name:
      bounds = [int(c) for c in line.strip().strip("|").split("|")[-len(columns):]]
      assert dict(zip(columns, bounds)) == {d.name: b for d, b in OP_FACTS[Ops[name.group(1)]].ulp_bound.items()}
  assert float(re.search(r"SIN.*ulp_range = ([0-9e.+]+)", text).group(1)) == OP_FACTS[Ops.SIN].ulp_range
  assert {Ops[m] for m in re.findall(r"\| (EXP2|LOG2|SIN)\b", text)} == GroupOp.Transcendental


def expected_identity(text: str, dtype: DType) -> object:
  """What the identity table's prose says for `dtype`."""
  if dtype == dtypes.bool:
    return {"0": False, "1": True}.get(text.split()[0], False)
  if "minimum" in text:
    return -math.inf if dtypes.is_float(dtype) else dtypes.min(dtype)
  return int(text.split()[0])


def test_reduction_identities_match():
  rows = {Ops[cells[0]]: cells[1] for cells in table_rows(section("## Reductions")) if cells[0] in Ops.__members__}
  assert set(rows) == {Ops.ADD, Ops.MUL, Ops.MAX}
  for op, text in rows.items():
    for dtype in ALL_DTYPES.values():
      assert alu.reduce_identity(op, dtype) == expected_identity(text, dtype), (op, dtype)


# one input per condition the UNDEFINED table states, built for a dtype (a, b): SPEC.md rows must map to one
CONDITIONS = {
  "`b == 0`": lambda d: (7, 0),
  "`a == MIN and b == -1`": lambda d: (dtypes.min(d), -1),
  "`b < 0` or `b >= bits`": lambda d: (3, d.bits),
}
RETURNS = {"0": lambda d, a: 0, "MIN (the wrapped quotient)": lambda d, a: dtypes.min(d)}
INT_DTYPES = [d for d in ALL_DTYPES.values() if d.kind in "iu"]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: d.name)
def test_undefined_alu_cases_match(dtype):
  rows = [cells for cells in table_rows(section("## UNDEFINED cases"))
          if all(name.strip() in Ops.__members__ and Ops[name.strip()] in OP_FACTS for name in cells[0].split(","))]
  assert {Ops[name.strip()] for cells in rows for name in cells[0].split(",")} == set(alu._UNDEFINED_RULES)
  for cells in rows:
    if dtype.kind not in kinds_of(cells[1]):
      continue
    a, b = CONDITIONS[cells[2]](dtype)
    for name in cells[0].split(","):
      op = Ops[name.strip()]
      srcs = [np.array([a], dtype=dtype.np), np.array([b]).astype(dtype.np)]
      assert alu.undefined_lanes(op, dtype, *srcs).tolist() == [True], (op, dtype, cells)
      assert alu.exec_alu(op, dtype, *srcs).tolist() == [RETURNS[cells[3]](dtype, a)], (op, dtype, cells)


def test_undefined_conversions_match():
  rows = {cells[0] for cells in table_rows(section("## UNDEFINED cases")) if cells[0].startswith(("CAST", "BIT"))}
  assert rows == {"CAST float → int", "BITCAST"}
  for src in FLOATS:
    with np.errstate(over="ignore"):  # 1e30 is inf in float16
      x = np.array([math.nan, math.inf, -math.inf, 1e30, 1.5], dtype=np.float64).astype(src.np)
    for dst in INT_DTYPES:
      undefined = alu.undefined_cast_lanes(x, dst).tolist()
      in_range = -2 ** (dst.bits - 1) <= 1e30 < 2 ** dst.bits
      assert undefined == [True, True, True, not in_range, False], (src, dst)
      assert alu.exec_cast(x, dst).tolist()[:3] == [0, 0, 0]  # "reference returns 0"
    nan = np.array([math.nan], dtype=src.np)
    assert alu.undefined_bitcast_lanes(nan).tolist() == [True]
