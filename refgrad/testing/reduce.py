"""`refgrad reduce`: shrink a standalone reproducer's kernel with C-Vise (or C-Reduce) while it fails the same way.

hypothesis shrinks the refgrad program; the reproducer (refgrad/standalone.py) can then shrink below it, in the
backend's own language. Only the kernel is reduced (a `kernel.*` file, or the lines between the kernel markers of a
single-file reproducer); the inputs, the reference's output and the check stay. A candidate is kept only if it still
fails exactly as the original did:
- a wrong value: the reproducer builds, runs and prints the same report (the same lanes, the same wrong bits, the same
  count), so a reduction cannot trade the bug for another wrong answer (deleting the kernel would change the bits);
- a compiler crash: the build fails with the same message line (an assertion, an internal compiler error);
- a crash at run time: the same exit status.
The reduced reproducer goes to `reduced/` beside the original, which is left as it was.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from refgrad.standalone import KERNEL_BEGIN, KERNEL_END, KERNEL_FILE_STEM, RUN_SCRIPT, STANDALONE_SUFFIX

# tool -> (its name for people, how to install it)
REDUCERS = {"cvise": ("C-Vise", "apt-get install cvise (Debian, Ubuntu), or see https://github.com/marxin/cvise"),
            "creduce": ("C-Reduce", "apt-get install creduce (Debian, Ubuntu)")}
# a line of a build's stderr that names how the compiler died: the crash's signature
CRASH_MARKERS = ("Assertion", "internal compiler error", "LLVM ERROR", "UNREACHABLE", "Segmentation fault",
                 "PLEASE submit a bug report")
MISMATCH_LINE = "judged lanes differ from the reference"
# kernel languages C-Vise's C passes understand, and the pass group to use on each
C_SUFFIXES = {".c": "all", ".h": "all", ".cl": "opencl-120"}


class ReduceError(RuntimeError):
  """The reproducer cannot be reduced: no reducer installed, not a reproducer folder, or it does not fail."""


@dataclass(frozen=True)
class Outcome:
  """How one run of a reproducer's run.sh ended."""
  status: int
  stdout: str
  crash: str  # the first stderr line naming a compiler crash, "" if none

  @property
  def wrong_value(self) -> bool:
    return self.status == 1 and MISMATCH_LINE in self.stdout


def run_reproducer(folder: Path, timeout: float) -> Outcome:
  """Run `folder`'s run.sh; a run past `timeout` seconds counts as status 124, as timeout(1) reports it."""
  try:
    done = subprocess.run(["sh", RUN_SCRIPT], cwd=folder, capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired:
    return Outcome(124, "", "")
  crash = next((line.strip() for line in done.stderr.splitlines() if any(m in line for m in CRASH_MARKERS)), "")
  return Outcome(done.returncode, done.stdout, crash)


@dataclass(frozen=True)
class KernelPart:
  """Where the kernel is: `path` (relative to the folder) is rebuilt as head + kernel + tail."""
  path: str
  head: str
  kernel: str
  tail: str

  @property
  def suffix(self) -> str:
    return Path(self.path).suffix


def kernel_part(folder: Path) -> KernelPart:
  """The part of a reproducer to reduce: its kernel.* file, else the marked lines of the file holding them."""
  for path in sorted(folder.glob(f"{KERNEL_FILE_STEM}.*")):
    return KernelPart(path.name, "", path.read_text(), "")
  for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name != RUN_SCRIPT):
    text = path.read_text(errors="replace")
    if KERNEL_BEGIN in text and KERNEL_END in text:
      head, rest = text.split(KERNEL_BEGIN + "\n", 1)
      kernel, tail = rest.split(KERNEL_END, 1)
      return KernelPart(path.name, head + KERNEL_BEGIN + "\n", kernel, KERNEL_END + tail)
  raise ReduceError(f"{folder} holds no kernel to reduce: no {KERNEL_FILE_STEM}.* file and no file with the kernel "
                    f"markers of a refgrad standalone reproducer")


def judge_script(work: Path, part: KernelPart, original: Outcome, timeout: float) -> str:
  """The interestingness test: exit 0 if the candidate kernel (in the current folder) fails as the original did."""
  candidate = "candidate" + part.suffix
  if original.wrong_value:
    verdict = f'[ "$status" = 1 ] && cmp -s out.txt {shlex.quote(str(work / "expected_out.txt"))}'
  elif original.crash:
    verdict = f'grep -qF -- {shlex.quote(original.crash)} err.txt'
  else:
    verdict = f'[ "$status" = {original.status} ]'
  return (f"#!/bin/sh\n# refgrad reduce: does this kernel still fail as the original did? (exit 0: yes)\n"
          f"cp -r {shlex.quote(str(work / 'rest'))}/. .\n"
          f"cat {shlex.quote(str(work / 'head'))} {candidate} {shlex.quote(str(work / 'tail'))} > "
          f"{shlex.quote(part.path)}\n"
          f"timeout {int(timeout)} sh {RUN_SCRIPT} > out.txt 2> err.txt\nstatus=$?\n{verdict}\n")


def find_reducer(tool: str) -> str:
  if tool not in REDUCERS:
    raise ReduceError(f"unknown reducer {tool!r}: choose one of {', '.join(REDUCERS)}")
  if (path := shutil.which(tool)) is None:
    name, install = REDUCERS[tool]
    raise ReduceError(f"{name} ({tool}) is not installed: {install}")
  return path


def reproducer_folder(finding: str | Path) -> Path:
  """The standalone reproducer a FINDING argument names: its folder, or the `<name>_standalone` folder beside a
  finding's pytest file `<name>.py` (where `refgrad fuzz` and `refgrad check` write them)."""
  path = Path(finding)
  beside = path.with_name(path.stem + STANDALONE_SUFFIX)
  if path.is_dir():
    return path
  if path.is_file() and beside.is_dir():
    return beside
  if path.is_file():
    raise ReduceError(f"{path} has no standalone reproducer beside it ({beside.name}/): its backend offers none, or "
                      f"it was written before reproducers were")
  raise ReduceError(f"no such finding: {path}")


def reducer_options(tool: str, suffix: str, quick: bool) -> list[str]:
  """The reducer's options for a kernel file of this suffix: C-Vise's OpenCL passes for OpenCL C, no C-specific
  passes for LLVM IR or Python, only its line and token deletions when `quick`."""
  if tool != "cvise":
    return [] if suffix in (".c", ".h") else ["--not-c"]  # C-Reduce has one set of passes
  options = [] if suffix in C_SUFFIXES else ["--not-c"]
  return options + ["--pass-group", "delta" if quick else C_SUFFIXES.get(suffix, "all")]


def reduce_reproducer(folder: str | Path, tool: str = "cvise", timeout: float = 20.0, quick: bool = False,
                      say: Callable[[str], None] = print) -> Path:
  """Reduce the reproducer in `folder` with `tool` (`quick`: only line and token deletions, minutes rather than
  tens of minutes on a busy machine); returns the folder of the reduced one (`folder`/reduced)."""
  folder = Path(folder)
  if not (folder / RUN_SCRIPT).is_file():
    raise ReduceError(f"{folder} is not a standalone reproducer: it has no {RUN_SCRIPT}")
  reducer = find_reducer(tool)
  part = kernel_part(folder)
  original = run_reproducer(folder, timeout)
  if original.status == 0:
    raise ReduceError(f"the reproducer in {folder} passes on this machine (its kernel matches the reference): there "
                      f"is no failure to keep while reducing")
  say(f"the reproducer fails ({'wrong values' if original.wrong_value else original.crash or f'exit {original.status}'}"
      f"); reducing {part.path}'s kernel ({len(part.kernel.splitlines())} lines) with {REDUCERS[tool][0]}")
  with tempfile.TemporaryDirectory(prefix="refgrad-reduce-") as tmp:
    work = Path(tmp)
    shutil.copytree(folder, work / "rest", ignore=shutil.ignore_patterns("reduced"))
    (work / "head").write_text(part.head)
    (work / "tail").write_text(part.tail)
    (work / "expected_out.txt").write_text(original.stdout)
    candidate = work / ("candidate" + part.suffix)
    candidate.write_text(part.kernel)
    script = work / "judge.sh"
    script.write_text(judge_script(work, part, original, timeout))
    script.chmod(0o755)
    options = reducer_options(tool, part.suffix, quick)
    subprocess.run([reducer, *options, str(script), candidate.name], cwd=work, check=True)
    reduced = candidate.read_text()
  out = folder / "reduced"
  shutil.rmtree(out, ignore_errors=True)
  shutil.copytree(folder, out, ignore=shutil.ignore_patterns("reduced"))
  (out / part.path).write_text(part.head + reduced + part.tail)
  if run_reproducer(out, timeout) != original:
    raise ReduceError(f"the reduced reproducer in {out} no longer fails as the original did (a reducer bug?)")
  say(f"reduced the kernel from {len(part.kernel.splitlines())} to {len(reduced.splitlines())} lines: {out}")
  return out
