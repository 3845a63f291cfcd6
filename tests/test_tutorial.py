"""docs/writing-a-backend.md builds a backend from its code blocks: run them, in order, in a fresh process, and check
the device they make against the reference. Its blocks are also the code of examples/pyloops, word for word, so the
page and the example cannot drift apart."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "writing-a-backend.md"
EXAMPLE = ROOT / "examples" / "pyloops" / "refgrad_pyloops" / "__init__.py"

# run in a fresh process: registering the tutorial's PYLOOPS must not replace an installed one in this worker
DRIVER = textwrap.dedent("""
  import numpy as np
  import tutorial_backend
  from hypothesis import given, settings
  from refgrad import Tensor, plugin_loader
  from refgrad.testing.oracle.compare import compare
  from refgrad.testing.oracle.reference import check_against_reference, undefined_lanes
  from refgrad.testing.strategies import PROGRAM_HEALTH_CHECKS, tensor_programs

  assert plugin_loader.register(tutorial_backend) == ["PYLOOPS"]
  x = np.array([[0.0, -0.0, 1.5], [np.inf, np.nan, -3.25]], np.float32)
  cases = {"affine": lambda t: t * 2 + 1, "row max": lambda t: t.max(1), "sum": lambda t: t.sum(),
           "where": lambda t: (t < 1).where(t, -t), "flip and pad": lambda t: t.flip(1).pad(((1, 0), (0, 2))),
           "cast to int8": lambda t: t.cast("int8"), "half": lambda t: t.cast("float16") * 3}
  for name, fn in cases.items():
    want = fn(Tensor(x, device="PYTHON")).realize()
    result = compare(fn(Tensor(x, device="PYLOOPS")).numpy(), want.numpy(), undefined_lanes(want))
    assert result.ok, f"{name}: {result}"

  @settings(max_examples=15, deadline=None, suppress_health_check=PROGRAM_HEALTH_CHECKS, database=None)
  @given(program=tensor_programs(transcendentals=False, max_steps=3))
  def random_programs(program):  # kernel by kernel, with SPEC.md's bounds: PYLOOPS sums in its own order
    check_against_reference(program.run, *program.inputs, device="PYLOOPS")
  random_programs()
  print("tutorial backend agrees with the reference")
""")


def python_blocks(markdown: str) -> list[str]:
  return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def backend_blocks() -> list[str]:
  """The blocks from section 2 on (section 1's block prints a listing; it needs no backend)."""
  text = TUTORIAL.read_text()
  return python_blocks(text[text.index("## 2. The four parts of a device"):])


def test_the_tutorial_blocks_are_the_example_word_for_word():
  example = EXAMPLE.read_text()
  blocks = backend_blocks()
  assert len(blocks) >= 6
  missing = [block.splitlines()[0] for block in blocks if block not in example]
  assert missing == [], f"blocks of {TUTORIAL.name} that examples/pyloops does not contain: {missing}"


def test_the_listing_block_runs():
  first = python_blocks(TUTORIAL.read_text())[0]
  out = subprocess.run([sys.executable, "-c", first], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert "kernel" in out.stdout and "ACCUMULATE" in out.stdout


def test_the_tutorial_builds_a_backend_that_agrees_with_the_reference(tmp_path):
  (tmp_path / "tutorial_backend.py").write_text("\n".join(backend_blocks()))
  out = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-4000:]
  assert "agrees with the reference" in out.stdout
