"""The one IR: immutable, hash-consed `UOp(op, dtype, src, arg)` nodes and the `Ops` they carry."""
from __future__ import annotations

import functools
import hashlib
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from refgrad.alu import cast_python_int, exec_alu, exec_cast, result_dtype
from refgrad.dtype import DType, as_python_scalar, dtypes
from refgrad.ops import GroupOp, Ops, infix  # noqa: F401  (re-exported: the IR's users import them from here)
from refgrad.value_ranges import value_range

_KEYED = (float, bool, tuple)  # the arg types whose == would merge values a kernel must keep apart


def arg_key(arg: Any) -> Any:
  """Hash-consing key of an arg: keeps -0.0 apart from 0.0 and True apart from 1. A tuple of ints (a shape, an
  axis list: most args) is its own key, without a copy."""
  kind = type(arg)
  if kind is float:
    return ("float", arg.hex()) if not math.isnan(arg) else ("float", "nan")
  if kind is bool:
    return ("bool", arg)
  if kind is tuple:
    for a in arg:  # a loop, not any(): this runs for every node made
      if type(a) in _KEYED:
        return tuple(arg_key(a) for a in arg)
  return arg


class node_fact:  # noqa: N801  (a decorator, named like functools.cached_property)
  """A fact of a node computed on its first read and kept in the node's __dict__: functools.cached_property without
  the lock Python 3.11 takes on every first read (thousands of nodes are made a training step). Two threads reading a
  new node's fact at once both compute the same value, as a node never changes."""

  def __init__(self, compute: Callable[[Any], Any]):
    self.compute, self.name, self.__doc__ = compute, compute.__name__, compute.__doc__

  def __get__(self, node: Any, owner: type | None = None) -> Any:
    if node is None:
      return self
    value = node.__dict__[self.name] = self.compute(node)
    return value


def _forget(cache: dict[tuple, weakref.ref], key: tuple, dead: weakref.ref) -> None:
  """A node was collected: drop its cache entry, unless a new node of the same key has replaced it since. The cache
  comes bound, not looked up: at interpreter exit, module globals are gone before the last nodes."""
  if cache.get(key) is dead:
    del cache[key]


class UOp:
  """A node of the IR. Structurally equal nodes are the same object, so `is` and `==` agree: UOp keeps object's own
  identity `==` and hash (in C, so dict and set lookups on the hot paths cost no Python call)."""
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
  # key -> a weak reference to the node; an entry goes when its node does (_forget). A plain dict of weakrefs, not a
  # WeakValueDictionary: its get() and __setitem__ are Python calls, and the scheduler makes thousands of nodes a step
  _cache: dict[tuple, weakref.ref] = {}

  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any

  def __new__(cls, op: Ops, dtype: DType = dtypes.void,
              src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    key = (op, dtype, src, arg_key(arg))
    if (ref := UOp._cache.get(key)) is not None and (found := ref()) is not None:
      return found
    node = super().__new__(cls)
    object.__setattr__(node, "op", op)
    object.__setattr__(node, "dtype", dtype)
    object.__setattr__(node, "src", src)
    object.__setattr__(node, "arg", arg)
    UOp._cache[key] = weakref.ref(node, functools.partial(_forget, UOp._cache, key))
    return node

  def __setattr__(self, name: str, value: Any) -> None:
    if name in UOp.__slots__:
      raise AttributeError("UOp is immutable")
    object.__setattr__(self, name, value)

  def __reduce__(self):
    return (UOp, (self.op, self.dtype, self.src, self.arg))

  def replace(self, **kwargs: Any) -> UOp:
    src = tuple(kwargs["src"]) if "src" in kwargs else self.src
    return UOp(kwargs.get("op", self.op), kwargs.get("dtype", self.dtype), src, kwargs.get("arg", self.arg))

  # ---- graph walks
  @property
  def toposort(self) -> tuple[UOp, ...]:
    """Every node reachable from self, each after its sources (self last)."""
    return (*self._below, self)

  @node_fact
  def _below(self) -> tuple[UOp, ...]:
    """toposort without self, which is what a node keeps: a node holding itself would be a reference cycle, alive
    (with the values recorded on it, schedule._REALIZED) until the cyclic collector runs, so what later schedules
    found, and which kernels they ran, depended on when it last ran."""
    order: list[UOp] = []
    seen: set[UOp] = {self}
    stack: list[tuple[UOp, bool]] = [(s, False) for s in self.src[::-1]]
    while stack:
      node, expanded = stack.pop()
      if node in seen:
        continue
      if expanded:
        seen.add(node)
        order.append(node)
        continue
      stack.append((node, True))
      stack.extend((s, False) for s in reversed(node.src) if s not in seen)
    return tuple(order)

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    """Rebuild the graph with some nodes replaced."""
    rebuilt: dict[UOp, UOp] = {}
    for node in self.toposort:
      if node in mapping:
        rebuilt[node] = mapping[node]
      else:
        new_src = tuple(rebuilt[s] for s in node.src)
        rebuilt[node] = node if new_src == node.src else node.replace(src=new_src)
    return rebuilt[self]

  @node_fact
  def digest(self) -> bytes:
    """A digest of the node's structure, the same in every process (object ids and Python's hashes of strings are
    not): it breaks ties where nodes must be put in an order (a sum's terms), so that a kernel renders to the same
    source, and the same compile cache key, in every process. A walk that computes its sources' digests first,
    stopping at nodes that have one."""
    stack = [self]
    while stack:
      node = stack[-1]
      if "digest" in node.__dict__:
        stack.pop()
      elif missing := [s for s in node.src if "digest" not in s.__dict__]:
        stack.extend(missing)
      else:
        stack.pop()
        text = f"{node.op.value}|{node.dtype.name}|{node.arg!r}|".encode() + b"".join(s.digest for s in node.src)
        node.__dict__["digest"] = hashlib.blake2b(text, digest_size=8).digest()
    return self.__dict__["digest"]

  # ---- tensor-graph facts
  @node_fact
  def shape(self) -> tuple[int, ...]:
    return infer_shape(self)

  @node_fact
  def device(self) -> str | tuple[str, ...]:
    """The device name; a tuple of names for a tensor over several devices (a MULTI, or a constant on them)."""
    if self.op is Ops.MULTI:
      return tuple(s.device for s in self.src)
    if self.op is Ops.DEVICE:
      return self.arg
    if self.op is Ops.BUFFER:
      return self.arg.device
    if self.op is Ops.COPY:
      return self.arg
    if self.op is Ops.ALLREDUCE:
      return self.arg[1]
    return self.src[0].device

  # ---- construction helpers (used by the lowering and by tests)
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    return UOp(Ops.CONST, dtype, (), canonical_const(dtype, value))

  def alu(self, op: Ops, *others: UOp) -> UOp:
    src = (self, *others)
    return UOp(op, result_dtype(op, tuple([u.dtype for u in src])), src)

  def _binary(self, op: Ops, other: Any, reverse: bool = False) -> UOp:
    if not isinstance(other, (UOp, bool, int, float, np.integer, np.floating)):
      return NotImplemented  # a Tensor: `v * t` is the tensor's t.__rmul__(v)
    other_uop = other if isinstance(other, UOp) else UOp.const(self.dtype, other)
    return other_uop.alu(op, self) if reverse else self.alu(op, other_uop)

  def __add__(self, other: Any) -> UOp: return self._binary(Ops.ADD, other)  # noqa: E704
  def __radd__(self, other: Any) -> UOp: return self._binary(Ops.ADD, other, True)  # noqa: E704
  def __mul__(self, other: Any) -> UOp: return self._binary(Ops.MUL, other)  # noqa: E704
  def __rmul__(self, other: Any) -> UOp: return self._binary(Ops.MUL, other, True)  # noqa: E704
  def __floordiv__(self, other: Any) -> UOp: return self._binary(Ops.IDIV, other)  # noqa: E704
  def __rfloordiv__(self, other: Any) -> UOp: return self._binary(Ops.IDIV, other, True)  # noqa: E704
  def __mod__(self, other: Any) -> UOp: return self._binary(Ops.MOD, other)  # noqa: E704
  def __rmod__(self, other: Any) -> UOp: return self._binary(Ops.MOD, other, True)  # noqa: E704
  def __ne__(self, other: Any) -> bool:
    """`==` is identity (hash-consing); `!=` of two sizes is decided by their difference when it is a number, so
    2 * n + 3 != n * 2 + 3 is False however they were built."""
    if isinstance(other, (UOp, int)) and self.dtype.kind == "i" and self.op in _SIZE_OPS | {Ops.CONST}:
      difference = size_sum((self, 1), (other, -1))
      if isinstance(difference, int):
        return difference != 0
    return self is not other

  # comparisons make nodes, as tinygrad's do; `==` stays identity (hash-consing): use ne() for a node
  def __lt__(self, other: Any) -> UOp: return self._binary(Ops.CMPLT, other)  # noqa: E704
  def __gt__(self, other: Any) -> UOp: return self._binary(Ops.CMPLT, other, True)  # noqa: E704
  def __le__(self, other: Any) -> UOp: return _negated(self._binary(Ops.CMPLT, other, True))  # noqa: E704
  def __ge__(self, other: Any) -> UOp: return _negated(self._binary(Ops.CMPLT, other))  # noqa: E704
  def __neg__(self) -> UOp: return self.alu(Ops.NEG)  # noqa: E704
  def __sub__(self, other: Any) -> UOp: return self + (-other if not isinstance(other, UOp) else other.alu(Ops.NEG))  # noqa: E704,E501
  def __rsub__(self, other: Any) -> UOp: return (-self) + other  # noqa: E704
  def lt(self, other: Any) -> UOp: return self._binary(Ops.CMPLT, other)  # noqa: E704
  def ne(self, other: Any) -> UOp: return self._binary(Ops.CMPNE, other)  # noqa: E704
  def logical_and(self, other: UOp) -> UOp: return self.alu(Ops.AND, other)  # noqa: E704
  def where(self, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (self, a, b))  # noqa: E704
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))  # noqa: E704,E501

  @node_fact
  def vrange(self) -> tuple[Any, Any]:
    """(lowest, highest) value this integer node can take; see refgrad/value_ranges.py."""
    return value_range(self)

  @property
  def vmin(self) -> Any:
    return self.vrange[0]

  @property
  def vmax(self) -> Any:
    return self.vrange[1]

  # ---- symbolic sizes (refgrad/symbolic_shapes.py)
  def bind(self, value: int) -> UOp:
    """This Variable bound to a value in [min, max]: usable as a size, and run with that value."""
    if self.op is not Ops.DEFINE_VAR:
      raise TypeError(f"bind: only a Variable can be bound, not a {self.op.name} node")
    name, low, high = self.arg
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
      raise TypeError(f"bind: Variable {name!r} takes an int, got {type(value).__name__}")
    if not low <= value <= high:
      raise ValueError(f"bind: {value} is outside [{low}, {high}], the range of Variable {name!r}")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, int(value))))

  @property
  def val(self) -> Any:
    """The value of an expression of bound Variables and constants (`Variable("n", 1, 9).bind(3) * 4` is 12)."""
    return evaluate(self)

  def unbind(self) -> tuple[UOp, int]:
    """(the Variable, its value) of a bound variable."""
    if self.op is not Ops.BIND:
      raise TypeError(f"unbind: a {self.op.name} node is not a bound Variable")
    return self.src[0], self.src[1].arg

  # ---- printing
  def __repr__(self) -> str:
    symbolic = self.op in GroupOp.Comparison or (self.op in _SIZE_OPS and self.dtype.kind == "i")
    if symbolic and any(u.op is Ops.DEFINE_VAR for u in self.toposort):
      return render_size(self)
    return render_tree(self)

  def __iter__(self) -> Iterator[UOp]:
    raise TypeError("UOp is not iterable")

  def __bool__(self) -> bool:
    """A comparison of sizes is true or false when it is so for every value of its Variables (`n > 0` of a
    Variable in [1, 10]), as in tinygrad; any other node is an object, and true."""
    if self.dtype != dtypes.bool or self.op not in GroupOp.Comparison:
      return True
    low, high = _truth_range(self)
    if low != high:
      raise ValueError(f"{render_size(self)} is true for some values of its Variables and false for others; compare "
                       f"the bound values (.val) instead")
    return bool(low)


def _truth_range(c: UOp) -> tuple[Any, Any]:
  """(lowest, highest) truth of a comparison. Two sizes compare by the range of their difference, whose common
  terms cancel: n < n + 1 is true for every n although the ranges of its sides, taken apart, overlap."""
  a, b = c.src
  if c.op is Ops.CMPNE and b.op is Ops.CONST and b.dtype == dtypes.bool and a.op in GroupOp.Comparison:
    inner_low, inner_high = _truth_range(a)  # a negation (n <= m is not m < n)
    return (not inner_high, not inner_low) if b.arg else (inner_low, inner_high)
  if c.op in (Ops.CMPLT, Ops.CMPNE) and all(x.dtype.kind == "i" and x.op in _SIZE_OPS | {Ops.CONST} for x in c.src):
    difference = size_sum((a, 1), (b, -1))
    low, high = (difference, difference) if isinstance(difference, int) else difference.vrange
    if c.op is Ops.CMPLT:
      return high < 0, low < 0
    return low > 0 or high < 0, not low == high == 0
  return c.vrange


def _negated(comparison: Any) -> Any:
  return comparison if comparison is NotImplemented else comparison.ne(True)


# (dtype, Python type, arg_key of the value) -> the canonical constant: rounding through numpy costs ~20 us, and a
# training step makes the same few constants (0, 1, eps, the betas) dozens of times; bounded, cleared when full
_CANONICAL: dict[tuple, Any] = {}
_CANONICAL_SIZE = 4096


def canonical_const(dtype: DType, value: Any) -> Any:
  """Store constants as the Python type of their dtype's kind (bool, int with wraparound, float), holding the
  value the dtype can represent: floats are rounded to the dtype and float -> int truncates, both by alu.py."""
  kind = type(value)
  key = (dtype, kind, arg_key(value)) if kind is float or kind is int or kind is bool else None
  if key is not None and (found := _CANONICAL.get(key)) is not None:
    return found
  if dtype.kind == "f" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    out = cast_python_int(int(value), dtype)
  elif dtype.kind == "f" or (dtype.kind in "iu" and isinstance(value, float)):
    converted = exec_cast(np.array(float(value), np.float64), dtype)
    out = float(converted) if dtype.kind == "f" else int(converted)
  else:
    out = as_python_scalar(dtype, value)
  if key is not None:
    if len(_CANONICAL) >= _CANONICAL_SIZE:
      _CANONICAL.clear()
    _CANONICAL[key] = out
  return out


_SIZE_OPS = frozenset({Ops.DEFINE_VAR, Ops.BIND, Ops.ADD, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.MOD, Ops.MAX})


def evaluate(u: UOp, values: dict[UOp, int] | None = None) -> Any:
  """The value of an expression of constants and Variables, each op as alu.py defines it: a bound Variable has
  its value, an unbound one its entry in `values`."""
  return _evaluate(u, values or {}, {}).item()


def _evaluate(u: UOp, values: dict[UOp, int], found: dict[UOp, np.ndarray]) -> np.ndarray:
  if u in found:
    return found[u]
  if u.op is Ops.CONST and not isinstance(u.arg, UOp):
    out = np.array(u.arg, u.dtype.np)
  elif u.op is Ops.BIND:
    out = np.array(u.src[1].arg, u.dtype.np)
  elif u.op is Ops.DEFINE_VAR:
    if u not in values:
      raise ValueError(f"Variable {u.arg[0]!r} has no value here: bind it (Variable(...).bind(value))")
    out = np.array(values[u], u.dtype.np)
  elif u.op in GroupOp.ALU:
    out = exec_alu(u.op, u.dtype, *(_evaluate(s, values, found) for s in u.src))
  else:
    raise TypeError(f"a size cannot be made with {u.op.name}")
  found[u] = out
  return out


def render_size(u: UOp) -> str:
  """A symbolic size as a formula: a bound Variable as name=value ("n=3"), an unbound one by its range."""
  if u.op is Ops.BIND:
    return f"{u.src[0].arg[0]}={u.src[1].arg}"
  if u.op is Ops.DEFINE_VAR:
    return f"{u.arg[0]}[{u.arg[1]}..{u.arg[2]}]"
  if u.op is Ops.CONST:
    return str(u.arg)
  if u.op is Ops.NEG:
    return f"-{render_size(u.src[0])}"
  if u.op is Ops.MAX:
    return f"max({render_size(u.src[0])}, {render_size(u.src[1])})"
  if u.op is Ops.CMPNE and u.src[0].op is Ops.CMPLT and u.src[1].op is Ops.CONST and u.src[1].arg is True:
    return f"({render_size(u.src[0].src[1])} <= {render_size(u.src[0].src[0])})"  # not (a < b) is b <= a
  if symbol := infix(u.op):
    return f"({render_size(u.src[0])} {symbol} {render_size(u.src[1])})"
  return render_tree(u)


def render_tree(root: UOp, max_nodes: int = 60) -> str:
  """A readable, numbered listing of a graph: one line per node, sources by number."""
  nodes = root.toposort
  number = {n: i for i, n in enumerate(nodes)}
  lines = []
  for n in nodes[-max_nodes:]:
    srcs = ", ".join(f"%{number[s]}" for s in n.src)
    arg = "" if n.arg is None else f" arg={n.arg!r}"
    lines.append(f"%{number[n]} = {n.op.name}:{n.dtype.name}({srcs}){arg}")
  if len(nodes) > max_nodes:
    lines.insert(0, f"... {len(nodes) - max_nodes} earlier nodes")
  return "\n".join(lines)


# ---- shape inference for tensor-graph nodes: one small function per op kind
def _elementwise_shape(u: UOp) -> tuple[int, ...]:
  return u.src[0].shape if u.op is not Ops.WHERE else u.src[1].shape


def _reduce_shape(u: UOp) -> tuple[int, ...]:
  _, axes = u.arg
  return tuple(1 if i in axes else s for i, s in enumerate(u.src[0].shape))


def _permute_shape(u: UOp) -> tuple[int, ...]:
  return tuple(u.src[0].shape[i] for i in u.arg)


def _pad_shape(u: UOp) -> tuple[int, ...]:
  return tuple(size_sum((s, 1), (before, 1), (after, 1)) for s, (before, after) in zip(u.src[0].shape, u.arg))


def _shrink_shape(u: UOp) -> tuple[int, ...]:
  return tuple(size_sum((end, 1), (start, -1)) for start, end in u.arg)


# ---- sums of sizes (a size is an int or an expression of bound Variables, refgrad/symbolic_shapes.py), kept in
# one form so that sizes equal for every value are one node: n + (6 - n) is 6, and n + 2 is one node however it
# was built
def _terms(size: Any, scale: int, into: dict[UOp, int]) -> int:
  """Add scale * size to `into` (atom -> coefficient); returns the constant part."""
  if not isinstance(size, UOp):
    return scale * size
  if size.op is Ops.CONST:
    return scale * size.arg
  if size.op is Ops.ADD:
    return _terms(size.src[0], scale, into) + _terms(size.src[1], scale, into)
  if size.op is Ops.NEG:
    return _terms(size.src[0], -scale, into)
  if size.op is Ops.MUL and Ops.CONST in (size.src[0].op, size.src[1].op):  # n * 4 or 4 * n
    factor, other = size.src if size.src[0].op is Ops.CONST else size.src[::-1]
    return _terms(other, scale * factor.arg, into)
  into[size] = into.get(size, 0) + scale
  return 0


def _atom_key(atom: UOp) -> tuple:
  return (atom.src[0].arg[0], atom.src[1].arg) if atom.op is Ops.BIND else (render_tree(atom), 0)


def size_sum(*scaled: tuple[Any, int]) -> Any:
  """The sum of scale * size over (size, scale) pairs, as an int when no Variable is left."""
  if all(type(size) is int for size, _ in scaled):  # every pad and shrink of a concrete shape: nothing to collect
    return sum(size * scale for size, scale in scaled)
  atoms: dict[UOp, int] = {}
  constant = sum(_terms(size, scale, atoms) for size, scale in scaled)
  out: Any = None
  for atom in sorted((a for a, c in atoms.items() if c), key=_atom_key):
    term = atom if atoms[atom] == 1 else atom * atoms[atom]
    out = term if out is None else out + term
  if out is None:
    return constant
  return out if constant == 0 else out + constant


def _multi_shape(u: UOp) -> tuple[int, ...]:
  axis, bounds = u.arg
  shape = u.src[0].shape
  return shape if axis is None else shape[:axis] + (max(end for _, end in bounds),) + shape[axis + 1:]


SHAPE_RULES: dict[Ops, Callable[[UOp], tuple[int, ...]]] = {
  Ops.CONST: lambda u: (),
  Ops.DEVICE: lambda u: (),
  Ops.BUFFER: lambda u: (u.arg.size,),
  Ops.PARAM: lambda u: (u.arg[1],),
  Ops.RESHAPE: lambda u: u.arg,
  Ops.EXPAND: lambda u: u.arg,
  Ops.PERMUTE: _permute_shape,
  Ops.PAD: _pad_shape,
  Ops.SHRINK: _shrink_shape,
  Ops.FLIP: lambda u: u.src[0].shape,
  Ops.REDUCE_AXIS: _reduce_shape,
  Ops.CONTIGUOUS: lambda u: u.src[0].shape,
  Ops.DETACH: lambda u: u.src[0].shape,
  Ops.CUSTOM_GRAD: lambda u: u.src[0].shape,
  Ops.MULTI: _multi_shape,
  Ops.ALLREDUCE: lambda u: u.src[0].shape,
  Ops.COPY: lambda u: u.src[0].shape,
  Ops.ASSIGN: lambda u: u.src[0].shape,
  Ops.CAST: lambda u: u.src[0].shape,
  Ops.BITCAST: lambda u: u.src[0].shape,
}


def infer_shape(u: UOp) -> tuple[int, ...]:
  if u.op in GroupOp.ALU:
    return _elementwise_shape(u)
  if (rule := SHAPE_RULES.get(u.op)) is not None:
    return rule(u)
  raise TypeError(f"{u.op} is not a tensor-graph op and has no shape")


def prod(xs: Any) -> int:
  out = 1
  for x in xs:
    out *= x
  return out


def walk(roots: list[UOp], leaf: Callable[[UOp], bool]) -> list[UOp]:
  """The nodes reachable from roots, each after its sources, not looking below a node where leaf(node) holds."""
  order: list[UOp] = []
  seen: set[UOp] = set()
  stack = [(root, False) for root in reversed(roots)]
  while stack:
    node, expanded = stack.pop()
    if node in seen:
      continue
    if expanded or leaf(node):
      seen.add(node)
      order.append(node)
      continue
    stack.append((node, True))
    stack.extend((s, False) for s in reversed(node.src) if s not in seen)
  return order
