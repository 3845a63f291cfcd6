"""Findings as files: one standalone pytest file per signature, written once, beside it the failing kernel's
reproducer in the backend's own language (`<file>_standalone/`, by the device's DeviceImpl.standalone hook), and
index.json with every signature's kind, file and count."""
from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path
from typing import Any

from refgrad.registry import Device
from refgrad.standalone import STANDALONE_SUFFIX
from refgrad.testing.fuzz.program_check import random_opts_seeded_by
from refgrad.testing.fuzz.report import FuzzReport
from refgrad.testing.fuzz.results import Finding
from refgrad.testing.fuzz.signatures import kernel_of
from refgrad.testing.oracle.graph_check import (
  check_graph_against_reference,
  write_graph_standalone,
  write_program_standalone,
)
from refgrad.testing.oracle.standalone_cases import failing_case, write_standalone
from refgrad.testing.programs import array_source

# findings whose kernel took the worker process down: their reproducer is written without running that kernel here
FATAL_KINDS = ("crash", "hang")
# what a graph device's finding without an answer was, as its standalone reproducers' title says
GRAPH_FAILURES = {"crash": "it killed the process", "hang": "no answer within the time limit",
                  "error": "its compiler raised"}
# lines of a finding's report quoted in its file's header (the test prints the whole report when it fails)
HEADER_LINES = 12


def _header_lines(kind: str, detail: str, keep: int = HEADER_LINES) -> list[str]:
  """The part of a finding's report its file's header shows, and a line saying what was left out. A mismatch's
  report starts with the lanes that differ; an error's is a traceback, whose exception is its last line."""
  lines = detail.splitlines()
  if len(lines) <= keep:
    return lines
  left_out = f"[{len(lines) - keep} more lines of the report left out: run this file to see it whole]"
  return [*lines[:keep], left_out] if kind == "mismatch" else [left_out, *lines[-keep:]]


def finding_source(kind: str, detail: str, program: Any, device: str, plugin_files: list[str],
                   opts: bool = False, standalone: str = "", whole_graph: bool = False) -> str:
  """A finding's pytest file: the program, its inputs, and the check that found it (on a graph device, the check
  over the whole graph, which sees what the device fuses)."""
  arrays = ",\n      ".join(array_source(x) for x in program.inputs)
  params = ", ".join(f"v{i}" for i in range(len(program.inputs)))
  plugins = "".join(f"load_plugin_file({p!r})\n" for p in plugin_files)
  summary = textwrap.indent("\n".join([*_header_lines(kind, detail), *([standalone] if standalone else [])]), "# ")
  body = textwrap.indent(program.to_python(), "  ")
  replay_opts = f", opts=random_opts_seeded_by({program.to_python()!r}, {device!r})" if opts else ""
  check = "check_graph_against_reference" if whole_graph else "check_against_reference"
  return f'''"""refgrad fuzz finding ({kind}) on {device}. Run: python -m pytest {{this file}}"""
from math import inf, nan  # noqa: F401  (values print as inf and nan)

import ml_dtypes  # noqa: F401
import numpy as np

from refgrad import Variable, dtypes  # noqa: F401
from refgrad.plugin_loader import load_plugin_file  # noqa: F401
from refgrad.testing.fuzz.program_check import random_opts_seeded_by, run_one  # noqa: F401
from refgrad.testing.oracle.graph_check import check_graph_against_reference  # noqa: F401
from refgrad.testing.oracle.reference import check_against_reference  # noqa: F401
from refgrad.testing.programs import TensorProgram  # noqa: F401
from refgrad.uop import Ops, UOp  # noqa: F401

{plugins}
{summary}

def program({params}):
{body}


def test_finding():
  inputs = [
      {arrays}]
  {check}(program, *inputs, device={device!r}{replay_opts})
'''


class FindingsIndexWarning(RuntimeWarning):
  """A findings folder's index.json was not an index refgrad writes: it was set aside and a new one begun."""


def read_index(path: Path) -> dict[str, dict[str, Any]]:
  """The entries of a findings index ({} if there is none). A file that is not such an index (not JSON, or an entry
  that is not a kind, device and file name with a count) is renamed to index.json.bad with a FindingsIndexWarning:
  the campaign goes on with a new index, where it failed at its start (or, for an entry of the wrong types, when it
  saved its counts after all its work)."""
  try:
    index = json.loads(path.read_bytes())
    if not isinstance(index, dict):
      raise ValueError(f"it holds a {type(index).__name__}, not an object of signatures")
    for signature, entry in index.items():
      _check_index_entry(signature, entry)
  except FileNotFoundError:
    return {}
  except (ValueError, RecursionError) as e:
    aside = path.with_name(path.name + ".bad")
    path.replace(aside)
    warnings.warn(f"{path} is not a refgrad findings index ({type(e).__name__}: {str(e)[:200]}); moved to {aside}, "
                  f"counting starts again", FindingsIndexWarning, stacklevel=3)
    return {}
  return index


def _check_index_entry(signature: str, entry: Any) -> None:
  fields = {"kind": str, "device": str, "file": str, "count": int}
  if not isinstance(entry, dict) or any(type(entry.get(name)) is not kind for name, kind in fields.items()):
    raise ValueError(f"entry {signature[:64]!r} is not a kind, device and file name (strings) with an int count")
  if entry["count"] < 0:
    raise ValueError(f"entry {signature[:64]!r} has a negative count {entry['count']}")


class FindingsDir:
  """Where findings go: one pytest file per signature, written once (a later campaign that hits the signature
  again only counts it), and index.json with every signature's kind, file and count."""

  def __init__(self, path: str, device: str, plugin_files: list[str], opts: bool):
    self.path, self.device, self.plugin_files, self.opts = Path(path), device, plugin_files, opts
    self.index = read_index(self.path / "index.json")

  def file_for(self, finding: Finding) -> Path:
    return self.path / f"test_finding_{self.device.lower()}_{finding.kind}_{finding.signature[:12]}.py"

  def write(self, finding: Finding) -> Path:
    path = self.file_for(finding)
    if not path.exists():
      self.path.mkdir(parents=True, exist_ok=True)
      standalone = self.write_standalone(finding, path.with_name(path.stem + STANDALONE_SUFFIX))
      path.write_text(finding_source(finding.kind, finding.detail, finding.program, self.device, self.plugin_files,
                                     self.opts, standalone, Device[self.device].graph is not None))
    return path

  def write_standalone(self, finding: Finding, folder: Path) -> str:
    """The failing kernel's reproducer in `folder` (replayed in this process, except a kernel that crashed or hung
    the worker, which is only rendered); one line saying where it is or why there is none."""
    program = finding.program
    if Device[self.device].graph is not None:
      try:
        if finding.kind != "mismatch":  # the worker died or hung, or the compiler raised: the program, whole
          return write_program_standalone(program.run, program.inputs, self.device, folder,
                                          GRAPH_FAILURES[finding.kind])
        report = check_graph_against_reference(program.run, *program.inputs, device=self.device,
                                               raise_on_mismatch=False)
        return write_graph_standalone(report, folder)
      except Exception as e:  # the pytest file is written whatever goes wrong here
        return f"no standalone reproducer: writing it failed ({type(e).__name__}: {e})"
    crashed_in = kernel_of(finding.kind, program, finding.signature) if finding.kind in FATAL_KINDS else None
    if finding.kind in FATAL_KINDS and crashed_in is None:
      return "no standalone reproducer: the worker died outside a kernel it named (in a transfer, or before naming one)"
    opts = random_opts_seeded_by(program.to_python(), self.device) if self.opts else None
    try:
      case = failing_case(program.run, *program.inputs, device=self.device, opts=opts, crashed_in=crashed_in)
      return write_standalone(folder, case)
    except Exception as e:  # the pytest file is written whatever goes wrong here
      return f"no standalone reproducer: writing it failed ({type(e).__name__}: {e})"

  def save_index(self, report: FuzzReport) -> None:
    if not report.signatures:
      return
    for signature, finding in report.signatures.items():
      entry = self.index.setdefault(signature, {"kind": finding.kind, "device": self.device, "count": 0,
                                                "file": self.file_for(finding).name})
      entry["count"] += finding.count
    self.path.mkdir(parents=True, exist_ok=True)
    (self.path / "index.json").write_text(json.dumps(self.index, indent=1, sort_keys=True))
