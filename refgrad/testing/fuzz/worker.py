"""The worker process that runs one program at a time for a campaign, replaced whenever it dies or hangs, so that a
segfault or a hang of the backend under test becomes a finding and the campaign goes on."""
from __future__ import annotations

import multiprocessing
import signal
import time
import traceback
from typing import Any

from refgrad.plugin_loader import load_plugin_file
from refgrad.testing.fuzz.program_check import run_one
from refgrad.testing.fuzz.results import Verdict


def _worker_main(conn: Any, current: Any, device: str, plugin_files: list[str], opts: bool) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the campaign's to handle: this process is stopped by it
  for path in plugin_files:
    load_plugin_file(path)
  conn.send("ready")  # the timeout of the first program starts now, not while this process imports

  def started(index: int) -> None:
    current.value = index
  while True:
    try:
      program = conn.recv()
    except EOFError:  # the campaign is gone
      return
    if program is None:
      return
    covered: set[tuple[str, str]] = set()
    ulp: dict[tuple[str, str], dict[int, int]] = {}
    current.value = -1
    try:
      kind, detail = run_one(program, device, covered, opts, ulp, started)
      verdict = Verdict(kind, detail, sorted(covered), ulp, current.value)
    except Exception:
      verdict = Verdict("harness", traceback.format_exc())
    try:
      conn.send(verdict)
    except (BrokenPipeError, EOFError):  # the campaign stopped (Ctrl-C, time up) while this program ran
      return


STARTUP_SECONDS = 300  # to import refgrad and the plugins in a new worker process (minutes on a loaded machine)


class Worker:
  """A worker process that is replaced whenever it dies or hangs. `send` then `receive` lets the campaign draw the
  next program while this one runs; `current` (shared memory) names the schedule item running, so a crash or a
  hang still says which kernel it was in."""

  def __init__(self, device: str, plugin_files: list[str], timeout: float, opts: bool = False):
    self.device, self.plugin_files, self.timeout, self.opts = device, plugin_files, timeout, opts
    self.process: multiprocessing.Process | None = None
    self.sent_at, self.start_failure = 0.0, ""

  def start(self) -> str:
    """Start the process and wait until it has loaded refgrad and the plugins; why it could not, or ""."""
    context = multiprocessing.get_context("spawn")
    self.conn, child = context.Pipe()
    self.current = context.Value("i", -1, lock=False)
    self.process = context.Process(target=_worker_main, daemon=True,
                                   args=(child, self.current, self.device, self.plugin_files, self.opts))
    self.process.start()
    child.close()  # the process's end only: once it dies, this side reads EOF
    if not self.conn.poll(STARTUP_SECONDS):
      self.stop()
      return f"the fuzz worker process did not start within {STARTUP_SECONDS} s"
    try:
      self.conn.recv()
    except (EOFError, ConnectionResetError):
      self.process.join(10)
      code = self.process.exitcode
      self.process = None
      return (f"the fuzz worker process died while starting (exit code {code}): loading refgrad or the plugin "
              f"files {self.plugin_files} failed")
    return ""

  def send(self, program: Any) -> None:
    if self.process is None or not self.process.is_alive():
      self.start_failure = self.start()
    if not self.start_failure:
      self.conn.send(program)
    self.sent_at = time.monotonic()

  def receive(self) -> Verdict:
    """The verdict on the program sent last: a hang if none comes within the timeout, a crash if the process died;
    refgrad's own failure ("harness") if the process never started."""
    if self.start_failure:
      return Verdict("harness", self.start_failure)
    if not self.conn.poll(max(0.0, self.timeout - (time.monotonic() - self.sent_at))):
      kernel = self.current.value
      self.stop()
      return Verdict("hang", f"no answer within {self.timeout:.0f} s", kernel=kernel)
    try:
      return self.conn.recv()
    except (EOFError, ConnectionResetError):
      code = self.process.exitcode if self.process else None
      self.process.join()
      self.process = None
      return Verdict("crash", f"the worker process died (exit code {code})", kernel=self.current.value)

  def run(self, program: Any) -> Verdict:
    self.send(program)
    return self.receive()

  def stop(self) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.join()
      self.process = None
