// cuda_bf16.h -- the emulator's stand-in for CUDA's header of that name.
//
// __nv_bfloat16 is the top half of a float's bits. float -> bf16 rounds to nearest even (NaN becomes
// the canonical 0x7fff), as __float2bfloat16 does on the GPU; bf16 -> float is exact. Arithmetic goes through
// float and rounds once, which is the correctly rounded bf16 result (float has > 2*8+2 bits).
#pragma once
#include <cuda_fp16.h>  // as in CUDA: the bf16 header brings the fp16 one

namespace cuemu {
inline unsigned short float_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // the GPU's canonical NaN
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// double -> bf16 in one rounding: round to float "to odd" (truncate, then set the last bit if
// inexact), which keeps the sticky information the second, nearest-even rounding needs.
inline unsigned short double_to_bf16_bits(double d) {
  float f = (float)d;
  if (std::isfinite(d) && (double)f != d) {
    if (std::fabs((double)f) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  }
  return float_to_bf16_bits(f);
}
}  // namespace cuemu

struct __nv_bfloat16_raw { unsigned short x; };

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(cuemu::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double d) : __x(cuemu::double_to_bf16_bits(d)) {}
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  __nv_bfloat16(I i) : __x(cuemu::double_to_bf16_bits((double)i)) {}
  operator float() const { return std::bit_cast<float>((uint32_t)__x << 16); }
  operator __nv_bfloat16_raw() const { return {__x}; }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat162 nv_bfloat162;

CUEMU_LOW_PRECISION_OPS(__nv_bfloat16, __nv_bfloat162)

inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16(i); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)s}); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return {a, a}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
inline float2 __bfloat1622float2(__nv_bfloat162 a) { return {float(a.x), float(a.y)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat16 __half2bfloat16(__half h) { return __nv_bfloat16(float(h)); }
