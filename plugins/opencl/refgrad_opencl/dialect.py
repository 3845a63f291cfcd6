"""OpenCL C as a dialect of the core's C-style renderer (refgrad/codegen/cstyle.py), and what a device can run.

Values use OpenCL's own type names; buffers hold bool as uchar and half/bfloat16 as ushort (computed in float
and rounded once per op by the core's prelude, which is exact for + - * / sqrt: docs/SPEC.md). The prelude is
shared with C, so this header gives it the <stdint.h> names it uses and bit casts through as_uint/as_float.
"""
from __future__ import annotations

from dataclasses import dataclass

from refgrad.codegen.contract import Capabilities
from refgrad.codegen.cstyle import CDialect
from refgrad.dtype import ALL_DTYPES, dtypes
from refgrad.uop import Ops

OPENCL_TYPES = {
  dtypes.bool: "bool", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long",
  dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
  dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double",
}
OPENCL_STORAGE = {**OPENCL_TYPES, dtypes.bool: "uchar", dtypes.float16: "ushort", dtypes.bfloat16: "ushort"}

# FP_CONTRACT OFF: no fused multiply-add, each op rounds on its own (OpenCL C allows contraction by default)
OPENCL_HEADER = """#pragma OPENCL FP_CONTRACT OFF
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
typedef uint uint32_t;
typedef ulong uint64_t;
typedef long int64_t;
typedef ushort ushort_t;
#define RG_FN static inline
RG_FN uint rg_f32_bits(float x) { return as_uint(x); }
RG_FN float rg_bits_f32(uint u) { return as_float(u); }
#ifdef cl_khr_fp64
RG_FN ulong rg_f64_bits(double x) { return as_ulong(x); }
RG_FN double rg_bits_f64(ulong u) { return as_double(u); }
#endif
RG_FN float rg_exp2_f32(float x) { return isnan(x) ? x : exp2(x); }
RG_FN float rg_trunc_f32(float x) { return isnan(x) ? x : trunc(x); }
#ifdef cl_khr_fp64
RG_FN double rg_exp2_f64(double x) { return isnan(x) ? x : exp2(x); }
RG_FN double rg_trunc_f64(double x) { return isnan(x) ? x : trunc(x); }
#endif
"""

# OpenCL's builtins are overloaded for float and double. exp2 and trunc go through the header's wrappers: PoCL
# (3.1, Debian 12) drops the whole store when the compiler can see that their argument is NaN (NAN + x, a NaN constant),
# leaving whatever the output held; a NaN is passed through before it reaches them.
OPENCL_MATH = {"sqrt": "sqrt", "log2": "log2", "sin": "sin", "fabs": "fabs", "fmod": "fmod"}
OPENCL_FLOAT_MATH = {**OPENCL_MATH, "exp2": "rg_exp2_f32", "trunc": "rg_trunc_f32"}
OPENCL_DOUBLE_MATH = {**OPENCL_MATH, "exp2": "rg_exp2_f64", "trunc": "rg_trunc_f64"}

THREAD_INDEX = {Ops.SPECIAL: "get_global_id({})", Ops.LOCAL_INDEX: "get_local_id({})",
                Ops.GROUP_INDEX: "get_group_id({})"}


@dataclass(frozen=True)
class DeviceLimits:
  """The facts about an OpenCL device that shape its programs (read from pyopencl's Device, or made up in tests)."""
  extensions: frozenset[str]
  local_memory: int             # bytes of local memory per work-group
  max_work_group_size: int      # work-items per work-group
  max_work_item_sizes: tuple[int, ...]  # work-items per work-group on each axis
  address_bits: int = 64
  cpu: bool = False             # a CPU runs a group's items one after the other (PoCL), a GPU side by side
  float_vector_width: int = 1   # CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT: 8 on an AVX2 CPU, often 1 on a GPU

  @staticmethod
  def of(device) -> DeviceLimits:
    import pyopencl as cl
    return DeviceLimits(frozenset(device.extensions.split()), device.local_mem_size, device.max_work_group_size,
                        tuple(device.max_work_item_sizes), device.address_bits,
                        bool(device.type & cl.device_type.CPU), device.preferred_vector_width_float)


def supported_dtypes(limits: DeviceLimits) -> frozenset:
  """Every dtype, except float64 on a device without cl_khr_fp64. (half is emulated, so it never needs fp16.)"""
  return frozenset(dt for dt in ALL_DTYPES.values() if dt != dtypes.float64 or "cl_khr_fp64" in limits.extensions)


# The kernel optimizer's tile along the last axis (refgrad/codegen/opt.py): as many floats as the device's vectors
# hold, and at least 4, which on a GPU keeps a 4x4 tile of outputs in each work-item's registers. Measured on PoCL
# (AVX-512, 2 cores; it prefers 16 floats), 512^3 float32 matmul: no opts 3.3 GFLOPS, 4x4 tile 42, 8x4 45 to 71,
# 16x4 71.
def capabilities(limits: DeviceLimits) -> Capabilities:
  axes = min(3, len(limits.max_work_item_sizes))
  return Capabilities(dtypes=supported_dtypes(limits), local_memory=limits.local_memory,
                      max_global_size=((1 << limits.address_bits) - 1,) * axes,
                      max_local_size=min(limits.max_work_group_size, limits.max_work_item_sizes[0]),
                      interleaved_groups=not limits.cpu, upcast_lanes=max(4, limits.float_vector_width))


def opencl_dialect(limits: DeviceLimits) -> CDialect:
  # several accumulators let a CPU vectorize one work-item's loop; a GPU has other work-items for that
  return CDialect(header=OPENCL_HEADER, kernel_prefix="__kernel ", buffer_prefix="__global ", types=dict(OPENCL_TYPES),
                  storage=dict(OPENCL_STORAGE), thread_index=dict(THREAD_INDEX), float_math=dict(OPENCL_FLOAT_MATH),
                  double_math=dict(OPENCL_DOUBLE_MATH), reduce_lanes=8 if limits.cpu else 1, local_prefix="__local ",
                  barrier="barrier(CLK_LOCAL_MEM_FENCE);", caps=capabilities(limits))
