"""jax.jit on the CPU dies of SIGFPE compiling an integer division or remainder whose operands are both constants and
whose divisor is 0: before XLA compiles the module, StableHLO's folder divides the two constants on the host, with
no check for a zero divisor. The same division with its operands passed as arguments compiles, and gives XLA's
value for a zero divisor (-1 for the quotient, the dividend for the remainder). Each program runs in a child
process, so this driver survives the crash.

Needs only jax and numpy. Exit status 0: the constant forms compile (fixed); 1: the compiler kills the process (the
bug); 2: jax is missing, or a child failed some other way."""
import signal
import subprocess
import sys

try:
  import jax
  import jaxlib
except ImportError:
  print("jax is not installed")
  sys.exit(2)

PRELUDE = "import numpy as np\nimport jax\nfrom jax import lax\n"
CASES = [  # (the operation, the program with its operands as arguments, the program with them as constants)
  ("int32 1 / 0", "jax.jit(lax.div)(np.int32(1), np.int32(0))", "jax.jit(lambda: lax.div(np.int32(1), np.int32(0)))()"),
  ("int32 7 % 0", "jax.jit(lax.rem)(np.int32(7), np.int32(0))", "jax.jit(lambda: lax.rem(np.int32(7), np.int32(0)))()"),
]


def run(expression: str) -> str | None:
  """What `print(expression)` prints in a fresh Python, or None if the process is killed by SIGFPE."""
  try:
    child = subprocess.run([sys.executable, "-c", f"{PRELUDE}print({expression})"], capture_output=True, text=True,
                           timeout=120)
  except subprocess.TimeoutExpired:
    print(f"{expression} did not finish in 120 s")
    sys.exit(2)
  if child.returncode == -signal.SIGFPE:
    return None
  if child.returncode != 0:
    print(f"{expression} failed (exit status {child.returncode}):\n{child.stderr[-2000:]}")
    sys.exit(2)
  return child.stdout.strip()


print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, backend {jax.default_backend()}", flush=True)
crashed = False
for name, with_arguments, with_constants in CASES:
  at_run_time = run(with_arguments)
  if at_run_time is None:
    print(f"{with_arguments} was killed by SIGFPE too: not this bug")
    sys.exit(2)
  print(f"{name} with arguments: got {at_run_time}", flush=True)
  folded = run(with_constants)
  got = "SIGFPE, the compiler killed the process" if folded is None else folded
  print(f"{name} with constants: got {got}; expected a value ({at_run_time} at run time)", flush=True)
  crashed |= folded is None
sys.exit(1 if crashed else 0)
