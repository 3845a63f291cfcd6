"""`check_against_reference`: run a Tensor program on a device and on PYTHON, kernel by kernel, and explain
any difference.

The program is scheduled once. Each kernel runs on the reference first; then the device runs the *same*
kernel on copies of the reference's input buffers, so a difference is pinned to the kernel that made it,
never smeared by an earlier one. Each output is compared as docs/SPEC.md says, with the per-lane bounds of
refgrad.testing.oracle.bounds: bit-exact where the spec is exact, ULP bounds for transcendentals, gamma_n*sum|x|
for reductions (whose order is free), undefined and unbounded lanes skipped and counted.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refgrad.alu import ulp_distance
from refgrad.buffer import Buffer
from refgrad.codegen.contract import Allowance, OptList, Program, declared_allowances, opts_text
from refgrad.codegen.pipeline import compile_ast
from refgrad.dtype import DType
from refgrad.execute import kernel_opts, run_schedule, run_transfer
from refgrad.registry import Device
from refgrad.schedule import ScheduleItem, create_schedule
from refgrad.standalone import StandaloneCase
from refgrad.symbolic_shapes import bound_region, concrete_graph, is_symbolic_shape, shape_value
from refgrad.testing.oracle.bounds import kernel_error_bounds
from refgrad.testing.oracle.compare import Comparison, LaneVerdicts, compare_lanes
from refgrad.uop import Ops, UOp


class ReferenceMismatch(AssertionError):
  """A device's kernel disagrees with the reference beyond what docs/SPEC.md allows."""


class RewriteMismatch(ReferenceMismatch):
  """The reference's own kernel path (lowered, rewritten, linearized, interpreted) disagrees with the graph evaluator
  (the kernel's graph op by op, nothing rewritten): a step every device shares is wrong, which no device can show."""


@dataclass
class Lanes:
  """One kernel's output, flat, as compared: the device's values, the reference's, and the verdict on each lane."""
  actual: np.ndarray
  expected: np.ndarray
  verdicts: LaneVerdicts  # the device's lanes against the reference's
  rewrites: LaneVerdicts | None = None  # the reference's lanes against the graph evaluator's (None: a transfer)


@dataclass
class KernelResult:
  name: str
  comparison: Comparison
  program: Program | None = None  # what ran on the device: its opts and code paths (None: a transfer)
  lanes: Lanes | None = None      # kept when asked (check_against_reference(keep_lanes=True))
  explanation: str = ""           # why it failed, when it did and the check did not raise
  rewrite_error: str = ""         # the reference's kernel path against the graph evaluator, when they disagree

  @property
  def ok(self) -> bool:
    return self.comparison.ok and not self.rewrite_error

  @property
  def ast(self) -> UOp | None:
    """The scheduled kernel (None: a transfer)."""
    return None if self.program is None else self.program.key


@dataclass
class ReferenceReport:
  """What a check saw: per kernel, lanes checked, skipped as undefined or unbounded, and the worst ULP."""
  device: str
  kernels: list[KernelResult] = field(default_factory=list)

  @property
  def checked(self) -> int:
    return sum(k.comparison.checked for k in self.kernels)

  @property
  def undefined(self) -> int:
    return sum(k.comparison.undefined for k in self.kernels)

  @property
  def unbounded(self) -> int:
    return sum(k.comparison.unbounded for k in self.kernels)

  @property
  def worst_ulp(self) -> int:
    return max((k.comparison.worst_ulp for k in self.kernels), default=0)

  @property
  def ok(self) -> bool:
    return all(k.ok for k in self.kernels)


def _short(x: Any, limit: int = 300) -> str:
  text = np.array2string(np.asarray(x), threshold=24, edgeitems=3) if isinstance(x, np.ndarray) else repr(x)
  return text if len(text) <= limit else text[:limit] + " ..."


def _as_tensors(inputs: tuple) -> list[Any]:
  from refgrad.tensor import Tensor
  return [x if isinstance(x, Tensor) else Tensor(x, device="PYTHON") for x in inputs]


POISON = 0xA5  # every byte of an output before the kernel under test runs (not a bool; an unlikely float or int)


def instance_of(device: str, reference: str) -> str:
  """The instance of the device under test that stands for a reference instance: PYTHON -> device, PYTHON:k ->
  the device's k-th instance (a sharded program's parts run on as many instances of the device as on PYTHON)."""
  index = reference.partition(":")[2]
  return device if index in ("", "0") else f"{device.partition(':')[0]}:{index}"


def _device_run(item: ScheduleItem, device: str, inputs: list[np.ndarray],
                opts: OptList | None) -> tuple[np.ndarray, Program | None]:
  """Run one kernel or transfer on `device` (a kernel with `opts`: device_opts' choice), each buffer
  on the device's instance standing for the reference's and its inputs copied from the reference's buffers. The
  output starts filled with POISON, so a lane the kernel never writes is caught even where the allocator hands back
  memory that still holds the right answer from an earlier run. Returns the output and the program that ran (None:
  a transfer)."""
  out = item.buffers[0]
  poison = np.full(out.nbytes, POISON, np.uint8).view(out.dtype.np)
  buffers = [Buffer(instance_of(device, out.device), out.size, out.dtype).copyin(poison)]
  buffers += [Buffer(instance_of(device, b.device), b.size, b.dtype).copyin(x)
              for b, x in zip(item.buffers[1:], inputs[1:])]
  if item.is_transfer:
    run_transfer(item.ast, buffers)
    return buffers[0].numpy(), None
  program, _ = Device[buffers[0].device].run_kernel(item.ast, buffers, opts, item.var_vals)
  return buffers[0].numpy(), program


def device_opts(item: ScheduleItem, device: str, opts: Callable[[UOp], OptList] | None) -> OptList | None:
  """The opts the device under test runs a kernel with: opts(ast), drawn once per kernel, else what realize would
  choose on the device's instance that runs it."""
  return kernel_opts(item.ast, Device[instance_of(device, item.buffers[0].device)].name) if opts is None else \
    opts(item.ast)


def kernel_case(item: ScheduleItem, device: str, contents: list[np.ndarray], bound: np.ndarray,
                undefined: np.ndarray | None, opts: OptList | None,
                inside: Callable[[np.ndarray], np.ndarray]) -> StandaloneCase | None:
  """One kernel on `device` (the instance standing for the reference's: instance_of) as a StandaloneCase, made of
  what check_against_reference computes: `contents` the reference's buffers after the kernel, `bound` and
  `undefined` the oracle's per-lane bounds and skipped lanes of the compared region, `inside` the lanes of the output
  buffer that region is (a symbolic kernel's: fewer than the buffer). The output starts filled with POISON, as on
  the device, so a lane the kernel never writes fails; lanes are judged by the oracle's absolute bounds alone (a
  transcendental's ULP bound is in them, lane by lane), so the reproducer fails exactly where the check does. None
  if the device cannot render the kernel (its error comes again when it runs)."""
  instance = instance_of(device, item.buffers[0].device)
  impl = Device[instance]
  try:
    program = compile_ast(item.ast, impl.caps, opts)
    impl.check_dtypes(program)
    source = impl.render(program)
  except Exception:
    return None
  out = item.buffers[0]
  region = inside(np.arange(out.size))
  skip, abs_bound = np.ones(out.size, bool), np.zeros(out.size, np.float64)
  skip[region] = False if undefined is None else np.reshape(undefined, -1)
  abs_bound[region] = bound
  poisoned = np.full(out.nbytes, POISON, np.uint8).view(out.dtype.np)
  buffers = (poisoned, *(np.ascontiguousarray(c).reshape(-1).copy() for c in contents[1:]))
  return StandaloneCase(program, source, buffers, np.ascontiguousarray(contents[0]).reshape(-1).copy(), skip, 0,
                        abs_bound, device=instance)


def transfer_name(item: ScheduleItem) -> str:
  dest, *sources = item.buffers
  if item.ast.op is Ops.COPY:
    return f"copy {sources[0].device} -> {dest.device}"
  return f"allreduce {item.ast.arg[0].name} of {', '.join(b.device for b in sources)} on {dest.device}"


def transfer_bound(item: ScheduleItem, contents: list[np.ndarray]) -> np.ndarray | None:
  """What a transfer may differ by: nothing for a copy or a max or an integer all-reduce; a float sum or product
  of n partials in any order, gamma_n times the magnitudes (twice: the reference and the device both round)."""
  dest = item.buffers[0]
  if item.ast.op is Ops.COPY or dest.dtype.kind != "f" or item.ast.arg[0] is Ops.MAX:
    return None
  n, eps = len(contents) - 1, float(np.finfo(dest.dtype.np).eps) if dest.dtype.itemsize >= 4 else 2.0 ** -7
  gamma = n * eps / (1 - n * eps)
  parts = np.abs(np.stack([c.astype(np.float64) for c in contents[1:]]))
  magnitude = parts.sum(0) if item.ast.arg[0] is Ops.ADD else parts.prod(0)
  return 2 * gamma * magnitude


def explain_transfer(item: ScheduleItem, index: int, device: str, actual: np.ndarray, expected: np.ndarray,
                     result: Comparison, contents: list[np.ndarray]) -> str:
  dest, *sources = item.buffers
  names = [instance_of(device, b.device) for b in item.buffers]
  lines = [f"{device} differs from the reference in item {index}, {transfer_name(item)} (on {device}: "
           f"{names[0]} from {', '.join(names[1:])}, {dest.dtype.name}[{dest.size}]): {result.mismatch_count} of "
           f"{result.checked} lanes"]
  lines += [f"  at {flat}: device {lane_text(actual, flat)}, reference {lane_text(expected, flat)}"
            for flat in result.mismatches]
  lines += [f"  source {i} ({names[i + 1]}): {_short(c)}" for i, c in enumerate(contents[1:])]
  return "\n".join(lines)


def declared_differences(device: str) -> dict[tuple[Ops, DType], Allowance]:
  """The differences from SPEC.md the device under test declares (a graph device's `differences`, with their
  sources): (op, dtype) -> what is allowed on top of SPEC.md's bounds (ULPs, flushed subnormals). Empty for every
  kernel device."""
  graph = Device[device].graph
  return declared_allowances(getattr(graph, "differences", ())) if graph is not None else {}


def undefined_lanes(t: Any) -> np.ndarray | None:
  """Where a tensor computed on the reference (PYTHON) holds UNDEFINED results (docs/SPEC.md), shaped like the
  tensor (realizes it); None when no lane is undefined. A device may give anything there: skip those lanes."""
  undefined = getattr(t._buffer(), "undefined", None)
  if undefined is None:
    return None
  if not is_symbolic_shape(t.shape):
    return np.asarray(undefined).reshape(t.shape)
  bound = bound_region(np.asarray(undefined), t.shape)
  return bound.copy() if bound.any() else None


def lane_text(x: np.ndarray, lane: int) -> str:
  """One lane's value as a report shows it: a bool also by its byte, which a backend may get wrong (255 for True)."""
  if x.dtype == np.bool_:
    byte = int(x.view(np.uint8)[lane])
    return f"{bool(byte)}" + ("" if byte in (0, 1) else f" (byte {byte})")
  return f"{x[lane]!s}"


_SMALLEST_SUBNORMAL = np.array([np.finfo(np.float32).smallest_subnormal], dtype=np.float32)


def subnormals_flushed() -> bool:
  """True if this process computes with flush-to-zero or denormals-are-zero (x86 MXCSR FTZ/DAZ): a subnormal
  times one is then zero. Loading a library built with -ffast-math can switch it on for the whole process."""
  return bool((_SMALLEST_SUBNORMAL * np.float32(1.0))[0] == 0)


def raised_by_device(error: BaseException) -> bool:
  """True if `error` came out of running a kernel on the device under test (its codegen, compiler or runtime),
  False if it came out of the reference, the bounds, the comparison or the report: a bug of refgrad itself."""
  device_code = (_device_run.__code__, kernel_opts.__code__)  # kernel_opts: a search runs the device's kernels
  return any(frame.f_code in device_code for frame, _ in traceback.walk_tb(error.__traceback__))


def explain(item: ScheduleItem, index: int, device: str, actual: np.ndarray, expected: np.ndarray,
            result: Comparison, inputs: tuple, program: Program, shape: tuple | None = None) -> str:
  """`program`: the one that ran on the device (GPU-shaped on OPENCL). `shape`: the output's, when it is not the
  kernel's own (a symbolic kernel's, at this schedule's values)."""
  shape = item.ast.src[0].src[1].shape if shape is None else shape
  lines = [f"{device} differs from the reference in kernel {index} ({program.name}, output "
           f"{result.dtype.name}{list(shape)}, opts {opts_text(program.opts)}): {result.mismatch_count} of "
           f"{result.checked} checked lanes ({result.undefined} undefined, {result.unbounded} unbounded skipped)"]
  for flat in result.mismatches:
    where = tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()
    ulps = ""
    if result.dtype.kind == "f":
      ulps = f", {int(ulp_distance(actual[flat:flat + 1], expected[flat:flat + 1])[0])} ulp apart"
    lines.append(f"  at {where}: device {lane_text(actual, flat)}, reference {lane_text(expected, flat)}{ulps}")
  lines.append("program inputs:")
  lines += [f"  input {i}: {_short(x)}" for i, x in enumerate(inputs)]
  try:
    source = Device[device].render(program)
  except Exception as e:  # the renderer itself may be what is broken
    source = f"(rendering failed: {type(e).__name__}: {e})"
  lines += [f"kernel source on {device}:", source]
  return "\n".join(lines)


def _check_transfer(item: ScheduleItem, index: int, device: str, contents: list[np.ndarray],
                    keep_lanes: bool) -> KernelResult:
  """A copy or all-reduce of a sharded program, run by the device's instances on the reference's inputs."""
  actual, _ = _device_run(item, device, contents, None)
  bound = transfer_bound(item, contents)
  verdicts = compare_lanes(actual, contents[0], None, abs_bound=bound)
  result = verdicts.summary()
  kernel = KernelResult(transfer_name(item), result)
  if keep_lanes:
    kernel.lanes = Lanes(actual.reshape(-1), contents[0].reshape(-1), verdicts)
  if not result.ok:
    kernel.explanation = explain_transfer(item, index, device, actual, contents[0], result, contents)
  return kernel


def _output_region(item: ScheduleItem) -> tuple[tuple[int, ...], Callable[[np.ndarray], np.ndarray]]:
  """A kernel's output shape and the lanes of its buffer that hold it, flat: all of them, or for a kernel of
  symbolic shape the region its values make (the rest of the buffer, laid out for the largest values, is not the
  tensor's)."""
  shape = item.ast.src[0].src[1].shape
  if not item.var_vals:
    return shape, lambda flat: flat.reshape(-1)
  values = dict(item.var_vals)
  return shape_value(shape, values), lambda flat: bound_region(flat, shape, values).reshape(-1)


# ---- the reference's kernel path against the graph evaluator
def _interpret_again(item: ScheduleItem, contents: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
  """The kernel compiled again, with the rules as they are now, and interpreted on the same inputs (not through the
  runner cache, which keys programs by their kernel graph)."""
  python = Device["PYTHON"]
  buffers = [Buffer("PYTHON", b.size, b.dtype).copyin(x) for b, x in zip(item.buffers, contents)]
  for again, original in zip(buffers[1:], item.buffers[1:]):
    again.keep_undefined(original.undefined)
  python.interpret(compile_ast(item.ast, python.caps))(*(b.handle for b in buffers))
  return buffers[0].numpy(), buffers[0].undefined


def _against_graph(kernel: np.ndarray, kernel_undefined: np.ndarray | None, graph: np.ndarray,
                   graph_undefined: np.ndarray | None, bound: np.ndarray) -> tuple[LaneVerdicts, np.ndarray]:
  """The kernel path's lanes against the graph evaluator's, and the lanes it made undefined that the graph defines
  (a rewrite may define an undefined lane, never the reverse)."""
  made = np.zeros(kernel.shape, bool) if kernel_undefined is None else kernel_undefined.copy()
  if graph_undefined is not None:
    made &= ~graph_undefined
  return compare_lanes(kernel, graph, graph_undefined, abs_bound=bound), made


def check_rewrites(item: ScheduleItem, index: int, contents: list[np.ndarray], inside: Callable[[np.ndarray],
                   np.ndarray], graph: np.ndarray, graph_undefined: np.ndarray | None,
                   bound: np.ndarray) -> tuple[str, LaneVerdicts]:
  """The reference's output of this kernel (contents[0], as lowered, rewritten and interpreted) against the graph
  evaluator's: '' if they match, else what differs and which rewrite rule is to blame (blame.py); and the verdict on
  each lane."""
  from refgrad.testing.oracle.blame import blame  # blame imports codegen's rule sets, which only a disagreement needs
  def outcome(out: np.ndarray, undefined: np.ndarray | None) -> tuple[LaneVerdicts, np.ndarray]:
    return _against_graph(inside(out), None if undefined is None else inside(np.asarray(undefined)), graph,
                          graph_undefined, bound)
  verdicts, made = outcome(contents[0], item.buffers[0].undefined)
  result = verdicts.summary()
  if result.ok and not made.any():
    return "", verdicts
  def agrees() -> bool:
    again, undefined = outcome(*_interpret_again(item, contents))
    return again.summary().ok and not undefined.any()
  kernel = inside(contents[0])
  lines = [f"the reference's kernel path disagrees with the graph evaluator in kernel {index} "
           f"({compile_ast(item.ast).name}, output {result.dtype.name}): {result.mismatch_count} of {result.checked} "
           f"checked lanes differ, {int(made.sum())} defined lanes made undefined"]
  lines += [f"  at {flat}: kernel path {lane_text(kernel, flat)}, graph evaluator {lane_text(graph, flat)}"
            for flat in result.mismatches]
  lines.append("every device shares the lowering and the rewrite rules, so no device comparison can see it; "
               "leaving out each rule in turn:")
  return "\n".join(lines + [blame(agrees)]), verdicts


def reference_schedule(fn: Callable[..., Any], *inputs: Any) -> list[ScheduleItem]:
  """The schedule `fn(*inputs)` makes on PYTHON (nothing runs): the items check_against_reference runs in order."""
  outputs = fn(*_as_tensors(inputs))
  outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
  return create_schedule([t.uop for t in outputs])[0]


def check_against_reference(fn: Callable[..., Any], *inputs: Any, device: str, raise_on_mismatch: bool = True,
                            keep_lanes: bool = False, opts: Callable[[UOp], OptList] | None = None,
                            on_item: Callable[[int], None] | None = None,
                            on_case: Callable[[int, StandaloneCase], None] | None = None,
                            schedule: list[ScheduleItem] | None = None) -> ReferenceReport:
  """Run `fn(*tensors)` (one Tensor or a tuple of them) on `device` and on PYTHON and compare every kernel.

  `inputs` are numpy arrays or Python values (made into PYTHON tensors) or PYTHON tensors; `fn` may shard them over
  PYTHON's numbered instances (PYTHON, PYTHON:1, ...): each part's kernels then run on the device's instance of the
  same number, and every copy and all-reduce between parts runs on the device's instances and is compared too
  (exactly, or within the reduction bound for a float sum or product). Raises
  ReferenceMismatch explaining the first differing kernel: indices, both values, ULP distance, the inputs
  and the kernel's source on the device. Returns a ReferenceReport; with `raise_on_mismatch=False` each failed
  kernel carries its explanation instead, and with `keep_lanes=True` every kernel keeps its compared lanes.
  `opts(ast)`, if given, chooses the opt list each kernel runs with on the device (refgrad/codegen/opt.py), instead
  of the device's own heuristic; the reference always runs the kernels as lowered. `on_item(index)`, if given, is
  told each item's index before the device runs it (a fuzz worker keeps it where a crash cannot erase it).
  `on_case(index, case)`, if given, gets each kernel as a StandaloneCase (the reference's inputs and output, the
  lanes judged and their bounds, the program the device runs: oracle/standalone_cases.py) before the device runs it,
  so a kernel whose compile crashes has one too. `schedule`, if given, is reference_schedule(fn, *inputs) made
  already (oracle/prepare.py plans it to compile the kernels ahead) and not run yet."""
  device = Device.canonicalize(device)
  report = ReferenceReport(device)
  declared = declared_differences(device)
  for index, item in enumerate(reference_schedule(fn, *inputs) if schedule is None else schedule):
    if on_item is not None:
      on_item(index)
    run_schedule([item])  # the reference
    contents = [b.numpy() for b in item.buffers]
    if item.is_transfer:
      if (kernel := _check_transfer(item, index, device, contents, keep_lanes)).explanation and raise_on_mismatch:
        raise ReferenceMismatch(kernel.explanation)
      report.kernels.append(kernel)
      continue
    shape, inside = _output_region(item)
    values = dict(item.var_vals)  # a kernel compiled for Variables: its bounds are those of this schedule's values
    ast = concrete_graph(item.ast, values) if values else item.ast
    masks = {i: b.undefined for i, b in enumerate(item.buffers) if i}
    graph, bound, undefined = kernel_error_bounds(ast, dict(enumerate(contents)), masks)
    # what the device is allowed: SPEC.md's bounds, and the differences a graph device declares on top
    allowed = bound if not declared else kernel_error_bounds(ast, dict(enumerate(contents)), masks, declared)[1]
    rewrite_error, rewrites = check_rewrites(item, index, contents, inside, graph, undefined, bound)
    if rewrite_error and raise_on_mismatch:
      raise RewriteMismatch(rewrite_error)
    reference_undefined = item.buffers[0].undefined
    if reference_undefined is not None:
      reference_undefined = inside(np.asarray(reference_undefined))
      undefined = reference_undefined if undefined is None else undefined | reference_undefined
    chosen = device_opts(item, device, opts)
    if on_case is not None:
      if (case := kernel_case(item, device, contents, allowed, undefined, chosen, inside)) is not None:
        on_case(index, case)
    actual, program = _device_run(item, device, contents, chosen)
    if subnormals_flushed():
      raise ReferenceMismatch(
        f"{device} switched this process to flush-to-zero / denormals-are-zero (x86 MXCSR FTZ/DAZ; loading a library "
        "built with -ffast-math does it): docs/SPEC.md requires subnormals, and the reference, which runs in this "
        "process, can no longer be trusted. Build the backend without -ffast-math (or restore the FP mode).")
    actual, expected = inside(actual), inside(contents[0])
    verdicts = compare_lanes(actual, expected, undefined, abs_bound=allowed)
    result = verdicts.summary()
    kernel = KernelResult(program.name, result, program, rewrite_error=rewrite_error)
    if keep_lanes:
      kernel.lanes = Lanes(actual, expected, verdicts, rewrites)
    report.kernels.append(kernel)
    kernel.explanation = rewrite_error
    if not result.ok:
      shown = "".join(f"with {var.arg[0]}={value}: " for var, value in item.var_vals)
      explained = shown + explain(item, index, device, actual, expected, result, inputs, program, shape)
      kernel.explanation = "\n\n".join(text for text in (rewrite_error, explained) if text)
      if raise_on_mismatch:
        raise ReferenceMismatch(kernel.explanation)
  return report
