"""What `refgrad check` shows of a CheckRun: the op x dtype matrix as text, the summary, the code paths reached, and
the --json and --html reports."""
from __future__ import annotations

import html
import json
from dataclasses import asdict

from refgrad.dtype import DTYPES_BY_PRIORITY, DType
from refgrad.registry import Device
from refgrad.testing.charts import ulp_charts_html
from refgrad.testing.conformance.results import FAIL, PASS, UNSUPPORTED, CaseResult, CheckRun

LEGEND = ("N: agrees with the reference on N checked lanes (edge cases), N:Ku: worst lane K ulp apart, "
          "-: unsupported, not run")


def cell(r: CaseResult | None) -> str:
  """A matrix cell: the number of lanes checked (and the worst ULP distance where the spec allows one)."""
  if r is None:
    return ""
  if r.status == PASS:
    return f"{r.checked}:{r.worst_ulp}u" if r.worst_ulp else str(r.checked)
  return {FAIL: "FAIL", UNSUPPORTED: "-"}[r.status]


def matrix_text(results: list[CaseResult]) -> str:
  columns = [d.name for d in DTYPES_BY_PRIORITY if any(r.column == d.name for r in results)]
  by_key = {(r.row, r.column): r for r in results}
  rows = list(dict.fromkeys(r.row for r in results if r.column != "program"))
  width = max(len(r) for r in rows) if rows else 8
  lines = [" " * width + " " + " ".join(f"{c[:8]:>8s}" for c in columns)]
  lines += [f"{row:{width}s} " + " ".join(f"{cell(by_key.get((row, c))):>8s}" for c in columns) for row in rows]
  lines.append(f"({LEGEND})")
  programs = [r for r in results if r.column == "program"]
  if programs:
    lines.append("\nTensor programs:")
    lines += [f"  {cell(r):>8s}  {r.row}" for r in programs]
  return "\n".join(lines)


def paths_text(run: CheckRun) -> str:
  """Which backend code paths the check reached, as the device's renderer reports them."""
  if not run.reports_paths:
    return f"code paths: {run.device}'s renderer does not report them (optional `code_paths(program)`)"
  if not run.paths:
    return f"code paths reached on {run.device}: none of those its renderer reports"
  return f"code paths reached on {run.device}: " + ", ".join(f"{name} ({n} kernels)" for name, n in
                                                             sorted(run.paths.items()))


def unsupported_dtypes(device: str) -> list[DType]:
  """The dtypes `device` does not declare (not in its Capabilities.dtypes), in the matrix's column order."""
  return [d for d in DTYPES_BY_PRIORITY if d not in Device[device].caps.dtypes]


def unsupported_line(device: str) -> str:
  """'unsupported on OPENCL: float64 (not in Capabilities.dtypes)', or that every dtype is supported."""
  names = ", ".join(d.name for d in unsupported_dtypes(device))
  return f"unsupported on {device}: {names} (not in Capabilities.dtypes)" if names else \
    f"unsupported on {device}: no dtype (Capabilities.dtypes has them all)"


def summary(results: list[CaseResult]) -> dict[str, int]:
  return {status: sum(r.status == status for r in results) for status in (PASS, FAIL, UNSUPPORTED)}


def write_json(path: str, run: CheckRun) -> None:
  with open(path, "w") as f:
    json.dump({"device": run.device, "summary": summary(run.results), "seconds": round(run.seconds, 2),
               "unsupported_dtypes": [d.name for d in unsupported_dtypes(run.device)],
               "code_paths": dict(run.paths) if run.reports_paths else None,
               "cases": [asdict(r) for r in run.results]}, f, indent=1)


def write_html(path: str, run: CheckRun) -> None:
  device, results = run.device, run.results
  columns = [d.name for d in DTYPES_BY_PRIORITY if any(r.column == d.name for r in results)]
  by_key = {(r.row, r.column): r for r in results}
  colors = {PASS: "#c8f0c8", FAIL: "#f4a6a6", UNSUPPORTED: "#e0e0e0"}
  head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
  body = []
  for row in dict.fromkeys(r.row for r in results if r.column != "program"):
    cells = []
    for c in columns:
      r = by_key.get((row, c))
      style = f' style="background:{colors[r.status]}"' if r else ""
      tip = f' title="{html.escape(r.detail[:2000])}"' if r and r.detail else ""
      cells.append(f"<td{style}{tip}>{html.escape(cell(r))}</td>")
    body.append(f"<tr><th>{html.escape(row)}</th>{''.join(cells)}</tr>")
  programs = "".join(f'<tr><td style="background:{colors[r.status]}">{cell(r)}</td><td>{html.escape(r.row)}</td></tr>'
                     for r in results if r.column == "program")
  failures = "".join(f"<h3>{html.escape(r.row)} / {html.escape(r.column)}</h3><pre>{html.escape(r.detail)}</pre>"
                     for r in results if r.status == FAIL)
  ulp = ulp_charts_html({(r.row, r.column): r.ulp_histogram for r in results if r.ulp_histogram})
  counts = summary(results)
  page = f"""<!doctype html><html><head><meta charset="utf-8"><title>refgrad check: {html.escape(device)}</title>
<style>body{{font-family:sans-serif}} td,th{{padding:2px 6px;font-size:12px;text-align:center}}
pre{{background:#f6f6f6;padding:8px;overflow:auto}} .charts{{display:flex;flex-wrap:wrap;gap:8px}}
.charts svg{{border:1px solid #e5e5e5}}</style></head><body>
<h1>refgrad check: {html.escape(device)}</h1>
<p>{counts[PASS]} passed, {counts[FAIL]} failed, {counts[UNSUPPORTED]} unsupported. Cells show how many lanes
(edge cases) were checked, and the worst ULP distance where the spec allows one; hover a failing cell for the
explanation. {html.escape(unsupported_line(device))}.</p>
<table><tr><th></th>{head}</tr>{''.join(body)}</table>
<p>{html.escape(paths_text(run))}</p>
<h2>Tensor programs</h2><table>{programs}</table>
<h2>ULP errors</h2><p>Lanes of each transcendental cell by ULP distance from the reference.</p>
{ulp or "<p>no transcendental cell was checked</p>"}
<h2>Failures</h2>{failures or "<p>none</p>"}</body></html>"""
  with open(path, "w", encoding="utf-8") as f:  # the charts use a few non-ASCII signs
    f.write(page)
