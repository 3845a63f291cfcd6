"""Proving rewrite rules sound against alu.py, the way Alive2 proves LLVM's peephole rules.

A rule `pattern -> replacement` is sound when, for every dtype its pattern takes and every value of the pattern's
variables, the replacement computes the same bits as the node it replaces (any NaN equals any NaN) wherever that
node is defined, and is itself defined there: a rewrite may make an undefined lane defined, never change a defined
one (docs/SPEC.md). Every device shares the rewrites, so differential testing cannot see a wrong one: this can.

The prover cannot reason symbolically, so it tests densely. For each rule and each dtype of its domain it builds
left sides that match the pattern, with concrete-valued leaves (DEFINE_VAR nodes whose value ranges the rules'
side conditions read) and the pattern's variables filled by small random terms (`TERM_FORMS`: sums, products,
quotients, the div/mod idioms the lowering makes), applies the rule, and evaluates both sides with the graph
evaluator (alu.py's semantics) on the leaves' edge values, their neighbours and random values: exhaustively for
8-bit and bool leaves when the points fit. Usable on any rule list: `prove_rules(my_matcher)`.
"""
from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refgrad.dtype import DTYPES_BY_PRIORITY, DType, dtypes
from refgrad.interp.graph import evaluate_nodes
from refgrad.ops import OP_FACTS, infix
from refgrad.rewrite import PatternMatcher, Rule, UPat, rule_name
from refgrad.testing.edges import dtype_edges
from refgrad.testing.oracle.compare import compare
from refgrad.uop import GroupOp, Ops, UOp, canonical_const

MAX_LEAVES = 3        # distinct leaves per left side: the points grow as the product of their values
MAX_POINTS = 1 << 16  # a cross product of the leaves' values up to this size, else this many random combinations
RANDOM_VALUES = 48    # random values of a leaf beside its edges and their neighbours
DRAWS = 40            # rewrites proven per rule and dtype
ATTEMPTS = 8          # left sides drawn per rewrite wanted, at most

Inputs = dict[UOp, np.ndarray]  # leaf -> its values, one per point


# ---- leaves and their values
def leaf(name: str, dtype: DType, low: Any = None, high: Any = None) -> UOp:
  """A leaf of a left side: a variable of `dtype` whose value range is [low, high] (default: the dtype's)."""
  low = dtypes.min(dtype) if low is None else low
  high = dtypes.max(dtype) if high is None else high
  return UOp(Ops.DEFINE_VAR, dtype, (), (name, low, high))


def leaf_values(node: UOp, rng: np.random.Generator) -> np.ndarray:
  """The values a leaf takes: every value for a range of at most 256 integers (all of bool and of the 8-bit types),
  else the dtype's edges and their neighbours inside the range, the range's ends and their neighbours, and random
  values in it."""
  dtype, (_, low, high) = node.dtype, node.arg
  if dtype.kind == "f":
    return np.concatenate([dtype_edges(dtype), (rng.standard_normal(RANDOM_VALUES) * 10.0 **
                                                  rng.integers(-4, 5, RANDOM_VALUES)).astype(dtype.np)])
  if int(high) - int(low) < 256:
    return np.array(list(range(int(low), int(high) + 1)), dtype=object).astype(dtype.np)
  ends = [v + d for v in (int(low), int(high)) for d in (0, 1, -1)]
  edges = [int(v) for v in dtype_edges(dtype).tolist()]
  drawn = [int(v) for v in rng.integers(int(low), int(high), RANDOM_VALUES, dtype=np.uint64 if low >= 0 else np.int64,
                                        endpoint=True)]
  values = sorted({v for v in ends + edges + drawn if low <= v <= high})
  return np.array(values, dtype=object).astype(dtype.np)


def points(leaves: list[UOp], rng: np.random.Generator) -> Inputs:
  """Every combination of the leaves' values if there are at most MAX_POINTS, else MAX_POINTS random ones (each
  value of each leaf still appears: the first rows walk every leaf's values in order)."""
  values = [leaf_values(u, rng) for u in leaves]
  if int(np.prod([len(v) for v in values])) <= MAX_POINTS:
    grids = np.meshgrid(*values, indexing="ij") if values else []
    return {u: g.reshape(-1) for u, g in zip(leaves, grids)}
  picks = [np.concatenate([np.arange(len(v)) % len(v), rng.integers(0, len(v), MAX_POINTS)])[:MAX_POINTS]
           for v in values]
  return {u: v[p] for u, v, p in zip(leaves, values, picks)}


# ---- evaluating and comparing the two sides
@dataclass
class Counterexample:
  """A point where a rewrite changed a defined value (or made it undefined)."""
  rule: str
  dtype: DType
  before: UOp
  after: UOp
  inputs: dict[str, Any]
  expected: Any
  got: Any

  def __str__(self) -> str:
    shown = ", ".join(f"{name}={value!r}" for name, value in self.inputs.items()) or "no inputs"
    return (f"{self.rule} on {self.dtype.name}: {formula(self.before)} -> {formula(self.after)} with {shown}: "
            f"{self.expected!r} became {self.got!r}")


def evaluate(root: UOp, inputs: Inputs) -> tuple[np.ndarray, np.ndarray]:
  """A graph's values at every point (alu.py through the graph evaluator) and its undefined lanes."""
  size = len(next(iter(inputs.values()))) if inputs else 1
  value, undefined = evaluate_nodes(root, {u: (v, None) for u, v in inputs.items()})[root]
  mask = np.zeros(size, bool) if undefined is None else np.broadcast_to(undefined, (size,))
  return np.broadcast_to(value, (size,)), mask


def check_rewrite(before: UOp, after: UOp, inputs: Inputs, rule: str = "a rewrite") -> Counterexample | None:
  """The first point where `after` differs from `before` (bits, NaN == NaN) or is undefined where `before` is
  defined; None if there is none."""
  expected, undefined = evaluate(before, inputs)
  if after.dtype != before.dtype:
    return Counterexample(rule, before.dtype, before, after, {}, f"a {before.dtype.name}", f"a {after.dtype.name}")
  got, made_undefined = evaluate(after, inputs)
  result = compare(got, expected, undefined)
  bad = result.mismatches[:1] or np.flatnonzero(made_undefined & ~undefined)[:1].tolist()
  if not bad:
    return None
  lane = bad[0]
  shown = {u.arg[0]: v[lane].item() for u, v in inputs.items()}
  got_text = "undefined" if made_undefined[lane] else got[lane].item()
  return Counterexample(rule, before.dtype, before, after, shown, expected[lane].item(), got_text)


# ---- random terms for the pattern's variables
class Draw:
  """Builds one left side: its leaves (at most MAX_LEAVES, reused at random so terms share them) and terms."""

  def __init__(self, rng: random.Random):
    self.rng = rng
    self.leaves: list[UOp] = []

  def leaf(self, dtype: DType) -> UOp:
    same = [u for u in self.leaves if u.dtype == dtype]
    if same and (len(self.leaves) >= MAX_LEAVES or self.rng.random() < 0.4):
      return self.rng.choice(same)
    made = leaf("abcdefgh"[len(self.leaves) % 8], dtype, *self._range(dtype))
    self.leaves.append(made)
    return made

  def _range(self, dtype: DType) -> tuple[Any, Any]:
    """The whole dtype, or (integers) a range like an index's, a single value, or a random sub-range."""
    low, high = dtypes.min(dtype), dtypes.max(dtype)
    kind = self.rng.randrange(4) if dtype.kind in "iu" else 0
    if kind == 1:
      return 0, min(high, self.rng.choice([1, 3, 7, 15, 63, 255, 1000, 1 << 20]))
    if kind == 2:
      value = self.constant(dtype)
      return value, value
    if kind == 3:
      a, b = sorted(self.rng.randint(low, high) for _ in range(2))
      return a, b
    return low, high

  def constant(self, dtype: DType, positive: bool = False) -> Any:
    if dtype.kind == "b":
      return self.rng.random() < 0.5
    if dtype.kind == "f":
      return float(self.rng.choice(dtype_edges(dtype)).item())
    if positive:
      return self.rng.choice([1, 2, 3, 4, 7, 8, 16, 100, dtypes.max(dtype), self.rng.randint(1, dtypes.max(dtype))])
    small = [0, 1, 2, 3, 4, 7, 8, 16, 100, -1, -2, -4, -100]
    edges = [dtypes.min(dtype), dtypes.max(dtype), dtypes.max(dtype) - 1, dtypes.min(dtype) + 1]
    return canonical_const(dtype, self.rng.choice(small + edges + [self.rng.randint(dtypes.min(dtype),
                                                                                    dtypes.max(dtype))]))

  def const(self, dtype: DType, positive: bool = False) -> UOp:
    return UOp.const(dtype, self.constant(dtype, positive))

  def term(self, dtype: DType, depth: int = 2) -> UOp:
    forms = [build for kinds, build in TERM_FORMS.values() if dtype.kind in kinds]
    return self.rng.choice(forms[:2] if depth <= 0 else forms)(self, dtype, depth - 1)


def _other_int(draw: Draw, dtype: DType, depth: int) -> UOp:
  source = draw.rng.choice([d for d in DTYPES_BY_PRIORITY if dtypes.is_int(d)])
  return draw.term(source, depth).cast(dtype)


def _divmod_idiom(draw: Draw, dtype: DType, depth: int) -> UOp:
  """What flattening an unflattened index leaves: (x//c)*c*k + (x%c)*k, or with the quotient taken % m."""
  x, c, k = draw.term(dtype, depth), draw.const(dtype, positive=True), draw.const(dtype, positive=True)
  quotient = x // c if draw.rng.random() < 0.5 else (x // c) % draw.const(dtype, positive=True)
  return quotient * (c.arg * k.arg) + (x % c) * k


# name -> (dtype kinds, build(draw, dtype, depth left)); the first two end a term
TERM_FORMS: dict[str, tuple[str, Callable[[Draw, DType, int], UOp]]] = {
  "leaf": ("biuf", lambda d, dt, n: d.leaf(dt)),
  "const": ("biuf", lambda d, dt, n: d.const(dt)),
  "a+b": ("iuf", lambda d, dt, n: d.term(dt, n) + d.term(dt, n)),
  "a*c": ("iuf", lambda d, dt, n: d.term(dt, n) * d.const(dt)),
  "a*b": ("iuf", lambda d, dt, n: d.term(dt, n) * d.term(dt, n)),
  "-a": ("iuf", lambda d, dt, n: -d.term(dt, n)),
  "a//c": ("iu", lambda d, dt, n: d.term(dt, n) // d.const(dt, positive=True)),
  "a%c": ("iu", lambda d, dt, n: d.term(dt, n) % d.const(dt, positive=True)),
  "(a+c)*c": ("iu", lambda d, dt, n: (d.term(dt, n) + d.const(dt)) * d.const(dt)),
  "div/mod idiom": ("iu", _divmod_idiom),
  "a<b": ("b", lambda d, dt, n: d.term(dtypes.int32, n).lt(d.term(dtypes.int32, n))),
  "int cast": ("iu", _other_int),
}


# ---- left sides matching a pattern
def _same_kind(value: Any, dtype: DType) -> bool:
  """Whether a pattern's constant can be the arg of a CONST of `dtype` (args are kept as bool, int or float)."""
  return type(value) is type(canonical_const(dtype, value)) and canonical_const(dtype, value) == value


def _source_dtypes(op: Ops, dtype: DType, draw: Draw) -> tuple[DType, ...] | None:
  """Dtypes of the sources of an `op` node of `dtype` (a comparison's operands drawn), or None if it cannot be."""
  if op in (Ops.CAST, Ops.BITCAST):
    same_width = [d for d in DTYPES_BY_PRIORITY if d.itemsize == dtype.itemsize and dtypes.bool not in (d, dtype)]
    choices = same_width if op is Ops.BITCAST else DTYPES_BY_PRIORITY
    return (dtype if draw.rng.random() < 0.3 or not choices else draw.rng.choice(choices),) if choices else None
  if op not in OP_FACTS:
    return None
  if op in GroupOp.Comparison:
    operand = draw.rng.choice([d for d in DTYPES_BY_PRIORITY if d.kind in OP_FACTS[op].kinds])
    return (operand, operand) if dtype == dtypes.bool else None
  if dtype.kind not in OP_FACTS[op].kinds:
    return None
  return (dtypes.bool, dtype, dtype) if op is Ops.WHERE else (dtype,) * OP_FACTS[op].arity


def instantiate(pat: UPat, dtype: DType, draw: Draw, bound: dict[str, UOp]) -> UOp | None:
  """A node of `dtype` that `pat` can match, its variables filled by random terms; None if the draw cannot make one
  (an op the pattern allows but not on this dtype)."""
  if pat.name is not None and pat.name in bound:
    return bound[pat.name] if bound[pat.name].dtype == dtype else None
  if pat.dtypes is not None and dtype not in pat.dtypes:
    return None
  if pat.ops is None:
    node: UOp | None = draw.term(dtype)
  else:
    node = _instantiate_op(pat, draw.rng.choice(sorted(pat.ops, key=lambda o: o.value)), dtype, draw, bound)
  if node is not None and pat.name is not None:
    bound[pat.name] = node
  return node


def _instantiate_op(pat: UPat, op: Ops, dtype: DType, draw: Draw, bound: dict[str, UOp]) -> UOp | None:
  if op is Ops.DEFINE_VAR:  # a pattern that wants a leaf here
    return draw.leaf(dtype)
  if op is Ops.CONST:
    if not pat.has_arg:
      return draw.const(dtype)
    return UOp.const(dtype, pat.arg) if _same_kind(pat.arg, dtype) else None
  src_dtypes = _source_dtypes(op, dtype, draw)
  if src_dtypes is None:
    return None
  if pat.src is None or isinstance(pat.src, UPat):
    sub = [pat.src] * len(src_dtypes) if isinstance(pat.src, UPat) else [UPat()] * len(src_dtypes)
  elif len(pat.src) == len(src_dtypes):
    sub = list(pat.src)
  else:
    return None
  srcs = [instantiate(p, d, draw, bound) for p, d in zip(sub, src_dtypes)]
  if any(s is None for s in srcs):
    return None
  if isinstance(pat.src, list):
    draw.rng.shuffle(srcs)  # a commutative pattern matches its sources in any order
  return UOp(op, dtype, tuple(srcs))


# ---- proving a rule list
@dataclass
class RuleVerdict:
  """What the prover saw of one rule: on which dtypes it fired how often, over how many points, and where wrong."""
  index: int
  name: str
  pattern: str
  domain: list[DType]  # the dtypes a left side could be built for (the pattern's dtypes, ops and constants allow)
  fired: dict[DType, int] = field(default_factory=dict)
  points: int = 0
  counterexamples: list[Counterexample] = field(default_factory=list)

  @property
  def sound(self) -> bool:
    return not self.counterexamples

  @property
  def unexercised(self) -> list[DType]:
    """Dtypes of the domain on which no drawn left side made the rule fire."""
    return [d for d in self.domain if not self.fired.get(d)]


def describe(index: int, rule: Rule) -> tuple[str, str]:
  """A rule's name for reports (its function, where it is defined, its place in the list) and its pattern."""
  return f"rule {index}: {rule_name(rule[1])}", pattern_text(rule[0])


def pattern_text(pat: UPat) -> str:
  """A pattern in a line: OP[dtypes](sources), a variable by its name, a constant by its value."""
  if pat.ops is None:
    return pat.name or "_"
  ops = "|".join(sorted(o.name for o in pat.ops)) if len(pat.ops) <= 3 else f"{len(pat.ops)} ops"
  if pat.ops == {Ops.CONST}:
    return f"CONST {pat.arg!r}" if pat.has_arg else f"CONST {pat.name or ''}".strip()
  kinds = "" if pat.dtypes is None else f"[{len(pat.dtypes)} dtypes]"
  srcs = pat.src if isinstance(pat.src, (tuple, list)) else ([pat.src] if pat.src is not None else [])
  inner = ", ".join(pattern_text(s) for s in srcs) + (", ..." if isinstance(pat.src, UPat) else "")
  return f"{ops}{kinds}({inner})"


def apply_rule(rule: Rule, node: UOp) -> list[UOp]:
  """What `rule` rewrites `node` to, for each way its pattern matches (none if it does not fire)."""
  pat, fn = rule
  results = []
  for bindings in pat.match(node, {}):
    out = fn(ctx=None, **bindings) if "ctx" in inspect.signature(fn).parameters else fn(**bindings)
    if out is not None and out is not node and out not in results:
      results.append(out)
  return results


def prove_rule(index: int, rule: Rule, kinds: Iterable[DType] = DTYPES_BY_PRIORITY, draws: int = DRAWS,
               seed: int = 0) -> RuleVerdict:
  """Per dtype a pattern can match, draw left sides until the rule fired `draws` times (or ATTEMPTS times as many
  were drawn: side conditions fire on few), apply it, and compare both sides everywhere."""
  name, pattern = describe(index, rule)
  verdict = RuleVerdict(index, name, pattern, [])
  for dtype in kinds:
    rng, values_rng, seen = random.Random(f"{seed}/{index}/{dtype.name}"), np.random.default_rng(seed), set()
    for _ in range(draws * ATTEMPTS):
      draw = Draw(rng)
      before = instantiate(rule[0], dtype, draw, {})
      if before is None or before in seen or not rule[0].match(before, {}):
        continue
      seen.add(before)
      prove_instance(verdict, rule, before, draw.leaves, values_rng)
      if verdict.fired.get(dtype, 0) >= draws:
        break
    if seen:
      verdict.domain.append(dtype)
  return verdict


def prove_instance(verdict: RuleVerdict, rule: Rule, before: UOp, leaves: list[UOp],
                   rng: np.random.Generator) -> None:
  """Apply the rule to one left side and record what its rewrites do at every point."""
  try:
    results = apply_rule(rule, before)
  except Exception as e:  # a rule that crashes on a node it matches is a finding too
    verdict.counterexamples.append(Counterexample(verdict.name, before.dtype, before, before, {}, "a rewrite",
                                                  f"{type(e).__name__}: {e}"))
    return
  if not results:
    return
  inputs = points([u for u in leaves if u in before.toposort], rng)
  for after in results:
    verdict.fired[before.dtype] = verdict.fired.get(before.dtype, 0) + 1
    verdict.points += len(next(iter(inputs.values()))) if inputs else 1
    if (found := check_rewrite(before, after, inputs, verdict.name)) is not None:
      verdict.counterexamples.append(found)


def prove_rules(rules: PatternMatcher | list[Rule], kinds: Iterable[DType] = DTYPES_BY_PRIORITY,
                draws: int = DRAWS, seed: int = 0) -> list[RuleVerdict]:
  """Prove every rule of a rule list (a PatternMatcher or its list of (UPat, function)) on every dtype of `kinds`
  in its domain; one verdict per rule, in order."""
  listed = rules.rules if isinstance(rules, PatternMatcher) else list(rules)
  return [prove_rule(i, rule, kinds, draws, seed) for i, rule in enumerate(listed)]


# ---- showing a graph as a formula
def formula(u: UOp) -> str:
  """A left or right side as one line: leaves by name, constants by value, ops infix where they have a symbol."""
  if u.op is Ops.DEFINE_VAR:
    return u.arg[0]
  if u.op is Ops.CONST:
    return repr(u.arg)
  parts = [formula(s) for s in u.src]
  if symbol := infix(u.op):
    return f"({parts[0]} {symbol} {parts[1]})"
  if u.op is Ops.NEG:
    return f"-{parts[0]}"
  if u.op in (Ops.CAST, Ops.BITCAST):
    return f"{u.op.name.lower()}<{u.dtype.name}>({parts[0]})"
  return f"{u.op.name}({', '.join(parts)})"


def summary(verdicts: list[RuleVerdict]) -> str:
  """Rules, instances (rule x dtype where it fired), points, and the wrong rules with a counterexample each."""
  instances = sum(len(v.fired) for v in verdicts)
  lines = [f"{len(verdicts)} rules, {instances} instances (rule x dtype), {sum(v.points for v in verdicts)} points"]
  lines += [f"UNSOUND {v.name} {v.pattern}: {v.counterexamples[0]}" for v in verdicts if not v.sound]
  return "\n".join(lines)

