"""The self-contained HTML report of a fuzz campaign: its stats, the op x dtype coverage heatmap, the ULP errors of
transcendentals, the throughput of each worker and every finding with its reproducer (charts: testing/charts.py)."""
from __future__ import annotations

from dataclasses import dataclass

from refgrad.dtype import DTYPES_BY_PRIORITY
from refgrad.testing.charts import FONT, escaped, svg_heatmap, svg_lines, ulp_charts_html
from refgrad.testing.fuzz.coverage import coverage_universe
from refgrad.testing.fuzz.findings import FindingsDir
from refgrad.testing.fuzz.report import FuzzReport

KIND_COLORS = {"mismatch": "#b45309", "error": "#b91c1c", "crash": "#7f1d1d", "hang": "#6d28d9"}


@dataclass
class FindingSummary:
  signature: str  # hex digest naming the failure (kind + failing kernel's normalized form)
  kind: str       # "mismatch" | "error" | "crash" | "hang"
  count: int      # how many times campaigns hit it
  path: str       # the pytest file written for it
  detail: str     # the failure's explanation (multi-line text)
  source: str     # the reproducer (the pytest file's text)


@dataclass
class CampaignSummary:
  device: str
  seconds: float
  programs: int
  workers: list[str]                              # worker names, e.g. ["local-0"] or ["ray-0", "ray-1"]
  coverage: dict[tuple[str, str], int]            # (op, dtype) -> programs whose kernels executed it
  universe: list[tuple[str, str]]                 # every (op, dtype) pair the device could be asked to run
  ulp: dict[tuple[str, str], dict[int, int]]      # (transcendental op, dtype) -> {ulp bucket: lanes}
  timeline: dict[str, list[tuple[float, float]]]  # worker -> [(seconds since start, programs/s in that interval)]
  findings: list[FindingSummary]
  replayed: int = 0                               # examples replayed from the example database at the start


PAGE_CSS = f"""body{{font-family:{FONT};color:#1f2937;background:#f3f4f6;margin:0;line-height:1.45}}
main{{max-width:1200px;margin:0 auto;padding:20px 24px 48px}}
h1{{font-size:26px;margin:8px 0 4px}} h2{{font-size:19px;margin:0 0 10px}} h3{{font-size:15px;margin:14px 0 6px}}
section{{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:16px 20px;margin:16px 0}}
.muted{{color:#6b7280;font-size:13px}} .stats{{display:flex;flex-wrap:wrap;gap:12px;margin-top:12px}}
.stat{{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:10px 16px;min-width:120px}}
.stat b{{display:block;font-size:22px}} .stat span{{color:#6b7280;font-size:12px;text-transform:uppercase}}
.charts{{display:flex;flex-wrap:wrap;gap:10px}} .charts svg{{border:1px solid #e5e7eb;border-radius:6px}}
pre{{background:#f8fafc;border:1px solid #e5e7eb;border-radius:6px;padding:10px;overflow:auto;font-size:12px;
max-height:420px}} code{{font-size:12px;background:#f1f5f9;padding:1px 4px;border-radius:4px}}
.kind{{color:#fff;border-radius:4px;padding:2px 8px;font-size:12px;font-weight:600;text-transform:uppercase}}
.finding{{border-top:1px solid #e5e7eb;padding-top:8px}} summary{{cursor:pointer;font-size:13px;color:#2563eb}}"""


def duration_text(seconds: float) -> str:
  if seconds < 120:
    return f"{seconds:.1f} s"
  minutes = int(seconds // 60)
  return f"{minutes} min {int(seconds % 60)} s" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"


def _stats_html(summary: CampaignSummary) -> str:
  rate = summary.programs / summary.seconds if summary.seconds > 0 else 0.0
  stats = [("device", summary.device), ("duration", duration_text(summary.seconds)), ("programs", summary.programs),
           ("programs/s", f"{rate:.1f}"), ("distinct findings", len(summary.findings)),
           ("workers", len(summary.workers)), ("replayed examples", summary.replayed)]
  return '<div class="stats">' + "".join(f'<div class="stat"><b>{escaped(v)}</b><span>{escaped(k)}</span></div>'
                                         for k, v in stats) + "</div>"


def _coverage_html(summary: CampaignSummary) -> str:
  universe = set(summary.universe)
  rows = list(dict.fromkeys(op for op, _ in summary.universe))
  columns = list(dict.fromkeys(dtype for _, dtype in summary.universe))
  reached = sum(1 for pair in universe if summary.coverage.get(pair, 0) > 0)
  share = f" ({100 * reached / len(universe):.0f} %)" if universe else ""
  outside = sorted(f"{op} {dtype}" for op, dtype in summary.coverage if (op, dtype) not in universe)
  note = f'<p class="muted">Executed outside the universe: {escaped(", ".join(outside))}</p>' if outside else ""
  return (f"<section><h2>Op × dtype coverage</h2><p class=\"muted\">{reached} of {len(universe)} possible pairs "
          f"executed{share}. A cell counts the programs whose kernels ran that op on that dtype (casts and bitcasts "
          "by target dtype); hover a cell for the exact count.</p>"
          f"{svg_heatmap(rows, columns, summary.coverage, universe)}{note}</section>")


def _finding_html(index: int, finding: FindingSummary) -> str:
  color = KIND_COLORS.get(finding.kind, "#374151")
  times = "time" if finding.count == 1 else "times"
  return (f'<div class="finding"><h3>#{index} '
          f'<span class="kind" style="background:{color}">{escaped(finding.kind)}</span> '
          f"hit {finding.count} {times}</h3><p class=\"muted\">signature <code>{escaped(finding.signature)}</code> · "
          f"reproducer <code>{escaped(finding.path)}</code></p><pre>{escaped(finding.detail)}</pre>"
          f"<details><summary>reproducer source</summary><pre>{escaped(finding.source)}</pre></details></div>")


def campaign_html(summary: CampaignSummary) -> str:
  """The whole report page of one campaign."""
  workers = ", ".join(summary.workers) or "none"
  ulp = ulp_charts_html(summary.ulp) or '<p class="muted">No transcendental lanes were compared.</p>'
  findings = "".join(_finding_html(i + 1, f) for i, f in enumerate(summary.findings)) or \
    '<p class="muted">No findings: every program agreed with the reference.</p>'
  lines = svg_lines(summary.timeline, "Programs per second, per worker", "seconds since start", "programs/s")
  return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>refgrad fuzz: {escaped(summary.device)}</title><style>{PAGE_CSS}</style></head><body><main>
<h1>refgrad fuzz campaign on {escaped(summary.device)}</h1><p class="muted">workers: {escaped(workers)}</p>
{_stats_html(summary)}
{_coverage_html(summary)}
<section><h2>ULP errors of transcendentals</h2><p class="muted">Lanes per distance from the reference, in
representable steps; blue bars are exact or within 2 ULP.</p>{ulp}</section>
<section><h2>Throughput</h2>{lines}</section>
<section><h2>Findings ({len(summary.findings)})</h2>{findings}</section>
</main></body></html>"""


def write_campaign_html(path: str, summary: CampaignSummary) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.write(campaign_html(summary))


def campaign_summary(report: FuzzReport, out: FindingsDir) -> CampaignSummary:
  """The report's data as the HTML page shows it."""
  findings = [FindingSummary(f.signature, f.kind, f.count, str(out.file_for(f)), f.detail,
                             out.file_for(f).read_text() if out.file_for(f).exists() else "")
              for f in report.signatures.values()]
  order = {d.name: i for i, d in enumerate(DTYPES_BY_PRIORITY)}
  universe = sorted(coverage_universe(report.claimed), key=lambda pair: (pair[0], order[pair[1]]))
  return CampaignSummary(report.device, report.seconds, report.programs, report.workers, dict(report.coverage),
                         universe, report.ulp, report.timeline, findings, report.replayed)
