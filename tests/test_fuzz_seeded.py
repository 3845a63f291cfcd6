"""Programs drawn from seeds (refgrad/testing/fuzz/seeded.py): hypothesis replays each exactly from the choices that
drew it, and a campaign that meets a planted bug in one still has hypothesis shrink it and save it in the example
database, from which a later campaign replays it."""
import subprocess
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


DRAW_PROGRAMS = """
import hashlib, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "with literals":
  import many_literals  # noqa: F401  (a local module: hypothesis's provider would draw its literals now and then)
from refgrad.dtype import dtypes
from refgrad.testing.fuzz.campaign import programs_strategy
from refgrad.testing.fuzz.seeded import draw_seeded, program_seed
from refgrad.testing.strategies import ALL
for focus in (dtypes.float32, dtypes.int32):
  strategy = programs_strategy(focus, ALL)
  for position in range(150):
    drawn = draw_seeded(strategy, program_seed(7, position))
    text = "rejected" if drawn is None else drawn[0].to_python() + repr([x.tobytes() for x in drawn[0].inputs])
    print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_a_seed_draws_the_same_programs_whatever_local_modules_a_process_loaded(tmp_path):
  """hypothesis's provider draws, now and then, a literal of a local module the process has loaded: a seed's programs
  differed between processes (and between commits of refgrad). The seeded draws use global constants only."""
  literals = [*range(-40, 300), 0.3, -2.5, 7.75, 1e-3, 65504.5, -1e10, 3.0e38, 2.0**-140, 123456789]
  (tmp_path / "many_literals.py").write_text("\n".join(f"value_{i} = {v!r}" for i, v in enumerate(literals)) + "\n")

  def drawn(modules: str) -> list[str]:
    run = subprocess.run([sys.executable, "-c", DRAW_PROGRAMS, str(tmp_path), modules], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()
  plain, with_literals = drawn("plain"), drawn("with literals")
  assert len(plain) == 300 and plain == with_literals
