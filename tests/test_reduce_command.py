"""`refgrad reduce` (refgrad/testing/reduce.py): a planted wrong kernel in a CLANG standalone reproducer shrinks with
C-Vise while it still fails as before (the same lanes, the same wrong bits: the reproducer's own check, run by hand,
is the oracle), the data and the check stay, the original is left alone; and what cannot be reduced says why."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad.cli import USAGE, main
from refgrad.codegen.pipeline import compile_ast
from refgrad.schedule import create_schedule
from refgrad.standalone import KERNEL_BEGIN, KERNEL_END, RUN_SCRIPT, StandaloneCase
from refgrad.testing.reduce import ReduceError, kernel_part, reduce_reproducer, reproducer_folder

pytestmark = pytest.mark.skipif("CLANG" not in Device.available(), reason="CLANG is not available")
VALUES = np.array([1.5, -2.0, 3.0, 0.25, 0.0, -0.0, 7.0, 1e30], np.float32)
FILLER = "  int64_t unused{n} = gidx0 * {n};  /* dead code a reducer must delete */\n"


def kernel_source(plant: bool) -> tuple[StandaloneCase, str]:
  """A CLANG case of a * 2 + 1 (the kernel alone, without the C prelude it does not use, so the reduction takes
  seconds), and its source with a planted bug (the add of 1 made a subtract) and dead lines when `plant`."""
  device = Device["CLANG"]
  a = Tensor(VALUES, device="CLANG").realize()
  items, _ = create_schedule([(a * 2 + 1).uop])
  item = next(i for i in items if not i.is_transfer)
  program = compile_ast(item.ast, device.caps, None)
  before = tuple(b.numpy().copy() for b in item.buffers)
  device.run_kernel(item.ast, item.buffers, None)
  source = device.render(program)
  source = "#include <stdint.h>\n" + source[source.index("void "):]
  if plant:
    source = re.sub(r"\((v\d+) \+ (v\d+)\)", r"(\1 - \2)", source, count=1)
    body = source.index("{\n", source.index("for (")) + 2
    source = source[:body] + "".join(FILLER.format(n=n) for n in range(4)) + source[body:]
  case = StandaloneCase(program, source, before, item.buffers[0].numpy().copy(), np.zeros(VALUES.size, bool),
                        device="CLANG")
  return case, source


def write_reproducer(folder, plant: bool = True):
  from refgrad_clang import FLAGS, LIBRARIES
  from refgrad_clang.standalone import c_reproducer
  folder.mkdir()
  case, _ = kernel_source(plant)
  for name, text in c_reproducer(case, shutil.which("clang") or "cc", FLAGS, LIBRARIES, "test").items():
    (folder / name).write_text(text)
  return folder


def run_by_hand(folder) -> subprocess.CompletedProcess:
  return subprocess.run(["sh", RUN_SCRIPT], cwd=folder, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(shutil.which("cvise") is None, reason="C-Vise is not installed (apt-get install cvise)")
def test_reduce_shrinks_a_planted_wrong_kernel_and_keeps_its_failure(tmp_path):
  folder = write_reproducer(tmp_path / "finding_standalone")
  original_text = (folder / "repro.c").read_text()
  before = run_by_hand(folder)
  assert before.returncode == 1 and "lane 0: got bits" in before.stdout, before.stdout + before.stderr
  reduced = reduce_reproducer(folder, "cvise", timeout=60, quick=True, say=lambda line: None)
  assert reduced == folder / "reduced"
  after = run_by_hand(reduced)
  assert (after.returncode, after.stdout) == (before.returncode, before.stdout)
  assert (folder / "repro.c").read_text() == original_text
  kept, cut = kernel_part(reduced), kernel_part(folder)
  assert "unused" not in kept.kernel and len(kept.kernel.splitlines()) < len(cut.kernel.splitlines())
  assert (kept.head, kept.tail) == (cut.head, cut.tail)  # the inputs, the expected values and the check stay


def test_a_reproducer_that_passes_is_not_reduced(tmp_path):
  folder = write_reproducer(tmp_path / "ok", plant=False)
  assert run_by_hand(folder).returncode == 0
  if shutil.which("cvise"):
    with pytest.raises(ReduceError, match="passes on this machine"):
      reduce_reproducer(folder, "cvise")


def test_a_missing_reducer_says_how_to_install_it(tmp_path, monkeypatch):
  folder = write_reproducer(tmp_path / "finding_standalone")
  monkeypatch.setenv("PATH", str(tmp_path / "empty"))
  with pytest.raises(ReduceError, match="apt-get install creduce"):
    reduce_reproducer(folder, "creduce")
  with pytest.raises(ReduceError, match="unknown reducer 'delta'"):
    reduce_reproducer(folder, "delta")


def test_what_a_finding_argument_names(tmp_path, capsys):
  folder = write_reproducer(tmp_path / "finding_standalone")
  finding = tmp_path / "finding.py"
  finding.write_text("")
  assert reproducer_folder(finding) == folder == reproducer_folder(folder)
  lonely = tmp_path / "other.py"
  lonely.write_text("")
  with pytest.raises(ReduceError, match="no standalone reproducer beside it"):
    reproducer_folder(lonely)
  empty = tmp_path / "empty"
  empty.mkdir()
  assert main(["reduce", str(empty)]) == USAGE
  assert f"{empty} is not a standalone reproducer" in capsys.readouterr().err
  (empty / RUN_SCRIPT).write_text("exit 1\n")
  with pytest.raises(ReduceError, match="no kernel to reduce"):
    kernel_part(empty)
  assert main(["reduce", str(tmp_path / "nothing")]) == USAGE


def test_a_single_file_reproducer_marks_its_kernel(tmp_path):
  folder = write_reproducer(tmp_path / "finding_standalone")
  part = kernel_part(folder)
  _, planted = kernel_source(plant=True)
  assert part.path == "repro.c" and part.kernel.strip() == planted.strip()
  assert part.head.endswith(KERNEL_BEGIN + "\n") and part.tail.startswith(KERNEL_END)
  assert os.path.exists(folder / RUN_SCRIPT)
