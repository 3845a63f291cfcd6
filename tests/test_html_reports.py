"""The HTML reports are self-contained pages whose inline SVG charts show the data they were given: the check
report's ULP histograms and a fuzz campaign's coverage heatmap, histograms, throughput and findings. Each page is
also rendered by headless chromium (when installed), to see that it draws."""
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from refgrad import Tensor
from refgrad.alu import exec_alu, ulp_distance
from refgrad.cli import main
from refgrad.dtype import DTYPES_BY_PRIORITY, dtypes
from refgrad.testing.conformance.run import run_conformance
from refgrad.testing.edges import dtype_edges, result_class_inputs
from refgrad.testing.fuzz.coverage import coverage_universe, kernel_pairs
from refgrad.testing.fuzz.html_report import CampaignSummary, FindingSummary, campaign_html, write_campaign_html
from refgrad.testing.oracle.compare import ulp_bucket, ulp_histogram
from refgrad.uop import Ops

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (/usr/bin/chromium, PATH)")
WIDTH, HEIGHT = 1280, 2400
SVG_NS_ATTR = 'xmlns="http://www.w3.org/2000/svg"'
HEAT_TITLE = re.compile(r"<title>([^<]+) (\S+): (\d+) programs</title>")
BAR_TITLE = re.compile(r"<title>([^<]+) ulp: (\d+) lanes</title>")


# ---- chromium
def chromium(*args: str) -> subprocess.CompletedProcess:
  """Headless chromium with a fresh profile, no network services and no sandbox (the tests may run as root)."""
  with tempfile.TemporaryDirectory() as profile:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=60)


def screenshot(page: Path, png: Path) -> bytes:
  done = chromium(f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}", page.resolve().as_uri())
  assert png.exists(), f"chromium wrote no screenshot (exit {done.returncode}):\n{done.stderr[-2000:]}"
  return png.read_bytes()


def rendered_dom(page: Path) -> str:
  done = chromium("--dump-dom", page.resolve().as_uri())
  assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
  return done.stdout


def png_size(data: bytes) -> tuple[int, int]:
  """Width and height from a PNG's IHDR chunk (the first chunk, right after the 8-byte signature)."""
  assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
  length, kind, width, height = struct.unpack(">I4sII", data[8:24])
  assert kind == b"IHDR" and length == 13
  return width, height


@pytest.fixture(scope="module")
def blank_screenshot_size(tmp_path_factory) -> int:
  """How many bytes a screenshot of an empty page takes: a drawn page compresses far worse."""
  folder = tmp_path_factory.mktemp("blank")
  page = folder / "blank.html"
  page.write_text("<!doctype html><html><body></body></html>")
  return len(screenshot(page, folder / "blank.png"))


def assert_renders(page: Path, png: Path, blank_size: int) -> None:
  """The page's SVGs survive chromium's parser, and its screenshot is a full-width PNG with content."""
  svgs = page.read_text().count("<svg")
  dom = rendered_dom(page)
  assert svgs and dom.count("<svg") == svgs and dom.count("<rect") >= page.read_text().count("<rect")
  data = screenshot(page, png)
  assert png_size(data) == (WIDTH, HEIGHT)
  assert len(data) > 3 * blank_size, f"the screenshot ({len(data)} B) looks as empty as a blank page ({blank_size} B)"


def assert_self_contained(text: str) -> None:
  assert "<script" not in text and not re.search(r"\b(src|href)=", text)
  assert "http" not in text.replace(SVG_NS_ATTR, "")  # the SVG namespace is a name, not a fetch


def svgs_of(text: str, css_class: str) -> list[str]:
  return re.findall(rf'<svg [^>]*class="{css_class}".*?</svg>', text, re.S)


# ---- refgrad check --html
def sin_histogram(dtype) -> dict[int, int]:
  """SIN's lanes in `refgrad check` (every edge value of `dtype`, and the inputs of every class of result) by ULP
  distance of PYTHON from the ALU, computed here without the conformance machinery: NaN lanes hold no distance."""
  edges = np.concatenate([dtype_edges(dtype), result_class_inputs(Ops.SIN, dtype)])
  t = Tensor(edges, device="PYTHON")
  actual, expected = t._from(t.uop.alu(Ops.SIN)).numpy(), exec_alu(Ops.SIN, dtype, edges)
  with np.errstate(invalid="ignore"):
    keep = ~(np.isnan(actual.astype(np.float64)) | np.isnan(expected.astype(np.float64)))
  histogram: dict[int, int] = {}
  for distance in ulp_distance(actual[keep], expected[keep]).tolist():
    histogram[ulp_bucket(distance)] = histogram.get(ulp_bucket(distance), 0) + 1
  return histogram


@pytest.fixture(scope="module")
def check_page(tmp_path_factory) -> Path:
  page = tmp_path_factory.mktemp("check") / "check.html"
  assert main(["check", "--device", "PYTHON", "--only", "SIN", "--html", str(page)]) == 0
  return page


def test_check_html_has_one_ulp_histogram_per_sin_cell(check_page):
  text = check_page.read_text()
  assert "<h2>ULP errors</h2>" in text and "<table>" in text  # the matrix is still there
  assert_self_contained(text)
  cells = {r.column: r for r in run_conformance("PYTHON", only="SIN").results if r.row == "SIN"}
  charts = {re.search(r"<title>SIN (\S+): (\d+) lanes</title>", svg).group(1): svg
            for svg in svgs_of(text, "rg-histogram") if "<title>SIN " in svg}
  assert set(charts) == {c for c, r in cells.items() if r.ulp_histogram}
  assert set(charts) >= {d.name for d in DTYPES_BY_PRIORITY if d.kind == "f"}
  for column, svg in charts.items():
    independent = sin_histogram(getattr(dtypes, column))
    total = int(re.search(r"<title>SIN \S+: (\d+) lanes</title>", svg).group(1))
    bars = {label: int(n) for label, n in BAR_TITLE.findall(svg)}
    assert total == sum(bars.values()) == sum(independent.values()) == sum(cells[column].ulp_histogram.values()) > 0
    assert bars["0"] == independent.get(0, 0)


@needs_chromium
def test_check_html_renders(check_page, blank_screenshot_size):
  assert_renders(check_page, check_page.with_suffix(".png"), blank_screenshot_size)


# ---- a fuzz campaign's page
PROGRAMS = [
  lambda: (Tensor([1., 2.]).exp2() + 1).sum(),
  lambda: (Tensor([1., -2., 3.]).sin() * Tensor([0.5, 0.25, 2.])).max(),
  lambda: (Tensor([3, 1, 2]) * 2).sum(),
  lambda: Tensor([1., 2., 4.]).log2().cast(dtypes.float16) + 1,
  lambda: (Tensor([1, 2, 3]) < 2).where(Tensor([1., 2., 3.]).sqrt(), 0.),
  lambda: (Tensor([1., 2.]).exp2() + 1).sum(),  # a repeat: its pairs count two programs
]


def campaign_summary() -> CampaignSummary:
  coverage: dict[tuple[str, str], int] = {}
  for program in PROGRAMS:
    for pair in set().union(*(kernel_pairs(item.ast) for item in program().schedule())):
      coverage[pair] = coverage.get(pair, 0) + 1
  order = {d.name: i for i, d in enumerate(DTYPES_BY_PRIORITY)}
  universe = sorted(coverage_universe(), key=lambda pair: (pair[0], order[pair[1]]))
  expected = np.linspace(0.5, 8, 100, dtype=np.float32)
  steps = np.repeat(np.array([0, 1, 2, 3, 7, 100], dtype=np.uint32), [60, 20, 10, 5, 4, 1])
  actual = (expected.view(np.uint32) + steps).view(np.float32)  # positive floats: one bit step is one ULP
  ulp = {("SIN", "float32"): ulp_histogram(actual, expected), ("EXP2", "float32"): ulp_histogram(expected, expected),
         ("SIN", "float16"): ulp_histogram(actual.astype(np.float16), expected.astype(np.float16))}
  timeline = {"ray-0": [(5.0 * i, 40 + 6 * np.sin(i / 2)) for i in range(1, 25)],
              "ray-1": [(5.0 * i, 28 + 3 * np.cos(i / 3)) for i in range(1, 25)]}
  detail = "EXP2 on float32: 1 of 2 checked lanes differ from the reference\n  lane 0: device 3.0, reference 3.5 <&>"
  source = 'def test_finding():\n  assert (a < b) & "quoted" == True\n'
  finding = FindingSummary(hashlib.sha256(b"mismatch:EXP2").hexdigest(), "mismatch", 3,
                           "findings/test_finding_3f2a.py", detail, source)
  return CampaignSummary("PYTHON", 120.0, 4200, ["ray-0", "ray-1"], coverage, universe, ulp, timeline, [finding], 7)


def test_campaign_heatmap_has_a_cell_per_universe_pair_with_its_count():
  summary = campaign_summary()
  assert set(summary.coverage) <= set(summary.universe)
  (heatmap,) = svgs_of(campaign_html(summary), "rg-heatmap")
  cells = {(op, dtype): int(n) for op, dtype, n in HEAT_TITLE.findall(heatmap)}
  assert len(HEAT_TITLE.findall(heatmap)) == len(summary.universe)
  assert cells == {pair: summary.coverage.get(pair, 0) for pair in summary.universe}
  assert cells[("EXP2", "float32")] == 2 and cells[("CAST", "float16")] == 1


def test_campaign_page_shows_histograms_throughput_and_escaped_findings():
  summary = campaign_summary()
  text = campaign_html(summary)
  assert_self_contained(text)
  histograms = svgs_of(text, "rg-histogram")
  assert len(histograms) == len(summary.ulp)
  sin32 = next(svg for svg in histograms if "<title>SIN float32: 100 lanes</title>" in svg)
  bars = {label: int(n) for label, n in BAR_TITLE.findall(sin32)}
  assert {k: v for k, v in bars.items() if v} == {"0": 60, "1": 20, "2": 10, "3-4": 5, "5-8": 4, "65-128": 1}
  (lines,) = svgs_of(text, "rg-lines")
  assert lines.count("<polyline") == 2 and "ray-0" in lines and "ray-1" in lines
  finding = summary.findings[0]
  assert finding.signature in text and finding.path in text and "<details>" in text
  assert "&lt;&amp;&gt;" in text and "(a &lt; b) &amp; &quot;quoted&quot;" in text and "(a < b)" not in text
  assert "4200" in text and "35.0" in text  # programs, programs/s


@needs_chromium
def test_campaign_page_renders(tmp_path, blank_screenshot_size):
  page = tmp_path / "campaign.html"
  write_campaign_html(str(page), campaign_summary())
  assert_renders(page, tmp_path / "campaign.png", blank_screenshot_size)


@needs_chromium
def test_a_real_campaigns_report_shows_what_it_ran_and_renders(tmp_path, blank_screenshot_size, capsys):
  """`refgrad fuzz --html` on PYTHON: the heatmap's counts are the campaign's coverage, the ULP histograms hold the
  lanes of the transcendental roots it checked, and the page draws in chromium."""
  from refgrad.testing.fuzz.driver import fuzz
  page = tmp_path / "campaign.html"
  # the histograms need a checked transcendental root, which few programs have: 8 s on a loaded machine (the suite's
  # other worker, the campaign's own start-up) once ran none with one; quiet, 8 s run 2401 programs, 133 ULP lanes
  report = fuzz("PYTHON", 15, 3, findings_dir=str(tmp_path / "findings"), html=str(page))
  text = page.read_text()
  assert_self_contained(text)
  (heatmap,) = svgs_of(text, "rg-heatmap")
  shown = {(op, dtype): int(n) for op, dtype, n in HEAT_TITLE.findall(heatmap)}
  assert len(shown) == len(coverage_universe(report.claimed))
  assert {pair: n for pair, n in shown.items() if n} == dict(report.coverage)
  assert report.ulp and sum(map(sum, (h.values() for h in report.ulp.values()))) > 0
  lanes = {(op, dtype): sum(h.values()) for (op, dtype), h in report.ulp.items()}
  for (op, dtype), total in lanes.items():
    assert f"{op} {dtype}: {total} lanes" in text
  assert_renders(page, tmp_path / "campaign.png", blank_screenshot_size)
