"""Terminal output shared by the long-running commands: whether a stream is a terminal, and a progress bar.

On a terminal output is drawn with rich; on anything else (a CI log, a pipe, a file) plain lines are written, rarely
enough to keep a log short, with no escape codes and no carriage returns. The fuzzing dashboard
(fuzz/dashboard.py) and the check's matrix (conformance/terminal.py) follow the same rule.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

PLAIN_STEPS = 10  # a plain progress log gets a line about every tenth of the total


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
