"""`refgrad fuzz` throughput: Ray workers against one worker and against local processes, the PYTHON harness against
the one before issue 17, and how soon a new campaign replays a finding from a shared (Redis) example database; with
`--batches`, programs/s per device with and without compiling a batch's kernels ahead (issue 30).

    python bench/fuzz.py [--seconds 40] [--skip-baseline]
    python bench/fuzz.py --batches [--seconds 20] [--devices PYTHON CLANG LLVM OPENCL] [--against REV]

Targets (issue 17), all measured in this run: 2 Ray workers >= 1.7x the programs/s of 1 on CLANG; Ray within 10%
of `--jobs 2`; PYTHON programs/s per worker >= 2x the old harness (commit 1fe1c05, checked out into a temporary
directory and run the same way); a finding replayed within 5 s of a new campaign's start. Every run gets a fresh
compile cache, so no run profits from kernels an earlier one compiled.

Targets (issue 30), `--batches`: programs/s on PYTHON >= 500, CLANG >= 80 per worker, LLVM >= 200, OPENCL >= 40. Each
device runs with one and two workers (`--jobs`), before (each kernel compiled as it runs: compile_ahead=False) and after
(a batch's kernels compiled at once; on LLVM, whose compiler is isolated, while the batch before runs), each into a
fresh compile cache and then again warm (the same campaign on the cache the fresh run filled; past the programs that run
reached it compiles again). Each figure is the programs/s of the campaigns (each in a process of its own, as `refgrad
fuzz --jobs`) once their worker processes have started, summed over the workers, followed by the CPU ms a program: the
CPU time of every process of the campaigns (the campaign's, which draws the programs, its worker's, which runs them, and
the worker's children, LLVM's compile processes) over all their programs, a figure a loaded machine changes far less
than programs/s. The load average is printed with each row: the machine may be shared. `--against REV` runs each row
twice, first with refgrad as of git revision REV (exported to a temporary directory and put first on the path of the
campaigns and their workers; the installed device plugins are this tree's), then with this tree: before and after
in one run, alternating.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE_COMMIT = "1fe1c05"  # the harness before issue 17
BROKEN = str(REPO / "tests" / "broken_devices.py")


def fresh_cache() -> None:
  os.environ["REFGRAD_CACHE"] = tempfile.mkdtemp(prefix="refgrad-bench-cache-")


def run(device: str, seconds: float, **options) -> float:
  """programs/s of one campaign, from its start (worker start-up included) to its end."""
  from refgrad.testing.fuzz.driver import fuzz
  fresh_cache()
  with tempfile.TemporaryDirectory() as findings:
    report = fuzz(device, seconds, findings_dir=findings, **options)
  return report.rate


def ray_run(device: str, seconds: float, workers: int) -> float:
  """A campaign on a local Ray instance of its own (started here so its workers see this run's fresh cache)."""
  import ray
  fresh_cache()
  ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
  try:
    return run(device, seconds, ray="auto", workers=workers)
  finally:
    ray.shutdown()


def baseline_rate(seconds: float) -> float:
  """programs/s of the old harness on PYTHON: that commit's refgrad, exported to a temporary directory."""
  with tempfile.TemporaryDirectory() as old:
    exported(BASELINE_COMMIT, old)
    script = textwrap.dedent(f"""
      import sys, tempfile
      sys.path.insert(0, {old!r})
      from refgrad.testing.fuzz.driver import fuzz
      if __name__ == "__main__":
        with tempfile.TemporaryDirectory() as findings:
          print(fuzz("PYTHON", {seconds}, findings_dir=findings).rate)
      """)
    path = Path(old) / "baseline_run.py"
    path.write_text(script)
    fresh_cache()
    out = subprocess.run([sys.executable, str(path)], check=True, capture_output=True, text=True, cwd=old)
    return float(out.stdout.split()[-1])


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def replay_seconds(ray_workers: int | None) -> tuple[float | None, str]:
  """Seconds from a new campaign's start until it reports the finding an earlier campaign saved (BROKEN_IDIV, a
  planted bug), with a Redis database if redis-server is installed, else a directory."""
  from refgrad.testing.fuzz.driver import fuzz
  server, database, tmp = None, None, tempfile.mkdtemp()
  if shutil.which("redis-server"):
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    database = f"redis://127.0.0.1:{port}"
    time.sleep(0.5)
  else:
    database = str(Path(tmp) / "examples")
  try:
    options = dict(plugin_files=[BROKEN], database=database, findings_dir=tmp)
    fuzz("BROKEN_IDIV", 60, max_findings=1, **options)
    if ray_workers:
      import ray
      ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
      report = fuzz("BROKEN_IDIV", 10, 99, max_findings=1, ray="auto" if ray_workers else None,
                    workers=ray_workers, **options)
    finally:
      if ray_workers:
        import ray
        ray.shutdown()
    return report.first_replay, database.split(":")[0]
  finally:
    if server:
      server.kill()
    shutil.rmtree(tmp, ignore_errors=True)


def tree_cpu(pid: int) -> float:
  """CPU seconds (user and system) that process `pid` and its live descendants (LLVM's compile children) have used,
  read from /proc (0 where it cannot be read)."""
  try:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
  except OSError:
    return 0.0
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") + sum(tree_cpu(c) for c in children)


def campaign_rate(device: str, seconds: float, index: int, workers: int, compile_ahead: bool,
                  cache: str) -> tuple[int, float, float]:
  """Worker `index` of `workers`'s campaign over `seconds`, once its worker process has started: the programs it
  ran, the seconds it took and the CPU seconds it used (its own process, the worker's and the worker's children)."""
  from refgrad.testing.fuzz.campaign import Campaign, CampaignConfig
  os.environ["REFGRAD_CACHE"] = cache
  campaign = Campaign(CampaignConfig(device, compile_ahead=compile_ahead), 0, index, workers)
  try:
    campaign.worker.start()
    worker_cpu = lambda: tree_cpu(campaign.worker.process.pid) if campaign.worker.process else 0.0  # noqa: E731
    cpu = time.process_time() + worker_cpu()
    chunk = campaign.run_for(seconds)
    cpu = time.process_time() + worker_cpu() - cpu
  finally:
    campaign.close()
  return chunk.programs, chunk.seconds, cpu


def batch_run(device: str, seconds: float, jobs: int, compile_ahead: bool, cache: str) -> tuple[float, float]:
  """`jobs` campaigns at once (each in a process of its own, as `refgrad fuzz --jobs`): programs/s summed over them,
  and CPU ms a program (all their processes' CPU time over all their programs)."""
  context = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
    futures = [pool.submit(campaign_rate, device, seconds, i, jobs, compile_ahead, cache) for i in range(jobs)]
    runs = [future.result() for future in futures]
  programs = sum(count for count, _, _ in runs)
  return sum(count / took for count, took, _ in runs), 1000 * sum(cpu for _, _, cpu in runs) / max(programs, 1)


def batch_row(device: str, seconds: float, jobs: int, compile_ahead: bool) -> str:
  """One row's figures: a fresh compile cache, then the same campaign again on the cache it filled."""
  cache = tempfile.mkdtemp(prefix="refgrad-bench-cache-")
  try:
    figures = [batch_run(device, seconds, jobs, compile_ahead, cache) for _ in range(2)]
  finally:
    shutil.rmtree(cache, ignore_errors=True)
  return " ".join(f"{rate:7.1f}/s {cpu:5.2f} ms" for rate, cpu in figures)


def batch_row_of(tree: str, device: str, seconds: float, jobs: int, compile_ahead: bool) -> str:
  """batch_row with the refgrad and the device plugins of `tree` first on the path (of this script's run and of
  every process it starts)."""
  plugins = sorted(str(path) for path in Path(tree, "plugins").iterdir() if path.is_dir())
  environ = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, *plugins, os.environ.get("PYTHONPATH", "")]))
  args = [sys.executable, __file__, "--row", device, str(seconds), str(jobs), str(int(compile_ahead))]
  return subprocess.run(args, env=environ, check=True, capture_output=True, text=True).stdout.rstrip("\n")


def exported(revision: str, into: str) -> str:
  """The tree of git `revision`, exported into the directory `into`."""
  archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True)
  subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
  return into


def batches_table(devices: list[str], seconds: float, against: str | None = None) -> None:
  """programs/s and CPU ms a program per device, workers, before/after and fresh/warm cache (module docstring);
  with `against`, each row of that revision first."""
  print(f"each campaign {seconds:g} s once its worker has started; programs/s summed over the workers; CPU ms a "
        "program: every process of the campaigns (campaign, worker, compile children) over all their programs\n")
  print(f"{'device':8} {'jobs':>4}  {'mode':7} {'tree':8} {'fresh cache':>18} {'warm cache':>18}   "
        "load average (1/5/15 min)")
  with tempfile.TemporaryDirectory() as old:
    trees = [(against, exported(against, old))] if against else []
    for device in devices:
      for jobs in (1, 2):
        for compile_ahead in (False, True):
          mode = "after" if compile_ahead else "before"
          for name, tree in [*trees, ("this", None)]:
            shown = batch_row_of(tree, device, seconds, jobs, compile_ahead) if tree else \
              batch_row(device, seconds, jobs, compile_ahead)
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{device:8} {jobs:>4}  {mode:7} {name:8} {shown}   {load}", flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--seconds", type=float, default=None, help="seconds a campaign (40; 20 with --batches)")
  parser.add_argument("--skip-baseline", action="store_true", help="do not run the old harness")
  parser.add_argument("--batches", action="store_true", help="programs/s with and without compiling ahead")
  parser.add_argument("--devices", nargs="+", default=["PYTHON", "CLANG", "LLVM", "OPENCL"])
  parser.add_argument("--against", metavar="REV", help="with --batches: each row of git revision REV first")
  parser.add_argument("--row", nargs=4, help=argparse.SUPPRESS)  # DEVICE SECONDS JOBS COMPILE_AHEAD: one row's figures
  args = parser.parse_args()
  if args.row:
    device, seconds, jobs, compile_ahead = args.row
    print(batch_row(device, float(seconds), int(jobs), compile_ahead == "1"))
    return
  if args.batches:
    batches_table(args.devices, args.seconds or 20.0, args.against)
    return
  s = args.seconds or 40.0
  print(f"each campaign {s:g} s, programs/s from its start (worker start-up included)\n")
  one, two = ray_run("CLANG", s, 1), ray_run("CLANG", s, 2)
  jobs = run("CLANG", s, jobs=2)
  print(f"CLANG  Ray 1 worker {one:7.1f}   Ray 2 workers {two:7.1f}   ratio {two / one:.2f}x (target >= 1.7x)")
  print(f"CLANG  --jobs 2     {jobs:7.1f}   Ray 2 workers {two:7.1f}   Ray overhead {(1 - two / jobs) * 100:+.1f}% "
        "(target < 10%)")
  python = run("PYTHON", s)
  if not args.skip_baseline:
    old = baseline_rate(s)
    print(f"PYTHON one worker   {python:7.1f}   old harness ({BASELINE_COMMIT}) {old:7.1f}   ratio {python / old:.2f}x "
          "(target >= 2x)")
  else:
    print(f"PYTHON one worker   {python:7.1f}")
  for workers in (None, 2):
    seconds, kind = replay_seconds(workers)
    where = f"Ray, {workers} workers" if workers else "one local worker"
    shown = f"{seconds:.2f} s" if seconds is not None else "never"
    print(f"replay from a {kind} database ({where}): the saved finding reported {shown} after the start (target < 5 s)")


if __name__ == "__main__":
  main()
