"""Where `refgrad fuzz` campaigns run: in this process, in local processes (`--jobs N`), or as Ray actors on any
number of machines (`--ray auto|ADDRESS --workers N`).

Every engine runs the same `Campaign` (campaign.py) per worker, in chunks of about CHUNK_SECONDS, and
yields `(worker name, Chunk)` as chunks finish, so the driver can show progress and write findings while the
campaign goes on. A backend that crashes or hangs kills only the campaign's own worker process, which is replaced
(the finding is a crash or a hang); a Ray actor that dies is replaced too, and carries on from the batch it had
reached. Refgrad's own failures (HarnessError) stop every engine.
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queues
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from refgrad.testing.fuzz.campaign import Campaign, CampaignConfig
from refgrad.testing.fuzz.results import Chunk, HarnessError, check_chunk

CHUNK_SECONDS = 1.0  # how often a worker reports: the dashboard's resolution, and the most work a Ctrl-C loses
# A job or actor cuts its own work short at the config's cut_at and then reports its last chunk; one still going this
# long after it (stuck starting, or its machine starved) is no longer waited for, and stop() ends it.
STRAGGLER_SECONDS = 3.0
STOP_SECONDS = 5.0  # for the jobs stopped early to close their campaigns (stop their workers), all together


def _overdue(config: CampaignConfig) -> bool:
  """True once the campaign's workers should all have reported their last chunk."""
  return config.cut_at is not None and time.time() > config.cut_at + STRAGGLER_SECONDS


def _keeping_interrupts(lost: list[Any], default: Callable[[Any], None]) -> Callable[[Any], None]:
  """An unraisable-exception hook that keeps a KeyboardInterrupt in `lost` and gives anything else to `default`."""
  def hook(unraisable: Any) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
      lost.append(unraisable)
    else:
      default(unraisable)
  return hook


def _chunks_until(campaign: Campaign, deadline: float) -> Iterator[Chunk]:
  """The campaign's chunks until `deadline`. A Ctrl-C that came where Python cannot raise it (a gc callback, which
  hypothesis registers: Python prints it as an ignored exception's traceback and carries on) is raised after the
  chunk instead."""
  lost: list[Any] = []
  default_hook = sys.unraisablehook
  sys.unraisablehook = _keeping_interrupts(lost, default_hook)
  try:
    while time.monotonic() < deadline and not campaign.done:
      yield campaign.run_for(min(CHUNK_SECONDS, deadline - time.monotonic()))
      if lost:
        raise KeyboardInterrupt
  finally:
    sys.unraisablehook = default_hook


class InProcessEngine:
  """One campaign in this process (its worker process runs the programs)."""

  def __init__(self, config: CampaignConfig, start_seed: int):
    self.names = ["local-0"]
    self.campaign = Campaign(config, start_seed)

  def chunks(self, seconds: float) -> Iterator[tuple[str, Chunk]]:
    for chunk in _chunks_until(self.campaign, time.monotonic() + seconds):
      yield self.names[0], chunk

  def stop(self) -> None:
    self.campaign.close()


def _local_job(config: CampaignConfig, start_seed: int, index: int, jobs: int, seconds: float, out: Any) -> None:
  """A local job's main: its chunks go to `out`; then None, or the traceback of refgrad's own failure."""
  campaign = Campaign(config, start_seed, index, jobs)
  ending: str | None = None
  try:
    for chunk in _chunks_until(campaign, time.monotonic() + seconds):
      out.put((index, chunk))
  except KeyboardInterrupt:  # Ctrl-C reaches every process of the terminal: the parent reports what arrived
    pass
  except Exception:
    ending = traceback.format_exc()
  finally:
    campaign.close()
    out.put((index, ending))


class ProcessEngine:
  """`jobs` campaigns in local processes (spawned: each starts its own worker process in turn)."""

  def __init__(self, config: CampaignConfig, start_seed: int, jobs: int):
    self.config, self.start_seed, self.jobs = config, start_seed, jobs
    self.names = [f"local-{i}" for i in range(jobs)]
    self.processes: list[Any] = []
    self.running: set[int] = set()  # jobs that have not sent their end yet

  def chunks(self, seconds: float) -> Iterator[tuple[str, Chunk]]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    self.processes = [context.Process(target=_local_job, args=(self.config, self.start_seed, i, self.jobs, seconds,
                                                                out)) for i in range(self.jobs)]
    for process in self.processes:
      process.start()
    self.running = set(range(self.jobs))
    while self.running and not _overdue(self.config):
      try:
        index, item = out.get(timeout=1.0)
      except queues.Empty:  # a job killed from outside sends nothing more
        self.running = {i for i in self.running if self.processes[i].is_alive()}
        continue
      if isinstance(item, Chunk):
        yield self.names[index], item
        continue
      self.running.discard(index)
      if item is not None:
        raise HarnessError(item)

  def stop(self) -> None:
    for index in self.running:  # stopped early (Ctrl-C, overdue): each job closes its campaign and ends
      if self.processes[index].is_alive():
        os.kill(self.processes[index].pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_SECONDS
    for process in self.processes:
      process.join(timeout=max(0.0, deadline - time.monotonic()))
      if process.is_alive():
        process.kill()
        process.join()


class CampaignActor:
  """A Campaign as a Ray actor (ray.remote is applied in RayEngine, so importing this module needs no Ray)."""

  def __init__(self, config: CampaignConfig, start_seed: int, index: int, workers: int, first_batch: int):
    self.campaign = Campaign(config, start_seed, index, workers, first_batch)

  def run_for(self, seconds: float) -> Chunk:
    return self.campaign.run_for(seconds)

  def close(self) -> None:
    self.campaign.close()


def connect_ray(address: str) -> None:
  """Join the Ray cluster at `address`; "auto" joins the one this machine belongs to, or starts a local one."""
  import ray
  if ray.is_initialized():
    return
  quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
  if address != "auto":
    ray.init(address=address, **quiet)
    return
  try:
    ray.init(address="auto", **quiet)
  except ConnectionError:
    ray.init(address="local", include_dashboard=False, **quiet)


class RayEngine:
  """`workers` campaigns as Ray actors of one CPU each, wherever the cluster places them."""

  def __init__(self, config: CampaignConfig, start_seed: int, workers: int, address: str):
    import ray
    connect_ray(address)
    self.ray, self.config, self.start_seed, self.workers = ray, config, start_seed, workers
    self.actor_class = ray.remote(num_cpus=1)(CampaignActor)
    self.names = [f"ray-{i}" for i in range(workers)]
    self.batches = [0] * workers  # batches each worker has run: a replacement actor starts after them
    self.actors = [self._start(i) for i in range(workers)]

  def _start(self, index: int) -> Any:
    return self.actor_class.remote(self.config, self.start_seed, index, self.workers, self.batches[index])

  def chunks(self, seconds: float) -> Iterator[tuple[str, Chunk]]:
    ray = self.ray
    deadline = time.monotonic() + seconds
    pending = {actor.run_for.remote(min(CHUNK_SECONDS, seconds)): i for i, actor in enumerate(self.actors)}
    while pending and not _overdue(self.config):  # an actor that never got a CPU is not waited for past the end
      ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
      for ref in ready:
        index = pending.pop(ref)
        chunk = self._result(ref, index)
        if chunk is not None:
          self.batches[index] += chunk.batches
          yield self.names[index], chunk
        if time.monotonic() < deadline and not (chunk is not None and chunk.done):
          left = deadline - time.monotonic()
          pending[self.actors[index].run_for.remote(min(CHUNK_SECONDS, left))] = index

  def _result(self, ref: Any, index: int) -> Chunk | None:
    """The chunk (checked: Ray unpickled it from the network), or None when the actor died (it is replaced);
    refgrad's own failure is raised here."""
    from ray.exceptions import RayActorError, RayTaskError
    try:
      return check_chunk(self.ray.get(ref), self.names[index])
    except RayTaskError as e:
      cause = getattr(e, "cause", None)
      raise HarnessError(str(cause) if isinstance(cause, HarnessError) else str(e)) from None
    except RayActorError:
      self.actors[index] = self._start(index)
      return None

  def stop(self) -> None:
    closing = [actor.close.remote() for actor in self.actors]
    self.ray.wait(closing, num_returns=len(closing), timeout=10)
    for actor in self.actors:
      self.ray.kill(actor)


def engine_for(config: CampaignConfig, start_seed: int, jobs: int, ray: str | None, workers: int | None) -> Any:
  """The engine the options ask for: Ray actors with `ray`, else `jobs` local processes (one: in this process)."""
  if ray:
    return RayEngine(config, start_seed, workers or jobs, ray)
  if workers is not None:
    raise ValueError("--workers counts Ray actors: give --ray auto or --ray ADDRESS (for local processes: --jobs)")
  return InProcessEngine(config, start_seed) if jobs == 1 else ProcessEngine(config, start_seed, jobs)
