"""jax.jit on the CPU dies of SIGSEGV compiling a narrowing integer convert whose result goes into a bitwise `|` or
`&`: `a.astype(np.int8) | b` with `a` int32 and `b` int8, 8 elements. XLA's tiled CPU emitter turns the fusion into
vector code (`arith.trunci` of vector<8xi32> to vector<8xi8>, then `arith.ori`), and the SimplifyArithPass pattern
that moves a truncation below an and/or asks the vector type for its scalar bit width, which reads garbage. The
same program run op by op (no jax.jit: the convert and the `|` compile as separate programs) gives the right
values. Each program runs in a child process, so this driver survives the crash.

Needs only jax and numpy. Exit status 0: the jitted forms compile and agree with op by op (fixed); 1: the compiler
kills the process (the bug); 2: jax is missing, a child failed some other way, or a value is wrong."""
import signal
import subprocess
import sys

try:
  import jax
  import jaxlib
except ImportError:
  print("jax is not installed")
  sys.exit(2)

PRELUDE = ("import numpy as np\nimport jax\nimport jax.numpy as jnp\n"
           "a = np.arange(8, dtype=np.int32)\nb = np.full(8, 5, dtype=np.int8)\n")
CASES = [  # (the operation, the function); its values fit in int8, so the convert is exact
  ("int32 -> int8, then |", "lambda a, b: a.astype(jnp.int8) | b"),
  ("int32 -> int8, then &", "lambda a, b: a.astype(jnp.int8) & b"),
]


def run(expression: str) -> str | None:
  """What `print(expression)` prints in a fresh Python, or None if the process is killed by SIGSEGV."""
  try:
    child = subprocess.run([sys.executable, "-c", f"{PRELUDE}print({expression})"], capture_output=True, text=True,
                           timeout=120)
  except subprocess.TimeoutExpired:
    print(f"{expression} did not finish in 120 s")
    sys.exit(2)
  if child.returncode == -signal.SIGSEGV:
    return None
  if child.returncode != 0:
    print(f"{expression} failed (exit status {child.returncode}):\n{child.stderr[-2000:]}")
    sys.exit(2)
  return child.stdout.strip()


print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, backend {jax.default_backend()}", flush=True)
crashed = False
for name, function in CASES:
  op_by_op = run(f"({function})(jnp.asarray(a), jnp.asarray(b)).tolist()")
  if op_by_op is None:
    print(f"{name} op by op was killed by SIGSEGV too: not this bug")
    sys.exit(2)
  print(f"{name} op by op: got {op_by_op}", flush=True)
  jitted = run(f"jax.jit({function})(a, b).tolist()")
  got = "SIGSEGV, the compiler killed the process" if jitted is None else jitted
  print(f"{name} with jax.jit: got {got}; expected {op_by_op}", flush=True)
  if jitted is not None and jitted != op_by_op:
    print(f"{name}: jax.jit compiles but gives other values: not this bug")
    sys.exit(2)
  crashed |= jitted is None
sys.exit(1 if crashed else 0)
