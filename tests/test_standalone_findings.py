"""Findings come with a reproducer in the backend's own language (issue 31): the kit turns the kernel a planted bug
gets wrong (selftest mutants of CLANG, LLVM and OPENCL, a broken OPENCL work-group reduction, a C compiler that
crashes, a kernel that segfaults) into a folder whose run.sh fails when run by hand without refgrad, while the same
case compiled by the correct backend passes; `refgrad fuzz` findings and `refgrad check` cells get one written beside
them, and a device without the hook says so.

"By hand without refgrad": `sh run.sh` in an environment of PATH=/usr/bin:/bin alone, plus PYTHON naming this venv's
interpreter for the Python drivers (they need numpy and llvmlite or pyopencl) and PYTHONPATH naming a folder whose
sitecustomize.py makes refgrad and its plugins unimportable (the venv has refgrad installed)."""
import dataclasses
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refgrad import Device, plugin_loader
from refgrad.cli import main
from refgrad.codegen.contract import Opt
from refgrad.standalone import RUN_SCRIPT
from refgrad.testing.conformance.results import FAIL
from refgrad.testing.conformance.run import run_conformance
from refgrad.testing.fuzz.findings import FindingsDir
from refgrad.testing.fuzz.results import Finding
from refgrad.testing.fuzz.signatures import finding_signature
from refgrad.testing.oracle.standalone_cases import ERROR_FILE, cases_on, failing_case, write_standalone
from refgrad.testing.programs import Step, TensorProgram
from refgrad.testing.selftest import mutants

sys.path.insert(0, str(Path(__file__).parent))
import broken_devices  # noqa: E402

BLOCKED = ("refgrad", "refgrad_clang", "refgrad_llvm", "refgrad_opencl")


@pytest.fixture(scope="module")
def bare_env(tmp_path_factory) -> dict[str, str]:
  blocker = tmp_path_factory.mktemp("no_refgrad")
  (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({list(BLOCKED)!r}))\n")
  return {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "PYTHONPATH": str(blocker)}


@pytest.fixture(scope="module", autouse=True)
def planted():
  """The selftest's mutants and the broken devices, registered for this module."""
  fresh = all(spec.name != "CLANG~CMPLT_LE" for spec in Device.specs())
  if fresh:
    plugin_loader.register(mutants, name="refgrad.testing.selftest.mutants")
  with broken_devices.registered():
    yield
  if fresh:
    plugin_loader.unregister(mutants)


def run_by_hand(folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
  """`sh /path/to/run.sh` started from another folder (the root), as a user runs the path a finding names."""
  return subprocess.run(["sh", str(folder / RUN_SCRIPT)], cwd="/", env=env, capture_output=True, text=True,
                        timeout=600)


def witness(name: str):
  fn, inputs = mutants.BY_NAME[name].witness()
  return fn, inputs, None


def group_of_4(ast):
  """Every reduce shared by work-groups of 4 items (13 elements: the last round has items past the end)."""
  return (Opt("GROUP", 0, 4),)


# (device with a planted bug, the correct backend it is planted in, program)
PLANTED = {
  "CLANG~FDIV_RECIPROCAL": ("CLANG", lambda: witness("fdiv_reciprocal")),
  "CLANG~CMPLT_LE": ("CLANG", lambda: witness("cmplt_le")),
  "LLVM~LLVM_FCMP_ULT": ("LLVM", lambda: witness("llvm_fcmp_ult")),
  "LLVM~LLVM_MUL_NUW": ("LLVM", lambda: witness("llvm_mul_nuw")),
  "OPENCL~CL_F16_TRUNCATES": ("OPENCL", lambda: witness("cl_f16_truncates")),
  "GPUBUG_DOUBLE_COUNT": ("OPENCL", lambda: (lambda t: t.sum(), [np.arange(1, 14, dtype=np.float32)], group_of_4)),
}


def available(device: str) -> bool:
  return device in Device.available()


@pytest.mark.parametrize("device", sorted(PLANTED))
def test_a_planted_bug_gives_a_reproducer_that_fails_by_hand_and_passes_on_the_correct_backend(device, tmp_path,
                                                                                               bare_env):
  base, program = PLANTED[device]
  if not available(device):
    pytest.skip(f"{device} cannot run here")
  fn, inputs, opts = program()
  case = failing_case(fn, *inputs, device=device, opts=opts)
  assert case is not None and case.device == device
  assert "standalone reproducer" in write_standalone(tmp_path / "planted", case)
  wrong = run_by_hand(tmp_path / "planted", bare_env)
  assert wrong.returncode == 1 and "judged lanes differ from the reference" in wrong.stdout, wrong.stdout + wrong.stderr
  same = [c for c in cases_on(base, fn, *inputs, opts=opts) if c.program.key == case.program.key]
  assert len(same) == 1 and np.array_equal(same[0].expected.view(np.uint8), case.expected.view(np.uint8))
  write_standalone(tmp_path / "correct", same[0])
  right = run_by_hand(tmp_path / "correct", bare_env)
  assert right.returncode == 0, right.stdout + right.stderr


class CrashingRenderer:
  """CLANG's renderer with one line added to each kernel's body: a compiler crash, or a store through null."""

  def __init__(self, renderer, line: str):
    self.renderer, self.line, self.caps = renderer, line, renderer.caps

  def render(self, program) -> str:
    source = self.renderer.render(program)
    body = source.index("{", source.index(f"void {program.name}(")) + 1
    return source[:body] + f"\n  {self.line}\n" + source[body:]


CRASHES = {"CLANG_COMPILER_CRASH": "_Pragma(\"clang __debug crash\")",
           "CLANG_KERNEL_SEGFAULT": "*(volatile int *)0 = 0;"}


@pytest.fixture
def crashing_device():
  """Register a CLANG whose compiler crashes on every kernel (clang's debug pragma: a real crash, with its stack
  dump), or whose kernels write through a null pointer."""
  if not available("CLANG"):
    pytest.skip("CLANG is not available")

  def make(name: str) -> str:
    clang = Device["CLANG"]
    Device.register(name, lambda: dataclasses.replace(clang, name=name,
                                                      renderer=CrashingRenderer(clang.renderer, CRASHES[name])))
    return name
  yield make
  for name in CRASHES:
    Device.remove(name)


def test_a_compiler_crash_gives_the_source_that_crashes_it_and_the_command(crashing_device, tmp_path, bare_env):
  device = crashing_device("CLANG_COMPILER_CRASH")
  x = np.array([1.0, -2.0, np.nan], np.float32)
  case = failing_case(lambda t: t * 2, x, device=device)
  assert case is not None and "CompileError" in case.device_error
  write_standalone(tmp_path, case)
  assert "clang" in (tmp_path / ERROR_FILE).read_text() and "__debug crash" in (tmp_path / "repro.c").read_text()
  crashed = run_by_hand(tmp_path, bare_env)
  assert crashed.returncode != 0 and "PLEASE submit a bug report" in crashed.stderr, crashed.stderr


def test_ir_llvm_rejects_gives_a_reproducer_that_fails_in_its_driver_as_the_device_did(tmp_path, bare_env):
  """An LLVM whose IR is broken (a line LLVM cannot parse after each kernel): the device's compile raises, the case
  carries its error, and the driver fails parsing kernel.ll, before any launch."""
  if not available("LLVM"):
    pytest.skip("LLVM is not available")
  llvm = Device["LLVM"]
  Device.register("LLVM_BAD_IR", lambda: dataclasses.replace(llvm, name="LLVM_BAD_IR",
                                                             renderer=AppendingRenderer(llvm.renderer)))
  try:
    case = failing_case(lambda t: t + 1, np.array([1.0, 2.0], np.float32), device="LLVM_BAD_IR")
    assert case is not None and "LLVMCompileError" in case.device_error
    write_standalone(tmp_path, case)
  finally:
    Device.remove("LLVM_BAD_IR")
  failed = run_by_hand(tmp_path, bare_env)
  assert failed.returncode != 0 and "judged lanes" not in failed.stdout and "not a valid IR" in failed.stderr, \
    failed.stdout + failed.stderr


class AppendingRenderer:
  """A renderer whose every kernel ends with a line that is not LLVM IR."""

  def __init__(self, renderer):
    self.renderer, self.caps = renderer, renderer.caps

  def render(self, program) -> str:
    return self.renderer.render(program) + "\nnot a valid IR line\n"


def tensor_program(method: str, *inputs: np.ndarray) -> TensorProgram:
  return TensorProgram(list(inputs), [Step(method, tuple(range(len(inputs))), (True,) * len(inputs))])


def test_a_fuzz_finding_has_its_reproducer_beside_its_pytest_file(tmp_path, bare_env):
  if not available("CLANG~CMPLT_LE"):
    pytest.skip("CLANG is not available")
  device = "CLANG~CMPLT_LE"
  program = tensor_program("__lt__", np.array([1.0, 2.0, -0.0], np.float32), np.array([1.0, 1.0, 0.0], np.float32))
  finding = Finding("mismatch", "CMPLT differs", program, finding_signature("mismatch", program, 0))
  path = FindingsDir(str(tmp_path), device, [], opts=False).write(finding)
  folder = path.with_name(path.stem + "_standalone")
  assert str(folder) in path.read_text()
  with pytest.raises(AssertionError, match="differs from the reference"):  # the pytest file replays it as before
    runpy.run_path(str(path))["test_finding"]()
  wrong = run_by_hand(folder, bare_env)
  assert wrong.returncode == 1 and "2 of 3 judged lanes differ" in wrong.stdout, wrong.stdout + wrong.stderr


def test_a_kernel_that_crashed_the_worker_is_written_without_running_it(crashing_device, tmp_path, bare_env):
  """A crash finding: the worker died in a kernel, which is found again by the finding's signature and written
  without being run in this process; its reproducer dies the same way."""
  device = crashing_device("CLANG_KERNEL_SEGFAULT")
  program = tensor_program("__add__", np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32))
  finding = Finding("crash", "the worker process died (exit code -11)", program,
                    finding_signature("crash", program, 0))
  path = FindingsDir(str(tmp_path), device, [], opts=False).write(finding)
  crashed = run_by_hand(path.with_name(path.stem + "_standalone"), bare_env)
  assert crashed.returncode not in (0, 1), crashed.stdout + crashed.stderr  # killed by SIGSEGV (sh: 139)


def test_a_device_without_the_hook_says_so_once_in_the_finding(tmp_path):
  program = tensor_program("__lt__", np.array([1.0, 2.0], np.float32), np.array([1.0, 1.0], np.float32))
  finding = Finding("mismatch", "CMPLT differs", program, finding_signature("mismatch", program, 0))
  path = FindingsDir(str(tmp_path), "BROKEN_CMPLT", [], opts=False).write(finding)
  assert path.read_text().count("BROKEN_CMPLT has no standalone hook") == 1
  assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_refgrad_check_writes_a_reproducer_for_each_failing_cell(tmp_path, bare_env):
  """Each failing cell of the CMPLT row judges only its own lanes of the batch's kernel, so each folder fails by
  itself; the cell's detail names it."""
  if not available("CLANG~CMPLT_LE"):
    pytest.skip("CLANG is not available")
  out = tmp_path / "standalone"
  failed = [r for r in run_conformance("CLANG~CMPLT_LE", only="CMPLT", standalone=out).results if r.status == FAIL]
  assert failed and len(list(out.iterdir())) == len(failed)
  for cell in failed[:2]:
    folder = next(Path(line.rsplit(": ", 1)[1]) for line in cell.detail.splitlines()
                  if line.startswith("standalone reproducer"))
    wrong = run_by_hand(folder, bare_env)
    assert wrong.returncode == 1 and folder.parent == out, wrong.stdout + wrong.stderr


@pytest.mark.parametrize("device", ["CLANG", "GCC", "CLANG_O3"])
def test_each_c_compiler_device_writes_a_reproducer_built_by_its_own_compiler_and_flags(device, tmp_path, bare_env):
  if not available(device):
    pytest.skip(f"{device} cannot run here")
  x = np.array([0.0, -0.0, 1.5, np.inf, np.nan, -7.25], np.float32)
  case = cases_on(device, lambda t: (t * 3 + 1).exp2(), x)[-1]
  write_standalone(tmp_path, case)
  compiler = Device[device].compiler
  command = (tmp_path / RUN_SCRIPT).read_text().splitlines()[-1]
  assert command.startswith(Path(compiler.path).name + " ") and compiler.flags[0] in command.split()
  right = run_by_hand(tmp_path, bare_env)
  assert right.returncode == 0, right.stdout + right.stderr


def test_refgrad_check_refuses_a_standalone_folder_it_could_not_write_before_any_work(tmp_path, capsys):
  taken = tmp_path / "a file"
  taken.write_text("")
  assert main(["check", "--device", "PYTHON", "--standalone", str(taken)]) == 2
  assert "is a file, not a directory" in capsys.readouterr().err


class RaisingRenderer:
  """PYLOOPS's renderer with a kernel that raises when it runs (an out-of-bounds load in a Python backend): it
  compiles and loads, and fails only in the run."""

  def __init__(self, renderer):
    self.renderer, self.caps = renderer, renderer.caps

  def render(self, program) -> str:
    head, body = self.renderer.render(program).split("\n", 1)
    return f"{head}\n  raise IndexError('index 32 is out of bounds for axis 0 with size 32')\n{body}"


def test_a_kernel_that_raises_when_it_runs_gives_a_reproducer_that_fails_as_it_did(tmp_path):
  """The finding's header said "its build fails as the device's compile did" for any error the device raised; a
  TOY backend's out-of-bounds load compiled and loaded, and raised in its run."""
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "pyloops"))
  import refgrad_pyloops
  Device.register("PYLOOPS_RAISES", lambda: dataclasses.replace(
    refgrad_pyloops.make_device(), name="PYLOOPS_RAISES", renderer=RaisingRenderer(refgrad_pyloops.PyLoopsRenderer())))
  try:
    case = failing_case(lambda t: t * 2, np.array([1.0, -2.0], np.float32), device="PYLOOPS_RAISES")
    assert case is not None and case.device_error.startswith("IndexError: index 32 is out of bounds")
    line = write_standalone(tmp_path, case)
  finally:
    Device.remove("PYLOOPS_RAISES")
  assert "compile" not in line and f"fails as the device did, {ERROR_FILE}" in line, line
  ran = subprocess.run(["sh", RUN_SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable}, timeout=120)
  assert ran.returncode != 0 and "IndexError: index 32 is out of bounds" in ran.stderr, ran.stdout + ran.stderr
