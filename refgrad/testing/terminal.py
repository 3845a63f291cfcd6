"""Terminal output of the long-running commands: a progress bar, the fuzzing dashboard and the conformance matrix.

On a terminal they are drawn with rich; on anything else (a CI log, a pipe, a file) they write plain lines, rarely
enough to keep a log short, with no escape codes and no carriage returns.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text

from refgrad.dtype import DTYPES_BY_PRIORITY
from refgrad.testing.check_report import LEGEND, cell
from refgrad.testing.conformance import FAIL, PASS, UNSUPPORTED, CaseResult

PLAIN_STEPS = 10  # a plain progress log gets a line about every tenth of the total
STATUS_SECONDS = 10.0  # and a plain dashboard a status line at most this often


def is_interactive(stream: TextIO) -> bool:
  """Whether `stream` is a terminal, so output may be redrawn in place."""
  isatty = getattr(stream, "isatty", None)
  return bool(isatty and isatty())


class ProgressBar:
  """Progress over `total` items: a rich bar on a terminal, a plain line about every 10% otherwise, nothing if
  `quiet`. Use it as a context manager, or call start() and close()."""

  def __init__(self, total: int, description: str = "", stream: TextIO | None = None, quiet: bool = False,
               clock: Callable[[], float] = time.perf_counter) -> None:
    self.total, self.description, self.quiet, self.clock = total, description, quiet, clock
    self.stream = stream or sys.stderr  # looked up now, not at import, so redirected stderr is honoured
    self.done, self.started = 0, clock()
    self._progress: Progress | None = None
    self._task: TaskID | None = None

  def start(self) -> ProgressBar:
    self.started = self.clock()
    if not self.quiet and is_interactive(self.stream):
      self._progress = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.fields[label]}", markup=False, table_column=Column(no_wrap=True)),
                                console=Console(file=self.stream), get_time=self.clock)
      self._task = self._progress.add_task(self.description, total=self.total, label="")
      self._progress.start()
    return self

  def advance(self, label: str = "", n: int = 1) -> None:
    """`n` more items done; `label` names the current one."""
    self.done += n
    if self._progress is not None:
      self._progress.update(self._task, advance=n, label=label)
    elif not self.quiet and self._crossed_step(n):
      self.stream.write(f"[{self.done:{len(str(self.total))}d}/{self.total}] {self.clock() - self.started:6.1f}s "
                        f"{label}\n")
      self.stream.flush()

  def _crossed_step(self, n: int) -> bool:
    step = max(1, self.total // PLAIN_STEPS)
    return self.done == self.total or self.done // step > (self.done - n) // step

  def close(self) -> None:
    if self._progress is not None:
      self._progress.stop()
      self._progress = None

  def __enter__(self) -> ProgressBar:
    return self.start()

  def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
               trace: TracebackType | None) -> None:
    self.close()


class Dashboard:
  """A fuzzing campaign of `seconds` over `workers`, live: per-worker and total programs, programs/s and findings,
  the time left, and the distinct findings. On a terminal a rich Live display (at most 4 redraws a second);
  otherwise a plain status line at most every 10 s, and each new finding and each note at once; nothing if `quiet`.
  """

  def __init__(self, title: str, seconds: float, workers: list[str], stream: TextIO | None = None,
               quiet: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
    self.title, self.seconds, self.quiet, self.clock = title, seconds, quiet, clock
    self.stream = stream or sys.stderr
    self.workers: dict[str, tuple[int, float, int]] = {w: (0, 0.0, 0) for w in workers}  # programs, rate, findings
    self.findings: dict[str, tuple[str, int, str]] = {}  # signature -> kind, count, path
    self.started = self.last_status = clock()
    self._lock = threading.Lock()  # the Live thread renders while the campaign updates
    self._live: Live | None = None

  def start(self) -> Dashboard:
    self.started = self.last_status = self.clock()
    if not self.quiet and is_interactive(self.stream):
      self._live = Live(console=Console(file=self.stream), refresh_per_second=4, get_renderable=self.render)
      self._live.start()
    return self

  def update(self, worker: str, programs: int, rate: float, findings: int) -> None:
    """`worker`'s totals so far, and its current programs/s."""
    with self._lock:
      self.workers[worker] = (programs, rate, findings)
    if self._plain() and self.clock() - self.last_status >= STATUS_SECONDS:
      self._status_line()

  def finding(self, signature: str, kind: str, count: int, path: str) -> None:
    """A distinct finding, hit `count` times so far; a plain log gets a line the first time only."""
    with self._lock:
      new = signature not in self.findings
      self.findings[signature] = (kind, count, path)
    if new and self._plain():
      self._write(f"[{self._elapsed():6.1f}s] finding ({kind}) {signature[:12]}: {path}")

  def note(self, text: str) -> None:
    if self._live is not None:
      self._live.console.print(text, markup=False, highlight=False)
    elif not self.quiet:
      self._write(text)

  def totals(self) -> tuple[int, float, int]:
    with self._lock:
      rows = list(self.workers.values())
    return sum(r[0] for r in rows), sum(r[1] for r in rows), sum(r[2] for r in rows)

  def render(self) -> RenderableType:
    """The live display: the workers with their total, then the findings, if any."""
    elapsed = self._elapsed()
    table = Table(title=f"{self.title}: {elapsed:.0f}s of {self.seconds:g}s, "
                        f"{max(0.0, self.seconds - elapsed):.0f}s left", title_justify="left")
    for name in ("worker", "programs", "programs/s", "findings"):
      table.add_column(name, justify="left" if name == "worker" else "right")
    with self._lock:
      workers, findings = list(self.workers.items()), list(self.findings.items())
    for i, (name, (programs, rate, found)) in enumerate(workers):
      table.add_row(name, str(programs), f"{rate:.1f}", str(found), end_section=i == len(workers) - 1)
    programs, rate, found = self.totals()
    table.add_row("total", str(programs), f"{rate:.1f}", str(found), style="bold")
    if not findings:
      return table
    found_table = Table("kind", Column("count", justify="right"), "signature", "path", title="findings",
                        title_justify="left")
    for signature, (kind, count, path) in findings:
      found_table.add_row(kind, str(count), signature[:12], path, style="red")
    return Group(table, found_table)

  def close(self) -> None:
    if self._live is not None:
      self._live.stop()
      self._live = None
    elif not self.quiet:
      self._status_line()  # the final totals, however recent the last status line

  def _plain(self) -> bool:
    return self._live is None and not self.quiet

  def _elapsed(self) -> float:
    return self.clock() - self.started

  def _status_line(self) -> None:
    self.last_status = self.clock()
    programs, rate, found = self.totals()
    self._write(f"[{self._elapsed():6.1f}s/{self.seconds:g}s] {programs} programs, {rate:.1f} programs/s, "
                f"{found} finding(s)")

  def _write(self, line: str) -> None:
    self.stream.write(line + "\n")
    self.stream.flush()

  def __enter__(self) -> Dashboard:
    return self.start()

  def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
               trace: TracebackType | None) -> None:
    self.close()


STATUS_STYLES = {PASS: "green", FAIL: "bold red", UNSUPPORTED: "grey50"}


def matrix_table(results: list[CaseResult]) -> Table:
  """The op x dtype matrix of `refgrad check`, with check_report.matrix_text's rows, columns and cells, coloured by
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
