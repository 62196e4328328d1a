// cuemu_math.h -- CUDA's vector types, device math and integer intrinsics on the CPU. Included by
// cuda_emu.h.
//
// The fast-math intrinsics (__expf, __logf, ...) are approximate on the GPU; here they are the libm
// functions, so compare emulator results with a tolerance, never bitwise against a GPU.
#pragma once
#include <bit>
#include <climits>
#include <limits>

// CUDA's vector types, with its alignment (float4 loads are 16-byte aligned, float2 8-byte)
#define CUEMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; \
  inline N make_##N(T x, T y) { return N{x, y}; }
#define CUEMU_VEC3(T, N) struct N { T x, y, z; }; inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define CUEMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
  inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
CUEMU_VEC2(signed char, char2, 2) CUEMU_VEC4(signed char, char4, 4)
CUEMU_VEC2(unsigned char, uchar2, 2) CUEMU_VEC4(unsigned char, uchar4, 4)
CUEMU_VEC2(short, short2, 4) CUEMU_VEC4(short, short4, 8)
CUEMU_VEC2(unsigned short, ushort2, 4) CUEMU_VEC4(unsigned short, ushort4, 8)
CUEMU_VEC2(int, int2, 8) CUEMU_VEC3(int, int3) CUEMU_VEC4(int, int4, 16)
CUEMU_VEC2(unsigned, uint2, 8) CUEMU_VEC4(unsigned, uint4, 16)
CUEMU_VEC2(long long, longlong2, 16) CUEMU_VEC2(unsigned long long, ulonglong2, 16)
CUEMU_VEC2(float, float2, 8) CUEMU_VEC3(float, float3) CUEMU_VEC4(float, float4, 16)
CUEMU_VEC2(double, double2, 16)
#undef CUEMU_VEC2
#undef CUEMU_VEC3
#undef CUEMU_VEC4

inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f; }  // NaN -> 0
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

// bit casts
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned i) { return std::bit_cast<float>(i); }
inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
inline double __longlong_as_double(long long i) { return std::bit_cast<double>(i); }

// float -> integer conversions saturate and map NaN to 0 on the GPU (a C++ cast would be UB)
namespace cuemu {
template <class I, class F> inline I saturate_cast(F x) {
  if (x != x) return 0;
  if (x >= (F)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
  if (x <= (F)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
  return (I)x;
}
}  // namespace cuemu
inline int __float2int_rn(float x) { return cuemu::saturate_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return cuemu::saturate_cast<int>(truncf(x)); }
inline int __float2int_rd(float x) { return cuemu::saturate_cast<int>(floorf(x)); }
inline int __float2int_ru(float x) { return cuemu::saturate_cast<int>(ceilf(x)); }
inline unsigned __float2uint_rn(float x) { return cuemu::saturate_cast<unsigned>(nearbyintf(x)); }
inline unsigned __float2uint_rz(float x) { return cuemu::saturate_cast<unsigned>(truncf(x)); }
inline long long __float2ll_rn(float x) { return cuemu::saturate_cast<long long>(nearbyintf(x)); }
inline long long __float2ll_rz(float x) { return cuemu::saturate_cast<long long>(truncf(x)); }
inline float __int2float_rn(int i) { return (float)i; }
inline float __uint2float_rn(unsigned i) { return (float)i; }
inline float __ll2float_rn(long long i) { return (float)i; }

// integer intrinsics
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero((unsigned)x); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i, x >>= 1) r = (r << 1) | (x & 1u);
  return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }

// min/max: CUDA overloads them for every pair of arithmetic types (usual conversions); on floats
// they are fminf/fmaxf, which return the other operand when one is NaN.
template <class A, class B>
  requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>) return std::fmin((T)a, (T)b);
  else return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B>
  requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>) return std::fmax((T)a, (T)b);
  else return (T)a < (T)b ? (T)b : (T)a;
}

// cache-hinted loads and stores are plain memory accesses here
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
