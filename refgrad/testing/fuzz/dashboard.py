"""The live dashboard of a fuzzing campaign: rich on a terminal, rare plain status lines anywhere else."""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Column, Table

from refgrad.testing.terminal import is_interactive

STATUS_SECONDS = 10.0  # a plain dashboard gets a status line at most this often


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
      self._status_line(overall=True)  # the final totals, however recent the last status line

  def _plain(self) -> bool:
    return self._live is None and not self.quiet

  def _elapsed(self) -> float:
    return self.clock() - self.started

  def _status_line(self, overall: bool = False) -> None:
    """The totals; `overall`: the rate over the whole run, not the workers' last chunks (a campaign's last chunk is
    cut short by its deadline, and its rate says little)."""
    self.last_status = self.clock()
    programs, rate, found = self.totals()
    if overall:
      rate = programs / self._elapsed() if self._elapsed() > 0 else 0.0
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
