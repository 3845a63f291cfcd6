"""Standalone reproducers (refgrad/standalone.py): the C and the Python lane checkers a reproducer carries judge every
lane as the oracle does (refgrad's compare_lanes is the oracle here, over each float format's edge values and their
neighbours, ULP and absolute bounds, skipped lanes); a CLANG kernel written as one C file builds with the system C
compiler alone (no refgrad, no Python) and exits 0 on the kernel's own output, 1 when the expected output differs."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import NP_DTYPE

from refgrad import Device, Tensor, dtypes
from refgrad.codegen.pipeline import compile_ast
from refgrad.schedule import create_schedule
from refgrad.standalone import C_CHECKER, PY_CHECKER, StandaloneCase, c_bytes, c_doubles, format_of
from refgrad.testing.edges import dtype_edges, float_neighbours
from refgrad.testing.oracle.compare import compare_lanes

C_COMPILER = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
# a reproducer needs nothing but a C compiler: run with a PATH of the compiler's folder and /usr/bin, /bin alone
BARE_ENV = {"PATH": os.pathsep.join([os.path.dirname(shutil.which("clang") or C_COMPILER or "/usr/bin"), "/usr/bin",
                                     "/bin"])}
JUDGED_DTYPES = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint8]


def lane_pairs(dtype, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """(actual, expected): every edge value against itself, its neighbours, every other edge value and random bits."""
  edges = dtype_edges(dtype).astype(NP_DTYPE[dtype])
  near = float_neighbours(edges).astype(NP_DTYPE[dtype]) if dtype.kind == "f" else edges
  expected = np.concatenate([np.repeat(edges, edges.size), edges, np.resize(edges, near.size)])
  actual = np.concatenate([np.tile(edges, edges.size), edges, near])
  rng = np.random.default_rng(seed)
  unsigned = np.dtype(f"u{expected.itemsize}")
  noise = rng.integers(0, 2 ** (8 * expected.itemsize), 64, dtype=np.uint64).astype(unsigned)
  expected = np.concatenate([expected, noise.view(expected.dtype)])
  actual = np.concatenate([actual, (noise ^ rng.integers(0, 4, 64).astype(unsigned)).view(expected.dtype)])
  return actual, expected


def judgements(dtype):
  """(ulp_bound, abs_bound or None, skip) settings to judge the lanes under."""
  size = lane_pairs(dtype)[0].size
  rng = np.random.default_rng(1)
  bounds = np.where(rng.random(size) < 0.5, 0.0, rng.choice([1e-3, 0.5, 2.0, np.inf], size))
  return [(0, None, np.zeros(size, bool)), (3, None, rng.random(size) < 0.2), (0, bounds, np.zeros(size, bool))]


def oracle_bad_lanes(actual, expected, ulp_bound, abs_bound, skip) -> np.ndarray:
  verdicts = compare_lanes(actual, expected, undefined=skip, ulp_bound=ulp_bound, abs_bound=abs_bound)
  judged = ~verdicts.undefined & ~verdicts.unbounded
  return np.flatnonzero(judged & ~verdicts.good)


def case_of(actual, expected, ulp_bound, abs_bound, skip) -> StandaloneCase:
  return StandaloneCase(None, "", (actual,), expected, skip, ulp_bound, abs_bound)


@pytest.mark.skipif(C_COMPILER is None, reason="no C compiler")
@pytest.mark.parametrize("dtype", JUDGED_DTYPES, ids=lambda d: d.name)
def test_the_c_checker_judges_lanes_as_the_oracle(dtype, tmp_path):
  actual, expected = lane_pairs(dtype)
  program = [C_CHECKER]
  for n, (ulp_bound, abs_bound, skip) in enumerate(judgements(dtype)):
    case = case_of(actual, expected, ulp_bound, abs_bound, skip)
    size, exp_bits, man_bits = format_of(expected)
    program += [c_bytes(f"actual{n}", actual), c_bytes(f"expected{n}", expected),
                c_bytes(f"skip{n}", case.skipped.astype(np.uint8)), c_doubles(f"bound{n}", case.abs_bounds)]
  calls = "".join(f"  printf(\"judgement {n}\\n\"); repro_check(actual{n}, expected{n}, skip{n}, bound{n}, "
                  f"{expected.size}, {size}, {exp_bits}, {man_bits}, {ulp}ull);\n"
                  for n, (ulp, _, _) in enumerate(judgements(dtype)))
  (tmp_path / "check.c").write_text("\n".join(program).replace("bad++ < 10", "1") + f"\nint main(void) {{\n{calls}}}\n")
  subprocess.run([C_COMPILER, "-std=c11", "-O1", "check.c", "-o", "check", "-lm"], cwd=tmp_path, check=True)
  printed = subprocess.run(["./check"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
  for n, (ulp_bound, abs_bound, skip) in enumerate(judgements(dtype)):
    section = printed.split(f"judgement {n}\n")[1].split("judgement")[0]
    reported = [int(line.split(":")[0].split()[1]) for line in section.splitlines()]
    assert reported == oracle_bad_lanes(actual, expected, ulp_bound, abs_bound, skip).tolist()


@pytest.mark.parametrize("dtype", JUDGED_DTYPES, ids=lambda d: d.name)
def test_the_python_checker_judges_lanes_as_the_oracle(dtype):
  namespace = {}
  exec(PY_CHECKER, namespace)  # the driver's own code, as a reproducer carries it
  actual, expected = lane_pairs(dtype)
  for ulp_bound, abs_bound, skip in judgements(dtype):
    case = case_of(actual, expected, ulp_bound, abs_bound, skip)
    size, exp_bits, man_bits = format_of(expected)
    bad = namespace["check"](actual.tobytes(), expected.tobytes(), case.skipped, case.abs_bounds, size, exp_bits,
                             man_bits, ulp_bound)
    assert bad == oracle_bad_lanes(actual, expected, ulp_bound, abs_bound, skip).size


def clang_cases():
  """A StandaloneCase per kernel of a small program on CLANG (edge values in, a reduce and a transcendental)."""
  device = Device["CLANG"]
  x = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -7.0, 3e3, 1e-45], np.float32)
  a = Tensor(x, device="CLANG").realize()
  out = (a * 2 + 1).max(keepdim=True) + (a * a).sqrt()
  items, _ = create_schedule([out.uop])
  for item in (i for i in items if not i.is_transfer):
    program = compile_ast(item.ast, device.caps, None)
    before = tuple(b.numpy().copy() for b in item.buffers)
    device.run_kernel(item.ast, item.buffers, None)
    yield StandaloneCase(program, device.render(program), before, item.buffers[0].numpy().copy(),
                         np.zeros(item.buffers[0].size, bool), device="CLANG")


@pytest.mark.skipif("CLANG" not in Device.available(), reason="CLANG is not available")
def test_a_clang_reproducer_runs_without_refgrad_and_fails_on_a_wrong_value(tmp_path):
  from refgrad_clang import FLAGS, LIBRARIES
  from refgrad_clang.standalone import build_command, c_reproducer
  compiler = shutil.which("clang") or C_COMPILER
  for n, case in enumerate(clang_cases()):
    folder = tmp_path / f"kernel{n}"
    folder.mkdir()
    (folder / "repro.c").write_text(c_reproducer(case, compiler, FLAGS, LIBRARIES, "test")["repro.c"])
    command = build_command(os.path.basename(compiler), FLAGS, LIBRARIES)
    assert command in (folder / "repro.c").read_text()  # the command its header gives, run with nothing else
    good = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True, env=BARE_ENV)
    assert good.returncode == 0, good.stdout + good.stderr
    wrong = case.expected.copy()
    wrong.view(np.uint32)[-1] ^= 1 << 30  # another value, never a NaN for a NaN
    bad_case = StandaloneCase(case.program, case.source, case.buffers, wrong, case.skip, device="CLANG")
    (folder / "repro.c").write_text(c_reproducer(bad_case, compiler, FLAGS, LIBRARIES, "test")["repro.c"])
    bad = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True, env=BARE_ENV)
    assert bad.returncode == 1 and f"lane {wrong.size - 1}: got bits" in bad.stdout, bad.stdout + bad.stderr
