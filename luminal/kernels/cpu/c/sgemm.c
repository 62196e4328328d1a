// luminal's SGEMM (luminal/kernels/cpu/sgemm.py): one source, built for AVX-512 (12 x 32
// micro-kernel) or, with LUM_SIMD_AVX2 defined, for AVX2 and FMA (6 x 16, as BLIS's Haswell
// kernel: 12 accumulators, a panel row of B in 2 vectors and a broadcast: 15 of 16 registers).
// The vector operations below are the only difference; every element is the same chain of fused
// multiply-adds in k order, so the two builds give the same bits.
#ifdef LUM_SIMD_AVX2
#pragma GCC target("avx2,fma")
#else
#pragma GCC target("avx512f,avx512vl,fma")
#endif
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#ifdef LUM_SIMD_AVX2
#define LUM_VW 8  /* floats a vector */
#define MR 6
typedef __m256 lum_vf;
typedef __m256i lum_vm;  /* a lane is loaded and stored where its mask is all ones */
static inline lum_vm lum_mask(long long n) {  /* the first n lanes (none for n <= 0) */
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 0 ? 0 : n > LUM_VW ? LUM_VW : n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define lum_vzero() _mm256_setzero_ps()
#define lum_vset1(x) _mm256_set1_ps(x)
#define lum_vload(p) _mm256_load_ps(p)
#define lum_vloadu(p) _mm256_loadu_ps(p)
#define lum_vstore(p, v) _mm256_store_ps(p, v)
#define lum_vstoreu(p, v) _mm256_storeu_ps(p, v)
#define lum_vloadu_m(m, p) _mm256_maskload_ps(p, m)  /* masked-off lanes read as 0, never touched */
#define lum_vstoreu_m(p, m, v) _mm256_maskstore_ps(p, m, v)
#define lum_vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define lum_simd_ok() (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
/* dst[r * ldd + c] = src[c * lds + r] for an 8 x 8 block */
static inline void lum_transpose_block(const float* src, long long lds, float* dst, long long ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) { t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]); t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]); }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44); r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44); r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20); t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ldd, t[i]);
}
#else
#define LUM_VW 16
#define MR 12
typedef __m512 lum_vf;
typedef __mmask16 lum_vm;
static inline lum_vm lum_mask(long long n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
#define lum_vzero() _mm512_setzero_ps()
#define lum_vset1(x) _mm512_set1_ps(x)
#define lum_vload(p) _mm512_load_ps(p)
#define lum_vloadu(p) _mm512_loadu_ps(p)
#define lum_vstore(p, v) _mm512_store_ps(p, v)
#define lum_vstoreu(p, v) _mm512_storeu_ps(p, v)
#define lum_vloadu_m(m, p) _mm512_maskz_loadu_ps(m, p)
#define lum_vstoreu_m(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define lum_vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define lum_simd_ok() (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
/* dst[r * ldd + c] = src[c * lds + r] for a 16 x 16 block */
static inline void lum_transpose_block(const float* src, long long lds, float* dst, long long ldd) {
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
#endif
#define NR (2 * LUM_VW)  /* a panel of B: two vectors */
#define KC 384
#define MC 192
#define NC 4096
#define LUM_A_IN_PLACE_COLS @A_IN_PLACE_COLS@  /* at most this many columns: A read in place, not packed */
#define LUM_PACK_AHEAD 48  /* floats ahead on each row of a transposed B that its packing prefetches */
#define LUM_B_IN_PLACE_ROWS 48  /* at most this many rows (96 up to 2048 columns): B read in place, not packed */
#define LUM_B_AHEAD 256  /* floats ahead on each row of B read in place that the panel loop prefetches */

typedef void (*lum_sgemm_fn)(int, int, int, long long, long long, long long, float, const float*, long long,
                             const float*, long long, float, float*, long long);
static lum_sgemm_fn lum_fallback;
void lum_own_sgemm_set_fallback(void* f) { lum_fallback = (lum_sgemm_fn)f; }
int lum_own_sgemm_ok(void) {
  __builtin_cpu_init();
  return lum_simd_ok();
}

static long long lum_mini(long long a, long long b) { return a < b ? a : b; }


/* op(B)[0:kc, 0:nc] (element (k, j) at B[k * rs + j * cs]) as panels of NR columns, each kc rows of
   NR floats; columns past nc are zeros */
static void lum_pack_b(long long kc, long long nc, const float* B, long long rs, long long cs, float* Bp) {
  for (long long j0 = 0; j0 < nc; j0 += NR) {
    const long long w = lum_mini(NR, nc - j0);
    float* dst = Bp + j0 * kc;
    if (cs == 1 && w == NR) {
      for (long long k = 0; k < kc; ++k) {
        const float* src = B + k * rs + j0;
        lum_vstore(dst + k * NR, lum_vloadu(src));
        lum_vstore(dst + k * NR + LUM_VW, lum_vloadu(src + LUM_VW));
      }
    } else if (cs == 1) {
      const lum_vm m0 = lum_mask(w), m1 = lum_mask(w - LUM_VW);
      for (long long k = 0; k < kc; ++k) {
        const float* src = B + k * rs + j0;
        lum_vstore(dst + k * NR, lum_vloadu_m(m0, src));
        lum_vstore(dst + k * NR + LUM_VW, lum_vloadu_m(m1, src + LUM_VW));
      }
    } else if (rs == 1 && w == NR && cs < (1LL << 26)) {  /* op(B) = B^T: columns are B's rows; square blocks transposed in registers */
      long long k = 0;
      for (; k + LUM_VW <= kc; k += LUM_VW) {
        /* NR rows read side by side are more streams than the hardware prefetcher follows: a weight
           coming from memory stalled every block. Never a fault: a prefetch past the end is dropped. */
        for (int r = 0; r < NR; ++r) __builtin_prefetch(B + (j0 + r) * cs + k + LUM_PACK_AHEAD, 0, 3);
        for (int h = 0; h < 2; ++h) lum_transpose_block(B + (j0 + LUM_VW * h) * cs + k, cs, dst + k * NR + LUM_VW * h, NR);
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

/* a third, two thirds and all of MR's rows (4, 8, 12; AVX2: 2, 4, 6) */
#ifdef LUM_SIMD_AVX2
#define LUM_ROWS_S(X, P) X(0, P) X(1, P)
#define LUM_ROWS_M(X, P) LUM_ROWS_S(X, P) X(2, P) X(3, P)
#define LUM_ROWS_L(X, P) LUM_ROWS_M(X, P) X(4, P) X(5, P)
#else
#define LUM_ROWS_S(X, P) X(0, P) X(1, P) X(2, P) X(3, P)
#define LUM_ROWS_M(X, P) LUM_ROWS_S(X, P) X(4, P) X(5, P) X(6, P) X(7, P)
#define LUM_ROWS_L(X, P) LUM_ROWS_M(X, P) X(8, P) X(9, P) X(10, P) X(11, P)
#endif

/* C[0:mr, 0:nr] (rows ldc apart) = (accumulate ? C : 0) + a . b over kc: b an NR-column panel, a
   an MR-row panel (LUM_A_PACKED: MR floats per k) or MR rows of A itself (LUM_A_ROWS: rows lda
   apart, k contiguous; rows past mr read row 0, never stored). The sums run in k order from C's
   value, so a product split into K blocks rounds as one unsplit chain of fused multiply-adds.
   Each is made for a third, two thirds and all of MR's rows (ROWS), the fewest that hold mr
   (`LUM_BY_ROWS`): 4 rows left over by 12-row blocks (a 1x1 conv's 16 or 64 output channels) run
   a third of the multiply-adds, not all 12 rows' (the same bits: every row is its own chain). */
#define LUM_A_PACKED(i) (a[MR * k + i])
#define LUM_A_ROWS(i) (a##i[k])
#define LUM_KERNEL(NAME, ROWS, A_AT, B_AT) \
static void NAME(long long kc, const float* restrict a, long long lda, const float* restrict b, long long ldb, \
                 float* C, long long ldc, int accumulate, long long mr, long long nr) { \
  const lum_vm m0 = lum_mask(nr), m1 = lum_mask(nr - LUM_VW); \
  ROWS(LUM_ROW_POINTER, ) \
  ROWS(LUM_INIT, ) \
  if (nr <= LUM_VW) {  /* a last panel of at most one vector's columns: half the multiply-adds */ \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const lum_vf b0 = B_AT(0, m0); \
      ROWS(LUM_FMA_HALF, A_AT) \
    } \
  } else if (nr == NR) {  /* a whole panel: plain loads (AVX2 holds its masks in ymm registers, \
                            one more than 6 x 16's 15, so a masked B_AT reloaded one from the stack \
                            every k) */ \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const lum_vf b0 = B_AT(0, LUM_WHOLE), b1 = B_AT(LUM_VW, LUM_WHOLE); \
      ROWS(LUM_FMA, A_AT) \
    } \
  } else { \
    _Pragma("GCC unroll 4") \
    for (long long k = 0; k < kc; ++k) { \
      const lum_vf b0 = B_AT(0, m0), b1 = B_AT(LUM_VW, m1); \
      ROWS(LUM_FMA, A_AT) \
    } \
  } \
  if (mr == MR && nr == NR) { ROWS(LUM_STORE, ) } \
  else { ROWS(LUM_STORE_M, ) } \
}
#define LUM_ROW_POINTER(i, P) const float* restrict a##i = a + (i < mr ? i : 0) * lda; (void)a##i;
#define LUM_INIT(i, P) lum_vf c##i##0 = lum_vzero(), c##i##1 = lum_vzero(); \
  if (accumulate && i < mr) { c##i##0 = lum_vloadu_m(m0, C + i * ldc); c##i##1 = lum_vloadu_m(m1, C + i * ldc + LUM_VW); }
#define LUM_FMA(i, A_AT) { const lum_vf x = lum_vset1(A_AT(i)); \
    c##i##0 = lum_vfma(x, b0, c##i##0); c##i##1 = lum_vfma(x, b1, c##i##1); }
#define LUM_FMA_HALF(i, A_AT) { c##i##0 = lum_vfma(lum_vset1(A_AT(i)), b0, c##i##0); }
#define LUM_STORE(i, P) lum_vstoreu(C + i * ldc, c##i##0); lum_vstoreu(C + i * ldc + LUM_VW, c##i##1);
#define LUM_STORE_M(i, P) if (i < mr) { lum_vstoreu_m(C + i * ldc, m0, c##i##0); lum_vstoreu_m(C + i * ldc + LUM_VW, m1, c##i##1); }
#define LUM_B_PACKED(h, m) lum_vload(b + NR * k + h)
#define LUM_B_ROWS(h, m) LUM_B_ROWS_##m(h)
#define LUM_B_ROWS_LUM_WHOLE(h) lum_vloadu(b + ldb * k + h)  /* every lane: no mask */
#define LUM_B_ROWS_m0(h) lum_vloadu_m(m0, b + ldb * k + h)
#define LUM_B_ROWS_m1(h) lum_vloadu_m(m1, b + ldb * k + h)
#define LUM_BY_ROWS(NAME, A_AT, B_AT) \
  LUM_KERNEL(NAME##_s, LUM_ROWS_S, A_AT, B_AT) LUM_KERNEL(NAME##_m, LUM_ROWS_M, A_AT, B_AT) \
  LUM_KERNEL(NAME##_l, LUM_ROWS_L, A_AT, B_AT) \
static void NAME(long long kc, const float* restrict a, long long lda, const float* restrict b, long long ldb, \
                 float* C, long long ldc, int accumulate, long long mr, long long nr) { \
  (mr <= MR / 3 ? NAME##_s : mr <= 2 * MR / 3 ? NAME##_m : NAME##_l)(kc, a, lda, b, ldb, C, ldc, accumulate, mr, nr); \
}
LUM_BY_ROWS(lum_kernel_packed, LUM_A_PACKED, LUM_B_PACKED)
LUM_BY_ROWS(lum_kernel_a_rows, LUM_A_ROWS, LUM_B_PACKED)
LUM_BY_ROWS(lum_kernel_b_rows, LUM_A_PACKED, LUM_B_ROWS)

static float* lum_alloc(long long n) {
  return (float*)aligned_alloc(64, (size_t)((n * sizeof(float) + 63) / 64 * 64));
}

/* Whether kc rows of B read in place, ld floats apart, stay in L1 across the panels of A that use
   them (64 sets of 64-byte lines, 8 ways or more, as x86 cores since Sandy Bridge and Zen; a
   panel row is one line or two adjacent ones). A row stride of 2^s lines puts every row in
   64 / 2^s sets (at 2048 floats one set: each panel came back from L3 for every panel of A,
   README "B read in place"). Half the ways: room for A. */
static int lum_rows_fit_l1(long long kc, long long ld) {
  long long sets = 64;
  if (ld % 16 == 0)
    for (long long lines = ld / 16; sets > 1 && lines % 2 == 0; lines /= 2) sets /= 2;
  return kc <= sets * 8 / 2;
}

/* cblas_sgemm (ILP64), row-major, alpha 1, beta 0 or 1: C = op(A) op(B), or C += op(A) op(B) (each
   element's chain of multiply-adds starts from its value in C: attention's P V into its
   accumulator, `render/attention_gemm.py`), on the calling thread (the prelude splits a large GEMM
   across the team); anything else goes to the BLAS it stands in front of */
void lum_own_sgemm(int layout, int transa, int transb, long long M, long long N, long long K, float alpha,
                   const float* A, long long lda, const float* B, long long ldb, float beta, float* C, long long ldc) {
  if (layout != 101 || alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) {
    lum_fallback(layout, transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M <= 0 || N <= 0) return;
  const int onto_c = beta == 1.0f;  /* the first K block accumulates onto C */
  if (K <= 0) { if (!onto_c) for (long long i = 0; i < M; ++i) memset(C + i * ldc, 0, N * sizeof(float)); return; }
  const long long ars = transa == 112 ? 1 : lda, acs = transa == 112 ? lda : 1;
  const long long brs = transb == 112 ? 1 : ldb, bcs = transb == 112 ? ldb : 1;
  const long long k_blocks = (K + KC - 1) / KC, kc_max = (K + k_blocks - 1) / k_blocks;  /* even K blocks */
  const long long nc_max = lum_mini(NC, (N + NR - 1) / NR * NR), mc_max = lum_mini(MC, (M + MR - 1) / MR * MR);
  const int a_in_place = transa != 112 && N <= LUM_A_IN_PLACE_COLS;
  const int b_in_place = !a_in_place && transb != 112 && lum_rows_fit_l1(kc_max, ldb)
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
          lum_kernel_a_rows(kc, A + ir * lda + pc, lda, Bp + jr * kc, NR, C + ir * ldc + jr, ldc, pc > 0 || onto_c,
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
      for (long long jr = 0; jr < N; jr += NR) {
        /* kc rows read side by side, a panel at a time: more streams than the hardware
           prefetcher follows, so B coming from memory (a 1x1 conv's input at 112 x 112, written
           by the layer before and evicted) stalled on every panel's lines; C's M rows too, for
           writing (each line is read before it is written). A panel's second line only where a
           panel is two (AVX-512's 32 floats): AVX2's next panel starts at it, so it was asked twice */
        if (jr + LUM_B_AHEAD < N) {
          for (long long k = 0; k < kc; ++k) {
            const float* ahead = B + (pc + k) * ldb + jr + LUM_B_AHEAD;
            __builtin_prefetch(ahead, 0, 2);
            if (NR > 16) __builtin_prefetch(ahead + 16, 0, 2);
          }
          for (long long i = 0; i < M; ++i) {
            float* ahead = C + i * ldc + jr + LUM_B_AHEAD;
            __builtin_prefetch(ahead, 1, 2);
            if (NR > 16) __builtin_prefetch(ahead + 16, 1, 2);
          }
        }
        for (long long ir = 0; ir < M; ir += MR)
          lum_kernel_b_rows(kc, Ap + ir * kc, 0, B + pc * ldb + jr, ldb, C + ir * ldc + jr, ldc, pc > 0 || onto_c,
                            lum_mini(MR, M - ir), lum_mini(NR, N - jr));
      }
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
          lum_kernel_packed(kc, Ap + ir * kc, 0, Bp, NR, C + ir * ldc + jr, ldc, pc > 0 || onto_c, lum_mini(MR, M - ir),
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
            lum_kernel_packed(kc, Ap + ir * kc, 0, Bp + jr * kc, NR, C + (ic + ir) * ldc + jc + jr, ldc, pc > 0 || onto_c,
                       lum_mini(MR, mc - ir), lum_mini(NR, nc - jr));
      }
    }
  }
  free(Bp); free(Ap);
}

/* A weight packed once for every call (`lum_gemm_fw`, the prelude): op(B) (K x N) as panels of NR
   columns and all K rows, panel p at Bp + p * NR * K, its row k at + k * NR, columns past N zeros */
void lum_own_sgemm_pack(int transb, long long N, long long K, const float* B, long long ldb, float* Bp) {
  const long long rs = transb == 112 ? 1 : ldb, cs = transb == 112 ? ldb : 1;
  for (long long j0 = 0; j0 < N; j0 += NR) lum_pack_b(K, lum_mini(NR, N - j0), B + j0 * cs, rs, cs, Bp + j0 * K);
}

/* C[M x N] (rows ldc apart) = op(A) . B for B packed by lum_own_sgemm_pack, from the panel at Bp (N
   columns of it) on the calling thread: the kernels and K blocks of lum_own_sgemm, so each
   element is the same chain of fused multiply-adds in k order, the same bits, without transposing
   a weight streamed from memory into panels every call (README). 0, or -1 when out of memory
   (nothing written). */
int lum_own_sgemm_packed(int transa, long long M, long long N, long long K, const float* A, long long lda,
                             const float* Bp, float* C, long long ldc) {
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0) { for (long long i = 0; i < M; ++i) memset(C + i * ldc, 0, N * sizeof(float)); return 0; }
  const long long ars = transa == 112 ? 1 : lda, acs = transa == 112 ? lda : 1;
  const long long k_blocks = (K + KC - 1) / KC, kc_max = (K + k_blocks - 1) / k_blocks;
  if (transa != 112 && N <= LUM_A_IN_PLACE_COLS) {  /* A's rows read in place, as lum_own_sgemm's */
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
void lum_own_sgemm_pack_free(long long* table, long long entries) {
  for (long long i = 0; i < entries; ++i) {
    long long* e = table + 8 * i;
    if (e[6] == 2) free((void*)(e[5]));
    e[0] = e[5] = e[6] = 0;
  }
}
