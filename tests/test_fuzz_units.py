"""The small pieces fuzz campaigns and reports are built of, at the points users hit: ULP histograms at signed zeros,
NaN, infinities, empty and 0-d outputs; array values drawn from bytes at zero bytes and the dtype's extremes; a
findings index that is not one; a Ray worker's chunk that is not a campaign's."""
import json
import warnings
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from refgrad.alu import ulp_distance
from refgrad.dtype import dtypes
from refgrad.testing.edges import edge_values
from refgrad.testing.fuzz.engines import RayEngine
from refgrad.testing.fuzz.findings import FindingsDir, FindingsIndexWarning
from refgrad.testing.fuzz.results import Chunk, Finding, HarnessError
from refgrad.testing.oracle.compare import add_histogram, ulp_bucket, ulp_histogram
from refgrad.testing.programs import Step, TensorProgram
from refgrad.testing.strategies import ALL, value_pool, values_from_bytes


@pytest.mark.parametrize("distance,bucket", [(0, 0), (1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16),
                                             (2**63 + 1, 2**64)])
def test_ulp_buckets_are_powers_of_two_above_two(distance, bucket):
  assert ulp_bucket(distance) == bucket


@pytest.mark.parametrize("np_dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_ulp_histogram_at_zeros_nans_and_infinities(np_dtype):
  info = ml_dtypes.finfo(np_dtype)
  actual = np.array([0.0, -0.0, np.nan, np.nan, 1.0, np.inf, float(info.max), -np.inf], dtype=np_dtype)
  expected = np.array([-0.0, 0.0, np.nan, 2.0, 1.0, float(info.max), np.inf, -np.inf], dtype=np_dtype)
  # +0.0 against -0.0 is no distance; NaN lanes hold none; inf is one step past max either way
  assert ulp_histogram(actual, expected) == {0: 4, 1: 2}
  keep = ~(np.isnan(actual.astype(np.float64)) | np.isnan(expected.astype(np.float64)))
  assert sum(ulp_histogram(actual, expected).values()) == int(ulp_distance(actual[keep], expected[keep]).size)


def test_ulp_histogram_of_empty_0d_and_undefined_lanes():
  empty = np.zeros((0, 3), np.float32)
  assert ulp_histogram(empty, empty) == {}
  assert ulp_histogram(np.float32(1.0), np.nextafter(np.float32(1.0), np.float32(2.0))) == {1: 1}
  a, b = np.array([1.0, 1.0], np.float32), np.array([1.0, 3.0], np.float32)
  assert ulp_histogram(a, b, undefined=np.array([False, True])) == {0: 1}


def test_add_histogram_adds_bucket_by_bucket():
  assert add_histogram({0: 1, 2: 5}, {2: 1, 8: 3}) == {0: 1, 2: 6, 8: 3}


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_zero_bytes_give_zeros_and_every_value_is_the_dtypes_own(dtype):
  assert values_from_bytes(bytes(8), dtype) == [value_pool(dtype)[0][0]] * 4
  assert all(v == 0 for v in values_from_bytes(bytes(8), dtype))
  as_edges = values_from_bytes(bytes(b for lo in range(256) for b in (100, lo)), dtype)  # 100: the edge part
  assert {v for v in edge_values(dtype) if v == v} <= set(as_edges)  # every edge value (NaN is unequal to itself)
  every = values_from_bytes(bytes(b for hi in range(256) for lo in (0, 255) for b in (hi, lo)), dtype)
  if dtypes.is_int(dtype):
    assert all(dtypes.min(dtype) <= v <= dtypes.max(dtype) for v in every)
  assert values_from_bytes(bytes(8), dtype, edges=False) == values_from_bytes(bytes(8), dtype)


@pytest.mark.parametrize("x", [np.zeros((0, 3), np.int8), np.zeros((2, 0, 4), np.float16), np.zeros((3, 0), np.bool_),
                               np.zeros((0, 2), ml_dtypes.bfloat16), np.array(-0.0, np.float32),
                               np.array([[1.5, -0.0, np.nan]], np.float64)])
def test_a_finding_file_rebuilds_its_inputs_with_their_shapes_and_dtypes(x, tmp_path):
  """An empty input's shape is not in its values ((0, 3).tolist() is []): a finding of this session's campaign wrote
  np.array([]) for one, and its pytest file failed in the program's sum(1) instead of reproducing the finding."""
  import runpy

  from refgrad.testing.fuzz.findings import finding_source
  from refgrad.testing.programs import Step, TensorProgram
  program = TensorProgram([x], [Step("sum", (0, -1), (True, False))] if x.ndim else [Step("neg", (0,), (True,))])
  path = tmp_path / "test_finding_rebuilt.py"
  path.write_text(finding_source("mismatch", "planted", program, "PYTHON", []))
  source = path.read_text()
  literal = source.split("inputs = [")[1].split("]\n  check_against_reference")[0].strip()
  rebuilt = eval(literal, {"np": np, "ml_dtypes": ml_dtypes, "nan": np.nan, "inf": np.inf})  # noqa: S307
  assert rebuilt.shape == x.shape and rebuilt.dtype == x.dtype
  assert rebuilt.tobytes() == x.tobytes()  # bit for bit: -0.0 and NaN too
  runpy.run_path(str(path))["test_finding"]()  # replays on PYTHON, where the program is right (if the shape came back)


def _raise_in_a_backend(depth: int) -> None:
  if depth:
    _raise_in_a_backend(depth - 1)
  raise IndexError("index 16 is out of bounds for axis 0 with size 16")


def test_a_finding_header_shows_an_errors_exception_and_says_what_it_left_out():
  """An error's report is a traceback, its exception on the last line: the header quoted its first 12 lines, so a
  finding of a backend's out-of-bounds load showed frames and no error."""
  import traceback

  from refgrad.testing.fuzz.findings import HEADER_LINES, finding_source
  from refgrad.testing.programs import Step, TensorProgram
  try:
    _raise_in_a_backend(10)
  except IndexError:
    detail = traceback.format_exc()
  lines = detail.splitlines()
  assert len(lines) > HEADER_LINES
  program = TensorProgram([np.zeros(3, np.float32)], [Step("neg", (0,), (True,))])
  header = finding_source("error", detail, program, "PYTHON", []).split("\ndef program")[0]
  assert "# IndexError: index 16 is out of bounds for axis 0 with size 16" in header
  assert f"[{len(lines) - HEADER_LINES} more lines of the report left out" in header
  assert "Traceback (most recent call last)" not in header  # the lines left out are the first ones


def test_a_finding_header_says_when_it_cut_a_mismatchs_kernel_source():
  from refgrad.testing.fuzz.findings import HEADER_LINES, finding_source
  from refgrad.testing.programs import Step, TensorProgram
  detail = "\n".join(["TOY differs from the reference in kernel 0", "kernel source on TOY:",
                      *(f"  v{i} = v{i - 1} + 1" for i in range(1, 30))])
  program = TensorProgram([np.zeros(3, np.float32)], [Step("neg", (0,), (True,))])
  header = finding_source("mismatch", detail, program, "PYTHON", []).split("\ndef program")[0]
  assert "# TOY differs from the reference in kernel 0" in header and f"v{HEADER_LINES - 2} =" in header
  assert f"v{HEADER_LINES - 1} =" not in header
  assert f"[{31 - HEADER_LINES} more lines of the report left out: run this file to see it whole]" in header


SIGNATURE = "ab" * 32
GOOD_ENTRY = {"kind": "mismatch", "device": "CLANG", "file": "test_finding_clang_mismatch_abababababab.py", "count": 3}
BAD_INDEXES = {"not JSON": '{"' + SIGNATURE, "a list": "[1, 2]", "nested too deep": "[" * 10**5,
               "an entry that is a number": json.dumps({SIGNATURE: 5}),
               "a count that is a string": json.dumps({SIGNATURE: {**GOOD_ENTRY, "count": "3"}}),
               "a negative count": json.dumps({SIGNATURE: {**GOOD_ENTRY, "count": -4}}),
               "no kind": json.dumps({SIGNATURE: {k: v for k, v in GOOD_ENTRY.items() if k != "kind"}})}


def save_one_finding(folder) -> dict:
  """Save a campaign's index with one mismatch of SIGNATURE counted twice; the index written."""
  out = FindingsDir(str(folder), "CLANG", [], False)
  out.save_index(SimpleNamespace(signatures={SIGNATURE: Finding("mismatch", "", None, SIGNATURE, count=2)}))
  return json.loads((folder / "index.json").read_text())


@pytest.mark.parametrize("damage", BAD_INDEXES)
def test_a_findings_index_that_is_not_one_is_set_aside_with_a_warning_and_counting_starts_again(tmp_path, damage):
  index = tmp_path / "index.json"
  index.write_text(BAD_INDEXES[damage])
  with pytest.warns(FindingsIndexWarning, match=f"{index} is not a refgrad findings index.*moved to {index}.bad"):
    assert save_one_finding(tmp_path)[SIGNATURE]["count"] == 2
  assert (tmp_path / "index.json.bad").read_text() == BAD_INDEXES[damage]


def test_a_valid_findings_index_is_counted_on(tmp_path):
  (tmp_path / "index.json").write_text(json.dumps({SIGNATURE: GOOD_ENTRY}))
  with warnings.catch_warnings():
    warnings.simplefilter("error", FindingsIndexWarning)
    assert save_one_finding(tmp_path) == {SIGNATURE: {**GOOD_ENTRY, "count": 5}}


def program() -> TensorProgram:
  return TensorProgram([np.zeros(2, np.float32)], [Step("neg", (0,), (True,))])


BAD_CHUNKS = {"not a chunk": ({"programs": 3}, "dict, not a Chunk"),
              "a negative count": (Chunk(programs=-1), r"counts \(-1, 0, 0, 0\)"),
              "a negative cut count": (Chunk(cut=-2), r"counts \(0, 0, 0, -2\)"),
              "a string count": (Chunk(batches="2"), "counts .* not non-negative ints"),
              "infinite seconds": (Chunk(seconds=float("inf")), "seconds inf"),
              "a path for a kind": (Chunk(findings=[Finding("../../x", "", program(), SIGNATURE)]), "a finding"),
              "a path for a signature": (Chunk(findings=[Finding("crash", "", program(), "../" * 22)]), "a finding"),
              "code for a program": (Chunk(findings=[Finding("crash", "", "import os", SIGNATURE)]), "a finding")}


@pytest.mark.parametrize("case", BAD_CHUNKS)
def test_a_ray_workers_chunk_that_is_not_a_campaigns_is_refused_naming_the_worker(case):
  sent, message = BAD_CHUNKS[case]
  engine = object.__new__(RayEngine)  # no cluster: its ray.get hands back what a worker sent
  engine.ray, engine.names = SimpleNamespace(get=lambda ref: ref), ["ray-0", "ray-1"]
  with pytest.raises(HarnessError, match=f"ray-1 sent a chunk of work with {message}"):
    engine._result(sent, 1)
  good = Chunk(programs=4, seconds=1.5, findings=[Finding("crash", "", program(), SIGNATURE)])
  assert engine._result(good, 1) is good
