"""torch.compile (Inductor, CPU) cannot compile a maximum (or minimum) of a narrow integer's truncating division: in
a kernel it does not vectorize, Inductor writes the int16 (or uint8, int8) quotient as C++ `a / b`, which C++
promotes to int, and passes it with a value of the narrow type to the template `max_propagate_nan(T, T)`: g++ finds
no matching function. Eager torch computes both programs.

Needs only torch. Exit status 0: both compile and agree with eager (fixed); 1: a compile error, or a compiled value
that differs from eager (the bug); 2: torch is missing."""
import sys

try:
  import torch
except ImportError:
  print("torch is not installed")
  sys.exit(2)


def int16_amax(x):
  return torch.div(x, 2, rounding_mode="trunc").amax()


def uint8_maximum(x, divisor):
  # the uint32 cast keeps Inductor from vectorizing the kernel, which is what uint8 needs to reach the scalar path
  return torch.maximum(x, torch.div(x, divisor.to(torch.uint8), rounding_mode="trunc"))


CASES = [("amax of int16 x / 2 (trunc)", int16_amax, (torch.arange(8, dtype=torch.int16),)),
         ("maximum of uint8 x and x / divisor (trunc)", uint8_maximum,
          (torch.arange(8, dtype=torch.uint8), torch.full((8,), 2, dtype=torch.uint32)))]


def compile_error_line(error: Exception) -> str:
  lines = [line for line in str(error).splitlines() if "error:" in line]
  return lines[0].split("error:", 1)[1].strip() if lines else f"{type(error).__name__} (no C++ error line)"


failed = False
print(f"torch {torch.__version__}")
for name, fn, args in CASES:
  expected = fn(*args)
  try:
    got = torch.compile(fn, fullgraph=True, dynamic=False)(*args)
  except Exception as error:  # torch._inductor.exc.InductorError wrapping CppCompileError
    print(f"{name}: compile error: {compile_error_line(error)}; eager gives {expected.tolist()}", flush=True)
    failed = True
    continue
  print(f"{name}: got {got.tolist()}, expected {expected.tolist()}", flush=True)
  failed |= not torch.equal(got, expected)
sys.exit(1 if failed else 0)
