#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
/* The AVX-512F intrinsics this file uses, as GCC's <avx512fintrin.h> defines them (the same
   builtins, so the same machine code): parsing <immintrin.h> was 0.6 of this library's 0.9 s
   build, once per machine but on a fresh cache's first compile. Any other compiler, or a GCC
   that rejects these, builds the variant that includes <immintrin.h> (`sgemm._build`). */
typedef float lum_v16sf __attribute__((__vector_size__(64)));
typedef float __m512 __attribute__((__vector_size__(64), __may_alias__));
typedef float lum_m512_u __attribute__((__vector_size__(64), __may_alias__, __aligned__(1)));
typedef unsigned short __mmask16;
#define LUM_I static __inline __attribute__((__always_inline__))
LUM_I __m512 lum_undefined(void) { __m512 y = y; return y; }
LUM_I __m512 _mm512_setzero_ps(void) { return __extension__(__m512){0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; }
LUM_I __m512 _mm512_set1_ps(float a) { return __extension__(__m512)(lum_v16sf){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; }
LUM_I __m512 _mm512_load_ps(void const* p) { return *(__m512*)p; }
LUM_I __m512 _mm512_loadu_ps(void const* p) { return *(lum_m512_u*)p; }
LUM_I void _mm512_store_ps(void* p, __m512 a) { *(__m512*)p = a; }
LUM_I void _mm512_storeu_ps(void* p, __m512 a) { *(lum_m512_u*)p = a; }
LUM_I __m512 _mm512_maskz_loadu_ps(__mmask16 u, void const* p) {
  return (__m512)__builtin_ia32_loadups512_mask((const float*)p, (lum_v16sf)_mm512_setzero_ps(), u); }
LUM_I void _mm512_mask_storeu_ps(void* p, __mmask16 u, __m512 a) { __builtin_ia32_storeups512_mask((float*)p, (lum_v16sf)a, u); }
LUM_I __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  return (__m512)__builtin_ia32_vfmaddps512_mask((lum_v16sf)a, (lum_v16sf)b, (lum_v16sf)c, (__mmask16)-1, 4); }
LUM_I __m512 _mm512_unpacklo_ps(__m512 a, __m512 b) {
  return (__m512)__builtin_ia32_unpcklps512_mask((lum_v16sf)a, (lum_v16sf)b, (lum_v16sf)lum_undefined(), (__mmask16)-1); }
LUM_I __m512 _mm512_unpackhi_ps(__m512 a, __m512 b) {
  return (__m512)__builtin_ia32_unpckhps512_mask((lum_v16sf)a, (lum_v16sf)b, (lum_v16sf)lum_undefined(), (__mmask16)-1); }
LUM_I __m512 _mm512_shuffle_ps(__m512 m, __m512 v, const int imm) {
  return (__m512)__builtin_ia32_shufps512_mask((lum_v16sf)m, (lum_v16sf)v, imm, (lum_v16sf)lum_undefined(), (__mmask16)-1); }
LUM_I __m512 _mm512_shuffle_f32x4(__m512 a, __m512 b, const int imm) {
  return (__m512)__builtin_ia32_shuf_f32x4_mask((lum_v16sf)a, (lum_v16sf)b, imm, (lum_v16sf)lum_undefined(), (__mmask16)-1); }
#else
#include <immintrin.h>
#endif
