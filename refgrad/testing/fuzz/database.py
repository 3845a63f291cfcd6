"""The example database campaigns share: a directory or a redis server, where failing examples are saved by one
campaign and replayed first by every later one."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from refgrad.dtype import DType

REDIS_CONNECT_SECONDS = 5.0  # for a database server to answer before a campaign starts


def url_scheme(url: str) -> str | None:
  """The scheme of a database given as a URL ('redis' for redis://host:port), or None for a directory path."""
  match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", url)
  return match.group(1).lower() if match else None


def open_database(url: str) -> Any:
  """A hypothesis example database: `redis://host:port[/db]` (hypothesis.extra.redis) or a directory path. Any
  other URL is refused (as a path it would become a local folder named after the URL)."""
  from hypothesis.database import DirectoryBasedExampleDatabase
  scheme = url_scheme(url)
  if scheme == "redis":
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase
    return RedisExampleDatabase(redis.Redis.from_url(url))
  if scheme is not None:
    raise ValueError(_not_redis(url, scheme))
  return DirectoryBasedExampleDatabase(url)


def _not_redis(url: str, scheme: str) -> str:
  return f"{url!r}: a database server is given as redis://HOST:PORT, not {scheme}:// (or give a directory)"


def database_problem(url: str, write: bool = True) -> str:
  """Why `url` cannot serve as an example database now, or "": its server must answer, its directory be writable
  (one only read must exist). hypothesis ignores a database it cannot write, so a campaign would lose its examples
  without a word; a server that does not answer would stop it after start-up."""
  scheme = url_scheme(url)
  if scheme is None:
    if write:
      return unwritable_directory(url)
    return "" if Path(url).is_dir() else f"no directory {url!r} to replay examples from"
  if scheme != "redis":
    return _not_redis(url, scheme)
  try:
    import redis
  except ImportError:
    return f"{url!r} needs the redis package: pip install 'refgrad[ray]'"
  try:
    redis.Redis.from_url(url, socket_connect_timeout=REDIS_CONNECT_SECONDS).ping()
  except (redis.RedisError, ValueError) as e:
    return f"cannot reach {url!r}: {e}"
  return ""


def unwritable_directory(path: str) -> str:
  """Why a directory cannot be written at `path` (made with its parents if need be), or "". Probed by making and
  removing a directory where the first one would be made, so nothing is left behind."""
  existing = target = Path(path)
  while not os.path.lexists(existing):
    existing = existing.parent
  if not existing.is_dir():
    return f"{path!r} is a file, not a directory" if existing == target else \
      f"cannot make directory {path!r}: {str(existing)!r} is a file"
  try:
    os.rmdir(tempfile.mkdtemp(prefix=".refgrad-probe-", dir=existing))
  except OSError as e:
    return f"cannot write in {path!r}: {e.strerror}" if existing == target else \
      f"cannot make directory {path!r}: {str(existing)!r} takes no new entry ({e.strerror})"
  return ""


def example_database(database: str | None, shared: tuple[str, ...] = ()) -> Any:
  """`database` read and written, every `shared` one only read (hypothesis's MultiplexedDatabase of them); None if
  there is none."""
  from hypothesis.database import MultiplexedDatabase, ReadOnlyDatabase
  dbs = ([open_database(database)] if database else []) + [ReadOnlyDatabase(open_database(u)) for u in shared]
  return None if not dbs else dbs[0] if len(dbs) == 1 else MultiplexedDatabase(*dbs)


def database_key(device: str, focus: DType, allowed: tuple[DType, ...]) -> bytes:
  """Where a batch's failing examples are kept: one key per device and program strategy (focus and claimed dtypes),
  so an example is replayed by the strategy that drew it, and only on its device (hypothesis deletes a replayed
  example that passes: a campaign on a correct device must not erase another device's findings)."""
  return f"refgrad-fuzz/{STRATEGY_VERSION}/{device}/{focus.name}/{'+'.join(d.name for d in allowed)}".encode()


STRATEGY_VERSION = 2  # bump when the program strategies draw differently: old examples would replay as other programs
