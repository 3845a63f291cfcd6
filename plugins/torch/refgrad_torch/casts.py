"""Values between numpy and torch, and CAST with SPEC.md's single rounding, in torch ops.

torch converts float64 to float16/bfloat16 and 32/64-bit ints to bfloat16 through float32, rounding twice (float64
`1 + 2**-8 + 2**-30` became bfloat16 1.0, not `1 + 2**-7`; int32 `2**24 + 2**16 + 1` became `2**24`, not
`2**24 + 2**17`). These casts take alu.py's way instead: to float64 exactly (64-bit ints keep their top bits and a
sticky bit), to float32 rounded to odd, then one rounding to the 16-bit float, which is then correct.
"""
from __future__ import annotations

import numpy as np
import torch

from refgrad.dtype import DType, dtypes

SIGNED_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def torch_dtype(dtype: DType) -> torch.dtype:
  return getattr(torch, dtype.name)  # torch names every refgrad dtype alike (bool .. uint64, bfloat16)


def to_torch(x: np.ndarray, dtype: DType) -> torch.Tensor:
  """A numpy array of refgrad dtype `dtype` as a torch tensor with the same bits (torch cannot read bfloat16)."""
  bits = np.array(x, dtype.np, order="C").view(f"u{dtype.itemsize}")  # a copy, 0-d kept 0-d
  return torch.from_numpy(bits).view(torch_dtype(dtype))


def from_torch(t: torch.Tensor, dtype: DType) -> np.ndarray:
  """A torch tensor's values as a numpy array of refgrad dtype `dtype`, bit for bit."""
  return t.detach().contiguous().view(SIGNED_OF_SIZE[dtype.itemsize]).numpy().view(dtype.np)


def _wide_int_to_f64(x: torch.Tensor, signed: bool) -> torch.Tensor:
  """int64/uint64 -> float64 keeping the top 53 bits exactly and ORing the rest into a sticky bit (so one more
  rounding to <= 24 bits is right), in int64 arithmetic: torch has no uint64 shift or compare kernels."""
  bits = x.view(torch.int64)
  neg = bits < 0 if signed else torch.zeros_like(bits, dtype=torch.bool)
  mag = torch.where(neg, -bits, bits)  # -MIN wraps to MIN, whose bits are 2**63 as unsigned
  high = (mag >> 11) & ((1 << 53) - 1)  # masking makes the arithmetic shift a logical one
  squeezed = (high | ((mag & 0x7FF) != 0).to(torch.int64)).to(torch.float64) * 2.0 ** 11
  large = (mag < 0) | (mag >= 1 << 53)  # at least 2**53 as unsigned
  wide = torch.where(large, squeezed, mag.to(torch.float64))
  return torch.where(neg, -wide, wide)


def _f32_round_to_odd(x: torch.Tensor) -> torch.Tensor:
  """float64 -> float32 rounded to odd: truncated, the last bit set if anything was cut off."""
  near = x.to(torch.float32)
  back = near.to(torch.float64)
  inexact = (back != x) & ~torch.isnan(x)
  bits = near.view(torch.int32)
  bits = torch.where(inexact & (back.abs() > x.abs()), bits - 1, bits)  # rounded away from zero: step back
  return torch.where(inexact, bits | 1, bits).view(torch.float32)


def _rounds_twice(src: DType, to: DType) -> bool:
  """Whether torch's own conversion src -> to may round twice (through float32). int -> float16 cannot: every int
  float32 rounds is past float16's range."""
  if to not in (dtypes.float16, dtypes.bfloat16):
    return False
  return src == dtypes.float64 or (dtypes.is_int(src) and src.itemsize >= 4 and to == dtypes.bfloat16)


def cast(x: torch.Tensor, src: DType, to: DType) -> torch.Tensor:
  """CAST src -> to as alu.exec_cast: bool is `x != 0` (NaN is True), ints keep their low bits, floats round once to
  nearest-even. float -> int lanes out of range are UNDEFINED in SPEC: torch's value there is as good as any."""
  if not _rounds_twice(src, to):
    return x.to(torch_dtype(to))
  exact = _wide_int_to_f64(x, src.kind == "i") if dtypes.is_int(src) and src.itemsize == 8 else x.to(torch.float64)
  return _f32_round_to_odd(exact).to(torch_dtype(to))
