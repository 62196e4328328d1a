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
#if defined(__AVX512F__)
#define LUM_DC_W 16  /* floats per vector of the convolution's micro-tiles (steps.dc_kernels: the same) */
#else
#define LUM_DC_W 8
#endif
typedef float lum_dcw_v __attribute__((vector_size(4 * LUM_DC_W), aligned(4)));

/* Micro-tiles of positions per tile of a convolution's units of work (conv_direct.py), chosen per
   call for the team: the fewest micro-tiles on the busiest thread (OpenMP's static schedule gives
   the first threads one unit more; the last unit, maybe partial, goes to the last thread), from
   `cap` down to half of it (narrower tiles pass over A more often; the scratch
   holds a tile of `cap` for as many threads as there are units at half: `DirectConv.work`), ties
   to the wider tile. 18 micro-tiles on 2 threads: tiles of 1, 9 a thread, where tiles of 2 gave
   9 units, 5 and 4. A team of 1 keeps `cap`, and so do units that split
   the channels instead (each takes all positions: `DirectConv.block_rows`). The tiling
   changes no bits (each output is one chain in k order, whatever its tile). */
static inline long long lum_dc_per(long long chunks, long long cap, long long threads) {
  long long best = cap, best_load = -1;
  for (long long p = cap; p >= (cap + 1) / 2; --p) {
    const long long units = (chunks + p - 1) / p;
    const long long load = lum_min((units + threads - 1) / threads * p, chunks);
    if (best_load < 0 || load < best_load) { best = p; best_load = load; }
  }
  return best;
}

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
/* The lanes path (conv_direct.direct_path) of a small image: C[0:mn, 0:nr] (rows ldc apart; nr <= R
   positions of one output row, mn <= 2 LUM_DC_W channels) = a panel of the weight (K rows of 2
   LUM_DC_W output channels, packed once for every call: lum_packed_weight) times B, B[k, e] =
   src[off[k] + e]. The output channels are in the vector lanes and the positions are broadcast,
   so a unit is one output row's run (no columns of the extended grid computed and dropped) and
   any stride costs nothing more. Per k: the panel's two vectors, R broadcasts, 2R FMAs (24 of
   AVX-512's 32 registers at R = 12). Each output is one chain of multiply-adds in k order from 0,
   as lum_dconv_*'s: the same bits. Positions R past nr read the planes' next elements (in the
   row, the next row, or the slack): computed, never stored. */
#define LUM_DCONV_LANES(NAME, R) \
static void NAME(long long K, const float* restrict panel, const float* restrict src, const long long* restrict off, \
                 float* restrict C, long long ldc, long long nr, long long mn) { \
  lum_dcw_v c0[R], c1[R]; \
  _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { c0[j] = (lum_dcw_v){0}; c1[j] = (lum_dcw_v){0}; } \
  for (long long k = 0; k < K; ++k) { \
    const float* restrict bk = src + off[k]; \
    const lum_dcw_v w0 = *(const lum_dcw_v*)(panel + k * 2 * LUM_DC_W); \
    const lum_dcw_v w1 = *(const lum_dcw_v*)(panel + k * 2 * LUM_DC_W + LUM_DC_W); \
    _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { const float x = bk[j]; c0[j] += w0 * x; c1[j] += w1 * x; } \
  } \
  float t[R][2 * LUM_DC_W]; \
  _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { \
    *(lum_dcw_v*)(t[j]) = c0[j]; *(lum_dcw_v*)(t[j] + LUM_DC_W) = c1[j]; \
  } \
  for (long long i = 0; i < mn; ++i) for (long long j = 0; j < nr; ++j) C[i * ldc + j] = t[j][i]; \
}
#if LUM_DC_W == 16
LUM_DCONV_LANES(lum_dconv_lanes_7, 7)  /* conv_direct.LANES: 7x7, 14x14 and 28x28 rows in whole units */
LUM_DCONV_LANES(lum_dconv_lanes_8, 8)
LUM_DCONV_LANES(lum_dconv_lanes_12, 12)
#endif
/* The lanes path on AVX2 (conv_direct.GATHER): its 16 registers hold 2 x 6 accumulators, too few
   positions for a run of one output row (runs of 4 or 6 measured slower than the grid), so a unit
   is R positions taken anywhere on the output grid, each its own pointer into the planes (pos[j]:
   its extended-grid offset; the last repeated past the unit's end): the output rows' ends do not
   cut units short, and no column of the grid is computed for nothing. The tile is channels-last
   (position e - pos[0] at C + (e - pos[0]) * 2 LUM_DC_W): each position's two vectors stored
   whole, where scattering them across rows of positions cost as much as a short unit's FMAs.
   Same chains of FMAs in k order as the grid's, so the same bits. */
#define LUM_DCONV_GATHER(NAME, R) \
static void NAME(long long K, const float* restrict panel, const float* restrict src, const long long* restrict pos, \
                 const long long* restrict off, float* restrict C) { \
  const float* restrict p[R]; \
  _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) p[j] = src + pos[j]; \
  lum_dcw_v c0[R], c1[R]; \
  _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { c0[j] = (lum_dcw_v){0}; c1[j] = (lum_dcw_v){0}; } \
  for (long long k = 0; k < K; ++k) { \
    const long long o = off[k]; \
    const lum_dcw_v w0 = *(const lum_dcw_v*)(panel + k * 2 * LUM_DC_W); \
    const lum_dcw_v w1 = *(const lum_dcw_v*)(panel + k * 2 * LUM_DC_W + LUM_DC_W); \
    _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { const float x = p[j][o]; c0[j] += w0 * x; c1[j] += w1 * x; } \
  } \
  _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { \
    float* const t = C + (pos[j] - pos[0]) * 2 * LUM_DC_W; \
    *(lum_dcw_v*)(t) = c0[j]; *(lum_dcw_v*)(t + LUM_DC_W) = c1[j]; \
  } \
}
#if LUM_DC_W == 8
LUM_DCONV_GATHER(lum_dconv_gather_6, 6)
#endif
#if LUM_DC_W == 16
LUM_DCONV(lum_dconv_12x32, 12, 2)  /* the fewest wasted positions on small images (steps.DirectConv.nr) */
LUM_DCONV(lum_dconv_8x48, 8, 3)  /* no wasted rows for 8k output channels, one load fewer per 24 FMAs */
#else
LUM_DCONV(lum_dconv_6x16, 6, 2)  /* the fewest wasted positions on small images (steps.DirectConv.nr) */
LUM_DCONV(lum_dconv_4x24, 4, 3)  /* no wasted rows for 4k output channels, one load fewer per 12 FMAs */
#endif
/* A weight gradient's GEMM, C[0:M, j_lo:j_hi] = A[0:M, k] B[k, j] summed over the positions k =
   r * OW + ow (A's rows lda apart, k contiguous; B[k, j] = planes[rowoff[r] + coloff[j] + ow]),
   as outer products with the output channels in the vector lanes: per position, V vectors of
   A's column k (M values) times R broadcast elements of B's row k, into V x R accumulators, so
   no horizontal sums and no masked tails (a row of positions is any length).
   The caller (`conv_direct.wgrad_path`) transposes A's columns a chunk of positions at a time
   into `at` (k-major, rows Mp apart, M padded with zeros to the tile: `lum_wg_transpose`, the
   team sharing the rows), then each thread runs the chunk for its columns j_lo..j_hi into its
   `ct` (C's columns transposed: m contiguous, rows Mp apart), each element one chain of FMAs in
   k order across the chunks: the bits depend neither on the chunks nor on the team (a thread
   owns its columns). Within a chunk, blocks of LUM_WG_KB positions: a tile of MT = V x LUM_DC_W
   channels passes over every column tile while its slice of `at` (LUM_WG_KB x MT) is in L1. */
#define LUM_WG_KB 64
static void lum_wg_transpose(long long M, const float* restrict A, long long lda, long long k0, long long kk_lo,
                             long long kk_hi, float* restrict at, long long Mp) {  /* positions k0 + kk_lo .. kk_hi into rows of at */
  for (long long m = 0; m < M; ++m) {
    const float* restrict a = A + m * lda + k0;
    for (long long kk = kk_lo; kk < kk_hi; ++kk) at[kk * Mp + m] = a[kk];
  }
  for (long long kk = kk_lo; kk < kk_hi; ++kk) for (long long m = M; m < Mp; ++m) at[kk * Mp + m] = 0.0f;
}
#define LUM_DWGRAD_OP(NAME, V, R) \
static void NAME(long long Mp, const float* restrict at, long long k0, long long nk, const float* restrict planes, \
                 const long long* restrict rowoff, const long long* restrict coloff, long long OW, \
                 long long j_lo, long long j_hi, float* restrict ct) { \
  const long long MT = (long long)LUM_DC_W * V; \
  long long boff[LUM_WG_KB];  /* a position's offset in the planes: its row's start + ow */ \
  for (long long kb = 0; kb < nk; kb += LUM_WG_KB) { \
    const int nb = (int)(nk - kb < LUM_WG_KB ? nk - kb : LUM_WG_KB); \
    for (int kk = 0; kk < nb; ++kk) boff[kk] = rowoff[(k0 + kb + kk) / OW] + (k0 + kb + kk) % OW; \
    for (long long m0 = 0; m0 < Mp; m0 += MT) \
      for (long long j0 = j_lo; j0 < j_hi; j0 += R) { \
        const float* restrict b[R]; \
        _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) b[j] = planes + coloff[j0 + j < j_hi ? j0 + j : j0]; \
        float* const cp = ct + (j0 - j_lo) * Mp + m0; \
        lum_dcw_v c[V][R]; \
        _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) \
          c[v][j] = j0 + j < j_hi ? *(const lum_dcw_v*)(cp + j * Mp + v * LUM_DC_W) : (lum_dcw_v){0}; \
        const float* restrict ap = at + kb * Mp + m0; \
        for (int kk = 0; kk < nb; ++kk, ap += Mp) { \
          const long long o = boff[kk]; \
          lum_dcw_v av[V]; \
          _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) av[v] = *(const lum_dcw_v*)(ap + v * LUM_DC_W); \
          _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) { \
            const float x = b[j][o]; \
            _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) c[v][j] += av[v] * x; \
          } \
        } \
        _Pragma("GCC unroll 16") for (int j = 0; j < R; ++j) if (j0 + j < j_hi) \
          _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) *(lum_dcw_v*)(cp + j * Mp + v * LUM_DC_W) = c[v][j]; \
      } \
  } \
}
#if LUM_DC_W == 16
LUM_DWGRAD_OP(lum_dwgrad_op_4x6, 4, 6)  /* 64 channels x 6 columns: 24 accumulators of AVX-512's 32 */
LUM_DWGRAD_OP(lum_dwgrad_op_2x8, 2, 8)  /* 32 channels (fewer: zero lanes) x 8 columns */
#else
LUM_DWGRAD_OP(lum_dwgrad_op_2x6, 2, 6)  /* 16 channels x 6 columns: 12 accumulators of AVX2's 16 */
#endif
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif
