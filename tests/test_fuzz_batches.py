"""The fuzz campaign and `refgrad check` compile a batch's kernels at once (DeviceImpl.prepare) and find what they
found one kernel at a time: the same verdicts, a wrong kernel or one its compiler rejects, crashes on or hangs in
still a finding that names its kernel, and the worker carries on. The devices are tests/broken_devices.py's
compiled ones, whose compiler counts what it compiled and fails on kernels with a MAX op."""
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from refgrad import Device
from refgrad.codegen.pipeline import compile_ast
from refgrad.testing.conformance.run import all_units, merge, run_conformance, run_unit
from refgrad.testing.fuzz.campaign import Campaign, CampaignConfig
from refgrad.testing.fuzz.program_check import CompileAhead, prepare_programs, run_one
from refgrad.testing.fuzz.results import Chunk
from refgrad.testing.fuzz.signatures import finding_signature
from refgrad.testing.oracle.reference import reference_schedule
from refgrad.uop import Ops

BROKEN_FILE = str(Path(__file__).with_name("broken_devices.py"))
sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
  """The broken devices registered, and a compile cache of the test's own (the worker processes inherit it), so
  every kernel is compiled here."""
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
  with broken_devices.registered():
    yield


def campaign(device: str, compile_ahead: bool = True, timeout: float = 30.0) -> Campaign:
  return Campaign(CampaignConfig(device, (BROKEN_FILE,), timeout, compile_ahead=compile_ahead))


def verdicts(device: str, compile_ahead: bool, batches: int) -> list[tuple]:
  """Every program of the first batches, with what the worker said of it."""
  runner, seen = campaign(device, compile_ahead), []
  judge = runner._verdict
  runner._verdict = lambda chunk, program, verdict: (seen.append((program.to_python(), verdict)),
                                                     judge(chunk, program, verdict))[1]
  try:
    for _ in range(batches):
      runner._batch(Chunk(), time.monotonic() + 60)
  finally:
    runner.close()
  return seen


def max_kernel(program, device: str) -> int | None:
  """The schedule item of the program's first kernel with a MAX op on the device (where the faulty compilers fail)."""
  for index, item in enumerate(reference_schedule(program.run, *program.inputs)):
    if not item.is_transfer and any(u.op is Ops.MAX for u in compile_ast(item.ast, Device[device].caps).uops):
      return index
  return None


def test_a_batch_compiles_every_kernel_of_its_programs_in_one_go_and_runs_them_with_no_compile_left():
  runner = campaign("BATCHED")
  try:
    programs = runner._draw(0).programs
  finally:
    runner.close()
  compiler = Device["BATCHED"].compiler
  prepare_programs(programs, "BATCHED")
  assert len(compiler.batches) == 1 and compiler.batches[0] > 1 and compiler.singles == 0
  assert all(run_one(program, "BATCHED") == ("ok", "") for program in programs)
  assert len(compiler.batches) == 1 and compiler.singles == 0


def test_the_next_batch_compiles_in_the_background_and_its_checks_run_the_schedules_planned_for_it():
  """What a worker does with the batch it was announced (on a device whose compiler says it is isolated): its
  kernels compile in one batch in another thread, prepare only loads them, and each check runs its planned
  schedule, with no compile left."""
  runner = campaign("BATCHED")
  try:
    programs = runner._draw(0).programs
  finally:
    runner.close()
  compiler, ahead = Device["BATCHED"].compiler, CompileAhead()
  ahead.start(programs, "BATCHED", False)
  taken, plan = ahead.take()
  assert taken is programs and len(compiler.batches) == 1 and compiler.batches[0] > 1
  assert prepare_programs(programs, "BATCHED", plan=plan) is plan and len(plan.schedules) == len(programs)
  assert all(run_one(p, "BATCHED", schedule=s) == ("ok", "") for p, s in zip(programs, plan.schedules))
  assert len(compiler.batches) == 1 and compiler.singles == 0


def test_batched_and_one_at_a_time_give_the_same_verdicts_and_a_wrong_kernel_is_named():
  """BATCHED_CMPLT's compiler is isolated: compiled ahead, each batch after the first compiles while the one before
  runs."""
  batched = verdicts("BATCHED_CMPLT", True, 2)
  assert batched == verdicts("BATCHED_CMPLT", False, 2)  # the kernel sources too: they render alike in every process
  program, last = batched[-1]  # a batch stops at its first finding
  assert last.kind == "mismatch" and last.kernel == int(re.search(r"in kernel (\d+)", last.detail).group(1))


@pytest.mark.parametrize("device,kind", [("BATCHED_COMPILE_ERROR", "error"), ("BATCHED_COMPILE_CRASH", "crash"),
                                         ("BATCHED_COMPILE_HANG", "hang")])
def test_a_kernel_of_a_batch_its_compiler_rejects_crashes_on_or_hangs_in_is_a_finding_naming_it(device, kind):
  """The batch is compiled again in halves (an error) or run again one kernel at a time (a crash, a hang), so the
  finding is the first program with that kernel, signed with that kernel; the worker is replaced if it died and runs
  the next program."""
  runner = campaign(device, timeout=3.0)
  try:
    index = next(i for i in range(20) if any(max_kernel(p, device) is not None for p in runner._draw(i).programs))
    programs = runner._draw(index).programs
    position, suspect = runner._run_batch(Chunk(), programs)
    culprit = next(p for p in programs if max_kernel(p, device) is not None)
    assert suspect.kind == kind and suspect.program is culprit is programs[position]
    assert suspect.signature == finding_signature(kind, culprit, max_kernel(culprit, device))
    assert runner.worker.run(next(p for p in programs if max_kernel(p, device) is None)).kind == "ok"
  finally:
    runner.close()


def test_a_hang_planning_the_announced_batch_is_no_finding_and_the_batch_itself_names_its_kernel():
  """BATCHED_RENDER_HANG's renderer hangs on kernels with a MAX op and its compiler is isolated: the worker meets
  the hang planning the next batch while this one runs, so this one's remaining programs run again in a new worker
  (all fine), and the next batch's own prepare meets it again, which pins it to its program and kernel."""
  device = "BATCHED_RENDER_HANG"
  runner = Campaign(CampaignConfig(device, (BROKEN_FILE,), 3.0, batch=4))  # small batches: some have no MAX
  has_max = lambda index: any(max_kernel(p, device) is not None for p in runner._draw(index).programs)  # noqa: E731
  try:
    index = next(i for i in range(1, 20) if has_max(i) and not has_max(i - 1))
    before, chunk = runner._draw(index - 1).programs, Chunk()
    runner.batch_index = index  # the batch drawn and announced while the one before runs
    assert runner._run_batch(chunk, before) is None and chunk.programs == len(before) and not chunk.findings
    programs = runner._draw(index).programs
    position, suspect = runner._run_batch(Chunk(), programs)
    culprit = next(p for p in programs if max_kernel(p, device) is not None)
    assert suspect.kind == "hang" and suspect.program is culprit is programs[position]
    assert suspect.signature == finding_signature("hang", culprit, max_kernel(culprit, device))
  finally:
    runner.close()


def test_check_compiles_the_kernels_of_many_rows_in_one_batch_with_the_results_of_one_at_a_time():
  compiler = Device["BATCHED"].compiler
  batched = run_conformance("BATCHED", only="CMPLT").results
  assert compiler.batches and compiler.singles == 0  # every kernel compiled ahead, in batches
  units = [u for u in all_units() if any("CMPLT" in row for row in u.rows)]
  alone = merge([r for unit in units for r in run_unit(unit, "BATCHED").results])
  assert [asdict(r) for r in batched] == [asdict(r) for r in alone]


def test_check_finds_the_same_failing_cells_on_a_compiled_broken_device():
  failing = lambda device: {(r.row, r.column) for r in run_conformance(device, only="CMPLT").results  # noqa: E731
                            if r.status == "fail"}
  assert failing("BATCHED_CMPLT") == failing("BROKEN_CMPLT") != set()
