"""The charts of the HTML reports (`refgrad fuzz --html`, `refgrad check --html`): every chart is an inline SVG drawn
here, so a report is one file that opens anywhere, with no script, stylesheet or font to fetch."""
from __future__ import annotations

import html
import math

SVG_NS = "http://www.w3.org/2000/svg"
SCALE = ("#eef7d9", "#a8dcb5", "#4fb3c5", "#2477b3", "#1b3a8a")  # light to dark: more programs read darker
SERIES = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d", "#4b5563",
          "#ca8a04")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
MISSED = "#d62828"  # possible but never executed: the pairs a campaign should reach next


# ---- small helpers
def escaped(text: object) -> str:
  """`text` as HTML text or an attribute value."""
  return html.escape(str(text))


def _svg(width: float, height: float, css_class: str, label: str, body: list[str]) -> str:
  """An inline SVG that scales down (never up) to fit narrower windows."""
  return (f'<svg xmlns="{SVG_NS}" class="{css_class}" width="{width:.0f}" height="{height:.0f}" '
          f'viewBox="0 0 {width:.0f} {height:.0f}" style="max-width:100%;height:auto" font-family="{FONT}" '
          f'role="img" aria-label="{escaped(label)}"><title>{escaped(label)}</title>{"".join(body)}</svg>')


def _text(x: float, y: float, text: object, size: int = 11, anchor: str = "start", extra: str = "") -> str:
  return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"{extra}>{escaped(text)}</text>'


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
  tip = f"<title>{escaped(label)}: {n} programs</title>"
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
                f'height="{bar_h:.1f}" fill="{color}">'
                f'<title>{escaped(bucket_label(bucket))} ulp: {n} lanes</title></rect>')
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
             f"<title>{escaped(name)}</title></polyline>",
             f'<line x1="{width - right + 20}" x2="{width - right + 44}" y1="{ly}" y2="{ly}" stroke="{color}" '
             'stroke-width="3"/>', _text(width - right + 50, ly + 4, name, 11)]
  height = max(head + plot_h + bottom, head + 18 * len(series) + 8)
  return _svg(width, height, "rg-lines", title, body)


def ulp_charts_html(ulp: dict[tuple[str, str], dict[int, int]]) -> str:
  """One small histogram per (op, dtype), a row of them per op (ops in first-seen order)."""
  ops = list(dict.fromkeys(op for op, _ in ulp))
  return "".join(f"<h3>{escaped(op)}</h3><div class=\"charts\">"
                 + "".join(svg_histogram(h, f"{o} {dtype}") for (o, dtype), h in ulp.items() if o == op) + "</div>"
                 for op in ops)
