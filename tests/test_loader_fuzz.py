"""The loader harness (fuzzing/loaders.py) in the suite: a short deterministic hypothesis campaign per reader over
structured mutations of files torch, safetensors and refgrad wrote, held to the readers' contract (load what the
oracle loads, or raise ValueError naming the file; never crash, read outside the file or run code), and every canary
payload at every place a torch file's pickles are read. `python -m fuzzing.loaders --seconds 3600` is the long run.
"""
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the fuzzing/ folder beside refgrad/

from fuzzing import loaders  # noqa: E402
from fuzzing.mutators import LEGACY_PICKLES, MUTATORS, apply, archive_of, members_of  # noqa: E402
from fuzzing.payloads import in_legacy, in_zip, payloads  # noqa: E402

# 60 mutants per reader and format: about 3 s each on one core when the readers hold (25 ms a candidate)
CAMPAIGN = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
PLACES = ["zip: data.pkl replaced", "zip: before data.pkl", *(f"legacy: before the {p} pickle" for p in LEGACY_PICKLES)]


@pytest.fixture(scope="module")
def harness() -> loaders.Harness:
  return loaders.default_harness()


def check_mutant(harness: loaders.Harness, reader: str, fmt: str, data: st.DataObject) -> None:
  seed = data.draw(st.sampled_from(harness.seeds_of(fmt)), label="seed")
  steps = st.tuples(st.sampled_from(sorted(MUTATORS[fmt])), st.integers(0, 2**32 - 1))
  chain = data.draw(st.lists(steps, min_size=1, max_size=4), label="mutations")
  blob, done = apply(fmt, harness.seeds[seed], chain)
  verdict = harness.check(reader, blob)
  assert verdict.ok, f"{verdict.key()}\nmade from {seed} by:\n  " + "\n  ".join(done) + f"\n{verdict.detail}"


@pytest.mark.parametrize("reader,fmt", [("safe_load", "safetensors"), ("safe_load_metadata", "safetensors"),
                                        ("torch_load", "zip"), ("torch_load", "legacy")])
@CAMPAIGN
@given(data=st.data())
def test_a_reader_keeps_its_contract_on_mutated_files(harness, reader, fmt, data):
  check_mutant(harness, reader, fmt, data)


def test_every_seed_loads_as_its_oracle_loads_it(harness):
  """The campaign's starting points hold the contract unmutated (complex and float8 tensors: NotImplementedError
  naming the file)."""
  for name, data in sorted(harness.seeds.items()):
    for reader, fmts in loaders.FORMATS.items():
      if name.split("-")[0] in fmts:
        verdict = harness.check(reader, data)
        assert verdict.ok, f"{name} with {reader}: {verdict.key()}\n{verdict.detail}"


def placed(harness: loaders.Harness, payload: bytes, place: str) -> bytes:
  if place.startswith("zip"):
    return archive_of(in_zip(members_of(harness.seeds["zip-small.pt"]), payload, whole="replaced" in place))
  k = next(k for k, p in enumerate(LEGACY_PICKLES) if f"the {p} pickle" in place)
  return in_legacy(harness.seeds["legacy-small.pt"], k, payload, whole=False)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("payload", sorted(payloads()))
def test_no_pickle_of_a_torch_file_runs_code(harness, payload, place):
  """A payload that creates the canary file, opens the secret file, loads a library or starts a process if any
  unpickler calls what it names: the load keeps the whole contract (a stand-in object, or ValueError naming the
  file), and nothing ran."""
  data = placed(harness, payloads()[payload](str(harness.canary), str(harness.secret)), place)
  verdict = harness.check("torch_load", data)
  assert verdict.ok, f"{verdict.key()}\n{verdict.detail}"
