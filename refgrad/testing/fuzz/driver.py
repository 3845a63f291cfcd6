"""`refgrad fuzz`: campaigns on a device until the time is up, their findings written as they arrive."""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from refgrad.plugin_loader import load_plugin_file
from refgrad.testing.fuzz.campaign import GRACE_SECONDS, CampaignConfig, hang_seconds
from refgrad.testing.fuzz.dashboard import Dashboard
from refgrad.testing.fuzz.engines import engine_for
from refgrad.testing.fuzz.findings import FindingsDir
from refgrad.testing.fuzz.html_report import campaign_summary, write_campaign_html
from refgrad.testing.fuzz.report import FuzzReport
from refgrad.testing.strategies import claimed_dtypes


def fuzz(device: str, seconds: float, start_seed: int = 0, jobs: int = 1, findings_dir: str = "refgrad-findings",
         plugin_files: list[str] | None = None, timeout: float | None = None, max_findings: int | None = None,
         opts: bool = False, *, database: str | None = None, shared: tuple[str, ...] = (), ray: str | None = None,
         workers: int | None = None, html: str | None = None, quiet: bool = True, stream: Any = None,
         started: float | None = None, compile_ahead: bool = True, max_programs: int | None = None,
         grace: float = GRACE_SECONDS) -> FuzzReport:
  """Campaigns on `device` until `seconds` after `started` (a time.time(), default now: the command's start, so
  its start-up counts): `jobs` local processes, or with `ray` (an address or "auto") `workers` Ray actors; each stops
  early after `max_findings` findings (a program is a hang after `timeout` seconds, by default
  campaign.HANG_SECONDS of the device's kind), or after the batch in which it ran `max_programs` programs. Each distinct
  finding (by signature) is written to `findings_dir` as soon as it arrives. With `opts`, every kernel runs under a
  random legal opt list; with `database` (a directory or redis://host:port) failing examples are saved there and
  replayed first, `shared` databases are only read. `html`: the campaign report. Unless `quiet`, a live dashboard
  goes to `stream` (stderr). `compile_ahead=False` compiles each kernel as it runs (for measuring what batches
  save). Ctrl-C stops every worker; what was found is written and reported (report.interrupted). Whatever runs
  `grace` seconds after the time is up is cut short (report.cut counts the programs stopped so)."""
  plugin_files = [str(Path(p).resolve()) for p in (plugin_files or [])]
  for path in plugin_files:
    load_plugin_file(path)
  timeout = hang_seconds(device) if timeout is None else timeout
  origin = time.time() if started is None else started
  ends_at = origin + seconds
  config = CampaignConfig(device, tuple(plugin_files), timeout, opts, 40, compile_ahead, max_findings, database,
                          tuple(shared), ends_at, max_programs, grace)
  engine = engine_for(config, start_seed, jobs, ray, workers)
  report = FuzzReport(device, claimed=claimed_dtypes(device), workers=engine.names)
  out = FindingsDir(findings_dir, device, plugin_files, opts)
  began, found_by = time.monotonic(), Counter()
  left = round(max(0.0, ends_at - time.time()), 1)
  with Dashboard(f"refgrad fuzz on {device}", left, engine.names, stream=stream or sys.stderr, quiet=quiet) as board:
    board.note(f"starting {len(engine.names)} worker(s) at {time.time() - origin:.1f} s of {seconds:g} s "
               "(their start-up counts against the time)")
    try:
      for worker, chunk in engine.chunks(left):
        if worker not in found_by:
          board.note(f"{worker}: first report at {time.time() - origin:.1f} s, {chunk.programs} program(s)")
        for finding in report.add(worker, chunk, time.monotonic() - began):
          finding.path = str(out.write(finding))
          report.findings.append((finding.kind, Path(finding.path)))
        for finding in chunk.findings:
          board.finding(finding.signature, finding.kind, report.signatures[finding.signature].count,
                        str(out.file_for(finding)))
        if chunk.replayed:
          board.note(f"{worker} replayed {chunk.replayed} example(s) from the database")
        found_by[worker] += len(chunk.findings)
        board.update(worker, report.per_worker[worker], chunk.programs / chunk.seconds if chunk.seconds else 0.0,
                     found_by[worker])
    except KeyboardInterrupt:
      report.interrupted = True
    finally:
      engine.stop()
  report.seconds = time.monotonic() - began
  out.save_index(report)
  if html:
    write_campaign_html(html, campaign_summary(report, out))
  return report
