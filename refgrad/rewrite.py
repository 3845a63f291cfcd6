"""The rewrite engine: `UPat` patterns, a `PatternMatcher` indexed by op, and `graph_rewrite` to a fixed point.

Every transformation in refgrad is a list of (pattern, replacement function) rules. A replacement function
receives the named parts of the match as keyword arguments (plus `ctx` if it asks for it) and returns a new
UOp, or None to say "no change".
"""
from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from refgrad.dtype import DType
from refgrad.uop import Ops, UOp

_ANY = object()  # "match any arg"


class UPat:
  """A pattern over UOps.

  op: an Ops or a collection of Ops (None: any op).  dtype: a DType or collection (None: any).
  src: a tuple of UPats matched in order; a list of UPats matched in any order (commutative ops);
       a single UPat matched against every source (any number of sources).
  arg: the exact arg to match (omit for any).  name: bind the matched node under this name.
  allow_any_len: with a tuple src, the node may have more sources than the pattern lists.
  """
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = _ANY, name: str | None = None,
               allow_any_len: bool = False):
    self.ops = None if op is None else (frozenset({op}) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (frozenset({dtype}) if isinstance(dtype, DType) else frozenset(dtype))
    self.src = src
    self.arg = arg
    self.name = name
    self.allow_any_len = allow_any_len

  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(dtype=dtype, name=name)

  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, name=name)

  @staticmethod
  def const(value: Any, dtype: DType | Iterable[DType] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, arg=value)

  @property
  def has_arg(self) -> bool:
    """Whether the pattern matches one exact arg."""
    return self.arg is not _ANY

  def match(self, node: UOp, bound: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every way this pattern matches node, each as the bindings extended from `bound`."""
    if self.ops is not None and node.op not in self.ops:
      return []
    if self.dtypes is not None and node.dtype not in self.dtypes:
      return []
    if self.arg is not _ANY and not _same_arg(self.arg, node.arg):
      return []
    if self.name is not None:
      if self.name in bound and bound[self.name] is not node:
        return []
      bound = {**bound, self.name: node}
    if self.src is None:
      return [bound]
    if isinstance(self.src, UPat):
      return _match_sequence([self.src] * len(node.src), node.src, bound)
    if isinstance(self.src, list):
      if len(self.src) != len(node.src):
        return []
      results: list[dict[str, UOp]] = []
      for order in itertools.permutations(self.src):
        results.extend(_match_sequence(order, node.src, bound))
      return results
    if len(node.src) != len(self.src) and not (self.allow_any_len and len(node.src) >= len(self.src)):
      return []
    return _match_sequence(self.src, node.src[:len(self.src)], bound)

  def __repr__(self) -> str:
    ops = "any" if self.ops is None else "|".join(sorted(o.name for o in self.ops))
    return f"UPat({ops}, name={self.name!r})"


def _same_arg(want: Any, have: Any) -> bool:
  return type(want) is type(have) and want == have


def _match_sequence(pats: Iterable[UPat], nodes: tuple[UOp, ...], bound: dict[str, UOp]) -> list[dict[str, UOp]]:
  results = [bound]
  for pat, node in zip(pats, nodes):
    results = [extended for b in results for extended in pat.match(node, b)]
    if not results:
      break
  return results


Rule = tuple[UPat, Callable[..., UOp | None]]


class PatternMatcher:
  """An ordered list of rules, indexed by the op each pattern can start with."""

  def __init__(self, rules: list[Rule]):
    self.rules = rules
    self._by_op: dict[Ops | None, list[tuple[UPat, Callable[..., UOp | None], bool]]] = {}
    for pat, fn in rules:
      wants_ctx = "ctx" in inspect.signature(fn).parameters
      for op in (pat.ops if pat.ops is not None else (None,)):
        self._by_op.setdefault(op, []).append((pat, fn, wants_ctx))
    wildcard = self._by_op.get(None, [])
    if wildcard:  # rules that match any op are tried for every op, after the specific ones
      for op in list(self._by_op):
        if op is not None:
          self._by_op[op] = self._by_op[op] + wildcard

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    return PatternMatcher(self.rules + other.rules)

  def rewrite(self, node: UOp, ctx: Any = None) -> UOp | None:
    """The first rule's replacement for node, or None if no rule changes it."""
    return self.rewrite_with_rule(node, ctx)[0]

  def rewrite_with_rule(self, node: UOp, ctx: Any = None) -> tuple[UOp | None, Callable[..., UOp | None] | None]:
    """The first rule's replacement for node and the rule's function, or (None, None) if no rule changes it."""
    for pat, fn, wants_ctx in self._by_op.get(node.op, self._by_op.get(None, ())):
      for bindings in pat.match(node, {}):
        result = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
        if result is not None and result is not node:
          return result, fn
    return None, None


class RewriteLoopError(RuntimeError):
  """Rules that keep rewriting one node without reaching a fixed point (A -> B -> A, or ever-growing results)."""


# Successive rewrites of one node before graph_rewrite gives up: real rule sets need a handful.
MAX_REWRITE_CHAIN = 1000


def rule_name(fn: Callable[..., Any]) -> str:
  """Where a rule's function is defined, so an error can point at it."""
  code = getattr(fn, "__code__", None)
  where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
  return f"{getattr(fn, '__qualname__', repr(fn))}{where}"


def graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
  """Rewrite every node bottom-up until no rule applies anywhere; each distinct node is rewritten once.

  Raises RewriteLoopError, naming the rules, if one node is rewritten MAX_REWRITE_CHAIN times in a row."""
  done: dict[UOp, UOp] = {}
  # entries: (node, the replacement being rewritten or None, the rules that led to node)
  stack: list[tuple[UOp, UOp | None, tuple]] = [(root, None, ())]
  while stack:
    node, replacement, chain = stack[-1]
    if node in done:
      stack.pop()
      continue
    if replacement is not None:  # the replacement has been rewritten: node becomes its result
      done[node] = done[replacement]
      stack.pop()
      continue
    pending = [s for s in node.src if s not in done]
    if pending:
      stack.extend((s, None, ()) for s in reversed(pending))
      continue
    new_src = tuple(done[s] for s in node.src)
    rebuilt = node if new_src == node.src else node.replace(src=new_src)
    result, rule = matcher.rewrite_with_rule(rebuilt, ctx)
    if result is None:
      done[node] = rebuilt
      if rebuilt is not node:
        done.setdefault(rebuilt, rebuilt)
      stack.pop()
    elif result in done:
      done[node] = done[result]
      stack.pop()
    else:
      if len(chain) >= MAX_REWRITE_CHAIN:
        names = sorted({rule_name(fn) for fn in chain[-20:]})
        raise RewriteLoopError(f"graph_rewrite: a {node.op} node was rewritten {len(chain)} times in a row without "
                               f"reaching a fixed point; the rules involved: {'; '.join(names)}")
      stack[-1] = (node, result, chain)
      stack.append((result, None, chain + (rule,)))
  return done[root]
