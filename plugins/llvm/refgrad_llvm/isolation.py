"""LLVM compiles in a child process of its own, so that LLVM aborting kills the child, never the caller.

llvmlite's LLVM is built with assertions on, and LLVM's loop vectorizer has known assertion failures on rare loops
("VPlan cost model and legacy cost model disagreed": refgrad fuzz met one on a 9-iteration loop of guarded
remainders). An assertion calls abort(): in process, the user's Python would die with it. The child (`main`) reads
requests on its stdin and answers on its stdout, one pickled message each, framed by an 8-byte length, and read back
with refgrad's safe unpickler allowing no names (messages are tuples, lists, strings, bytes and bools); each answer
carries the digest of the request it answers, so an answer read for the wrong request is an error, never another
kernel's code cached under this one's name. What LLVM prints goes to a temporary file, shown when the child dies.
Measured: 0.9 ms more per kernel (11.8 ms against 10.9 for a small reduction), and 0.35 s to start the child, once
per process and only when something is not cached.

A compile also has a time limit: LLVM's loop vectorizer can take minutes on straight-line code it should finish in
a fraction of a second (bugs/llvm-loop-vectorizer-compile-time: 484 s for an int32 `**`). A child past its limit is
stopped and the compile raises LLVMTimeout, which the compiler treats as an abort: it compiles again without loop
vectorization.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from refgrad.safe_pickle import safe_loads

_LENGTH = struct.Struct("<Q")
READY = "ready"  # a child's first message: it has imported LLVM and takes requests
STDERR_TAIL = 2000  # characters of what a dead child printed, kept for the error message
CLOSE_WAIT = 2.0  # seconds a child is given to end when closed, and a close waits for a compile in flight


class LLVMCrash(RuntimeError):
  """The compiling child died (LLVM aborted): the message names its exit status and what LLVM printed."""


class LLVMTimeout(LLVMCrash):
  """The compiling child did not answer within its time limit; it was stopped."""


class ChannelError(RuntimeError):
  """The compiling child answered another request than the one just sent (the child is stopped)."""


def request_digest(source: str | list[str], vectorize: bool) -> str:
  """What an answer names to say which request it answers: the kind, the option and every source."""
  sources = [source] if isinstance(source, str) else source
  text = "\0".join([type(source).__name__, str(vectorize), *sources])
  return hashlib.sha256(text.encode()).hexdigest()


def send(stream: IO[bytes], message: Any) -> None:
  data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
  stream.write(_LENGTH.pack(len(data)) + data)
  stream.flush()


def receive(stream: IO[bytes]) -> Any:
  header = stream.read(_LENGTH.size)
  if len(header) < _LENGTH.size:
    raise EOFError("the compile child closed its pipe")
  (size,) = _LENGTH.unpack(header)
  data = stream.read(size)
  if len(data) < size:
    raise EOFError("the compile child closed its pipe mid-message")
  return safe_loads(data, {}, "the LLVM compile channel")


def _package_roots() -> list[str]:
  """Where refgrad and refgrad_llvm are imported from, so the child finds the same ones."""
  refgrad = Path(sys.modules["refgrad"].__file__)  # loaded: this plugin imports refgrad's contract
  return [str(refgrad.resolve().parent.parent), str(Path(__file__).resolve().parent.parent)]


class CompileChild:
  """The parent's end of one child (a forked copy of the parent starts its own), started on first use and again
  after it dies. `compile` returns ("object", bytes) or ("rejected", LLVM's message); raises LLVMCrash."""

  command = (sys.executable, "-c", "from refgrad_llvm.isolation import main; main()")

  def __init__(self):
    self._process: subprocess.Popen | None = None
    self._stderr: IO[bytes] | None = None
    self._owner = -1
    self._starting = False  # started, its READY not read yet
    self._lock = threading.Lock()

  def compile(self, source: str | list[str], vectorize: bool, limit: float | None = None) -> tuple[str, Any]:
    """One kernel's source, or a batch's list of them (answered with ("object", (bytes, kernel names))). A child
    that has not answered after `limit` seconds (None: no limit) is stopped: LLVMTimeout."""
    with self._lock:
      process = self._running()
      try:
        if self._starting:
          receive(process.stdout)
          self._starting = False
        send(process.stdin, (source, vectorize))
        if limit is not None and not select.select([process.stdout], [], [], limit)[0]:
          process.kill()
          self._died(process)
          raise LLVMTimeout(f"LLVM did not finish within {limit:g} s; its compile process was stopped")
        message = receive(process.stdout)
      except (EOFError, OSError):
        raise self._died(process) from None
      if not (isinstance(message, tuple) and len(message) == 2 and message[0] == request_digest(source, vectorize)):
        process.kill()
        self._died(process)
        raise ChannelError("the LLVM compile process answered another request than the one sent; it was stopped "
                           "and a new one takes the next request")
      return message[1]

  def ready(self) -> bool:
    """True if the child runs and takes a request at once; starts it (in the background) if it does not run."""
    with self._lock:
      process = self._running()
      if self._starting and select.select([process.stdout], [], [], 0)[0]:
        try:
          receive(process.stdout)
          self._starting = False
        except (EOFError, OSError):
          pass  # it died starting: its next compile starts another
      return not self._starting

  def close(self) -> None:
    """Stop the child (it also stops by itself when this process ends: its stdin closes). A child another thread
    is still compiling in (a daemon thread at exit) is killed."""
    if not self._lock.acquire(timeout=CLOSE_WAIT):
      if self._process is not None and self._owner == os.getpid():
        self._process.kill()
      return
    try:
      if self._process is not None and self._owner == os.getpid():
        self._process.stdin.close()
        try:
          self._process.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:  # LLVM is busy with the last request: its answer is not wanted
          self._process.kill()
          self._process.wait()
        self._release(self._process)
      self._process = None
    finally:
      self._lock.release()

  def _running(self) -> subprocess.Popen:
    alive = self._process is not None and self._owner == os.getpid() and self._process.poll() is None
    if not alive:
      self._start()
    return self._process

  def _start(self) -> None:
    self._stderr = tempfile.TemporaryFile()
    paths = _package_roots() + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, env=env)
    self._owner, self._starting = os.getpid(), True

  def _died(self, process: subprocess.Popen) -> LLVMCrash:
    status = process.wait()
    self._process = None
    how = f"signal {-status}" if status < 0 else f"exit status {status}"
    self._stderr.seek(0)
    printed = self._stderr.read().decode(errors="replace").strip()[-STDERR_TAIL:]
    self._release(process)
    return LLVMCrash(f"the LLVM compile process died ({how})" + (f"; it printed:\n{printed}" if printed else ""))

  def _release(self, process: subprocess.Popen) -> None:
    """Close this process's ends of an ended child's pipes and its output file (a batch LLVM aborts on is split,
    and each part that aborts again ends a child)."""
    for stream in (process.stdin, process.stdout, self._stderr):
      stream.close()


class CompileChildren:
  """As many children as compiles run at once, each used by one compile at a time: a thread that compiles while
  another thread's compile is in flight (refgrad fuzz compiles the next batch while this one runs) neither waits
  for it nor for a child LLVM hangs in; the parts of a large batch compile at the same time, each in a child that
  has started (`available`)."""

  def __init__(self):
    self._idle: list[CompileChild] = []
    self._every: list[CompileChild] = []
    self._lock = threading.Lock()

  def compile(self, source: str | list[str], vectorize: bool, limit: float | None = None) -> tuple[str, Any]:
    with self._lock:
      child = self._idle.pop(self._first_ready()) if self._idle else self._new()
    try:
      return child.compile(source, vectorize, limit)
    finally:
      with self._lock:
        self._idle.append(child)

  def available(self, wanted: int) -> int:
    """How many compiles can start at once without waiting for a child to start (1 at least: the first compile
    starts its child); children are started in the background until there are `wanted`, for later requests."""
    with self._lock:
      while len(self._every) < wanted:
        self._idle.append(self._new())
      return max(1, sum(child.ready() for child in self._idle))

  def _first_ready(self) -> int:
    return next((i for i, child in enumerate(self._idle) if child.ready()), len(self._idle) - 1)

  def _new(self) -> CompileChild:
    child = CompileChild()
    self._every.append(child)
    return child

  def close(self) -> None:
    for child in self._every:
      child.close()


SHARED = CompileChildren()  # every LLVMCompiler of a process sends its programs to these children
# closed before the interpreter ends, rather than found open by the collector (a ResourceWarning for each pipe and
# output file, and for the child "still running")
atexit.register(SHARED.close)


def main() -> None:
  """The child: answer compile requests until stdin closes. Stray prints go to stderr, never into the channel;
  Ctrl-C is the parent's to handle (the child ends when the parent does)."""
  from refgrad_llvm import LLVMCompileError, LLVMCompiler
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  channel_in, channel_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  compiler = LLVMCompiler()
  send(channel_out, READY)
  while True:
    try:
      source, vectorize = receive(channel_in)
    except EOFError:
      return
    work = compiler.compile_here if isinstance(source, str) else compiler.compile_batch_here
    try:
      answer = ("object", work(source, vectorize))
    except LLVMCompileError as e:
      answer = ("rejected", str(e))
    send(channel_out, (request_digest(source, vectorize), answer))
