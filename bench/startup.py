"""Start-up cost of a fresh process: what every `refgrad` command, fuzz worker, check subprocess and pytest run pays
before doing any work. Prints the best of --repeat runs of each command, and the imports that cost the most (from
`python -X importtime`), so a slow dependency shows by name.

  python bench/startup.py [--repeat 5]"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
  "python (nothing imported)": [sys.executable, "-c", "pass"],
  "import numpy": [sys.executable, "-c", "import numpy"],
  "import ml_dtypes": [sys.executable, "-c", "import ml_dtypes"],
  "import refgrad": [sys.executable, "-c", "import refgrad"],
  "refgrad --help": [sys.executable, "-m", "refgrad.cli", "--help"],
  "pytest of one empty test (loads refgrad's plugin)": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                                         "{empty_test}"],
}


def best_seconds(command: list[str], repeat: int) -> float:
  times = []
  for _ in range(repeat):
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    times.append(time.perf_counter() - start)
  return min(times)


def costliest_imports(count: int = 8) -> list[tuple[int, str]]:
  """(own microseconds, module) of the imports of `import refgrad` that took longest by themselves."""
  err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import refgrad"], capture_output=True,
                       text=True, check=True).stderr
  rows = []
  for line in err.splitlines():
    parts = line.split("|")
    if len(parts) == 3 and parts[0].split(":")[-1].strip().isdigit():
      rows.append((int(parts[0].split(":")[-1]), parts[2].strip()))
  return sorted(rows, reverse=True)[:count]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  import ml_dtypes
  import numpy
  print(f"numpy {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}, Python {sys.version.split()[0]}")
  print(f"{'command':50s} {'best of ' + str(args.repeat):>12s}")
  with tempfile.TemporaryDirectory() as scratch:
    empty_test = Path(scratch) / "test_empty.py"
    empty_test.write_text("def test_nothing():\n  pass\n")
    for name, command in COMMANDS.items():
      command = [part.format(empty_test=empty_test) for part in command]
      print(f"{name:50s} {best_seconds(command, args.repeat) * 1000:10.0f} ms")
  print("costliest imports of `import refgrad` (their own time):")
  for micros, module in costliest_imports():
    print(f"  {micros / 1000:8.1f} ms  {module}")


if __name__ == "__main__":
  main()
