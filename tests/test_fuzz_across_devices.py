"""`refgrad fuzz` across several devices with one command (`--device A,B` or `--device A --device B`): each device's
campaign runs in turn for an equal share of --seconds (here each stops sooner, after one batch: --max-programs),
with its own summary, findings in the one directory and a report file per device; the exit status is the worst of
them."""
import re
import subprocess
import sys

import pytest

from refgrad import Device
from refgrad.cli import USAGE, main

SECONDS = 40  # a bound: each campaign ends with its first batch (--max-programs), in seconds on a quiet machine


@pytest.mark.skipif("CLANG" not in Device.available(), reason="CLANG is not available")
def test_one_command_fuzzes_each_device_in_turn(tmp_path):
  html = tmp_path / "campaign.html"
  done = subprocess.run([sys.executable, "-m", "refgrad.cli", "fuzz", "--device", "PYTHON,CLANG", "--device",
                         "PYTHON", "--seconds", str(SECONDS), "--max-programs", "1", "--findings",
                         str(tmp_path / "findings"), "--html", str(html), "--quiet"], capture_output=True, text=True,
                        timeout=120)
  assert done.returncode == 0, done.stdout + done.stderr
  ran = {device: int(programs) for device, programs in re.findall(r"^(\w+): (\d+) programs in", done.stdout, re.M)}
  assert set(ran) == {"PYTHON", "CLANG"}, done.stdout  # PYTHON named twice runs once
  assert all(0 < programs <= 40 for programs in ran.values()), ran  # one batch of 40 each: --max-programs 1
  total = sum(ran.values())
  assert f"campaign across PYTHON, CLANG: {total} programs, 0 distinct finding(s)" in done.stdout
  assert (tmp_path / "campaign-PYTHON.html").is_file() and (tmp_path / "campaign-CLANG.html").is_file()
  assert not html.exists()


def test_an_unknown_device_in_the_list_is_a_usage_error(tmp_path, capsys):
  assert main(["fuzz", "--device", "PYTHON,NOPE", "--seconds", "5", "--findings", str(tmp_path)]) == USAGE
  err = capsys.readouterr().err
  assert "argument --device" in err and "NOPE" in err
  assert main(["fuzz", "--device", ",", "--seconds", "5", "--findings", str(tmp_path)]) == USAGE
  assert "no device named" in capsys.readouterr().err
