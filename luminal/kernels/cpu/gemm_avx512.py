"""An AVX-512 SGEMM of luminal's own, in front of the BLAS when the BLAS runs narrower kernels.

OpenBLAS picks its kernels per CPU at load time, unless `OPENBLAS_CORETYPE` pins them: an
environment that sets `OPENBLAS_CORETYPE=Haswell` (this project's VMs do) runs AVX2 GEMMs on an
AVX-512 CPU, and an OpenBLAS too old to know a CPU falls back likewise. onnxruntime's MLAS uses
AVX-512 there, so GEMM-bound models (ResNet50, VGG19, DenseNet121) ran 2.3-2.6x slower than
onnxruntime with the pinned kernels and 1.8-1.9x with OpenBLAS's own choice.

This is the classic BLIS/GotoBLAS structure: op(B) packed into panels of 32 columns (K blocks of
at most 384 rows, 4096 columns at a time), op(A) into panels of 12 rows (192 rows at a time), and
a 12 x 32 micro-kernel holding 24 zmm accumulators, one fused multiply-add per element and k.
With at most 320 columns (ResNet50's last stages: 512 x 49 x 4608, 256 x 196 x 2304) A is read
in place, 12 rows at a time, instead of packed (the copy cost more than it saved); with at most
48 rows (DenseNet's 32-channel growth convs), or 96 rows and 2048 columns (YOLOv8n's 64-channel
convs), B is read in place likewise. A last panel of at most
16 columns runs half the multiply-adds. Each element of C is one chain of fused multiply-adds in k order (a K block
continues from the previous block's value in C), so the result does not depend on how the call
is split into blocks or across threads.

Measured against OpenBLAS 0.3.31 pinned to Haswell, single thread, on a Zen 5 (a ctypes script
timing both on the same operands; `tests/cpu/test_gemm_avx512.py` checks results, not speed):
1.5-2.0x on conv-shaped GEMMs (64 x 3136 x 576: 92 -> 140 GFLOP/s; 384^3: 106 -> 191; 512 x 49 x
4608: 2.87 -> 1.53 ms), 1.1-1.25x on small ones (8 x 256 x 256, 500 x 12 x 500), about par with
OpenBLAS's own AVX-512 kernels. Any alpha != 1, beta != 0 or column-major call goes to the BLAS it stands in
front of (`lum_gemm512_set_fallback`). The prelude (`lum_pick_sgemm`) sends M or N of 1 to gemv,
2-8 columns to its skinny loop, and fewer than 32 rows times a transposed B (a linear layer over
a few tokens: B must be transposed into panels, 0.8-0.9x OpenBLAS) to the BLAS: decided on the
whole call, before any split, so every block of one call runs the same code.

`LUMINAL_GEMM`: "auto" (default: used when the CPU has AVX-512 and OpenBLAS's kernels are not
AVX-512 ones, or in front of torch's MKL on an AMD CPU with AVX-512, where MKL runs its AVX2
code), "blas" (never), "avx512" (whenever the CPU has AVX-512; for comparisons).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

from luminal.kernels.cpu import build

LOG = logging.getLogger("luminal")

# OpenBLAS core names (openblas_get_corename) whose SGEMM kernels use AVX-512
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids", "zen4", "zen5")

A_IN_PLACE_COLS = 320  # at most this many columns of C: A read in place, not packed (conv.py's tiles too)

SOURCE = r"""// luminal's AVX-512 SGEMM (luminal/kernels/cpu/gemm_avx512.py)
#pragma GCC target("avx512f,avx512vl,fma")
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define MR 12
#define NR 32
#define KC 384
#define MC 192
#define NC 4096
#define LUM_A_IN_PLACE_COLS @A_IN_PLACE_COLS@  /* at most this many columns: A read in place, not packed */
#define LUM_B_IN_PLACE_ROWS 48  /* at most this many rows (96 up to 2048 columns): B read in place, not packed */

typedef void (*lum_sgemm_fn)(int, int, int, long long, long long, long long, float, const float*, long long,
                             const float*, long long, float, float*, long long);
static lum_sgemm_fn lum_fallback;
void lum_gemm512_set_fallback(void* f) { lum_fallback = (lum_sgemm_fn)f; }
int lum_gemm512_ok(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
}

static long long lum_mini(long long a, long long b) { return a < b ? a : b; }


/* dst[r * ldd + c] = src[c * lds + r] for a 16 x 16 block */
static inline void lum_transpose16(const float* src, long long lds, float* dst, long long ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) { t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]); t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]); }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44); r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44); r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88); t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88); t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88); r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88); r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

/* op(B)[0:kc, 0:nc] (element (k, j) at B[k * rs + j * cs]) as panels of NR columns, each kc rows of
   NR floats; columns past nc are zeros */
static void lum_pack_b(long long kc, long long nc, const float* B, long long rs, long long cs, float* Bp) {
  for (long long j0 = 0; j0 < nc; j0 += NR) {
    const long long w = lum_mini(NR, nc - j0);
    float* dst = Bp + j0 * kc;
    if (cs == 1 && w == NR) {
      for (long long k = 0; k < kc; ++k) {
        const float* src = B + k * rs + j0;
        _mm512_store_ps(dst + k * NR, _mm512_loadu_ps(src));
        _mm512_store_ps(dst + k * NR + 16, _mm512_loadu_ps(src + 16));
      }
    } else if (cs == 1) {
      const __mmask16 m0 = w >= 16 ? 0xffff : (__mmask16)((1u << w) - 1);
      const __mmask16 m1 = w > 16 ? (__mmask16)((1u << (w - 16)) - 1) : 0;
      for (long long k = 0; k < kc; ++k) {
        const float* src = B + k * rs + j0;
        _mm512_store_ps(dst + k * NR, _mm512_maskz_loadu_ps(m0, src));
        _mm512_store_ps(dst + k * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
      }
    } else if (rs == 1 && w == NR && cs < (1LL << 26)) {  /* op(B) = B^T: columns are B's rows; 16 x 16 blocks transposed in registers */
      long long k = 0;
      for (; k + 16 <= kc; k += 16)
        for (int h = 0; h < 2; ++h) lum_transpose16(B + (j0 + 16 * h) * cs + k, cs, dst + k * NR + 16 * h, NR);
      for (; k < kc; ++k) for (long long j = 0; j < NR; ++j) dst[k * NR + j] = B[(j0 + j) * cs + k];
    } else {
      for (long long j = 0; j < NR; ++j) {
        if (j < w) { const float* src = B + (j0 + j) * cs; for (long long k = 0; k < kc; ++k) dst[k * NR + j] = src[k * rs]; }
        else for (long long k = 0; k < kc; ++k) dst[k * NR + j] = 0.0f;
      }
    }
  }
}

/* op(A)[0:mc, 0:kc] (element (i, k) at A[i * rs + k * cs]) as panels of MR rows, each kc columns
   of MR floats; rows past mc are zeros */
static void lum_pack_a(long long mc, long long kc, const float* A, long long rs, long long cs, float* Ap) {
  for (long long i0 = 0; i0 < mc; i0 += MR) {
    const long long h = lum_mini(MR, mc - i0);
    float* dst = Ap + i0 * kc;
    if (rs == 1 && h == MR) {
      for (long long k = 0; k < kc; ++k) memcpy(dst + k * MR, A + k * cs + i0, MR * sizeof(float));
    } else {
      for (long long i = 0; i < MR; ++i) {
        if (i < h) { const float* src = A + (i0 + i) * rs; for (long long k = 0; k < kc; ++k) dst[k * MR + i] = src[k * cs]; }
        else for (long long k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
      }
    }
  }
}

#define LUM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* C[0:mr, 0:nr] (rows ldc apart) = (accumulate ? C : 0) + a . b over kc: b an NR-column panel, a
   an MR-row panel (LUM_A_PACKED: MR floats per k) or MR rows of A itself (LUM_A_ROWS: rows lda
   apart, k contiguous; rows past mr read row 0, never stored). The sums run in k order from C's
   value, so a product split into K blocks rounds as one unsplit chain of fused multiply-adds. */
#define LUM_A_PACKED(i) (a[MR * k + i])
#define LUM_A_ROWS(i) (a##i[k])
#define LUM_KERNEL(NAME, A_AT, B_AT) \
static void NAME(long long kc, const float* restrict a, long long lda, const float* restrict b, long long ldb, \
                 float* C, long long ldc, int accumulate, long long mr, long long nr) { \
  const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1); \
  const __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0; \
  LUM_ROWS(LUM_ROW_POINTER) \
  LUM_ROWS(LUM_INIT) \
  if (nr <= 16) {  /* a last panel of at most 16 columns: half the multiply-adds */ \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const __m512 b0 = B_AT(0, m0); \
      LUM_ROWS_FMA_HALF(A_AT) \
    } \
  } else { \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const __m512 b0 = B_AT(0, m0), b1 = B_AT(16, m1); \
      LUM_ROWS_FMA(A_AT) \
    } \
  } \
  if (mr == MR && nr == NR) { LUM_ROWS(LUM_STORE) } \
  else { LUM_ROWS(LUM_STORE_M) } \
}
#define LUM_ROW_POINTER(i) const float* restrict a##i = a + (i < mr ? i : 0) * lda; (void)a##i;
#define LUM_INIT(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps(); \
  if (accumulate && i < mr) { c##i##0 = _mm512_maskz_loadu_ps(m0, C + i * ldc); c##i##1 = _mm512_maskz_loadu_ps(m1, C + i * ldc + 16); }
#define LUM_FMA(A_AT, i) { const __m512 x = _mm512_set1_ps(A_AT(i)); \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0); c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1); }
#define LUM_ROWS_FMA(A_AT) LUM_FMA(A_AT, 0) LUM_FMA(A_AT, 1) LUM_FMA(A_AT, 2) LUM_FMA(A_AT, 3) LUM_FMA(A_AT, 4) \
  LUM_FMA(A_AT, 5) LUM_FMA(A_AT, 6) LUM_FMA(A_AT, 7) LUM_FMA(A_AT, 8) LUM_FMA(A_AT, 9) LUM_FMA(A_AT, 10) LUM_FMA(A_AT, 11)
#define LUM_FMA_HALF(A_AT, i) { c##i##0 = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(i)), b0, c##i##0); }
#define LUM_ROWS_FMA_HALF(A_AT) LUM_FMA_HALF(A_AT, 0) LUM_FMA_HALF(A_AT, 1) LUM_FMA_HALF(A_AT, 2) LUM_FMA_HALF(A_AT, 3) \
  LUM_FMA_HALF(A_AT, 4) LUM_FMA_HALF(A_AT, 5) LUM_FMA_HALF(A_AT, 6) LUM_FMA_HALF(A_AT, 7) LUM_FMA_HALF(A_AT, 8) \
  LUM_FMA_HALF(A_AT, 9) LUM_FMA_HALF(A_AT, 10) LUM_FMA_HALF(A_AT, 11)
#define LUM_STORE(i) _mm512_storeu_ps(C + i * ldc, c##i##0); _mm512_storeu_ps(C + i * ldc + 16, c##i##1);
#define LUM_STORE_M(i) if (i < mr) { _mm512_mask_storeu_ps(C + i * ldc, m0, c##i##0); _mm512_mask_storeu_ps(C + i * ldc + 16, m1, c##i##1); }
#define LUM_B_PACKED(h, m) _mm512_load_ps(b + NR * k + h)
#define LUM_B_ROWS(h, m) _mm512_maskz_loadu_ps(m, b + ldb * k + h)
LUM_KERNEL(lum_kernel_packed, LUM_A_PACKED, LUM_B_PACKED)
LUM_KERNEL(lum_kernel_a_rows, LUM_A_ROWS, LUM_B_PACKED)
LUM_KERNEL(lum_kernel_b_rows, LUM_A_PACKED, LUM_B_ROWS)

static float* lum_alloc(long long n) {
  return (float*)aligned_alloc(64, (size_t)((n * sizeof(float) + 63) / 64 * 64));
}

/* cblas_sgemm (ILP64), row-major, alpha 1 and beta 0: C = op(A) op(B) on the calling thread (the
   prelude splits a large GEMM across the team); anything else goes to the BLAS it stands in front of */
void lum_gemm512_sgemm(int layout, int transa, int transb, long long M, long long N, long long K, float alpha,
                       const float* A, long long lda, const float* B, long long ldb, float beta, float* C, long long ldc) {
  if (layout != 101 || alpha != 1.0f || beta != 0.0f) {
    lum_fallback(layout, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { for (long long i = 0; i < M; ++i) memset(C + i * ldc, 0, N * sizeof(float)); return; }
  const long long ars = transa == 112 ? 1 : lda, acs = transa == 112 ? lda : 1;
  const long long brs = transb == 112 ? 1 : ldb, bcs = transb == 112 ? ldb : 1;
  const long long k_blocks = (K + KC - 1) / KC, kc_max = (K + k_blocks - 1) / k_blocks;  /* even K blocks */
  const long long nc_max = lum_mini(NC, (N + NR - 1) / NR * NR), mc_max = lum_mini(MC, (M + MR - 1) / MR * MR);
  const int a_in_place = transa != 112 && N <= LUM_A_IN_PLACE_COLS;
  const int b_in_place = !a_in_place && transb != 112
                         && (M <= LUM_B_IN_PLACE_ROWS || (M <= 2 * LUM_B_IN_PLACE_ROWS && N <= 2048));
  float* Bp = b_in_place ? NULL : lum_alloc(kc_max * nc_max);
  float* Ap = a_in_place ? NULL : lum_alloc(kc_max * mc_max);
  if ((!b_in_place && !Bp) || (!a_in_place && !Ap)) {  /* out of memory: the BLAS */
    free(Bp); free(Ap);
    lum_fallback(layout, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (a_in_place) {
    /* up to 320 columns: A's rows are read in place, 12 at a time, across every panel of B (all
       of B's K block stays in L2) instead of packed: the copy of A (9.4 MB a call for ResNet50's
       512 x 4608 weight, 49 columns) cost more than it saved (1000 x 169 x 512: 1.08 -> 0.93 ms;
       256 x 196 x 2304: 1.89 -> 1.26 ms, thread CPU time) */
    for (long long pc = 0; pc < K; pc += kc_max) {
      const long long kc = lum_mini(kc_max, K - pc);
      lum_pack_b(kc, N, B + pc * brs, brs, bcs, Bp);
      for (long long ir = 0; ir < M; ir += MR)
        for (long long jr = 0; jr < N; jr += NR)
          lum_kernel_a_rows(kc, A + ir * lda + pc, lda, Bp + jr * kc, NR, C + ir * ldc + jr, ldc, pc > 0,
                          lum_mini(MR, M - ir), lum_mini(NR, N - jr));
    }
    free(Bp); free(Ap);
    return;
  }
  if (b_in_place) {
    /* a few rows: B's elements are used at most that many times each, so B is read in place (its
       rows, 32 columns at a time, stay in cache across the few panels of A) instead of packed
       (thread CPU time: 32 x 256 x 1152 0.16 -> 0.13 ms; 64 x 448 x 576 0.24 -> 0.20 ms, 64 x
       2048 x 576 1.04 -> 0.86 ms; with 3000-odd columns 64 rows gained nothing either way) */
    for (long long pc = 0; pc < K; pc += kc_max) {
      const long long kc = lum_mini(kc_max, K - pc);
      lum_pack_a(M, kc, A + pc * acs, ars, acs, Ap);
      for (long long jr = 0; jr < N; jr += NR)
        for (long long ir = 0; ir < M; ir += MR)
          lum_kernel_b_rows(kc, Ap + ir * kc, 0, B + pc * ldb + jr, ldb, C + ir * ldc + jr, ldc, pc > 0,
                            lum_mini(MR, M - ir), lum_mini(NR, N - jr));
    }
    free(Bp); free(Ap);
    return;
  }
  for (long long jc = 0; jc < N; jc += NC) {
    const long long nc = lum_mini(NC, N - jc);
    for (long long pc = 0; pc < K; pc += kc_max) {
      const long long kc = lum_mini(kc_max, K - pc);
      lum_pack_b(kc, nc, B + pc * brs + jc * bcs, brs, bcs, Bp);
      for (long long ic = 0; ic < M; ic += MC) {
        const long long mc = lum_mini(MC, M - ic);
        lum_pack_a(mc, kc, A + ic * ars + pc * acs, ars, acs, Ap);
        for (long long jr = 0; jr < nc; jr += NR)
          for (long long ir = 0; ir < mc; ir += MR)
            lum_kernel_packed(kc, Ap + ir * kc, 0, Bp + jr * kc, NR, C + (ic + ir) * ldc + jc + jr, ldc, pc > 0,
                       lum_mini(MR, mc - ir), lum_mini(NR, nc - jr));
      }
    }
  }
  free(Bp); free(Ap);
}
""".replace("@A_IN_PLACE_COLS@", str(A_IN_PLACE_COLS))

# The same library without <immintrin.h> (built first; `SOURCE` when a compiler rejects it)
INTRINSICS = r"""#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
/* The AVX-512F intrinsics this file uses, as GCC's <avx512fintrin.h> defines them (the same
   builtins, so the same machine code): parsing <immintrin.h> was 0.6 of this library's 0.9 s
   build, once per machine but on a fresh cache's first compile. Any other compiler, or a GCC
   that rejects these, builds the variant that includes <immintrin.h> (`gemm_avx512._build`). */
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
"""
SOURCE_LIGHT = SOURCE.replace("#include <immintrin.h>\n", INTRINSICS, 1)


def _build():
    """The library's path: the light source, else (a compiler it does not suit) the full one."""
    try:
        return build.build(SOURCE_LIGHT)
    except build.CpuBuildError as exc:
        LOG.debug("luminal's AVX-512 SGEMM without <immintrin.h> did not build (%s); building with it",
                  str(exc).splitlines()[0])
        return build.build(SOURCE)


_loaded: dict[int, int | None] = {}  # fallback address -> our sgemm's address (None: not usable)
_lock = threading.Lock()


def cpu_has_avx512() -> bool:
    return {"avx512f", "fma"} <= build.cpu_info()[0]


def _mode() -> str:
    mode = os.environ.get("LUMINAL_GEMM", "auto").strip().lower() or "auto"
    if mode not in ("auto", "blas", "avx512"):
        LOG.warning("LUMINAL_GEMM=%r is not 'auto', 'blas' or 'avx512'; using 'auto'", mode)
        mode = "auto"
    return mode


def wanted(blas_core: str | None) -> bool:
    """Whether to put our SGEMM in front of a BLAS whose kernels are `blas_core` (OpenBLAS's core
    name; None when unknown)."""
    mode = _mode()
    if mode == "blas" or not cpu_has_avx512():
        return False
    return mode == "avx512" or (blas_core or "").strip().lower() not in AVX512_CORES


def wanted_over_mkl() -> bool:
    """Whether to put our SGEMM in front of the MKL inside torch: on an AMD CPU with AVX-512 MKL
    runs its AVX2 code ("auto"), or whenever the CPU has AVX-512 ("avx512")."""
    mode = _mode()
    if mode == "blas" or not cpu_has_avx512():
        return False
    return mode == "avx512" or _vendor() == "AuthenticAMD"


def _vendor() -> str:
    return build.cpu_info()[1]


_prepared = threading.Event()


def prepare(spare: bool | None = None) -> None:
    """Start building the library in the background (once per process; a no-op when it is in the
    cache): called as a compile begins (`program.prepare`), so that the compiler runs while Python
    lowers and optimizes the graph, not when the runtime first binds its BLAS. Only with a core
    to spare, as the GEMM object's build (`spare`: what the caller found, else looked at here)."""
    if _prepared.is_set() or not cpu_has_avx512() or _mode() == "blas" or build.compiler() is None:
        return
    _prepared.set()
    if not (build.spare_core() if spare is None else spare):
        return

    def run():
        for t in threading.enumerate():  # after the GEMM object's build (build.prepare_object), not beside it:
            if t.name == "luminal-cc" and t is not threading.current_thread():  # one core stays Python's
                t.join()
        try:
            with build.in_background():
                _build()
        except Exception:  # noqa: BLE001 - `sgemm` builds again and logs why, and the BLAS serves
            pass

    threading.Thread(target=run, name="luminal-cc-gemm512", daemon=True).start()


def sgemm(fallback: int) -> int | None:
    """The address of our SGEMM (cblas_sgemm's ILP64 signature), calling `fallback` (a cblas_sgemm
    address) for what it does not take; None when it cannot be built or the CPU lacks AVX-512
    (then the BLAS serves every call, as before)."""
    with _lock:
        if fallback not in _loaded:
            if _loaded:  # one library, one fallback: a second BLAS (never so far) keeps its own sgemm
                return None
            _loaded[fallback] = _load(fallback)
        return _loaded[fallback]


def _load(fallback: int) -> int | None:
    address = None
    try:
        lib = ctypes.CDLL(str(_build()))
        if lib.lum_gemm512_ok():
            lib.lum_gemm512_set_fallback(ctypes.c_void_p(fallback))
            address = ctypes.cast(lib.lum_gemm512_sgemm, ctypes.c_void_p).value
    except (build.CpuBuildError, OSError) as exc:  # a compiler without AVX-512 support: the BLAS, correct as ever
        LOG.debug("luminal's AVX-512 SGEMM is not available: %s", exc)
    return address
