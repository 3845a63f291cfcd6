"""Views: a tensor made from another by a movement op shares the other's data, as in torch.

refgrad's values are immutable graphs, so a view shares by derivation. It keeps a `ViewLink` to its base (the
tensor at the start of its chain of views, which views nothing) and the steps that made it from the base. The rule:

- A view's value is its steps applied to its base's *current* value: reading `view.uop` makes the view's node again
  when the base's node changed since (a write through another view, an assign, a jit replay; a realize changes the
  node, not the value, and costs the view's movement ops only).
- Writing a view (`assign`, `view[i] = v`, `view += 1`) writes its base: the base's value with the region the view
  covers replaced (each step inverted: movement ops, padding and a `where`). Every view of that base then sees the
  write; tensors *computed* from the old value (`c = a * 2` before `a[0] = 5`) keep the old value, because their
  graphs hold the old nodes.
- Views are made by reshape, permute, shrink, flip, expand, detach and basic indexing (and what is built from them
  only: transpose, squeeze, flatten, split, ...). Results that torch copies (pad, repeat, roll, cat, contiguous,
  advanced indexing, every computation) are bases. A write through an expand that repeats elements raises, as
  torch's in-place ops on overlapping memory do.
- A view holds its base weakly: once nothing else holds the base, nothing can observe it, and the view is a base
  of its own (so a realized view, like `loss = h.sum()`, does not keep the graph of a dropped tensor alive). A write
  to the base makes each of its views hold it until the view has seen the write (a view read after its base is
  dropped shows the base's last value, as torch's shared storage does). An expanded view holds its base: it stays
  one, and unwritable, as long as it lives.

Realizing a view that was written through also realizes its base, so the write lands in the base's buffer (a KV
cache filled by `cache[:, i:i+1].assign(kv).realize()` stays one buffer, not a growing chain of `where`s).
"""
from __future__ import annotations

import weakref
from typing import Any

from refgrad.dtype import dtypes
from refgrad.uop import Ops, UOp

# A step from a tensor to a view of it is a pair (op, arg): a movement primitive or DETACH (which moves nothing) and
# its arg, or INDEX and the BasicPlan of a basic index (indexing.py). A tuple, because every movement op makes one.
INDEX = "index"


def forward(step: tuple, x: Any) -> Any:
  """The view's value, made from x's by the step."""
  op, arg = step
  return arg.apply(x) if op is INDEX else x._from(UOp(op, x.dtype, (x.uop,), arg))


def put_back(step: tuple, x: Any, value: Any) -> Any:
  """x's value with the region the step's view covers replaced by `value`, a new value of the view."""
  op, arg = step
  return _PUT_BACK[op](arg, x, value)


def _put_index(plan: Any, x: Any, value: Any) -> Any:
  inside = value._const(True, dtypes.bool)._broadcast_to(value.shape)
  return plan.place(inside, x.shape).where(plan.place(value, x.shape), x)


def _put_shrink(bounds: tuple, x: Any, value: Any) -> Any:
  grow = tuple((start, size - end) for (start, end), size in zip(bounds, x.shape))
  inside = value._const(True, dtypes.bool)._broadcast_to(value.shape)._movement(Ops.PAD, grow)
  return inside.where(value._movement(Ops.PAD, grow), x)


def _put_expand(shape: tuple, x: Any, value: Any) -> Any:
  if value.numel() == 0:  # nothing is written
    return x
  raise RuntimeError(f"cannot write into an expanded view: more than one element of the written tensor (shape "
                     f"{shape}) refers to one element of the tensor it expands (shape {x.shape}); write into that "
                     "tensor, or into a copy made with .contiguous() or .clone()")


def _inverse(order: tuple[int, ...]) -> tuple[int, ...]:
  return tuple(order.index(i) for i in range(len(order)))


_PUT_BACK = {
  Ops.RESHAPE: lambda arg, x, value: value.reshape(x.shape),
  Ops.PERMUTE: lambda arg, x, value: value.permute(_inverse(arg)),
  Ops.FLIP: lambda arg, x, value: value._movement(Ops.FLIP, arg),
  Ops.SHRINK: _put_shrink,
  Ops.EXPAND: _put_expand,  # several elements of the view are one element of x
  Ops.DETACH: lambda arg, x, value: value,
  INDEX: _put_index,
}
VIEW_OPS = frozenset(_PUT_BACK) - {INDEX}


class _Held:
  """A strong reference that is called like a weakref."""
  __slots__ = ("obj",)

  def __init__(self, obj: Any):
    self.obj = obj

  def __call__(self) -> Any:
    return self.obj


class BaseRef(weakref.ref):
  """A view's weak reference to its base, with room to hold the base (`pin`) while the view has not seen a write to
  it: were the base dropped first, the view would keep the value from before the write."""
  __slots__ = ("pin",)  # only ever written (no __init__: a view's link is made per movement op)


def pin_views(base: Any) -> None:
  """base's value changed: each view of it holds it until the view's node is made from the new value."""
  for ref in weakref.getweakrefs(base):
    if type(ref) is BaseRef:
      ref.pin = base


class Clock:
  """Counts the times any tensor's node was set. A view that was in sync at the current count is in sync without
  looking at its base: reading a view's node costs about what reading a base's does."""
  __slots__ = ("ticks",)

  def __init__(self) -> None:
    self.ticks = 0


CLOCK = Clock()


class ViewLink:
  """A view's base (held weakly, unless a step overlaps), the steps from it, the base's node the view's node was
  made from (weakly too: a realized view must not keep its base's old graph alive), and the clock count at which the
  two were last seen to agree."""
  __slots__ = ("base", "steps", "made_from", "seen", "base_shape")

  def __init__(self, base: Any, steps: tuple[tuple, ...], made_from: weakref.ref, overlaps: bool):
    self.base = _Held(base) if overlaps else BaseRef(base)
    self.steps, self.made_from, self.seen, self.base_shape = steps, made_from, CLOCK.ticks, base._uop.shape

  def sync(self, view: Any) -> UOp:
    """The view's node, made again from its base's if that changed; a view whose base is gone, or was given
    another shape (`replace(x, allow_shape_mismatch=True)`), becomes a base holding its last value."""
    base = self.base()
    if base is None or base._uop.shape != self.base_shape:
      view._view = None
    elif base._uop is not self.made_from():
      view._uop = self.values(base)[-1].uop
      self.synced(base)
    self.seen = CLOCK.ticks
    return view._uop

  def synced(self, base: Any) -> None:
    """The view now holds a node of the base's current value."""
    self.made_from, self.seen = weakref.ref(base._uop), CLOCK.ticks
    if type(self.base) is BaseRef:
      self.base.pin = None

  def values(self, base: Any) -> list[Any]:
    """The base's value and the value after each step."""
    out = [base._from(base._uop)]
    for step in self.steps:
      out.append(forward(step, out[-1]))
    return out


def make_view(view: Any, of: Any, step: tuple) -> Any:
  """Make `view`, computed from `of` by `step`, a view of of's base; returns it. A method that returned its input
  made no new tensor."""
  if view is of:
    return view
  link, overlaps = of._view, step[0] is Ops.EXPAND
  if link is not None and (base := link.base()) is not None:
    view._view = ViewLink(base, link.steps + (step,), link.made_from, overlaps or isinstance(link.base, _Held))
  else:
    view._view = ViewLink(of, (step,), weakref.ref(of._uop), overlaps)
  return view


def write(t: Any, node: UOp) -> None:
  """Give t the value `node`; a view writes its base (the region it covers), then holds `node`."""
  link = t._view
  base = link.base() if link is not None else None
  if base is None:
    t._view = None
    t.uop = node
    pin_views(t)
    return
  values, new = link.values(base), t._from(node)
  for step, x in zip(reversed(link.steps), reversed(values[:-1])):
    new = put_back(step, x, new)
  base.uop = new.uop
  pin_views(base)
  _WRITTEN[id(base)] = base
  t._uop = node
  link.synced(base)


# bases written through a view since they were last realized, by id (Tensor's == is elementwise, so no WeakSet)
_WRITTEN: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def with_written_bases(tensors: tuple) -> tuple:
  """tensors, after the base of each view among them that was written through since the base was last realized
  (first: a realized view then records the base's new node as the one it was made from)."""
  bases = []
  for t in tensors:
    base = t._view.base() if t._view is not None else None
    if base is not None and id(base) in _WRITTEN and all(base is not u for u in (*tensors, *bases)):
      bases.append(base)
  return tuple(bases) + tensors


def forget_written(tensors: tuple) -> None:
  for t in tensors:
    _WRITTEN.pop(id(t), None)
