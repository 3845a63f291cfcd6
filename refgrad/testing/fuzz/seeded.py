"""Programs drawn from seeds, without hypothesis's engine: a campaign's batches are drawn here, each program by the
campaign's own strategy code from a ConjectureData fed by a seeded PRNG, and its choices kept. A program that fails
is given back to hypothesis as those choices (SeededDatabase), which replays it, shrinks it and saves the result.

Why: hypothesis's engine costs about as much as the draws themselves (its generation loop, the data tree, its
per-example wrapper), and data.draw's bookkeeping (spans, labels) as much again; neither changes what is drawn.
FastDraw makes the same choices through the same provider (so the same odds of edge values), skipping both.

One thing of hypothesis's provider is left out: now and then it draws a numeric literal of the "local" modules
loaded in the process (any module outside site-packages and the standard library: refgrad itself when installed
editable, a backend's plugin file), and keeps the first set it found for each kind of draw. A seed's programs then
depended on which modules a process had loaded when it first drew, and on every literal of refgrad's source.
SeededProvider draws hypothesis's global constants (its edge values) only, so a seed draws the same programs in
every process and on every commit whose strategies are the same."""
from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from hypothesis.control import BuildContext
from hypothesis.database import ExampleDatabase, choices_to_bytes
from hypothesis.errors import StopTest
from hypothesis.internal.conjecture.choice import choice_constraints_key, choice_permitted
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.internal.conjecture.providers import GLOBAL_CONSTANTS, HypothesisProvider
from hypothesis.strategies import SearchStrategy
from hypothesis.strategies._internal.core import CompositeStrategy
from hypothesis.strategies._internal.lazy import unwrap_strategies
from hypothesis.strategies._internal.strategies import OneOfStrategy, SampledFromStrategy

# hypothesis keeps a test's examples under its key, and reads its secondary key (older failures, never known to be
# shrunk) only when the primary holds too few; an example read from the primary is taken as shrunk already.
SECONDARY_SUFFIX = b".secondary"


class FastDraw:
  """A `draw` for composite strategies that makes the choices data.draw would (the same primitive draws, in the same
  order, so hypothesis replays the result exactly), without its per-call bookkeeping: composites and one_of are
  unfolded here, sampled_from picks its index itself, anything else runs its own do_draw."""

  def __init__(self, data: ConjectureData):
    self.data = data

  def __call__(self, strategy: SearchStrategy[Any]) -> Any:
    s = unwrap_strategies(strategy)
    if isinstance(s, CompositeStrategy):
      return s.definition(self, *s.args, **s.kwargs)
    if type(s) is OneOfStrategy:
      branches = s.element_strategies
      return self(branches[self.data.draw_integer(0, len(branches) - 1)] if len(branches) > 1 else branches[0])
    if type(s) is SampledFromStrategy and not s._transformations:  # not JustStrategy, which draws nothing
      return s.elements[self.data.draw_integer(0, len(s.elements) - 1)]
    return s.do_draw(self.data)


class SeededProvider(HypothesisProvider):
  """hypothesis's provider, drawing a constant from hypothesis's global constants only (module docstring)."""

  _constants: dict[tuple, tuple] = {}  # the permitted global constants, in a fixed order, by kind of draw
  KINDS_KEPT = 4096  # kinds of draw (a type and its bounds) whose constants are kept; then the dict starts anew

  def _maybe_draw_constant(self, choice_type: str, constraints: Any, *, p: float = 0.05) -> Any:
    if self._random.random() > p:
      return None
    key = (choice_type, choice_constraints_key(choice_type, constraints))
    if key not in self._constants:
      if len(self._constants) >= self.KINDS_KEPT:
        self._constants.clear()
      permitted = (c for c in GLOBAL_CONSTANTS.set_for_type(choice_type) if choice_permitted(c, constraints))
      self._constants[key] = tuple(sorted(permitted, key=repr))  # a set's order may differ between processes
    pool = self._constants[key]
    return self._random.choice(pool) if pool else None


def draw_seeded(strategy: SearchStrategy[Any], seed: str) -> tuple[Any, tuple] | None:
  """(example, its choices) drawn from `strategy` by a PRNG seeded with `seed`, the same in every process; None if
  the draw was rejected (hypothesis would discard it too)."""
  data = ConjectureData(random=random.Random(seed), provider=SeededProvider)
  try:
    with BuildContext(data, wrapped_test=draw_seeded):
      example = FastDraw(data)(strategy)
  except StopTest:
    return None
  data.freeze()
  return example, data.choices


def program_seed(batch_seed: int, position: int) -> str:
  """The seed of the `position`-th program of the batch seeded `batch_seed`."""
  return f"{batch_seed}:{position}"


class SeededDatabase(ExampleDatabase):
  """The example database of a replay: `choices` (one failing program) read under the test's secondary key (so that
  hypothesis shrinks it), nothing else read; what hypothesis saves or deletes goes to `database` (None: nowhere)."""

  def __init__(self, key: bytes, choices: tuple, database: ExampleDatabase | None):
    super().__init__()
    self.secondary, self.example, self.database = key + SECONDARY_SUFFIX, choices_to_bytes(choices), database

  def fetch(self, key: bytes) -> Iterable[bytes]:
    return [self.example] if key == self.secondary else []

  def save(self, key: bytes, value: bytes) -> None:
    if self.database is not None:
      self.database.save(key, value)

  def delete(self, key: bytes, value: bytes) -> None:
    if self.database is not None:
      self.database.delete(key, value)
