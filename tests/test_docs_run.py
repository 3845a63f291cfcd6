"""Every command and code block of README.md and docs/*.md runs, as written, in a subprocess of its own.

The pages are parsed into snippets: fenced blocks (```python, ```toml, and ``` for sample output) and the commands
of indented blocks. Each snippet has one entry in HOW, by its first line, saying how it is proven: run to completion
and checked; started and stopped with Ctrl-C once under way (campaigns of hours, stopped as a user stops them); found
word for word in the file it quotes; or run by another named test (the install and suite commands of .ci/run, the
Ray cluster of tests/test_fuzz_scale.py, the tutorial's blocks in tests/test_tutorial.py). A snippet without an
entry, or an entry without a snippet, fails, so the pages and this table cannot drift apart.

The pages' placeholders are filled in: MYDEV (your backend) is LLVM, `redis://fuzz-db:6379` a redis-server started
here, `CLANG|LLVM|OPENCL` its first choice, and `[optional arguments]` are left out. Commands run in a scratch
directory that links the checkout's examples/, tests/ and docs/, so what they write stays out of the checkout.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import interrupt_fuzz_under_way, local_redis

from refgrad import Device

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MYDEV = "LLVM"
LINKED = ("examples", "tests", "docs", "bench")


@dataclass(frozen=True)
class Snippet:
  page: str
  line: int
  kind: str  # "python", "toml", "output" or "command"
  text: str

  @property
  def key(self) -> str:
    return self.text.splitlines()[0].strip()


PROGRAMS = ("refgrad", "python", "pip", "pytest", "ray")  # what an indented line runs, if it is a command


def _commands(lines: list[str], start: int, page: str) -> list[Snippet]:
  """The commands of the indented block starting at lines[start] (not its comments, not a formula)."""
  found = []
  i = start
  while i < len(lines) and lines[i].startswith("    "):
    text = lines[i].strip()
    if text.split()[0] in PROGRAMS:
      found.append(Snippet(page, i + 1, "command", text))
    i += 1
  return found


def snippets() -> list[Snippet]:
  """Every fenced block and every command of an indented block, of every page."""
  found = []
  for path in PAGES:
    lines, page = path.read_text().splitlines(), path.relative_to(ROOT).as_posix()
    i, prose_before = 0, True
    while i < len(lines):
      line = lines[i]
      if line.startswith("```"):
        end = lines.index("```", i + 1)
        found.append(Snippet(page, i + 1, line[3:].strip() or "output", "\n".join(lines[i + 1:end]) + "\n"))
        i, prose_before = end + 1, False
        continue
      if line.startswith("    ") and prose_before:  # an indented block after a blank line; not a list's wrap
        found += _commands(lines, i, page)
        while i < len(lines) and lines[i].startswith("    "):
          i += 1
        continue
      prose_before = line.strip() == ""
      i += 1
  return found


# ---- how each snippet is proven
@dataclass(frozen=True)
class Run:
  """Run to completion within `timeout` seconds; exit status `status`; each of `prints` in its output, and each
  regular expression of `matches` found in it; each of `writes` a file it made."""
  timeout: float = 300
  status: int = 0
  prints: tuple[str, ...] = ()
  matches: tuple[str, ...] = ()
  writes: tuple[str, ...] = ()
  needs: tuple[str, ...] = ()  # devices that must be available
  instead: str = ""  # for a synopsis: the form of it that is run
  own_project: bool = False  # run in a folder of the user's own (a pytest command there collects only its tests)


@dataclass(frozen=True)
class Interrupt:
  """Start it, press Ctrl-C once its campaign is under way (every worker has reported, programs ran; at most
  `patience` seconds): it stops within 90 s with status 130, having run programs, and still writes its report
  files."""
  patience: float = 300
  writes: tuple[str, ...] = ()
  needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Quote:
  """Code quoted from a file of the checkout: found there word for word."""
  file: str


@dataclass(frozen=True)
class Elsewhere:
  """Run by another test, or by .ci/run, named here (the test checks the name exists)."""
  by: str
  why: str


@dataclass(frozen=True)
class Pytest:
  """A test function for the user's own suite: collected into the scratch directory's test file, with `prelude`
  (the imports the page gives earlier), and run by the page's `pytest --refgrad-device` command."""
  prelude: str = "import numpy as np\nfrom refgrad.testing.oracle.reference import check_against_reference\n"


@dataclass(frozen=True)
class Sample:
  """A sample of what a command prints (not code); its first words must be what the product prints."""
  source: str


CI = ".ci/run"
LEARNS = Run(600, matches=(r"accuracy (9\d|100)\.\d%",), needs=("CLANG",))  # an example's claim: >= 90% accuracy
HOW: dict[str, object] = {
  # README.md
  "from refgrad import Tensor, dtypes": Run(60),
  "pip install -e . && refgrad demo": Elsewhere(CI, "run in a bare virtualenv, as written"),
  "pip install -e \".[test,ray]\" -e plugins/clang -e plugins/llvm -e plugins/opencl -e plugins/torch -e plugins/xla "
  "-e plugins/onnx -e plugins/tinygrad && python -m pytest -n 3":
    Elsewhere(CI, "the test command: CI runs it in a fresh virtualenv, and this file runs inside it"),
  "pip install -e plugins/clang        # device CLANG: C compiled by clang (or $CC, cc), run through ctypes":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/llvm         # device LLVM: LLVM IR compiled by llvmlite, no external tools":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/opencl       # device OPENCL (alias GPU): OpenCL C through pyopencl; PoCL on a CPU":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/torch        # graph devices TORCH (eager) and INDUCTOR (torch.compile)":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/xla          # graph device XLA (jax.jit on the CPU)":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/onnx         # graph devices ORT and ORT_BASIC (onnxruntime on the CPU)":
    Elsewhere(CI, "installed by the test command"),
  "pip install -e plugins/tinygrad     # graph devices TINYGRAD_CPU, TINYGRAD_LLVM, TINYGRAD_PYTHON (tinygrad 0.14.0)":
    Elsewhere(CI, "installed by the test command"),
  "refgrad devices                     # every device, its plugin and version, available or why not":
    Run(60, prints=("PYTHON", "CLANG", "LLVM")),
  "refgrad check --device CLANG --html report.html     # conformance: every op x dtype x edge pair, cast":
    Run(600, prints=("passed",), writes=("report.html",), needs=("CLANG",)),
  "refgrad fuzz --device CLANG --seconds 600 --jobs 2  # random programs vs the reference; findings -> pytest files":
    Interrupt(needs=("CLANG",)),
  "refgrad fuzz --device CLANG --seconds 600 --opts    # the same, each kernel under random kernel-optimizer opts":
    Interrupt(needs=("CLANG",)),
  "refgrad selftest --device CLANG                     # the kit's own mutation score (also LLVM, OPENCL)":
    Elsewhere("tests/test_selftest.py", "runs the selftest's mutants of CLANG; the whole score takes minutes"),
  "refgrad reduce FINDING                              # shrink a finding's standalone reproducer (C-Vise)":
    Elsewhere("tests/test_reduce_command.py", "reduces a planted wrong kernel's reproducer with C-Vise"),
  "refgrad fuzz --device CLANG --seconds 3600 --jobs 2 --html campaign.html":
    Interrupt(writes=("campaign.html",), needs=("CLANG",)),
  "ray start --head --port 6379                        # on the head node; `ray start --address HEAD:6379` on others":
    Elsewhere("tests/test_fuzz_scale.py", "starts a Ray head node of its own (ray start --head) for its campaigns"),
  "refgrad fuzz --device CLANG --seconds 86400 --ray auto --workers 16 --html campaign.html":
    Elsewhere("tests/test_fuzz_scale.py", "runs campaigns as Ray actors on its cluster and stops one with Ctrl-C"),
  "refgrad fuzz --device CLANG --seconds 86400 --ray auto --workers 16 --database redis://fuzz-db:6379":
    Elsewhere("tests/test_fuzz_scale.py", "saves a finding into a real redis-server from Ray workers"),
  "python -m pytest --refgrad-database redis://fuzz-db:6379 --refgrad-device CLANG":
    Run(300, prints=("collected 0 items", "1 passed"), needs=("CLANG",), own_project=True),
  "python examples/mlp.py --device CLANG --steps 60   # a small MLP on generated spirals: >= 90% accuracy in 60 steps":
    LEARNS,
  "python examples/cnn.py --device CLANG              # a small CNN on generated shapes: >= 90% accuracy in 60 steps":
    LEARNS,
  "from refgrad import Tensor, TinyJit, nn": Run(120),
  "python examples/mlp.py --shard CLANG,CLANG:1 --steps 60": LEARNS,
  "python examples/cnn.py --shard CLANG,CLANG:1": LEARNS,
  "x, y = x.shard(shard, axis=0), y.shard(shard, axis=0)": Quote("examples/training.py"),
  "from refgrad import Tensor, Variable": Run(60),
  # docs/testing.md
  "import numpy as np": Run(120, needs=(MYDEV,)),
  "from refgrad.testing.oracle.graph_check import check_graph_against_reference, write_graph_standalone":
    Elsewhere("plugins/torch/tests/test_devices.py", "runs this check on INDUCTOR, shrinks and writes the script"),
  "MYDEV differs from the reference in kernel 0 (E_4, output float32[4]): 1 of 4 checked lanes (0 undefined, 0 "
  "unbounded skipped)": Sample("refgrad/testing/oracle/reference.py"),
  "def test_my_kernel(refgrad_device):": Pytest(),
  "pytest --refgrad-device MYDEV": Run(300, prints=("2 passed",), needs=(MYDEV,), own_project=True),
  "from hypothesis import given, settings": Pytest(),
  "refgrad check --device MYDEV --json report.json --html report.html":
    Run(600, prints=("passed",), writes=("report.json", "report.html"), needs=(MYDEV,)),
  "refgrad fuzz --device MYDEV --seconds 600 --jobs 2 --seed 1 --findings findings/": Interrupt(needs=(MYDEV,)),
  "python -m pytest --refgrad-database redis://fuzz-db:6379 --refgrad-device MYDEV [--refgrad-plugin my_backend.py]":
    Run(300, prints=("collected 0 items", "1 passed"), needs=(MYDEV,), own_project=True),
  "refgrad check --device BROKEN_CMPLT --plugin tests/broken_devices.py": Run(600, status=1, prints=("FAIL",)),
  "pytest tests/ --refgrad-full                 # every case on every device (REFGRAD_TEST_ALL=1 does the same)":
    Elsewhere("tests/test_cli_usage.py", "runs --refgrad-full, REFGRAD_TEST_ALL=1 and several REFGRAD_SAMPLE_SEEDs "
              "on an inner suite (the whole suite is .ci/run's)"),
  "refgrad selftest --device CLANG|LLVM|OPENCL [--fuzz-seconds 30] [--only NAME ...] [--rows ROW ...] [--list]":
    Run(120, prints=("15 mutants",), needs=("LLVM",), instead="refgrad selftest --device LLVM --list"),
  "from refgrad.codegen.simplify import symbolic_rules  # or your own PatternMatcher, or a list of rules":
    Run(120, prints=("rules", "instances")),
  "the reference's kernel path disagrees with the graph evaluator in kernel 0 (E_16, output float32): 1 of 16 ...":
    Sample("refgrad/testing/oracle/reference.py"),
  # docs/writing-a-backend.md
  "DeviceImpl(\"INDUCTOR\", HostAllocator(), graph=TorchGraphCompiler(compiled=True))":
    Elsewhere("plugins/torch/refgrad_torch/__init__.py", "make_device and refgrad_devices there, for both devices"),
  "pytest --refgrad-device PYLOOPS":
    Elsewhere("tests/test_plugins.py", "runs the suite's device tests on the example PYLOOPS plugin"),
}
# the tutorial's blocks are the example plugin's code: tests/test_tutorial.py runs them and compares them with it
TUTORIAL = Elsewhere("tests/test_tutorial.py", "runs the tutorial's blocks in order, in a fresh process")
TUTORIAL_TOML = Quote("examples/pyloops/pyproject.toml")


def how(snippet: Snippet) -> object:
  if snippet.page == "docs/writing-a-backend.md" and snippet.kind == "python":
    return TUTORIAL
  if snippet.page == "docs/writing-a-backend.md" and snippet.kind == "toml":
    return TUTORIAL_TOML
  return HOW.get(snippet.key)


SNIPPETS = snippets()


def filled_in(text: str, redis_url: str | None) -> str:
  """The page's placeholders made real (see the module docstring)."""
  text = re.sub(r" \[[^\]]*\]", "", text)  # optional arguments
  text = text.replace("CLANG|LLVM|OPENCL", "CLANG").replace("MYDEV", MYDEV)
  return text.replace("redis://fuzz-db:6379", redis_url or "redis://fuzz-db:6379")


@pytest.fixture(scope="module")
def redis_url():
  with local_redis() as url:
    yield url


@pytest.fixture
def scratch(tmp_path):
  for name in LINKED:
    (tmp_path / name).symlink_to(ROOT / name)
  return tmp_path


def _environment() -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if not k.startswith(("REFGRAD_", "PYTEST_"))}
  return {**env, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"}


def _need(devices: tuple[str, ...]) -> None:
  missing = [d for d in devices if d not in Device.available()]
  if missing:
    pytest.skip(f"needs the device(s) {missing}, not available here")


def _user_tests() -> str:
  """The test file a reader of docs/testing.md sections 2 and 3 would have: each Pytest block under its prelude."""
  blocks = [s for s in SNIPPETS if isinstance(how(s), Pytest)]
  preludes = dict.fromkeys(how(s).prelude for s in blocks)
  body = "\n\n".join(filled_in(s.text, None) for s in blocks)
  return "".join(preludes) + "\n\n" + body


def _run(snippet: Snippet, rule: Run, cwd: Path, redis_url: str | None) -> None:
  _need(rule.needs)
  if rule.own_project:
    cwd = cwd / "project"
    cwd.mkdir()
  text = rule.instead or filled_in(snippet.text, redis_url)
  if "redis://fuzz-db" in text:
    pytest.skip("redis-server is not installed (.ci/run installs it)")
  if snippet.kind == "python":
    argv = [sys.executable, "-c", text]
  else:
    if text.startswith("pytest "):
      (cwd / "test_mydev.py").write_text(_user_tests())
    argv = ["bash", "-c", text]
  done = subprocess.run(argv, cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=rule.timeout)
  output = done.stdout + done.stderr
  where = f"{snippet.page}:{snippet.line}: {text.splitlines()[0]}\n{output[-3000:]}"
  assert done.returncode == rule.status, where
  assert "Traceback" not in output or rule.status == 1, where
  for words in rule.prints:
    assert words in output, f"{words!r} not printed by {where}"
  for pattern in rule.matches:
    assert re.search(pattern, output), f"nothing matching {pattern!r} printed by {where}"
  for name in rule.writes:
    assert (cwd / name).stat().st_size > 0, f"{name} not written by {where}"


def _interrupt(snippet: Snippet, rule: Interrupt, cwd: Path) -> None:
  _need(rule.needs)
  text = filled_in(snippet.text, None)
  process = subprocess.Popen(shlex.split(text.split("#")[0]), cwd=cwd, env=_environment(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
  out, err = interrupt_fuzz_under_way(process, rule.patience)
  where = f"{snippet.page}:{snippet.line}: {text}\n{(out + err)[-3000:]}"
  assert process.returncode == 130, where
  assert "interrupted" in out and "programs" in out and "Traceback" not in err, where
  assert not re.search(r"(?<![\d.])0 programs\b", out), where  # not "7.0 programs/s", a rate
  for name in rule.writes:
    assert (cwd / name).stat().st_size > 0, f"{name} not written by {where}"


def _quoted(snippet: Snippet, rule: Quote) -> None:
  source = (ROOT / rule.file).read_text()
  assert snippet.text.strip() in source or textwrap.dedent(snippet.text).strip() in textwrap.dedent(source), \
    f"{snippet.page}:{snippet.line} quotes {rule.file}, which no longer contains:\n{snippet.text}"


def _elsewhere(rule: Elsewhere) -> None:
  assert (ROOT / rule.by).exists(), f"{rule.by} is named as running this snippet but does not exist"


def _sample(snippet: Snippet, rule: Sample) -> None:
  """The sample's fixed words (its first line, the device name and numbers aside) are in the code that prints it."""
  words = re.findall(r"[a-z][a-z' ]{12,}[a-z]", snippet.key)
  source = (ROOT / rule.source).read_text()
  assert words and all(w.strip() in source for w in words), f"{snippet.page}:{snippet.line}: {words}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: f"{s.page}:{s.line}")
def test_the_snippet_runs_as_written(snippet, scratch, redis_url):
  rule = how(snippet)
  assert rule is not None, f"{snippet.page}:{snippet.line} has no entry in HOW: {snippet.key!r}"
  if isinstance(rule, Run):
    _run(snippet, rule, scratch, redis_url)
  elif isinstance(rule, Interrupt):
    _interrupt(snippet, rule, scratch)
  elif isinstance(rule, Quote):
    _quoted(snippet, rule)
  elif isinstance(rule, Elsewhere):
    _elsewhere(rule)
  elif isinstance(rule, Sample):
    _sample(snippet, rule)
  else:
    assert isinstance(rule, Pytest)  # run by the page's pytest command, with the other blocks of its file


def test_every_entry_names_a_snippet_of_the_pages():
  keys = {s.key for s in SNIPPETS}
  stale = [key for key in HOW if key not in keys]
  assert stale == [], f"entries of HOW for snippets no page has any more: {stale}"


def test_the_parser_finds_the_blocks_it_should():
  kinds = {s.kind for s in SNIPPETS}
  assert {"python", "command", "output", "toml"} <= kinds
  assert len([s for s in SNIPPETS if s.page == "README.md" and s.kind == "command"]) >= 15
