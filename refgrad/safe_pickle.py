"""The one unpickler refgrad runs on bytes it did not write itself in this process: checkpoint files, a child
process's messages.

Unpickling runs code: every class or function a pickle names (GLOBAL, STACK_GLOBAL, INST, and the EXT opcodes
through copyreg's registry) is looked up with `find_class`, then called by REDUCE, NEWOBJ, OBJ, INST or BUILD.
`SafeUnpickler.find_class` gives only what the caller's allow-list maps that exact (module, name) to, so the only
code a pickle can reach is code the caller chose, and BUILD (which hands a state to an object's `__setstate__`)
first passes the object and its state to the caller's `check_state`, since an allowed class's `__setstate__` may
be C code that trusts its state (numpy's dtype returns NULL without an exception for a dict). A name off the list
is refused, or, if the caller passes `stand_in`, replaced by an inert object of the caller's that records what it
was called with (a checkpoint that also saved, say, an argparse.Namespace still loads its tensors, as tinygrad's
torch_load does). Persistent ids (torch's storages) reach the caller's `persistent` and are refused without one.

It is pickle's pure-Python unpickler, as torch's weights_only loader is: its memo is a dict, where the C unpickler's
is an array that one `LONG_BINPUT 4294967295` in a small file grows to 32 GiB (and that is not the only way the C
one can be made to allocate what the bytes never held). About half the C unpickler's speed: 1.2 s for the pickle of
a 20,000-tensor state dict, where torch.load takes 8.7 s for the whole file.
"""
from __future__ import annotations

import _compat_pickle
import io
import pickle
import reprlib
import struct
from collections.abc import Callable, Mapping
from typing import IO, Any

Allowed = Mapping[tuple[str, str], Any]  # (module, name) -> what the pickle gets for it


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 4, 60, 60, 40


def shown(value: Any) -> str:
  """repr of a value from outside, for a message: short, and a few levels deep at most (the repr of 3000 nested
  lists would raise RecursionError)."""
  return _SHORT.repr(value)


class UnsafePickleError(ValueError, pickle.UnpicklingError):
  """A pickle from outside was refused: it named something its reader does not allow, its bytes are not a pickle,
  or what it built failed the reader's own checks (which raise this too). A ValueError (bad input) and pickle's
  own UnpicklingError, so handlers written for either catch it."""


# What every failure of pickle's machinery on malformed bytes raises, besides UnpicklingError: a truncated stream,
# a stack or memo index that is not there, an opcode applied to the wrong kind of object, a value out of range
BROKEN_PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, IndexError, KeyError, TypeError, AttributeError,
                        ValueError, OverflowError, MemoryError, RecursionError, UnicodeDecodeError, struct.error)


class SafeUnpickler(pickle._Unpickler):
  """pickle's unpickler, looking names up in `allowed` only. `source` names the bytes in messages (a file's path, a
  channel); `stand_in(module, name)` gives what a name off the list becomes (None: refused); `persistent` resolves
  persistent ids (None: refused); `check_state(obj, state)` raises if BUILD may not give obj that state."""

  def __init__(self, file: IO[bytes], allowed: Allowed, source: str,
               stand_in: Callable[[str, str], Any] | None = None, persistent: Callable[[Any], Any] | None = None,
               check_state: Callable[[Any, Any], None] | None = None):
    super().__init__(file)
    self.allowed, self.source, self.stand_in, self.persistent = allowed, source, stand_in, persistent
    self.check_state = check_state

  def find_class(self, module: str, name: str) -> Any:
    # a protocol 0-2 pickle names Python 2's modules (__builtin__.xrange for range): pickle's own find_class maps
    # them to Python 3's, and so does this one (a newer pickle does not name Python 2's modules at all)
    module, name = _compat_pickle.NAME_MAPPING.get((module, name), (_compat_pickle.IMPORT_MAPPING.get(module, module),
                                                                    name))
    if (module, name) in self.allowed:
      return self.allowed[(module, name)]
    if self.stand_in is not None:
      return self.stand_in(module, name)
    raise UnsafePickleError(f"{self.source}: the pickle names {module}.{name}, which it may not use")

  def persistent_load(self, pid: Any) -> Any:
    if self.persistent is None:
      raise UnsafePickleError(f"{self.source}: the pickle holds a persistent id {shown(pid)}, which it may not use")
    return self.persistent(pid)

  def load_build(self) -> None:
    if self.check_state is not None:  # the stack holds the object, then its state; BUILD pops the state
      self.check_state(self.stack[-2], self.stack[-1])
    super().load_build()

  dispatch = {**pickle._Unpickler.dispatch, pickle.BUILD[0]: load_build}


def safe_load(file: IO[bytes], allowed: Allowed, source: str, **options: Any) -> Any:
  """The next pickle of `file`, through SafeUnpickler; any failure on its bytes is an UnsafePickleError naming
  `source`."""
  try:
    return SafeUnpickler(file, allowed, source, **options).load()
  except UnsafePickleError:
    raise
  except BROKEN_PICKLE_ERRORS as e:
    raise UnsafePickleError(f"{source}: not a valid pickle ({type(e).__name__}: {e})"[:600]) from None


def safe_loads(data: bytes, allowed: Allowed, source: str, **options: Any) -> Any:
  """safe_load of the bytes `data` (which need not be all one pickle: what follows its STOP is ignored)."""
  return safe_load(io.BytesIO(data), allowed, source, **options)
