"""Graph devices: a framework's compiler (torch.compile, XLA, ...) computes a whole tensor-level graph, where a kernel
device compiles refgrad's linearized kernels one by one.

A graph is what the scheduler makes (refgrad/schedule.py), before any lowering: a SINK of STOREs of values into
output PARAMs, the values built from input PARAMs by the primitive ops the graph evaluator runs. One kernel is a graph
of one STORE; realize hands a graph device the consecutive kernels of a schedule stitched into one graph
(refgrad/graph_batches.py), so the framework sees, fuses and schedules all of it. The device's `GraphCompiler`
(refgrad/codegen/contract.py) says which nodes it cannot compute as docs/SPEC.md says and compiles the rest into a
function over numpy arrays; this module checks the graph, feeds the function the buffers' values and writes back
what it returns, after checking each output's dtype and size.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from refgrad.codegen.contract import GraphCompiler, Program, Runner, UnsupportedDTypeError, UnsupportedOpError
from refgrad.dtype import ALL_DTYPES, DType
from refgrad.uop import GroupOp, Ops, UOp

# Nodes that only frame a graph: the device never computes them
FRAME = (Ops.SINK, Ops.STORE, Ops.PARAM)


class GraphOutputError(RuntimeError):
  """A graph device's compiled function returned something other than the values its graph stores."""


def graph_inputs(graph: UOp) -> list[UOp]:
  """The PARAMs the graph reads (every PARAM no STORE writes), in PARAM order: the compiled function's arguments."""
  written = {store.src[0] for store in graph.src}
  return sorted((u for u in graph.toposort if u.op is Ops.PARAM and u not in written), key=lambda u: u.arg[0])


def graph_outputs(graph: UOp) -> list[tuple[UOp, UOp]]:
  """(output PARAM, stored value) of each STORE, in the SINK's order: what the compiled function returns."""
  return [(store.src[0], store.src[1]) for store in graph.src]


def step_function(outputs: Sequence[UOp], leaves: Sequence[UOp],
                  step_of: Callable[[UOp], Callable[..., Any]]) -> Callable[..., tuple[Any, ...]]:
  """A function computing `outputs` from the values of `leaves` (its arguments, in that order): every other node,
  sources first, by the step `step_of(node)` made for it, called on its sources' values. How a graph device runs its
  framework's ops over a graph; the framework then traces or compiles the function whole."""
  nodes = list(dict.fromkeys(u for out in outputs for u in out.toposort))
  slot = {u: i for i, u in enumerate(nodes)}
  given = set(leaves)
  plan = [(slot[u], step_of(u), tuple(slot[s] for s in u.src)) for u in nodes if u not in given]
  leaf_slots, out_slots = [slot[u] for u in leaves], [slot[u] for u in outputs]

  def run(*arguments: Any) -> tuple[Any, ...]:
    values: list[Any] = [None] * len(nodes)
    for i, value in zip(leaf_slots, arguments):
      values[i] = value
    for i, step, sources in plan:
      values[i] = step(*(values[s] for s in sources))
    return tuple(values[i] for i in out_slots)
  return run


# Sharded graphs span several devices; a graph device computes each graph on one
SHARDED = {Ops.MULTI: "a tensor over several devices: the graph-device contract has no sharding yet",
           Ops.ALLREDUCE: "a reduction across devices: the graph-device contract has no sharding yet"}


def rule_gap(node: UOp, rules: dict[Ops, Any], unsupported: dict[tuple[Ops, DType], str]) -> str | None:
  """Why a graph device that exports a graph by `rules` (op -> its rule) cannot compute `node` as SPEC.md says: a
  sharded node, an op without a rule, or an (op, operand dtype) its framework lacks (`unsupported`, with the
  reason); None if it can. What a GraphCompiler's `unsupported(node)` answers."""
  if node.op in SHARDED:
    return SHARDED[node.op]
  if node.op not in rules:
    return f"no export rule for {node.op.name}"
  return unsupported.get((node.op, operand_dtype(node)))


def bits_literal(values: np.ndarray) -> str:
  """An array as Python source for a standalone reproducer: `from_bits(bit patterns, dtype, shape)`, exact for NaN,
  -0.0 and bfloat16 (the script defines from_bits)."""
  array = np.ascontiguousarray(values)
  bits = array.reshape(-1).view(f"i{array.dtype.itemsize}").tolist()
  return f"from_bits({bits}, {str(array.dtype)!r}, {tuple(array.shape)})"


def graph_program(graph: UOp) -> Program:
  """What run_kernel returns for a graph: named by its structure (the same in every process), its key the graph."""
  return Program(f"graph_{graph.digest.hex()[:12]}", (), (), graph)


def check_graph(device: str, compiler: GraphCompiler, graph: UOp) -> None:
  """Raise UnsupportedDTypeError for a dtype the device does not claim, or UnsupportedOpError (naming the op, its
  dtype and the device's reason) for the first node it cannot compute as SPEC.md says."""
  if graph.op is not Ops.SINK or any(s.op is not Ops.STORE for s in graph.src):
    raise ValueError(f"a graph for device {device} is a SINK of STOREs, got a {graph.op.name}")
  nodes = [u for u in graph.toposort if u.op not in FRAME]
  missing = {u.dtype for u in graph.toposort} & set(ALL_DTYPES.values()) - compiler.caps.dtypes
  if missing:
    names = ", ".join(sorted(d.name for d in missing))
    raise UnsupportedDTypeError(f"device {device} does not support {names} (graph {graph_program(graph).name})")
  for node in nodes:
    if (why := compiler.unsupported(node)) is not None:
      raise UnsupportedOpError(device, node.op, operand_dtype(node), why)


def operand_dtype(node: UOp) -> DType:
  """The dtype an op computes in: its last operand's for an ALU op (a comparison's output is bool, and so is
  WHERE's condition), else its own."""
  return node.src[-1].dtype if node.op in GroupOp.ALU and node.src else node.dtype


def _typed(handle: Any, param: UOp) -> np.ndarray:
  """A host buffer's bytes (a numpy byte array, refgrad.backend_helpers.HostAllocator's) as the PARAM's values."""
  return np.asarray(handle)[:param.arg[1] * param.dtype.itemsize].view(param.dtype.np)


def _checked(device: str, graph: UOp, out: Any, param: UOp, value: UOp) -> np.ndarray:
  """An output the compiled function returned, as the flat values its PARAM holds; GraphOutputError unless it has
  the stored value's dtype and its shape or the flat buffer's (writing it anyway would be a wrong answer, or a write
  past the buffer)."""
  array = np.asarray(out)
  if array.dtype != value.dtype.np or array.shape not in (value.shape, (param.arg[1],)):
    raise GraphOutputError(f"device {device} returned {array.dtype}{list(array.shape)} for output {param.arg[0]} of "
                           f"graph {graph_program(graph).name}, which stores {value.dtype.name}{list(value.shape)}")
  return array.reshape(-1)


def graph_runner(device: str, compiler: GraphCompiler, graph: UOp) -> Runner:
  """The runner of a graph on a graph device: checked (check_graph), compiled once, then run on buffer handles (one
  per PARAM, in PARAM order, as a kernel's runner). Every input is read before any output is written, so a buffer may
  be both (an assignment: the old value read, the new one written)."""
  check_graph(device, compiler, graph)
  function = compiler.compile(graph)
  inputs, outputs = graph_inputs(graph), graph_outputs(graph)

  def run(*handles: Any) -> None:
    results = function(*(_typed(handles[p.arg[0]], p) for p in inputs))
    if len(results) != len(outputs):
      raise GraphOutputError(f"device {device} returned {len(results)} values for graph {graph_program(graph).name},"
                             f" which stores {len(outputs)}")
    flat = [_checked(device, graph, out, param, value) for out, (param, value) in zip(results, outputs)]
    for (param, _), values in zip(outputs, flat):
      _typed(handles[param.arg[0]], param)[:] = values
  return run


def graph_listing(graph: UOp, compiler: GraphCompiler) -> str:
  """What a report shows as a graph's code: the compiler's own text of it (an optional `render(graph)`), else the
  graph's nodes."""
  render = getattr(compiler, "render", None)
  return render(graph) if render is not None else str(graph)
