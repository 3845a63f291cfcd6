"""torch.compile (Inductor, CPU) reduces a row of 13 int8 values as one full AVX2 vector of 8 loaded lanes, a
masked vector of 5, and 24 lanes that hold 1: the maximum of 13 x -128 comes out 1, and the int8 sum of 13 x 100
(1300, which wraps to 20) comes out 44 = 20 + 24. Eager torch answers -128 and 20.

Needs only torch. Exit status 0: compiled and eager agree (fixed); 1: they differ (the bug); 2: torch is missing."""
import sys

try:
  import torch
except ImportError:
  print("torch is not installed")
  sys.exit(2)


def row_max(x):
  return torch.amax(x, dim=1, keepdim=True)


def row_sum(x):
  return torch.sum(x, dim=1, keepdim=True, dtype=torch.int8)


CASES = [("amax of 13 x -128", row_max, torch.full((1, 13), -128, dtype=torch.int8)),
         ("int8 sum of 13 x 100", row_sum, torch.full((1, 13), 100, dtype=torch.int8))]

differ = False
print(f"torch {torch.__version__}")
for name, fn, x in CASES:
  expected = fn(x).item()
  got = torch.compile(fn, fullgraph=True)(x).item()
  print(f"{name}: got {got}, expected {expected}")
  differ |= got != expected
sys.exit(1 if differ else 0)
