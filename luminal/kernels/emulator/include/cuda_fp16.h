// cuda_fp16.h -- the emulator's stand-in for CUDA's header of that name (this directory is on the
// include path of emulator builds, so generated code includes it unchanged).
//
// __half wraps g++'s _Float16 (IEEE binary16; conversions round to nearest even, like the GPU).
// Arithmetic converts to float, computes, and rounds once: for + - * / that is exactly the
// correctly rounded half result, as on the GPU, because float carries more than 2*11+2 bits.
#pragma once
#ifndef __CUEMU__
#error "cuda_emu.h must be included first (the emulator build does that)"
#endif

struct __half_raw { unsigned short x; };

struct __half {
  _Float16 value;
  __half() = default;
  constexpr __half(__half_raw r) : value(std::bit_cast<_Float16>(r.x)) {}
  __half(float f) : value((_Float16)f) {}
  __half(double d) : value((_Float16)d) {}  // rounds once, like __double2half
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  __half(I i) : value((_Float16)i) {}
  operator float() const { return (float)value; }
  operator __half_raw() const { return {std::bit_cast<unsigned short>(value)}; }
};
typedef __half half;

struct __half2 { __half x, y; };
typedef __half2 half2;

// Operators and h-functions shared by __half and __nv_bfloat16 (cuda_bf16.h expands this too).
#define CUEMU_LOW_PRECISION_OPS(T, T2)                                                               \
  inline T operator+(const T& a, const T& b) { return T(float(a) + float(b)); }                       \
  inline T operator-(const T& a, const T& b) { return T(float(a) - float(b)); }                       \
  inline T operator*(const T& a, const T& b) { return T(float(a) * float(b)); }                       \
  inline T operator/(const T& a, const T& b) { return T(float(a) / float(b)); }                       \
  inline T operator-(const T& a) { return T(-float(a)); }                                             \
  inline T operator+(const T& a) { return a; }                                                        \
  inline T& operator+=(T& a, const T& b) { return a = a + b; }                                        \
  inline T& operator-=(T& a, const T& b) { return a = a - b; }                                        \
  inline T& operator*=(T& a, const T& b) { return a = a * b; }                                        \
  inline T& operator/=(T& a, const T& b) { return a = a / b; }                                        \
  inline bool operator==(const T& a, const T& b) { return float(a) == float(b); }                     \
  inline bool operator!=(const T& a, const T& b) { return float(a) != float(b); }                     \
  inline bool operator<(const T& a, const T& b) { return float(a) < float(b); }                       \
  inline bool operator<=(const T& a, const T& b) { return float(a) <= float(b); }                     \
  inline bool operator>(const T& a, const T& b) { return float(a) > float(b); }                       \
  inline bool operator>=(const T& a, const T& b) { return float(a) >= float(b); }                     \
  inline T __hadd(T a, T b) { return a + b; }                                                         \
  inline T __hsub(T a, T b) { return a - b; }                                                         \
  inline T __hmul(T a, T b) { return a * b; }                                                         \
  inline T __hdiv(T a, T b) { return a / b; }                                                         \
  inline T __hfma(T a, T b, T c) { return T(std::fma((double)float(a), (double)float(b), (double)float(c))); } \
  inline T __hneg(T a) { return -a; }                                                                 \
  inline T __habs(T a) { return T(fabsf(float(a))); }                                                 \
  inline T __hmax(T a, T b) { return T(fmaxf(float(a), float(b))); }                                  \
  inline T __hmin(T a, T b) { return T(fminf(float(a), float(b))); }                                  \
  inline bool __heq(T a, T b) { return a == b; }                                                      \
  inline bool __hne(T a, T b) { return a != b; }                                                      \
  inline bool __hlt(T a, T b) { return a < b; }                                                       \
  inline bool __hle(T a, T b) { return a <= b; }                                                      \
  inline bool __hgt(T a, T b) { return a > b; }                                                       \
  inline bool __hge(T a, T b) { return a >= b; }                                                      \
  inline bool __hisnan(T a) { return std::isnan(float(a)); }                                          \
  inline int __hisinf(T a) { float f = float(a); return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; }       \
  inline T hexp(T a) { return T(expf(float(a))); }                                                    \
  inline T hexp2(T a) { return T(exp2f(float(a))); }                                                 \
  inline T hlog(T a) { return T(logf(float(a))); }                                                    \
  inline T hlog2(T a) { return T(log2f(float(a))); }                                                 \
  inline T hsqrt(T a) { return T(sqrtf(float(a))); }                                                  \
  inline T hrsqrt(T a) { return T(1.0f / sqrtf(float(a))); }                                         \
  inline T hrcp(T a) { return T(1.0f / float(a)); }                                                   \
  inline T hsin(T a) { return T(sinf(float(a))); }                                                    \
  inline T hcos(T a) { return T(cosf(float(a))); }                                                    \
  inline T hfloor(T a) { return T(floorf(float(a))); }                                                \
  inline T hceil(T a) { return T(ceilf(float(a))); }                                                  \
  inline T htrunc(T a) { return T(truncf(float(a))); }                                                \
  inline T2 operator+(const T2& a, const T2& b) { return {a.x + b.x, a.y + b.y}; }                    \
  inline T2 operator-(const T2& a, const T2& b) { return {a.x - b.x, a.y - b.y}; }                    \
  inline T2 operator*(const T2& a, const T2& b) { return {a.x * b.x, a.y * b.y}; }                    \
  inline T2 __hadd2(T2 a, T2 b) { return a + b; }                                                     \
  inline T2 __hsub2(T2 a, T2 b) { return a - b; }                                                     \
  inline T2 __hmul2(T2 a, T2 b) { return a * b; }                                                     \
  inline T2 __hfma2(T2 a, T2 b, T2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }

CUEMU_LOW_PRECISION_OPS(__half, __half2)

inline float __half2float(__half h) { return float(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline __half __int2half_rn(int i) { return __half(i); }
inline int __half2int_rn(__half h) { return __float2int_rn(float(h)); }
inline int __half2int_rz(__half h) { return __float2int_rz(float(h)); }
inline unsigned short __half_as_ushort(__half h) { return __half_raw(h).x; }
inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
inline short __half_as_short(__half h) { return (short)__half_raw(h).x; }
inline __half __short_as_half(short s) { return __half(__half_raw{(unsigned short)s}); }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __half2half2(__half a) { return {a, a}; }
inline __half __low2half(__half2 a) { return a.x; }
inline __half __high2half(__half2 a) { return a.y; }
inline float __low2float(__half2 a) { return float(a.x); }
inline float __high2float(__half2 a) { return float(a.y); }
inline float2 __half22float2(__half2 a) { return {float(a.x), float(a.y)}; }
inline __half2 __float22half2_rn(float2 f) { return {__half(f.x), __half(f.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
