"""The kit's terminal output (testing/terminal.py, fuzz/dashboard.py, conformance/terminal.py): plain lines for logs,
rich rendering on a terminal, and the check matrix as a table."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from refgrad.cli import main
from refgrad.testing.conformance import report as check_report
from refgrad.testing.conformance.run import run_conformance
from refgrad.testing.conformance.terminal import matrix_table, matrix_view
from refgrad.testing.fuzz.dashboard import Dashboard
from refgrad.testing.terminal import ProgressBar, is_interactive

ESCAPE = re.compile(r"\x1b\[")


class FakeTerminal(io.StringIO):
  def isatty(self) -> bool:
    return True


class FakeClock:
  def __init__(self) -> None:
    self.now = 0.0

  def __call__(self) -> float:
    return self.now


def run_bar(stream: io.StringIO, total: int = 100, quiet: bool = False) -> str:
  with ProgressBar(total, "units", stream=stream, quiet=quiet) as bar:
    for i in range(total):
      bar.advance(label=f"unit {i + 1}")
  return stream.getvalue()


def test_is_interactive() -> None:
  assert not is_interactive(io.StringIO())
  assert is_interactive(FakeTerminal())


def test_progress_plain_lines_every_tenth() -> None:
  out = run_bar(io.StringIO())
  lines = out.splitlines()
  assert "\r" not in out and not ESCAPE.search(out)
  assert len(lines) == 10
  assert lines[0].startswith("[ 10/100]") and lines[0].endswith("s unit 10")
  assert lines[-1].startswith("[100/100]") and lines[-1].endswith("s unit 100")


def test_progress_plain_last_item_off_the_step() -> None:
  lines = run_bar(io.StringIO(), total=25).splitlines()
  assert [line.split("]")[0] for line in lines] == [f"[{n:2d}/25" for n in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                                              24, 25)]


def test_progress_quiet_writes_nothing() -> None:
  assert run_bar(io.StringIO(), quiet=True) == ""
  assert run_bar(FakeTerminal(), quiet=True) == ""


def test_progress_on_terminal_is_rich() -> None:
  out = run_bar(FakeTerminal())
  assert "units" in out and "100/100" in out and "unit 100" in out
  assert ESCAPE.search(out)  # drawn in place with rich's control codes, not as log lines
  assert "[ 10/100]" not in out


def plain_dashboard(clock: FakeClock) -> tuple[Dashboard, io.StringIO]:
  stream = io.StringIO()
  return Dashboard("fuzz CLANG", 60, ["w0", "w1"], stream=stream, clock=clock), stream


def test_dashboard_plain_findings_and_notes_at_once() -> None:
  clock = FakeClock()
  dash, stream = plain_dashboard(clock)
  with dash:
    clock.now = 1.0
    dash.note("replayed 3 examples from the database")
    assert stream.getvalue().splitlines() == ["replayed 3 examples from the database"]
    clock.now = 2.5
    dash.finding("0123456789abcdef", "mismatch", 1, "findings/test_a.py")
    assert stream.getvalue().splitlines()[-1] == "[   2.5s] finding (mismatch) 0123456789ab: findings/test_a.py"
    dash.finding("0123456789abcdef", "mismatch", 2, "findings/test_a.py")  # the same finding, hit again
    assert len(stream.getvalue().splitlines()) == 2
  assert "\r" not in stream.getvalue() and not ESCAPE.search(stream.getvalue())


def test_dashboard_plain_status_at_most_every_10s() -> None:
  clock = FakeClock()
  dash, stream = plain_dashboard(clock)
  with dash:
    for t in range(1, 26):
      clock.now = float(t)
      dash.update("w0", 100 * t, 100.0, 0)
      dash.update("w1", 50 * t, 50.0, 1 if t > 15 else 0)
  lines = stream.getvalue().splitlines()
  assert lines == ["[  10.0s/60s] 1450 programs, 150.0 programs/s, 0 finding(s)",
                   "[  20.0s/60s] 2950 programs, 150.0 programs/s, 1 finding(s)",
                   "[  25.0s/60s] 3750 programs, 150.0 programs/s, 1 finding(s)"]  # the last: on close


def test_dashboard_closing_line_gives_the_rate_over_the_whole_run() -> None:
  """The workers report each chunk's rate; a campaign's last chunks are cut short by its deadline (a fuzz run of 99 s
  and 3241 programs closed on "0.3 programs/s")."""
  clock = FakeClock()
  dash, stream = plain_dashboard(clock)
  with dash:
    clock.now = 40.0
    dash.update("w0", 3000, 0.2, 0)
    dash.update("w1", 1000, 0.1, 0)
  assert stream.getvalue().splitlines()[-1] == "[  40.0s/60s] 4000 programs, 100.0 programs/s, 0 finding(s)"


def test_dashboard_quiet_writes_nothing() -> None:
  for stream in (io.StringIO(), FakeTerminal()):
    with Dashboard("fuzz", 60, ["w0"], stream=stream, quiet=True) as dash:
      dash.update("w0", 10, 5.0, 1)
      dash.finding("abc", "crash", 1, "p.py")
      dash.note("a note")
    assert stream.getvalue() == ""


def test_dashboard_on_terminal_is_rich() -> None:
  stream = FakeTerminal()
  with Dashboard("fuzz CLANG", 60, ["w0", "w1"], stream=stream) as dash:
    dash.update("w0", 1234, 99.5, 1)
    dash.finding("fedcba9876543210", "crash", 3, "findings/test_b.py")
  out = stream.getvalue()
  assert ESCAPE.search(out)
  for text in ("fuzz CLANG", "w0", "w1", "total", "1234", "99.5", "fedcba987654", "crash", "findings/test_b.py"):
    assert text in out


@pytest.fixture(scope="module")
def exp2_results() -> list:
  return run_conformance("PYTHON", only="EXP2").results


def text_matrix(text: str) -> tuple[list[str], list[list[str]]]:
  """matrix_text's header and rows, split at its fixed-width columns (a cell may be empty)."""
  header, *lines = text.split("\n(")[0].splitlines()
  columns = header.split()
  width = len(header) - 9 * len(columns) + 1
  fields = lambda line: [line[width + 1 + 9 * i:width + 9 + 9 * i].strip() for i in range(len(columns))]  # noqa: E731
  return columns, [[line[:width].strip(), *fields(line)] for line in lines]


def test_matrix_table_matches_matrix_text(exp2_results: list) -> None:
  columns, rows = text_matrix(check_report.matrix_text(exp2_results))
  table = matrix_table(exp2_results)
  assert [c.header for c in table.columns[1:]] == columns
  assert table.row_count == len(rows) > 1
  cells = [[str(c) for c in column.cells] for column in table.columns]
  assert [list(row) for row in zip(*cells)] == rows


def test_matrix_view_lists_the_programs() -> None:
  results = run_conformance("PYTHON", only="sum and max").results
  stream = io.StringIO()
  Console(file=stream, width=200).print(matrix_view(results))
  programs = [r for r in results if r.column == "program"]
  assert programs and "Tensor programs:" in stream.getvalue()
  assert all(f"{check_report.cell(r)}  {r.row}" in stream.getvalue() for r in programs)


def test_check_quiet_prints_only_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
  assert main(["check", "--device", "PYTHON", "--only", "EXP2", "--quiet"]) == 0
  out, err = capsys.readouterr()
  assert err == ""
  lines = out.strip().splitlines()
  assert len(lines) == 3 and lines[-1].startswith("PYTHON: 52 passed, 0 failed")
