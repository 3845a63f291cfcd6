"""Capture and replay: `TinyJit` runs a function's kernels again without building graphs, scheduling or compiling.

The first call runs the function as it is. The second runs it too, and records every kernel launch and copy it
makes (`execute.run_schedule` appends them to `execute.CAPTURE`), with the buffers each one used. From the third
call on, the jit replays those launches and the function's Python body does not run. What each captured buffer
stands for decides which buffer a replay uses in its place:

- an **argument's** buffer: the buffer of the tensor passed in that place on this call (arguments are matched by
  parameter name, so keyword order does not matter);
- a buffer **another live tensor** held when the capture began (weights, an optimizer's state, a learning rate): what
  that tensor holds now, so state carries from call to call and a value assigned between calls is read (a live
  tensor still lazy then, a constant or an update the last call left unrealized, is realized first, to be such state);
- the buffer a captured kernel wrote into a tensor that existed before the call (an argument updated in place,
  `x += 1` or `t[0:1] = a`; a parameter an optimizer replaced): a new buffer each replay, which the tensor of this
  call is then pointed at; earlier values stay with whoever holds them;
- a random draw's key and counter: the next counters of the stream, copied in before the launches, so replays draw
  the numbers the plain function would have drawn;
- anything else (intermediates, results): the captured buffer, written again;
- a lazy tensor the call made and kept (`p.grad`): no kernel; after each replay, its graph on that replay's buffers,
  made when first read (KeptLazy, Pending).

State a replay cannot follow is refused (JitError), not read stale: a buffer the captured kernels read whose every
holder the call dropped (`self.total = self.total + x`; backward() adding onto the last call's `.grad`), at the
capture; and one whose every holder is gone at a replay (a `.grad` made anew between calls), then.

Values recorded on graph nodes (schedule._REALIZED, a memo of what earlier realizes computed) are forgotten at the
capture's start unless a live tensor holds the node, so every kernel the call needs is captured, not read as it was
on an earlier call; and at its end where a replay writes their buffers again, so nothing computed later reads another
call's values (a tensor of the captured call holding such a node holds the buffer instead, written again).

Values the function reads from Python (a `Tensor(numpy_array)` made inside it, a float turned into a constant, a
non-tensor argument) are those of the captured call; a number or string argument that differs from the captured
call's gets a JitWarning. The tensors a replay returns are the captured call's: a later
replay writes them again, as in tinygrad (`.clone()` or `.numpy()` keeps a result).

A captured jit pickles without its function, as tinygrad's does: with its launches (loaded again when unpickled),
its buffers' contents (the state as it is when pickled) and its results; the unpickled jit replays on its own copy
of the state.

Threads (docs/architecture.md says what is not covered): each jitted function has a lock, held through a call, so
calls from several threads take turns and state such as weights moves one call at a time; calls before the capture
also hold CAPTURE_LOCK, so one capture runs at a time in the process. Each thread's launches and draws go to its own
capture (`ThreadCapture`), so another thread's plain realizes or jitted calls are never recorded. The result tensors
are per thread: the capturing thread gets the captured ones, each other thread its own tensors and buffers at its
first replay, written again by its own later replays only; a result is this call's until the same thread calls the
function again.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from refgrad import execute, tensor
from refgrad.buffer import Buffer, PickledValueError
from refgrad.device import write_variables
from refgrad.frontend import random as rng_state
from refgrad.multi import multi
from refgrad.registry import Device
from refgrad.schedule import buffer_node, computed_buffer, forget_realized, realized_buffer, value_buffers
from refgrad.symbolic_shapes import RECORDING, holds_size, max_shape, rebind, unbind_arg
from refgrad.tensor import Tensor
from refgrad.uop import GroupOp, Ops, UOp, evaluate, prod

ReturnType = TypeVar("ReturnType")


class ThreadCapture:
  """What `execute.CAPTURE` and `random.DRAWS` hold once a capture has begun: a stand-in for their list that appends
  to the calling thread's capture and drops what a thread that is not capturing launches or draws. It stays in
  place after the capture, not set back to None: a thread that has just read `CAPTURE is not None` must not find
  it gone when it appends."""

  def __init__(self) -> None:
    self.local = threading.local()

  @property
  def records(self) -> list | None:
    """This thread's capture (None: it is not capturing)."""
    return getattr(self.local, "records", None)

  def append(self, entry: Any) -> None:
    if (records := self.records) is not None:
      records.append(entry)

  @contextmanager
  def recording(self) -> Iterator[list]:
    self.local.records = records = []
    try:
      yield records
    finally:
      self.local.records = None


LAUNCHES, DRAWS = ThreadCapture(), ThreadCapture()
# One capture at a time: a capture takes the live tensors that change while it runs for the call's updates (and
# realizes those left lazy inside it), so two at once would take each other's. Every call before a function's capture
# holds it (its first run too), so that locks are always taken in one order; reentrant, as a function's first run may
# call another jitted function.
CAPTURE_LOCK = threading.RLock()


def capturing() -> bool:
  """Whether this thread is capturing a call."""
  return LAUNCHES.records is not None


class JitWarning(UserWarning):
  """A replay computes with a value of the captured call, not this call's: a Python number or string argument that
  changed (`step(x, lr=0.5)` after capturing with lr=0.1). `warnings.simplefilter("error", JitWarning)` makes it an
  error."""


class JitError(ValueError, AssertionError):
  """A call a capture cannot replay (other input shapes, dtypes or devices, another number of input tensors, one
  tensor passed where the capture had two or the other way round), or a function with nothing to replay. Also an
  AssertionError, the type tinygrad raises."""


def found_in(value: Any, wanted: Callable[[Any], bool]) -> list[Any]:
  """The items of a call's arguments or result that are `wanted`: the value itself, or inside tuples, lists and dict
  values."""
  if wanted(value):
    return [value]
  if isinstance(value, (tuple, list)):
    return [found for v in value for found in found_in(v, wanted)]
  if isinstance(value, dict):
    return [found for v in value.values() for found in found_in(v, wanted)]
  return []


def tensors_in(value: Any) -> list[Tensor]:
  """The tensors in a call's arguments or result."""
  return found_in(value, lambda v: isinstance(v, Tensor))


def variables_passed(value: Any) -> list[UOp]:
  """The bound Variables among a call's arguments (`f(x, v)`): a replay runs with their values."""
  return found_in(value, lambda v: isinstance(v, UOp) and v.op is Ops.BIND)


def python_values(value: Any) -> list[Any]:
  """The Python numbers and strings among a call's arguments: the captured kernels hold their values as constants."""
  return found_in(value, lambda v: isinstance(v, (numbers.Number, str, bytes)) and not isinstance(v, (Tensor, UOp)))


def same_value(a: Any, b: Any) -> bool:
  return type(a) is type(b) and (a == b or (a != a and b != b))  # NaN is the same NaN


def parts_of(node: UOp) -> tuple[UOp, ...]:
  """A tensor's node per device: the parts of a tensor over several devices (refgrad/multi.py), or itself."""
  return node.src if node.op is Ops.MULTI else (node,)


def whole_buffer(node: UOp) -> Buffer | None:
  """The buffer a realized node (one device's) reads all of, or None."""
  buf = realized_buffer(node)
  return buf if buf is not None and buf.size == prod(max_shape(node.shape)) else None


def input_buffers(t: Tensor) -> list[Buffer]:
  """The buffers holding a tensor, one per device, each all of its part: a lazy tensor is realized, and one that
  is a view into a larger buffer is made contiguous (the tensor keeps its values and gets buffers of its own)."""
  if any(whole_buffer(p) is None for p in parts_of(t.uop)):
    t.replace(t.contiguous()).realize()
  return [whole_buffer(p) for p in parts_of(t.uop)]


def point(t: Tensor, part: int, buf: Buffer, shape: tuple | None = None) -> None:
  """Make the tensor's part (0 on one device) read buf, viewed as `shape` (default: the part's shape)."""
  if t.uop.op is not Ops.MULTI:
    t.uop = buffer_node(buf, t.shape if shape is None else shape)
    return
  parts = list(t.uop.src)
  parts[part] = buffer_node(buf, parts[part].shape if shape is None else shape)
  t.uop = multi(parts, *t.uop.arg)


def gone() -> None:
  """What a pickled jit holds in place of a weak reference to a tensor: the tensors do not travel with the jit."""
  return None


@dataclass(eq=False)  # compared by identity: a field holds a weakref to a Tensor, whose == is elementwise
class Holding:
  """A tensor's part and the node (a whole buffer) it had when a capture began."""
  tensor: weakref.ref | Callable[[], None]
  part: int
  node: UOp

  def __getstate__(self) -> dict:
    return {**self.__dict__, "tensor": gone}


def live_tensors() -> list[Tensor]:
  """Every live tensor (made whole: a tensor is in tensor.LIVE once its fields are set)."""
  return [t for ref in list(tensor.LIVE) if (t := ref()) is not None]


# ops that compute nothing: a graph of these only views buffers that tensors hold
PASSIVE = GroupOp.Movement | {Ops.BUFFER, Ops.DEFINE_VAR, Ops.BIND, Ops.DETACH, Ops.MULTI}


def realize_lazy_state(live: list[Tensor], skip: set[int]) -> None:
  """Realize the live tensors (but those in `skip`, by id) whose values are still to be computed: an update the
  function's last call left lazy (`w.assign(w * 0.5)` and no realize), a lazy `w = Tensor.ones(3) * 2` or a
  constant `Tensor.zeros(3)` it reads. Their buffers are then state the replays read from the tensors as they are
  at each call; left lazy, the captured kernels would compute (or fold) their values of the capture's time again on
  every replay, whatever was assigned to them since. Views, and reshapes of buffers other tensors hold, are left as
  they are. A tensor whose realize fails is left lazy: it raises when its owner reads it, not in this capture."""
  lazy = [t for t in live if id(t) not in skip and (t._view is None or t._view.base() is None) and computes(t.uop)]
  try:
    Tensor.realize(*lazy)
  except Exception:  # one tensor's error is its owner's to see; the others are realized one by one
    for t in lazy:
      with contextlib.suppress(Exception):
        t.realize()


def computes(node: UOp) -> bool:
  """Whether a tensor's node is lazy and its graph computes something (an ALU op, a reduce, a copy, a constant)."""
  return (any(whole_buffer(part) is None for part in parts_of(node)) and
          any(u.op not in PASSIVE for u in node.toposort))


def live_holdings(live: list[Tensor], skip: set[int]) -> dict[Buffer, list[Holding]]:
  """Every live tensor's whole buffers but those of the tensors in `skip` (by id), by buffer: the state a captured
  call may read and replace."""
  held: dict[Buffer, list[Holding]] = {}
  for t in live:
    if id(t) not in skip:
      for part, node in enumerate(parts_of(t.uop)):
        if (buf := whole_buffer(node)) is not None:
          held.setdefault(buf, []).append(Holding(weakref.ref(t), part, node))
  return held


def changed_part(holding: Holding) -> UOp | None:
  """The tensor's part node if the tensor is alive and the part is no longer the node it had, else None."""
  t = holding.tensor()
  if t is None or holding.part >= len(parts_of(t.uop)):
    return None
  node = parts_of(t.uop)[holding.part]
  return None if node is holding.node else node


@dataclass
class Launch:
  """One captured kernel launch or transfer; `prg` and `bufs` are tinygrad's names for its runner and buffers."""
  runner: Callable[..., None] | None  # None: a transfer between devices, execute.run_transfer(ast, buffers)
  buffers: tuple[Buffer, ...]
  ast: UOp
  var_vals: tuple[tuple[UOp, int], ...] = ()  # a kernel compiled for Variables: their values at capture

  @property
  def prg(self) -> Callable[..., None] | None:
    return self.runner

  def __getstate__(self) -> dict:
    """Pickled without its runner (a loaded program): unpickling loads the kernel again."""
    return {**self.__dict__, "runner": self.runner is not None}

  def __setstate__(self, state: dict) -> None:
    self.__dict__.update(state)
    check_launch_buffers(self.ast, self.buffers)
    if self.runner:
      device = Device[self.buffers[0].device]
      self.runner = device.get_runner(device.program(self.ast))
    else:
      self.runner = None

  @property
  def bufs(self) -> tuple[Buffer, ...]:
    return self.buffers


def check_launch_buffers(ast: Any, buffers: Any) -> None:
  """Refuse an unpickled launch whose buffers are not those its kernel was compiled for (a corrupt or crafted pickle):
  one per PARAM, of its size and dtype, on one device; a transfer's of one size and dtype. A compiled kernel indexes
  its buffers by the sizes in its graph, so it would read or write past the end of a shorter one."""
  if not isinstance(ast, UOp) or not isinstance(buffers, tuple) or not all(isinstance(b, Buffer) for b in buffers):
    raise PickledValueError(f"unpickling a TinyJit: a launch holds {type(ast).__name__} and {type(buffers).__name__}, "
                            f"not a kernel's graph and a tuple of Buffers")
  got = [(b.size, b.dtype) for b in buffers]
  if ast.op is Ops.SINK:
    params = sorted((u.arg[0], u.arg[1], u.dtype) for u in ast.toposort if u.op is Ops.PARAM)
    wanted = [(size, dtype) for _, size, dtype in params]
    agree = got == wanted and len({b.device for b in buffers}) == 1
  else:
    wanted = got[:1] * len(got)
    agree = bool(got) and got == wanted
  if not agree:
    shown = ", ".join(f"{size} {dtype.name}" for size, dtype in wanted)
    raise PickledValueError(f"unpickling a TinyJit: a launch's buffers {buffers} are not its kernel's ({shown}, on "
                            f"one device)")


@dataclass
class Read:
  """A captured buffer that other live tensors held: a replay reads what those tensors hold now."""
  captured: Buffer
  holders: list[Holding]  # each holder's node as last seen
  current: Buffer

  def refresh(self) -> Buffer:
    """The buffer to read this replay: a holder whose node changed since last seen (the jit pointed it at a new
    buffer, or the user assigned it) gives its buffer, realized if it is lazy."""
    for holding in self.holders:
      if changed_part(holding) is None:
        continue
      t = holding.tensor()
      buf = input_buffers(t)[holding.part]
      if (buf.size, buf.dtype, buf.device) != (self.captured.size, self.captured.dtype, self.captured.device):
        raise JitError(f"TinyJit: a tensor the captured kernels read now holds {buf.size} {buf.dtype.name} on "
                       f"{buf.device}, not {self.captured.size} {self.captured.dtype.name} on "
                       f"{self.captured.device}; call jit.reset() to capture again")
      holding.node, self.current = parts_of(t.uop)[holding.part], buf
    return self.current


@dataclass
class Write:
  """A tensor that existed before the call and holds a new buffer after it: an argument (its position among the
  call's tensors) or another live tensor, and then the Read of what it held, if the kernels read that."""
  target: int | weakref.ref | Callable[[], None]
  part: int
  buffer: Buffer  # what it held after the capture
  read: tuple[Read, Holding] | None = None

  def __getstate__(self) -> dict:
    return {**self.__dict__, "target": self.target if isinstance(self.target, int) else gone}

  def land(self, t: Tensor | None, buf: Buffer) -> None:
    """Point the tensor at what this replay wrote; the next replay reads it (told directly: no need to look). With
    the tensor gone (or not pickled with the jit) the next replay still reads it: the state carries on."""
    if t is not None:
      point(t, self.part, buf)
    if self.read is not None:
      read, holding = self.read
      read.current = buf
      if t is not None:
        holding.node = parts_of(t.uop)[self.part]


@dataclass
class SizeChecks:
  """The conditions on symbolic sizes the frontend checked during the capture (a shrink that fits, a reshape that
  keeps the count), with their Variables unbound: each replay checks them for its own values, as a plain call
  would, instead of running kernels on shapes that do not fit."""
  conditions: list[UOp]
  captured: dict[UOp, int]  # the Variables' values at capture: those the replay's inputs do not give

  @staticmethod
  def of(conditions: list[UOp], captured: dict[UOp, int]) -> SizeChecks:
    found: dict[UOp, int] = {}
    unbound = [unbind_arg(c, found) for c in dict.fromkeys(conditions)]
    return SizeChecks(unbound, found | captured)

  def check(self, values: dict[UOp, int]) -> None:
    given = self.captured | values
    for condition in self.conditions:
      if not evaluate(condition, given):
        shown = ", ".join(f"{var.arg[0]}={value}" for var, value in sorted(values.items(), key=lambda kv: kv[0].arg))
        raise JitError(f"TinyJit: for this call's values ({shown}) the shapes do not fit: {condition!r} held at "
                       f"capture and does not now (a plain call would refuse the same shapes)")


@dataclass
class ThreadResults:
  """One thread's result tensors of a captured call: each result tensor that is not an argument (its id) -> this
  thread's tensor, and the buffers the launches write for them -> this thread's buffers."""
  tensors: dict[int, Tensor] = field(default_factory=dict)
  buffers: dict[Buffer, Buffer] = field(default_factory=dict)


@dataclass
class Draw:
  """A random draw: the buffer holding its key and counter offset, and how many counters it takes."""
  buffers: list[Buffer]
  count: int


class KeptLazy:
  """Tensors the captured call made and kept, still lazy (the `.grad` of a jitted step: the step realizes the
  updates, not the gradients). No replay launches anything for them, so each replay gives each a Pending value:
  its graph made again on that replay's buffers (arguments, the state as the replay found it, its new buffers) when
  it is first read, so it reads as the plain call's tensor would, at no cost unless read. (Realizing them inside the
  capture instead costs every replay: bench/jit.py's CNN step 4.2 -> 8.1 ms; rebuilding every graph after each
  replay, 0.9 -> 2.5 ms for its MLP step.)"""

  def __init__(self, kept: list[tuple[weakref.ref, UOp]]):
    self.kept = kept  # each tensor, and its graph as the capture left it
    self.leaves = list({u for _, node in kept for u in node.toposort if u.op is Ops.BUFFER})

  @staticmethod
  def of(existing: set[int], held: dict[Buffer, list[Holding]]) -> KeptLazy | None:
    """The live tensors not in `existing` (ids of those that lived before the call) still lazy, or None. One that
    reads state the call dropped is refused, as the kernels' reads are (refuse_dropped_reads)."""
    kept = [(weakref.ref(t), t.uop) for t in live_tensors()
            if id(t) not in existing and (t._view is None or t._view.base() is None) and computes(t.uop)]
    if not kept:
      return None
    lazy = KeptLazy(kept)
    refuse_dropped_reads([Read(u.arg, held[u.arg], u.arg) for u in lazy.leaves if u.arg in held])
    return lazy

  def repoint(self, mapping: dict[Buffer, Buffer]) -> None:
    """Each kept tensor is this replay's from now on (as a result is), whatever it held since."""
    swap = {u: UOp(Ops.BUFFER, u.dtype, (), mapping[u.arg]) for u in self.leaves if u.arg in mapping}
    built: dict[UOp, UOp] = {}  # shared by the tensors of one replay: gradients share most of a backward pass
    for ref, node in self.kept:
      if (t := ref()) is not None:
        t._view = Pending(node, swap, built)


class Pending:
  """Stands in a tensor's view link (Tensor.uop asks a link whose `seen` is not the clock's for the node, as a view's
  node is made again when its base changed): the tensor's node, made on first read, after which the tensor is a base
  again. Its base is gone, so every other user of view links treats the tensor as a base."""
  __slots__ = ("node", "swap", "built")
  seen, steps = -1, ()

  def __init__(self, node: UOp, swap: dict[UOp, UOp], built: dict[UOp, UOp]):
    self.node, self.swap, self.built = node, swap, built

  @staticmethod
  def base() -> None:
    return None

  def sync(self, t: Tensor) -> UOp:
    for node in self.node.toposort:
      if node not in self.built:
        src = tuple(self.built[x] for x in node.src)
        self.built[node] = self.swap.get(node) or (node if src == node.src else node.replace(src=src))
    t._view, t._uop = None, self.built[self.node]
    return t._uop


class CapturedCall:
  """The launches of one call, ready to run again with other inputs."""

  kept: KeptLazy | None = None  # lazy tensors the call made and kept (set after the capture; not pickled)
  python_values: list[Any] | None = None  # the call's number and string arguments (set after the capture)
  warned = False  # once a replay found one changed: JitWarning once per capture
  instance: weakref.ref | None = None  # a decorated method's instance the capture ran on (not pickled)

  def __init__(self, launches: list[Launch], inputs: list[Buffer], signature: tuple, reads: list[Read],
               writes: list[Write], draws: list[Draw], result: Any, arguments: list[Tensor],
               size_checks: SizeChecks):
    self.launches, self.inputs, self.signature, self.result = launches, inputs, signature, result
    self.reads, self.writes, self.draws = reads, writes, draws
    self.replays, self.size_checks = 0, size_checks
    written = {launch.buffers[0] for launch in launches}
    self.fresh = list(dict.fromkeys(w.buffer for w in writes if w.buffer in written))
    position = {id(t): i for i, t in reversed(list(enumerate(arguments)))}
    returned = tensors_in(result)
    # arguments returned (by id and position: a replay returns this call's tensor there), and the other results
    self.returned_arguments = [(id(t), position[id(t)]) for t in returned if id(t) in position]
    self.results = [(t, part, realized_buffer(node)) for t in returned if id(t) not in position
                    for part, node in enumerate(parts_of(t.uop))]
    # the result buffers every replay writes again (not those pruned, nor those mapped anyway): one set per thread
    mapped = set(inputs) | {read.captured for read in reads} | set(self.fresh)
    self.rewritten = list(dict.fromkeys(b for _, _, b in self.results if b in written and b not in mapped))
    self.local = threading.local()
    self.local.own = ThreadResults()  # the capturing thread: the captured tensors and buffers

  def __getstate__(self) -> dict:
    """Pickled with its buffers' contents as they are now (the state its replays read: weights as the last replay
    left them) and its results, without the tensors that held the state (they do not travel with the jit); a
    result that is an argument is kept as a tensor, since ids do not survive pickling."""
    for read in self.reads:  # the state as its tensors hold it now: they do not travel with the jit
      read.refresh()
    by_id = {id(t): t for t in tensors_in(self.result)}
    state = {k: v for k, v in self.__dict__.items() if k not in ("local", "kept", "instance")}
    state["returned_arguments"] = [(by_id[i], position) for i, position in self.returned_arguments]
    return state

  def __setstate__(self, state: dict) -> None:
    self.__dict__.update(state)
    self.returned_arguments = [(id(t), position) for t, position in self.returned_arguments]
    for t, part, buf in self.results:  # unpickled as values: made to read the buffers the replays write
      point(t, part, buf)
    self.local = threading.local()
    self.local.own = ThreadResults()  # the unpickling thread has the pickled result tensors

  def thread_results(self) -> ThreadResults:
    """This thread's result tensors and buffers, made on its first replay."""
    own = getattr(self.local, "own", None)
    if own is None:
      tensors = {id(t): Tensor._from(t.uop) for t, _, _ in self.results}
      own = self.local.own = ThreadResults(tensors, {b: Buffer(b.device, b.size, b.dtype) for b in self.rewritten})
    return own

  def buffer_map(self, inputs: list[Buffer]) -> dict[Buffer, Buffer]:
    """Captured buffer -> this replay's buffer, for every captured buffer that is not used again as it is."""
    carried = {id(write.read[0]) for write in self.writes if write.read is not None}
    for read in self.reads:
      if id(read) not in carried and dropped(read):
        raise JitError(f"TinyJit: a tensor the captured kernels read ({describe_buffer(read.captured)}) is gone: "
                       f"a name that held it was rebound (`w.grad` set again by backward() between calls, a global "
                       f"assigned a new tensor), and a replay cannot find the new one. Pass it as an argument, update "
                       f"it in place (`t.assign(...)`), or call jit.reset() to capture again")
    mapping = {read.captured: read.refresh() for read in self.reads}
    mapping.update(zip(self.inputs, inputs))
    mapping.update((b, Buffer(b.device, b.size, b.dtype)) for b in self.fresh)
    return mapping

  def replay(self, tensors: list[Tensor], inputs: list[Buffer], signature: tuple, values: dict[UOp, int]) -> Any:
    if signature != self.signature:
      raise JitError(f"TinyJit: this call's inputs {describe(signature)} differ from the captured call's "
                     f"{describe(self.signature)}; call jit.reset() to capture again")
    self.size_checks.check(values)
    own = self.thread_results()
    mapping = self.buffer_map(inputs) | own.buffers
    for draw in self.draws:
      words = rng_state.draw_parameters(draw.count)
      for buf in draw.buffers:
        buf.copyin(words)
    for launch in self.launches:
      buffers = [mapping.get(b, b) for b in launch.buffers]
      if launch.var_vals:  # the inputs' Variables take this call's values; others keep the captured ones
        write_variables(buffers, [(var, values.get(var, value)) for var, value in launch.var_vals])
      if launch.runner is None:
        execute.run_transfer(launch.ast, buffers)
      else:
        launch.runner(*(b.handle for b in buffers))
    for write in self.writes:
      t = tensors[write.target] if isinstance(write.target, int) else write.target()
      write.land(t, mapping.get(write.buffer, write.buffer))
    if self.kept is not None:
      self.kept.repoint(mapping)
    self.replays += 1
    return self._result(tensors, mapping, values, own)

  def _result(self, tensors: list[Tensor], mapping: dict[Buffer, Buffer], values: dict[UOp, int],
              own: ThreadResults) -> Any:
    """The captured result, its tensors (this thread's) reading this replay's buffers; an argument returned is this
    call's one."""
    for captured, part, buf in self.results:
      t = own.tensors.get(id(captured), captured)
      if buf in mapping or values:  # symbolic results: the same buffers, viewed with this call's values
        point(t, part, mapping.get(buf, buf), rebind(parts_of(t.uop)[part].shape, values) if values else None)
    swap = own.tensors | {old: tensors[i] for old, i in self.returned_arguments}
    return substitute(self.result, swap) if swap else self.result


def substitute(value: Any, swap: dict[int, Tensor]) -> Any:
  """value with the tensors whose ids are in swap replaced, inside tuples, lists and dicts too."""
  if isinstance(value, Tensor):
    return swap.get(id(value), value)
  if isinstance(value, (tuple, list)):
    return type(value)(substitute(v, swap) for v in value)
  if isinstance(value, dict):
    return {k: substitute(v, swap) for k, v in value.items()}
  return value


def argument_tensor(t: Tensor) -> tuple[Tensor, tuple]:
  """The tensor an argument stands for, and the view steps from it: a view of another tensor (`cache[:, i:j]`)
  stands for the tensor it views, so the captured kernels read that tensor's buffer and a write through the view
  lands in the tensor viewed on each call (refgrad/frontend/views.py).

  A view that reshapes its base to a symbolic shape (`a.reshape(3, v)`) stands for itself: its base's shape changes
  with the values (a is (3, 2) on one call and (3, 5) on the next), so the argument is copied into a buffer laid out
  for the largest sizes, the same layout on every call; a function may not write into it."""
  link = t._view
  base = link.base() if link is not None else None
  return (t, ()) if base is None or has_symbolic_steps(t) else (base, link.steps)


def has_symbolic_steps(t: Tensor) -> bool:
  """Whether t is a view that reshapes its base to a symbolic shape (`a.reshape(3, v)`): the base's size then
  depends on the values (a shrink at a symbolic offset, `cache[:, v:v+1]`, leaves its base's shape alone)."""
  link = t._view
  return link is not None and link.base() is not None and any(op is Ops.RESHAPE and holds_size(arg)
                                                              for op, arg in link.steps)


def refuse_symbolic_view_writes(before: list[tuple[Tensor, UOp]]) -> None:
  """A write into an argument that is a view reshaping its base to a symbolic shape would land in the copy the jit
  reads, not in the tensor viewed: refused rather than lost."""
  for t, node in before:
    if t.uop is not node:
      raise JitError(f"TinyJit: the function wrote into an argument that reshapes another tensor to the symbolic shape "
                     f"{t.shape}; pass that tensor, or a contiguous() copy, instead")


def call_signature(tensors: list[Tensor], buffers: list[list[Buffer]],
                   views: tuple[tuple, ...]) -> tuple[tuple, dict[UOp, int]]:
  """What a replay must match: each input's shape (with its Variables, not their values), dtype, device(s) and
  layout over them, the view steps an argument took from it, and which inputs are one tensor (a capture of f(x, x)
  reads one buffer for both); and the values of the Variables."""
  first: dict[Buffer, int] = {}
  values: dict[UOp, int] = {}
  signature = tuple((unbind_arg(t.shape, values), t.dtype, t.device, t.uop.arg if t.uop.op is Ops.MULTI else None,
                     first.setdefault(b[0], i), tuple((op, _unbound(arg, values)) for op, arg in steps))
                    for i, (t, b, steps) in enumerate(zip(tensors, buffers, views)))
  return signature, values


def _unbound(arg: Any, values: dict[UOp, int]) -> Any:
  """A view step's arg with its bound Variables unbound (a BasicPlan of plain ints is left as it is)."""
  return unbind_arg(arg, values) if isinstance(arg, tuple) else arg


def describe(signature: tuple) -> str:
  parts = [f"Variable {entry!r}" if isinstance(entry, UOp) else _input_text(i, *entry)
           for i, entry in enumerate(signature)]
  return "(" + ", ".join(parts) + ")"


def _input_text(i: int, shape: tuple, dtype: Any, device: Any, layout: Any, same: int, steps: tuple) -> str:
  return (f"{list(shape)} {dtype.name} on {device}" + (f" split {layout}" if layout else "") +
          (f" (the same tensor as input {same})" if same != i else "") +
          (f" viewed by {' '.join(_step_text(op, arg) for op, arg in steps)}" if steps else ""))


def _step_text(op: Any, arg: Any) -> str:
  name = op.name.lower() if isinstance(op, Ops) else str(op)
  return f"{name}{list(getattr(arg, 'bounds', arg))}" if isinstance(arg, tuple) or hasattr(arg, "bounds") else name


def parameters_of(fn: Callable[..., Any]) -> inspect.Signature | None:
  try:
    return inspect.signature(fn)
  except (TypeError, ValueError):  # some builtins and C functions have none
    return None


def in_parameter_order(parameters: inspect.Signature | None, args: tuple, kwargs: dict) -> list[Any]:
  """A call's arguments in the order of the function's parameters, whatever order its keywords came in; keywords
  the parameters do not name (or with no signature to read) in the order of their names."""
  if parameters is not None:
    try:
      bound = parameters.bind(*args, **kwargs)
    except TypeError:  # the call does not fit: the function itself will say so
      pass
    else:
      return [dict(sorted(value.items())) if parameters.parameters[name].kind is inspect.Parameter.VAR_KEYWORD
              else value for name, value in bound.arguments.items()]
  return list(args) + [kwargs[name] for name in sorted(kwargs)]


class TinyJit(Generic[ReturnType]):
  """Decorate a function whose tensors are its arguments, the tensors it reads and updates, and its result: its
  later calls replay the kernels of its second call (see the module's docstring). `jit.reset()` forgets the
  capture; `jit.jit_cache` lists the captured launches. With `prune=True`, kernels that depend on nothing that
  changes between calls (the arguments, random draws, Variables) run once, at capture, and are not replayed: only
  for functions whose other tensors (weights, say) do not change.

  >>> from refgrad import Tensor, TinyJit
  >>> @TinyJit
  ... def double_plus_one(x): return x * 2 + 1
  >>> [double_plus_one(Tensor([i, i + 1.0])).tolist() for i in range(4)][-1]
  [7.0, 9.0]
  """

  def __init__(self, fn: Callable[..., ReturnType], prune: bool = False):
    self.fn, self.prune = fn, prune
    self.parameters = parameters_of(fn)
    self.calls = 0
    self.captured: CapturedCall | None = None
    self.lock = threading.RLock()  # held through a call: calls from several threads take turns
    functools.update_wrapper(self, fn)

  def __reduce__(self) -> tuple:
    """A captured jit is pickled with its captured call but not its function, as tinygrad does (a local function
    pickles too): the unpickled jit replays for arguments like the captured ones, with the state (weights, say) as
    it was when pickled, carried on by its own replays; after reset() it cannot capture again. Before its capture,
    the function is pickled (by name)."""
    if self.captured is None:
      return TinyJit, (self.fn, self.prune)
    name = getattr(self, "__name__", "the jitted function")  # a partial has no name to copy
    return _unpickled_jit, (self.captured, picklable_parameters(self.parameters), self.prune, name)

  def reset(self) -> None:
    with self.lock:
      self.calls, self.captured = 0, None

  @property
  def jit_cache(self) -> list[Launch]:
    """The captured launches, one per kernel launch or transfer a replay makes (empty before the capture)."""
    return self.captured.launches if self.captured is not None else []

  def __get__(self, obj: Any, owner: Any = None) -> Callable[..., ReturnType]:
    return self if obj is None else functools.partial(self._call_on, obj)  # a decorated method binds its instance

  def _call_on(self, obj: Any, *args: Any, **kwargs: Any) -> ReturnType:
    """A decorated method's call. It is one jit for every instance (the decorator runs once, on the class), as
    tinygrad's: a replay of one instance's capture for another would read the first one's weights (silently, in
    tinygrad), so that raises."""
    captured = self.captured
    if captured is not None and captured.instance is not None and captured.instance() is not obj:
      raise JitError(f"TinyJit: {getattr(self, '__name__', 'this method')} was captured on another "
                     f"{type(obj).__name__} instance, whose tensors its replays read; a method decorated with "
                     f"@TinyJit is one jit for the class: jit per instance (self.step = TinyJit(self._step))")
    result = self(obj, *args, **kwargs)
    if self.captured is not None and self.captured is not captured:  # this call captured
      with contextlib.suppress(TypeError):  # an instance without weak references is not checked
        self.captured.instance = weakref.ref(obj)
    return result

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if capturing() and (self.calls or self.captured is not None):
      raise RuntimeError("TinyJit: having TinyJit inside another TinyJit is not supported (a jitted function was "
                         "called again while another was being captured)")
    arguments = in_parameter_order(self.parameters, args, kwargs)
    pairs = [argument_tensor(t) for t in tensors_in(arguments)]
    tensors, views = [t for t, _ in pairs], tuple(steps for _, steps in pairs)
    copied = [t for t in tensors if has_symbolic_steps(t)]
    per_tensor = [input_buffers(t) for t in tensors]
    before = [(t, t.uop) for t in copied]
    signature, values = call_signature(tensors, per_tensor, views)
    signature += tuple(unbind_arg(v, values) for v in variables_passed(arguments))
    inputs = [b for bufs in per_tensor for b in bufs]
    while True:  # until the capture, a call takes CAPTURE_LOCK and then this function's lock: always in that order
      uncaptured = self.captured is None
      with CAPTURE_LOCK if uncaptured else nullcontext(), self.lock:
        if self.captured is not None:
          self._warn_of_changed_values(python_values(arguments))
          return self.captured.replay(tensors, inputs, signature, values)
        if uncaptured:
          self.calls += 1
          result = self._run(args, kwargs) if self.calls == 1 else self._capture(args, kwargs, tensors, inputs,
                                                                                 signature, values)
          if self.captured is not None:
            self.captured.python_values = python_values(arguments)
          refuse_symbolic_view_writes(before)
          return result
      # reset() ran in between: call again, holding CAPTURE_LOCK this time

  def _warn_of_changed_values(self, now: list[Any]) -> None:
    """tinygrad replays a changed Python argument's captured value silently; here a JitWarning says so (once)."""
    then, captured = self.captured.python_values, self.captured
    if then is None or captured.warned:
      return
    if len(now) != len(then) or not all(same_value(a, b) for a, b in zip(now, then)):
      captured.warned = True
      changed = [f"{b!r} -> {a!r}" for a, b in zip(now, then) if not same_value(a, b)] or [f"{then!r} -> {now!r}"]
      warnings.warn(f"TinyJit: {getattr(self, '__name__', 'the jitted function')}'s Python arguments changed since "
                    f"the capture ({', '.join(changed)}); replays compute with the captured values. Pass a Tensor "
                    f"(or a Variable) for a value that changes, or call jit.reset() to capture again", JitWarning,
                    stacklevel=3)

  def _run(self, args: tuple, kwargs: dict) -> ReturnType:
    result = self.fn(*args, **kwargs)
    if outputs := tensors_in(result):
      Tensor.realize(*outputs)
    return result

  def _capture(self, args: tuple, kwargs: dict, tensors: list[Tensor], inputs: list[Buffer],
               signature: tuple, values: dict[UOp, int]) -> ReturnType:
    arguments = [Holding(weakref.ref(t), part, node) for t in tensors for part, node in enumerate(parts_of(t.uop))]
    live = live_tensors()
    realize_lazy_state(live, {id(t) for t in tensors})
    held = live_holdings(live, {id(t) for t in tensors})
    # a value recorded on a node no tensor holds would make the capture skip the kernels computing it, and replays
    # then read it as it was, even after the tensors it was computed from are assigned
    held_nodes = tensor_nodes(live)
    forget_realized(lambda node, value: node not in held_nodes)
    existing = {id(t) for t in live}
    del live  # held only weakly from here: a tensor the call drops dies (refuse_dropped_reads)
    execute.CAPTURE, rng_state.DRAWS = LAUNCHES, DRAWS  # again each time: bench/multi.py sets CAPTURE itself
    RECORDING.conditions = conditions = []
    try:
      with LAUNCHES.recording() as launched, DRAWS.recording() as drawn:
        result = self._run(args, kwargs)
        settle_updates(arguments + [h for hs in held.values() for h in hs])
    finally:
      RECORDING.conditions = None
    launches = [Launch(runner, item.buffers, item.ast, item.var_vals) for runner, item in launched]
    forget_rewritten(launches)
    draws = [Draw([u.arg for u in params.uop.toposort if u.op is Ops.BUFFER], n) for params, n in drawn]
    known = set(inputs) | set(held) | {launch.buffers[0] for launch in launches}
    changes = updated(arguments, held, known)
    if not launches and not changes:
      raise JitError("TinyJit: the function launched no kernel and updated no tensor, so there is nothing to replay "
                     "(return the tensors it computes, or realize them inside it)")
    if self.prune:  # what changes between calls: the arguments, random draws, and the state the call updates
      changed = {id(h) for h, _ in changes}
      state = {buf for buf, holdings in held.items() if any(id(h) in changed for h in holdings)}
      launches = pruned(launches, set(inputs) | state | {b for d in draws for b in d.buffers})
    position = {id(t): i for i, t in reversed(list(enumerate(tensors)))}
    reads = reads_of(launches, held, set(inputs))
    refuse_dropped_reads(reads)
    read_of = {id(h): (read, h) for read in reads for h in read.holders}
    writes = [Write(position.get(id(h.tensor()), h.tensor), h.part, whole_buffer(node), read_of.get(id(h)))
              for h, node in changes]
    self.captured = CapturedCall(launches, inputs, signature, reads, writes, draws, result, tensors,
                                 SizeChecks.of(conditions, values))
    self.captured.kept = KeptLazy.of(existing, held)
    return result


def _unpickled_jit(captured: CapturedCall, parameters: inspect.Signature | None, prune: bool,
                   name: str) -> TinyJit:
  def no_function(*args: Any, **kwargs: Any) -> None:
    raise JitError(f"TinyJit: {name} was unpickled with its captured kernels only: after reset() there is no "
                   f"function to capture again")
  no_function.__name__ = no_function.__qualname__ = name
  jit = TinyJit(no_function, prune)
  jit.parameters, jit.captured = parameters, captured
  return jit


def picklable_parameters(parameters: inspect.Signature | None) -> inspect.Signature | None:
  """The parameters without their defaults' values and annotations, which need not pickle: only the names, kinds and
  whether each has a default matter to in_parameter_order."""
  if parameters is None:
    return None
  empty = inspect.Parameter.empty
  return parameters.replace(parameters=[p.replace(default=empty if p.default is empty else None, annotation=empty)
                                        for p in parameters.parameters.values()], return_annotation=empty)


def tensor_nodes(tensors: list[Tensor]) -> set[UOp]:
  """The nodes the tensors hold, and each one's part per device."""
  return {node for t in tensors for node in (t.uop, *parts_of(t.uop))}


def forget_rewritten(launches: list[Launch]) -> None:
  """Replays write the captured launches' outputs again, so no node may keep one of them as its recorded value: the
  same node built again later (hash-consing) would read another call's values. A tensor that holds such a node (one
  the captured call made and kept, a result) holds the buffer itself instead, which the replays write again, as in
  tinygrad."""
  written = {launch.buffers[0] for launch in launches}
  for t in live_tensors():
    for part, node in enumerate(parts_of(t.uop)):
      if (buf := computed_buffer(node)) is not None and buf in written:
        point(t, part, buf)
  forget_realized(lambda node, value: not written.isdisjoint(value_buffers(value)))


def settle_updates(holdings: list[Holding]) -> None:
  """Tensors the call updated but left lazy (`x += 1` without a realize) are realized now, inside the capture, so
  that their kernels are replayed too."""
  lazy = [h.tensor() for h in holdings if (node := changed_part(h)) is not None and whole_buffer(node) is None]
  for t in dict.fromkeys(lazy):
    input_buffers(t)


def updated(arguments: list[Holding], held: dict[Buffer, list[Holding]],
            known: set[Buffer]) -> list[tuple[Holding, UOp]]:
  """The holdings whose tensors hold another node after the call, with that node. A tensor other than an argument
  counts only if it now holds a buffer the call knows (one its launches wrote, an input, a buffer a tensor held
  before): one that holds another buffer was changed by another thread meanwhile (its own realize or replay)."""
  changes = [(h, node) for h in arguments if (node := changed_part(h))]
  return changes + [(h, node) for hs in held.values() for h in hs
                    if (node := changed_part(h)) and ((buf := whole_buffer(node)) is None or buf in known)]


def reads_of(launches: list[Launch], held: dict[Buffer, list[Holding]], inputs: set[Buffer]) -> list[Read]:
  """The buffers the launches read that tensors other than the arguments held. A replay starts from what a holder
  the call updated holds after the capture; the holders' nodes are those of before the call, so it is found."""
  read = {b for launch in launches for b in launch.buffers[1:]}
  return [Read(buf, holders, buf) for buf, holders in held.items() if buf in read and buf not in inputs]


def dropped(read: Read) -> bool:
  """Whether every tensor that held a buffer the kernels read is gone (not a jit unpickled without its tensors)."""
  return all(isinstance(h.tensor, weakref.ref) and h.tensor() is None for h in read.holders)


def describe_buffer(buf: Buffer) -> str:
  return f"{buf.size} {buf.dtype.name} on {buf.device}"


def refuse_dropped_reads(reads: list[Read]) -> None:
  """A buffer the kernels read whose every holder died during the call was state the function let go of: Python
  rebound the name that held it (`self.total = self.total + x`, or backward() adding onto a `.grad` of an earlier
  call). The next plain call reads the new tensor, which no replay can find: replays would read the captured value
  on every call, silently (tinygrad does)."""
  for read in reads:
    if dropped(read):
      raise JitError(f"TinyJit: the captured kernels read a tensor ({describe_buffer(read.captured)}) "
                     f"that the call dropped: a name rebound to a new tensor (`self.total = self.total + x`), or "
                     f"backward() adding onto gradients an earlier call left; replays would read its value of the "
                     f"capture on every call. Update state in place (`self.total.assign(self.total + x)`), or run "
                     f"zero_grad, every backward and the step inside the one jitted function")


def pruned(launches: list[Launch], changing: set[Buffer]) -> list[Launch]:
  """The launches that depend on the changing buffers or on Variables; the others ran at capture and keep their
  outputs."""
  kept = []
  for launch in launches:
    if launch.var_vals or any(b in changing for b in launch.buffers[1:]):
      changing.add(launch.buffers[0])
      kept.append(launch)
  return kept
