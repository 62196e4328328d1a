/* luminal's direct convolution micro-kernel (luminal/kernels/cpu/conv_direct.py): GCC/Clang vector
   types, no intrinsics, so the compiler maps it to the target's registers: 8-float vectors (AVX2's
   16 registers), 16-float ones where the library is built for AVX-512 (32 registers). */
#ifndef LUM_DIRECT_CONV_H
#define LUM_DIRECT_CONV_H
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("fma")
#pragma GCC optimize("fp-contract=fast")  /* c += a * b is one FMA: a chain per output, as a GEMM's */
#endif
typedef float lum_dc_v __attribute__((vector_size(32), aligned(4)));  /* 8 floats, any alignment */
#if defined(__AVX512F__)
#define LUM_DC_W 16  /* floats per vector of the convolution's micro-tiles (steps.dc_kernels: the same) */
#else
#define LUM_DC_W 8
#endif
typedef float lum_dcw_v __attribute__((vector_size(4 * LUM_DC_W), aligned(4)));
typedef int lum_dc_vi __attribute__((vector_size(32), aligned(4)));  /* lane masks */

/* C[0:M, 0:ne] (rows ldc apart; ne a multiple of LUM_DC_W NV) = A[0:M, 0:K] (rows lda apart) times B,
   B[k, e] = src[off[k] + e]: the rows of B are runs of the phase planes, read in place. Every
   element of C is one chain of multiply-adds in k order from 0, so its bits depend neither on the
   tiling nor on the team. Micro-tiles of MR rows x NV vectors of LUM_DC_W positions, MR x NV
   accumulators (12 of 8 floats: with the NV loads of B and a broadcast, within AVX2's 16
   registers; 24 of 16 floats within AVX-512's 32); GCC keeps the fully unrolled arrays in
   registers (MR row pointers spill a few GPRs, which cost less than copying the rows into one
   interleaved run per block of depth). Rows past M repeat row 0: read, never stored.
   The depth runs in blocks of LUM_DCONV_KC: a block of B (KC x ne) stays in L2 while every row
   of A passes over it, and a micro-tile's rows of A (MR x KC) in L1 while it passes over the
   positions; a block resumes the chain from C as the last one stored it (the same bits: a float
   stored and loaded is the float the register held). */
#define LUM_DCONV_KC 256
#define LUM_DCONV(NAME, MR, NV) \
static void NAME(long long M, long long K, const float* restrict A, long long lda, const float* restrict src, \
                 const long long* restrict off, float* restrict C, long long ldc, long long ne) { \
  for (long long k0 = 0; k0 < K; k0 += LUM_DCONV_KC) { \
    const long long k1 = K - k0 < LUM_DCONV_KC ? K : k0 + LUM_DCONV_KC; \
    for (long long i0 = 0; i0 < M; i0 += MR) { \
      const float* restrict a[MR]; \
      _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) a[i] = A + (i0 + i < M ? i0 + i : 0) * lda; \
      for (long long e = 0; e < ne; e += LUM_DC_W * NV) { \
        const float* restrict b = src + e; \
        lum_dcw_v c[MR][NV]; \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) \
          c[i][j] = k0 && i0 + i < M ? *(const lum_dcw_v*)(C + (i0 + i) * ldc + e + LUM_DC_W * j) : (lum_dcw_v){0}; \
        _Pragma("GCC unroll 2") \
        for (long long k = k0; k < k1; ++k) { \
          const float* restrict bk = b + off[k]; \
          lum_dcw_v bv[NV]; \
          _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) bv[j] = *(const lum_dcw_v*)(bk + LUM_DC_W * j); \
          _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) { \
            const float x = a[i][k]; \
            _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) c[i][j] += x * bv[j]; \
          } \
        } \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR; ++i) if (i0 + i < M) \
          _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) *(lum_dcw_v*)(C + (i0 + i) * ldc + e + LUM_DC_W * j) = c[i][j]; \
      } \
    } \
  } \
}
#if LUM_DC_W == 16
LUM_DCONV(lum_dconv_12x32, 12, 2)  /* the fewest wasted positions on small images (steps.DirectConv.nr) */
LUM_DCONV(lum_dconv_8x48, 8, 3)  /* no wasted rows for 8k output channels, one load fewer per 24 FMAs */
#else
LUM_DCONV(lum_dconv_6x16, 6, 2)  /* the fewest wasted positions on small images (steps.DirectConv.nr) */
LUM_DCONV(lum_dconv_4x24, 4, 3)  /* no wasted rows for 4k output channels, one load fewer per 12 FMAs */
#endif
/* A weight gradient's GEMM, C[0:M, j_lo:j_hi] (+)= A[0:M, k] B[k, j] over the rows of positions
   r0 <= r < r1, k = r * OW + ow (A's rows lda apart, k contiguous), B[k, j] =
   planes[rowoff[r] + coloff[j] + ow]: per weight, a dot product over contiguous runs of A and of
   the planes. Tiles of 4 rows x 3 columns, 12 accumulators of 8 lanes over ow; a row's last
   partial vector goes through zero-filled copies (never reading past A, never 0 x inf). The lanes
   are summed in a fixed order and added to C (`accumulate`: C += the block's sums, else C = them),
   so each element is the same sum whatever the team. */
#define LUM_DWGRAD(NAME, NJ) \
static void NAME(long long M, const float* restrict A, long long lda, const float* restrict planes, \
                 const long long* restrict rowoff, const long long* restrict coloff, long long OW, \
                 long long n_rows, long long r0, long long r1, long long j_lo, long long j_hi, \
                 float* restrict C, long long ldc, int accumulate) { \
  const long long full = OW / 8 * 8, rest = OW - full; \
  const lum_dc_vi tail = (lum_dc_vi){0, 1, 2, 3, 4, 5, 6, 7} < (lum_dc_vi){0} + (int)rest;  /* -1 in the lanes < rest */ \
  for (long long j0 = j_lo; j0 < j_hi; j0 += NJ) { \
    long long cj[NJ]; \
    for (int j = 0; j < NJ; ++j) cj[j] = coloff[j0 + j < j_hi ? j0 + j : j0]; \
    for (long long i0 = 0; i0 < M; i0 += 4) { \
      const float* restrict a[4]; \
      for (int i = 0; i < 4; ++i) a[i] = A + (i0 + i < M ? i0 + i : i0) * lda; \
      lum_dc_v c[4][NJ]; \
      _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) c[i][j] = (lum_dc_v){0}; \
      for (long long r = r0; r < r1; ++r) { \
        const float* restrict b[NJ]; \
        _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) b[j] = planes + rowoff[r] + cj[j]; \
        const long long k0 = r * OW; \
        for (long long e = 0; e < full; e += 8) { \
          lum_dc_v bv[NJ], av; \
          _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) bv[j] = *(const lum_dc_v*)(b[j] + e); \
          _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) { \
            av = *(const lum_dc_v*)(a[i] + k0 + e); \
            _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) c[i][j] += av * bv[j]; \
          } \
        } \
        if (rest && k0 + full + 8 <= n_rows * OW) {  /* the row's last lanes, masked: both factors 0 past OW (never 0 x inf) */ \
          lum_dc_v bv[NJ], av;  /* (the whole vector inside A's row of depth, whose next row of positions follows; the planes' slack) */ \
          _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) bv[j] = (lum_dc_v)((lum_dc_vi)(*(const lum_dc_v*)(b[j] + full)) & tail); \
          _Pragma("GCC unroll 4") for (int i = 0; i < 4; ++i) { \
            av = (lum_dc_v)((lum_dc_vi)(*(const lum_dc_v*)(a[i] + k0 + full)) & tail); \
            _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) c[i][j] += av * bv[j]; \
          } \
        } else if (rest) {  /* the end of A's rows: through zero-filled copies, never past A's end (a row \
                               of positions shorter than 4 needs more than the next row to fill a vector) */ \
          float t[8] __attribute__((aligned(32))); \
          lum_dc_v bv[NJ], av; \
          for (int j = 0; j < NJ; ++j) { \
            for (int l = 0; l < 8; ++l) t[l] = l < rest ? b[j][full + l] : 0.0f; \
            bv[j] = *(const lum_dc_v*)t; \
          } \
          for (int i = 0; i < 4; ++i) { \
            for (int l = 0; l < 8; ++l) t[l] = l < rest ? a[i][k0 + full + l] : 0.0f; \
            av = *(const lum_dc_v*)t; \
            _Pragma("GCC unroll 6") for (int j = 0; j < NJ; ++j) c[i][j] += av * bv[j]; \
          } \
        } \
      } \
      for (int i = 0; i < 4 && i0 + i < M; ++i) \
        for (int j = 0; j < NJ && j0 + j < j_hi; ++j) { \
          const lum_dc_v v = c[i][j]; \
          const float sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); \
          float* restrict dst = C + (i0 + i) * ldc + j0 + j; \
          *dst = accumulate ? *dst + sum : sum; \
        } \
    } \
  } \
}
LUM_DWGRAD(lum_dwgrad_4x3, 3)
#if defined(__AVX512F__)
LUM_DWGRAD(lum_dwgrad_4x6, 6)  /* 24 accumulators in AVX-512's 32 registers: A's block read half as often */
#endif
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif
