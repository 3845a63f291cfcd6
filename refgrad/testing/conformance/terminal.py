"""The check's op x dtype matrix on a terminal, coloured by status (report.matrix_text is the plain one)."""
from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Column, Table
from rich.text import Text

from refgrad.dtype import DTYPES_BY_PRIORITY
from refgrad.testing.conformance.report import LEGEND, cell
from refgrad.testing.conformance.results import FAIL, PASS, UNSUPPORTED, CaseResult

STATUS_STYLES = {PASS: "green", FAIL: "bold red", UNSUPPORTED: "grey50"}


def matrix_table(results: list[CaseResult]) -> Table:
  """The op x dtype matrix of `refgrad check`, with report.matrix_text's rows, columns and cells, coloured by
  status."""
  columns = [d.name for d in DTYPES_BY_PRIORITY if any(r.column == d.name for r in results)]
  by_key = {(r.row, r.column): r for r in results}
  table = Table("", *(Column(c, justify="right") for c in columns))
  for row in dict.fromkeys(r.row for r in results if r.column != "program"):
    table.add_row(row, *(styled_cell(by_key.get((row, c))) for c in columns))
  return table


def matrix_view(results: list[CaseResult]) -> Group:
  """All that matrix_text shows, for a terminal: matrix_table, its legend, and the corpus of Tensor programs."""
  matrix = matrix_table(results)
  parts: list[RenderableType] = [matrix, Text(LEGEND, style="dim")] if matrix.row_count else []
  programs = [r for r in results if r.column == "program"]
  if programs:
    table = Table(Column(justify="right"), "", box=None, show_header=False, title="Tensor programs:",
                  title_justify="left")
    for r in programs:
      table.add_row(styled_cell(r), r.row)
    parts += [Text(), table] if parts else [table]
  return Group(*parts)


def styled_cell(r: CaseResult | None) -> Text:
  return Text(cell(r), style=STATUS_STYLES[r.status] if r else "")
