"""The cost of building lazy graphs (no kernel runs): what tracking views for assign and setitem adds to the common
path, and the cost of writes through views.

Run: python bench/views.py [--repeat 5]
"""
from __future__ import annotations

import argparse

from timing import best_time

from refgrad import Tensor


def attention_graph() -> Tensor:
  """A transformer block's movement-heavy forward graph: head split, attention, head merge."""
  x, w = Tensor.empty(4, 16, 64), Tensor.empty(64, 192)
  q, k, v = (x @ w).reshape(4, 16, 3, 4, 16).permute(2, 0, 3, 1, 4).chunk(3)
  att = (q[0] @ k[0].transpose(-1, -2) / 4).softmax(-1) @ v[0]
  return att.permute(0, 2, 1, 3).reshape(4, 16, 64).sum()


def elementwise_graph() -> Tensor:
  """A long elementwise chain on one tensor: no views at all."""
  x = Tensor.empty(256)
  for _ in range(50):
    x = (x * 1.5 + 1).relu()
  return x


def kv_cache_writes() -> Tensor:
  """A KV cache filled one position at a time (lazily, no realize)."""
  cache = Tensor.zeros(2, 32, 8).contiguous()
  for pos in range(32):
    cache[:, pos:pos + 1].assign(Tensor.empty(2, 1, 8))
  return cache


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--repeat", type=int, default=5)
  args = parser.parse_args()
  print(f"{'graph':28s} {'ms per build':>12s}")
  for name, build in (("attention block", attention_graph), ("elementwise chain x50", elementwise_graph),
                      ("kv cache, 32 view writes", kv_cache_writes)):
    seconds = best_time(lambda fn=build: [fn() for _ in range(20)], args.repeat) / 20
    print(f"{name:28s} {seconds * 1e3:12.3f}")


if __name__ == "__main__":
  main()
