"""Which rewrite rule to blame when the reference's kernel path disagrees with the graph evaluator.

Every device shares the symbolic rules (refgrad/codegen/simplify.py), so a wrong one makes the reference and every
device wrong together, and only the graph evaluator, which rewrites nothing, sees it. To name the rule, the kernel
is compiled and interpreted again with each rule left out in turn: the rules whose absence brings agreement back
are the suspects, and the prover (rules.py) convicts those it finds a counterexample for (leaving
out an innocent rule can also hide a wrong one, by changing what it matches).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from refgrad.codegen import simplify
from refgrad.codegen.pipeline import forget_compiled
from refgrad.rewrite import PatternMatcher
from refgrad.testing.oracle.rules import describe, prove_rule

PROOF_DRAWS = 20  # rewrites proven per dtype for each suspect: a counterexample shows up in the first few


@contextlib.contextmanager
def rule_left_out(index: int) -> Iterator[None]:
  """The symbolic rules without rule `index` for everything compiled inside (the compile caches are emptied on the
  way in and out, so no kernel compiled with the other rule set is reused)."""
  kept = simplify.symbolic_rules
  simplify.symbolic_rules = PatternMatcher([r for i, r in enumerate(kept.rules) if i != index])
  forget_compiled()
  try:
    yield
  finally:
    simplify.symbolic_rules = kept
    forget_compiled()


def suspects(agrees: Callable[[], bool]) -> list[int]:
  """The rules without which `agrees()` (compile and run the kernel again, compare with the graph evaluator) holds."""
  found = []
  for index in range(len(simplify.symbolic_rules.rules)):
    with rule_left_out(index):
      try:
        fixed = agrees()
      except Exception:  # without this rule the kernel does not compile or run: it says nothing about the rule
        fixed = False
    if fixed:
      found.append(index)
  return found


def blame(agrees: Callable[[], bool]) -> str:
  """One line per suspect rule, the convicted first with their counterexample; or why no rule is named."""
  rules = simplify.symbolic_rules.rules
  found = suspects(agrees)
  if not found:
    return (f"no rule to blame: leaving out any one of the {len(rules)} symbolic rules does not bring agreement "
            "back (the lowering, the linearizer, the kernel interpreter, or several rules together)")
  lines = []
  for index in found:
    name, pattern = describe(index, rules[index])
    verdict = prove_rule(index, rules[index], draws=PROOF_DRAWS)
    if verdict.sound:
      lines.append(f"suspect {name} {pattern}: without it the kernel agrees, but the prover found no counterexample")
    else:
      lines.insert(0, f"the rule to blame, {pattern}, proven wrong: {verdict.counterexamples[0]}")
  return "\n".join(lines)
