"""Capture and replay: `TinyJit` runs a function's kernels again without building graphs, scheduling or compiling.

The first call runs the function as it is. The second runs it too, and records every kernel launch and copy it
makes (`realize.run_schedule` appends them to `realize.CAPTURE`), with the buffers each one used. From the third
call on, the jit replays those launches: the buffers of the tensors passed in take the places of the captured
call's inputs, and the function's Python body does not run.

State the function updates between calls (an optimizer's parameters and moments: `Tensor.replace` gives them a
new buffer each step) is found at capture: a tensor that held buffer E before the call and holds buffer N, written
by a captured kernel, after it. A replay then reads the state from where the last call left it and writes it to the
other buffer of the pair (replays alternate, so two buffers per state tensor serve every call), and the tensor is
pointed at the buffer written.

What a replay cannot redo, it refuses at capture: a function that draws random numbers (their key and counter are
copied in from Python on each draw) raises, rather than repeat one draw forever. Values the function reads from
Python (a `Tensor(numpy_array)` made inside it, a float turned into a constant) are those of the captured call.
The tensors a replay returns are the captured call's: a later replay writes them again, as in tinygrad.
"""
from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from refgrad import realize
from refgrad.device import Buffer
from refgrad.frontend import random as rng_state
from refgrad.multi import multi
from refgrad.schedule import buffer_node, realized_buffer
from refgrad.sizes import max_shape, rebind, unbind_arg
from refgrad.tensor import Tensor
from refgrad.uop import Ops, UOp, prod

ReturnType = TypeVar("ReturnType")


class JitError(ValueError):
  """A call a capture cannot replay: other input shapes, dtypes or devices, another number of input tensors, or one
  tensor passed where the capture had two (or the other way round)."""


def tensors_in(value: Any) -> list[Tensor]:
  """The tensors in a call's arguments or result: itself, or inside tuples, lists and dict values."""
  if isinstance(value, Tensor):
    return [value]
  if isinstance(value, (tuple, list)):
    return [t for v in value for t in tensors_in(v)]
  if isinstance(value, dict):
    return [t for v in value.values() for t in tensors_in(v)]
  return []


def parts_of(node: UOp) -> tuple[UOp, ...]:
  """A tensor's node per device: the parts of a tensor over several devices (refgrad/multi.py), or itself."""
  return node.src if node.op is Ops.MULTI else (node,)


def whole_buffer(node: UOp) -> Buffer | None:
  """The buffer a realized node (one device's) reads all of, or None."""
  buf = realized_buffer(node)
  return buf if buf is not None and buf.size == prod(max_shape(node.shape)) else None


def input_buffers(t: Tensor) -> list[Buffer]:
  """The buffers holding a realized input, one per device, each all of its part: an input that is a view into a
  larger buffer is made contiguous first (the tensor keeps its values and gets buffers of its own)."""
  if any(whole_buffer(p) is None for p in parts_of(t.uop)):
    t.replace(t.contiguous()).realize()
  return [whole_buffer(p) for p in parts_of(t.uop)]


def held_buffers() -> dict[tuple[int, int], tuple[weakref.ref, int, Buffer]]:
  """Every live tensor's realized buffers, by (id, part): the state a captured call may replace."""
  held = {}
  for obj in gc.get_objects():  # type(), not isinstance: that would ask objects for a __class__ (torch's warn)
    if issubclass(type(obj), Tensor):
      for part, node in enumerate(parts_of(obj.uop)):
        if (buf := whole_buffer(node)) is not None:
          held[(id(obj), part)] = (weakref.ref(obj), part, buf)
  return held


@dataclass
class Launch:
  runner: Callable[..., None] | None  # None: a transfer between devices, realize.run_transfer(ast, buffers)
  buffers: tuple[Buffer, ...]
  ast: UOp
  var_vals: tuple[tuple[UOp, int], ...] = ()  # a kernel compiled for Variables: their values at capture


@dataclass
class StatePair:
  tensor: weakref.ref
  part: int       # which of the tensor's parts (0 on one device)
  before: Buffer  # what the tensor held when the capture began: read by the captured kernels
  after: Buffer   # what a captured kernel wrote into it

  def point(self, t: Tensor, buf: Buffer) -> None:
    """Make the tensor (its part) read buf."""
    if t.uop.op is not Ops.MULTI:
      t.uop = buffer_node(buf, t.shape)
      return
    parts = list(t.uop.src)
    parts[self.part] = buffer_node(buf, parts[self.part].shape)
    t.uop = multi(parts, *t.uop.arg)


class CapturedCall:
  """The launches of one call, ready to run again with other inputs."""

  def __init__(self, launches: list[Launch], inputs: list[Buffer], signature: tuple, state: list[StatePair],
               result: Any):
    self.launches, self.inputs, self.signature, self.state, self.result = launches, inputs, signature, state, result
    self.replays = 0
    # per parity of the replay count, each launch's buffers: on even replays each state pair's two buffers trade
    # places (read where the last call wrote, write the other one); where the captured inputs sit, to put new ones
    swap = {}
    for pair in state:
      swap[pair.before], swap[pair.after] = pair.after, pair.before
    self.buffers = ([[swap.get(b, b) for b in launch.buffers] for launch in launches],
                    [list(launch.buffers) for launch in launches])
    position = {b: i for i, b in enumerate(inputs)}
    self.input_slots = [[(slot, position[b]) for slot, b in enumerate(launch.buffers) if b in position]
                        for launch in launches]

  def buffers_of(self, number: int, new_inputs: list[Buffer]) -> list[Buffer]:
    """Launch `number`'s buffers this replay."""
    buffers = self.buffers[self.replays % 2][number]
    if not self.input_slots[number]:
      return buffers
    buffers = list(buffers)
    for slot, i in self.input_slots[number]:
      buffers[slot] = new_inputs[i]
    return buffers

  def replay(self, inputs: list[Buffer], signature: tuple, values: dict[UOp, int]) -> Any:
    if signature != self.signature:
      raise JitError(f"TinyJit: this call's inputs {describe(signature)} differ from the captured call's "
                     f"{describe(self.signature)}; call jit.reset() to capture again")
    for number, launch in enumerate(self.launches):
      buffers = self.buffers_of(number, inputs)
      if launch.var_vals:  # the inputs' Variables take this call's values; others keep the captured ones
        buffers[-1].copyin(np.array([values.get(var, value) for var, value in launch.var_vals], np.int64))
      if launch.runner is None:
        realize.run_transfer(launch.ast, buffers)
      else:
        launch.runner(*(b.handle for b in buffers))
    written = "before" if self.replays % 2 == 0 else "after"
    for pair in self.state:
      if (t := pair.tensor()) is not None:
        pair.point(t, getattr(pair, written))
    if values:  # results of symbolic shape: the same buffers, viewed with this call's values
      for t in tensors_in(self.result):
        t.uop = buffer_node(realized_buffer(t.uop), rebind(t.shape, values))
    self.replays += 1
    return self.result


def call_signature(tensors: list[Tensor], buffers: list[list[Buffer]]) -> tuple[tuple, dict[UOp, int]]:
  """What a replay must match: each input's shape (with its Variables, not their values), dtype, device(s) and
  layout over them, and which inputs are one tensor (a capture of f(x, x) reads one buffer for both); and the
  values of the Variables."""
  first: dict[Buffer, int] = {}
  values: dict[UOp, int] = {}
  signature = tuple((unbind_arg(t.shape, values), t.dtype, t.device, t.uop.arg if t.uop.op is Ops.MULTI else None,
                     first.setdefault(b[0], i)) for i, (t, b) in enumerate(zip(tensors, buffers)))
  return signature, values


def describe(signature: tuple) -> str:
  parts = [f"{list(shape)} {dtype.name} on {device}" + (f" split {layout}" if layout else "") +
           (f" (the same tensor as input {same})" if same != i else "")
           for i, (shape, dtype, device, layout, same) in enumerate(signature)]
  return "(" + ", ".join(parts) + ")"


class TinyJit(Generic[ReturnType]):
  """Decorate a function whose tensors are its arguments and its result: its later calls replay the kernels of its
  second call (see the module's docstring). `jit.reset()` forgets the capture.

  >>> from refgrad import Tensor, TinyJit
  >>> @TinyJit
  ... def double_plus_one(x): return x * 2 + 1
  >>> [double_plus_one(Tensor([i, i + 1.0])).tolist() for i in range(4)][-1]
  [7.0, 9.0]
  """

  def __init__(self, fn: Callable[..., ReturnType]):
    self.fn = fn
    self.calls = 0
    self.captured: CapturedCall | None = None
    functools.update_wrapper(self, fn)

  def reset(self) -> None:
    self.calls, self.captured = 0, None

  def __get__(self, obj: Any, owner: Any = None) -> Callable[..., ReturnType]:
    return self if obj is None else functools.partial(self.__call__, obj)  # a decorated method binds its instance

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    tensors = tensors_in(list(args) + list(kwargs.values()))
    if lazy := [t for t in tensors if any(realized_buffer(p) is None for p in parts_of(t.uop))]:
      Tensor.realize(*lazy)
    per_tensor = [input_buffers(t) for t in tensors]
    signature, values = call_signature(tensors, per_tensor)
    inputs = [b for bufs in per_tensor for b in bufs]
    if self.captured is not None:
      return self.captured.replay(inputs, signature, values)
    self.calls += 1
    if self.calls == 1:
      return self._run(args, kwargs)
    return self._capture(args, kwargs, inputs, signature)

  def _run(self, args: tuple, kwargs: dict) -> ReturnType:
    result = self.fn(*args, **kwargs)
    if outputs := tensors_in(result):
      Tensor.realize(*outputs)
    return result

  def _capture(self, args: tuple, kwargs: dict, inputs: list[Buffer], signature: tuple) -> ReturnType:
    if realize.CAPTURE is not None:
      raise RuntimeError("TinyJit: a jitted function called another while it was being captured")
    before, draws = held_buffers(), rng_state.STATE.counter
    realize.CAPTURE = []
    try:
      result = self._run(args, kwargs)
      launches = [Launch(runner, item.buffers, item.ast, item.var_vals) for runner, item in realize.CAPTURE]
    finally:
      realize.CAPTURE = None
    if rng_state.STATE.counter != draws:
      raise NotImplementedError("TinyJit: the function draws random numbers (Tensor.rand and its kin), whose key "
                                "and counter are copied in from Python; a replay would repeat this call's draws")
    written = {b for launch in launches for b in launch.buffers[:1]}
    state = [StatePair(ref, part, old, new) for ref, part, old in before.values()
             if (t := ref()) is not None and part < len(parts_of(t.uop)) and
             (new := whole_buffer(parts_of(t.uop)[part])) is not old and new in written]
    self.captured = CapturedCall(launches, inputs, signature, state, result)
    return result
