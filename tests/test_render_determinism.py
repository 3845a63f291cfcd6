"""A kernel renders to the same source in every process, whatever the process built before: the source's text is the
compile cache's key, so a process that rendered it otherwise would compile again what another compiled (each test
worker, each `refgrad check` subprocess, each fuzz worker). Index sums put their terms in an order by structure
(codegen/simplify.py's _term_order), never by object id."""
import subprocess
import sys
from pathlib import Path

import pytest

from refgrad import Device

# movement and gathers whose index math sums several quotients and remainders of the same kind (terms that only
# their structure tells apart), then an MLP's forward and backward (the kernels that exposed the object-id order)
PROGRAMS = r"""
import hashlib, sys
import numpy as np
from refgrad import Device, Tensor
from refgrad.codegen.pipeline import compile_ast
sys.path.insert(0, "examples")
import mlp
Device.DEFAULT = "CLANG"

def sources(tensors):
  device = Device["CLANG"]
  return [device.render(compile_ast(item.ast, device.caps)) for item in Tensor.schedule(*tensors)]

def programs():
  x = Tensor(np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5), device="CLANG")
  yield [x.permute(2, 0, 1).reshape(5, 24).pad(((1, 2), (0, 3))).sum(1)]
  yield [x.reshape(8, 15)[Tensor([3, 0, 7], device="CLANG")].flip(1) + x.reshape(15, 8).T[2:5]]
  yield [x.reshape(2, 2, 6, 5).permute(3, 1, 0, 2).contiguous().reshape(30, 4)[::3].max(1)]
  Tensor.manual_seed(0)
  model = mlp.MLP()
  for layer in (model.l1, model.l2, model.l3):
    layer.weight.requires_grad = True
  loss = model(Tensor.randn(16, 2, device="CLANG")).sparse_categorical_crossentropy(Tensor([0, 1, 2, 1] * 4))
  loss.backward()
  yield [loss] + [layer.weight.grad for layer in (model.l1, model.l2, model.l3)]

if sys.argv[1] == "warm":  # other kernels first: other nodes alive, other ids
  for n in (3, 7, 11):
    Tensor.ones(n, n + 1, device="CLANG").reshape(n + 1, n).permute(1, 0).sum(0).realize()
print(hashlib.sha256("\0".join(s for p in programs() for s in sources(p)).encode()).hexdigest())
"""


@pytest.mark.skipif("CLANG" not in Device.available(), reason="CLANG is not available here")
def test_kernels_render_the_same_source_in_fresh_and_busy_processes(tmp_path):
  script = tmp_path / "render.py"
  script.write_text(PROGRAMS)
  digests = {}
  for mode in ("fresh", "warm", "fresh"):
    run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 0, run.stderr
    digests.setdefault(mode, set()).add(run.stdout.strip())
  assert len(digests["fresh"]) == 1 and digests["fresh"] == digests["warm"], digests
