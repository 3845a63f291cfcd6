"""The worker process that runs a campaign's programs, a batch at a time, replaced whenever it dies or hangs, so that a
segfault or a hang of the backend under test becomes a finding and the campaign goes on."""
from __future__ import annotations

import contextlib
import glob
import math
import multiprocessing
import os
import signal
import time
import traceback
from typing import Any

from refgrad.plugin_loader import load_plugin_file
from refgrad.schedule import ScheduleItem
from refgrad.testing.fuzz.program_check import CompileAhead, prepare_programs, run_one
from refgrad.testing.fuzz.results import Verdict

# What the worker process says besides a Verdict per program: its batch's kernels are compiled, it planned the batch
# it was announced (so planning has a timeout of its own, not the next program's), and its batch ended.
# The campaign sends a batch as (programs, prepare), programs None for the ones it announced last; (UPCOMING,
# programs) to announce the next batch, whose kernels then compile while this one runs; STOP to end a batch early
# (its first finding, or the time is up).
PREPARED, PLANNED, END, STOP, UPCOMING = "prepared", "planned", "end", "stop", "upcoming"
PLANNING = -2  # `current` while the worker plans the announced batch (no program of this batch is running)
CUT = "cut"  # a Verdict's kind when the campaign's time ran out while the worker had not answered: no finding, and
# not counted as a program run


def died_planning(message: Any) -> bool:
  """True if the worker crashed or hung planning the announced batch: no fault of the program it was between."""
  return isinstance(message, Verdict) and message.kind in ("crash", "hang") and message.kernel == PLANNING


def _verdict(program: Any, device: str, opts: bool, current: Any, schedule: list[ScheduleItem] | None) -> Verdict:
  covered: set[tuple[str, str]] = set()
  ulp: dict[tuple[str, str], dict[int, int]] = {}
  current.value = -1

  def started(index: int) -> None:
    current.value = index
  try:
    kind, detail = run_one(program, device, covered, opts, ulp, started, schedule)
    return Verdict(kind, detail, sorted(covered), ulp, current.value)
  except Exception:
    return Verdict("harness", traceback.format_exc())


def _worker_main(conn: Any, current: Any, device: str, plugin_files: list[str], opts: bool) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the campaign's to handle: this process is stopped by it
  for path in plugin_files:
    load_plugin_file(path)
  conn.send("ready")  # the timeout of the first program starts now, not while this process imports
  ahead = CompileAhead()
  while True:
    try:
      message = conn.recv()
    except EOFError:  # the campaign is gone
      return
    if message is None:
      return
    if message == STOP:  # for a batch that had ended before it came
      continue
    if message[0] == UPCOMING:
      _plan_ahead(conn, current, device, opts, ahead, message[1])
      continue
    try:
      _run_batch(conn, current, device, opts, ahead, *message)
    except (BrokenPipeError, EOFError):  # the campaign stopped (Ctrl-C, time up) while this batch ran
      return


def _run_batch(conn: Any, current: Any, device: str, opts: bool, ahead: CompileAhead, programs: list[Any] | None,
               prepare: bool) -> None:
  """One batch: its kernels compiled first if asked (those of the announced batch already are, or are compiling),
  then each program run and its Verdict sent, until a STOP comes; an announcement of the next batch that comes
  meanwhile starts compiling it."""
  plan = None
  if programs is None:
    programs, plan = ahead.take()
  if prepare:
    current.value = -1
    plan = prepare_programs(programs, device, opts, plan)
    conn.send(PREPARED)
  for index, program in enumerate(programs):
    if conn.poll():
      message = conn.recv()
      if message == STOP:  # the rest of the batch is not wanted
        break
      _plan_ahead(conn, current, device, opts, ahead, message[1])
    conn.send(_verdict(program, device, opts, current, plan.schedules[index] if plan else None))
  conn.send(END)


def _plan_ahead(conn: Any, current: Any, device: str, opts: bool, ahead: CompileAhead, programs: list[Any]) -> None:
  """Plan the announced batch and start compiling it; a crash or hang meanwhile is no program's of this batch."""
  current.value = PLANNING
  ahead.start(programs, device, opts)
  conn.send(PLANNED)


STARTUP_SECONDS = 300  # to import refgrad and the plugins in a new worker process (minutes on a loaded machine)
# A hang is no answer within the timeout, but on a machine with more runnable work than cores a worker can go that long
# without the CPU it needs: while the machine is oversubscribed and the worker got some CPU over the last period but
# less than half a core (a deadlocked worker sleeps and gets none), the wait goes on, at most this many periods more.
# Campaigns beside other work wrote "hangs" whose programs pass in seconds without it.
STARVED_PERIODS = 4
# While a batch has programs to come, the campaign waits for the worker's verdicts this long before reading them all
# at once: waiting in poll() instead, every verdict woke the campaign, whose wake-ups took the worker's core from it
# under load (a verdict's pipe write cost the worker 0.37 ms of wall time, profiled). A finding is then read a few
# milliseconds late, and the verdicts of the programs the worker ran meanwhile are dropped (Worker.finish), as before.
SETTLE_SECONDS = 0.005


def process_tree_cpu(pid: int) -> float | None:
  """CPU seconds used so far by process `pid`: its threads, its live descendants and the children it has reaped
  (the compilers it runs); None where /proc cannot tell (not Linux, or the process is gone)."""
  total, pending, seen = 0.0, [pid], set()
  while pending:
    process = pending.pop()
    if process in seen:
      continue
    seen.add(process)
    try:
      with open(f"/proc/{process}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
      if process == pid:
        return None
      continue
    total += sum(int(ticks) for ticks in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime, stime, cutime, cstime
    for children in glob.glob(f"/proc/{process}/task/*/children"):
      with contextlib.suppress(OSError, ValueError), open(children) as listed:
        pending.extend(int(child) for child in listed.read().split())
  return total


def starved(cpu_seconds: float, period: float, load: float, cores: int) -> bool:
  """Whether a worker silent for `period` seconds, in which it used `cpu_seconds` of CPU, was starved rather than
  hung: the machine oversubscribed (load above the cores) and the worker running, but at under half a core."""
  return load > cores and 0 < cpu_seconds < period / 2


class Worker:
  """A worker process that is replaced whenever it dies or hangs. It is sent a batch of programs (`send`), compiles
  their kernels at once if asked, then runs them in order; `receive` gives its messages one by one (PREPARED, a
  Verdict per program, END), so the campaign draws the next batch while this one runs. `current` (shared memory)
  names the schedule item running, so a crash or a hang still says which kernel it was in."""

  def __init__(self, device: str, plugin_files: list[str], timeout: float, opts: bool = False,
               cut_at: float | None = None):
    self.device, self.plugin_files, self.timeout, self.opts = device, plugin_files, timeout, opts
    self.cut_at, self.cut = cut_at, False  # a time.time() past which no wait goes on (None: none); cut: one was cut
    self.process: multiprocessing.Process | None = None
    self.heard_at, self.start_failure, self.in_batch = 0.0, "", False
    self.heard_period_start, self.heard_cpu = 0.0, None  # the period being waited, and the worker's CPU at its start
    self.announced: list[Any] | None = None  # the batch this process was told comes next (it compiles its kernels)

  def start(self) -> str:
    """Start the process and wait until it has loaded refgrad and the plugins; why it could not, or "" (also when
    the campaign's time ran out first: self.cut is then set, and no process is left)."""
    self.announced = None
    if self._until_cut() <= 0:
      self.cut = True
      return ""
    context = multiprocessing.get_context("spawn")
    self.conn, child = context.Pipe()
    self.current = context.Value("i", -1, lock=False)
    self.process = context.Process(target=_worker_main, daemon=True,
                                   args=(child, self.current, self.device, self.plugin_files, self.opts))
    self.process.start()
    child.close()  # the process's end only: once it dies, this side reads EOF
    if not self._poll(STARTUP_SECONDS):
      self.stop()
      return "" if self.cut else f"the fuzz worker process did not start within {STARTUP_SECONDS} s"
    try:
      self.conn.recv()
    except (EOFError, ConnectionResetError):
      self.process.join(10)
      code = self.process.exitcode
      self.process = None
      return (f"the fuzz worker process died while starting (exit code {code}): loading refgrad or the plugin "
              f"files {self.plugin_files} failed")
    return ""

  def send(self, programs: list[Any], prepare: bool = False) -> None:
    """Start a batch: with `prepare`, the worker first compiles every kernel of its programs in one go (those of the
    batch it was announced are compiling already, and are not sent again)."""
    if self.process is None or not self.process.is_alive():
      self.start_failure = self.start()
    started = not self.start_failure and not self.cut
    if started:
      self.conn.send((None if programs is self.announced else programs, prepare))
    self._heard()
    self.in_batch, self.announced = started, None

  def announce(self, programs: list[Any]) -> None:
    """Tell the running worker which batch comes next, so it compiles that batch's kernels while this one runs."""
    if self.process is not None and self.process.is_alive() and not self.start_failure and not self.cut:
      with contextlib.suppress(OSError):  # the process just died: receive says so
        self.conn.send((UPCOMING, programs))
        self.announced = programs

  def receive(self, more_to_come: bool = False) -> Verdict | str:
    """The worker's next message: PREPARED, the Verdict on the next program, or END. A hang if none comes within the
    timeout of the one before, a crash if the process died (either ends the batch); refgrad's own failure
    ("harness") if the process never started; CUT, and the process stopped, once the campaign's time ran out (cut_at)
    before it answered. `more_to_come`: the batch has programs after this one, so when no message is waiting this
    first sleeps SETTLE_SECONDS (counted in the timeout), and reads what came meanwhile."""
    if self.cut:
      return self._cut_short()
    if self.start_failure:
      return Verdict("harness", self.start_failure)
    if more_to_come and not self.conn.poll(0):
      time.sleep(SETTLE_SECONDS)
    if not self._answered():
      if self.cut:
        return self._cut_short()
      kernel, waited = self.current.value, time.monotonic() - self.heard_at
      self.stop()
      return Verdict("hang", f"no answer within {waited:.0f} s (timeout {self.timeout:.0f} s)", kernel=kernel)
    try:
      message = self.conn.recv()
    except (EOFError, ConnectionResetError):
      code = self.process.exitcode if self.process else None
      self.process.join()
      self.process = None
      self.in_batch = False
      return Verdict("crash", f"the worker process died (exit code {code})", kernel=self.current.value)
    self._heard()
    if message == PLANNED:  # what comes next has a timeout of its own
      return self.receive()
    self.in_batch = message != END
    return message

  def _answered(self) -> bool:
    """Wait for the worker's next message: the timeout since it last spoke, and more periods of it while it was
    starved (STARVED_PERIODS). The worker's CPU is read only when a wait begins (a message already waiting needs
    none): reading /proc at every message cost the campaign about a tenth of its CPU. The first period's CPU then
    counts from that moment, over the time since it."""
    if self.conn.poll(0):
      return True
    pid = self.process.pid if self.process is not None else None
    self.heard_cpu, self.heard_period_start = process_tree_cpu(pid) if pid else None, time.monotonic()
    if self._poll(max(0.0, self.timeout - (time.monotonic() - self.heard_at))):
      return True
    for _ in range(STARVED_PERIODS):
      if self.cut:
        return False
      cpu, now = process_tree_cpu(pid) if pid else None, time.monotonic()
      if cpu is None or self.heard_cpu is None:
        return False
      if not starved(cpu - self.heard_cpu, now - self.heard_period_start, os.getloadavg()[0], os.cpu_count() or 1):
        return False
      self.heard_cpu, self.heard_period_start = cpu, now
      if self._poll(self.timeout):
        return True
    return False

  def _until_cut(self) -> float:
    return math.inf if self.cut_at is None else self.cut_at - time.time()

  def _poll(self, seconds: float) -> bool:
    """Wait up to `seconds` for the worker's next message, but not past cut_at: a wait that the cut ends sets cut."""
    left = self._until_cut()
    if self.conn.poll(max(0.0, min(seconds, left))):
      return True
    self.cut = self.cut or left <= seconds
    return False

  def _cut_short(self) -> Verdict:
    """What a program gets once the campaign's time ran out: the process is stopped, whatever it was doing."""
    self.stop()
    return Verdict(CUT, "the campaign's time ran out before the worker answered")

  def _heard(self) -> None:
    """The worker spoke (or was sent work): its silence counts from now."""
    self.heard_at = time.monotonic()

  def finish(self) -> None:
    """End the batch: the programs not run yet are skipped, what the worker still says of it is read."""
    if self.in_batch:
      with contextlib.suppress(OSError):  # the process just died: receive says so
        self.conn.send(STOP)
    while self.in_batch:
      self.receive()

  def run(self, program: Any) -> Verdict:
    """One program, its kernels compiled as it runs them (again in a new worker if the last one died planning the
    batch it was announced before it came to this program)."""
    self.send([program])
    if died_planning(verdict := self.receive()):
      self.send([program])
      verdict = self.receive()
    self.finish()
    return verdict

  def stop(self) -> None:
    if self.process is not None:
      self.process.kill()
      self.process.join()
      self.process = None
    self.in_batch, self.announced = False, None
