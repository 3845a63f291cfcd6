"""Graph devices for tests, without a framework: a graph compiled into a call of the graph evaluator
(refgrad/interp/graph.py), so the contract (refgrad/graph_device.py) is tested on its own. GRAPHEVAL is right;
GRAPHEVAL_NOADD cannot compute float32 ADD (an unsupported op); GRAPHEVAL_SUB computes float32 ADD as a subtraction
(a planted wrong answer the oracle must catch); GRAPHEVAL_WIDE returns float64 for every output (a device returning
the wrong dtype); GRAPHEVAL_FUSING is right but sums float rows in an order chosen by the whole graph, as a fusing
compiler does (reversed in every other graph), so the same sum in two graphs may differ in its last bit. Each
counts the graphs it compiles and the stores they hold.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from refgrad.alu import exec_alu
from refgrad.backend_helpers import HostAllocator
from refgrad.codegen.contract import Capabilities
from refgrad.device import DeviceImpl
from refgrad.dtype import dtypes
from refgrad.hookspecs import hookimpl
from refgrad.interp.graph import evaluate_nodes
from refgrad.registry import DeviceSpec
from refgrad.uop import Ops, UOp

COMPILED: dict[str, list[int]] = {}  # device -> the number of stores of each graph it compiled, in order


class EvaluatorGraph:
  def __init__(self, name: str, unsupported_add: bool = False, add_as_sub: bool = False, wide: bool = False,
               fusing: bool = False):
    self.name, self.unsupported_add, self.add_as_sub, self.wide = name, unsupported_add, add_as_sub, wide
    self.fusing = fusing
    self.caps = Capabilities()

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
        out = np.broadcast_to(evaluate_nodes(value, dict(leaves))[value][0], value.shape)
        results.append(exec_alu(Ops.ADD, dtypes.float64, out.astype(np.float64), np.float64(0)) if self.wide else out)
      return results
    return run


def _reversed_sum(u: UOp) -> UOp:
  """The same sum over its rows reversed: another order of the terms, which SPEC.md allows."""
  axes = u.arg[1]
  flipped = UOp(Ops.FLIP, u.src[0].dtype, (u.src[0],), tuple(i in axes for i in range(len(u.src[0].shape))))
  return UOp(u.op, u.dtype, (flipped,), u.arg)


DEVICES = {"GRAPHEVAL": {}, "GRAPHEVAL_NOADD": {"unsupported_add": True}, "GRAPHEVAL_SUB": {"add_as_sub": True},
           "GRAPHEVAL_WIDE": {"wide": True}, "GRAPHEVAL_FUSING": {"fusing": True}}


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
