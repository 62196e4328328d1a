/* Fused attention's P·V on the CPU (luminal/kernels/render/attention_gemm.py): C[0:nq, 0:DV] +=
   P[0:nq, 0:nk] (rows ldp apart) times V[0:nk, 0:DV] (rows ldv apart), P and V read in place.
   A BLAS packs all of P (the block's probabilities, as large as the block's scores) for every
   call; here a micro-tile of LUM_PV_MR rows x LUM_PV_NV vectors of C takes P's elements as
   broadcasts, V's rows as vector loads. The keys run in blocks of LUM_PV_KC (a block of V, 32
   KiB at 64 columns, stays in L1 while every row tile passes over it), each block's products
   summed in registers from 0 and then added to C (chains of 128 terms, not of all the keys: a
   block's sum rounds as a BLAS's panels do). GCC/Clang vector types, as wide as the build's (16
   floats where the library is built for AVX-512, else 8); DV a multiple of the tile's columns
   (the caller's test). Used where the library is built for AVX-512 (`LUM_PV_WANTED`). Included
   inside the attention kernel's options (`cpu/render.attention`: FMAs, contraction). */
#ifndef LUM_ATTENTION_PV_H
#define LUM_ATTENTION_PV_H
#if defined(__AVX512F__)
#define LUM_PV_W 16
#define LUM_PV_MR 6
#define LUM_PV_WANTED 1
#else
#define LUM_PV_W 8
#define LUM_PV_MR 3
#define LUM_PV_WANTED 0  /* built as AVX2 the BLAS's P·V measured faster (README, "Fused attention") */
#endif
#define LUM_PV_NV 4  /* vectors of C's columns a tile: MR x 4 accumulators (24 of AVX-512's 32, 12 of AVX2's 16) */
#define LUM_PV_COLS (LUM_PV_W * LUM_PV_NV)
#define LUM_PV_KC 128
typedef float lum_pv_v __attribute__((vector_size(4 * LUM_PV_W), aligned(4)));
static void lum_attn_pv(long long nq, long long nk, long long DV, const float* restrict P, long long ldp,
                        const float* restrict V, long long ldv, float* restrict C, long long ldc) {
  for (long long j0 = 0; j0 < nk; j0 += LUM_PV_KC) {
    const long long j1 = nk - j0 < LUM_PV_KC ? nk : j0 + LUM_PV_KC;
    for (long long c0 = 0; c0 < DV; c0 += LUM_PV_COLS)
      for (long long i0 = 0; i0 < nq; i0 += LUM_PV_MR) {
        const float* restrict p[LUM_PV_MR];
        float* restrict c[LUM_PV_MR];
        _Pragma("GCC unroll 8") for (int i = 0; i < LUM_PV_MR; ++i) {  /* rows past nq repeat the last: read, never stored */
          const long long r = i0 + i < nq ? i0 + i : nq - 1;
          p[i] = P + r * ldp;
          c[i] = C + r * ldc + c0;
        }
        lum_pv_v acc[LUM_PV_MR][LUM_PV_NV];
        _Pragma("GCC unroll 8") for (int i = 0; i < LUM_PV_MR; ++i) _Pragma("GCC unroll 4") for (int v = 0; v < LUM_PV_NV; ++v)
          acc[i][v] = (lum_pv_v){0};
        const float* restrict vr = V + j0 * ldv + c0;
        for (long long j = j0; j < j1; ++j, vr += ldv) {
          lum_pv_v b[LUM_PV_NV];
          _Pragma("GCC unroll 4") for (int v = 0; v < LUM_PV_NV; ++v) b[v] = *(const lum_pv_v*)(vr + v * LUM_PV_W);
          _Pragma("GCC unroll 8") for (int i = 0; i < LUM_PV_MR; ++i) {
            const float x = p[i][j];
            _Pragma("GCC unroll 4") for (int v = 0; v < LUM_PV_NV; ++v) acc[i][v] += x * b[v];
          }
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < LUM_PV_MR; ++i) if (i0 + i < nq)
          _Pragma("GCC unroll 4") for (int v = 0; v < LUM_PV_NV; ++v) *(lum_pv_v*)(c[i] + v * LUM_PV_W) += acc[i][v];
      }
  }
}
#endif
