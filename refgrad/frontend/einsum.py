"""einsum: parse a formula ("ij,jk->ik", "...ii->...i") and run it as diagonals, permutes, a broadcast product and
one sum. Only movement ops, MUL and a reduce: every backend that runs those runs einsum."""
from __future__ import annotations

import functools
from typing import Any

from refgrad.dtype import DType, compute_dtype, least_upper_dtype, to_dtype


class EinsumError(RuntimeError, ValueError, AssertionError):
  """A malformed einsum formula, the wrong number of operands or sizes that disagree: torch's RuntimeError, also a
  ValueError, and an AssertionError like tinygrad's asserts."""


ELLIPSIS_LETTERS = [chr(0x3B1 + i) for i in range(24)]  # stand-ins for the dims of "..." (user letters are ASCII)


def evaluate_einsum(formula: str, xs: tuple, acc_dtype: DType | str | None) -> Any:
  """The operands multiplied with their dims lined up by letter, summed over the letters not in the output."""
  if not isinstance(formula, str):
    raise TypeError(f"einsum(): the formula must be a str, got {type(formula).__name__}")
  lhs, arrow, rhs = formula.replace(" ", "").partition("->")
  terms = _einsum_terms(lhs.split(","), xs, formula)
  ellipsis = [c for c in ELLIPSIS_LETTERS if any(c in t for t in terms)]
  if arrow:
    out = _einsum_letters(rhs, ellipsis, formula)
    unknown = [c for c in out if not any(c in t for t in terms)]
    repeated = sorted({c for c in out if out.count(c) > 1})
    if unknown or repeated:
      raise EinsumError(f"einsum(): output subscripts {rhs!r} of {formula!r} must be distinct and appear in the "
                        f"inputs (not in the inputs: {unknown}, repeated: {repeated})")
  else:
    counts = {c: sum(t.count(c) for t in terms) for t in terms for c in t}
    out = ellipsis + sorted(c for c, k in counts.items() if k == 1 and c not in ellipsis)
  summed = list(dict.fromkeys(c for t in terms for c in t if c not in out))
  order = out + summed
  dt = least_upper_dtype(*(x.dtype for x in xs))
  diagonals = [_einsum_diagonals(x.cast(dt), t) for x, t in zip(xs, terms)]
  _check_sizes(diagonals, formula)
  aligned = [_einsum_align(x, t, order).cast(compute_dtype(dt)) for x, t in diagonals]  # half products: float32
  product = functools.reduce(lambda a, b: a * b, aligned)
  if summed:
    product = product.sum(tuple(range(len(out), len(order))), acc_dtype=acc_dtype)
  return product.cast(to_dtype(acc_dtype) if acc_dtype else dt)


def _einsum_letters(term: str, ellipsis: list[str], formula: str) -> list[str]:
  pre, dots, post = term.partition("...")
  if not all(c.isascii() and c.isalpha() for c in pre + post) or "." in post:
    raise EinsumError(f"einsum(): invalid subscripts {term!r} in {formula!r}: use letters and at most one '...'")
  return list(pre) + (ellipsis if dots else []) + list(post)


def _einsum_terms(inputs: list[str], xs: tuple, formula: str) -> list[list[str]]:
  """Each operand's letters, with "..." spelled out as stand-in letters aligned from the right."""
  if len(inputs) != len(xs):
    raise EinsumError(f"einsum(): {formula!r} names {len(inputs)} operands, but {len(xs)} were given")
  widest = max((x.ndim - len(t.replace("...", "")) for t, x in zip(inputs, xs) if "..." in t), default=0)
  terms = []
  for k, (term, x) in enumerate(zip(inputs, xs)):
    named = len(term.replace("...", ""))
    covered = x.ndim - named if "..." in term else 0
    letters = _einsum_letters(term, ELLIPSIS_LETTERS[widest - covered:widest] if covered >= 0 else [], formula)
    if len(letters) != x.ndim:
      raise EinsumError(f"einsum(): subscripts {term!r} name {named} dims, but operand {k} has shape {x.shape}")
    terms.append(letters)
  return terms


def _check_sizes(operands: list[tuple[Any, list[str]]], formula: str) -> None:
  """A subscript has one size in every operand, or 1 there (which broadcasts, as in torch)."""
  first: dict[str, tuple[int, int]] = {}  # subscript -> (its size, the operand that had it first)
  for k, (x, term) in enumerate(operands):
    for letter, size in zip(term, x.shape):
      if size == 1:
        continue
      seen, at = first.setdefault(letter, (size, k))
      if seen != size:
        name = repr(letter) if letter not in ELLIPSIS_LETTERS else "'...'"
        raise EinsumError(f"einsum(): subscript {name} of {formula!r} has size {seen} in operand {at} (shape "
                          f"{operands[at][0].shape}) but {size} in operand {k} (shape {x.shape})")


def _einsum_diagonals(x: Any, term: list[str]) -> tuple[Any, list[str]]:
  """Take the diagonal for each letter repeated within one operand ("ii->i")."""
  while (dup := next((c for c in term if term.count(c) > 1), None)) is not None:
    first, second = [i for i, c in enumerate(term) if c == dup][:2]
    n = x.shape[first]
    if x.shape[second] != n:
      raise EinsumError(f"einsum(): subscript {dup!r} is repeated for dims of different sizes {n} and "
                        f"{x.shape[second]} (operand shape {x.shape})")
    rest = [i for i in range(x.ndim) if i not in (first, second)]
    x = x.permute(*rest, first, second).reshape(*[x.shape[i] for i in rest], n * n)
    x = x.pad(((0, 0),) * len(rest) + ((0, n),)).reshape(*[x.shape[i] for i in range(len(rest))], n, n + 1)
    x = x.shrink(tuple((0, s) for s in x.shape[:-1]) + ((0, 1),)).reshape(x.shape[:-1])
    term = [term[i] for i in rest] + [dup]
  return x, term


def _einsum_align(x: Any, term: list[str], order: list[str]) -> Any:
  """Permute x's dims into `order` and add size-1 dims for the letters it lacks."""
  present = [c for c in order if c in term]
  x = x.permute(*[term.index(c) for c in present])
  return x.reshape(*[x.shape[present.index(c)] if c in term else 1 for c in order])
