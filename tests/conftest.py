"""pytest hooks of the suite: seeded sampling of long parametrizations on compiled devices, heap trimming, and
skips for dtypes a device does not declare. Helpers for the test files are in helpers.py.

The sample rotates: it is seeded by the commit checked out (`git rev-parse HEAD`; a fixed seed outside a git
checkout), so every commit runs another part of each long parametrization and no case stays deselected forever.
REFGRAD_SAMPLE_SEED=<any string> picks the sample (to replay a run, use the seed its header printed);
`--refgrad-full` (or REFGRAD_TEST_ALL=1) runs every case on every device. docs/testing.md says the same."""
import ctypes
import gc
import hashlib
import math
import os
import subprocess
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from xdist_crash_safe import pytest_xdist_make_scheduler  # noqa: F401  (a worker crash fails its test, never hangs)

# Exhaustive parametrizations run in full on the reference (PYTHON). On a compiled device, a test function with
# more than `above` cases runs a seeded sample of them: `above` cases and `fraction` of the rest. Compiling a kernel
# per case is what costs time there, and the cases differ mostly in values the reference already covers;
# `refgrad check` still runs every op x dtype over every ordered pair of edge values, every cast at its rounding
# boundaries, chains and reductions on every device (tests/test_oracle_kit.py). The sample is sized by what a new
# kernel costs on the device, measured in a cold run of the suite (2026-12-01): about 0.45 s on OPENCL (PoCL builds
# and then generates each kernel's work-group function), 0.12 s on CLANG (a clang process), 0.03 s on LLVM (in
# process). The seed rotates with the commit (module docstring); `--refgrad-full` or REFGRAD_TEST_ALL=1 runs every
# case everywhere. Deselected cases are counted in pytest's summary ("N deselected"), under xdist too
# (pytest_testnodedown below), and the header names the seed.
SAMPLE_SIZES: dict[str, tuple[int, float]] = {"LLVM": (8, 0.1), "CLANG": (4, 0.05), "OPENCL": (2, 0.05)}
DEFAULT_SAMPLE = (4, 0.05)  # any other compiled device (a third-party backend under --refgrad-device)


FIXED_SEED = "0"  # outside a git checkout (an sdist, a copied tree)


def pytest_addoption(parser):
  parser.addoption("--refgrad-full", action="store_true", default=False,
                   help="run every case of long parametrizations on compiled devices (no seeded sample)")


def _run_everything(config) -> bool:
  return config.getoption("--refgrad-full") or os.environ.get("REFGRAD_TEST_ALL") == "1"


def _sample_seed() -> str:
  """REFGRAD_SAMPLE_SEED if set, else the commit checked out, else FIXED_SEED."""
  if "REFGRAD_SAMPLE_SEED" in os.environ:
    return os.environ["REFGRAD_SAMPLE_SEED"]
  try:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True,
                          timeout=10)
  except (OSError, subprocess.SubprocessError):
    return FIXED_SEED
  return head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else FIXED_SEED


def pytest_configure(config):
  # every xdist worker reads the same checkout, so all of them draw the same sample
  config._refgrad_sample_seed = _sample_seed()
  config._refgrad_dropped_while_generating = set()  # node ids, filled by pytest_generate_tests


def pytest_report_header(config):
  if _run_everything(config):
    return "refgrad: every case on every device (--refgrad-full)"
  return f"refgrad: compiled devices run a sample of long parametrizations, seed {config._refgrad_sample_seed} " \
         "(REFGRAD_SAMPLE_SEED=<seed> replays it, --refgrad-full runs everything)"


def _sample_key(nodeid: str, seed: str) -> str:
  """Each device gets its own sample (the node id names the device), so together they cover more cases."""
  return hashlib.sha256(f"{seed}:{nodeid}".encode()).hexdigest()


def _device_of(item) -> str | None:
  return getattr(item, "callspec", None) and item.callspec.params.get("refgrad_device")


def _unrequested_compiler_variants(config) -> set[str]:
  """The C backend's other compiler configurations (GCC, CLANG_O3: refgrad_clang.C_COMPILERS), unless
  --refgrad-device or REFGRAD_DEVICE names devices. By default the suite runs on CLANG only, not three times on the
  C backend; plugins/clang/tests runs the conformance check on the others."""
  if config.getoption("--refgrad-device", None) or os.environ.get("REFGRAD_DEVICE"):
    return set()
  try:
    from refgrad_clang import C_COMPILERS
  except ImportError:
    return set()
  return {c.device for c in C_COMPILERS if c.device != "CLANG"}


def _sampled_out(cases, seed: str) -> set[str]:
  """The node ids the sample leaves out of `cases`, (function node id, device, case node id) triples: each test
  function's cases on one compiled device are one group."""
  groups: dict[tuple, list[str]] = {}
  for function, device, nodeid in cases:
    if device and device != "PYTHON":
      groups.setdefault((function, device), []).append(nodeid)
  dropped = set()
  for (_, device), nodeids in groups.items():
    above, fraction = SAMPLE_SIZES.get(str(device).upper(), DEFAULT_SAMPLE)
    if len(nodeids) > above:
      keep = above + math.ceil((len(nodeids) - above) * fraction)
      dropped.update(sorted(nodeids, key=lambda nodeid: _sample_key(nodeid, seed))[keep:])
  return dropped


def _samples_while_generating(config) -> bool:
  """The sample is drawn as each function's cases are generated, before pytest makes an item of each (two thirds
  of them would be made only to be dropped: seconds of every worker's collection, and its memory for the whole
  run), unless the run names cases (-k, -m, a node id): then the cases it names are sampled, once collected."""
  named = config.option.keyword or config.option.markexpr or any("::" in arg for arg in config.args)
  return not named


@pytest.hookimpl(wrapper=True)
def pytest_generate_tests(metafunc):
  result = yield
  config = metafunc.config
  if not _samples_while_generating(config) or not metafunc._calls:
    return result
  function = metafunc.definition.nodeid
  cases = [(function, call.params.get("refgrad_device"), f"{function}[{call.id}]") for call in metafunc._calls]
  variants = _unrequested_compiler_variants(config)
  dropped = {nodeid for _, device, nodeid in cases if device in variants}
  if not _run_everything(config):
    dropped |= _sampled_out(cases, config._refgrad_sample_seed)
  if dropped:
    config._refgrad_dropped_while_generating.update(dropped)
    # pytest's own list of the cases to make items of (Metafunc._calls: private, stable since pytest 3)
    metafunc._calls = [call for call, (_, _, nodeid) in zip(metafunc._calls, cases) if nodeid not in dropped]
  return result


def pytest_collection_modifyitems(config, items):
  dropped = set(config._refgrad_dropped_while_generating)
  reporter = config.pluginmanager.get_plugin("terminalreporter")
  if dropped and hasattr(reporter, "_numcollected"):  # its "N/M tests collected" line counts them as collected
    reporter._numcollected += len(dropped)
  if not _samples_while_generating(config):
    variants = _unrequested_compiler_variants(config)
    dropped |= {item.nodeid for item in items if _device_of(item) in variants}
    if not _run_everything(config):
      cases = [(item.nodeid.split("[")[0], _device_of(item), item.nodeid) for item in items]
      dropped |= _sampled_out(cases, config._refgrad_sample_seed)
  if dropped:
    # stand-ins, not the items: the terminal reporter keeps what it is given for the whole session, and two thirds
    # of the collected items (with their fixtures' requests, keywords and stashes) would stay alive in every worker
    config.hook.pytest_deselected(items=_stand_ins(sorted(dropped)))
    items[:] = [item for item in items if item.nodeid not in dropped]
  if hasattr(config, "workeroutput"):  # an xdist worker: its summary is not printed, the controller's is
    config.workeroutput["refgrad_deselected"] = sorted(dropped)
  _name_xdist_groups(config, items)


def _name_xdist_groups(config, items) -> None:
  """Under --dist loadgroup, xdist sends the tests whose node ids end in @GROUP to one worker. pytest-xdist 3.8 sets
  that id as Item._nodeid, which pytest 9.2 no longer reads (Node.nodeid is str(Node._id)): the groups were lost, and
  tests/test_fuzz_scale.py ran on both workers, each starting a Ray cluster and a campaign of its own."""
  if not getattr(config.option, "loadgroup", False):  # set in xdist workers under --dist loadgroup
    return
  for item in items:
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    suffix = "@" + "_".join(sorted(names))
    if names and not item.nodeid.endswith(suffix):
      from _pytest.nodeid import coerce_node_id  # pytest >= 9.2, where the suffix is missing
      item._id = coerce_node_id(item.nodeid + suffix)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
  """On the xdist controller, which collects nothing: the sample's deselections, counted once in its summary (every
  worker collects, and samples, the same tests)."""
  dropped = getattr(node, "workeroutput", {}).get("refgrad_deselected")
  if dropped and not getattr(node.config, "_refgrad_deselected_counted", False):
    node.config._refgrad_deselected_counted = True
    node.config.hook.pytest_deselected(items=_stand_ins(dropped))


def _stand_ins(nodeids) -> list[SimpleNamespace]:
  """Deselected items as the hook's implementations read them: the summary counts them, and hypothesis's reads each
  one's __dict__."""
  return [SimpleNamespace(nodeid=nodeid) for nodeid in nodeids]


# A worker runs thousands of tests; what they free (arrays of finished tests, kernels evicted from the LRU caches)
# glibc keeps mapped unless asked to give it back. Trimming the heap every TRIM_EVERY tests keeps a worker's resident
# memory at what it really holds (issue 12: under 1.5 GB through the whole suite).
TRIM_EVERY = 100
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
_tests_run = 0


# A test that loads a library built with -ffast-math (a planted mutant, a broken device) switches the whole worker to
# flush-to-zero, and every later float test in that worker would then fail for it. The mode is put back after such a
# test (glibc's fesetenv(FE_DFL_ENV), FE_DFL_ENV being (fenv_t *) -1) and the test named in pytest's warnings
# summary.
try:
  _libm = ctypes.CDLL("libm.so.6")
except OSError:  # not glibc
  _libm = None


def _restore_fp_mode(item) -> None:
  from refgrad.testing.oracle.reference import subnormals_flushed
  if _libm is not None and subnormals_flushed():
    _libm.fesetenv(ctypes.c_void_p(-1))
    warnings.warn(f"{item.nodeid} left this process in flush-to-zero mode; turned off after it", stacklevel=1)


def pytest_runtest_teardown(item, nextitem):
  global _tests_run
  _restore_fp_mode(item)
  _tests_run += 1
  if _malloc_trim is not None and _tests_run % TRIM_EVERY == 0:
    _malloc_trim(0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """A test that computes with a dtype its device does not declare (Capabilities.dtypes, e.g. float64 on an OpenCL
  device without cl_khr_fp64) is skipped on that device, with the reason, rather than failed."""
  outcome = yield
  report = outcome.get_result()
  if report.when != "call" or call.excinfo is None:
    return
  from helpers import declared_unsupported  # here, not at the top: helpers imports torch, which a pytest run of
  # files that never use it (a finding's reproducer, the docs' commands) would pay 2-3 s for
  if declared_unsupported(call.excinfo.value):
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1], f"Skipped: {call.excinfo.value} (not in Capabilities.dtypes)")


# Test files draw their values from a module-level `RNG = np.random.default_rng(seed)`. Drawn in whatever order a
# worker happens to run the file's tests (xdist's distribution, the rotating sample), a test's values changed from run
# to run, and a failure that depended on them did not come back when rerun. Each test's RNG restarts from its own node
# id, so its values are the same in every run, alone or in the whole suite.
@pytest.fixture(autouse=True)
def _values_of_this_test(request):
  module = getattr(request, "module", None)
  rng = getattr(module, "RNG", None)
  if isinstance(rng, np.random.Generator):
    module.RNG = np.random.default_rng(int.from_bytes(hashlib.sha256(request.node.nodeid.encode()).digest()[:8]))
  yield


@pytest.fixture
def collector_off():
  """The cyclic collector paused for the test: what only a reference cycle would keep alive stays alive, as it does
  between two collections."""
  enabled = gc.isenabled()
  gc.disable()
  yield
  if enabled:
    gc.enable()
