"""`refgrad selftest`'s check steps compile their kernels ahead in growing batches (1, 2, 4, ... steps, then refgrad
check's 32) and give what one step at a time gives: the same results, and a planted bug stops the check at the
same step with the same failing cells, a wrong kernel or one its compiler rejects. The devices are
tests/broken_devices.py's compiled ones, whose compiler counts what it compiled."""
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

import refgrad.testing.conformance.run as conformance
from refgrad import Device
from refgrad.device import LRU
from refgrad.testing.oracle.prepare import growing_batches
from refgrad.testing.selftest.runner import Job, _check, check_steps

sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402

ROWS = frozenset({"CMPLT", "MAX"})  # 25 steps: 6 batches
# 7 steps: the first failure of BATCHED_COMPILE_ERROR (elementwise chain) and BATCHED_CMPLT (indexing and padding)
# is in the third batch, after its first step
LATE_FAILURE_ROWS = frozenset({"REDUCE ADD of products, exact in every order", "elementwise chain",
                               "indexing and padding", "integer arithmetic"})


@pytest.fixture(autouse=True)
def registered():
  with broken_devices.registered():
    yield


def fresh(device: str, monkeypatch: pytest.MonkeyPatch, cache: Path):
  """The device's compiler, with nothing loaded, compiled (`cache` is a new compile cache) or counted yet."""
  monkeypatch.setenv("REFGRAD_CACHE", str(cache))
  impl = Device[device]
  monkeypatch.setattr(impl, "_runners", LRU(impl.runner_cache))
  monkeypatch.setattr(impl.compiler, "batches", [])
  monkeypatch.setattr(impl.compiler, "singles", 0)
  return impl.compiler


def check_events(device: str, batched: bool, monkeypatch: pytest.MonkeyPatch, cache: Path) -> list[tuple]:
  """What a mutant's check reports (the steps run, the failing cells with their details), without the times."""
  events = []
  with monkeypatch.context() as patch:
    fresh(device, patch, cache)
    if not batched:
      patch.setattr(conformance, "prepare_units", lambda units, device: None)
    _check(Job("planted", device, 0.0, LATE_FAILURE_ROWS, None, ""), lambda *event: events.append(event),
           time.perf_counter())
  return [(tag, args[0], *args[2:]) for tag, *args in events]


def test_the_steps_compile_in_growing_batches_with_the_results_of_one_step_at_a_time(monkeypatch, tmp_path):
  compiler = fresh("BATCHED", monkeypatch, tmp_path / "batched")
  steps = check_steps("BATCHED", ROWS)
  batched = [asdict(r) for _, run in steps for r in run()]
  batches = growing_batches(len(steps), conformance.PREPARED_UNITS)
  assert len(batches) > 2 and len(compiler.batches) + compiler.singles <= len(batches)  # one compiler run each
  assert max(compiler.batches) > len(batches[1])  # the last batches held many kernels
  fresh("BATCHED", monkeypatch, tmp_path / "alone")
  monkeypatch.setattr(conformance, "prepare_units", lambda units, device: None)
  alone = [asdict(r) for _, run in check_steps("BATCHED", ROWS) for r in run()]
  assert batched == alone and compiler.singles > len(batches)  # one compiler run a kernel


@pytest.mark.parametrize("device,detail", [("BATCHED_CMPLT", "from the reference"),
                                           ("BATCHED_COMPILE_ERROR", "cannot take MAX")])
def test_a_planted_bug_stops_the_check_at_the_same_step_with_the_same_failing_cells(device, detail, monkeypatch,
                                                                                   tmp_path):
  batched = check_events(device, True, monkeypatch, tmp_path / "batched")
  assert batched == check_events(device, False, monkeypatch, tmp_path / "alone")
  failures = [event for event in batched if event[0] == "fail"]
  assert failures and all(detail in event[2] for event in failures) and batched[-1][1] in (5, 6)
