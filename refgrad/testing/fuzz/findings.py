"""Findings as files: one standalone pytest file per signature, written once, and index.json with every signature's
kind, file and count."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from refgrad.testing.fuzz.report import FuzzReport
from refgrad.testing.fuzz.results import Finding


def finding_source(kind: str, detail: str, program: Any, device: str, plugin_files: list[str],
                   opts: bool = False) -> str:
  arrays = ",\n      ".join(f"np.array({x.tolist()!r}, dtype=np.dtype({str(x.dtype)!r}))"
                            if x.dtype.name != "bfloat16" else
                            f"np.array({x.astype('float32').tolist()!r}, dtype=np.float32).astype(ml_dtypes.bfloat16)"
                            for x in program.inputs)
  params = ", ".join(f"v{i}" for i in range(len(program.inputs)))
  plugins = "".join(f"load_plugin_file({p!r})\n" for p in plugin_files)
  summary = textwrap.indent("\n".join(detail.splitlines()[:12]), "# ")
  body = textwrap.indent(program.to_python(), "  ")
  replay_opts = f", opts=random_opts_seeded_by({program.to_python()!r}, {device!r})" if opts else ""
  return f'''"""refgrad fuzz finding ({kind}) on {device}. Run: python -m pytest {{this file}}"""
from math import inf, nan  # noqa: F401  (values print as inf and nan)

import ml_dtypes  # noqa: F401
import numpy as np

from refgrad import Variable, dtypes  # noqa: F401
from refgrad.plugin_loader import load_plugin_file  # noqa: F401
from refgrad.testing.fuzz.program_check import random_opts_seeded_by, run_one  # noqa: F401
from refgrad.testing.oracle.reference import check_against_reference
from refgrad.testing.programs import TensorProgram  # noqa: F401
from refgrad.uop import Ops, UOp  # noqa: F401

{plugins}
{summary}

def program({params}):
{body}


def test_finding():
  inputs = [
      {arrays}]
  check_against_reference(program, *inputs, device={device!r}{replay_opts})
'''


class FindingsDir:
  """Where findings go: one pytest file per signature, written once (a later campaign that hits the signature
  again only counts it), and index.json with every signature's kind, file and count."""

  def __init__(self, path: str, device: str, plugin_files: list[str], opts: bool):
    self.path, self.device, self.plugin_files, self.opts = Path(path), device, plugin_files, opts
    index = self.path / "index.json"
    self.index: dict[str, dict[str, Any]] = json.loads(index.read_text()) if index.exists() else {}

  def file_for(self, finding: Finding) -> Path:
    return self.path / f"test_finding_{self.device.lower()}_{finding.kind}_{finding.signature[:12]}.py"

  def write(self, finding: Finding) -> Path:
    path = self.file_for(finding)
    if not path.exists():
      self.path.mkdir(parents=True, exist_ok=True)
      path.write_text(finding_source(finding.kind, finding.detail, finding.program, self.device, self.plugin_files,
                                     self.opts))
    return path

  def save_index(self, report: FuzzReport) -> None:
    if not report.signatures:
      return
    for signature, finding in report.signatures.items():
      entry = self.index.setdefault(signature, {"kind": finding.kind, "device": self.device, "count": 0,
                                                "file": self.file_for(finding).name})
      entry["count"] += finding.count
    self.path.mkdir(parents=True, exist_ok=True)
    (self.path / "index.json").write_text(json.dumps(self.index, indent=1, sort_keys=True))
