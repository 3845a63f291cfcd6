"""A fuzz worker starved of the CPU by a loaded machine is not a hang: while the machine is oversubscribed and the
worker gets some CPU but under half a core, the wait goes on (worker.STARVED_PERIODS more timeouts at most); a worker
that gets no CPU (asleep in a deadlock) or a whole core (spinning) is a hang after one timeout, as before. Campaigns
run beside other work wrote "hangs" whose programs passed in seconds when replayed."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from refgrad.testing.fuzz import worker as worker_module
from refgrad.testing.fuzz.program_check import run_one
from refgrad.testing.fuzz.worker import Worker, process_tree_cpu, starved
from refgrad.testing.programs import Step, TensorProgram

BROKEN_FILE = str(Path(__file__).with_name("broken_devices.py"))
sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402

CORES = os.cpu_count() or 1


@pytest.mark.parametrize("cpu,period,load,verdict", [
  (3.0, 30.0, CORES + 1.0, True),      # oversubscribed, running at a tenth of a core: starved
  (3.0, 30.0, float(CORES), False),    # a load the cores carry: nothing starves it
  (0.0, 30.0, CORES + 5.0, False),     # no CPU at all: asleep (a deadlock), not waiting for a core
  (15.0, 30.0, CORES + 5.0, False),    # half a core: it had the CPU and did not answer
  (14.9, 30.0, CORES + 5.0, True),
])
def test_a_worker_is_starved_only_on_an_oversubscribed_machine_running_at_under_half_a_core(cpu, period, load,
                                                                                              verdict):
  assert starved(cpu, period, load, CORES) is verdict


def test_process_tree_cpu_counts_the_descendants_and_is_none_once_the_process_is_gone():
  spin = [sys.executable, "-c", "import time\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"]
  shell = subprocess.Popen(["sh", "-c", f"'{spin[0]}' -c '{spin[2]}' & wait"])  # the CPU is the grandchild's
  try:
    first = process_tree_cpu(shell.pid)
    time.sleep(1.0)
    second = process_tree_cpu(shell.pid)
  finally:
    shell.wait(30)
  assert first is not None and second is not None and second - first > 0.05
  assert process_tree_cpu(shell.pid) is None


def max_program() -> TensorProgram:
  """x.maximum(y): a kernel with a MAX op, which CRASHY_STARVED runs slowly (broken_devices.STARVED_SECONDS)."""
  x = np.array([1.0, -2.0, 0.0, -0.0], np.float32)
  return TensorProgram([x, -x], [Step("maximum", (0, 1), (True, True))])


@pytest.mark.parametrize("load,kind", [(CORES + 3.0, "ok"), (0.0, "hang")])
def test_a_starved_worker_gets_more_time_only_while_the_machine_is_oversubscribed(load, kind, monkeypatch):
  """CRASHY_STARVED's kernel takes 4.5 s at a sixth of a core, the timeout is 2 s: with the machine's load above the
  cores the worker is given more periods and answers (right); with a quiet machine it is a hang after 2 s."""
  monkeypatch.setattr(worker_module.os, "getloadavg", lambda: (load, load, load))
  with broken_devices.registered():
    worker = Worker("CRASHY_STARVED", [BROKEN_FILE], timeout=2.0)
    try:
      verdict = worker.run(max_program())
    finally:
      worker.stop()
  assert verdict.kind == kind, verdict.detail
  assert broken_devices.STARVED_SECONDS < 2.0 * (1 + worker_module.STARVED_PERIODS)


def test_a_batch_read_as_it_runs_gives_each_program_its_own_verdict_and_reads_the_cpu_only_to_wait(monkeypatch):
  """With more programs of the batch to come, the campaign sleeps (worker.SETTLE_SECONDS) and then reads what came
  meanwhile; it reads the worker's CPU (/proc) only when it has to wait, never for a message already there. Each
  program still gets its own verdict, in order: what run_one says of it in this process (ok, and the (op, dtype)
  pairs its kernels ran)."""
  reads = []
  monkeypatch.setattr(worker_module, "process_tree_cpu", lambda pid: reads.append(pid) or 0.0)
  x = np.array([[1.5, -2.0, 0.0], [-0.0, 3.25, 7.0]], np.float32)
  programs = [max_program(), TensorProgram([x], [Step("sum", (0, 1), (True,))]),
              TensorProgram([x, x], [Step("mul", (0, 1), (True, True)), Step("exp2", (2,), (True,))]),
              TensorProgram([x.astype(np.int32)], [Step("neg", (0,), (True,))])]
  worker = Worker("PYTHON", [], timeout=30.0)
  try:
    worker.send(programs)
    assert worker.conn.poll(60)  # the first verdict is waiting: reading it needs no wait
    reads.clear()
    got = [worker.receive()]
    assert reads == []
    got += [worker.receive(more_to_come=i < len(programs) - 1) for i in range(1, len(programs))]
    worker.finish()
  finally:
    worker.stop()
  expected = []
  for program in programs:
    covered: set[tuple[str, str]] = set()
    expected.append((*run_one(program, "PYTHON", covered), sorted(covered)))
  assert [(v.kind, v.detail, v.coverage) for v in got] == expected
  assert {("MAX", "float32"), ("EXP2", "float32"), ("NEG", "int32")} <= {pair for v in got for pair in v.coverage}
