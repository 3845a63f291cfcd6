"""The `refgrad` command refuses a command line it cannot act on before any work: a usage error (status 2) whose
one line names the option and the value, as argparse's own do, never a traceback or "a bug in refgrad" (issue 27).
Its time limits count from the start of the command, and a campaign that tests nothing does not pass."""
import importlib.util
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import broken_devices
import pytest
from helpers import local_redis

import refgrad.cli as refgrad_cli
from refgrad.cli import MAX_JOBS, USAGE, main
from refgrad.testing.fuzz.database import database_problem
from refgrad.testing.fuzz.driver import fuzz

pytest_plugins = ["pytester"]
TESTS = Path(__file__).parent
BROKEN_FILE = str(TESTS / "broken_devices.py")


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
  """The real command in a process of its own (its exit status, its output)."""
  return subprocess.run([sys.executable, "-m", "refgrad.cli", *args], capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, **(env or {})})


def usage_error(capsys, *argv: str) -> str:
  """main(argv) is a usage error, said in one line: that line."""
  assert main(list(argv)) == USAGE
  out, err = capsys.readouterr()
  lines = err.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in err and "bug in refgrad" not in err, err
  assert not out, out  # no work done: nothing reported
  return lines[0]


NUMBERS = [
  (["fuzz", "--device", "PYTHON", "--seconds", "0"], "--seconds", "0.0"),
  (["fuzz", "--device", "PYTHON", "--seconds", "-5"], "--seconds", "-5.0"),
  (["fuzz", "--device", "PYTHON", "--seconds", "nan"], "--seconds", "nan"),
  (["fuzz", "--device", "PYTHON", "--seconds", "inf"], "--seconds", "inf"),
  (["fuzz", "--device", "PYTHON", "--timeout", "0"], "--timeout", "0.0"),
  (["fuzz", "--device", "PYTHON", "--seconds", "2e6"], "--seconds", "2000000.0"),
  (["fuzz", "--device", "PYTHON", "--timeout", "0.01"], "--timeout", "0.01"),
  (["fuzz", "--device", "PYTHON", "--timeout", "1e10"], "--timeout", "10000000000.0"),  # overflowed a wait: exit 3
  (["fuzz", "--device", "PYTHON", "--timeout", "nan"], "--timeout", "nan"),
  (["fuzz", "--device", "PYTHON", "--jobs", "0"], "--jobs", "0"),
  (["fuzz", "--device", "PYTHON", "--jobs", "100000"], "--jobs", "100000"),  # ran past --seconds, leaked semaphores
  (["fuzz", "--device", "PYTHON", "--jobs", str(MAX_JOBS + 1)], "--jobs", str(MAX_JOBS + 1)),
  (["fuzz", "--device", "PYTHON", "--ray", "auto", "--workers", "0"], "--workers", "0"),
  (["fuzz", "--device", "PYTHON", "--ray", "auto", "--workers", "100000"], "--workers", "100000"),
  (["fuzz", "--device", "PYTHON", "--max-findings", "0"], "--max-findings", "0"),
  (["fuzz", "--device", "PYTHON", "--max-programs", "0"], "--max-programs", "0"),
  (["fuzz", "--device", "PYTHON", "--seed", "-1"], "--seed", "-1"),
  (["demo", "--seed", "-1"], "--seed", "-1"),
  (["selftest", "--fuzz-seconds", "-5"], "--fuzz-seconds", "-5.0"),
  (["selftest", "--fuzz-seconds", "nan"], "--fuzz-seconds", "nan"),
  (["selftest", "--fuzz-seconds", "inf"], "--fuzz-seconds", "inf"),
  (["selftest", "--case-timeout", "0"], "--case-timeout", "0.0"),
  (["selftest", "--case-timeout", "1e7"], "--case-timeout", "10000000.0"),
  (["reduce", "FINDING", "--timeout", "0"], "--timeout", "0.0"),
  (["reduce", "FINDING", "--timeout", "inf"], "--timeout", "inf"),
]


@pytest.mark.parametrize("argv,option,value", NUMBERS, ids=[" ".join(argv) for argv, _, _ in NUMBERS])
def test_a_numeric_option_out_of_range_is_a_usage_error(argv, option, value, capsys):
  line = usage_error(capsys, *argv)
  assert line.startswith(f"refgrad {argv[0]}: error: argument {option}: need ") and line.endswith(f"got {value}")


def test_argparse_errors_are_returned_not_raised(capsys):
  assert main(["fuzz", "--device", "PYTHON", "--seconds", "x"]) == USAGE
  err = capsys.readouterr().err
  assert err.startswith("usage: refgrad fuzz") and "argument --seconds: invalid float value: 'x'" in err


def test_a_usage_error_on_a_number_states_the_range(capsys):
  line = usage_error(capsys, "fuzz", "--device", "PYTHON", "--jobs", "100000")
  assert line == f"refgrad fuzz: error: argument --jobs: need 1 to {MAX_JOBS} jobs (4 per CPU), got 100000"
  line = usage_error(capsys, "reduce", "FINDING", "--timeout", "1e10")
  assert line == "refgrad reduce: error: argument --timeout: need 1 to 1000000 seconds, got 10000000000.0"


def test_the_values_a_campaign_can_use_are_accepted(capsys):
  """0 s of fuzz per escape is selftest's check-only mode; each end of each range is allowed."""
  assert main(["selftest", "--list", "--fuzz-seconds", "0", "--case-timeout", "1"]) == 0
  assert main(["selftest", "--list", "--fuzz-seconds", "1e6", "--case-timeout", "1e6"]) == 0
  for edge in (["--timeout", "1", "--jobs", "1", "--seed", "0"], ["--timeout", "1e6", "--seconds", "1e6", "--jobs",
                                                                   str(MAX_JOBS), "--seed", str(2**100)]):
    assert main(["fuzz", "--device", "NO_SUCH_DEVICE", *edge]) == USAGE
    assert "argument --device: unknown device 'NO_SUCH_DEVICE'; known devices: " in capsys.readouterr().err


ENVIRONMENT = [("REFGRAD_SEARCH", "-3"), ("REFGRAD_SEARCH", "1001"), ("REFGRAD_SEARCH", "abc"),
               ("REFGRAD_SEARCH", "nan"), ("REFGRAD_CACHE_MAX_MB", "-5"), ("REFGRAD_CACHE_MAX_MB", "inf")]


@pytest.mark.parametrize("name,value", ENVIRONMENT, ids=[f"{n}={v}" for n, v in ENVIRONMENT])
def test_a_numeric_environment_variable_out_of_range_is_a_usage_error(name, value, monkeypatch, capsys):
  """Before any work (the demo prints as it goes): REFGRAD_SEARCH=-3 was taken for 0, and a bad value met in a fuzz
  worker was reported as a bug in refgrad."""
  monkeypatch.setenv(name, value)
  line = usage_error(capsys, "demo", "--device", "PYTHON")
  assert line.startswith(f"refgrad demo: error: {name}={value!r}: "), line
  assert ("0 (no search) to 1000" if name == "REFGRAD_SEARCH" else "a positive number of megabytes") in line


def test_the_environments_numbers_in_range_are_accepted(monkeypatch, capsys):
  monkeypatch.setenv("REFGRAD_SEARCH", "1000")
  monkeypatch.setenv("REFGRAD_CACHE_MAX_MB", "0.5")
  assert main(["devices"]) == 0
  assert "PYTHON" in capsys.readouterr().out


MALFORMED_RAY = ["not a host", "host", "host:", "host:port", "host:0", "host:65536", "ray://host", "http://host:6379",
                 "anyscale://cluster:443", ":6379", "[::1:6379"]


@pytest.mark.parametrize("address", MALFORMED_RAY)
def test_a_ray_address_ray_init_would_not_take_is_a_usage_error(address, capsys):
  """'not a host' was Ray's traceback, blamed on refgrad (exit 3); another scheme makes ray.init import a module."""
  pytest.importorskip("ray")
  line = usage_error(capsys, "fuzz", "--device", "PYTHON", "--ray", address)
  forms = refgrad_cli.RAY_ADDRESSES
  assert line == f"refgrad fuzz: error: argument --ray: {address!r} is not a Ray address: give {forms}"


@contextmanager
def listener(answer: bytes | None) -> Iterator[int]:
  """A TCP server on 127.0.0.1 that accepts a connection and sends `answer` (None: says nothing); its port."""
  server = socket.create_server(("127.0.0.1", 0))
  accepted = []

  def serve() -> None:
    connection, _ = server.accept()
    accepted.append(connection)
    if answer is not None:
      connection.sendall(answer)
  thread = threading.Thread(target=serve, daemon=True)
  thread.start()
  try:
    yield server.getsockname()[1]
  finally:
    server.close()
    for connection in accepted:
      connection.close()


@pytest.mark.parametrize("answer,problem", [
  (None, "no answer within 0.5 s"),
  (b"-ERR unknown command 'PRI'\r\n", "what answers there is not a Ray cluster's head (no gRPC)")],
  ids=["silent", "redis"])
def test_a_ray_address_where_no_ray_answers_is_a_usage_error_in_bounded_time(answer, problem, monkeypatch, capsys):
  """ray.init waited for ever (over 10 minutes) at an address where a server that is not Ray's listens."""
  pytest.importorskip("ray")
  monkeypatch.setattr(refgrad_cli, "RAY_PROBE_SECONDS", 0.5)
  with listener(answer) as port:
    started = time.monotonic()
    line = usage_error(capsys, "fuzz", "--device", "PYTHON", "--ray", f"ray://localhost:{port}")
  assert line == f"refgrad fuzz: error: argument --ray: no Ray cluster at 'ray://localhost:{port}': {problem}"
  assert time.monotonic() - started < 5


def test_a_ray_address_where_nothing_listens_is_a_usage_error(capsys):
  pytest.importorskip("ray")
  line = usage_error(capsys, "fuzz", "--device", "PYTHON", "--ray", "127.0.0.1:1")
  assert line == "refgrad fuzz: error: argument --ray: no Ray cluster at '127.0.0.1:1': Connection refused"


def test_a_grpc_server_passes_the_ray_probe():
  """What Ray's GCS answered when probed (measured on Ray 2.60): an HTTP/2 SETTINGS frame."""
  with listener(bytes([0, 0, 0x18, 4, 0, 0, 0, 0, 0])) as port:
    assert refgrad_cli._ray_unanswered("127.0.0.1", port) == ""


PATHS = [
  (["check", "--device", "PYTHON", "--json", "/nonexistent/dir/r.json"], "--json", "no directory '/nonexistent/dir'"),
  (["check", "--device", "PYTHON", "--json", "."], "--json", "cannot write '.': Is a directory"),
  (["fuzz", "--device", "PYTHON", "--html", "/nonexistent/dir/r.html"], "--html", "no directory '/nonexistent/dir'"),
  (["fuzz", "--device", "PYTHON", "--findings", "/proc/nope"], "--findings", "cannot make directory '/proc/nope'"),
  (["fuzz", "--device", "PYTHON", "--findings", "a_file"], "--findings", "'a_file' is a file, not a directory"),
  (["fuzz", "--device", "PYTHON", "--findings", "a_file/below"], "--findings", "'a_file' is a file"),
  (["fuzz", "--device", "PYTHON", "--database", "/proc/nope"], "--database", "cannot make directory '/proc/nope'"),
  (["fuzz", "--device", "PYTHON", "--database", "http://fuzz-db:6379"], "--database",
   "'http://fuzz-db:6379': a database server is given as redis://HOST:PORT, not http://"),
  (["fuzz", "--device", "PYTHON", "--shared-database", "no_such_dir"], "--shared-database",
   "no directory 'no_such_dir' to replay examples from"),
  (["selftest", "--findings", "/proc/nope"], "--findings", "cannot make directory '/proc/nope'"),
]


@pytest.mark.parametrize("argv,option,problem", PATHS, ids=[" ".join([a[0], *a[-2:]]) for a, _, _ in PATHS])
def test_an_output_that_cannot_be_written_is_a_usage_error(argv, option, problem, capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  (tmp_path / "a_file").write_text("")
  line = usage_error(capsys, *argv)
  assert line.startswith(f"refgrad {argv[0]}: error: argument {option}: ") and problem in line, line
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no folder named after a URL, no probe left


def test_the_check_refuses_a_report_path_before_running(tmp_path):
  """It used to run the whole check, then die with a traceback, the report lost."""
  started = time.monotonic()
  run = cli("check", "--device", "PYTHON", "--html", "/nonexistent/dir/r.html")
  assert run.returncode == USAGE and run.stdout == "", run.stdout + run.stderr
  assert run.stderr.strip() == "refgrad check: error: argument --html: cannot write '/nonexistent/dir/r.html': no " \
                               "directory '/nonexistent/dir'"
  assert time.monotonic() - started < 30  # the check itself takes longer; the command did not start it


def test_a_writable_report_path_is_probed_without_a_trace(tmp_path, capsys):
  kept = tmp_path / "kept.json"
  kept.write_text("old report")
  assert main(["check", "--device", "PYTHON", "--only", "NO_SUCH_ROW", "--json", str(kept),
               "--html", str(tmp_path / "new.html")]) == USAGE  # the paths pass; --only stops it before work
  assert kept.read_text() == "old report" and sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]
  assert "argument --only" in capsys.readouterr().err


def test_an_unreachable_database_is_a_usage_error_not_a_bug_in_refgrad(tmp_path):
  run = cli("fuzz", "--device", "PYTHON", "--seconds", "5", "--findings", str(tmp_path), "--database",
            "redis://127.0.0.1:1")
  assert run.returncode == USAGE, run.stderr
  assert run.stderr.startswith("refgrad fuzz: error: argument --database: cannot reach 'redis://127.0.0.1:1': ")
  assert "Connection refused" in run.stderr and "bug in refgrad" not in run.stderr and "programs" not in run.stdout


def test_a_redis_server_that_answers_is_accepted():
  with local_redis() as url:
    if url is None:
      pytest.skip("redis-server or the redis client is not installed")
    assert database_problem(url) == "" and database_problem(url, write=False) == ""


def test_a_url_that_is_not_redis_is_refused_by_the_library_too():
  from refgrad.testing.fuzz.database import open_database
  with pytest.raises(ValueError, match="not http://"):
    open_database("http://fuzz-db:6379")


def test_only_a_row_that_exists_is_run(capsys):
  line = usage_error(capsys, "check", "--device", "PYTHON", "--only", "NO_SUCH_ROW")
  assert line.startswith("refgrad check: error: argument --only: no row contains 'NO_SUCH_ROW' (case matters); rows: ")
  rows = line.partition("rows: ")[2].split("; ")
  assert {"CAST->DTYPE", "REDUCE ADD", "chain: ...", "matmul", "SIN"} <= set(rows) and len(rows) == len(set(rows))


PLUGINS = {
  "exits.py": ("import sys\nsys.exit(7)\n", "it called sys.exit(7) while being imported"),
  "raises.py": ("import math\n\nmath.inf / 0\n", "ZeroDivisionError: float division by zero (line 3)"),
  "syntax.py": ("def broken(:\n  pass\n", "SyntaxError: invalid syntax (line 1)"),
  "missing.py": (None, "no such file"),
  "plugin.txt": ("x = 1\n", "not a Python file (.py)"),
}


@pytest.mark.parametrize("name", PLUGINS)
def test_a_plugin_file_that_fails_to_load_is_named_with_its_error(name, tmp_path, capsys):
  source, why = PLUGINS[name]
  if source is not None:
    (tmp_path / name).write_text(source)
  line = usage_error(capsys, "devices", "--plugin", str(tmp_path / name))
  assert line == f"refgrad devices: error: argument --plugin: cannot load {tmp_path / name}: {why}"


def test_a_plugin_calling_sys_exit_does_not_end_the_command_silently(tmp_path):
  (tmp_path / "exits.py").write_text(PLUGINS["exits.py"][0])
  run = cli("check", "--device", "PYTHON", "--plugin", str(tmp_path / "exits.py"))
  assert run.returncode == USAGE and "exits.py: it called sys.exit(7)" in run.stderr, run.stderr


def test_a_plugin_file_registering_no_device_is_warned_about(tmp_path, capsys):
  """A warning, not an error: a plugin file may only patch refgrad (tests plant harness bugs so) or add aliases."""
  (tmp_path / "nothing.py").write_text("X = 1\n")
  assert main(["devices", "--plugin", str(tmp_path / "nothing.py")]) == 0
  assert f"warning: --plugin {tmp_path / 'nothing.py'} registered no device" in capsys.readouterr().err


def test_the_demo_runs_on_the_device_in_refgrad_device(monkeypatch, capsys):
  monkeypatch.setenv("REFGRAD_DEVICE", "python")
  assert main(["demo"]) == 0
  out = capsys.readouterr().out
  assert "6/6 program runs agree" in out and "against the PYTHON reference" not in out  # no other device ran
  monkeypatch.setenv("REFGRAD_DEVICE", "NO_SUCH_DEVICE")
  assert "error: REFGRAD_DEVICE: unknown device 'NO_SUCH_DEVICE'" in usage_error(capsys, "demo")


def test_a_campaign_that_ran_no_program_does_not_pass(tmp_path, capsys):
  assert main(["fuzz", "--device", "PYTHON", "--seconds", "0.01", "--findings", str(tmp_path / "f"), "--quiet"]) == 2
  out, err = capsys.readouterr()
  assert "0 programs" in out and "argument --seconds: no program ran in 0.01 s" in err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_campaign_ends_within_its_seconds_and_grace_whatever_its_programs_do(jobs, tmp_path, monkeypatch):
  """A device whose every kernel sleeps for ever, and a timeout longer than the campaign: --seconds 5 --timeout 40
  on a device that hangs ran 82 s. Now the program running when the grace ends is cut short, not a hang finding,
  and the command says so. With jobs, a job still starting then is not waited for (STRAGGLER_SECONDS) but stopped
  (STOP_SECONDS, SIGINT then SIGKILL)."""
  from refgrad.testing.fuzz.engines import STOP_SECONDS, STRAGGLER_SECONDS
  monkeypatch.setenv("REFGRAD_TEST_HANG_ALL", "1")  # tests/broken_devices.py: CRASHY_HANG_ALL's kernels hang
  seconds, grace = 3.0, 1.0
  started = time.time()
  with broken_devices.registered():  # in this process too, whatever other tests of this worker registered before
    report = fuzz("CRASHY_HANG_ALL", seconds, jobs=jobs, findings_dir=str(tmp_path), plugin_files=[BROKEN_FILE],
                  timeout=60, grace=grace, started=started)
  wall = time.time() - started
  bound = seconds + grace + (2 if jobs == 1 else STRAGGLER_SECONDS + STOP_SECONDS)
  assert wall < bound, f"{wall:.1f} s for {seconds:g} s and a grace of {grace:g} s"
  # a program that launches no kernel (all its values known without one) completes even here, so programs may be
  # counted; none is a finding, and every job that reached a kernel had it cut short
  assert not report.findings and report.cut >= 1
  if jobs == 1:  # a job may still have been starting at the cut: it had nothing to cut short
    assert report.cut == 1


def test_the_time_limit_counts_from_the_start_of_the_command(tmp_path):
  """`--seconds 30` used to run 40 s: the limit began once each worker had started. A plugin file that takes
  `slow_start` seconds to load in each job's process makes the start-up long: counted from the workers'
  start, the command would run `seconds + slow_start` and more; counted from its own start, it ends within a tail of
  `seconds` shorter than that (not a tight bound: the tail grows on a loaded machine). It also says early on that
  its workers are starting."""
  seconds, slow_start = 30, 8  # a job's own start-up (a fresh Python importing refgrad) took over 8 s at load 5:
  # --seconds 16 then left no time for a first batch
  plugin = tmp_path / "slow_start.py"
  plugin.write_text("import multiprocessing\nimport time\n\nname = multiprocessing.current_process().name\n"  # a job's
                    f"if name != 'MainProcess' and ':' not in name:\n  time.sleep({slow_start})\n")  # not its worker's
  started = time.monotonic()
  fuzzing = subprocess.Popen([sys.executable, "-m", "refgrad.cli", "fuzz", "--device", "PYTHON", "--seconds",
                              str(seconds), "--jobs", "2", "--plugin", str(plugin), "--findings", str(tmp_path / "f")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  arrived = {}
  for line in fuzzing.stderr:
    arrived.setdefault(line.split(" ")[0], time.monotonic() - started)
  out = fuzzing.stdout.read()
  assert fuzzing.wait(timeout=120) == 0, out
  wall = time.monotonic() - started
  assert arrived["starting"] < slow_start, arrived
  assert wall < seconds + slow_start, f"{wall:.1f} s for --seconds {seconds} with a {slow_start} s start-up"
  assert int(re.search(r"(\d+) programs in", out).group(1)) > 0, out


SAMPLED_CASES = 30
INNER_SUITE = f"""import pytest


@pytest.mark.parametrize('case', range({SAMPLED_CASES}))
def test_sampled(case, refgrad_device):
  pass
"""


def suite_conftest():
  """tests/conftest.py loaded from its file (not `import conftest`: plugins/conftest.py has that name too)."""
  spec = importlib.util.spec_from_file_location("sampling_conftest", TESTS / "conftest.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def run_sampled(tmp_path, *args: str) -> str:
  """tests/conftest.py on an inner suite of one test with SAMPLED_CASES cases on CLANG, under xdist: the -q output
  of pytest in a process of its own (the controller and workers of a real run)."""
  (tmp_path / "test_sampled.py").write_text(INNER_SUITE)
  run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-q", "--refgrad-device", "CLANG",
                        "-p", "no:cacheprovider", *args, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(TESTS)}, timeout=300)
  assert run.returncode == 0, run.stdout + run.stderr
  return run.stdout


def collect_sampled(pytester, *args: str, env: dict | None = None) -> str:
  """The cases tests/conftest.py keeps of the inner suite (pytest --co on CLANG, with `env` set): the output.
  Collected in this process: the hooks are the same, and a fresh pytest process would add only its start-up.
  Without hypothesis's plugin, which the inner suite does not use: it would import hypothesis into each run anew."""
  pytester.makepyfile(test_sampled=INNER_SUITE)
  with pytest.MonkeyPatch.context() as patch:
    for name, value in (env or {}).items():
      patch.setenv(name, value)
    result = pytester.runpytest_inprocess("--co", "-q", "--refgrad-device", "CLANG", "-p", "no:cacheprovider",
                                          "-p", "no:hypothesispytest", *args, plugins=[suite_conftest()])
  assert result.ret == 0, result.stdout.str() + result.stderr.str()
  return result.stdout.str()


def test_deselected_cases_are_counted_under_xdist(tmp_path):
  """tests/conftest.py samples the cases of compiled devices; with -n 2 the controller, which collects nothing,
  counts them too."""
  above, fraction = suite_conftest().SAMPLE_SIZES["CLANG"]
  dropped = SAMPLED_CASES - above - math.ceil((SAMPLED_CASES - above) * fraction)
  out = run_sampled(tmp_path, "-n", "2")
  assert f"{SAMPLED_CASES - dropped} passed, {dropped} deselected" in out.strip().splitlines()[-1], out


def test_the_sample_rotates_with_its_seed_and_refgrad_full_runs_everything(pytester):
  """A deselected case cannot fail, so no case may stay deselected: another seed (by default, another commit) draws
  another sample; --refgrad-full and REFGRAD_TEST_ALL=1 deselect nothing."""
  def sample(seed: str) -> set[str]:
    out = collect_sampled(pytester, env={"REFGRAD_SAMPLE_SEED": seed})
    return {line for line in out.splitlines() if "::test_sampled[" in line}
  samples = [sample(seed) for seed in ("a", "b", "c")]
  assert len(set(map(frozenset, samples))) > 1, samples
  assert all(len(cases) < SAMPLED_CASES for cases in samples)
  assert f"{SAMPLED_CASES} tests collected" in collect_sampled(pytester, "--refgrad-full")
  assert f"{SAMPLED_CASES} tests collected" in collect_sampled(pytester, env={"REFGRAD_TEST_ALL": "1"})


def test_the_sample_drawn_while_generating_is_the_one_drawn_from_named_cases(pytester):
  """A whole run samples each function's cases as they are generated (no item is made of a dropped case); a run
  that names cases (-k) samples the collected items. Naming every case gives the same sample, counted the same."""
  above, fraction = suite_conftest().SAMPLE_SIZES["CLANG"]
  kept = above + math.ceil((SAMPLED_CASES - above) * fraction)

  def cases(out: str) -> set[str]:
    return {line for line in out.splitlines() if "::test_sampled[" in line}
  for seed in ("a", "b"):
    generated = collect_sampled(pytester, env={"REFGRAD_SAMPLE_SEED": seed})
    named = collect_sampled(pytester, "-k", "test_sampled", env={"REFGRAD_SAMPLE_SEED": seed})
    assert len(cases(generated)) == kept and cases(generated) == cases(named)
    summary = f"{kept}/{SAMPLED_CASES} tests collected ({SAMPLED_CASES - kept} deselected)"
    assert summary in generated and summary in named, generated + named


def test_the_sample_is_seeded_by_the_commit_and_by_a_fixed_seed_without_git(pytester, tmp_path, monkeypatch):
  """Without REFGRAD_SAMPLE_SEED, the header names the commit checked out as the seed (so each commit samples
  anew); where git fails (not a checkout, no git), the fixed seed, and the sample is still drawn."""
  monkeypatch.delenv("REFGRAD_SAMPLE_SEED", raising=False)
  if subprocess.run(["git", "rev-parse", "HEAD"], cwd=TESTS, capture_output=True, timeout=30).returncode != 0:
    pytest.skip("the suite runs outside a git checkout")
  seed = re.search(r"seed (\S+) ", collect_sampled(pytester, "-v")).group(1)
  # a commit of this checkout (not necessarily HEAD now: others may commit while the suite runs)
  commit = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{seed}^{{commit}}"], cwd=TESTS,
                          capture_output=True, text=True, timeout=30)
  assert re.fullmatch("[0-9a-f]{40}", seed) and commit.stdout.strip() == seed, seed
  failing_git = tmp_path / "bin" / "git"
  failing_git.parent.mkdir()
  failing_git.write_text("#!/bin/sh\necho 'fatal: not a git repository' >&2\nexit 128\n")
  failing_git.chmod(0o755)
  out = collect_sampled(pytester, "-v", env={"PATH": f"{failing_git.parent}{os.pathsep}{os.environ['PATH']}"})
  assert "seed 0 " in out
  assert re.search(rf"\d+/{SAMPLED_CASES} tests collected", out), out
