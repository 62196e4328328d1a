// luminal's AVX-512 SGEMM (luminal/kernels/cpu/gemm_avx512.py)
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
#define LUM_PACK_AHEAD 48  /* floats ahead on each row of a transposed B that its packing prefetches */
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
      for (; k + 16 <= kc; k += 16) {
        /* NR rows read side by side are more streams than the hardware prefetcher follows: a weight
           coming from memory stalled every block. Never a fault: a prefetch past the end is dropped. */
        for (int r = 0; r < NR; ++r) __builtin_prefetch(B + (j0 + r) * cs + k + LUM_PACK_AHEAD, 0, 3);
        for (int h = 0; h < 2; ++h) lum_transpose16(B + (j0 + 16 * h) * cs + k, cs, dst + k * NR + 16 * h, NR);
      }
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

#define LUM_ROWS4(X, P) X(0, P) X(1, P) X(2, P) X(3, P)
#define LUM_ROWS8(X, P) LUM_ROWS4(X, P) X(4, P) X(5, P) X(6, P) X(7, P)
#define LUM_ROWS12(X, P) LUM_ROWS8(X, P) X(8, P) X(9, P) X(10, P) X(11, P)

/* C[0:mr, 0:nr] (rows ldc apart) = (accumulate ? C : 0) + a . b over kc: b an NR-column panel, a
   an MR-row panel (LUM_A_PACKED: MR floats per k) or MR rows of A itself (LUM_A_ROWS: rows lda
   apart, k contiguous; rows past mr read row 0, never stored). The sums run in k order from C's
   value, so a product split into K blocks rounds as one unsplit chain of fused multiply-adds.
   Each is made for 4, 8 and 12 rows (ROWS), the fewest that hold mr (`LUM_BY_ROWS`): a block of
   4 rows left over (a 1x1 conv's 16 or 64 output channels) runs a third of the multiply-adds,
   not all 12 rows' (the same bits: every row is its own chain). */
#define LUM_A_PACKED(i) (a[MR * k + i])
#define LUM_A_ROWS(i) (a##i[k])
#define LUM_KERNEL(NAME, ROWS, A_AT, B_AT) \
static void NAME(long long kc, const float* restrict a, long long lda, const float* restrict b, long long ldb, \
                 float* C, long long ldc, int accumulate, long long mr, long long nr) { \
  const __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1); \
  const __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0; \
  ROWS(LUM_ROW_POINTER, ) \
  ROWS(LUM_INIT, ) \
  if (nr <= 16) {  /* a last panel of at most 16 columns: half the multiply-adds */ \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const __m512 b0 = B_AT(0, m0); \
      ROWS(LUM_FMA_HALF, A_AT) \
    } \
  } else { \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const __m512 b0 = B_AT(0, m0), b1 = B_AT(16, m1); \
      ROWS(LUM_FMA, A_AT) \
    } \
  } \
  if (mr == MR && nr == NR) { ROWS(LUM_STORE, ) } \
  else { ROWS(LUM_STORE_M, ) } \
}
#define LUM_ROW_POINTER(i, P) const float* restrict a##i = a + (i < mr ? i : 0) * lda; (void)a##i;
#define LUM_INIT(i, P) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps(); \
  if (accumulate && i < mr) { c##i##0 = _mm512_maskz_loadu_ps(m0, C + i * ldc); c##i##1 = _mm512_maskz_loadu_ps(m1, C + i * ldc + 16); }
#define LUM_FMA(i, A_AT) { const __m512 x = _mm512_set1_ps(A_AT(i)); \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0); c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1); }
#define LUM_FMA_HALF(i, A_AT) { c##i##0 = _mm512_fmadd_ps(_mm512_set1_ps(A_AT(i)), b0, c##i##0); }
#define LUM_STORE(i, P) _mm512_storeu_ps(C + i * ldc, c##i##0); _mm512_storeu_ps(C + i * ldc + 16, c##i##1);
#define LUM_STORE_M(i, P) if (i < mr) { _mm512_mask_storeu_ps(C + i * ldc, m0, c##i##0); _mm512_mask_storeu_ps(C + i * ldc + 16, m1, c##i##1); }
#define LUM_B_PACKED(h, m) _mm512_load_ps(b + NR * k + h)
#define LUM_B_ROWS(h, m) _mm512_maskz_loadu_ps(m, b + ldb * k + h)
#define LUM_BY_ROWS(NAME, A_AT, B_AT) \
  LUM_KERNEL(NAME##4, LUM_ROWS4, A_AT, B_AT) LUM_KERNEL(NAME##8, LUM_ROWS8, A_AT, B_AT) \
  LUM_KERNEL(NAME##12, LUM_ROWS12, A_AT, B_AT) \
static void NAME(long long kc, const float* restrict a, long long lda, const float* restrict b, long long ldb, \
                 float* C, long long ldc, int accumulate, long long mr, long long nr) { \
  (mr <= 4 ? NAME##4 : mr <= 8 ? NAME##8 : NAME##12)(kc, a, lda, b, ldb, C, ldc, accumulate, mr, nr); \
}
LUM_BY_ROWS(lum_kernel_packed, LUM_A_PACKED, LUM_B_PACKED)
LUM_BY_ROWS(lum_kernel_a_rows, LUM_A_ROWS, LUM_B_PACKED)
LUM_BY_ROWS(lum_kernel_b_rows, LUM_A_PACKED, LUM_B_ROWS)

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
  const int b_panels = !a_in_place && !b_in_place && M <= MC;  /* B packed a panel at a time (below) */
  float* Bp = b_in_place ? NULL : lum_alloc(kc_max * (b_panels ? NR : nc_max));
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
  if (b_panels) {
    /* one block of rows: A packed once per K block, then each panel of B packed just before the
       kernels that use it, still in cache (a wide B's whole K block, packed first, is past L2) */
    for (long long pc = 0; pc < K; pc += kc_max) {
      const long long kc = lum_mini(kc_max, K - pc);
      lum_pack_a(M, kc, A + pc * acs, ars, acs, Ap);
      for (long long jr = 0; jr < N; jr += NR) {
        lum_pack_b(kc, lum_mini(NR, N - jr), B + pc * brs + jr * bcs, brs, bcs, Bp);
        for (long long ir = 0; ir < M; ir += MR)
          lum_kernel_packed(kc, Ap + ir * kc, 0, Bp, NR, C + ir * ldc + jr, ldc, pc > 0, lum_mini(MR, M - ir),
                            lum_mini(NR, N - jr));
      }
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

/* A weight packed once for every call (`lum_gemm_fw`, the prelude): op(B) (K x N) as panels of NR
   columns and all K rows, panel p at Bp + p * NR * K, its row k at + k * NR, columns past N zeros */
void lum_gemm512_pack(int transb, long long N, long long K, const float* B, long long ldb, float* Bp) {
  const long long rs = transb == 112 ? 1 : ldb, cs = transb == 112 ? ldb : 1;
  for (long long j0 = 0; j0 < N; j0 += NR) lum_pack_b(K, lum_mini(NR, N - j0), B + j0 * cs, rs, cs, Bp + j0 * K);
}

/* C[M x N] (rows ldc apart) = op(A) . B for B packed by lum_gemm512_pack, from the panel at Bp (N
   columns of it) on the calling thread: the kernels and K blocks of lum_gemm512_sgemm, so each
   element is the same chain of fused multiply-adds in k order, the same bits, without transposing
   a weight streamed from memory into panels every call (README). 0, or -1 when out of memory
   (nothing written). */
int lum_gemm512_sgemm_packed(int transa, long long M, long long N, long long K, const float* A, long long lda,
                             const float* Bp, float* C, long long ldc) {
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0) { for (long long i = 0; i < M; ++i) memset(C + i * ldc, 0, N * sizeof(float)); return 0; }
  const long long ars = transa == 112 ? 1 : lda, acs = transa == 112 ? lda : 1;
  const long long k_blocks = (K + KC - 1) / KC, kc_max = (K + k_blocks - 1) / k_blocks;
  if (transa != 112 && N <= LUM_A_IN_PLACE_COLS) {  /* A's rows read in place, as lum_gemm512_sgemm's */
    for (long long pc = 0; pc < K; pc += kc_max) {
      const long long kc = lum_mini(kc_max, K - pc);
      for (long long ir = 0; ir < M; ir += MR)
        for (long long jr = 0; jr < N; jr += NR)
          lum_kernel_a_rows(kc, A + ir * lda + pc, lda, Bp + jr * K + pc * NR, NR, C + ir * ldc + jr, ldc, pc > 0,
                            lum_mini(MR, M - ir), lum_mini(NR, N - jr));
    }
    return 0;
  }
  const long long mc_max = lum_mini(MC, (M + MR - 1) / MR * MR);
  float* Ap = lum_alloc(kc_max * mc_max);
  if (!Ap) return -1;
  for (long long pc = 0; pc < K; pc += kc_max) {
    const long long kc = lum_mini(kc_max, K - pc);
    for (long long ic = 0; ic < M; ic += MC) {
      const long long mc = lum_mini(MC, M - ic);
      lum_pack_a(mc, kc, A + ic * ars + pc * acs, ars, acs, Ap);
      for (long long jr = 0; jr < N; jr += NR)  /* a panel's K block (kc x NR) in L1 across A's panels */
        for (long long ir = 0; ir < mc; ir += MR)
          lum_kernel_packed(kc, Ap + ir * kc, 0, Bp + jr * K + pc * NR, NR, C + (ic + ir) * ldc + jr, ldc, pc > 0,
                            lum_mini(MR, mc - ir), lum_mini(NR, N - jr));
    }
  }
  free(Ap);
  return 0;
}

/* The packed weights of a runtime's table (`lum_gemm_fw`): freed when the table is dropped */
void lum_gemm512_pack_free(long long* table, long long entries) {
  for (long long i = 0; i < entries; ++i) {
    long long* e = table + 8 * i;
    if (e[6] == 2) free((void*)(e[5]));
    e[0] = e[5] = e[6] = 0;
  }
}
