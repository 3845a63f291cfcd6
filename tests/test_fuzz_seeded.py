"""Programs drawn from seeds (refgrad/testing/fuzz/seeded.py): hypothesis replays each exactly from the choices that
drew it, and a campaign that meets a planted bug in one still has hypothesis shrink it and save it in the example
database, from which a later campaign replays it."""
import sys
import time
from pathlib import Path

import pytest
from hypothesis.control import BuildContext
from hypothesis.internal.conjecture.data import ConjectureData

from refgrad.dtype import dtypes
from refgrad.testing.fuzz.campaign import Campaign, CampaignConfig, programs_strategy, replay_database
from refgrad.testing.fuzz.program_check import run_one
from refgrad.testing.fuzz.results import Chunk
from refgrad.testing.fuzz.seeded import draw_seeded, program_seed
from refgrad.testing.strategies import ALL, coin, pick

BROKEN_FILE = str(Path(__file__).with_name("broken_devices.py"))
sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402


def replayed(strategy, choices: tuple):
  """What hypothesis draws from `strategy` given `choices`, through its own data.draw."""
  data = ConjectureData.for_choices(choices)
  with BuildContext(data, wrapped_test=replayed):
    return data.draw(strategy)


@pytest.mark.parametrize("focus", [dtypes.float32, dtypes.int8, dtypes.bool, dtypes.uint64])
def test_hypothesis_replays_every_seeded_program_from_its_choices(focus):
  strategy = programs_strategy(focus, ALL)
  texts = set()
  for position in range(60):
    program, choices = draw_seeded(strategy, program_seed(3, position))
    again = replayed(strategy, choices)
    assert again.to_python() == program.to_python()
    assert [(x.dtype, x.shape, x.tobytes()) for x in again.inputs] == [(x.dtype, x.shape, x.tobytes())
                                                                      for x in program.inputs]
    assert draw_seeded(strategy, program_seed(3, position))[0].to_python() == program.to_python()
    texts.add(program.to_python())
  assert len(texts) > 40  # seeds draw programs of every kind, not the simplest again and again


def test_a_seeded_failure_is_shrunk_saved_and_replayed_from_the_database(tmp_path, monkeypatch):
  # the broken devices known to this process for the whole test, whatever earlier tests of this worker registered
  # and unregistered (the campaign asks the device which dtypes it claims)
  with broken_devices.registered():
    monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path / "cache"))
    database = str(tmp_path / "examples")
    runner = Campaign(CampaignConfig("BROKEN_IDIV", (BROKEN_FILE,), database=database, max_findings=1))
    first_failures = []
    run_batch = runner._run_batch
    runner._run_batch = lambda chunk, programs: (failed := run_batch(chunk, programs),
                                                 first_failures.append(failed) if failed else None)[0]
    chunk, deadline = Chunk(), time.monotonic() + 300
    try:
      while not chunk.findings and time.monotonic() < deadline:
        chunk = runner.run_for(5.0)
    finally:
      runner.close()
    assert len(chunk.findings) == 1 and len(first_failures) == 1
    finding, (_, seeded) = chunk.findings[0], first_failures[0]
    assert finding.kind == seeded.kind == "mismatch"
    shrunk = finding.program
    size = lambda program: (len(program.to_python()), sum(x.size for x in program.inputs))  # noqa: E731
    assert size(shrunk) < size(seeded.program)  # hypothesis shrank it
    assert run_one(shrunk, "BROKEN_IDIV")[0] == "mismatch" and run_one(shrunk, "PYTHON")[0] == "ok"
    again = replay_database("BROKEN_IDIV", (database,), (BROKEN_FILE,))
    assert again.replayed >= 1 and [f.signature for f in again.findings] == [finding.signature]


def test_a_pick_of_integers_gives_integers_after_a_coin_was_drawn():
  """(0, 1) == (False, True): the strategies' cache of sampled_from once gave a program's step the value `vFalse`."""
  strategy = programs_strategy(dtypes.bool, ALL)
  texts = [draw_seeded(strategy, program_seed(11, position))[0].to_python() for position in range(200)]
  assert not any("vFalse" in text or "vTrue" in text for text in texts)
  data = ConjectureData.for_choices((1, 0))
  with BuildContext(data, wrapped_test=replayed):
    flipped, picked = coin(data.draw), pick(data.draw, (0, 1))
  assert flipped is True and picked == 0 and type(picked) is int
