LUM_SHARED lum_sgemm_fn lum_sgemm, lum_sgemm_blas;
LUM_SHARED lum_dgemm_fn lum_dgemm;
LUM_SHARED lum_sgemv_fn lum_sgemv;
LUM_SHARED lum_dgemv_fn lum_dgemv;
LUM_SHARED lum_threads_fn lum_blas_set_threads;
LUM_SHARED lum_get_threads_fn lum_blas_get_threads;
LUM_SHARED int lum_blas_in_team, lum_own_gemv;
void lum_set_own_gemv(int own) { lum_own_gemv = own; }
LUM_SHARED __thread int lum_threads = 1, lum_f64;
void lum_set_blas(void* sgemm, void* dgemm, void* set_threads, void* sgemv, void* dgemv, void* get_threads) {
  lum_sgemm = (lum_sgemm_fn)sgemm; lum_dgemm = (lum_dgemm_fn)dgemm;
  const int both = set_threads && get_threads;  /* a count set only where it can be restored */
  lum_blas_set_threads = both ? (lum_threads_fn)set_threads : NULL;
  lum_blas_get_threads = both ? (lum_get_threads_fn)get_threads : NULL;
  lum_sgemv = (lum_sgemv_fn)sgemv; lum_dgemv = (lum_dgemv_fn)dgemv;
  lum_blas_in_team = 0;  /* OpenBLAS: a batch of small GEMMs stays serial (concurrent calls contend for its lock) */
  lum_sgemm_blas = NULL;
  lum_own_pack_b = NULL; lum_own_packed = NULL;
}
/* luminal's SGEMM in front of the BLAS lum_set_blas just set (sgemm.py) */
void lum_set_sgemm_front(void* sgemm) {
  if (sgemm && lum_sgemm) { lum_sgemm_blas = lum_sgemm; lum_sgemm = (lum_sgemm_fn)sgemm; }
}
/* its entry points for weights packed once per runtime (`lum_gemm_fw`); NULL: never packed */
LUM_SHARED lum_pack_fn lum_own_pack_b;
LUM_SHARED lum_packed_gemm_fn lum_own_packed;
LUM_SHARED __thread long long* lum_pack_table;
LUM_SHARED __thread long long lum_pack_entries;
void lum_set_sgemm_packed(void* pack, void* gemm) {
  lum_own_pack_b = (lum_pack_fn)pack; lum_own_packed = (lum_packed_gemm_fn)gemm;
}
/* A Fortran (LP64) BLAS: the MKL that PyTorch links, whose threads are libgomp's (the pool of
   this library's loops), so GEMMs and loops share one team instead of two pools fighting over
   the cores. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T; a size past int's
   range (no real GEMM) takes the loops. */
static int lum_fits_int(long long a, long long b, long long c, long long d, long long e, long long f) {
  return (a | b | c | d | e | f) >= 0 && a <= 2147483647LL && b <= 2147483647LL && c <= 2147483647LL
         && d <= 2147483647LL && e <= 2147483647LL && f <= 2147483647LL;
}
#define LUM_F_BLAS(T, P) \
typedef void (*lum_f_##P##gemm_fn)(const char*, const char*, const int*, const int*, const int*, const T*, const T*, \
                                   const int*, const T*, const int*, const T*, T*, const int*); \
typedef void (*lum_f_##P##gemv_fn)(const char*, const int*, const int*, const T*, const T*, const int*, const T*, \
                                   const int*, const T*, T*, const int*); \
static lum_f_##P##gemm_fn lum_f_##P##gemm; \
static lum_f_##P##gemv_fn lum_f_##P##gemv; \
static void lum_f_cblas_##P##gemm(int order, int ta, int tb, long long M, long long N, long long K, T alpha, \
    const T* A, long long lda, const T* B, long long ldb, T beta, T* C, long long ldc) { \
  (void)order; \
  if (!lum_fits_int(M, N, K, lda, ldb, ldc)) { lum_loop_gemm_##P(ta == 112, tb == 112, M, N, K, A, lda, B, ldb, C, ldc); return; } \
  const char tA = ta == 112 ? 'T' : 'N', tB = tb == 112 ? 'T' : 'N'; \
  const int m = (int)N, n = (int)M, k = (int)K, la = (int)ldb, lb = (int)lda, lc = (int)ldc; \
  lum_f_##P##gemm(&tB, &tA, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc); } \
static void lum_f_cblas_##P##gemv(int order, int trans, long long M, long long N, T alpha, const T* A, long long lda, \
    const T* x, long long incx, T beta, T* y, long long incy) { \
  (void)order;  /* row-major A (M x N) is column-major A^T (N x M): the transpose flag flips */ \
  const char t = trans == 112 ? 'N' : 'T'; \
  const int m = (int)N, n = (int)M, la = (int)lda, ix = (int)incx, iy = (int)incy; \
  if (!lum_fits_int(M, N, lda, incx, incy, 0)) { \
    lum_loop_gemm_##P(trans == 112, 0, trans == 112 ? N : M, 1, trans == 112 ? M : N, A, lda, x, incx, y, incy); return; } \
  lum_f_##P##gemv(&t, &m, &n, &alpha, A, &la, x, &ix, &beta, y, &iy); }
LUM_F_BLAS(float, f)
LUM_F_BLAS(double, d)
LUM_SHARED int (*lum_mkl_threads_local)(int);  /* MKL's thread-local thread count (returns the previous; 0: global) */
void lum_set_fortran_blas(void* sgemm, void* dgemm, void* sgemv, void* dgemv, void* threads_local) {
  lum_mkl_threads_local = (int (*)(int))threads_local;
  lum_f_fgemm = (lum_f_fgemm_fn)sgemm; lum_f_dgemm = (lum_f_dgemm_fn)dgemm;
  lum_f_fgemv = (lum_f_fgemv_fn)sgemv; lum_f_dgemv = (lum_f_dgemv_fn)dgemv;
  lum_sgemm = sgemm ? lum_f_cblas_fgemm : NULL; lum_dgemm = dgemm ? lum_f_cblas_dgemm : NULL;
  lum_sgemv = sgemv ? lum_f_cblas_fgemv : NULL; lum_dgemv = dgemv ? lum_f_cblas_dgemv : NULL;
  lum_blas_set_threads = NULL; lum_blas_get_threads = NULL;  /* the BLAS's threads are the OpenMP team's: lum_run sets them */
  lum_blas_in_team = sgemm != NULL;
  lum_sgemm_blas = NULL;
  lum_own_pack_b = NULL; lum_own_packed = NULL;
}
