"""PoCL builds each new program first in a child process of its own: memory, and crashes, stay in the child.

The first time a process builds a program PoCL has not cached on disk, PoCL's compiler takes about 126 MB of
resident memory for the rest of the process; building a source it has cached costs about 7 MB. So CLCompiler sends
each source to a long-lived child (`BuildChild`, one per process, started on first need), which opens the same
platform and device, builds it with the same options, and answers ok or the build log; the runtime then builds the
program in-process, from PoCL's kernel cache. PoCL crashing on a program kills the child, never the user's process.
The child is used only where it helps: PoCL with its kernel cache on (POCL_KERNEL_CACHE is not "0").
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

POCL_PLATFORM = "Portable Computing Language"
STDERR_TAIL = 2000  # characters of what a dead child printed, kept for the error message
CLOSE_WAIT = 2.0  # seconds a child is given to end when closed
ENABLED = True  # False: build in-process as before (tests compare the two)


def helps(device: Any) -> bool:
  """A build in the child makes the in-process build cheap only through PoCL's on-disk kernel cache."""
  return ENABLED and device.platform.name.strip() == POCL_PLATFORM and os.environ.get("POCL_KERNEL_CACHE") != "0"


class BuildChild:
  """The parent's end of one child (a forked copy of the parent starts its own), started on first use and again
  after it dies. `build` answers (verdict, text): ("ok", ""), ("rejected", build log), ("crashed", what the child
  printed), or ("unavailable", why) when no child could start or it has no such device (build in-process)."""

  command = (sys.executable, "-c", "from refgrad_opencl.isolation import main; main()")

  def __init__(self):
    self._process: subprocess.Popen | None = None
    self._channel: tuple[Connection, Connection] | None = None  # (to the child, from the child)
    self._stderr: IO[bytes] | None = None
    self._owner = -1
    self._lock = threading.Lock()

  def build(self, device: Any, source: str, options: tuple[str, ...]) -> tuple[str, str]:
    with self._lock:
      try:
        self._running()
      except OSError as e:
        return "unavailable", f"the build process did not start: {e}"
      to_child, from_child = self._channel
      try:
        to_child.send((device.platform.name.strip(), device.name.strip(), options, source))
        return from_child.recv()
      except (EOFError, OSError):
        return "crashed", self._died()

  def close(self) -> None:
    """Stop the child (it also stops by itself when this process ends: its stdin closes); one still building for
    another thread (a daemon thread at exit) is killed."""
    mine = self._process is not None and self._owner == os.getpid()
    if not self._lock.acquire(timeout=CLOSE_WAIT):
      if mine:
        self._process.kill()
      return
    try:
      if mine:
        self._channel[0].close()
        try:
          self._process.wait(CLOSE_WAIT)
        except subprocess.TimeoutExpired:
          self._process.kill()
          self._process.wait()
        self._release()
      self._process = None
    finally:
      self._lock.release()

  def _running(self) -> None:
    if self._process is None or self._owner != os.getpid() or self._process.poll() is not None:
      if self._process is not None and self._owner == os.getpid():
        self._release()  # it died between two builds
      self._stderr = tempfile.TemporaryFile()
      # the child imports this package from where this process did, installed or not
      paths = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))
      self._process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=self._stderr, env={**os.environ, "PYTHONPATH": paths})
      self._owner = os.getpid()
      self._channel = (Connection(os.dup(self._process.stdin.fileno()), readable=False),
                       Connection(os.dup(self._process.stdout.fileno()), writable=False))

  def _died(self) -> str:
    """What the dead child printed, with how it ended; the next build starts a new child."""
    status = self._process.wait()
    how = f"signal {-status}" if status < 0 else f"exit status {status}"
    self._stderr.seek(0)
    printed = self._stderr.read().decode(errors="replace").strip()[-STDERR_TAIL:]
    self._release()
    self._process = None
    return f"the build process ended ({how})" + (f"; it printed:\n{printed}" if printed else "")

  def _release(self) -> None:
    for stream in (*self._channel, self._process.stdin, self._process.stdout, self._stderr):
      stream.close()


SHARED = BuildChild()  # every CLCompiler of a process sends its new programs to this child
atexit.register(SHARED.close)


def main() -> None:
  """The child: answer build requests until stdin closes. Stray prints go to stderr, never into the channel."""
  import pyopencl as cl
  channel_in, channel_out = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
  os.dup2(2, 1)
  contexts: dict[tuple[str, str], tuple[Any, Any]] = {}
  while True:
    try:
      platform, device_name, options, source = channel_in.recv()
    except EOFError:
      return
    if (platform, device_name) not in contexts:
      found = [d for p in cl.get_platforms() if p.name.strip() == platform for d in p.get_devices()
               if d.name.strip() == device_name]  # PoCL, the only platform used here, always has its device
      contexts[platform, device_name] = (cl.Context(found[:1]), found[0]) if found else (None, None)
    context, device = contexts[platform, device_name]
    channel_out.send(build(cl, context, device, source, options) if device is not None else
                     ("unavailable", f"the build process found no device {device_name!r} on {platform!r}"))


def build(cl: Any, context: Any, device: Any, source: str, options: tuple[str, ...]) -> tuple[str, str]:
  program = cl.Program(context, source)
  try:
    program.build(options=list(options), devices=[device])
  except cl.RuntimeError as e:
    return "rejected", program.get_build_info(device, cl.program_build_info.LOG).strip() or str(e)
  return "ok", ""
