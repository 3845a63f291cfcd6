"""Data types: the dtypes of API.md, the promotion lattice, and numpy conversion."""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class DType:
  """A scalar element type. `priority` orders dtypes of the same kind; `kind` is 'b', 'i', 'u' or 'f'.

  There is one object per dtype (those of `dtypes`; unpickling returns them, see __reduce__), so == and hash are
  object identity, computed in C: every graph node's hash-consing key hashes its dtype."""
  name: str
  itemsize: int
  kind: str
  priority: int

  def __repr__(self) -> str:
    return f"dtypes.{self.name}"

  def __lt__(self, other: Any) -> bool:
    """Sorted as tinygrad sorts them: by priority (bool, the ints by width, signed first, then the floats), then
    item size and name."""
    if not isinstance(other, DType):
      return NotImplemented
    return (self.priority, self.itemsize, self.name) < (other.priority, other.itemsize, other.name)

  def __reduce__(self):
    return (_dtype_by_name, (self.name,))

  @property
  def bits(self) -> int:
    return self.itemsize * 8

  @property
  def np(self) -> np.dtype:
    return _TO_NUMPY[self.name]

  @property
  def fmt(self) -> str | None:
    """The struct module's (and memoryview's) format character; None for bfloat16, which has none."""
    return STRUCT_FORMATS.get(self.name)


def _dtype_by_name(name: str) -> DType:
  return getattr(dtypes, name)


class dtypes:  # noqa: N801 -- lower-case namespace, as in tinygrad and torch
  """Every dtype, aliases, and the questions one asks of a dtype."""
  bool = DType("bool", 1, "b", 0)
  int8 = DType("int8", 1, "i", 1)
  uint8 = DType("uint8", 1, "u", 2)
  int16 = DType("int16", 2, "i", 3)
  uint16 = DType("uint16", 2, "u", 4)
  int32 = DType("int32", 4, "i", 5)
  uint32 = DType("uint32", 4, "u", 6)
  int64 = DType("int64", 8, "i", 7)
  uint64 = DType("uint64", 8, "u", 8)
  float16 = DType("float16", 2, "f", 9)
  bfloat16 = DType("bfloat16", 2, "f", 10)
  float32 = DType("float32", 4, "f", 11)
  float64 = DType("float64", 8, "f", 12)

  # aliases
  half = float16
  float = float32
  double = float64
  char = int8
  uchar = uint8
  short = int16
  ushort = uint16
  int = int32
  uint = uint32
  long = int64
  ulong = uint64

  default_float: DType = float32
  default_int: DType = int32

  @staticmethod
  def is_float(dt: DType) -> bool:
    return dt.kind == "f"

  @staticmethod
  def is_int(dt: DType) -> bool:
    return dt.kind in "iu"

  @staticmethod
  def is_unsigned(dt: DType) -> bool:
    return dt.kind == "u"

  @staticmethod
  def is_bool(dt: DType) -> bool:
    return dt.kind == "b"

  @staticmethod
  def min(dt: DType) -> Any:
    if dt.kind == "b":
      return False
    if dt.kind in "iu":
      return int(np.iinfo(dt.np).min)
    return -float("inf")

  @staticmethod
  def max(dt: DType) -> Any:
    if dt.kind == "b":
      return True
    if dt.kind in "iu":
      return int(np.iinfo(dt.np).max)
    return float("inf")

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python scalar or nested list gets by itself: bool; for ints the first of default_int, int64,
    uint64 that holds them; default_float for floats."""
    return _dtype_of_python_value(x)

  @staticmethod
  def from_np(npdt: Any) -> DType:
    return from_numpy(npdt)

  @staticmethod
  def fields() -> dict[str, DType]:
    """Every dtype by each of its names, aliases included ('float32' and 'float', 'int8' and 'char'), as tinygrad."""
    return dict(_NAMED_DTYPES)

  @staticmethod
  def finfo(dt: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype, as tinygrad; TypeError for other dtypes."""
    if dt.kind != "f":
      raise TypeError(f"finfo needs a float dtype, got {dt.name}")
    return FLOAT_FORMATS[dt.name]

  @staticmethod
  def as_const(value: Any, dt: DType) -> Any:
    """value as the Python scalar a constant of dt holds (bool, int with C-style wraparound, or float)."""
    return as_python_scalar(dt, value)


ALL_DTYPES: dict[str, DType] = {v.name: v for v in vars(dtypes).values() if isinstance(v, DType)}
# the dtypes by every name, aliases included; not the defaults, which a user may point at another dtype
_NAMED_DTYPES: dict[str, DType] = {name: v for name, v in vars(dtypes).items()
                                   if isinstance(v, DType) and not name.startswith("default_")}
STRUCT_FORMATS: dict[str, str] = {"bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
                                  "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e", "float32": "f",
                                  "float64": "d"}
# void: the dtype of nodes that yield no value (STORE, SINK, RANGE ends); not a tensor dtype
dtypes.void = DType("void", 0, "v", -1)
# the dtypes of each kind, as tinygrad lists them
dtypes.floats = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.ints = dtypes.uints + dtypes.sints
FLOAT_FORMATS: dict[str, tuple[int, int]] = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23),
                                             "float64": (11, 52)}
DTYPES_BY_PRIORITY: list[DType] = sorted(ALL_DTYPES.values(), key=lambda d: d.priority)
# half and bfloat16 are computed in float32 and rounded to their format after every op (docs/SPEC.md): compiled
# backends hold them in float registers and store 16 bits. The short names name their conversion helpers.
EMULATED_16BIT: dict[DType, str] = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}
# the wide types converted to float32 with rounding to odd (see round_to_odd_source), and their helpers' short names
ODD_HELPER: dict[DType, str] = {dtypes.float64: "f64", dtypes.int64: "i64", dtypes.uint64: "u64"}


def round_to_odd_source(src: DType, dst: DType) -> DType | None:
  """How a compiled backend converts src to an emulated 16-bit float with a single rounding: None when float32 holds
  every src value exactly (convert to float32, then round once to dst); otherwise float64, int64 or uint64, the wide
  type to convert src to and from there to float32 rounding to odd, so that the second rounding to dst is correct."""
  exact_in_float32 = src.kind == "b" or src.bits <= (32 if src.kind == "f" else 16)
  if dst not in EMULATED_16BIT or exact_in_float32:
    return None
  return dtypes.float64 if src.kind == "f" else dtypes.uint64 if src.kind == "u" else dtypes.int64


def compute_dtype(dt: DType) -> DType:
  """The dtype a composite computation on dt runs in before one final rounding back to dt: float32 for half and
  bfloat16 (as torch does; rounding every intermediate in 16 bits would cost many ULP), dt itself otherwise."""
  return dtypes.float32 if dt in EMULATED_16BIT else dt

_TO_NUMPY: dict[str, np.dtype] = {name: np.dtype(ml_dtypes.bfloat16 if name == "bfloat16" else name)
                                  for name in ALL_DTYPES}
_FROM_NUMPY: dict[np.dtype, DType] = {npdt: ALL_DTYPES[name] for name, npdt in _TO_NUMPY.items()}


def from_numpy(npdt: Any) -> DType:
  """The refgrad dtype of a numpy dtype; TypeError for dtypes refgrad does not have."""
  try:
    return _FROM_NUMPY[np.dtype(npdt)]
  except (KeyError, TypeError):
    raise TypeError(f"numpy dtype {npdt!r} has no refgrad equivalent; supported: {', '.join(ALL_DTYPES)}") from None


class UnknownDTypeNameError(TypeError, AttributeError):
  """A dtype name dtypes does not have: torch's TypeError, and the AttributeError tinygrad's getattr(dtypes, name)
  raises."""


def to_dtype(x: Any) -> DType:
  """Accept a DType, a dtype name ('float32', 'half'), or a numpy dtype; TypeError otherwise."""
  if isinstance(x, DType):
    return x
  if isinstance(x, str):
    found = getattr(dtypes, x, None)
    if isinstance(found, DType):
      return found
    raise UnknownDTypeNameError(f"unknown dtype {x!r}; known dtypes: {', '.join(ALL_DTYPES)}")
  if x is bool:
    return dtypes.bool
  if x is int:
    return dtypes.default_int
  if x is float:
    return dtypes.default_float
  try:
    return from_numpy(x)
  except TypeError as e:  # neither a dtype nor a name: also the AttributeError tinygrad's to_dtype raises
    raise UnknownDTypeNameError(str(e)) from None


# The promotion lattice (as in tinygrad and JAX): each dtype lists the dtypes directly above it.
# Signed and unsigned of one width meet at the next wider signed type; uint64 and int64 meet at a float.
PROMOTES_TO: dict[DType, tuple[DType, ...]] = {
  dtypes.bool: (dtypes.int8, dtypes.uint8),
  dtypes.int8: (dtypes.int16,),
  dtypes.int16: (dtypes.int32,),
  dtypes.int32: (dtypes.int64,),
  dtypes.int64: (dtypes.float16, dtypes.bfloat16),
  dtypes.uint8: (dtypes.int16, dtypes.uint16),
  dtypes.uint16: (dtypes.int32, dtypes.uint32),
  dtypes.uint32: (dtypes.int64, dtypes.uint64),
  dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
  dtypes.float16: (dtypes.float32,),
  dtypes.bfloat16: (dtypes.float32,),
  dtypes.float32: (dtypes.float64,),
  dtypes.float64: (),
}


def _ancestors(dt: DType) -> set[DType]:
  found = {dt}
  for up in PROMOTES_TO[dt]:
    found |= _ancestors(up)
  return found


_ANCESTORS = {dt: frozenset(_ancestors(dt)) for dt in PROMOTES_TO}


def least_upper_dtype(*dts: DType) -> DType:
  """The smallest dtype every argument promotes to in the lattice."""
  common = frozenset.intersection(*(_ANCESTORS[to_dtype(d)] for d in dts))
  return min(common, key=lambda d: d.priority)


def least_upper_float(dt: DType) -> DType:
  """dt if it is a float, else the default float (true division, sqrt, exp ... of ints)."""
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)


class DTypeInferenceError(TypeError, RuntimeError):
  """A value no dtype is inferred for (`dtypes.from_py(None)`): a TypeError, and tinygrad's RuntimeError."""


def _dtype_of_python_value(x: Any) -> DType:
  if isinstance(x, (bool, np.bool_)):
    return dtypes.bool
  if isinstance(x, (int, np.integer)):
    return int_dtype_holding(int(x), int(x))
  if isinstance(x, (float, np.floating)):
    return dtypes.default_float
  if isinstance(x, (list, tuple)):
    return least_upper_dtype(*map(_dtype_of_python_value, x)) if len(x) else dtypes.default_float
  raise DTypeInferenceError(f"cannot infer a dtype for {type(x).__name__} value {x!r}")


# A Python int must fit some 64-bit integer: inside this range a value given an integer dtype wraps modulo 2**bits,
# as C, tinygrad and torch's scalar operands do; outside it no dtype can hold it and it is refused (docs/SPEC.md).
PYTHON_INT_RANGE = (-2**63, 2**64)


def check_python_int(x: int) -> int:
  """x itself, or OverflowError when no 64-bit integer holds it."""
  if not PYTHON_INT_RANGE[0] <= x < PYTHON_INT_RANGE[1]:
    raise OverflowError(f"Python int {short_int(x)} does not fit any integer dtype "
                        f"(int64 holds [-2**63, 2**63), uint64 [0, 2**64)); use a float dtype for it")
  return x


def short_int(x: int) -> str:
  """An int for a message: in full up to 30 digits, else its sign, leading digits and length."""
  digits = str(abs(x))
  return str(x) if len(digits) <= 30 else f"{'-' if x < 0 else ''}{digits[:6]}...({len(digits)} digits)"


def int_dtype_holding(lo: int, hi: int) -> DType:
  """The dtype Python ints from lo to hi get without a dtype given: default_int when it holds them, else int64,
  else uint64 (torch would refuse 2**63 .. 2**64-1; holding them is never wrong); OverflowError beyond."""
  check_python_int(lo), check_python_int(hi)
  for dt in (dtypes.default_int, dtypes.int64, dtypes.uint64):
    if dtypes.min(dt) <= lo and hi <= dtypes.max(dt):
      return dt
  raise OverflowError(f"Python ints from {short_int(lo)} to {short_int(hi)} have no common integer dtype (int64 "
                      f"holds [-2**63, 2**63), uint64 [0, 2**64)); give dtype= to wrap them, or use a float dtype")


def scalar_dtype_with(tensor_dtype: DType, scalar: Any) -> DType:
  """The dtype a Python scalar takes next to a tensor: the tensor's, when the scalar fits its kind."""
  if isinstance(scalar, (bool, np.bool_)) or (isinstance(scalar, (int, np.integer)) and tensor_dtype.kind in "iuf") \
     or (isinstance(scalar, (float, np.floating)) and tensor_dtype.kind == "f"):
    return tensor_dtype
  return _dtype_of_python_value(scalar)


def as_python_scalar(dt: DType, x: Any) -> Any:
  """Coerce a Python value to the kind of dt, with C-style wraparound for out-of-range integers."""
  if dt.kind == "b":
    return bool(x)
  if dt.kind in "iu":
    bits = dt.bits
    v = int(x) & ((1 << bits) - 1)
    return v - (1 << bits) if dt.kind == "i" and v >= 1 << (bits - 1) else v
  return float(x)


def _default_float_from_environment() -> None:
  """DEFAULT_FLOAT=HALF (any float dtype's name) sets dtypes.default_float at import, as tinygrad's variable does."""
  name = os.environ.get("DEFAULT_FLOAT", "")
  if not name:
    return
  chosen = _NAMED_DTYPES.get(name.lower())
  if chosen is None or not dtypes.is_float(chosen):
    floats = sorted(n for n, dt in _NAMED_DTYPES.items() if dtypes.is_float(dt))
    raise ValueError(f"DEFAULT_FLOAT={name!r} is not a float dtype; use one of {', '.join(floats)}")
  dtypes.default_float = chosen


_default_float_from_environment()
