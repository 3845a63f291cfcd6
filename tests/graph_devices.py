"""Graph devices for tests, without a framework: a graph compiled into a call of the graph evaluator
(refgrad/interp/graph.py), so the contract (refgrad/graph_device.py) is tested on its own. GRAPHEVAL is right;
GRAPHEVAL_NOADD cannot compute float32 ADD (an unsupported op); GRAPHEVAL_SUB computes float32 ADD as a subtraction
(a planted wrong answer the oracle must catch); GRAPHEVAL_WIDE returns float64 for every output (a device returning
the wrong dtype); GRAPHEVAL_FUSING is right but sums float rows in an order chosen by the whole graph, as a fusing
compiler does (reversed in every other graph), so the same sum in two graphs may differ in its last bit. The
GRAPHEVAL_FTZ devices flush float32/float64 subnormals (FTZ/DAZ) in every ALU op, CAST and
reduction, their sums and products step by step: GRAPHEVAL_FTZ declares it (FLUSHED_SUBNORMALS),
GRAPHEVAL_FTZ_UNDECLARED does not, and GRAPHEVAL_FTZ_ULP and GRAPHEVAL_FTZ_ZERO declare it but also get normal lanes
wrong (a float32 ADD or MUL giving 1.0 gives the next float up; one giving +0.0 gives the smallest subnormal). Each
counts the graphs it compiles and the stores they hold.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from refgrad.alu import exec_alu
from refgrad.backend_helpers import HostAllocator
from refgrad.codegen.contract import Capabilities, Difference
from refgrad.device import DeviceImpl
from refgrad.dtype import dtypes
from refgrad.hookspecs import hookimpl
from refgrad.interp.graph import EVALUATORS, Value, evaluate_nodes
from refgrad.registry import DeviceSpec
from refgrad.uop import GroupOp, Ops, UOp

COMPILED: dict[str, list[int]] = {}  # device -> the number of stores of each graph it compiled, in order

FLUSHING = GroupOp.ALU | {Ops.CAST, Ops.REDUCE_AXIS}
FLUSHED_SUBNORMALS = Difference(
  ops=frozenset(FLUSHING), dtypes=frozenset({dtypes.float32, dtypes.float64}), ulp=0.0, flushes_subnormals=True,
  source="tests/graph_devices.py: the GRAPHEVAL_FTZ devices read float32/float64 subnormal operands of every ALU op, "
         "CAST and reduction as zeros of their sign, and write subnormal results so")


def flush(x: np.ndarray) -> np.ndarray:
  """float32/float64 subnormals as zeros of their sign; other dtypes as they are."""
  x = np.asarray(x)
  if x.dtype not in (np.float32, np.float64):
    return x
  return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(np.zeros((), x.dtype), x), x)


def _folded(u: UOp, x: np.ndarray, mask: np.ndarray | None) -> Value:
  """A float32/float64 reduction one step at a time along its axes, each partial result flushed."""
  op, axes = u.arg
  x = np.broadcast_to(x, u.src[0].shape)
  if u.dtype not in FLUSHED_SUBNORMALS.dtypes or any(x.shape[a] == 0 for a in axes):
    return EVALUATORS[Ops.REDUCE_AXIS](u, [(x, mask)])
  kept = [size for i, size in enumerate(x.shape) if i not in axes]
  terms = np.moveaxis(x, axes, range(-len(axes), 0)).reshape(*kept, -1)
  total = terms[..., 0]
  for i in range(1, terms.shape[-1]):
    total = flush(exec_alu(op, u.dtype, total, terms[..., i]))
  return total.reshape(u.shape), (mask.any(axis=axes, keepdims=True) if mask is not None else None)


def _planted(u: UOp, x: np.ndarray, plant: str) -> np.ndarray:
  """A float32 ADD or MUL result made wrong on a normal lane: 1.0 as the next float up ('ulp'), +0.0 as the smallest
  subnormal ('zero')."""
  if u.op not in (Ops.ADD, Ops.MUL) or u.dtype != dtypes.float32:
    return x
  if plant == "ulp":
    return np.where(x == 1, np.nextafter(np.float32(1), np.float32(2)), x)
  return np.where((x == 0) & ~np.signbit(x), np.finfo(np.float32).smallest_subnormal, x)


def flushed_values(root: UOp, leaves: dict[UOp, Value], plant: str = "") -> dict[UOp, Value]:
  """evaluate_nodes with float32/float64 subnormal operands and results of ALU ops, CASTs and reductions flushed."""
  values = dict(leaves)
  for node in root.toposort:
    if node in values:
      continue
    srcs = [values[s] for s in node.src]
    if node.op not in FLUSHING:
      values[node] = EVALUATORS[node.op](node, srcs)
      continue
    srcs = [(flush(x), mask) for x, mask in srcs]
    x, mask = _folded(node, *srcs[0]) if node.op is Ops.REDUCE_AXIS else EVALUATORS[node.op](node, srcs)
    values[node] = (_planted(node, flush(x), plant) if plant else flush(x)), mask
  return values


class EvaluatorGraph:
  def __init__(self, name: str, unsupported_add: bool = False, add_as_sub: bool = False, wide: bool = False,
               fusing: bool = False, flushes: bool = False, declares: bool = False, plant: str = ""):
    self.name, self.unsupported_add, self.add_as_sub, self.wide = name, unsupported_add, add_as_sub, wide
    self.fusing, self.flushes, self.plant = fusing, flushes, plant
    self.caps = Capabilities()
    self.differences = (FLUSHED_SUBNORMALS,) if declares else ()

  def unsupported(self, node: UOp) -> str | None:
    planted = self.unsupported_add and node.op is Ops.ADD and node.dtype == dtypes.float32
    return "planted: this test device has no float32 ADD" if planted else None

  def compile(self, graph: UOp) -> Callable[..., Sequence[np.ndarray]]:
    from refgrad.graph_device import graph_inputs, graph_outputs
    COMPILED.setdefault(self.name, []).append(len(graph.src))
    inputs, outputs = graph_inputs(graph), graph_outputs(graph)
    if self.add_as_sub:
      graph = graph.substitute({u: UOp(Ops.ADD, u.dtype, (u.src[0], u.src[1].alu(Ops.NEG))) for u in graph.toposort
                                if u.op is Ops.ADD and u.dtype == dtypes.float32})
      outputs = [(param, store.src[1]) for (param, _), store in zip(outputs, graph.src)]
    if self.fusing and graph.digest[0] % 2:
      graph = graph.substitute({u: _reversed_sum(u) for u in graph.toposort if u.op is Ops.REDUCE_AXIS
                                and u.arg[0] is Ops.ADD and dtypes.is_float(u.dtype)})
      outputs = [(param, store.src[1]) for (param, _), store in zip(outputs, graph.src)]

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
      leaves = {param: (array.reshape(param.shape), None) for param, array in zip(inputs, arrays)}
      results = []
      for _, value in outputs:
        values = flushed_values(value, leaves, self.plant) if self.flushes else evaluate_nodes(value, dict(leaves))
        out = np.broadcast_to(values[value][0], value.shape)
        results.append(exec_alu(Ops.ADD, dtypes.float64, out.astype(np.float64), np.float64(0)) if self.wide else out)
      return results
    return run


def _reversed_sum(u: UOp) -> UOp:
  """The same sum over its rows reversed: another order of the terms, which SPEC.md allows."""
  axes = u.arg[1]
  flipped = UOp(Ops.FLIP, u.src[0].dtype, (u.src[0],), tuple(i in axes for i in range(len(u.src[0].shape))))
  return UOp(u.op, u.dtype, (flipped,), u.arg)


DEVICES = {"GRAPHEVAL": {}, "GRAPHEVAL_NOADD": {"unsupported_add": True}, "GRAPHEVAL_SUB": {"add_as_sub": True},
           "GRAPHEVAL_WIDE": {"wide": True}, "GRAPHEVAL_FUSING": {"fusing": True},
           "GRAPHEVAL_FTZ": {"flushes": True, "declares": True},
           "GRAPHEVAL_FTZ_UNDECLARED": {"flushes": True},
           "GRAPHEVAL_FTZ_ULP": {"flushes": True, "declares": True, "plant": "ulp"},
           "GRAPHEVAL_FTZ_ZERO": {"flushes": True, "declares": True, "plant": "zero"}}


def make(name: str) -> DeviceImpl:
  return DeviceImpl(name, HostAllocator(), graph=EvaluatorGraph(name, **DEVICES[name]))


@hookimpl
def refgrad_devices() -> list[DeviceSpec]:
  return [DeviceSpec(name, lambda name=name: make(name), plugin="tests.graph_devices", kind="graph")
          for name in DEVICES]


@contextlib.contextmanager
def registered() -> Iterator[None]:
  from refgrad import Device, plugin_loader
  fresh = "GRAPHEVAL" not in Device.available()
  if fresh:
    plugin_loader.register(sys.modules[__name__], name="tests.graph_devices")
  try:
    yield
  finally:
    if fresh:
      plugin_loader.unregister(sys.modules[__name__])
