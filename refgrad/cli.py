"""The `refgrad` command: `refgrad demo` and `refgrad devices`."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def cmd_devices(args: argparse.Namespace) -> int:
  """List every registered device with its plugin, version and status."""
  from refgrad import Device
  for entry in Device.specs():
    status = "available" if entry.unavailable_reason is None else f"unavailable: {entry.unavailable_reason}"
    print(f"{entry.name:10s} plugin={entry.plugin:16s} {status}")
  return 0


def cmd_demo(args: argparse.Namespace) -> int:
  """Run a few Tensor programs on a device and check each against the graph evaluator, op by op."""
  from refgrad import Device, Tensor
  from refgrad.interp.graph import evaluate_graph
  device = Device.canonicalize(args.device)
  rng = np.random.default_rng(args.seed)
  x = Tensor(rng.standard_normal((64, 32)).astype(np.float32), device=device)
  w = Tensor(rng.standard_normal((32, 16)).astype(np.float32), device=device)
  i = Tensor(rng.integers(-100, 100, (64, 32)).astype(np.int32), device=device)
  programs = {
    "elementwise: (x*2+1).relu()": lambda: (x * 2 + 1).relu(),
    "fused reduce: (x*x+1).sum(1)": lambda: (x * x + 1).sum(1),
    "matmul: x @ w": lambda: x @ w,
    "softmax-like: (x - x.max(1)).exp2()": lambda: (x - x.max(1, keepdim=True)).exp2(),
    "integers: (i // 7) % 5 - (i >> 2)": lambda: (i // 7) % 5 - (i >> 2),
    "movement: x.T[::2, 1:].pad(((1,1),(2,0)))": lambda: x.T[::2, 1:].pad(((1, 1), (2, 0))),
  }
  print(f"refgrad demo on {device}: each program runs through the scheduler, lowering and the {device} device,")
  print("and is compared with the graph evaluator, which computes the same graph op by op with numpy.\n")
  failures = 0
  for name, build in programs.items():
    t = build()
    kernels = len(t.schedule())
    start = time.perf_counter()
    got = t.numpy()
    elapsed = (time.perf_counter() - start) * 1e3
    want, _ = evaluate_graph(build().uop)
    ok = np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    failures += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {name:44s} shape={str(t.shape):10s} kernels={kernels} {elapsed:7.1f} ms")
  print(f"\n{len(programs) - failures}/{len(programs)} programs agree with the reference.")
  return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="refgrad", description="refgrad: tensors you can prove right")
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("devices", help="list devices and whether they are available").set_defaults(fn=cmd_devices)
  demo = sub.add_parser("demo", help="run a few programs and check them against the reference")
  demo.add_argument("--device", default=None, help="device to run on (default: REFGRAD_DEVICE or PYTHON)")
  demo.add_argument("--seed", type=int, default=0)
  demo.set_defaults(fn=cmd_demo)
  args = parser.parse_args(argv)
  try:
    return args.fn(args)
  except (ValueError, RuntimeError) as e:
    print(f"refgrad: error: {e}", file=sys.stderr)
    return 2


if __name__ == "__main__":
  sys.exit(main())
