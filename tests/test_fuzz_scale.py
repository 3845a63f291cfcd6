"""Fuzz campaigns at scale, with the real parts: a local Ray cluster (`ray start --head`, two worker CPUs) and a real
redis-server, each started here on 127.0.0.1 and stopped at the end. A planted bug is found across Ray workers, each
distinct finding is written once, and a fresh campaign replays it from the Redis example database first thing; the
pytest plugin replays it in CI; Ctrl-C stops a campaign and still writes its report."""
from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import broken_devices  # tests/ is on sys.path (pytest prepends it)
import pytest
from helpers import free_port, interrupt_fuzz_under_way, local_redis

from refgrad.testing.fuzz.campaign import batch_seed, replay_database
from refgrad.testing.fuzz.driver import fuzz
from refgrad.testing.fuzz.engines import _chunks_until
from refgrad.testing.fuzz.results import FINDING_KINDS, Chunk

BROKEN_FILE = str(Path(__file__).with_name("broken_devices.py"))
RAY = Path(sys.executable).with_name("ray")


# One xdist worker runs every test of this module (pyproject: --dist loadgroup), so one Ray cluster serves them all.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
  """A Ray head node on 127.0.0.1 with two worker CPUs (`ray start --head --block`, in a process group of its own,
  so stopping it stops no other Ray on the machine); its address."""
  port = free_port()
  # a token of the cluster's own: Ray reads ~/.ray/auth_token if a local ray.init ever made one, and a head started
  # without token auth then refuses the clients that send it
  token = tmp_path_factory.mktemp("ray") / "auth_token"
  token.write_text(secrets.token_hex(32))
  saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
  os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
  pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'; .ci/run installs it)")
  head = subprocess.Popen([str(RAY), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port",
                           str(port), "--num-cpus", "2", "--include-dashboard=false", "--disable-usage-stats"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
  deadline = time.monotonic() + 120
  while not port_open(port):
    assert head.poll() is None and time.monotonic() < deadline, f"ray start failed: {head.stderr.read()[-2000:]}"
    time.sleep(0.2)
  try:
    yield f"127.0.0.1:{port}"
  finally:
    import ray
    if ray.is_initialized():
      ray.shutdown()
    # the head alone is told to stop: it drains the node and stops the cluster's processes in about 3 s (a SIGTERM to
    # them all at once left it waiting 30 s for the GCS server it had just lost); the group is killed if it is slow
    head.terminate()
    try:
      head.wait(timeout=60)
    except subprocess.TimeoutExpired:
      head.kill()
      head.wait()
    with contextlib.suppress(ProcessLookupError):
      os.killpg(head.pid, signal.SIGKILL)  # whatever of the cluster outlived its head
    for key, value in saved.items():
      if value is None:
        os.environ.pop(key, None)
      else:
        os.environ[key] = value


def port_open(port: int) -> bool:
  try:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True
  except OSError:
    return False


@pytest.fixture(scope="module")
def redis_url():
  """A redis-server of this module's own on 127.0.0.1; its URL."""
  with local_redis() as url:
    if url is None:
      pytest.skip("redis-server or the redis client is not installed (Debian package redis-server, pip install -e "
                  "'.[ray]'; .ci/run installs both)")
    yield url


@pytest.fixture(scope="module", autouse=True)
def broken_plugin():
  with broken_devices.registered():
    yield


def test_seeds_of_workers_never_meet():
  seen = {batch_seed(7, k, i, 3) for k in range(200) for i in range(3)}
  assert len(seen) == 600


@pytest.fixture(scope="module")
def found_across_ray_workers(ray_cluster, redis_url, tmp_path_factory):
  """A campaign of two Ray workers on a planted bug (integer division that floors), saving to Redis."""
  findings = tmp_path_factory.mktemp("findings")
  report = fuzz("BROKEN_IDIV", 40, findings_dir=str(findings), plugin_files=[BROKEN_FILE], ray=ray_cluster,
                workers=2, database=redis_url, max_findings=2)
  return report, findings


def test_a_planted_bug_is_found_across_ray_workers_and_written_once(found_across_ray_workers):
  report, findings = found_across_ray_workers
  assert report.signatures and all(f.kind in FINDING_KINDS for f in report.signatures.values())
  assert set(report.per_worker) == {"ray-0", "ray-1"} and min(report.per_worker.values()) > 0
  files = sorted(findings.glob("test_finding_*.py"))
  assert len(files) == len(report.signatures) == len(report.findings)  # one file per signature
  index = json.loads((findings / "index.json").read_text())
  assert set(index) == set(report.signatures)
  assert sum(e["count"] for e in index.values()) == sum(f.count for f in report.signatures.values())
  module = runpy.run_path(str(files[0]))  # a standalone reproducer that fails the same way
  with pytest.raises(AssertionError, match="differs from the reference"):
    module["test_finding"]()


def test_a_fresh_campaign_replays_the_finding_from_redis_first(found_across_ray_workers, redis_url, tmp_path):
  report, _ = found_across_ray_workers
  again = fuzz("BROKEN_IDIV", 5, 12345, findings_dir=str(tmp_path), plugin_files=[BROKEN_FILE], database=redis_url,
               max_findings=1)
  replayed = [f for f in again.signatures.values() if f.replayed]
  assert again.replayed > 0 and replayed
  assert {f.signature for f in replayed} <= set(report.signatures)
  assert again.first_replay is not None and again.first_replay <= again.seconds  # before any generated batch ended
  assert all(f.replayed for f in again.signatures.values() if f.at <= again.first_replay)


def test_the_same_database_replays_in_ray_workers_too(found_across_ray_workers, ray_cluster, redis_url, tmp_path):
  again = fuzz("BROKEN_IDIV", 5, 999, findings_dir=str(tmp_path), plugin_files=[BROKEN_FILE], ray=ray_cluster,
               workers=2, database=redis_url, max_findings=1)
  assert again.replayed > 0 and any(f.replayed for f in again.signatures.values())


def test_a_correct_device_replays_nothing_of_another_devices_findings(found_across_ray_workers, redis_url):
  chunk = replay_database("PYTHON", (redis_url,))
  assert chunk.replayed == 0 and not chunk.findings


def test_the_pytest_plugin_replays_saved_findings(found_across_ray_workers, redis_url, tmp_path):
  (tmp_path / "test_nothing.py").write_text("def test_nothing():\n  pass\n")
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
  run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--refgrad-database",
                        redis_url, "--refgrad-plugin", BROKEN_FILE, "--refgrad-device", "BROKEN_IDIV",
                        "--refgrad-device", "PYTHON", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
  assert "refgrad_replay[broken_idiv]" in run.stdout and "still fail on BROKEN_IDIV" in run.stdout, run.stdout
  assert "1 failed, 2 passed" in run.stdout, run.stdout  # the PYTHON replay and test_nothing pass


def test_a_crash_in_a_ray_worker_is_a_finding_not_a_dead_pool(ray_cluster, tmp_path):
  report = fuzz("CRASHY_SEGFAULT", 30, findings_dir=str(tmp_path), plugin_files=[BROKEN_FILE], ray=ray_cluster,
                workers=2, timeout=3, max_findings=1)
  assert any(f.kind == "crash" for f in report.signatures.values())
  assert min(report.per_worker.values()) > 0


@pytest.mark.parametrize("engine", [["--jobs", "2"], ["--ray", "RAY", "--workers", "2"]], ids=["jobs", "ray"])
def test_ctrl_c_stops_every_worker_and_writes_the_report(engine, ray_cluster, tmp_path):
  engine = [ray_cluster if a == "RAY" else a for a in engine]
  html = tmp_path / "report.html"
  fuzzing = subprocess.Popen([sys.executable, "-m", "refgrad.cli", "fuzz", "--device", "PYTHON", "--seconds", "600",
                              "--findings", str(tmp_path / "f"), "--html", str(html), *engine],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  out, err = interrupt_fuzz_under_way(fuzzing, wait=60)
  assert fuzzing.returncode == 130, err
  assert "interrupted" in out and "programs/s" in out, out + err
  assert html.exists() and "<svg" in html.read_text()


def test_a_ctrl_c_that_lands_in_a_gc_callback_still_stops_the_campaign_after_its_chunk(capsys):
  """hypothesis times garbage collections with a gc callback, where a KeyboardInterrupt cannot be raised: Python
  printed it as an ignored exception's traceback and the campaign carried on (a job of `--jobs 2` ran on)."""
  def ctrl_c(phase: str, info: dict) -> None:
    if phase == "start":
      raise KeyboardInterrupt

  class Campaign:
    chunks, done = 0, False

    def run_for(self, seconds: float) -> Chunk:
      self.chunks += 1
      self.done = self.chunks == 3
      gc.callbacks.append(ctrl_c)
      try:
        gc.collect()
      finally:
        gc.callbacks.remove(ctrl_c)
      return Chunk()
  campaign = Campaign()
  with pytest.raises(KeyboardInterrupt):
    list(_chunks_until(campaign, time.monotonic() + 60))
  assert campaign.chunks == 1 and "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [(["--workers", "2"], "--workers counts Ray actors"),
                                          (["--jobs", "0"], "argument --jobs: need 1 to")])
def test_fuzz_usage_errors_are_named_not_taken_for_harness_bugs(args, message, capsys):
  from refgrad.cli import main
  assert main(["fuzz", "--device", "PYTHON", "--seconds", "1", *args]) == 2
  err = capsys.readouterr().err
  assert message in err and "harness" not in err
