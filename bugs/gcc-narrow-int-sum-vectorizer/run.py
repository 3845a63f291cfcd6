"""Builds repro.c with gcc -O2 and runs it, with only Python's standard library. Exit status: 0 the sum is right
(fixed), 1 it is wrong (the bug), 2 anything else (no gcc, a failed build)."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

gcc = shutil.which("gcc")
if gcc is None:
  print("gcc is not installed")
  sys.exit(2)
print(subprocess.run([gcc, "--version"], capture_output=True, text=True).stdout.splitlines()[0])
with tempfile.TemporaryDirectory() as folder:
  binary = str(Path(folder) / "repro")
  build = subprocess.run([gcc, "-O2", "-w", str(Path(__file__).parent / "repro.c"), "-o", binary],
                         capture_output=True, text=True)
  if build.returncode != 0:
    print(build.stderr)
    sys.exit(2)
  run = subprocess.run([binary], capture_output=True, text=True)
print(run.stdout, end="")
sys.exit(run.returncode if run.returncode in (0, 1) else 2)
