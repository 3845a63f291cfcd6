"""`refgrad check`: the conformance suite for a device.

Every primitive op x every dtype the device claims x the edge values of that dtype (all pairs for binary ops),
every cast and bitcast between claimed dtypes, the three reductions, and a fixed corpus of Tensor programs
(elementwise, reductions, matmul, conv, indexing, random). Each case runs through check_against_reference,
so the verdicts follow docs/SPEC.md exactly. The result is an op x dtype matrix. Cases of a dtype the device
does not declare (not in its Capabilities.dtypes) are not run but listed, as unsupported, so a device that
stops claiming a dtype shows it in the matrix and the summary.
"""
from __future__ import annotations

import html
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from refgrad.device import Device
from refgrad.dtype import DTYPES_BY_PRIORITY, DType, dtypes
from refgrad.interp.alu import OP_KINDS
from refgrad.testing.reference import ReferenceMismatch, check_against_reference
from refgrad.testing.strategies import edge_values
from refgrad.uop import GroupOp, Ops, UOp

PASS, FAIL, UNSUPPORTED = "pass", "fail", "unsupported"


@dataclass
class CaseResult:
  row: str       # op name, "CAST->int8", "BITCAST->...", "REDUCE ADD", or a program name
  column: str    # dtype name (or "program")
  status: str
  worst_ulp: int = 0
  checked: int = 0
  skipped: int = 0
  detail: str = ""


@dataclass
class Case:
  row: str
  column: str
  run: Callable[[str], Any]  # device -> ReferenceReport (raises ReferenceMismatch)
  dtypes: tuple[DType, ...] = ()  # the dtypes it computes with: a device must declare them all to run it


# ---- primitive-op cases: kernels built straight from UOps over edge-value inputs
def _edge_array(dtype: DType) -> np.ndarray:
  with np.errstate(all="ignore"):
    return np.array(edge_values(dtype), dtype=np.float64 if dtype.kind == "f" else object).astype(dtype.np)


def _operands(op: Ops, dtype: DType) -> list[np.ndarray]:
  """Inputs covering every combination of edge values: all pairs for binary ops."""
  edges = _edge_array(dtype)
  if op in (Ops.SHL, Ops.SHR):
    amounts = np.array([0, 1, dtype.bits - 1, dtype.bits, 3] + ([-1] if dtype.kind == "i" else []), dtype=object)
    a, b = zip(*itertools.product(edges.tolist(), amounts.tolist()))
    return [np.array(a, dtype=dtype.np), np.array(b, dtype=object).astype(dtype.np)]
  if op in GroupOp.Unary:
    return [edges]
  a, b = zip(*itertools.product(edges.tolist(), edges.tolist()))
  pair = [np.array(a, dtype=object).astype(dtype.np), np.array(b, dtype=object).astype(dtype.np)]
  if op is Ops.WHERE:
    cond = (np.arange(len(a)) % 3 == 0)
    return [cond, *pair]
  return pair


def out_dtype(op: Ops, dtype: DType) -> DType:
  return dtypes.bool if op in GroupOp.Comparison else dtype


def _alu_case(op: Ops, dtype: DType) -> Case:
  def run(device: str):
    build = lambda *ts: ts[0]._from(UOp(op, out_dtype(op, dtype), tuple(t.uop for t in ts)))  # noqa: E731
    return check_against_reference(build, *_operands(op, dtype), device=device)
  return Case(op.name, dtype.name, run, (dtype, out_dtype(op, dtype)))


def _cast_case(op: Ops, src: DType, dst: DType) -> Case:
  def run(device: str):
    return check_against_reference(lambda t: t._from(UOp(op, dst, (t.uop,))), _edge_array(src), device=device)
  return Case(f"{op.name}->{dst.name}", src.name, run, (src, dst))


REDUCE_VALUES: dict[Ops, Callable[[np.ndarray], np.ndarray]] = {
  # sums and products get values whose partial results stay in range in every order, so a bound exists
  Ops.ADD: lambda edges: edges[np.abs(edges.astype(np.float64)) <= 1000] if edges.dtype.kind == "f" or
  edges.dtype.name == "bfloat16" else edges,
  Ops.MUL: lambda edges: np.array([0.5, -1, 2, 1, -0.5, 0, 2, -2], dtype=edges.dtype) if edges.dtype.kind != "u"
  else np.array([1, 2, 3, 0, 255, 7, 1, 2], dtype=edges.dtype),
  Ops.MAX: lambda edges: edges,  # MAX is exact in any order, NaN and inf included
}


def _reduce_case(op: Ops, dtype: DType) -> Case:
  def run(device: str):
    values = REDUCE_VALUES[op](_edge_array(dtype))
    data = np.resize(values, 64).reshape(8, 8)
    build = lambda t: t._from(UOp(Ops.REDUCE_AXIS, dtype, (t.uop,), (op, (1,))))  # noqa: E731
    return check_against_reference(build, data, device=device)
  return Case(f"REDUCE {op.name}", dtype.name, run, (dtype,))


# ---- the Tensor program corpus
def _corpus() -> dict[str, tuple[Callable[..., Any], list[np.ndarray]]]:
  rng = np.random.default_rng(1234)
  x = rng.standard_normal((8, 12)).astype(np.float32)
  w = rng.standard_normal((12, 5)).astype(np.float32)
  img = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
  kern = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  ints = rng.integers(-1000, 1000, (6, 10)).astype(np.int32)
  return {
    "elementwise chain": (lambda t: ((t * 1.5 - 2) * t + 0.25).maximum(t.abs() * 0.5), [x]),
    "transcendentals": (lambda t: t.exp2() + t.abs().log2() + t.sin() + t.abs().sqrt(), [x]),
    "sum and max over axes": (lambda t: t.sum(0) + t.max(0) - t.min(0), [x]),
    "full reductions": (lambda t: t.sum() * t.mean() + t.max(), [x]),
    "matmul": (lambda a, b: a @ b, [x, w]),
    "conv via windows": (lambda i, k: _conv2d(i, k), [img, kern]),
    "indexing and padding": (lambda t: t[1:7:2, ::-3].pad(((1, 2), (3, 0))) + t[::-1][:6, 4:8].flip(1).sum(), [x]),
    "integer arithmetic": (lambda t: (t // 7) * 3 + t % 5 - (t >> 2) ^ (t << 1), [ints]),
    "argmax and comparisons": (lambda t: t.argmax(1) + (t > 0).sum(1), [x]),
    "random-looking hash": (lambda t: ((t.cast(dtypes.uint32) * 2654435761) ^ (t.cast(dtypes.uint32) >> 13)), [ints]),
  }


def _conv2d(image: Any, weight: Any) -> Any:
  """A 3x3 valid convolution from movement ops, sums and a multiply (independent of Tensor.conv2d)."""
  n, c, h, w = image.shape
  o, _, kh, kw = weight.shape
  windows = [image[:, :, i:i + h - kh + 1, j:j + w - kw + 1] for i in range(kh) for j in range(kw)]
  total = None
  for k, win in enumerate(windows):
    term = (win.unsqueeze(1) * weight[:, :, k // kw, k % kw].reshape(1, o, c, 1, 1)).sum(2)
    total = term if total is None else total + term
  return total


def _program_case(name: str, fn: Callable[..., Any], inputs: list[np.ndarray]) -> Case:
  return Case(name, "program", lambda device: check_against_reference(fn, *inputs, device=device))


def all_cases() -> list[Case]:
  kinds = DTYPES_BY_PRIORITY
  cases = [_alu_case(op, d) for op in OP_KINDS for d in kinds if d.kind in OP_KINDS[op]]
  cases += [_cast_case(Ops.CAST, s, d) for s in kinds for d in kinds if s != d]
  cases += [_cast_case(Ops.BITCAST, s, d) for s in kinds for d in kinds
            if s != d and s.itemsize == d.itemsize and dtypes.bool not in (s, d)]
  cases += [_reduce_case(op, d) for op in (Ops.ADD, Ops.MUL, Ops.MAX) for d in kinds if d != dtypes.bool]
  cases += [_program_case(name, fn, inputs) for name, (fn, inputs) in _corpus().items()]
  return cases


def run_case(case: Case, device: str) -> CaseResult:
  undeclared = [d.name for d in case.dtypes if d not in Device[device].caps.dtypes]
  if undeclared:
    return CaseResult(case.row, case.column, UNSUPPORTED, detail=f"{', '.join(undeclared)} not in Capabilities.dtypes")
  try:
    report = case.run(device)
  except ReferenceMismatch as e:
    return CaseResult(case.row, case.column, FAIL, detail=str(e))
  except NotImplementedError as e:
    return CaseResult(case.row, case.column, UNSUPPORTED, detail=str(e))
  except Exception as e:  # a crash of the device under test is a failure with its message
    return CaseResult(case.row, case.column, FAIL, detail=f"{type(e).__name__}: {e}")
  return CaseResult(case.row, case.column, PASS, report.worst_ulp, report.checked, report.undefined + report.unbounded)


def run_conformance(device: str, progress: Callable[[int, int, Case], None] | None = None) -> list[CaseResult]:
  device = Device.canonicalize(device)
  cases = all_cases()
  results = []
  for i, case in enumerate(cases):
    if progress:
      progress(i, len(cases), case)
    results.append(run_case(case, device))
  return results


# ---- reports
def cell(r: CaseResult | None) -> str:
  if r is None:
    return ""
  return {PASS: f"{r.worst_ulp}u" if r.worst_ulp else "ok", FAIL: "FAIL", UNSUPPORTED: "-"}[r.status]


def matrix_text(results: list[CaseResult]) -> str:
  columns = [d.name for d in DTYPES_BY_PRIORITY if any(r.column == d.name for r in results)]
  by_key = {(r.row, r.column): r for r in results}
  rows = list(dict.fromkeys(r.row for r in results if r.column != "program"))
  width = max(len(r) for r in rows) if rows else 8
  lines = [" " * width + " " + " ".join(f"{c[:7]:>7s}" for c in columns)]
  lines += [f"{row:{width}s} " + " ".join(f"{cell(by_key.get((row, c))):>7s}" for c in columns) for row in rows]
  lines.append("(ok: agrees with the reference, Nu: worst lane N ulp apart, -: unsupported, not run)")
  programs = [r for r in results if r.column == "program"]
  if programs:
    lines.append("\nTensor programs:")
    lines += [f"  {cell(r):>5s}  {r.row}" for r in programs]
  return "\n".join(lines)


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


def write_json(path: str, device: str, results: list[CaseResult]) -> None:
  with open(path, "w") as f:
    json.dump({"device": device, "summary": summary(results),
               "unsupported_dtypes": [d.name for d in unsupported_dtypes(device)],
               "cases": [asdict(r) for r in results]}, f, indent=1)


def write_html(path: str, device: str, results: list[CaseResult]) -> None:
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
  counts = summary(results)
  page = f"""<!doctype html><html><head><meta charset="utf-8"><title>refgrad check: {html.escape(device)}</title>
<style>body{{font-family:sans-serif}} td,th{{padding:2px 6px;font-size:12px;text-align:center}}
pre{{background:#f6f6f6;padding:8px;overflow:auto}}</style></head><body>
<h1>refgrad check: {html.escape(device)}</h1>
<p>{counts[PASS]} passed, {counts[FAIL]} failed, {counts[UNSUPPORTED]} unsupported. Cells show the worst ULP distance
where the spec allows one; hover a failing cell for the explanation. {html.escape(unsupported_line(device))}.</p>
<table><tr><th></th>{head}</tr>{''.join(body)}</table>
<h2>Tensor programs</h2><table>{programs}</table>
<h2>Failures</h2>{failures or "<p>none</p>"}</body></html>"""
  with open(path, "w") as f:
    f.write(page)


def progress_printer(stream: Any = None) -> Callable[[int, int, Case], None]:
  """One line, rewritten in place on a terminal; a line every 10% otherwise."""
  stream = stream or sys.stderr
  started = time.perf_counter()
  interactive = stream.isatty()

  def show(i: int, total: int, case: Case) -> None:
    elapsed = time.perf_counter() - started
    text = f"[{i + 1:4d}/{total}] {elapsed:6.1f}s {case.row} {case.column}"
    if interactive:
      stream.write("\r" + text[:100].ljust(100))
      if i + 1 == total:
        stream.write("\n")
    elif i % max(1, total // 10) == 0:
      stream.write(text + "\n")
    stream.flush()
  return show
