"""C helper functions shared by every C-like backend: half and bfloat16 emulation, exact conversions, MAX.

half and bfloat16 are computed in float and stored as 16 bits; every operation rounds its float result once
to the 16-bit format. float has at least 2p+2 bits for both, so + - * / sqrt rounded that way are exactly
the correctly rounded 16-bit results docs/SPEC.md asks for. Conversions that could round twice (float64 or
wide integers to half/bfloat16) first round to float "to odd", which makes the second rounding exact.

The text is plain C99 that also compiles as OpenCL C (so no name may be an OpenCL keyword such as `half`):
`RG_FN` is the function qualifier, the four `rg_*bits*` functions reinterpret bits, and `uint32_t`, `uint64_t`,
`int64_t` and `ushort_t` name integer types; a dialect's header defines them all before this text.
"""

PRELUDE = r"""
RG_FN float rg_f16_to_f32(ushort_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1fu) return rg_bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp != 0u) return rg_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0u) return rg_bits_f32(sign);
  uint32_t shifts = 0u;
  while ((mant & 0x400u) == 0u) { mant <<= 1; shifts++; }
  return rg_bits_f32(sign | ((113u - shifts) << 23) | ((mant & 0x3ffu) << 13));
}
RG_FN ushort_t rg_f32_to_f16(float f) {
  uint32_t x = rg_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  /* NaN: keep the payload's top bits, so bitcasts through half round-trip */
    uint32_t payload = (ax >> 13) & 0x3ffu;
    return (ushort_t)(sign | 0x7c00u | (payload ? payload : 0x200u));
  }
  if (ax == 0x7f800000u) return (ushort_t)(sign | 0x7c00u);
  if (ax >= 0x477ff000u) return (ushort_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) return (ushort_t)(sign | ((ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13));
  uint32_t e = ax >> 23;
  if (e < 102u) return (ushort_t)sign;
  uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) q++;
  return (ushort_t)(sign | q);
}
RG_FN float rg_bf16_to_f32(ushort_t h) { return rg_bits_f32((uint32_t)h << 16); }
RG_FN ushort_t rg_f32_to_bf16(float f) {
  uint32_t x = rg_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort_t)((x >> 16) | (((x >> 16) & 0x7fu) ? 0u : 0x40u));
  return (ushort_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
RG_FN float rg_round_f16(float f) { return rg_f16_to_f32(rg_f32_to_f16(f)); }
RG_FN float rg_round_bf16(float f) { return rg_bf16_to_f32(rg_f32_to_bf16(f)); }
RG_FN float rg_max_f32(float a, float b) {
  float larger = a > b ? a : b;
  float tie = (rg_f32_bits(a) >> 31) ? b : a;
  float m = a == b ? tie : larger;
  return (a != a || b != b) ? a + b : m;
}
"""

DOUBLE_PRELUDE = r"""
RG_FN double rg_max_f64(double a, double b) {
  double larger = a > b ? a : b;
  double tie = (rg_f64_bits(a) >> 63) ? b : a;
  double m = a == b ? tie : larger;
  return (a != a || b != b) ? a + b : m;
}
RG_FN float rg_f64_to_f32_odd(double d) {
  float f = (float)d;
  if ((double)f == d || d != d) return f;
  uint32_t bits = rg_f32_bits(f);
  if (fabs((double)f) > fabs(d)) bits -= 1u;
  return rg_bits_f32(bits | 1u);
}
"""

WIDE_INT_PRELUDE = r"""
RG_FN float rg_u64_to_f32_odd(uint64_t u) {
  uint64_t v = u;
  uint32_t shift = 0u;
  while (v >= 0x1000000ull) { v >>= 1; shift++; }
  if (shift != 0u && (u & ((1ull << shift) - 1ull)) != 0ull) v |= 1ull;
  return (float)v * (float)(1ull << shift);
}
RG_FN float rg_i64_to_f32_odd(int64_t x) {
  return x < 0 ? -rg_u64_to_f32_odd(0ull - (uint64_t)x) : rg_u64_to_f32_odd((uint64_t)x);
}
"""
