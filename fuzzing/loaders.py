"""The loader harness: refgrad's file readers (safe_load, safe_load_metadata, torch_load) run on candidate files and
held to their contract. For each candidate the reader either loads exactly what the oracle (torch.load with
weights_only=True, the safetensors package) loads from the same bytes -- or, where the oracle refuses and refgrad
may still load (a torch file naming classes torch refuses), only values whose bytes occur in the file -- or raises
ValueError (NotImplementedError for a documented unsupported feature) whose message names the file. It never
crashes the process, runs no code (no canary file appears, no process, library or foreign file is opened) and
refuses every safetensors file the safetensors package refuses.

Each candidate runs in a forked child (a crash or hang is a finding, not the end of the campaign) with its address
space limited to 2 GiB more than the harness's. `python -m fuzzing.loaders --seconds 3600` runs the long campaign.
"""
from __future__ import annotations

import argparse
import atexit
import hashlib
import io
import json
import marshal
import os
import pickle
import random
import re
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import refgrad.nn.state as state
import refgrad.nn.torch_file as torch_file
import refgrad.nn.untrusted as untrusted
import refgrad.safe_pickle as safe_pickle
from fuzzing.mutators import apply, random_step
from fuzzing.normal import normal, outside
from fuzzing.oracle import receive, send
from fuzzing.views import views_outside

READERS: dict[str, Callable[[Path], Any]] = {"safe_load": state.safe_load,
                                             "safe_load_metadata": state.safe_load_metadata,
                                             "torch_load": torch_file.torch_load}
FORMATS = {"safe_load": ("safetensors",), "safe_load_metadata": ("safetensors",), "torch_load": ("zip", "legacy")}
ORACLE_NAMES = {"safe_load": "the safetensors package", "safe_load_metadata": "the safetensors package",
                "torch_load": "torch.load(weights_only=True)"}
ALLOWED_ERRORS = (ValueError, NotImplementedError)
MEMORY_MARGIN = 2 * 2**30
REPO = Path(__file__).resolve().parents[1]
# audit events no file reader has a reason to raise: running processes or code, loading libraries, touching files
# other than the one it reads, the network ("compile" is left out: ast.literal_eval, which numpy's dtype parser
# uses, compiles without running anything; code that runs raises "exec")
WATCHED_EVENTS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
                  "subprocess.Popen", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "socket.connect",
                  "socket.bind", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate",
                  "shutil.rmtree", "shutil.copyfile", "webbrowser.open", "urllib.Request", "builtins.input", "exec"}
# the readers, the unpickler refgrad runs (pickle's pure-Python one) and the parsers under them
TRACED_FILES = {state.__file__, torch_file.__file__, untrusted.__file__, safe_pickle.__file__, pickle.__file__,
                zipfile.__file__, json.decoder.__file__}


@dataclass
class Verdict:
  """A candidate's outcome: kind is "" when the contract held, else the class of the finding; where tells findings of
  one kind apart (the line an exception came from, the part of a value that differs)."""
  kind: str = ""
  where: str = ""
  detail: str = ""
  edges: list[int] = field(default_factory=list)

  @property
  def ok(self) -> bool:
    return not self.kind

  def key(self) -> str:
    return f"{self.kind} @ {self.where}" if self.where else self.kind


class Harness:
  """A work folder (seeds, the candidate file, the canary folder and a secret file), the oracle process, and the
  forked runs of candidates."""

  def __init__(self, folder: Path | None = None, timeout: float = 10.0, coverage: bool = False):
    self.folder = folder or Path(tempfile.mkdtemp(prefix="refgrad-loader-fuzz-"))
    self.timeout, self.coverage = timeout, coverage
    self.canary_dir, self.secret = self.folder / "canary", self.folder / "secret.bin"
    self.canary = self.canary_dir / "ran"
    for sub in ("canary", "candidates"):
      (self.folder / sub).mkdir(parents=True, exist_ok=True)
    self.secret.write_bytes(b"SECRET:" + hashlib.sha256(b"refgrad").digest() * 2)
    self.oracle: subprocess.Popen | None = None
    self.seeds = {name: (self.folder / "seeds" / name).read_bytes() for name in self._start_oracle()}
    self._warm_up()

  def _warm_up(self) -> None:
    """Read every seed here once, so that the readers' lazy imports happen before any child forks (once per child
    would be slow, and the audit hook would see them)."""
    for reader, fmts in FORMATS.items():
      for name in self.seeds:
        if name.split("-")[0] in fmts:
          try:
            normal(READERS[reader](self.folder / "seeds" / name))
          except ALLOWED_ERRORS:  # a seed of a documented unsupported feature
            pass

  def _start_oracle(self) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    self.oracle = subprocess.Popen([sys.executable, "-m", "fuzzing.oracle", str(self.folder / "seeds")],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    return receive(self.oracle.stdout)

  def seeds_of(self, fmt: str) -> list[str]:
    return sorted(name for name in self.seeds if name.startswith(f"{fmt}-"))

  def ask_oracle(self, reader: str, path: Path) -> dict[str, Any]:
    """The oracle's answer; a crashed oracle (torch's or safetensors' own bug) is restarted and counts as refusing."""
    try:
      send(self.oracle.stdin, (reader, str(path)))
      return receive(self.oracle.stdout)
    except (EOFError, BrokenPipeError):
      self.oracle.wait()
      self._start_oracle()
      return {"loaded": False, "error": f"the oracle died (exit status {self.oracle.returncode})"}

  def check(self, reader: str, data: bytes) -> Verdict:
    """The reader's verdict on a candidate file's bytes."""
    path = self.folder / "candidates" / f"candidate-{reader}.bin"
    path.write_bytes(data)
    expected = self.ask_oracle(reader, path)
    verdict = run_forked(lambda: judge(reader, path, data, expected, self), self.timeout)
    if leftovers := sorted(p.name for p in self.canary_dir.iterdir()):
      shutil.rmtree(self.canary_dir)
      self.canary_dir.mkdir()
      return Verdict("code run", "canary file", f"the load created {leftovers} in the canary folder")
    return verdict

  def close(self) -> None:
    if self.oracle is not None:
      self.oracle.stdin.close()
      self.oracle.wait()
    shutil.rmtree(self.folder, ignore_errors=True)


def run_forked(work: Callable[[], Verdict], timeout: float) -> Verdict:
  """work's verdict computed in a forked child; a child killed by a signal, or running past timeout, is the
  finding."""
  read_end, write_end = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.close(read_end)
    _child(work, write_end)
  os.close(write_end)
  body, timed_out = _read_all(read_end, timeout)
  if timed_out:
    os.kill(pid, signal.SIGKILL)
  _, status = os.waitpid(pid, 0)
  if timed_out:
    return Verdict("hang", detail=f"no verdict within {timeout} s")
  if os.WIFSIGNALED(status):
    return Verdict(f"crash ({signal.Signals(os.WTERMSIG(status)).name})", detail="the process died")
  if not body:
    return Verdict("harness error", detail=f"the child exited with status {os.waitstatus_to_exitcode(status)}")
  kind, where, detail, edges = marshal.loads(body)
  return Verdict(kind, where, detail, edges)


def _child(work: Callable[[], Verdict], write_end: int) -> None:
  try:
    vm = int(next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize"))
             .split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + MEMORY_MARGIN, resource.RLIM_INFINITY))
    verdict = work()
    body = marshal.dumps((verdict.kind, verdict.where, verdict.detail, verdict.edges))
  except BaseException:  # a fault of the harness itself: reported, never mistaken for a verdict on refgrad
    body = marshal.dumps(("harness error", "", traceback.format_exc(), []))
  with os.fdopen(write_end, "wb") as out:
    out.write(body)
  os._exit(0)


def _read_all(fd: int, timeout: float) -> tuple[bytes, bool]:
  chunks, deadline = [], time.monotonic() + timeout
  with os.fdopen(fd, "rb", buffering=0) as pipe:
    while (left := deadline - time.monotonic()) > 0:
      if not select.select([pipe], [], [], left)[0]:
        break
      if not (chunk := pipe.read(1 << 16)):
        return b"".join(chunks), False
      chunks.append(chunk)
  return b"".join(chunks), True


class _Watch:
  """In the child: what the audit hook saw while the reader ran, and its coverage when asked for."""

  def __init__(self, path: Path, coverage: bool):
    self.path, self.events, self.on, self.edges = str(path), [], False, set()
    self.coverage = coverage
    sys.addaudithook(self.hook)

  def hook(self, event: str, args: tuple) -> None:
    if self.on and (event in WATCHED_EVENTS and not self._import(event, args) or
                    event == "open" and self._foreign(args[0])):
      self.events.append(f"{event} {args!r:.200}")

  @staticmethod
  def _import(event: str, args: tuple) -> bool:
    """A module's code run by an import (a reader's lazy import), not code a file brought: its file is a Python
    source on disk."""
    name = getattr(args[0], "co_filename", "") if event == "exec" else ""
    return name.endswith(".py") and os.path.exists(name)

  def _foreign(self, target: Any) -> bool:
    """A path the reader has no business opening: not its file, nor a module of Python's (a lazy import)."""
    if not isinstance(target, (str, bytes, os.PathLike)):
      return False
    name = os.fsdecode(target)
    return name != self.path and not name.endswith((".py", ".pyc", ".so")) and not name.startswith(sys.base_prefix)

  def run(self, fn: Callable[[], Any]) -> Any:
    self.on = True
    if self.coverage:
      sys.settrace(self._trace)
    try:
      return fn()
    finally:
      sys.settrace(None)
      self.on = False

  def _trace(self, frame: Any, event: str, arg: Any) -> Any:
    if frame.f_code.co_filename not in TRACED_FILES:
      return None
    last = [frame.f_lineno]

    def line(frame: Any, event: str, arg: Any) -> Any:
      if event == "line":
        self.edges.add(hash((frame.f_code.co_filename, last[0], frame.f_lineno)))
        last[0] = frame.f_lineno
      return line
    return line


def judge(reader: str, path: Path, data: bytes, expected: dict[str, Any], harness: Harness) -> Verdict:
  """The contract, checked in the child: run the reader under the audit hook, then judge what it did."""
  watch = _Watch(path, harness.coverage)
  try:
    obj = watch.run(lambda: _loaded(reader, path))
    error = None
  except BaseException as e:  # every exception is judged: the contract names the types allowed
    obj, error = None, e
  if watch.events or harness.canary_dir.exists() and any(harness.canary_dir.iterdir()):
    verdict = Verdict("code run", watch.events[0].split()[0] if watch.events else "canary file",
                      "; ".join(watch.events) or "the canary file appeared")
  elif error is not None:
    verdict = judge_error(reader, error, path, expected, data)
  else:
    verdict = judge_value(reader, obj, expected, data)
  verdict.edges = sorted(watch.edges)
  return verdict


def _loaded(reader: str, path: Path) -> tuple[Any, Any]:
  """The reader's result and its normal form (normalizing reads every tensor, so it is part of the load)."""
  obj = READERS[reader](path)
  return obj, normal(obj)


def judge_error(reader: str, error: BaseException, path: Path, expected: dict[str, Any], data: bytes) -> Verdict:
  where = _where(error)
  if not isinstance(error, ALLOWED_ERRORS):
    return Verdict(f"raises {type(error).__name__}", where, "".join(traceback.format_exception(error))[-3000:])
  if str(path) not in str(error):
    return Verdict(f"{type(error).__name__} without the file's path", where, str(error)[:1000])
  if expected["loaded"] and not _documented_refusal(reader, error, data):
    return Verdict(f"refuses a file {ORACLE_NAMES[reader]} reads", where, str(error)[:1000])
  return Verdict()


def _where(error: BaseException) -> str:
  """file:line of the innermost frame in refgrad (the reader's own code), else of the innermost frame."""
  frames = traceback.extract_tb(error.__traceback__)
  ours = [f for f in frames if "/refgrad/" in f.filename] or frames
  return f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""


# Files torch.load reads that torch_load refuses on purpose (docs/untrusted-input.md): a legacy file whose storage
# keys are not the storages its object names (torch leaves an unlisted storage's memory uninitialized and reads it),
# a storage id naming one key with two types or sizes (torch keeps the first), or with a negative element count or a
# key that is neither a string nor an int (torch.save writes neither); an archive naming a member twice
# (which one is meant is not knowable) or that Python's zipfile finds corrupt (torch's reader is more lenient: it
# reads a member whose local header names another file), more dimensions than an array has, a view reading its
# storage over and over, a container or string larger than the file, a zip member claiming more than deflate can
# expand to
TORCH_REFUSALS = re.compile(r"holds '.*' twice|cannot be read: |a corrupt zip archive|dimensions, over the|times over|"
                            r"items in a file of|claims \d+ bytes from|numpy array of .* in a file of|"
                            r"are not the storages the object names|named with two element types or sizes|"
                            r"needs a key and a non-negative element count")


def _documented_refusal(reader: str, error: BaseException, data: bytes) -> bool:
  """A refusal the readers document though the oracle loads the file: torch features refgrad does not support
  (NotImplementedError) and the files of TORCH_REFUSALS, and safetensors files with a key given twice or a dtype
  refgrad lacks (float8, complex)."""
  if reader == "torch_load":
    return isinstance(error, NotImplementedError) or TORCH_REFUSALS.search(str(error)) is not None
  objects: list[list[tuple[str, Any]]] = []  # every JSON object's pairs, innermost first: the header's is last
  json.loads(data[8:8 + int.from_bytes(data[:8], "little")], object_pairs_hook=lambda p: objects.append(p) or dict(p))
  names = [k for k, _ in objects[-1]]
  codes = [v.get("dtype") for k, v in objects[-1] if isinstance(v, dict) and k != "__metadata__"]
  return len(names) != len(set(names)) or any(c not in state.SAFETENSORS_DTYPES for c in codes if c is not None)


def judge_value(reader: str, loaded: tuple[Any, Any], expected: dict[str, Any], data: bytes) -> Verdict:
  obj, got = loaded
  if reader == "safe_load_metadata":
    return _judge_metadata(obj, expected, data)
  if reader == "safe_load":
    got = ("dict", tuple(sorted(got[1])))  # the package gives its tensors by sorted name, refgrad in file order
    if not expected["loaded"]:
      return Verdict("loads a file the safetensors package refuses", detail=expected["error"])
  if reader == "torch_load" and (reach := views_outside(data)):
    return Verdict("loads a view reaching outside its storage", "", "; ".join(reach)[:1000])
  if expected["loaded"]:
    return Verdict() if got == expected["value"] else _mismatch(reader, got, expected["value"])
  if why := outside(obj, corpus(data)):
    return Verdict("reads outside the file", "", why)
  return Verdict()


def _judge_metadata(obj: Any, expected: dict[str, Any], data: bytes) -> Verdict:
  """safe_load_metadata gives the file's bytes, where the data starts and the header; the header's metadata is the
  package's when the package reads the file."""
  tensor, start, header = obj
  if tensor.numpy().tobytes() != data or start != 8 + int.from_bytes(data[:8], "little"):
    return Verdict("loads other values than the file holds", "bytes or data start")
  if header != json.loads(data[8:start]):
    return Verdict("loads other values than the file holds", "header")
  if expected["loaded"] and header.get("__metadata__") != expected["value"]:
    return Verdict("loads other values than the safetensors package", "metadata",
                   f"{header.get('__metadata__')!r:.300} != {expected['value']!r:.300}")
  return Verdict()


def _mismatch(reader: str, got: Any, want: Any) -> Verdict:
  path, a, b = _first_difference(got, want)
  what = "tensor " + ("dtype" if a[1] != b[1] else "shape" if a[2] != b[2] else "bytes") \
    if a[:1] == b[:1] == ("tensor",) else "structure"
  return Verdict(f"loads other values than {ORACLE_NAMES[reader]}", what,
                 f"at {path or 'the top'}: refgrad {a!r:.300}, oracle {b!r:.300}")


def _first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any]:
  """The innermost place where two normal forms differ, its path, and both values there."""
  if a[:1] == b[:1] and a[0] in ("dict", "list", "tuple") and len(a[1]) == len(b[1]):
    for k, (x, y) in enumerate(zip(a[1], b[1])):
      if x != y:
        return _first_difference(x, y, f"{path}[{k}]")
  return path, a, b


def corpus(data: bytes) -> bytes:
  """The file's bytes and, for a zip, each member's decompressed bytes: every byte a reader can get from the file."""
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
      return data + b"".join(_member(archive, info) for info in archive.infolist())
  except Exception:  # not a zip (or too broken to list): its bytes are all it holds
    return data


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
  try:
    return archive.read(info)
  except Exception:  # a corrupt member: what refgrad may have read of it is among the raw bytes already
    return b""


_DEFAULT: list[Harness] = []


def default_harness() -> Harness:
  """The harness the check_* functions share, made on first use and removed at exit."""
  if not _DEFAULT:
    _DEFAULT.append(Harness())
    atexit.register(_DEFAULT[0].close)
  return _DEFAULT[0]


def check_safe_load(data: bytes) -> Verdict:
  return default_harness().check("safe_load", data)


def check_safe_load_metadata(data: bytes) -> Verdict:
  return default_harness().check("safe_load_metadata", data)


def check_torch_load(data: bytes) -> Verdict:
  return default_harness().check("torch_load", data)


@dataclass
class Entry:
  """A corpus entry of the long campaign: a candidate that reached new lines, and how it was made."""
  reader: str
  fmt: str
  data: bytes
  steps: list[str]


class Campaign:
  """The long run: mutate corpus entries, check each mutant, keep those that reach new lines of the readers (and of
  zipfile and json), and write each finding class's smallest-step example to a folder."""

  def __init__(self, harness: Harness, findings: Path, rng: random.Random):
    self.harness, self.findings, self.rng = harness, findings, rng
    self.corpus = [Entry(reader, name.split("-")[0], data, [f"seed {name}"]) for reader, fmts in FORMATS.items()
                   for name, data in harness.seeds.items() if name.split("-")[0] in fmts]
    self.edges: set[int] = set()
    self.found: dict[str, tuple[Entry, Verdict, int]] = {}  # key -> example, its verdict, how often seen
    self.execs = 0
    findings.mkdir(parents=True, exist_ok=True)

  def step(self, entry: Entry) -> None:
    verdict = self.harness.check(entry.reader, entry.data)
    self.execs += 1
    if verdict.ok:
      if not self.edges.issuperset(verdict.edges):
        self.edges.update(verdict.edges)
        self.corpus.append(entry)
      return
    key = f"{entry.reader} [{entry.fmt}]: {verdict.key()}"
    best = self.found.get(key)
    if best is None or (len(entry.steps), len(entry.data)) < (len(best[0].steps), len(best[0].data)):
      self.found[key] = (entry, verdict, (best[2] if best else 0) + 1)
      self._write(key, entry, verdict)
    else:
      self.found[key] = (best[0], best[1], best[2] + 1)

  def mutant(self) -> Entry:
    """A mutant of a corpus entry of a reader and format drawn first, so that each gets its share of the run."""
    reader, fmt = self.rng.choice([(reader, fmt) for reader, fmts in FORMATS.items() for fmt in fmts])
    parent = self.rng.choice([e for e in self.corpus if (e.reader, e.fmt) == (reader, fmt)])
    chain = [random_step(parent.fmt, self.rng) for _ in range(self.rng.choice([1, 1, 2, 3]))]
    data, steps = apply(parent.fmt, parent.data, chain)
    return Entry(parent.reader, parent.fmt, data, parent.steps + steps)

  def _write(self, key: str, entry: Entry, verdict: Verdict) -> None:
    slug = hashlib.sha1(key.encode()).hexdigest()[:12]
    (self.findings / f"{slug}.bin").write_bytes(entry.data)
    (self.findings / f"{slug}.txt").write_text(
      f"{key}\nreader: {entry.reader}\nformat: {entry.fmt}\nmade by:\n  " + "\n  ".join(entry.steps) +
      f"\n\n{verdict.detail}\n")

  def summary(self) -> str:
    lines = [f"{len(self.found)} finding classes in {self.execs} executions:"]
    for key, (entry, _, count) in sorted(self.found.items()):
      lines.append(f"  {count:6d}x {key}\n          e.g. {' / '.join(entry.steps)[:400]}")
    return "\n".join(lines)


def run_campaign(seconds: float, findings: Path, seed: int, progress: float) -> Campaign:
  """Mutate and check until seconds have passed, printing progress every progress seconds."""
  campaign = Campaign(Harness(coverage=True), findings, random.Random(seed))
  start = last = time.monotonic()
  for entry in list(campaign.corpus):
    campaign.step(entry)
  while (now := time.monotonic()) - start < seconds:
    campaign.step(campaign.mutant())
    if now - last >= progress:
      last = now
      print(f"{now - start:7.0f} s  {campaign.execs} executions ({campaign.execs / (now - start):.1f}/s)  corpus "
            f"{len(campaign.corpus)}  edges {len(campaign.edges)}  finding classes {len(campaign.found)}", flush=True)
  campaign.harness.close()
  (findings / "summary.txt").write_text(campaign.summary() + "\n")
  return campaign


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m fuzzing.loaders", description=__doc__.split("\n\n")[0])
  parser.add_argument("--seconds", type=float, default=600.0, help="how long to run (default 600)")
  parser.add_argument("--findings", type=Path, default=Path("loader-findings"),
                      help="folder for each finding class's example: <id>.bin and <id>.txt (default ./loader-findings)")
  parser.add_argument("--seed", type=int, default=0, help="the random seed of the mutations (default 0)")
  parser.add_argument("--progress", type=float, default=30.0, help="seconds between progress lines (default 30)")
  args = parser.parse_args(argv)
  print(run_campaign(args.seconds, args.findings, args.seed, args.progress).summary())


if __name__ == "__main__":
  main()
