"""`check_graph_against_reference`: a Tensor program computed whole on a device, compared with the reference over the
whole graph, and a differing graph shrunk to the smallest subgraph that still differs.

check_against_reference runs a program kernel by kernel, so a difference is pinned to one kernel; a graph device
(refgrad/graph_device.py) fuses and schedules the whole graph itself, and a compiler bug may show only across what
refgrad would cut into kernels. Here the device gets the program's graph whole; the reference value and each lane's
error bound come from the graph evaluator and the bounds walk over the whole graph as if it were one kernel
(bounds.kernel_error_bounds), so the slack of a sum feeding an exp feeding another sum is carried across kernel
boundaries. A differing output is then shrunk (shrink_graph): down to the smallest computed node that still differs
while all of its sources agree, then with every subgraph below it that the difference does not need replaced by an
input holding its reference value.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from refgrad.buffer import Buffer
from refgrad.codegen.contract import UnsupportedOpError
from refgrad.dtype import dtypes
from refgrad.interp.graph import evaluate_graph
from refgrad.registry import Device
from refgrad.symbolic_shapes import concrete_graph
from refgrad.symbolic_shapes import in_use as sizes_in_use
from refgrad.testing.oracle.bounds import kernel_error_bounds
from refgrad.testing.oracle.compare import Comparison, compare
from refgrad.testing.oracle.reference import ReferenceMismatch, declared_differences, lane_text
from refgrad.uop import GroupOp, Ops, UOp

LEAVES = (Ops.BUFFER, Ops.CONST, Ops.DEVICE)
PASSED_THROUGH = (Ops.DETACH, Ops.CUSTOM_GRAD, Ops.CONTIGUOUS)  # their value is their first source's
MAX_SHRINK_RUNS = 60  # device runs a shrink may spend (each compiles a graph: seconds on torch.compile)


class GraphMismatch(ReferenceMismatch):
  """A graph device's value of a whole program differs from the reference beyond what docs/SPEC.md allows."""


@dataclass
class Shrunk:
  """The smallest subgraph found that still differs: `graph` on the reference (PYTHON buffers as its inputs, reference
  values where a subgraph was cut), the device's values and the comparison, and how many nodes it kept."""
  graph: UOp
  actual: np.ndarray
  comparison: Comparison
  nodes_before: int
  runs: int  # device runs the shrink took

  @property
  def nodes(self) -> int:
    return len(self.graph.toposort)


@dataclass
class GraphReport:
  device: str
  roots: list[UOp]  # the program's outputs, as plain graphs on the reference
  outputs: list[Comparison] = field(default_factory=list)
  shrunk: Shrunk | None = None
  explanation: str = ""

  @property
  def ok(self) -> bool:
    return all(c.ok for c in self.outputs)


def plain_graph(root: UOp) -> UOp:
  """The graph at its bound sizes, without the nodes whose value is their source's (the bounds walk sees kernels,
  where the scheduler has removed them), innermost first."""
  root = concrete_graph(root) if sizes_in_use() else root
  while found := [u for u in root.toposort if u.op in PASSED_THROUGH]:
    root = root.substitute({found[0]: found[0].src[0]})
  return root


def reference_bounds(root: UOp, device: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
  """(flat reference value, flat absolute error bound, flat undefined lanes or None) of a graph (plain_graph's); with
  `device`, the bound allows the differences from SPEC.md it declares."""
  out = UOp(Ops.PARAM, root.dtype, (), (0, int(np.prod(root.shape))))
  declared = declared_differences(device) if device is not None else None
  return kernel_error_bounds(UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, root)),)), {}, None,
                             declared)


def on_device(root: UOp, device: str) -> UOp:
  """The graph with fresh copies of its buffers on `device` and its constants there: new nodes, so nothing of an
  earlier run is reused (a realized node reads its buffer instead of computing)."""
  swap: dict[UOp, UOp] = {}
  for u in root.toposort:
    if u.op is Ops.BUFFER:
      swap[u] = UOp(Ops.BUFFER, u.dtype, (), Buffer(device, u.arg.size, u.dtype).copyin(u.arg.numpy()))
    elif u.op is Ops.DEVICE:
      swap[u] = UOp(Ops.DEVICE, u.dtype, (), device)
  return root.substitute(swap)


def device_values(roots: list[UOp], device: str) -> list[np.ndarray]:
  """The graphs' values computed on `device`, realized together (one schedule: the device gets them as one graph),
  flat."""
  from refgrad.tensor import Tensor
  values = [Tensor._from(on_device(root, device)) for root in roots]
  values[0].realize(*values[1:])
  return [v.numpy().reshape(-1) for v in values]


def raised_by_graph_device(error: BaseException) -> bool:
  """True if `error` came out of computing a graph on the device under test, not out of the reference or the
  comparison (a bug of refgrad itself)."""
  return any(frame.f_code is device_values.__code__ for frame, _ in traceback.walk_tb(error.__traceback__))


def compare_on(root: UOp, device: str) -> tuple[np.ndarray, Comparison]:
  expected, bound, undefined = reference_bounds(root, device)
  actual, = device_values([root], device)
  return actual, compare(actual, expected, undefined, abs_bound=bound)


COMPUTING = GroupOp.ALU | {Ops.REDUCE_AXIS, Ops.CAST, Ops.BITCAST}


def _computed(u: UOp) -> bool:
  """A node whose value some op computes (not a leaf, nor only moved leaves)."""
  return any(s.op in COMPUTING for s in u.toposort)


def _as_input(u: UOp) -> UOp | None:
  """A leaf holding node u's reference value (a BUFFER on PYTHON, reshaped), or None where the reference leaves a
  lane undefined (no input can stand for it)."""
  value, undefined = evaluate_graph(u)
  if undefined is not None:
    return None
  flat = np.ascontiguousarray(value).reshape(-1)
  buffer = UOp(Ops.BUFFER, u.dtype, (), Buffer("PYTHON", flat.size, u.dtype).copyin(flat))
  return UOp(Ops.RESHAPE, u.dtype, (buffer,), u.shape)


class _Shrinker:
  def __init__(self, device: str, budget: int):
    self.device, self.budget, self.runs = device, budget, 0

  def differs(self, root: UOp) -> tuple[np.ndarray, Comparison] | None:
    """The device's value and the comparison if `root` differs; None if it agrees, fails to run, or the budget is
    spent."""
    if self.runs >= self.budget:
      return None
    self.runs += 1
    try:
      actual, comparison = compare_on(root, self.device)
    except Exception:  # a subgraph the device cannot run is not a smaller finding
      return None
    return (actual, comparison) if not comparison.ok else None

  def descend(self, root: UOp, found: tuple[np.ndarray, Comparison]) -> tuple[UOp, tuple[np.ndarray, Comparison]]:
    """Down from a differing node to a differing source, while there is one."""
    while True:
      below = sorted({s for s in root.src if _computed(s)}, key=lambda s: len(s.toposort))
      step = next(((s, d) for s in below if (d := self.differs(s)) is not None), None)
      if step is None:
        return root, found
      root, found = step

  def cut(self, root: UOp, found: tuple[np.ndarray, Comparison]) -> tuple[UOp, tuple[np.ndarray, Comparison]]:
    """Replace each computed subgraph under `root`, largest first, by an input holding its reference value, where
    the graph still differs without it."""
    tried: set[UOp] = set()
    while candidates := sorted((u for u in root.toposort if u is not root and _computed(u) and u not in tried),
                               key=lambda u: -len(u.toposort)):
      node = candidates[0]
      tried.add(node)
      if (leaf := _as_input(node)) is None:
        continue
      smaller = root.substitute({node: leaf})
      if (still := self.differs(smaller)) is not None:
        root, found = smaller, still
    return root, found


def shrink_graph(root: UOp, device: str, found: tuple[np.ndarray, Comparison] | None = None,
                 budget: int = MAX_SHRINK_RUNS) -> Shrunk | None:
  """The smallest subgraph of `root` (a plain graph on the reference) found that still differs on `device`, within
  `budget` device runs; None if `root` itself does not differ."""
  shrinker = _Shrinker(device, budget)
  found = found or shrinker.differs(root)
  if found is None:
    return None
  small, found = shrinker.cut(*shrinker.descend(root, found))
  return Shrunk(small, found[0], found[1], len(root.toposort), shrinker.runs)


def _explain(device: str, index: int, root: UOp, actual: np.ndarray, comparison: Comparison,
             shrunk: Shrunk | None) -> str:
  expected, _, _ = reference_bounds(root)
  lines = [f"{device} differs from the reference in output {index} of the whole graph ({comparison.dtype.name}"
           f"{list(root.shape)}, {len(root.toposort)} nodes): {comparison.mismatch_count} of {comparison.checked} "
           f"checked lanes"]
  lines += [f"  at {lane}: device {lane_text(actual, lane)}, reference {lane_text(expected, lane)}"
            for lane in comparison.mismatches]
  if shrunk is not None:
    small_expected, _, _ = reference_bounds(shrunk.graph)
    lines.append(f"shrunk to {shrunk.nodes} of {shrunk.nodes_before} nodes in {shrunk.runs} device runs; it differs "
                 f"in {shrunk.comparison.mismatch_count} lanes:")
    lines += [f"  at {lane}: device {lane_text(shrunk.actual, lane)}, reference {lane_text(small_expected, lane)}"
              for lane in shrunk.comparison.mismatches]
    lines.append(str(shrunk.graph))
  return "\n".join(lines)


def program_roots(fn: Callable[..., Any], *inputs: Any) -> list[UOp]:
  """The plain graphs of `fn(*tensors)`'s outputs (one Tensor or a tuple of them) on the reference, nothing
  realized; `inputs` as check_graph_against_reference takes them."""
  from refgrad.tensor import Tensor
  tensors = [x if isinstance(x, Tensor) else Tensor(x, device="PYTHON") for x in inputs]
  out = fn(*tensors)
  return [plain_graph(t.uop) for t in (out if isinstance(out, (tuple, list)) else (out,))]


def check_graph_against_reference(fn: Callable[..., Any], *inputs: Any, device: str, shrink: bool = True,
                                  raise_on_mismatch: bool = True, budget: int = MAX_SHRINK_RUNS) -> GraphReport:
  """Run `fn(*tensors)` (one Tensor or a tuple of them) whole on `device` and compare each output with the
  reference over the whole graph (exact where SPEC.md is exact, ULP bounds for transcendentals, gamma_n for sums,
  carried through every op; undefined lanes skipped). On a difference, with `shrink`, the first differing output is
  shrunk (shrink_graph, at most `budget` device runs). Raises GraphMismatch explaining it (the lanes, the shrunk
  graph), or with `raise_on_mismatch=False` returns the report with the explanation."""
  roots = program_roots(fn, *inputs)
  if sharded := next((u for root in roots for u in root.toposort if u.op in (Ops.MULTI, Ops.ALLREDUCE)), None):
    raise UnsupportedOpError(device, sharded.op, sharded.dtype, "a program over several devices: the graph-device "
                             "contract has no sharding yet")
  report = GraphReport(device, roots)
  for index, (root, actual) in enumerate(zip(roots, device_values(roots, device))):
    expected, bound, undefined = reference_bounds(root, device)
    comparison = compare(actual, expected, undefined, abs_bound=bound)
    report.outputs.append(comparison)
    if not comparison.ok and not report.explanation:
      report.shrunk = shrink_graph(root, device, (actual, comparison), budget) if shrink else None
      report.explanation = _explain(device, index, root, actual, comparison, report.shrunk)
  if raise_on_mismatch and not report.ok:
    raise GraphMismatch(report.explanation)
  return report


def standalone_files(root: UOp, device: str, title: str) -> dict[str, str | bytes] | None:
  """Files that reproduce graph `root` (a plain graph on the reference) on `device` without refgrad, in the
  framework's own terms, written by the device's GraphCompiler (its optional `standalone`): text, or bytes for a
  binary file such as an ONNX model; None if it has none."""
  write = getattr(Device[device].graph, "standalone", None)
  if write is None:
    return None
  expected, bound, undefined = reference_bounds(root, device)
  inputs = [(u, u.arg.numpy()) for u in root.toposort if u.op is Ops.BUFFER]
  return write(root, inputs, expected, bound, undefined, title)


def _write_files(files: dict[str, str | bytes], folder: Path) -> Path:
  """The files in `folder`; the path of the first (the script to run)."""
  folder.mkdir(parents=True, exist_ok=True)
  for name, content in files.items():
    if isinstance(content, bytes):
      (folder / name).write_bytes(content)
    else:
      (folder / name).write_text(content)
  return folder / next(iter(files))


def write_program_standalone(fn: Callable[..., Any], inputs: Sequence[Any], device: str, folder: Path,
                             what: str) -> str:
  """A program the device failed on without an answer to compare (`what`: it crashed or hung the process, or its
  compiler raised) as reproducers in `folder`, each output's whole graph: it is neither run here nor shrunk, since
  running it could take this process down with it. One line saying where they are or why there are none."""
  roots = program_roots(fn, *inputs)
  written = []
  for index, root in enumerate(roots):
    title = f"refgrad finding on {device}: {what} (the program's output {index}, {len(root.toposort)} nodes)"
    if (files := standalone_files(root, device, title)) is None:
      return f"no standalone reproducer: device {device}'s GraphCompiler writes none (no `standalone`)"
    written.append(_write_files(files, folder / f"output_{index}" if len(roots) > 1 else folder))
  shown = ", ".join(str(path) for path in written)
  return f"standalone reproducer{'s, one per output (which one fails is not known)' if len(written) > 1 else ''}: " \
         f"{shown}"


def write_graph_standalone(report: GraphReport, folder: Path) -> str:
  """A differing report's shrunk graph (or first differing output) as a reproducer in `folder`; one line saying
  where it is or why there is none."""
  if report.ok:
    return "no standalone reproducer: the program agrees with the reference"
  root = report.shrunk.graph if report.shrunk is not None else \
    next(r for r, c in zip(report.roots, report.outputs) if not c.ok)
  title = f"refgrad finding on {report.device}: {len(root.toposort)} nodes differ from the reference (docs/SPEC.md)"
  files = standalone_files(root, report.device, title)
  if files is None:
    return f"no standalone reproducer: device {report.device}'s GraphCompiler writes none (no `standalone`)"
  return f"standalone reproducer: {_write_files(files, folder)}"
