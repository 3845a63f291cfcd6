"""Pickle payloads that would run code, and every place of a torch file where a pickle is read: each payload, if an
unpickler resolved its global and called it, creates the canary file, opens the secret file, loads a shared library or
starts a process (which the harness's audit hook sees), so a load that runs it is caught whatever it then returns.
"""
from __future__ import annotations

import _ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass

from fuzzing.mutators import LEGACY_PICKLES
from fuzzing.pickles import (
  binbytes,
  encode_int,
  global_,
  join,
  list_,
  parse,
  split_pickles,
  stack_global,
  tuple_,
  unicode,
)

# a protocol-2 pickle's header, and POP: a payload placed before a pickle leaves its value and the pickle goes on
PROTO2, POP, STOP = b"\x80\x02", b"0", b"."


@dataclass(frozen=True)
class Target:
  """A callable module.name and the opcodes of its arguments, given the canary and secret paths."""
  module: str
  name: str
  args: Callable[[str, str], list[bytes]]


def _touch(canary: str, _: str) -> list[bytes]:
  return [unicode(f"touch {canary}")]


def _python(canary: str, _: str) -> list[bytes]:
  return [unicode(f"open({canary!r}, 'w').close()")]


def _argv(canary: str, _: str) -> list[bytes]:
  return [list_(unicode("touch"), unicode(canary))]


def _nested(canary: str, _: str) -> list[bytes]:
  return [binbytes(PROTO2 + global_("os", "system") + tuple_(*_touch(canary, "")) + b"R" + STOP)]


# a shared library that exists wherever Python runs: its own _ctypes extension
LIBRARY_DIR, LIBRARY = os.path.split(_ctypes.__file__)
TARGETS = [
  Target("os", "system", _touch), Target("posix", "system", _touch), Target("builtins", "exec", _python),
  Target("builtins", "eval", _python), Target("__builtin__", "eval", _python),  # Python 2's name, mapped by pickle
  Target("builtins", "open", lambda c, _: [unicode(c), unicode("w")]), Target("subprocess", "call", _argv),
  Target("subprocess", "Popen", _argv), Target("numpy", "save", lambda c, _: [unicode(c), encode_int(0)]),
  Target("torch", "save", lambda c, _: [encode_int(0), unicode(c)]),
  Target("numpy.ctypeslib", "load_library", lambda c, _: [unicode(LIBRARY), unicode(LIBRARY_DIR)]),
  Target("numpy", "fromfile", lambda _, s: [unicode(s), unicode("uint8")]), Target("pickle", "loads", _nested),
  Target("_pickle", "loads", _nested),
]


def _reduce_global(t: Target, args: list[bytes]) -> bytes:
  return global_(t.module, t.name) + tuple_(*args) + b"R"


def _reduce_stack_global(t: Target, args: list[bytes]) -> bytes:
  return b"\x80\x04" + stack_global(t.module, t.name) + tuple_(*args) + b"R"  # protocol 4 has STACK_GLOBAL


def _inst(t: Target, args: list[bytes]) -> bytes:
  return b"(" + b"".join(args) + b"i" + f"{t.module}\n{t.name}\n".encode()


def _obj(t: Target, args: list[bytes]) -> bytes:
  return b"(" + global_(t.module, t.name) + b"".join(args) + b"o"


def _build_setstate(t: Target, args: list[bytes]) -> bytes:
  """A plain object whose first BUILD sets its __setstate__ attribute to the target; the second BUILD calls it."""
  obj = global_("argparse", "Namespace") + b")R"
  return obj + b"}" + unicode("__setstate__") + global_(t.module, t.name) + b"s" + b"b" + args[0] + b"b"


STYLES = {"GLOBAL+REDUCE": _reduce_global, "STACK_GLOBAL+REDUCE": _reduce_stack_global, "INST": _inst, "OBJ": _obj,
          "BUILD __setstate__": _build_setstate}


def _path_touch_newobj(canary: str, _: str) -> bytes:
  """NEWOBJ makes a pathlib.PosixPath; getattr(path, 'touch')() creates the file."""
  path = global_("pathlib", "PosixPath") + tuple_(unicode(canary)) + b"\x81"
  return global_("builtins", "getattr") + tuple_(path, unicode("touch")) + b"R" + b")R"


def _path_touch_dotted(canary: str, _: str) -> bytes:
  """STACK_GLOBAL resolves a dotted name under protocol 4: pathlib.Path.touch, called on a Path."""
  path = global_("pathlib", "Path") + tuple_(unicode(canary)) + b"R"
  return b"\x80\x04" + stack_global("pathlib", "Path.touch") + tuple_(path) + b"R"


def payloads() -> dict[str, Callable[[str, str], bytes]]:
  """Every payload by name: (canary path, secret path) -> opcodes that push one value. Each target is called the
  plainest way (GLOBAL, REDUCE); os.system and builtins.eval in every style, since an unpickler resolves names in
  GLOBAL, STACK_GLOBAL and INST and calls what the stack holds in REDUCE, OBJ and BUILD."""
  table: dict[str, Callable[[str, str], bytes]] = {
    "pathlib.PosixPath via NEWOBJ, then getattr touch": _path_touch_newobj,
    "pathlib.Path.touch via dotted STACK_GLOBAL": _path_touch_dotted,
  }
  for t in TARGETS:
    for style, build in STYLES.items():
      every_style = (t.module, t.name) in {("os", "system"), ("builtins", "eval")}
      if style == "GLOBAL+REDUCE" or every_style:
        table[f"{t.module}.{t.name} via {style}"] = lambda c, s, t=t, build=build: build(t, t.args(c, s))
  return table


def in_zip(members: list[tuple[str, bytes]], payload: bytes, whole: bool) -> list[tuple[str, bytes]]:
  """The archive with data.pkl replaced by the payload (whole) or run before it."""
  return [(n, _placed(c, payload, whole) if n.endswith("data.pkl") else c) for n, c in members]


def in_legacy(data: bytes, k: int, payload: bytes, whole: bool) -> bytes:
  """The legacy file with its k-th pickle (LEGACY_PICKLES[k]) replaced by the payload or run before it."""
  pickles, tail = split_pickles(data, len(LEGACY_PICKLES))
  blobs = [join(p) for p in pickles]
  blobs[k] = _placed(blobs[k], payload, whole)
  return b"".join(blobs) + tail


def _placed(pickle: bytes, payload: bytes, whole: bool) -> bytes:
  if whole:
    return PROTO2 + payload + STOP
  assert parse(pickle) is not None, "a seed's pickle parses"
  return payload + POP + pickle
