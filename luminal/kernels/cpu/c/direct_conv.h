/* luminal's direct convolution micro-kernel (luminal/kernels/cpu/conv_direct.py): GCC/Clang vector
   types, no intrinsics, so the compiler maps it to the target's registers (AVX2 here). */
#ifndef LUM_DIRECT_CONV_H
#define LUM_DIRECT_CONV_H
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("fma")
#pragma GCC optimize("fp-contract=fast")  /* c += a * b is one FMA: a chain per output, as a GEMM's */
#endif
typedef float lum_dc_v __attribute__((vector_size(32), aligned(4)));  /* 8 floats, any alignment */

/* C[0:M, 0:ne] (rows ldc apart; ne a multiple of 8 NV) = A[0:M, 0:K] (rows lda apart) times B,
   B[k, e] = src[off[k] + e]: the rows of B are runs of the phase planes, read in place. Every
   element of C is one chain of multiply-adds in k order from 0, so its bits depend neither on the
   tiling nor on the team. Micro-tiles of MR rows x NV vectors of 8 positions, MR x NV
   accumulators (12: with the NV loads of B and a broadcast, within AVX2's 16 registers); GCC
   keeps the fully unrolled arrays in registers. Rows past M repeat row 0: read, never stored. */
#define LUM_DCONV(NAME, MR, NV) \
static void NAME(long long M, long long K, const float* restrict A, long long lda, const float* restrict src, \
                 const long long* restrict off, float* restrict C, long long ldc, long long ne) { \
  for (long long i0 = 0; i0 < M; i0 += MR) { \
    const float* restrict a[MR]; \
    _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) a[i] = A + (i0 + i < M ? i0 + i : 0) * lda; \
    for (long long e = 0; e < ne; e += 8 * NV) { \
      const float* restrict b = src + e; \
      lum_dc_v c[MR][NV]; \
      _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) \
        c[i][j] = (lum_dc_v){0}; \
      _Pragma("GCC unroll 2") \
      for (long long k = 0; k < K; ++k) { \
        const float* restrict bk = b + off[k]; \
        lum_dc_v bv[NV]; \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) bv[j] = *(const lum_dc_v*)(bk + 8 * j); \
        _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) { \
          const float x = a[i][k]; \
          _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) c[i][j] += x * bv[j]; \
        } \
      } \
      _Pragma("GCC unroll 8") for (int i = 0; i < MR; ++i) if (i0 + i < M) \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV; ++j) *(lum_dc_v*)(C + (i0 + i) * ldc + e + 8 * j) = c[i][j]; \
    } \
  } \
}
LUM_DCONV(lum_dconv_6x16, 6, 2)  /* the fewest wasted positions on small images (steps.DirectConv.nr) */
LUM_DCONV(lum_dconv_4x24, 4, 3)  /* no wasted rows for 4k output channels, one load fewer per 12 FMAs */
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif
