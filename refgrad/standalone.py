"""Standalone reproducers: one judged kernel launch as files that run without refgrad.

A finding is worth what its bug report is worth: a compiler's maintainer wants a file in the compiler's own language
that fails when run, not a refgrad program. A device may offer the hook `DeviceImpl.standalone(case, device)`,
which writes one `StandaloneCase` (the source it compiled, every buffer's contents before the launch, the
reference's output and how each lane is judged) as files: the CLANG device a single C file with a `main()`, others
their kernel plus a driver. Each driver judges lanes exactly as the oracle does (refgrad/testing/oracle/compare.py):
equal bits, any NaN for a NaN, or within the lane's ULP or absolute bound; a skipped lane (undefined, or no bound
exists) is not looked at. It prints the lanes that differ and exits 1 if any does, 0 if none.

The pieces here are shared by the drivers: the case, its per-lane tolerances, the C checker and C arrays, and the
same checker in plain Python (numpy only) for drivers written in Python.
"""
from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refgrad.codegen.contract import Program

# Every reproducer folder has RUN_SCRIPT: the shell commands that build and run it, exiting 0 when the output matches
# the reference. A reducer (`refgrad reduce`) shrinks only the kernel: the file named KERNEL_FILE_STEM.* if there is
# one, else the lines between KERNEL_BEGIN and KERNEL_END of a single-file reproducer; the data and the check stay as
# they are, so a reduced kernel is judged on the same lanes.
RUN_SCRIPT = "run.sh"
KERNEL_FILE_STEM = "kernel"
KERNEL_BEGIN = "/* ---- refgrad: the kernel as the device compiled it ---- */"
KERNEL_END = "/* ---- refgrad: the kernel ends; its inputs, the reference's output and the check follow ---- */"
# where the tools write a reproducer: the folder `<finding>_standalone/` beside the finding `<finding>.py`
STANDALONE_SUFFIX = "_standalone"


def run_script(commands: str) -> str:
  """RUN_SCRIPT's text: `commands` run in the reproducer's own folder, wherever `sh .../run.sh` is started from."""
  return f"#!/bin/sh\ncd \"$(dirname \"$0\")\" || exit 2\n{commands}\n"


# the run script of a reproducer whose driver is Python (the interpreter: $PYTHON, else python3 on the PATH)
PYTHON_DRIVER_RUN = run_script("\"${PYTHON:-python3}\" driver.py")


@dataclass(frozen=True)
class StandaloneCase:
  """One kernel launch and the reference's verdict rules for its output.

  `buffers` are the contents of every PARAM before the launch, in order (0 is the output), each a flat numpy array
  of the buffer's dtype; `expected` is the reference's output (flat, the output's dtype); `skip` marks the output
  lanes not judged; `ulp_bound` and `abs_bound` (per lane, 0 where the lane must be bit-exact) are the oracle's.
  `device_error` is what the device raised instead of running the kernel (its compiler crashed or rejected it): the
  reproducer then fails the same way, in its build."""
  program: Program
  source: str
  buffers: tuple[np.ndarray, ...]
  expected: np.ndarray
  skip: np.ndarray
  ulp_bound: int = 0
  abs_bound: np.ndarray | None = None
  device: str = ""
  device_error: str = ""

  def judging_only(self, lanes: np.ndarray) -> StandaloneCase:
    """This case with every output lane outside `lanes` (a flat boolean mask) skipped: one cell of a batch."""
    return dataclasses.replace(self, skip=np.asarray(self.skip, bool).reshape(-1) | ~np.asarray(lanes, bool))

  @property
  def abs_bounds(self) -> np.ndarray:
    """The absolute bound of every output lane (0: none, the lane is judged by bits and ULPs alone)."""
    if self.abs_bound is None:
      return np.zeros(self.expected.size, np.float64)
    bounds = np.broadcast_to(np.asarray(self.abs_bound, np.float64), self.expected.shape).reshape(-1)
    return np.where(np.isfinite(bounds), bounds, 0.0)

  @property
  def skipped(self) -> np.ndarray:
    """The skip flag of every output lane: the case's own, and every lane whose bound is infinite (no bound
    exists: the oracle skips it)."""
    skip = np.asarray(self.skip, bool).reshape(-1).copy()
    if self.abs_bound is not None:
      skip |= np.isinf(np.broadcast_to(np.asarray(self.abs_bound, np.float64), self.expected.shape).reshape(-1))
    return skip


def write_reproducer(folder: Path, files: dict[str, str]) -> Path:
  """Write a reproducer's files into `folder` (made if needed), its run script executable."""
  folder.mkdir(parents=True, exist_ok=True)
  for name, text in files.items():
    (folder / name).write_text(text)
  if (script := folder / RUN_SCRIPT).exists():
    script.chmod(0o755)
  return folder


# The float formats the checkers know: item size, exponent bits, mantissa bits. bfloat16 is told apart from
# float16 by name, both being two bytes.
FLOAT_FORMATS = {"float16": (2, 5, 10), "bfloat16": (2, 8, 7), "float32": (4, 8, 23), "float64": (8, 11, 52)}


def format_of(array: np.ndarray) -> tuple[int, int, int]:
  """(item size, exponent bits, mantissa bits) of a float array, (item size, 0, 0) for any other: judged by bits."""
  return FLOAT_FORMATS.get(array.dtype.name, (array.dtype.itemsize, 0, 0))


def c_bytes(name: str, array: np.ndarray) -> str:
  """A C array of the bytes of `array`, sixteen to a line."""
  data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
  rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, data.size, 16)]
  body = ",\n  ".join(rows) or "0"
  return f"static const unsigned char {name}[{max(data.size, 1)}] = {{\n  {body}\n}};"


def c_doubles(name: str, values: np.ndarray) -> str:
  """A C array of doubles written exactly (C99 hex floats)."""
  body = ", ".join(float(v).hex() for v in values) or "0"
  return f"static const double {name}[{max(values.size, 1)}] = {{{body}}};"


# The lane checker in C: bits, NaN against NaN, the ULP distance (sign-magnitude, +0 and -0 one point, inf one step
# past the largest finite) and the absolute error, as refgrad/alu.py's ulp_distance and compare_lanes define them.
C_CHECKER = textwrap.dedent("""\
  #include <math.h>
  #include <stdint.h>
  #include <stdio.h>
  #include <stdlib.h>
  #include <string.h>

  static uint64_t repro_lane_bits(const unsigned char *p, int size) {
    uint64_t bits = 0;
    memcpy(&bits, p, (size_t)size);  /* little-endian hosts: the low bytes */
    return bits;
  }

  static int repro_is_nan(uint64_t bits, int exp_bits, int man_bits) {
    uint64_t exp = (bits >> man_bits) & ((1ull << exp_bits) - 1), man = bits & ((1ull << man_bits) - 1);
    return exp_bits > 0 && exp == (1ull << exp_bits) - 1 && man != 0;
  }

  static double repro_value(uint64_t bits, int size, int exp_bits, int man_bits) {
    if (size == 8) { double d; memcpy(&d, &bits, 8); return d; }
    if (size == 4) { float f; uint32_t u = (uint32_t)bits; memcpy(&f, &u, 4); return f; }
    int bias = (1 << (exp_bits - 1)) - 1, sign = (int)(bits >> (exp_bits + man_bits)) & 1;
    int exp = (int)((bits >> man_bits) & ((1u << exp_bits) - 1));
    double man = (double)(bits & ((1u << man_bits) - 1)), value;
    if (exp == (1 << exp_bits) - 1) value = man != 0 ? NAN : INFINITY;
    else if (exp == 0) value = ldexp(man, 1 - bias - man_bits);
    else value = ldexp(man + ldexp(1.0, man_bits), exp - bias - man_bits);
    return sign ? -value : value;
  }

  /* 1 if the lane is as the reference says: equal bits, two NaNs, or within its ULP or absolute bound */
  static int repro_lane_ok(uint64_t a, uint64_t e, int size, int exp_bits, int man_bits, uint64_t ulp_bound,
                        double abs_bound) {
    if (a == e) return 1;
    if (exp_bits == 0) return 0;
    int nan_a = repro_is_nan(a, exp_bits, man_bits), nan_e = repro_is_nan(e, exp_bits, man_bits);
    if (nan_a || nan_e) return nan_a && nan_e;
    uint64_t sign = 1ull << (size * 8 - 1), ma = a & (sign - 1), me = e & (sign - 1);
    uint64_t ulps = ((a & sign) == (e & sign)) ? (ma > me ? ma - me : me - ma) : ma + me;
    if (ulp_bound > 0 && ulps <= ulp_bound) return 1;
    double diff = fabs(repro_value(a, size, exp_bits, man_bits) - repro_value(e, size, exp_bits, man_bits));
    return abs_bound > 0 && diff <= abs_bound;
  }

  /* every judged lane of `actual` against `expected`; prints the first few that differ; the count of those */
  static long repro_check(const unsigned char *actual, const unsigned char *expected, const unsigned char *skip,
                       const double *abs_bound, long lanes, int size, int exp_bits, int man_bits, uint64_t ulp_bound) {
    long bad = 0;
    for (long i = 0; i < lanes; i++) {
      if (skip[i]) continue;
      uint64_t a = repro_lane_bits(actual + i * size, size), e = repro_lane_bits(expected + i * size, size);
      if (repro_lane_ok(a, e, size, exp_bits, man_bits, ulp_bound, abs_bound[i])) continue;
      if (bad++ < 10)
        printf("lane %ld: got bits 0x%0*llx, expected 0x%0*llx\\n", i, size * 2, (unsigned long long)a, size * 2,
               (unsigned long long)e);
    }
    return bad;
  }
""")


def c_main(case: StandaloneCase, kernel_call: str) -> str:
  """The data of `case` as C arrays and a main() that copies every buffer, runs `kernel_call` (C text calling the
  kernel on the copies `buf0`, `buf1`, ...), checks buffer 0 and exits 1 on a mismatch."""
  expected = np.ascontiguousarray(case.expected).reshape(-1)
  size, exp_bits, man_bits = format_of(expected)
  parts = [c_bytes(f"init{i}", b) for i, b in enumerate(case.buffers)]
  parts += [c_bytes("expected", expected), c_bytes("skip", case.skipped.astype(np.uint8)),
            c_doubles("abs_bound", case.abs_bounds)]
  copies = "".join(f"  unsigned char *buf{i} = repro_copy(init{i}, sizeof(init{i}));\n"
                   for i in range(len(case.buffers)))
  judged = int((~case.skipped).sum())
  return "\n".join(parts) + C_MAIN.format(copies=copies, call=kernel_call, lanes=expected.size, size=size,
                                          exp_bits=exp_bits, man_bits=man_bits, ulp=case.ulp_bound, judged=judged)


C_MAIN = """

static unsigned char *repro_copy(const unsigned char *src, size_t n) {{
  unsigned char *dst = aligned_alloc(64, (n + 63) / 64 * 64);
  memcpy(dst, src, n);
  return dst;
}}

int main(void) {{
{copies}  {call}
  long bad = repro_check(buf0, expected, skip, abs_bound, {lanes}, {size}, {exp_bits}, {man_bits}, {ulp}ull);
  printf("%ld of {judged} judged lanes differ from the reference\\n", bad);
  return bad != 0;
}}
"""


# The same checker in Python with numpy alone, for drivers written in Python (no refgrad import).
PY_CHECKER = textwrap.dedent("""\
  import numpy as np

  FORMATS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


  def is_nan(bits, exp_bits, man_bits):
    exp = (bits >> np.uint64(man_bits)) & np.uint64((1 << exp_bits) - 1)
    man = bits & np.uint64((1 << man_bits) - 1)
    return (exp == np.uint64((1 << exp_bits) - 1)) & (man != 0) if exp_bits else np.zeros(bits.shape, bool)


  def value(bits, size, exp_bits, man_bits):
    if size in (4, 8):
      return bits.astype(FORMATS[size]).view(np.float32 if size == 4 else np.float64).astype(np.float64)
    bias, sign = (1 << (exp_bits - 1)) - 1, (bits >> np.uint64(exp_bits + man_bits)) & np.uint64(1)
    exp = ((bits >> np.uint64(man_bits)) & np.uint64((1 << exp_bits) - 1)).astype(np.int64)
    man = (bits & np.uint64((1 << man_bits) - 1)).astype(np.float64)
    normal = np.ldexp(man + 2.0 ** man_bits, exp - bias - man_bits)
    out = np.where(exp == 0, np.ldexp(man, 1 - bias - man_bits), normal)
    out = np.where(exp == (1 << exp_bits) - 1, np.where(man != 0, np.nan, np.inf), out)
    return np.where(sign == 1, -out, out)


  def check(actual, expected, skip, abs_bound, size, exp_bits, man_bits, ulp_bound):
    \"\"\"The number of judged lanes that differ (bytes in, as the kernel left them); prints the first few.\"\"\"
    a = np.frombuffer(actual, FORMATS.get(size, np.uint8)).astype(np.uint64)
    e = np.frombuffer(expected, FORMATS.get(size, np.uint8)).astype(np.uint64)
    good = a == e
    if exp_bits:
      nan_a, nan_e = is_nan(a, exp_bits, man_bits), is_nan(e, exp_bits, man_bits)
      sign = np.uint64(1 << (size * 8 - 1))
      ma, me = a & (sign - np.uint64(1)), e & (sign - np.uint64(1))
      same = (a & sign) == (e & sign)
      ulps = np.where(same, np.maximum(ma, me) - np.minimum(ma, me), ma + me)
      with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(value(a, size, exp_bits, man_bits) - value(e, size, exp_bits, man_bits))
      numbers = ~nan_a & ~nan_e
      within = ((ulp_bound > 0) & (ulps <= np.uint64(ulp_bound))) | ((abs_bound > 0) & (diff <= abs_bound))
      good |= (nan_a & nan_e) | (numbers & within)
    bad = np.flatnonzero(~good & ~skip)
    for lane in bad[:10]:
      print(f"lane {lane}: got bits {int(a[lane]):#0{size * 2 + 2}x}, expected {int(e[lane]):#0{size * 2 + 2}x}")
    return int(bad.size)
""")


def py_data(case: StandaloneCase) -> str:
  """The data of `case` as Python literals: INIT (bytes per buffer), EXPECTED, SKIP, ABS_BOUND and the format."""
  expected = np.ascontiguousarray(case.expected).reshape(-1)
  size, exp_bits, man_bits = format_of(expected)
  init = "".join(f"  {np.ascontiguousarray(b).reshape(-1).tobytes()!r},\n" for b in case.buffers)
  return (f"INIT = [\n{init}]\n"
          f"EXPECTED = {expected.tobytes()!r}\n"
          f"SKIP = np.array({case.skipped.astype(int).tolist()!r}, dtype=bool)\n"
          f"ABS_BOUND = np.array([float.fromhex(h) for h in {[float(v).hex() for v in case.abs_bounds]!r}])\n"
          f"SIZE, EXP_BITS, MAN_BITS, ULP_BOUND = {size}, {exp_bits}, {man_bits}, {case.ulp_bound}\n")
