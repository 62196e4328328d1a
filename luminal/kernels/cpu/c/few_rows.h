/* C (M x NN) = A B^T in float32 for a few rows of A (M <= 16) and B stored as its rows (a linear
   layer's weight, out x in): `lum_few_rows_gemm_f32`, which `LUM_BLAS_GEMM` calls (prelude_tail.h;
   the float64 one is the plain loop there). Each block of four of B's rows is read once, from
   memory or L2, for every row of A; four rows of A at a time (two on AVX2), then single rows, a
   vector sum of the products along K (FMAs where the CPU has them, as a BLAS's), each summed
   across its lanes as a tree of halves, then K's last K % W terms in order. GCC/Clang vector
   types, no intrinsics: 16 floats where the library is built for AVX-512, else 8. The blocks are
   split across the call's team where `par`, the same rows to the same thread every call, so a
   model's weights stay in the cores' L2 between calls; every element is computed the same way
   whatever the split, so the bits do not depend on the team (figures: README, the CPU backend). */
#ifndef LUM_FEW_ROWS_H
#define LUM_FEW_ROWS_H
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("fma")
#pragma GCC optimize("fp-contract=fast")
#ifdef __AVX512F__
#pragma GCC target("prefer-vector-width=512")
#endif
#endif
#if defined(__AVX512F__)
#define LUM_FR_W 16
#define LUM_FR_MR 4  /* rows of A a step: MR x 4 sums, MR loads of A and 4 of B for 4 MR FMAs (24 of 32 registers) */
#else
#define LUM_FR_W 8
#define LUM_FR_MR 2  /* AVX2's 16 registers: 8 sums */
#endif
typedef float lum_fr_v __attribute__((vector_size(4 * LUM_FR_W), aligned(4)));
typedef float lum_fr_v4 __attribute__((vector_size(16), aligned(4)));
static inline float lum_fr_sum(lum_fr_v v) {  /* the lanes' sum, halves added down to four lanes */
  lum_fr_v4 q[LUM_FR_W / 4];
  memcpy(q, &v, sizeof v);
#if LUM_FR_W == 16
  q[0] += q[2]; q[1] += q[3];
#endif
  q[0] += q[1];
  return (q[0][0] + q[0][2]) + (q[0][1] + q[0][3]);
}
/* rows i.. i + mr - 1 of A (mr a constant where it is inlined: the loops unroll, the sums stay in
   registers) times B's rows b[0..3], the first nb of them stored */
static inline __attribute__((always_inline)) void lum_fr_tile(const int mr, long long i, long long K, long long KV,
    const float* A, long long lda, const float* const* b, int nb, float* C, long long ci, long long cj, long long j0) {
  const float* a[LUM_FR_MR];
  _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) a[r] = A + (i + r) * lda;
  lum_fr_v acc[LUM_FR_MR][4];
  _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q)
    acc[r][q] = (lum_fr_v){0};
  for (long long k = 0; k < KV; k += LUM_FR_W) {
    lum_fr_v x[LUM_FR_MR];
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) x[r] = *(const lum_fr_v*)(a[r] + k);
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) {
      const lum_fr_v v = *(const lum_fr_v*)(b[q] + k);
      _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) acc[r][q] += x[r] * v;
    }
  }
  float sum[LUM_FR_MR][4];
  _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q)
    sum[r][q] = lum_fr_sum(acc[r][q]);
  _Pragma("GCC unroll 1") for (int r = 0; r < mr; ++r)  /* K's last terms and the stores: a loop, not unrolled code */
    for (int q = 0; q < nb; ++q) {
      float s = sum[r][q];
      for (long long k = KV; k < K; ++k) s += a[r][k] * b[q][k];
      C[(i + r) * ci + (j0 + q) * cj] = s;
    }
}
static void lum_few_rows_gemm_f32(long long M, long long NN, long long K, const float* A, long long lda,
                                  const float* Bt, long long ldb, float* C, long long ci, long long cj, int par) {
  const long long KV = K / LUM_FR_W * LUM_FR_W;
  _Pragma("omp parallel for num_threads(lum_threads) schedule(static) if (par)")
  for (long long j0 = 0; j0 < NN; j0 += 4) {
    const int nb = NN - j0 < 4 ? (int)(NN - j0) : 4;
    const float* b[4];
    for (int q = 0; q < 4; ++q) b[q] = Bt + (j0 + (q < nb ? q : nb - 1)) * ldb;  /* past NN: the last row again, never stored */
    long long i = 0;
    for (; i + LUM_FR_MR <= M; i += LUM_FR_MR) lum_fr_tile(LUM_FR_MR, i, K, KV, A, lda, b, nb, C, ci, cj, j0);  /* then single rows */
    for (; i < M; ++i) lum_fr_tile(1, i, K, KV, A, lda, b, nb, C, ci, cj, j0);
  }
}
/* C = op(A) B, B plain (K x NN): blocks of 4 vectors of columns, across the team where `par`; per
   block the rows of op(A) in tiles of LUM_FR_MR (4 on AVX-512, 2 on AVX2) and of 1 (no others:
   every library calling a GEMM may compile this code), each element a
   chain of FMAs over k in order from 0 (the columns past the last whole block: the same chain, one
   column at a time, so the same bits) */
static inline __attribute__((always_inline)) void lum_fr_nn_tile(const int mr, long long i, long long K,
    const float* A, long long sam, long long sak, const float* B, long long ldb, float* C, long long ldc, long long c0) {
  lum_fr_v acc[LUM_FR_MR][4];
  _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q)
    acc[r][q] = (lum_fr_v){0};
  for (long long k = 0; k < K; ++k) {
    const float* b = B + k * ldb + c0;
    lum_fr_v v[4];
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) v[q] = *(const lum_fr_v*)(b + q * LUM_FR_W);
    _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r) {
      const float x = A[(i + r) * sam + k * sak];
      _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) acc[r][q] += x * v[q];
    }
  }
  _Pragma("GCC unroll 4") for (int r = 0; r < mr; ++r)
    _Pragma("GCC unroll 4") for (int q = 0; q < 4; ++q) memcpy(C + (i + r) * ldc + c0 + q * LUM_FR_W, &acc[r][q], sizeof(lum_fr_v));
}
/* one row of op(A) (a matrix-vector product): the sums of a task's columns in L1, B's rows k read
   whole across them, one after another (the register tiles read 256 bytes of each row, a page
   apart in a wide B: slower when B streams from memory). The same chain of FMAs an element, so
   the same bits as the tiles'. */
static void lum_fr_nn_row(long long NN, long long K, const float* A, long long sak, const float* B, long long ldb,
                          float* C, int par) {
  const long long CW = lum_min(2048, lum_max(64, (NN / 4 + 15) / 16 * 16));  /* at least 4 tasks from 256 columns */
  const long long n_tasks = (NN + CW - 1) / CW;
  _Pragma("omp parallel for num_threads(lum_threads) schedule(static) if (par)")
  for (long long t = 0; t < n_tasks; ++t) {
    const long long c0 = t * CW, cn = lum_min(CW, NN - c0);
    float acc[2048];
    memset(acc, 0, sizeof(float) * cn);
    for (long long k = 0; k < K; ++k) {
      const float x = A[k * sak], *b = B + k * ldb + c0;
      _Pragma("omp simd") for (long long j = 0; j < cn; ++j) acc[j] += x * b[j];
    }
    memcpy(C + c0, acc, sizeof(float) * cn);
  }
}
static void lum_few_rows_nn_f32(long long M, long long NN, long long K, const float* A, long long sam, long long sak,
                                const float* B, long long ldb, float* C, long long ldc, int par) {
  if (M == 1) { lum_fr_nn_row(NN, K, A, sak, B, ldb, C, par); return; }
  const long long CB = 4 * LUM_FR_W, NB = NN / CB * CB;  /* whole blocks of columns */
  _Pragma("omp parallel for num_threads(lum_threads) schedule(static) if (par)")
  for (long long c0 = 0; c0 < NB; c0 += CB) {
    long long i = 0;
    for (; i + LUM_FR_MR <= M; i += LUM_FR_MR) lum_fr_nn_tile(LUM_FR_MR, i, K, A, sam, sak, B, ldb, C, ldc, c0);
    for (; i < M; ++i) lum_fr_nn_tile(1, i, K, A, sam, sak, B, ldb, C, ldc, c0);
  }
  for (long long i = 0; i < M; ++i)
    for (long long j = NB; j < NN; ++j) {
      float s = 0;
      for (long long k = 0; k < K; ++k) s += A[i * sam + k * sak] * B[k * ldb + j];
      C[i * ldc + j] = s;
    }
}
#if defined(LUM_FMA) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
#endif
