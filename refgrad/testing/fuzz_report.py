"""Self-contained HTML reports of fuzz campaigns (and the charts `refgrad check --html` shares): every chart is an
inline SVG drawn here, so a report is one file that opens anywhere, with no script, stylesheet or font to fetch."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

SVG_NS = "http://www.w3.org/2000/svg"
SCALE = ("#eef7d9", "#a8dcb5", "#4fb3c5", "#2477b3", "#1b3a8a")  # light to dark: more programs read darker
SERIES = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d", "#4b5563",
          "#ca8a04")
KIND_COLORS = {"mismatch": "#b45309", "error": "#b91c1c", "crash": "#7f1d1d", "hang": "#6d28d9"}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
MISSED = "#d62828"  # possible but never executed: the pairs a campaign should reach next


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


# ---- small helpers
def _e(text: object) -> str:
  return html.escape(str(text))


def _svg(width: float, height: float, css_class: str, label: str, body: list[str]) -> str:
  """An inline SVG that scales down (never up) to fit narrower windows."""
  return (f'<svg xmlns="{SVG_NS}" class="{css_class}" width="{width:.0f}" height="{height:.0f}" '
          f'viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;height:auto" font-family="{FONT}" '
          f'role="img" aria-label="{_e(label)}"><title>{_e(label)}</title>{"".join(body)}</svg>')


def _text(x: float, y: float, text: object, size: int = 11, anchor: str = "start", extra: str = "") -> str:
  return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>{_e(text)}</text>'


def short_count(n: int) -> str:
  """A count that fits a cell or a bar: 950, 12.3k, 4.1M (tooltips keep the exact number)."""
  if n < 10_000:
    return str(n)
  for limit, suffix in ((1e6, "k"), (1e9, "M")):
    if n < limit:
      return f"{n / (limit / 1000):.3g}{suffix}"
  return f"{n / 1e9:.3g}G"


def bucket_label(bucket: int) -> str:
  """The ULP distances a compare.ulp_bucket bucket holds: "0", "1", "2", "3-4", "5-8", ..., and "≤2^k" past 1024."""
  if bucket <= 2:
    return str(bucket)
  if bucket > 1024:  # exact bounds would not fit under a bar
    return f"≤2^{bucket.bit_length() - 1}"
  return f"{bucket // 2 + 1}-{bucket}"


def _mix(a: str, b: str, t: float) -> str:
  pa, pb = (tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in (a, b))
  return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(pa, pb))


def scale_color(t: float) -> str:
  """The heatmap colour at position t in [0, 1] of SCALE."""
  t = min(max(t, 0.0), 1.0) * (len(SCALE) - 1)
  i = min(int(t), len(SCALE) - 2)
  return _mix(SCALE[i], SCALE[i + 1], t - i)


def nice_ticks(top: float, count: int = 5) -> list[float]:
  """Round tick values from 0 past `top` (steps of 1, 2 or 5 times a power of ten), about `count` of them."""
  if top <= 0:
    return [0.0, 1.0]
  raw = top / (count - 1)
  magnitude = 10 ** math.floor(math.log10(raw))
  step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
  return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


# ---- charts
def _log_position(n: int, top: int) -> float:
  return math.log1p(n) / math.log1p(top) if top > 0 else 0.0


def _heat_cell(x: float, y: float, w: float, h: float, label: str, n: int, top: int) -> str:
  tip = f"<title>{_e(label)}: {n} programs</title>"
  if n == 0:
    return (f'<rect x="{x + 1:.1f}" y="{y + 1:.1f}" width="{w - 2:.1f}" height="{h - 2:.1f}" fill="url(#rg-hatch)" '
            f'stroke="{MISSED}" stroke-opacity="0.7">{tip}</rect>')
  t = _log_position(n, top)
  ink = "#ffffff" if t > 0.55 else "#1f2937"
  return (f'<g><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{scale_color(t)}" '
          f'stroke="#ffffff">{tip}</rect>'
          + _text(x + w / 2, y + h / 2 + 3.5, short_count(n), 10, "middle", f' fill="{ink}" pointer-events="none"')
          + "</g>")


def _heat_legend(x: float, y: float, top: int) -> list[str]:
  """The colour scale (log of the count, with ticks at powers of ten) and the swatches of the two empty kinds."""
  width = 160
  stops = "".join(f'<stop offset="{i / (len(SCALE) - 1):.2f}" stop-color="{c}"/>' for i, c in enumerate(SCALE))
  parts = [f'<defs><linearGradient id="rg-scale">{stops}</linearGradient></defs>',
           _text(x, y, "programs (log scale)", 11, extra=' font-weight="600"'),
           f'<rect x="{x}" y="{y + 8}" width="{width}" height="14" fill="url(#rg-scale)" stroke="#9ca3af"/>']
  # powers of ten, but none so close to the maximum that their labels would overlap
  ticks = [10 ** k for k in range(10) if 10 ** k < top and _log_position(10 ** k, top) < 0.85] + [top]
  for v in ticks:
    tx = x + width * _log_position(v, top)
    parts += [f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y + 22}" y2="{y + 26}" stroke="#4b5563"/>',
              _text(tx, y + 37, short_count(v), 10, "middle")]
  parts += [f'<rect x="{x}" y="{y + 52}" width="18" height="14" fill="url(#rg-hatch)" stroke="{MISSED}" '
            'stroke-opacity="0.7"/>', _text(x + 24, y + 63, "possible, never executed", 11),
            f'<rect x="{x}" y="{y + 74}" width="18" height="14" fill="none" stroke="#d1d5db" stroke-dasharray="2 2"/>',
            _text(x + 24, y + 85, "blank: not possible", 11)]
  return parts


def svg_heatmap(rows: list[str], columns: list[str], counts: dict[tuple[str, str], int],
                possible: set[tuple[str, str]]) -> str:
  """A row x column grid coloured by the log of counts[(row, column)]; pairs outside `possible` (and never counted)
  stay blank, possible pairs never counted are hatched with a red outline. Every cell has a tooltip."""
  label_w, cell_w, cell_h, head_h = 96, 66, 20, 26
  grid_w = label_w + cell_w * len(columns)
  top = max(counts.values(), default=0)
  hatch = ('<defs><pattern id="rg-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff5f5"/>'
           f'<line x1="0" y1="0" x2="0" y2="6" stroke="{MISSED}" stroke-width="1.2" opacity="0.45"/></pattern></defs>')
  body = [hatch]
  body += [_text(label_w + cell_w * (j + 0.5), head_h - 9, c, 11, "middle", ' font-weight="600"')
           for j, c in enumerate(columns)]
  for i, row in enumerate(rows):
    y = head_h + cell_h * i
    body.append(_text(label_w - 8, y + cell_h / 2 + 4, row, 11, "end"))
    for j, column in enumerate(columns):
      if (row, column) in possible or (row, column) in counts:
        body.append(_heat_cell(label_w + cell_w * j, y, cell_w, cell_h, f"{row} {column}",
                               counts.get((row, column), 0), top))
  body += _heat_legend(grid_w + 24, head_h + 8, top)
  height = max(head_h + cell_h * len(rows) + 8, head_h + 110)
  return _svg(grid_w + 24 + 190, height, "rg-heatmap", "op x dtype coverage", body)


def _bucket_axis(histogram: dict[int, int]) -> list[int]:
  """Every bucket from 0 to the largest (so gaps show), or only the filled ones when that would be too many."""
  top = max(histogram, default=0)
  span = [0] + [1 << i for i in range(top.bit_length())]
  return span if len(span) <= 12 else sorted(histogram)


def svg_histogram(histogram: dict[int, int], title: str) -> str:
  """Bars of lanes per ULP bucket (bucket -> lanes, see compare.ulp_bucket), heights on a log scale, each bar
  labelled with its count."""
  width, height, left, bottom, head = 280, 180, 12, 40, 40
  total = sum(histogram.values())
  buckets = _bucket_axis(histogram)
  top = max(histogram.values(), default=0)
  plot_w, plot_h = width - 2 * left, height - head - bottom
  slot = plot_w / len(buckets)
  tilt = slot < 36  # "129-256" is wider than a narrow slot
  body = [_text(left, 16, title, 12, extra=' font-weight="600"'),
          _text(left, 30, f"{total} lanes by ULP distance · log-scaled bars", 10, extra=' fill="#6b7280"'),
          f'<line x1="{left}" x2="{width - left}" y1="{head + plot_h}" y2="{head + plot_h}" stroke="#9ca3af"/>']
  for i, bucket in enumerate(buckets):
    n, cx = histogram.get(bucket, 0), left + slot * (i + 0.5)
    bar_h = plot_h * 0.85 * _log_position(n, top)
    color = "#2477b3" if bucket == 0 else ("#4fb3c5" if bucket <= 2 else "#e07a2f")
    bar_w = min(slot * 0.76, 36)
    body.append(f'<rect x="{cx - bar_w / 2:.1f}" y="{head + plot_h - bar_h:.1f}" width="{bar_w:.1f}" '
                f'height="{bar_h:.1f}" fill="{color}"><title>{_e(bucket_label(bucket))} ulp: {n} lanes</title></rect>')
    if n:
      body.append(_text(cx, head + plot_h - bar_h - 3, short_count(n), 9, "middle"))
    ly = head + plot_h + 13
    turn = f' transform="rotate(-35 {cx + 3:.1f} {ly:.1f})"' if tilt else ""
    body.append(_text(cx + 3 if tilt else cx, ly, bucket_label(bucket), 9, "end" if tilt else "middle",
                      f' fill="#374151"{turn}'))
  return _svg(width, height, "rg-histogram", f"{title}: {total} lanes", body)


def svg_lines(series: dict[str, list[tuple[float, float]]], title: str, x_label: str, y_label: str) -> str:
  """One polyline per series (x, y points) on shared axes from 0, with a legend on the right."""
  left, right, head, bottom, plot_h = 64, 170, 40, 48, 260
  width = 1160
  plot_w = width - left - right
  points = [p for line in series.values() for p in line]
  x_ticks = nice_ticks(max((x for x, _ in points), default=0.0))
  y_ticks = nice_ticks(max((y for _, y in points), default=0.0))
  sx = lambda x: left + plot_w * x / x_ticks[-1]  # noqa: E731
  sy = lambda y: head + plot_h - plot_h * y / y_ticks[-1]  # noqa: E731
  body = [_text(left, 22, title, 13, extra=' font-weight="600"')]
  for v in y_ticks:
    body += [f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#e5e7eb"/>',
             _text(left - 8, sy(v) + 4, f"{v:g}", 10, "end", ' fill="#374151"')]
  for v in x_ticks:
    body += [f'<line x1="{sx(v):.1f}" x2="{sx(v):.1f}" y1="{head + plot_h}" y2="{head + plot_h + 5}" '
             'stroke="#6b7280"/>', _text(sx(v), head + plot_h + 18, f"{v:g}", 10, "middle", ' fill="#374151"')]
  body += [f'<line x1="{left}" x2="{left + plot_w}" y1="{head + plot_h}" y2="{head + plot_h}" stroke="#6b7280"/>',
           f'<line x1="{left}" x2="{left}" y1="{head}" y2="{head + plot_h}" stroke="#6b7280"/>',
           _text(left + plot_w / 2, head + plot_h + 38, x_label, 11, "middle"),
           _text(16, head + plot_h / 2, y_label, 11, "middle", f' transform="rotate(-90 16 {head + plot_h / 2:.1f})"')]
  if not points:
    body.append(_text(left + plot_w / 2, head + plot_h / 2, "no data", 12, "middle", ' fill="#9ca3af"'))
  for i, (name, line) in enumerate(series.items()):
    color, ly = SERIES[i % len(SERIES)], head + 8 + 18 * i
    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line)
    body += [f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2" stroke-linejoin="round">'
             f"<title>{_e(name)}</title></polyline>",
             f'<line x1="{width - right + 20}" x2="{width - right + 44}" y1="{ly}" y2="{ly}" stroke="{color}" '
             'stroke-width="3"/>', _text(width - right + 50, ly + 4, name, 11)]
  height = max(head + plot_h + bottom, head + 18 * len(series) + 8)
  return _svg(width, height, "rg-lines", title, body)


# ---- the page
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


def ulp_charts_html(ulp: dict[tuple[str, str], dict[int, int]]) -> str:
  """One small histogram per (op, dtype), a row of them per op (ops in first-seen order)."""
  ops = list(dict.fromkeys(op for op, _ in ulp))
  return "".join(f"<h3>{_e(op)}</h3><div class=\"charts\">"
                 + "".join(svg_histogram(h, f"{o} {dtype}") for (o, dtype), h in ulp.items() if o == op) + "</div>"
                 for op in ops)


def _stats_html(summary: CampaignSummary) -> str:
  rate = summary.programs / summary.seconds if summary.seconds > 0 else 0.0
  stats = [("device", summary.device), ("duration", duration_text(summary.seconds)), ("programs", summary.programs),
           ("programs/s", f"{rate:.1f}"), ("distinct findings", len(summary.findings)),
           ("workers", len(summary.workers)), ("replayed examples", summary.replayed)]
  return '<div class="stats">' + "".join(f'<div class="stat"><b>{_e(v)}</b><span>{_e(k)}</span></div>'
                                         for k, v in stats) + "</div>"


def _coverage_html(summary: CampaignSummary) -> str:
  universe = set(summary.universe)
  rows = list(dict.fromkeys(op for op, _ in summary.universe))
  columns = list(dict.fromkeys(dtype for _, dtype in summary.universe))
  reached = sum(1 for pair in universe if summary.coverage.get(pair, 0) > 0)
  share = f" ({100 * reached / len(universe):.0f} %)" if universe else ""
  outside = sorted(f"{op} {dtype}" for op, dtype in summary.coverage if (op, dtype) not in universe)
  note = f'<p class="muted">Executed outside the universe: {_e(", ".join(outside))}</p>' if outside else ""
  return (f"<section><h2>Op × dtype coverage</h2><p class=\"muted\">{reached} of {len(universe)} possible pairs "
          f"executed{share}. A cell counts the programs whose kernels ran that op on that dtype (casts and bitcasts "
          "by target dtype); hover a cell for the exact count.</p>"
          f"{svg_heatmap(rows, columns, summary.coverage, universe)}{note}</section>")


def _finding_html(index: int, finding: FindingSummary) -> str:
  color = KIND_COLORS.get(finding.kind, "#374151")
  times = "time" if finding.count == 1 else "times"
  return (f'<div class="finding"><h3>#{index} <span class="kind" style="background:{color}">{_e(finding.kind)}</span> '
          f"hit {finding.count} {times}</h3><p class=\"muted\">signature <code>{_e(finding.signature)}</code> · "
          f"reproducer <code>{_e(finding.path)}</code></p><pre>{_e(finding.detail)}</pre>"
          f"<details><summary>reproducer source</summary><pre>{_e(finding.source)}</pre></details></div>")


def campaign_html(summary: CampaignSummary) -> str:
  """The whole report page of one campaign."""
  workers = ", ".join(summary.workers) or "none"
  ulp = ulp_charts_html(summary.ulp) or '<p class="muted">No transcendental lanes were compared.</p>'
  findings = "".join(_finding_html(i + 1, f) for i, f in enumerate(summary.findings)) or \
    '<p class="muted">No findings: every program agreed with the reference.</p>'
  lines = svg_lines(summary.timeline, "Programs per second, per worker", "seconds since start", "programs/s")
  return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>refgrad fuzz: {_e(summary.device)}</title><style>{PAGE_CSS}</style></head><body><main>
<h1>refgrad fuzz campaign on {_e(summary.device)}</h1><p class="muted">workers: {_e(workers)}</p>
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
