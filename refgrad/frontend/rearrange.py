"""rearrange's formulas (einops style, "b (h w) c -> b h w c") parsed into a reshape, a permute and a reshape."""
from __future__ import annotations

from collections.abc import Sequence

from refgrad.frontend.shapes import ShapeError, is_int
from refgrad.uop import prod


class RearrangeError(ValueError, AssertionError, RuntimeError):
  """A malformed rearrange pattern: a ValueError, an AssertionError like tinygrad's asserts, and a RuntimeError like
  einops' EinopsError."""


class RearrangeSizeError(ShapeError, AssertionError):
  """Axis sizes that do not fit the tensor's shape: a ShapeError, and an AssertionError like tinygrad's asserts."""


def _is_axis_name(token: str) -> bool:
  """einops' rule: a Python identifier that neither starts nor ends with '_'."""
  return token.isidentifier() and not token.startswith("_") and not token.endswith("_")


def _parse_side(side: str, formula: str) -> list[Sequence[str]]:
  """'b (h w) 1 ...' -> [['b'], ['h', 'w'], [], ('...',)]: each axis as the names merged into it; a standalone
  ellipsis is the tuple ('...',) (it stands for several axes), one inside parentheses is merged like a name."""
  axes: list[Sequence[str]] = []
  group: list[str] | None = None
  for token in side.replace("(", " ( ").replace(")", " ) ").split():
    if token == "(" and group is None:
      group = []
    elif token == ")" and group is not None:
      axes.append(group)
      group = None
    elif token in ("(", ")"):
      raise RearrangeError(f"rearrange: unbalanced or nested parentheses in {formula!r}")
    elif token == "1":
      if group is None:
        axes.append([])
    elif token == "..." or _is_axis_name(token):
      if group is not None:
        group.append(token)
      else:
        axes.append(("...",) if token == "..." else [token])
    else:
      raise RearrangeError(f"rearrange: invalid axis name {token!r} in {formula!r} (names are identifiers that "
                           "neither start nor end with '_')")
  if group is not None:
    raise RearrangeError(f"rearrange: unbalanced parentheses in {formula!r}")
  return axes


def _expand_ellipsis(lhs: list, rhs: list, ndim: int, formula: str) -> tuple[list, list]:
  """Replace "..." by one name per dim it stands for: separate axes where it stands alone, one merged axis where
  it sits inside parentheses (only allowed on the right)."""
  if any("..." in g and not isinstance(g, tuple) for g in lhs):
    raise RearrangeError(f"rearrange: '...' cannot be inside parentheses on the left of {formula!r}")
  if ("...",) not in lhs:
    return lhs, rhs
  names = [f"...{i}" for i in range(max(ndim - len(lhs) + 1, 0))]

  def expand(side: list) -> list:
    out: list = []
    for g in side:
      out += [[n] for n in names] if isinstance(g, tuple) else [[n for x in g for n in (names if x == "..." else [x])]]
    return out
  return expand(lhs), expand(rhs)


def plan_rearrange(formula: str, shape: tuple[int, ...], sizes: dict[str, int]) -> tuple[tuple, tuple, tuple]:
  """(shape with every named axis split out, permutation to the right side's order, final shape)."""
  if not isinstance(formula, str):
    raise TypeError(f"rearrange: formula must be a str, got {type(formula).__name__}")
  formula = formula.replace("\u2026", "...")  # einops accepts the unicode ellipsis too
  if formula.count("->") != 1:
    raise RearrangeError(f"rearrange: need exactly one '->' in {formula!r}, found {formula.count('->')}")
  lhs, rhs = (_parse_side(s, formula) for s in formula.split("->"))
  for side, where in ((lhs, "left"), (rhs, "right")):
    names = [n for g in side for n in g]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
      raise RearrangeError(f"rearrange: {repeated} repeated on the {where} side of {formula!r}")
  left, right = ({n for g in side for n in g} for side in (lhs, rhs))
  if left != right:
    only = [f"{sorted(a - b)} only on the {where}" for a, b, where in ((left, right, "left"), (right, left, "right"))
            if a - b]
    raise RearrangeError(f"rearrange: the two sides of {formula!r} must name the same axes: {' and '.join(only)}")
  if unused := set(sizes) - left:
    raise RearrangeError(f"rearrange: sizes given for axes {sorted(unused)} that {formula!r} does not use")
  lhs, rhs = _expand_ellipsis(lhs, rhs, len(shape), formula)
  if len(lhs) != len(shape):
    raise RearrangeSizeError(f"rearrange: the left side of {formula!r} has {len(lhs)} axes but the tensor has "
                             f"shape {shape}")
  size_of = dict(sizes)
  for group, dim_size in zip(lhs, shape):
    size_of.update(_group_sizes(group, dim_size, sizes, formula))
  split = [n for g in lhs for n in g]
  return (tuple(size_of[n] for n in split), tuple(split.index(n) for g in rhs for n in g),
          tuple(prod(size_of[n] for n in g) for g in rhs))


def _group_sizes(group: list[str], dim_size: int, sizes: dict[str, int], formula: str) -> dict[str, int]:
  """Sizes of the names merged into one input dim: all but at most one must be given."""
  unknown = [n for n in group if n not in sizes]
  if len(unknown) > 1:
    raise RearrangeError(f"rearrange: cannot infer the sizes of {unknown} in {formula!r}; pass all but one as "
                         "keywords")
  for n in group:
    if n in sizes and not is_int(sizes[n]):
      raise TypeError(f"rearrange: size of {n!r} must be an int, got {sizes[n]!r}")
  known = prod(sizes[n] for n in group if n in sizes)
  inferred = dim_size // known if known and dim_size % known == 0 else None
  if (unknown and inferred is None) or (not unknown and known != dim_size):
    raise RearrangeSizeError(f"rearrange: axes {group or '1'} of sizes {[sizes.get(n, '?') for n in group]} do not "
                             f"fit dim size {dim_size} in {formula!r}")
  return {unknown[0]: inferred} if unknown else {}
