"""A graph finding as a torch script that runs without refgrad, for a bug report upstream: the graph traced by
torch's make_fx into aten ops, its inputs, constants and the reference's expected values inline (as bit patterns, so
NaN payloads, -0.0 and bfloat16 survive), each lane's allowed error, and a check of eager torch and torch.compile
against them. The script exits 1 when the path under test (torch.compile for INDUCTOR, eager for TORCH) differs."""
from __future__ import annotations

import re

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from refgrad.uop import UOp
from refgrad_torch.casts import to_torch
from refgrad_torch.export import torch_function

_HELPERS = '''INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def from_bits(values, dtype, shape):
    """A tensor from its elements' bit patterns (exact for NaN, -0.0 and bfloat16)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return torch.tensor(values, dtype=INT_OF_SIZE[itemsize]).view(dtype).reshape(shape)'''

_CHECK = '''def wrong_lanes(actual):
    """Lanes (flat) where `actual` is not the expected value: bit for bit where the bound is 0 (any NaN for a NaN),
    else farther than the bound; lanes the reference leaves undefined or unbounded are skipped."""
    a, e = actual.reshape(-1), EXPECTED.reshape(-1)
    if a.is_floating_point():
        size = INT_OF_SIZE[a.element_size()]
        same_bits = a.contiguous().view(size) == e.contiguous().view(size)
        near = (BOUND > 0) & ((a.double() - e.double()).abs() <= BOUND)
        ok = (a.isnan() & e.isnan()) | same_bits | near
    else:
        ok = a == e
    return (~(ok | SKIPPED)).nonzero().flatten().tolist()


def report(name, out):
    wrong = wrong_lanes(out)
    print(f"{{name}}: {{len(wrong)}} of {{out.numel()}} lanes differ from the expected values")
    got, want = out.reshape(-1), EXPECTED.reshape(-1)
    for lane in wrong[:8]:
        print(f"  lane {{lane}}: got {{got[lane].item()!r}}, expected {{want[lane].item()!r}}")
    return wrong


if __name__ == "__main__":
    with torch.no_grad():
        eager = forward(*INPUTS)[0]
        compiled = torch.compile(forward, fullgraph=True{options})(*INPUTS)[0]
    wrong = {{"eager": report("eager torch", eager), "compiled": report("torch.compile", compiled)}}
    sys.exit(1 if wrong[{under_test!r}] else 0)
'''
INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits_literal(t: torch.Tensor) -> str:
  """A tensor as from_bits(...) source: its elements' bit patterns, dtype and shape."""
  bits = t.contiguous().view(INT_OF_SIZE[t.element_size()]).reshape(-1).tolist()
  return f"from_bits({bits}, {t.dtype}, {tuple(t.shape)})"


def _forward_source(graph_module: torch.fx.GraphModule) -> tuple[str, dict[str, torch.Tensor]]:
  """make_fx's code as a plain function (no `self`), and the constant tensors it reads, by their names in the script
  (module-level CONST_ names: make_fx's code assigns `_tensor_constant0 = self._tensor_constant0` to a local)."""
  code = re.sub(r"def forward\(self(, )?", "def forward(", graph_module.code)
  names = sorted(set(re.findall(r"self\.(_tensor_constant\d+)", code)))
  code = re.sub(r"self\.(_tensor_constant\d+)", r"CONST\1", code)
  return code.strip() + "\n", {f"CONST{name}": getattr(graph_module, name) for name in names}


def torch_script(root: UOp, inputs: list[tuple[UOp, np.ndarray]], expected: np.ndarray, bound: np.ndarray,
                 undefined: np.ndarray | None, under_test: str, options: dict[str, str], title: str) -> str:
  """The script (see the module's docstring) for graph `root` over leaves `inputs` ((leaf node, its values)), with
  the reference's flat `expected` values, per-lane `bound` and `undefined` lanes; `under_test` 'eager' or 'compiled'
  decides its exit status."""
  leaves = [leaf for leaf, _ in inputs]
  tensors = [to_torch(np.asarray(values).reshape(leaf.shape), leaf.dtype) for leaf, values in inputs]
  with torch.no_grad():
    traced = make_fx(torch_function([root], leaves))(*tensors)
  forward, constants = _forward_source(traced)
  bound = np.reshape(bound, -1).astype(np.float64)
  skipped = ~np.isfinite(bound) | (np.zeros(bound.size, bool) if undefined is None else np.reshape(undefined, -1))
  lines = [f'"""{title}', "", "Runs without refgrad: python repro.py (exit status 1 if the path under test differs).",
           '"""', "import sys", "", "import torch", "", _HELPERS]
  lines += [f"{name} = {_bits_literal(value)}" for name, value in constants.items()]
  lines += ["", "", forward, "", "INPUTS = ["]
  lines += [f"    {_bits_literal(t)}," for t in tensors]
  lines += ["]", f"EXPECTED = {_bits_literal(to_torch(expected.reshape(root.shape), root.dtype))}  # the reference",
            f"BOUND = torch.tensor({np.where(skipped, 0.0, bound).tolist()}, dtype=torch.float64)  # |error| allowed",
            f"SKIPPED = torch.tensor({skipped.tolist()}, dtype=torch.bool)  # undefined in docs/SPEC.md, or unbounded",
            "", ""]
  lines.append(_CHECK.format(options="".join(f", {k}={v!r}" for k, v in options.items()), under_test=under_test))
  return "\n".join(lines)
