"""The optimizer family: a wrong rule of the kernel optimizer (refgrad/codegen/opt.py), planted through
Capabilities.opt_rules in a copy of a real compiled device (CLANG), where the heuristic applies it at real sizes.

Both bugs are in UPCAST, the opt CLANG's heuristic gives a column sum or a matmul: a tile of outputs per thread,
each lane storing one output. A lane that stores to another lane's output, or computes another lane's value, is a
tile bug that shows only at the sizes where the heuristic tiles (kernel_work >= WORK_THRESHOLD).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from refgrad.codegen import opt
from refgrad.dtype import dtypes
from refgrad.testing.selftest.mutants.base import Mutant, witness
from refgrad.uop import UOp

LaneMap = Callable[[int, int, UOp], int]  # (lane, amount, the lane's store) -> the lane it takes a part from


def _tile_mixup(index_lane: LaneMap, value_lane: LaneMap) -> Callable[..., tuple[UOp, tuple[int, ...]]]:
  """The real UPCAST, then lane i's stores take their index (and gate) from lane index_lane(i) and their value from
  lane value_lane(i) of the same tile (the real rule is both the identity)."""
  def rule(sink: UOp, shape: tuple[int, ...], axis: int, amount: int) -> tuple[UOp, tuple[int, ...]]:
    tiled, tiled_shape = opt.upcast(sink, shape, axis, amount)
    per_lane = len(sink.src)  # upcast emits lane 0's stores, then lane 1's, ...
    lanes = [tiled.src[lane * per_lane:(lane + 1) * per_lane] for lane in range(amount)]
    stores = []
    for lane, own in enumerate(lanes):
      for k, store in enumerate(own):
        where, value = lanes[index_lane(lane, amount, store)][k], lanes[value_lane(lane, amount, store)][k]
        stores.append(store.replace(src=(store.src[0], where.src[1], value.src[2], *where.src[3:])))
    return tiled.replace(src=tuple(stores)), tiled_shape
  return rule


def _own(lane: int, amount: int, store: UOp) -> int:
  return lane


def _mirrored(lane: int, amount: int, store: UOp) -> int:
  return amount - 1 - lane


def _four_doubles(lane: int, amount: int, store: UOp) -> int:
  """Lanes past 4 of a float64 tile repeat lanes 0-3: the tile sized for 8 floats, held in 4-double registers."""
  return lane % 4 if store.src[2].dtype == dtypes.float64 else lane


COLUMNS = np.arange(256 * 512, dtype=np.float32).reshape(256, 512) % 97  # a column sum the heuristic tiles


OPTIMIZER_MUTANTS: tuple[Mutant, ...] = (
  Mutant("opt_upcast_mirrored", "optimizer", "UPCAST stores each lane's output to the mirrored lane of its tile",
         witness(lambda t: t.sum(axis=0), COLUMNS), opt_rules=(("UPCAST", _tile_mixup(_mirrored, _own)),)),
  Mutant("opt_upcast_float64_wraps_at_4", "optimizer", "UPCAST of float64 outputs: lanes past 4 compute lanes 0-3",
         witness(lambda t: t.sum(axis=0), COLUMNS.astype(np.float64)),
         opt_rules=(("UPCAST", _tile_mixup(_own, _four_doubles)),)),
)
