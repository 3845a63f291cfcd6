"""The oracle for capture and replay (refgrad/jit.py): a replayed call must give what the function gives when it runs.

`check_jit_replay(fn, calls, device)` runs a function once per set of inputs in `calls`, jitted and plain, on
`device`, each time on fresh tensors made from the arrays. Each plain call is checked against the reference kernel
by kernel (`check_against_reference`, SPEC.md's bounds). Each jitted call must then equal the plain one bit for bit
(NaNs equal to NaNs), in its result *and* in every input afterwards, so a function that updates its arguments in
place (`x += 1`, `t[0:1] = a`, `x.assign(...)`) is checked too: a replay launches the binaries the plain call
compiled, on the same inputs, so any difference is the replay's (a stale input, a missed launch, a buffer
overwritten by another, an update landing in the captured call's tensor).

`check_jit_state(make_step, state, calls, device)` checks a step that keeps state of its own, as a training loop
does: the step closes over state tensors, reads them and updates them (assign, setitem, in-place operators) without
realizing them, and the caller reads only what each call returns. The state is read once, after the last call:
reading it between calls realizes it, which hides a replay that reads the state as the capture found it.

A set of inputs is a sequence of arrays (passed positionally) or a mapping of parameter names to arrays (passed as
keywords, in the mapping's order, which may differ from call to call); one array object given twice in a call is
one tensor passed twice. The first two calls run and capture; give at least three, with different values, so that
replays are checked.

On a graph device (refgrad/graph_device.py) a jitted call is not the plain call's binaries replayed: the jit realizes
what a call returns and the state it updates in other pieces than a plain call does, and each piece is a graph the
device's compiler fuses its own way (a float sum in another order). There each jitted value is compared instead with
the reference's value and bound over its whole lazy graph (graph_check.reference_bounds), which holds however the
graph is cut into realizes.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from refgrad.jit import TinyJit, tensors_in
from refgrad.registry import Device
from refgrad.tensor import Tensor
from refgrad.testing.oracle.compare import compare
from refgrad.testing.oracle.graph_check import plain_graph, reference_bounds
from refgrad.testing.oracle.reference import check_against_reference

Call = Sequence[np.ndarray] | Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Bounded:
  """A reference value (flat) and how far a graph device's may be from it, lane by lane; its undefined lanes."""
  shape: tuple[int, ...]
  value: np.ndarray
  bound: np.ndarray
  undefined: np.ndarray | None


Want = np.ndarray | Bounded  # what a jitted value must be: the plain call's bits, or within the reference's bounds


class ReplayMismatch(AssertionError):
  """A replayed call's result, or an input it updated, differs from the function's own on the same inputs."""


def _distinct(call: Call) -> list[np.ndarray]:
  """The call's arrays, each once: an array given twice is one tensor."""
  values = call.values() if isinstance(call, Mapping) else call
  return list({id(x): x for x in values}.values())


def _apply(fn: Callable[..., Any], call: Call, tensors: dict[int, Tensor]) -> Any:
  """fn called as the call says, each array's place taken by its tensor."""
  if isinstance(call, Mapping):
    return fn(**{name: tensors[id(x)] for name, x in call.items()})
  return fn(*(tensors[id(x)] for x in call))


def _observed(fn: Callable[..., Any], call: Call) -> Callable[..., tuple[Tensor, ...]]:
  """fn as check_against_reference runs it: the distinct inputs positionally; out come the result's tensors and
  then every input as the call left it."""
  distinct = _distinct(call)

  def run(*tensors: Tensor) -> tuple[Tensor, ...]:
    result = _apply(fn, call, {id(x): t for x, t in zip(distinct, tensors)})
    return tuple(tensors_in(result)) + tensors
  return run


def _run(fn: Callable[..., Any], call: Call, device: str,
         tensors: dict[int, Tensor] | None = None) -> tuple[list[np.ndarray], dict[int, Tensor]]:
  """The values of the result's tensors, then of every input after the call, on fresh tensors (or on `tensors`,
  by the id of the array each stands for); and the input tensors."""
  distinct = _distinct(call)
  if tensors is None:
    tensors = {id(x): Tensor(x.copy(), device=device) for x in distinct}
  result = _apply(fn, call, tensors)
  return [t.numpy() for t in tensors_in(result)] + [tensors[id(x)].numpy() for x in distinct], tensors


def _differing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return ~((a == b) | ((a != a) & (b != b))).reshape(-1)


def _mismatch(want: Want, got: np.ndarray) -> str | None:
  """Why `got` is not what `want` says (None if it is): another shape or dtype, or the first differing lanes."""
  shape, dtype = (want.shape, want.value.dtype) if isinstance(want, Bounded) else (want.shape, want.dtype)
  if tuple(got.shape) != tuple(shape) or got.dtype != dtype:
    return f"is {list(got.shape)} {got.dtype}, the function's own is {list(shape)} {dtype}"
  flat = got.reshape(-1)
  if isinstance(want, Bounded):
    where = compare(flat, want.value, want.undefined, abs_bound=want.bound).mismatches
    return (f"is outside the reference's bounds (its whole lazy graph) at flat lanes {where}: "
            f"{flat[where].tolist()} against {want.value[where].tolist()} +- {want.bound[where].tolist()}"
            if where else None)
  where = np.flatnonzero(_differing(want, got))[:5]
  return (f"differs from the plain run's (fresh tensors) at flat lanes {where.tolist()}: "
          f"{flat[where].tolist()} against {want.reshape(-1)[where].tolist()}" if len(where) else None)


def _is_graph_device(device: str) -> bool:
  return Device[device].kind == "graph"


def _bounded(tensors: list[Tensor], device: str) -> list[Bounded]:
  """Lazy PYTHON tensors' reference values and bounds over their whole graphs, with the device's declared
  differences."""
  return [Bounded(tuple(t.shape), *reference_bounds(plain_graph(t.uop), device)) for t in tensors]


def _reference_run(fn: Callable[..., Any], call: Call, device: str) -> list[Bounded]:
  """_run's values as the reference's bounds for a graph device: the call on PYTHON, nothing realized."""
  distinct = _distinct(call)
  tensors = {id(x): Tensor(x.copy(), device="PYTHON") for x in distinct}
  result = _apply(fn, call, tensors)
  return _bounded(list(tensors_in(result)) + [tensors[id(x)] for x in distinct], device)


def check_jit_replay(fn: Callable[..., Any], calls: Sequence[Call], device: str,
                     jit: Callable[[Callable[..., Any]], Any] = TinyJit) -> tuple[int, int]:
  """Raise ReplayMismatch at the first call whose jitted result or updated input differs from the plain one
  (ReferenceMismatch if a plain result is wrong); return the number of replayed calls checked and of the lanes they
  compared. `jit` wraps fn (TinyJit, or a jit under test)."""
  if len(calls) < 3:
    raise ValueError(f"check_jit_replay needs at least 3 sets of inputs (2 run and capture), got {len(calls)}")
  jitted, lanes, passed, graph = jit(fn), 0, [], _is_graph_device(device)
  for number, call in enumerate(calls):
    check_against_reference(_observed(fn, call), *(x.copy() for x in _distinct(call)), device=device)
    plain = _reference_run(fn, call, device) if graph else _run(fn, call, device)[0]
    replayed, tensors = _run(jitted, call, device)
    _compare(f"call {number} ({'replayed' if number >= 2 else 'run'} by the jit)", device, call, plain, replayed)
    lanes += sum(x.size for x in replayed) if number >= 2 else 0
    passed.append(tensors)
  _check_afterwards(fn, calls, device, passed)
  return len(calls) - 2, lanes


def _compare(what: str, device: str, call: Call, want: Sequence[Want], got: list[np.ndarray]) -> None:
  results = len(want) - len(_distinct(call))
  if len(want) != len(got):
    raise ReplayMismatch(f"{what} on {device}: {len(got) - len(_distinct(call))} tensors returned, the function's "
                         f"own {results}")
  for index, (w, g) in enumerate(zip(want, got)):
    if why := _mismatch(w, g):
      name = f"output {index}" if index < results else f"input {index - results} after the call"
      raise ReplayMismatch(f"{what} on {device}: {name} {why}")


def _check_afterwards(fn: Callable[..., Any], calls: Sequence[Call], device: str,
                      passed: list[dict[int, Tensor]]) -> None:
  """After the replays, the plain function run again on the tensors each jitted call was given must give what it
  gives on fresh tensors of the same values: replays write the captured call's buffers again, and nothing computed
  from a call's tensors may have kept one of them."""
  for number, (call, tensors) in enumerate(zip(calls, passed)):
    values = {key: t.numpy() for key, t in tensors.items()}
    fresh = {key: Tensor(v.copy(), device=device) for key, v in values.items()}
    (want, _), (got, _) = _run(fn, call, device, fresh), _run(fn, call, device, tensors)
    _compare(f"the function run again, after the replays, on call {number}'s tensors", device, call, want, got)


def check_jit_state(make_step: Callable[..., Callable[..., Any]], state: Sequence[np.ndarray], calls: Sequence[Call],
                    device: str, jit: Callable[[Callable[..., Any]], Any] = TinyJit) -> tuple[int, int]:
  """`make_step(*state_tensors)` returns a step function of a call's inputs that reads and updates the state tensors it
  closes over. The plain step and the jitted one each run every call of `calls`, each on its own fresh state tensors
  made from `state` and on fresh input tensors; what a call returns is read after it, the state only after the last
  call. Raise ReplayMismatch at the first call whose jitted result differs from the plain one bit for bit (on a graph
  device: is outside the reference's bounds), or if the state then differs; return the number of replayed calls
  checked and of the lanes they and the state compared."""
  if len(calls) < 3:
    raise ValueError(f"check_jit_state needs at least 3 sets of inputs (2 run and capture), got {len(calls)}")
  jitted, jitted_state = _stateful_run(make_step, state, calls, device, jit)
  plain, plain_state = (_stateful_reference(make_step, state, calls, device) if _is_graph_device(device) else
                        _stateful_run(make_step, state, calls, device, None))
  lanes = 0
  for number, (call, want, got) in enumerate(zip(calls, plain, jitted)):
    _compare(f"call {number} ({'replayed' if number >= 2 else 'run'} by the jit)", device, call, want, got)
    lanes += sum(x.size for x in got) if number >= 2 else 0
  for index, (want, got) in enumerate(zip(plain_state, jitted_state)):
    if why := _mismatch(want, got):
      raise ReplayMismatch(f"state tensor {index} on {device}, after {len(calls)} calls of the jitted step, {why}")
  return len(calls) - 2, lanes + sum(x.size for x in jitted_state)


def _stateful_run(make_step: Callable[..., Callable[..., Any]], state: Sequence[np.ndarray], calls: Sequence[Call],
                  device: str, wrap: Callable[[Callable[..., Any]], Any] | None) -> tuple[list[list[np.ndarray]],
                                                                                          list[np.ndarray]]:
  """Each call's results (then, for _compare's sake, its inputs after the call), and the state after the last call."""
  tensors = [Tensor(x.copy(), device=device) for x in state]
  step = make_step(*tensors)
  step = wrap(step) if wrap is not None else step
  results = [_run(step, call, device)[0] for call in calls]
  return results, [t.numpy() for t in tensors]


def _stateful_reference(make_step: Callable[..., Callable[..., Any]], state: Sequence[np.ndarray],
                        calls: Sequence[Call], device: str) -> tuple[list[list[Bounded]], list[Bounded]]:
  """_stateful_run's values as the reference's bounds for a graph device: the plain step on PYTHON, nothing
  realized, so each value's bound covers its whole lazy graph from the initial state."""
  tensors = [Tensor(x.copy(), device="PYTHON") for x in state]
  step = make_step(*tensors)
  return [_reference_run(step, call, device) for call in calls], _bounded(tensors, device)
