"""Pickles as lists of opcodes to mutate, a small assembler for writing them, and the payloads that would create a
canary file if any unpickler ran them.

Opcode facts used (from the pickle protocol's documentation and pickletools): an opcode is one byte followed by its
argument; GLOBAL ('c') and INST ('i') name a module and a name on two newline-ended lines, STACK_GLOBAL takes both
from the stack; REDUCE calls a callable with an argument tuple, OBJ and INST call a class, NEWOBJ calls cls.__new__,
BUILD calls the object's __setstate__ (an instance attribute counts) or updates its __dict__; BINPERSID hands the top
of the stack to persistent_load; STOP ends a pickle, and an unpickler reads nothing after it.
"""
from __future__ import annotations

import pickletools
import random
import struct
from dataclasses import dataclass

INT_OPS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"}
MEMO_OPS = {"BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT"}
STRING_OPS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "STRING"}
TUPLE_ENDS = {"TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"}

# values near the limits of every integer width a reader might use for a count, offset, size or stride
INTERESTING_INTS = [0, 1, 2, 3, 4, 7, 8, 16, 255, 256, 4095, 4096, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53,
                    2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -1, -2, -3, -4, -8, -16, -4096, -2**31, -2**40,
                    -2**63, -2**63 - 1]
INTERESTING_STRINGS = ["0", "1", "2", "", "storage", "cpu", "cuda:0", "../0", "/etc/passwd", "data.pkl", "0/../0",
                       "\x00", "é", "x" * 300, "__setstate__", "little", "big"]
# (module, name) pairs an unpickler of torch files meets or should refuse: rebuilders torch has and refgrad may not,
# storage and dtype names of other widths, containers, numpy's rebuilders and names outside every allow-list
INTERESTING_GLOBALS = [
  ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
  ("torch._utils", "_rebuild_parameter"), ("torch._utils", "_rebuild_from_type_v2"),
  ("torch._utils", "_rebuild_sparse_tensor"),
  ("torch._utils", "_rebuild_qtensor"), ("torch._utils", "_rebuild_meta_tensor_no_storage"),
  ("torch._utils", "_rebuild_wrapper_subclass"), ("torch", "FloatStorage"), ("torch", "DoubleStorage"),
  ("torch", "HalfStorage"), ("torch", "BFloat16Storage"), ("torch", "BoolStorage"), ("torch", "ByteStorage"),
  ("torch", "CharStorage"), ("torch", "ShortStorage"), ("torch", "IntStorage"), ("torch", "LongStorage"),
  ("torch", "ComplexFloatStorage"), ("torch.storage", "UntypedStorage"), ("torch", "float8_e4m3fn"),
  ("torch", "complex64"), ("torch", "uint16"), ("torch", "uint64"), ("torch", "bool"), ("torch", "Size"),
  ("torch", "Tensor"), ("torch", "device"), ("torch.nn.parameter", "Parameter"), ("torchx", "FloatStorage"),
  ("collections", "OrderedDict"), ("collections", "defaultdict"), ("builtins", "set"), ("builtins", "bytearray"),
  ("builtins", "getattr"), ("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
  ("numpy.core.multiarray", "scalar"), ("argparse", "Namespace"), ("no.such.module", "thing"),
]


@dataclass
class Op:
  """One opcode of a pickle: its name, decoded argument and exact bytes."""
  name: str
  arg: object
  raw: bytes


def parse(blob: bytes) -> tuple[list[Op], bytes] | None:
  """The opcodes of the pickle at the start of blob and the bytes after its STOP; None if it does not parse."""
  try:
    found = list(pickletools.genops(blob))
  except Exception:  # genops raises ValueError, struct.error and more on a broken pickle: then it is raw bytes
    return None
  if not found or found[-1][0].name != "STOP":
    return None
  ends = [pos for _, _, pos in found[1:]] + [found[-1][2] + 1]
  ops = [Op(op.name, arg, blob[pos:end]) for (op, arg, pos), end in zip(found, ends)]
  return ops, blob[ends[-1]:]


def join(ops: list[Op], tail: bytes = b"") -> bytes:
  return b"".join(op.raw for op in ops) + tail


def split_pickles(blob: bytes, count: int) -> tuple[list[list[Op]], bytes]:
  """Up to count pickles one after another (a legacy torch file's five), and the bytes after the last one parsed."""
  pickles: list[list[Op]] = []
  while len(pickles) < count and (parsed := parse(blob)) is not None:
    pickles.append(parsed[0])
    blob = parsed[1]
  return pickles, blob


def encode_int(value: int) -> bytes:
  """The shortest opcode pushing value (BININT1/BININT2 are unsigned, BININT signed 32-bit, LONG1 any size)."""
  if 0 <= value < 256:
    return b"K" + bytes([value])
  if 0 <= value < 65536:
    return b"M" + struct.pack("<H", value)
  if -2**31 <= value < 2**31:
    return b"J" + struct.pack("<i", value)
  body = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
  return b"\x8a" + bytes([len(body)]) + body


def encode_memo(name: str, index: int) -> bytes:
  """A memo get or put of index, widened to the 4-byte form when it does not fit a byte."""
  short, long = {"BINGET": (b"h", b"j"), "LONG_BINGET": (b"h", b"j"),
                 "BINPUT": (b"q", b"r"), "LONG_BINPUT": (b"q", b"r")}[name]
  return short + bytes([index]) if index < 256 else long + struct.pack("<I", index)


def unicode(text: str) -> bytes:
  data = text.encode("utf-8", "surrogatepass")
  return b"X" + struct.pack("<I", len(data)) + data


def global_(module: str, name: str) -> bytes:
  return b"c" + f"{module}\n{name}\n".encode()


def stack_global(module: str, name: str) -> bytes:
  return unicode(module) + unicode(name) + b"\x93"


def tuple_(*items: bytes) -> bytes:
  return b"(" + b"".join(items) + b"t"


def list_(*items: bytes) -> bytes:
  return b"(" + b"".join(items) + b"l"


def binbytes(data: bytes) -> bytes:
  return b"B" + struct.pack("<I", len(data)) + data


def pick_int(rng: random.Random, old: int) -> int:
  """A replacement for an integer argument: a limit value, or the old one nudged, doubled or negated."""
  choice = rng.random()
  if choice < 0.6:
    return rng.choice(INTERESTING_INTS)
  if choice < 0.8:
    return old + rng.choice([-2, -1, 1, 2, 8])
  return rng.choice([-old, old * 2, old * 4096, old - 2**32])


def tuple_end(ops: list[Op], start: int) -> int | None:
  """The index after a tuple of ints pushed from ops[start] (EMPTY_TUPLE, MARK ... TUPLE or ints then TUPLEn),
  past one memo put after it; None when ops[start] starts no such tuple."""
  k = start + (start < len(ops) and ops[start].name == "MARK")
  if start < len(ops) and ops[start].name == "EMPTY_TUPLE":
    k = start + 1
  else:
    while k < len(ops) and ops[k].name in INT_OPS:
      k += 1
    if k >= len(ops) or ops[k].name not in TUPLE_ENDS:
      return None
    k += 1
  return k + 1 if k < len(ops) and ops[k].name in MEMO_OPS else k


def _pick(rng: random.Random, ops: list[Op], names: set[str]) -> int | None:
  found = [i for i, op in enumerate(ops) if op.name in names]
  return rng.choice(found) if found else None


def _replaced(ops: list[Op], i: int, new: list[Op]) -> list[Op]:
  return ops[:i] + new + ops[i + 1:]


def mutate_int(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """An integer argument (an offset, size, stride, element count or memo index) set to a limit value."""
  if (i := _pick(rng, ops, INT_OPS | MEMO_OPS)) is None:
    return None
  op = ops[i]
  if op.name in MEMO_OPS:
    new = rng.randrange(int(op.arg) + 3) if rng.random() < 0.8 else rng.choice([255, 256, 2**32 - 1])
    raw = encode_memo(op.name, new)
  else:
    new = pick_int(rng, int(op.arg))
    raw = encode_int(new)
  return _replaced(ops, i, [Op(op.name, new, raw)]), f"op {i} {op.name} {op.arg!r} -> {new!r}"


def mutate_string(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """A string argument (a storage key, location, dict key, dtype or module name) replaced or edited."""
  if (i := _pick(rng, ops, STRING_OPS)) is None:
    return None
  old = ops[i].arg if isinstance(ops[i].arg, str) else str(ops[i].arg)
  new = rng.choice(INTERESTING_STRINGS) if rng.random() < 0.7 else old + rng.choice(["0", "1", ".", "/"])
  return _replaced(ops, i, [Op("BINUNICODE", new, unicode(new))]), f"op {i} string {old!r:.40} -> {new!r:.40}"


def mutate_global(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """A GLOBAL (a rebuilder, storage type or dtype) naming something else."""
  if (i := _pick(rng, ops, {"GLOBAL"})) is None:
    return None
  module, name = rng.choice(INTERESTING_GLOBALS)
  return _replaced(ops, i, [Op("GLOBAL", f"{module} {name}", global_(module, name))]), \
    f"op {i} GLOBAL {ops[i].arg} -> {module} {name}"


def mutate_value(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """A pushed int or string replaced by a hostile value: one containing itself, 3000 lists deep, a huge
  allocation through an allowed constructor, or a stand-in object."""
  if (i := _pick(rng, ops, INT_OPS | STRING_OPS)) is None:
    return None
  label, raw = rng.choice(HOSTILE_VALUES)
  return _replaced(ops, i, [Op("VALUE", label, raw)]), f"op {i} {ops[i].name} {ops[i].arg!r:.40} -> {label}"


def mutate_view(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """A tensor's offset, sizes and strides (the ints and two tuples after its storage's persistent id) rewritten
  together, mostly small, sometimes negative or huge."""
  starts = [i + 1 for i, op in enumerate(ops[:-1]) if op.name == "BINPERSID" and ops[i + 1].name in INT_OPS]
  if not starts:
    return None
  i = rng.choice(starts)
  if (size_end := tuple_end(ops, i + 1)) is None or (stride_end := tuple_end(ops, size_end)) is None:
    return None
  ndim = rng.choice([0, 1, 1, 2, 2, 3])
  offset = rng.choice([0, 0, 1, 2, 5, -1, -2, -4096, 2**31, 2**62, 2**63 - 1])
  sizes = [rng.choice([0, 1, 2, 2, 3, 4, 2**20, 2**31, 2**62, 2**63, -1]) for _ in range(ndim)]
  strides = [rng.choice([0, 1, 1, 2, 3, -1, -2, -4096, -2**40, 2**31, 2**62]) for _ in range(ndim)]
  raw = encode_int(offset) + tuple_(*map(encode_int, sizes)) + tuple_(*map(encode_int, strides))
  return ops[:i] + [Op("VIEW", None, raw)] + ops[stride_end:], \
    f"tensor at op {i}: offset {offset}, sizes {tuple(sizes)}, strides {tuple(strides)}"


def _structural(ops: list[Op], rng: random.Random) -> tuple[list[Op], str] | None:
  """An opcode deleted, doubled, swapped with the next, or a bare opcode inserted (never past STOP)."""
  if len(ops) < 2:
    return None
  i = rng.randrange(len(ops) - 1)
  kind = rng.choice(["delete", "duplicate", "swap", "insert"])
  if kind == "delete":
    return ops[:i] + ops[i + 1:], f"op {i} {ops[i].name} deleted"
  if kind == "duplicate":
    return ops[:i + 1] + ops[i:], f"op {i} {ops[i].name} doubled"
  if kind == "swap":
    return ops[:i] + [ops[i + 1], ops[i]] + ops[i + 2:], f"ops {i} {ops[i].name} and {i + 1} swapped"
  code = rng.choice(BARE_OPCODES)
  return ops[:i] + [Op("INSERTED", None, code)] + ops[i:], f"opcode {code!r} inserted at {i}"


PICKLE_MUTATORS = [mutate_int, mutate_int, mutate_view, mutate_view, mutate_string, mutate_global, mutate_value,
                   _structural, _structural]
# opcodes without arguments: POP, MARK, EMPTY_LIST, EMPTY_DICT, NONE, NEWTRUE, EMPTY_TUPLE, TUPLE, DUP, APPEND,
# SETITEM, BUILD, REDUCE, BINPERSID, POP_MARK, TUPLE2, NEWOBJ, STOP
BARE_OPCODES = [b"0", b"(", b"]", b"}", b"N", b"\x88", b")", b"t", b"2", b"a", b"s", b"b", b"R", b"Q", b"1", b"\x86",
                b"\x81", b"."]
HOSTILE_VALUES = [
  ("a list holding itself", b"]r\x00\x00\x01\x00j\x00\x00\x01\x00a"),
  ("3000 nested lists", b"(" * 3000 + b"l" * 3000),
  ("bytearray(2**40)", global_("builtins", "bytearray") + tuple_(encode_int(2**40)) + b"R"),
  ("a stand-in object", global_("argparse", "Namespace") + b")R"),
  ("an int of 2**80", encode_int(2**80)),
  ("None", b"N"),
]


def mutate_pickle(blob: bytes, rng: random.Random) -> tuple[bytes, str] | None:
  """One pickle mutation of blob (None when blob is no pickle or the mutation does not apply to it)."""
  if (parsed := parse(blob)) is None:
    return None
  result = rng.choice(PICKLE_MUTATORS)(parsed[0], rng)
  return None if result is None else (join(result[0], parsed[1]), result[1])
