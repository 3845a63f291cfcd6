"""Structure-aware mutations of the three file formats the readers take. Each mutator maps (file bytes, a
random.Random) to (new bytes, what it did), or None when the file lacks what it mutates (a format's mutators fall back
to raw byte edits then); a mutation chain is a list of (mutator name, seed), so the same chain rebuilds the same file.
"""
from __future__ import annotations

import io
import json
import random
import struct
import warnings
import zipfile
from collections.abc import Callable

from fuzzing.pickles import encode_int, join, mutate_pickle, pick_int, split_pickles, unicode

Mutation = tuple[bytes, str]
Mutator = Callable[[bytes, random.Random], "Mutation | None"]
LEGACY_PICKLES = ("magic number", "protocol", "sys_info", "object", "storage keys")
SAFETENSORS_CODES = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64", "C64",
                     "F8_E4M3", "F8_E5M2", "F4", "E8M0", "f32", "", "F32 "]
STORAGE_ITEMSIZE = {"Half": 2, "BFloat16": 2, "Float": 4, "Double": 8, "Bool": 1, "Char": 1, "Byte": 1, "Short": 2,
                    "Int": 4, "Long": 8, "ComplexFloat": 8, "ComplexDouble": 16}


def raw_edit(data: bytes, rng: random.Random) -> Mutation:
  """A byte-level edit anywhere: a bit flipped, a byte set, bytes inserted, deleted or doubled, or a truncation."""
  pos = rng.randrange(len(data) + 1)
  kind = rng.choice(["flip", "set", "insert", "delete", "double", "truncate"])
  if kind == "flip" and pos < len(data):
    return data[:pos] + bytes([data[pos] ^ (1 << rng.randrange(8))]) + data[pos + 1:], f"bit flipped at byte {pos}"
  if kind == "set" and pos < len(data):
    value = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    return data[:pos] + bytes([value]) + data[pos + 1:], f"byte {pos} set to {value:#x}"
  n = rng.choice([1, 2, 4, 8, 64])
  if kind == "insert":
    return data[:pos] + bytes(rng.randrange(256) for _ in range(n)) + data[pos:], f"{n} bytes inserted at {pos}"
  if kind == "delete":
    return data[:pos] + data[pos + n:], f"{n} bytes deleted at {pos}"
  if kind == "double":
    return data[:pos + n] + data[pos:], f"{n} bytes doubled at {pos}"
  return data[:pos], f"truncated to {pos} bytes"


# safetensors: 8 bytes of header length, the JSON header, the data

def _st_parts(data: bytes) -> tuple[dict, bytes] | None:
  if len(data) < 8:
    return None
  (size,) = struct.unpack("<Q", data[:8])
  try:
    header = json.loads(data[8:8 + size])
  except ValueError:
    return None
  return (header, data[8 + size:]) if isinstance(header, dict) else None


def _st_file(header: dict, rest: bytes) -> bytes:
  text = json.dumps(header).encode()
  text += b" " * (-len(text) % 8)
  return struct.pack("<Q", len(text)) + text + rest


def _st_entry(rng: random.Random, header: dict) -> str | None:
  names = [k for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
  return rng.choice(names) if names else None


def _weird_number(rng: random.Random, old: object) -> object:
  if rng.random() < 0.75 and isinstance(old, int):
    return pick_int(rng, old)
  return rng.choice([1.0, 0.5, -0.0, "8", None, True, [8], 1e300])


def st_offsets(data: bytes, rng: random.Random) -> Mutation | None:
  """One data_offsets bound set to a limit value or a non-integer, or the pair given another length."""
  if (parts := _st_parts(data)) is None or (name := _st_entry(rng, parts[0])) is None:
    return None
  entry = parts[0][name]
  offsets = list(entry.get("data_offsets", [0, 0]))
  if offsets and rng.random() < 0.85:
    k = rng.randrange(len(offsets))
    offsets[k] = _weird_number(rng, offsets[k])
  else:
    offsets = offsets[:1] if rng.random() < 0.5 else offsets + [0]
  entry["data_offsets"] = offsets
  return _st_file(*parts), f"{name!r} data_offsets -> {offsets}"


def st_shape(data: bytes, rng: random.Random) -> Mutation | None:
  """A shape given a dimension of a limit value, [0, 2**63], a dimension more or less, or a non-integer."""
  if (parts := _st_parts(data)) is None or (name := _st_entry(rng, parts[0])) is None:
    return None
  entry = parts[0][name]
  shape = list(entry.get("shape", []))
  kind = rng.choice(["dim", "dim", "zero-huge", "append", "drop"])
  if kind == "dim" and shape:
    k = rng.randrange(len(shape))
    shape[k] = _weird_number(rng, shape[k])
  elif kind == "zero-huge":
    shape = rng.choice([[0, 2**63], [2**63, 0], [0, 2**64 - 1], [2**62, 2**62], [2**32, 2**32, 0]])
  elif kind == "append":
    shape.insert(rng.randrange(len(shape) + 1), rng.choice([0, 1, 2, 2**63]))
  else:
    shape = shape[:-1]
  entry["shape"] = shape
  return _st_file(*parts), f"{name!r} shape -> {shape}"


def st_dtype(data: bytes, rng: random.Random) -> Mutation | None:
  if (parts := _st_parts(data)) is None or (name := _st_entry(rng, parts[0])) is None:
    return None
  code = rng.choice(SAFETENSORS_CODES + [None, 4, ["F32"]])
  parts[0][name]["dtype"] = code
  return _st_file(*parts), f"{name!r} dtype -> {code!r}"


def st_entries(data: bytes, rng: random.Random) -> Mutation | None:
  """An entry removed, copied under another name, made a non-object, given an extra field, or the metadata changed."""
  if (parts := _st_parts(data)) is None or (name := _st_entry(rng, parts[0])) is None:
    return None
  header = parts[0]
  kind = rng.choice(["remove", "copy", "not-object", "extra", "metadata"])
  if kind == "remove":
    del header[name]
  elif kind == "copy":
    header[name + "_copy"] = dict(header[name])
  elif kind == "not-object":
    header[name] = rng.choice([[], "x", 1, None])
  elif kind == "extra":
    header[name]["extra"] = rng.choice([1, "x", {"a": [1]}, None])
  else:
    header["__metadata__"] = rng.choice([{"a": 1}, {"a": None}, [], "x", None, {"a": "b"}, {"a": {"b": "c"}}])
  return _st_file(header, parts[1]), f"{name!r}: {kind}"


def st_length(data: bytes, rng: random.Random) -> Mutation | None:
  """The header length field set to a limit value (wrapped to 64 bits) or nudged."""
  if len(data) < 8:
    return None
  (size,) = struct.unpack("<Q", data[:8])
  new = pick_int(rng, size) % 2**64
  return struct.pack("<Q", new) + data[8:], f"header length {size} -> {new}"


def st_text(data: bytes, rng: random.Random) -> Mutation | None:
  """The header's JSON text edited where json.dumps cannot: a key given twice, or a number written another way."""
  if len(data) < 8:
    return None
  (size,) = struct.unpack("<Q", data[:8])
  text = data[8:8 + size].decode("utf-8", "replace")
  digits = [i for i, c in enumerate(text) if c.isdigit() and not text[i - 1].isdigit()]
  if rng.random() < 0.4 and text.startswith("{") and '":' in text:
    first = text[1:].split(',"', 1)[0].rstrip("} ")  # the first "key": value pair, enough for a duplicate
    new, what = "{" + first + "," + text[1:], "first entry given twice"
  elif digits:
    i = rng.choice(digits)
    literal = rng.choice(["1e400", "-0", "8.0", "18446744073709551616", "NaN", "Infinity", "0x10", "01", "1E1"])
    new, what = text[:i] + literal + text[i:].lstrip("0123456789"), f"a number written as {literal}"
  else:
    return None
  body = new.encode()
  return struct.pack("<Q", len(body)) + body + data[8 + size:], what


def st_data(data: bytes, rng: random.Random) -> Mutation | None:
  """Bytes cut from or added to the end of the data."""
  n = rng.choice([1, 2, 4, 8, 64])
  if rng.random() < 0.5:
    return data[:-n], f"last {n} bytes cut"
  return data + bytes(n), f"{n} zero bytes appended"


# torch's zip format: <archive>/data.pkl, <archive>/data/<key> per storage, <archive>/byteorder, version files

def members_of(data: bytes) -> list[tuple[str, bytes]] | None:
  try:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
      return [(info.filename, archive.read(info)) for info in archive.infolist()]
  except Exception:  # any failure to read the archive back (BadZipFile, CRC, zlib, EOFError): not a zip any more
    return None


def archive_of(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
  out = io.BytesIO()
  with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression) as archive:
    warnings.simplefilter("ignore")  # duplicate names are a mutation here
    for name, content in members:
      archive.writestr(name, content)
  return out.getvalue()


def zip_pickle(data: bytes, rng: random.Random) -> Mutation | None:
  """A pickle mutation of the archive's data.pkl."""
  if (members := members_of(data)) is None:
    return None
  for k, (name, content) in enumerate(members):
    if name.endswith("data.pkl") and (result := mutate_pickle(content, rng)) is not None:
      members[k] = (name, result[0])
      return archive_of(members), f"data.pkl: {result[1]}"
  return None


def zip_members(data: bytes, rng: random.Random) -> Mutation | None:
  """A member renamed, removed, copied, cut, emptied or grown; byteorder changed; or everything deflated."""
  if not (members := members_of(data)):
    return None
  k = rng.randrange(len(members))
  name, content = members[k]
  kind = rng.choice(["rename", "remove", "copy", "cut", "grow", "byteorder", "deflate"])
  if kind == "rename":
    new = rng.choice(["archive/data/0", "archive/data/1", "archive/data/99", "other/data.pkl", "data.pkl",
                      "a/b/data.pkl", "../data.pkl", "archive/data/../data/0", name.upper(), name + "x"])
    members[k] = (new, content)
    return archive_of(members), f"member {name} renamed {new}"
  if kind == "remove":
    return archive_of(members[:k] + members[k + 1:]), f"member {name} removed"
  if kind == "copy":
    new = rng.choice([name, "x/data.pkl", "archive/data/7"])
    return archive_of(members[:k] + [(new, content[::-1])] + members[k:]), f"{name} copied, reversed, as {new}"
  if kind == "byteorder":
    order = rng.choice([b"big", b"", b"little\n", b"LITTLE", b"middle"])
    return archive_of([(n, order if n.endswith("byteorder") else c) for n, c in members]), f"byteorder -> {order!r}"
  if kind == "deflate":
    return archive_of(members, zipfile.ZIP_DEFLATED), "all members deflated"
  n = rng.choice([1, 2, 4, 8, 100, len(content)])
  members[k] = (name, content[:-n] if kind == "cut" else content + bytes(range(n % 256)))
  return archive_of(members), f"member {name}: {n} bytes {'cut' if kind == 'cut' else 'added'}"


# torch's legacy format: five pickles (magic number, protocol, sys_info, the object, storage keys), then per key
# an int64 element count and the storage's bytes

def legacy_pickle(data: bytes, rng: random.Random) -> Mutation | None:
  """A pickle mutation of one of the five pickles."""
  pickles, tail = split_pickles(data, len(LEGACY_PICKLES))
  if not pickles:
    return None
  k = rng.choice([3, 3, 3] + list(range(len(pickles)))) % len(pickles)
  if (result := mutate_pickle(join(pickles[k]), rng)) is None:
    return None
  blobs = [join(p) for p in pickles]
  blobs[k] = result[0]
  return b"".join(blobs) + tail, f"{LEGACY_PICKLES[k]} pickle: {result[1]}"


def _storage_records(pickles: list, tail: bytes) -> list[tuple[int, int, int]]:
  """(position in tail, element count, itemsize) of each storage record, walked with the itemsizes the object
  pickle's storage types give its keys; it stops where the walk leaves the file."""
  itemsize, last = {}, None
  for op in pickles[3] if len(pickles) > 3 else []:
    if op.name == "GLOBAL" and str(op.arg).endswith("Storage"):
      last = STORAGE_ITEMSIZE.get(str(op.arg).split()[-1].removesuffix("Storage"), 1)
    elif op.name in {"BINUNICODE", "SHORT_BINUNICODE"} and last is not None:
      itemsize.setdefault(op.arg, last)
      last = None
  keys = [op.arg for op in pickles[4] if op.name in {"BINUNICODE", "SHORT_BINUNICODE"}] if len(pickles) > 4 else []
  records, pos = [], 0
  for key in keys:
    if pos + 8 > len(tail):
      break
    (count,) = struct.unpack("<q", tail[pos:pos + 8])
    records.append((pos, count, itemsize.get(key, 1)))
    pos += 8 + max(count, 0) * itemsize.get(key, 1)
  return records


def legacy_storages(data: bytes, rng: random.Random) -> Mutation | None:
  """A storage record's element count set to a limit value or nudged, or the storage section cut short."""
  pickles, tail = split_pickles(data, len(LEGACY_PICKLES))
  head = data[:len(data) - len(tail)]
  records = _storage_records(pickles, tail)
  if not records or rng.random() < 0.25:
    n = rng.randrange(len(tail) + 1)
    return head + tail[:n], f"storage section cut to {n} of {len(tail)} bytes"
  k = rng.randrange(len(records))
  pos, count, _ = records[k]
  new = pick_int(rng, count)
  new_raw = struct.pack("<q", new) if -2**63 <= new < 2**63 else struct.pack("<Q", new % 2**64)
  return head + tail[:pos] + new_raw + tail[pos + 8:], f"storage record {k}: element count {count} -> {new}"


def legacy_keys(data: bytes, rng: random.Random) -> Mutation | None:
  """The storage keys pickle replaced by a list of other keys (repeated, missing, unknown, not strings)."""
  pickles, tail = split_pickles(data, len(LEGACY_PICKLES))
  if len(pickles) < 5:
    return None
  keys = [op.arg for op in pickles[4] if op.name in {"BINUNICODE", "SHORT_BINUNICODE"}]
  new = rng.choice([keys * 2, keys[1:], keys[::-1], keys + ["nope"], [], [0], None])
  body = pickle_of(new)
  return b"".join(join(p) for p in pickles[:4]) + body + tail, f"storage keys -> {new!r:.60}"


def pickle_of(value: object) -> bytes:
  """A protocol-2 pickle of a list of str/int, or None, built with the assembler (no pickle.dumps: the same
  opcodes torch writes)."""
  if value is None:
    return b"\x80\x02N."
  items = [unicode(v) if isinstance(v, str) else encode_int(v) for v in value]
  return b"\x80\x02(" + b"".join(items) + b"l."


# each format's mutators with their weights: pickles (where offsets, sizes, strides and names live) most often
MUTATORS: dict[str, dict[str, tuple[Mutator, int]]] = {
  "safetensors": {"offsets": (st_offsets, 3), "shape": (st_shape, 3), "dtype": (st_dtype, 2),
                  "entries": (st_entries, 2), "length": (st_length, 1), "text": (st_text, 1), "data": (st_data, 1),
                  "raw": (raw_edit, 2)},
  "zip": {"pickle": (zip_pickle, 6), "members": (zip_members, 2), "raw": (raw_edit, 1)},
  "legacy": {"pickle": (legacy_pickle, 6), "storages": (legacy_storages, 2), "keys": (legacy_keys, 1),
             "raw": (raw_edit, 1)},
}


def random_step(fmt: str, rng: random.Random) -> tuple[str, int]:
  """A (mutator name, seed) step for fmt, drawn by weight."""
  names = list(MUTATORS[fmt])
  return rng.choices(names, [MUTATORS[fmt][n][1] for n in names])[0], rng.randrange(2**32)


def apply(fmt: str, data: bytes, chain: list[tuple[str, int]]) -> tuple[bytes, list[str]]:
  """data after each (mutator, seed) of chain, and what each step did (a raw edit where the mutator did not apply)."""
  done = []
  for name, seed in chain:
    rng = random.Random(seed)
    result = MUTATORS[fmt][name][0](data, rng) or raw_edit(data, rng)
    data = result[0]
    done.append(f"{name}: {result[1]}")
  return data, done
