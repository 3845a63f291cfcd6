"""torch.compile (Inductor, CPU) cannot compile a bool tensor made by comparing int32 (or int8, uint8, int64,
float64) values and then padded along a dimension other than the last: in the vectorized kernel the padding is a
scalar condition per row, and Inductor writes `row_in_range ? <the comparison, a VecMask<int, 1>> : <false, as a
VecMask<float, 1>>`. The two arms of the C++ `?:` have different types, and g++ rejects it. Eager torch computes
both programs.

Needs only torch. Exit status 0: both compile and agree with eager (fixed); 1: a compile error, or a compiled value
that differs from eager (the bug); 2: torch is missing."""
import sys

try:
  import torch
except ImportError:
  print("torch is not installed")
  sys.exit(2)


def pad_a_row_above(x):
  return torch.constant_pad_nd(x == 0, (0, 0, 1, 0))  # (last dim: none, rows: one before)


CASES = [("int32 x == 0, padded by a row", torch.tensor([[0, 1, 0]], dtype=torch.int32)),
         ("float64 x == 0, padded by a row", torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64))]


def compile_error_line(error: Exception) -> str:
  lines = [line for line in str(error).splitlines() if "error:" in line]
  return lines[0].split("error:", 1)[1].strip() if lines else f"{type(error).__name__} (no C++ error line)"


failed = False
print(f"torch {torch.__version__}")
for name, x in CASES:
  expected = pad_a_row_above(x)
  try:
    got = torch.compile(pad_a_row_above, fullgraph=True, dynamic=False)(x)
  except Exception as error:  # torch._inductor.exc.InductorError wrapping CppCompileError
    print(f"{name}: compile error: {compile_error_line(error)}; eager gives {expected.tolist()}", flush=True)
    failed = True
    continue
  print(f"{name}: got {got.tolist()}, expected {expected.tolist()}", flush=True)
  failed |= not torch.equal(got, expected)
sys.exit(1 if failed else 0)
