"""The kernel interpreter: runs a linear `Program` with numpy, vectorized over every thread at once.

Every value is a numpy array of rank G + R (G thread axes, one per global dim; R loop axes, one per RANGE),
broadcastable to the current block of the index space, so a value that depends only on thread axis 0 is
stored with size 1 on every other axis. A RANGE loop does not run per iteration: its iterations become its
axis, processed in chunks so that no array grows past `BLOCK_ELEMENTS`; large thread spaces are cut into
blocks the same way. Loads and stores whose index is affine in the thread and loop indices are read and
written as strided views of the buffer (no gather); anything else gathers. Semantics come from alu.py.

Lanes that the spec leaves undefined (integer division by zero, out-of-range casts, oversized shifts) are
tracked in a mask per value and stored beside the output, so differential checks can skip them.

GPU-shaped programs (codegen/gpu.py) run the same way. Every work-item executes each uop before any executes the
next (lockstep), so a BARRIER has nothing left to wait for; blocks hold whole work-groups, and local memory is
an array per work-group of the block. Loop iterations run side by side too, so a local memory written inside loops
(a LOCALTILE's tiles) holds one copy per iteration of those loops, and is read only inside them.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from refgrad import alu
from refgrad.codegen.contract import Program
from refgrad.uop import GroupOp, Ops, UOp, prod

BLOCK_ELEMENTS = 1 << 18


@dataclass
class PyBuffer:
  """A PYTHON-device buffer: raw bytes, and the mask of lanes holding undefined values (or None)."""
  data: np.ndarray
  undefined: np.ndarray | None = None


@dataclass(frozen=True)
class Affine:
  """index = const + sum(coeffs[axis] * index_of(axis))"""
  const: int
  coeffs: tuple[tuple[int, int], ...]  # (axis, coefficient), coefficient != 0


def affine_form(u: UOp, axis_of: dict[UOp, int]) -> Affine | None:
  """Read an index expression as an affine form over thread/loop axes, or None if it is not affine."""
  if u.op is Ops.CONST:
    return Affine(int(u.arg), ())
  if u in axis_of:
    return Affine(0, ((axis_of[u], 1),))
  if u.op is Ops.ADD:
    a, b = affine_form(u.src[0], axis_of), affine_form(u.src[1], axis_of)
    if a is None or b is None:
      return None
    merged = dict(a.coeffs)
    for axis, k in b.coeffs:
      merged[axis] = merged.get(axis, 0) + k
    return Affine(a.const + b.const, tuple((ax, k) for ax, k in sorted(merged.items()) if k))
  if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
    a, k = affine_form(u.src[0], axis_of), int(u.src[1].arg)
    if a is None:
      return None
    return Affine(a.const * k, tuple((ax, c * k) for ax, c in a.coeffs if c * k))
  if u.op is Ops.NEG:
    a = affine_form(u.src[0], axis_of)
    return None if a is None else Affine(-a.const, tuple((ax, -c) for ax, c in a.coeffs))
  return None


class Block:
  """The part of the index space being computed: per axis, the first index and the count."""

  def __init__(self, rank: int):
    self.start = [0] * rank
    self.count = [1] * rank

  def axis_values(self, axis: int, rank: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = self.count[axis]
    return np.arange(self.start[axis], self.start[axis] + self.count[axis], dtype=np.int64).reshape(shape)


class PythonKernel:
  """A Program prepared for interpretation: loop structure, last uses and affine indices found once."""

  def __init__(self, program: Program):
    self.program = program
    self.uops = program.uops
    ranges = [u for u in self.uops if u.op is Ops.RANGE]
    self.n_globals = len(program.global_shape)
    self.rank = self.n_globals + len(ranges)
    self.axis_of: dict[UOp, int] = {u: u.arg[0] for u in self.uops if u.op is Ops.SPECIAL}
    self.axis_of.update({r: self.n_globals + i for i, r in enumerate(ranges)})
    self.loop_size = {self.n_globals + i: r.arg[1] for i, r in enumerate(ranges)}
    self.loop_end = program.loop_ends
    loops = sorted(self.loop_end.items())
    acc_position = {u: i for i, u in enumerate(self.uops) if u.op is Ops.DEFINE_ACC}
    # an accumulator's axes: the loops open at its ACCUMULATE that it was defined outside of, outermost first
    self.acc_axes: dict[UOp, tuple[int, ...]] = {}
    for i, u in enumerate(self.uops):
      if u.op is Ops.ACCUMULATE:
        defined = acc_position[u.src[0]]
        open_loops = [start for start, end in loops if defined < start < i < end]
        self.acc_axes[u.src[0]] = tuple(self.axis_of[self.uops[start]] for start in open_loops)
    self.affine = {u: None if _is_local(u.src[0]) or len(u.src) > 3 else affine_form(u.src[1], self.axis_of)
                   for u in self.uops if u.op in (Ops.LOAD, Ops.STORE)}
    uses_local = any(u.op is Ops.DEFINE_LOCAL for u in self.uops)
    self.block_unit = program.local_shape if uses_local else (1,) * self.n_globals  # blocks hold whole groups
    self._check_lockstep()
    self.loop_elements = self._largest_loop_nest()
    # ALU typing is checked once here (TypeError for an ill-typed program), not on every execution
    self.operand = {u: alu.check_alu_types(u.op, u.dtype, tuple(s.dtype for s in u.src))
                    for u in self.uops if u.op in GroupOp.ALU}
    self.skipped = self._index_only_uops()
    self.last_use = self._last_uses()

  def _check_lockstep(self) -> None:
    """Loop iterations run side by side, so each local memory has a copy per iteration of the loops its stores are
    in (`local_loops`), and may be read only inside those loops, where the iteration says which copy."""
    self.local_loops: dict[UOp, tuple[int, ...]] = {}
    open_loops: list[UOp] = []
    for u in self.uops:
      if u.op is Ops.RANGE:
        open_loops.append(u)
      elif u.op is Ops.ENDRANGE:
        open_loops.pop()
      elif u.op is Ops.STORE and _is_local(u.src[0]):
        self.local_loops.setdefault(u.src[0], tuple(self.axis_of[r] for r in open_loops))
      elif u.op is Ops.LOAD and _is_local(u.src[0]):
        local = _defined_local(u.src[0])
        inside = {self.axis_of[r] for r in open_loops}
        if not set(self.local_loops.get(local, ())) <= inside:
          raise NotImplementedError(f"{self.program.name}: a local-memory LOAD outside a loop its STOREs are in")

  def _index_only_uops(self) -> frozenset[UOp]:
    """Index math that only feeds affine loads and stores: those read it as strides, so it never runs."""
    needed: set[UOp] = set()
    for u in reversed(self.uops):
      if u.op is Ops.STORE or u in needed or u.op in (Ops.ACCUMULATE, Ops.ENDRANGE, Ops.RANGE):
        needed.add(u)
        skip_index = u.op in (Ops.LOAD, Ops.STORE) and self.affine[u] is not None
        needed.update(s for i, s in enumerate(u.src) if not (skip_index and i == 1))
    return frozenset(u for u in self.uops if u not in needed)

  def _largest_loop_nest(self) -> int:
    """Iterations of the biggest loop nest: a block of threads runs all of them at once if it can."""
    largest, stack = 1, [1]
    for u in self.uops:
      if u.op is Ops.RANGE:
        stack.append(stack[-1] * u.arg[1])
        largest = max(largest, stack[-1])
      elif u.op is Ops.ENDRANGE:
        stack.pop()
    return largest

  def _last_uses(self) -> dict[int, list[UOp]]:
    """position -> values that die there; a value used inside a loop it was defined outside of lives to its end."""
    position = {u: i for i, u in enumerate(self.uops)}
    loops = [(start, end) for start, end in self.loop_end.items()]
    last: dict[UOp, int] = {}
    for i, u in enumerate(self.uops):
      for s in u.src:
        end = i
        for start, stop in loops:
          if position[s] < start < i <= stop:
            end = max(end, stop)
        last[s] = max(last.get(s, 0), end)
    dies: dict[int, list[UOp]] = {}
    for u, i in last.items():
      if u.op not in (Ops.PARAM, Ops.DEFINE_ACC):
        dies.setdefault(i, []).append(u)
    return dies

  # ---- running
  def __call__(self, *buffers: PyBuffer) -> None:
    arrays = [b.data.view(p.dtype.np) for b, p in zip(buffers, self.program.params)]
    run = _Run(self, arrays, [b.undefined for b in buffers])
    for block in self._global_blocks():
      run.execute(block)
    out = buffers[0]
    out.undefined = run.out_undefined if run.out_undefined is not None and run.out_undefined.any() else None

  def _global_blocks(self):
    """Blocks of the thread space, small enough that their loops (if any) fit in BLOCK_ELEMENTS at once.
    A block spans a multiple of `block_unit` on every axis (whole work-groups, for programs with local memory)."""
    shape, unit = self.program.global_shape, self.block_unit
    if not shape:
      yield Block(self.rank)
      return
    budget = max(1, BLOCK_ELEMENTS // self.loop_elements)
    split = next((k for k in range(len(shape)) if prod(unit[:k + 1]) * prod(shape[k + 1:]) <= budget), len(shape) - 1)
    inner = prod(unit[:split]) * prod(shape[split + 1:])
    step = max(1, budget // max(inner, 1) // unit[split]) * unit[split]
    for outer in itertools.product(*(range(0, shape[a], unit[a]) for a in range(split))):
      for start in range(0, shape[split], step):
        block = Block(self.rank)
        for axis, i in enumerate(outer):
          block.start[axis], block.count[axis] = i, unit[axis]
        for axis in range(split + 1, len(shape)):
          block.count[axis] = shape[axis]
        block.start[split], block.count[split] = start, min(step, shape[split] - start)
        yield block


class _Run:
  """One execution of a kernel: the environment of values and their undefined-lane masks."""

  def __init__(self, kernel: PythonKernel, arrays: list[np.ndarray], undefined: list[np.ndarray | None]):
    self.k = kernel
    self.arrays = arrays
    self.in_undefined = undefined
    self.out_undefined: np.ndarray | None = None
    self.env: dict[UOp, Any] = {}
    self.undef: dict[UOp, np.ndarray] = {}
    self.locals: dict[UOp, PyBuffer] = {}  # DEFINE_LOCAL -> its arrays, shaped (groups on each axis..., size)

  def execute(self, block: Block) -> None:
    self.block = block
    self.run_segment(0, len(self.k.uops))

  def run_segment(self, start: int, stop: int) -> None:
    uops, i = self.k.uops, start
    while i < stop:
      u = uops[i]
      if u.op is Ops.RANGE:
        end = self.k.loop_end[i]
        self.run_loop(u, i + 1, end)
        i = end
      elif u not in self.k.skipped:
        HANDLERS[u.op](self, u)
      for dead in self.k.last_use.get(i, ()):
        self.env.pop(dead, None)
        self.undef.pop(dead, None)
      i += 1

  def run_loop(self, rng: UOp, body_start: int, body_stop: int) -> None:
    axis, size = self.k.axis_of[rng], rng.arg[1]
    others = prod(c for a, c in enumerate(self.block.count) if a != axis)
    inner = prod(u.arg[1] for u in self.k.uops[body_start:body_stop] if u.op is Ops.RANGE)
    step = max(1, BLOCK_ELEMENTS // max(others * inner, 1))
    for start in range(0, size, step):
      self.block.start[axis], self.block.count[axis] = start, min(step, size - start)
      self.env[rng] = self.block.axis_values(axis, self.k.rank)
      self.run_segment(body_start, body_stop)
    self.block.start[axis], self.block.count[axis] = 0, 1

  # ---- undefined-lane bookkeeping
  def mark(self, u: UOp, mask: np.ndarray | None) -> None:
    if mask is not None and mask.any():
      self.undef[u] = mask

  def src_undefined(self, u: UOp) -> np.ndarray | None:
    masks = [self.undef[s] for s in u.src if s in self.undef]
    if not masks:
      return None
    out = masks[0]
    for m in masks[1:]:
      out = out | m
    return out

  # ---- memory access
  def view(self, array: np.ndarray, form: Affine, writable: bool = False) -> np.ndarray | None:
    """A strided view of `array` for an affine index over the current block, or None if out of bounds."""
    shape, strides = [1] * self.k.rank, [0] * self.k.rank
    base, lo, hi = form.const, 0, 0
    for axis, k in form.coeffs:
      count = self.block.count[axis]
      base += k * self.block.start[axis]
      shape[axis], strides[axis] = count, k * array.itemsize
      lo, hi = lo + min(0, k * (count - 1)), hi + max(0, k * (count - 1))
    if base + lo < 0 or base + hi >= array.size:
      return None
    return as_strided(array[base:], shape=shape, strides=strides, writeable=writable)

  def group_coords(self) -> tuple[np.ndarray, ...]:
    """Each thread's work-group, counted from the block's first group, on every grid axis."""
    return tuple((self.block.axis_values(a, self.k.rank) - self.block.start[a]) // unit
                 for a, unit in enumerate(self.k.block_unit))

  def local_memory(self, buffer: UOp) -> PyBuffer:
    return self.locals[_defined_local(buffer)]

  def index_array(self, u: UOp) -> np.ndarray:
    """The index of a load or store as an array (affine indices are not evaluated as uops: rebuild them)."""
    form = self.k.affine[u]
    if form is None:
      return np.asarray(self.env[u.src[1]])
    index = np.array(form.const, dtype=np.int64)
    for axis, k in form.coeffs:
      index = index + k * self.block.axis_values(axis, self.k.rank)
    return index


def _defined_local(buffer: UOp) -> UOp:
  """The DEFINE_LOCAL a local load or store reaches, directly or through its BARRIER."""
  return buffer if buffer.op is Ops.DEFINE_LOCAL else buffer.src[0]


def _is_local(buffer: UOp) -> bool:
  return buffer.op in (Ops.DEFINE_LOCAL, Ops.BARRIER)


def _load(run: _Run, u: UOp) -> None:
  if _is_local(u.src[0]):
    return _load_local(run, u)
  param_index = u.src[0].arg[0]
  array = run.arrays[param_index]
  valid = run.env[u.src[2]] if len(u.src) > 2 else None
  form = run.k.affine[u]
  view = run.view(array, form) if form is not None else None
  undefined_src = run.in_undefined[param_index]
  if array.size == 0:  # every lane is masked off (padding around an empty tensor)
    value, undefined = np.zeros((), array.dtype), None
  elif view is not None:
    value = view
    undefined = run.view(undefined_src, form) if undefined_src is not None else None
  else:
    index = run.index_array(u)
    if valid is not None:
      index = np.where(valid, index, 0)
    index = np.clip(index, 0, max(array.size - 1, 0))
    value = array[index]
    undefined = undefined_src[index] if undefined_src is not None else None
  if valid is not None:
    value = np.where(valid, value, np.zeros((), array.dtype))
    undefined = (undefined & valid) if undefined is not None else None
  run.env[u] = value
  run.mark(u, undefined)


def _store(run: _Run, u: UOp) -> None:
  if _is_local(u.src[0]):
    return _store_local(run, u)
  if len(u.src) > 3:
    return _gated_store(run, u)
  array = run.arrays[0]
  value = run.env[u.src[2]]
  undefined = run.src_undefined(u)
  form = run.k.affine[u]
  view = run.view(array, form, writable=True) if form is not None else None
  if view is not None:
    view[...] = np.broadcast_to(value, view.shape)
  else:
    index = run.index_array(u)
    shape = np.broadcast_shapes(np.shape(index), np.shape(value))
    array[np.broadcast_to(index, shape)] = np.broadcast_to(value, shape)
  if undefined is not None:
    if run.out_undefined is None:
      run.out_undefined = np.zeros(array.size, dtype=bool)
    target = run.view(run.out_undefined, form, writable=True) if form is not None else None
    if target is not None:
      target[...] = np.broadcast_to(undefined, target.shape)
    else:
      run.out_undefined[np.asarray(run.index_array(u))] = undefined


def _gated_store(run: _Run, u: UOp) -> None:
  """STORE(param, index, value, gate): only the lanes where gate holds write (their indices are in bounds)."""
  index, value, gate = (np.asarray(run.env[s]) for s in u.src[1:])
  undefined = run.undef.get(u.src[2])
  shape = np.broadcast_shapes(index.shape, value.shape, gate.shape)
  chosen = np.broadcast_to(gate, shape)
  where = np.broadcast_to(index, shape)[chosen]
  run.arrays[0][where] = np.broadcast_to(value, shape)[chosen]
  if undefined is not None or run.out_undefined is not None:
    if run.out_undefined is None:
      run.out_undefined = np.zeros(run.arrays[0].size, dtype=bool)
    run.out_undefined[where] = np.broadcast_to(undefined, shape)[chosen] if undefined is not None else False


def _local_lanes(run: _Run, buffer: UOp, index: np.ndarray,
                 *others: np.ndarray) -> tuple[tuple[np.ndarray, ...], tuple[int, ...]]:
  """Fancy-index keys into a local memory (work-group coordinates, the iterations of the loops it is stored in, then
  the index) and their common shape."""
  loops = run.k.local_loops.get(_defined_local(buffer), ())
  coords = run.group_coords() + tuple(run.block.axis_values(a, run.k.rank) for a in loops)
  shape = np.broadcast_shapes(index.shape, *(np.shape(x) for x in coords + others))
  return tuple(np.broadcast_to(x, shape) for x in coords + (index,)), shape


def _load_local(run: _Run, u: UOp) -> None:
  memory = run.local_memory(u.src[0])
  index = np.clip(np.asarray(run.env[u.src[1]]), 0, memory.data.shape[-1] - 1)
  valid = np.asarray(run.env[u.src[2]]) if len(u.src) > 2 else None
  key, _ = _local_lanes(run, u.src[0], index)
  value = memory.data[key]
  undefined = memory.undefined[key] if memory.undefined is not None else None
  if valid is not None:
    value = np.where(valid, value, np.zeros((), value.dtype))
    undefined = (undefined & valid) if undefined is not None else None
  run.env[u] = value
  run.mark(u, undefined)


def _store_local(run: _Run, u: UOp) -> None:
  memory = run.local_memory(u.src[0])
  index, value = np.asarray(run.env[u.src[1]]), np.asarray(run.env[u.src[2]])
  gate = np.asarray(run.env[u.src[3]]) if len(u.src) > 3 else np.ones((), dtype=bool)
  undefined = run.undef.get(u.src[2])
  key, shape = _local_lanes(run, u.src[0], index, value, gate)
  chosen = np.broadcast_to(gate, shape)
  key = tuple(k[chosen] for k in key)
  memory.data[key] = np.broadcast_to(value, shape)[chosen]
  if undefined is not None or memory.undefined is not None:
    if memory.undefined is None:
      memory.undefined = np.zeros(memory.data.shape, dtype=bool)
    memory.undefined[key] = np.broadcast_to(undefined, shape)[chosen] if undefined is not None else False


def _define_local(run: _Run, u: UOp) -> None:
  groups = tuple(count // unit for count, unit in zip(run.block.count, run.k.block_unit))
  iterations = tuple(run.k.loop_size[a] for a in run.k.local_loops.get(u, ()))
  run.locals[u] = PyBuffer(np.zeros(groups + iterations + (u.arg[1],), dtype=u.dtype.np))


def _local_index(run: _Run, u: UOp) -> None:
  axis, size = u.arg
  run.env[u] = run.block.axis_values(axis, run.k.rank) % size


def _group_index(run: _Run, u: UOp) -> None:
  axis = u.arg[0]
  run.env[u] = run.block.axis_values(axis, run.k.rank) // run.k.program.local_shape[axis]


def _alu(run: _Run, u: UOp) -> None:
  srcs = [run.env[s] for s in u.src]
  run.env[u] = alu.compute_alu(u.op, run.k.operand[u], u.dtype, srcs)
  run.mark(u, alu.propagate_undefined(u.op, u.dtype, srcs, [run.undef.get(s) for s in u.src]))


def _cast(run: _Run, u: UOp) -> None:
  x = run.env[u.src[0]]
  fn = alu.exec_cast if u.op is Ops.CAST else alu.exec_bitcast
  run.env[u] = fn(np.asarray(x), u.dtype)
  new = alu.undefined_cast_lanes(np.asarray(x), u.dtype) if u.op is Ops.CAST else alu.undefined_bitcast_lanes(x)
  undefined = run.src_undefined(u)
  run.mark(u, new if undefined is None else (undefined if new is None else undefined | new))


def _const(run: _Run, u: UOp) -> None:
  run.env[u] = np.array(u.arg, dtype=u.dtype.np)


def _special(run: _Run, u: UOp) -> None:
  run.env[u] = run.block.axis_values(u.arg[0], run.k.rank)


def _define_acc(run: _Run, u: UOp) -> None:
  """A fresh accumulator for each block (and each trip of an enclosing loop): its value and its undefined lanes."""
  _, reduce_op = u.arg
  run.env[u] = np.array(alu.reduce_identity(reduce_op, u.dtype), dtype=u.dtype.np)
  run.undef.pop(u, None)


def _accumulate(run: _Run, u: UOp) -> None:
  acc, value_uop = u.src
  axes = run.k.acc_axes[acc]
  _, reduce_op = acc.arg
  value = run.env[value_uop]
  full = list(np.shape(value)) if np.ndim(value) == run.k.rank else [1] * run.k.rank
  for axis in axes:  # a value constant along a loop still counts once per iteration
    full[axis] = run.block.count[axis]
  value = np.broadcast_to(value, full)
  partial = alu.exec_reduce(reduce_op, acc.dtype, value, axes) if axes else value
  run.env[acc] = alu.exec_alu(reduce_op, acc.dtype, run.env[acc], partial)
  if value_uop in run.undef:
    mask = np.broadcast_to(run.undef[value_uop], full).any(axis=axes, keepdims=True)
    run.mark(acc, mask | run.undef[acc] if acc in run.undef else mask)


def _nothing(run: _Run, u: UOp) -> None:
  pass


HANDLERS: dict[Ops, Callable[[_Run, UOp], None]] = {
  **{op: _alu for op in GroupOp.ALU},
  Ops.CAST: _cast, Ops.BITCAST: _cast, Ops.CONST: _const, Ops.SPECIAL: _special, Ops.PARAM: _nothing,
  Ops.LOAD: _load, Ops.STORE: _store, Ops.DEFINE_ACC: _define_acc, Ops.ACCUMULATE: _accumulate,
  Ops.ENDRANGE: _nothing, Ops.LOCAL_INDEX: _local_index, Ops.GROUP_INDEX: _group_index,
  Ops.DEFINE_LOCAL: _define_local, Ops.BARRIER: _nothing,  # lockstep: every item already did the stores
}
