"""Settings read from outside, each in a fresh process: REFGRAD_OPTS (codegen/opt.py) forces an opt list on the
kernels it fits, warns once about those it does not fit and leaves them their default opts, and refuses a string it
cannot read; the examples' command lines (the README's) reach train() with the flags' values."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README_OPTS = "UPCAST(1,8) THREAD(0,2)"

# 1-D kernels (no thread axis 1: the list does not fit) and 2-D ones (it does), with the opts each was compiled with
PROGRAMS = """
import json
import numpy as np
from refgrad import Device, Tensor
from refgrad.codegen.pipeline import compile_ast
from refgrad.codegen.contract import opts_text

a = np.arange(-20, 44, dtype=np.float32).reshape(8, 8)
programs = {"row": lambda: Tensor(a[0], device="CLANG") * 2 + 1,
            "row_exp": lambda: Tensor(a[1], device="CLANG").exp2(),
            "square": lambda: Tensor(a, device="CLANG") * 3 - 1,
            "row_sums": lambda: Tensor(a, device="CLANG").sum(1)}
out = {}
for name, make in programs.items():
  opts = [opts_text(compile_ast(item.ast, Device["CLANG"].caps).opts) for item in make().schedule()]
  out[name] = {"values": make().numpy().tolist(), "opts": opts}
print(json.dumps(out))
"""


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  """Run code in a fresh python; REFGRAD_OPTS only as `env` gives it. Warnings all shown (-W always), so that a
  warning printed once is the library's doing, not Python's deduplication."""
  environ = {k: v for k, v in os.environ.items() if k != "REFGRAD_OPTS"} | (env or {})
  return subprocess.run([sys.executable, "-W", "always", "-c", code, *args], cwd=ROOT, env=environ,
                        capture_output=True, text=True, timeout=300)


def test_the_readme_opts_run_the_kernels_they_fit_and_warn_once_about_the_others():
  done = run_python(PROGRAMS, env={"REFGRAD_OPTS": README_OPTS})
  assert done.returncode == 0, done.stderr
  got = json.loads(done.stdout)
  a = np.arange(-20, 44, dtype=np.float32).reshape(8, 8)
  want = {"row": a[0] * 2 + 1, "row_exp": np.exp2(a[1]), "square": a * 3 - 1, "row_sums": a.sum(1)}
  for name, values in want.items():
    np.testing.assert_allclose(np.array(got[name]["values"], np.float32), values, rtol=1e-6)
  assert got["square"]["opts"] == [README_OPTS]  # the 2-D kernel takes the list
  defaults = json.loads(run_python(PROGRAMS).stdout)
  for name in ("row", "row_exp", "row_sums"):  # the 1-D kernels keep what they get without REFGRAD_OPTS
    assert got[name]["opts"] == defaults[name]["opts"]
  warnings = [line for line in done.stderr.splitlines() if "UserWarning" in line]
  assert len(warnings) == 1, done.stderr
  assert "REFGRAD_OPTS" in warnings[0] and README_OPTS in warnings[0] and "output shape (8,)" in warnings[0]


def test_opts_that_cannot_be_read_are_a_value_error_naming_the_variable():
  code = ("from refgrad import Tensor\ntry:\n  (Tensor([1.0, 2.0], device='CLANG') + 1).realize()\n"
          "except ValueError as error:\n  print(type(error).__name__, error)")
  done = run_python(code, env={"REFGRAD_OPTS": "UPCAST(1,8"})
  assert done.returncode == 0, done.stderr
  assert done.stdout.startswith("ValueError REFGRAD_OPTS='UPCAST(1,8'"), done.stdout


# Runs an example as `python examples/NAME.py ARGS...` would, with training.fit replaced by one that prints what
# train() passed it: the command line is checked all the way to the training loop, without training
RECORD_FIT = """
import json, runpy, sys
import examples.training as training

def fit(make_model, data, steps, device, seed, quiet, shard=None):
  print(json.dumps({"model": make_model.__name__, "examples": len(data[0]), "steps": steps, "device": device,
                    "seed": seed, "shard": shard}))
  return {"loss": 0.0, "accuracy": 1.0, "steps_per_second": 1.0}

training.fit = fit
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("example, args, want", [
  ("cnn", ["--device", "CLANG"], {"model": "CNN", "examples": 192, "steps": 60, "device": "CLANG", "shard": None}),
  ("cnn", ["--shard", "CLANG,CLANG:1", "--steps", "5", "--seed", "3"],
   {"model": "CNN", "examples": 192, "steps": 5, "device": None, "seed": 3, "shard": ["CLANG", "CLANG:1"]}),
  ("mlp", ["--device", "CLANG"], {"model": "MLP", "examples": 300, "steps": 300, "device": "CLANG", "shard": None}),
  ("mlp", ["--shard", "CLANG,CLANG:1"], {"model": "MLP", "steps": 300, "device": None, "shard": ["CLANG", "CLANG:1"]}),
])
def test_the_examples_command_lines_reach_train_with_their_values(example, args, want):
  done = run_python(RECORD_FIT, f"examples/{example}.py", *args)
  assert done.returncode == 0, done.stderr
  passed = json.loads(done.stdout.splitlines()[0])
  assert {k: passed[k] for k in want} == want
  assert "accuracy 100.0%" in done.stdout  # main printed train()'s result


@pytest.mark.parametrize("example", ["cnn", "mlp"])
def test_the_examples_help(example):
  done = subprocess.run([sys.executable, f"examples/{example}.py", "--help"], cwd=ROOT, capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert all(flag in done.stdout for flag in ("--steps", "--device", "--seed", "--shard"))
  assert f"Train a small {example.upper()}" in done.stdout
