"""A worker that dies mid-suite under xdist with `--dist loadgroup` (as the README's command runs) fails its test
and the suite finishes (tests/xdist_crash_safe.py); without the fix the same run hangs."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CRASHING_TESTS = textwrap.dedent('''
  import os
  from pathlib import Path

  import pytest

  @pytest.mark.parametrize("i", range(40))
  def test_case(i):
    flag = Path(__file__).with_name("crashed")
    if i == 25 and not flag.exists():
      flag.touch()
      os._exit(1)  # the worker dies, as when a native library crashes
''')


def run_crashing_suite(tmp_path: Path, conftest: str) -> subprocess.CompletedProcess:
  (tmp_path / "test_crash.py").write_text(CRASHING_TESTS)
  (tmp_path / "conftest.py").write_text(conftest)
  env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(Path(__file__).parent)}
  command = [sys.executable, "-m", "pytest", "-q", "-p", "xdist.plugin", "-p", "no:cacheprovider", "-n", "2",
             "--dist", "loadgroup", "test_crash.py"]
  return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


def test_a_crashed_worker_fails_its_test_and_the_suite_finishes(tmp_path):
  result = run_crashing_suite(tmp_path, "from xdist_crash_safe import pytest_xdist_make_scheduler  # noqa: F401\n")
  summary = result.stdout.strip().splitlines()[-1]
  assert result.returncode == 1, result.stdout[-2000:]
  assert "1 failed, 40 passed" in summary, result.stdout[-2000:]
  assert "crashed while running 'test_crash.py::test_case[25]'" in result.stdout
