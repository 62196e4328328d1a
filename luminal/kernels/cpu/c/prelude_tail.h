
/* GEMM: row-major C[M x N] = op(A)[M x K] . op(B)[K x N]; BLAS (ILP64 cblas, set by lum_set_blas) or loops */
typedef void (*lum_sgemm_fn)(int, int, int, long long, long long, long long, float, const float*, long long,
                             const float*, long long, float, float*, long long);
typedef void (*lum_dgemm_fn)(int, int, int, long long, long long, long long, double, const double*, long long,
                             const double*, long long, double, double*, long long);
typedef void (*lum_sgemv_fn)(int, int, long long, long long, float, const float*, long long, const float*, long long,
                             float, float*, long long);
typedef void (*lum_dgemv_fn)(int, int, long long, long long, double, const double*, long long, const double*, long long,
                             double, double*, long long);
typedef void (*lum_threads_fn)(int);
typedef int (*lum_get_threads_fn)(void);
/* state shared by the library's translation units (defined once, in the driver's: `SHARED`) */
#define LUM_SHARED __attribute__((visibility("hidden")))
extern LUM_SHARED lum_sgemm_fn lum_sgemm;
extern LUM_SHARED lum_sgemm_fn lum_sgemm_blas;  /* the BLAS's own when luminal's SGEMM is lum_sgemm */
/* luminal's SGEMM on weights packed once (sgemm.c); NULL where it is not in front */
typedef void (*lum_pack_fn)(int, long long, long long, const float*, long long, float*);
typedef int (*lum_packed_gemm_fn)(int, long long, long long, long long, const float*, long long, const float*, float*,
                                  long long);
extern LUM_SHARED lum_pack_fn lum_own_pack_b;
extern LUM_SHARED lum_packed_gemm_fn lum_own_packed;
/* the calling runtime's table of packed weights (`lum_gemm_fw`), set by the driver per call */
extern LUM_SHARED __thread long long* lum_pack_table;
extern LUM_SHARED __thread long long lum_pack_entries;
extern LUM_SHARED lum_dgemm_fn lum_dgemm;
extern LUM_SHARED lum_sgemv_fn lum_sgemv;
extern LUM_SHARED lum_dgemv_fn lum_dgemv;
/* OpenBLAS's thread count (process-wide: NumPy's too): 1 during a call, then the caller's (the driver); NULL for MKL */
extern LUM_SHARED lum_threads_fn lum_blas_set_threads;
extern LUM_SHARED lum_get_threads_fn lum_blas_get_threads;
/* 1: a row times a transposed B (a linear layer in decode) through the few-rows loops, not the
   BLAS's sgemv, which is slower there: MKL's on a CPU not Intel's (blas_libs.py; README) */
extern LUM_SHARED int lum_own_gemv;
/* the call's team size and precision: per calling thread (two threads may run calls at once),
   read on it, never inside a parallel region */
extern LUM_SHARED __thread int lum_threads, lum_f64;
/* The team of a call: `threads` (torch's count, as its kernels use), less the cores other
   processes keep busy. On a loaded machine a full team is many times slower than one thread
   (each barrier waits for a descheduled peer: NudeNet 2.3 s against 88 ms at load 9 on 2 cores;
   a fresh process beside two busy ones ran a 7.5 ms model in 120-140 ms). Others' cores are
   measured, not guessed from the load average: the machine's busy CPU time (/proc/stat) less this
   process's own (every thread of it: another library's pool beside luminal counts as ours) over
   windows of at least 0.1 s, read at most that often (a call of a 20 us model pays one clock
   read, where the load average cost a file read per call). The load-average estimate this
   replaces mistook the process's own recent work (its compile: gcc and Python for seconds) for
   others' and then held the team at one thread for minutes on a quiet machine (SqueezeNet 7.8 ms
   a call at CPU/wall 1.0, against 4.1-4.9 ms with the full team). With no window to measure
   (the first call, or after 2 s without calls) what runs right now stands in: the runnable tasks
   /proc/loadavg counts, less this process's own runnable threads. Unreadable /proc: full teams,
   as torch. */
#include <dirent.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static int lum_own_running(void) {  /* this process's threads in state R (running or runnable) */
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  char path[300], buf[512];
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof path, "/proc/self/task/%.200s/stat", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    const size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    const char* p = strrchr(buf, ')');  /* the thread's name may hold spaces and parentheses */
    n += p && p[1] == ' ' && p[2] == 'R';
  }
  closedir(d);
  return n;
}
static double lum_now(clockid_t clock) { struct timespec t; clock_gettime(clock, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double lum_others_now(void) {  /* other processes' runnable tasks at this instant */
  double l1, l5, l15;
  int running = 0, total = 0;
  FILE* f = fopen("/proc/loadavg", "r");
  if (!f) return 0;
  const int got = fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total);
  fclose(f);
  const int ours = lum_own_running();
  if (got != 5 || ours < 1) return 0;
  return running > ours ? running - ours : 0;
}
static double lum_busy_seconds(void) {  /* all CPUs' non-idle time since boot; < 0: unreadable */
  unsigned long long user, nice, sys, idle, iowait, irq, softirq;
  FILE* f = fopen("/proc/stat", "r");
  if (!f) return -1;
  const int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait, &irq, &softirq);
  fclose(f);
  if (got != 7) return -1;  /* steal (the hypervisor's) and idle are nobody's work here */
  return (double)(user + nice + sys + irq + softirq) / (double)sysconf(_SC_CLK_TCK);
}
static int lum_team(int threads) {
  /* the processors the caller may run on: a system call, so read when the others' load is, at
     most every 0.1 s, not at every call */
  static double others = 0, last_wall = -1e9, last_busy = -1, last_cpu;
  static int procs = 1;
  double seen;
  int cores;
  if (threads <= 1) return threads < 1 ? 1 : threads;
  const double wall = lum_now(CLOCK_MONOTONIC);
  #pragma omp critical(lum_team)
  {
    const double gap = wall - last_wall;
    if (gap > 2.0) {  /* nothing measured lately: what runs now, and a window from here */
      others = lum_others_now();
      procs = omp_get_num_procs();
      last_wall = wall; last_busy = lum_busy_seconds(); last_cpu = lum_now(CLOCK_PROCESS_CPUTIME_ID);
    } else if (gap >= 0.1) {
      const double busy = lum_busy_seconds(), cpu = lum_now(CLOCK_PROCESS_CPUTIME_ID);
      if (busy >= 0 && last_busy >= 0) {
        const double o = (busy - last_busy - (cpu - last_cpu)) / gap;
        others = o > 0 ? o : 0;
      }
      procs = omp_get_num_procs();
      last_wall = wall; last_busy = busy; last_cpu = cpu;
    }
    seen = others;
    cores = procs;
  }
  const int free_cores = cores - (int)(seen + 0.5);
  return free_cores < 1 ? 1 : free_cores < threads ? free_cores : threads;
}
/* a batch of GEMMs runs one per thread when the BLAS's threads are the OpenMP team's (MKL) and
   each GEMM is too small to be worth threading by itself; never under set_precision("float64"),
   whose flag is the calling thread's (thread-local) */
extern LUM_SHARED int lum_blas_in_team;
extern LUM_SHARED int (*lum_mkl_threads_local)(int);
/* MKL on a thread of the team: one thread of its own for a region's extent (the previous local
   count back for lum_mkl_restore). Left alone, a thread's count follows MKL's global setting and
   its dynamic choice, and a block's bits with it: concurrent calls of one model got other bits. */
static int lum_mkl_one(void) { return lum_mkl_threads_local ? lum_mkl_threads_local(1) : 0; }
static void lum_mkl_restore(int previous) { if (lum_mkl_threads_local) lum_mkl_threads_local(previous); }
static int lum_batch_parallel(long long n_batch, long long M, long long N, long long K) {
  return lum_blas_in_team && !lum_f64 && n_batch > 1 && M * N * K < (1LL << 22) && lum_threads > 1;
}
#define LUM_LOOP_GEMM(T, N) static void lum_loop_gemm_##N(int ta, int tb, long long M, long long NN, long long K, \
    const T* A, long long lda, const T* B, long long ldb, T* C, long long ldc) { \
  _Pragma("omp parallel for if (M * NN * K >= 262144)") \
  for (long long i = 0; i < M; ++i) for (long long j = 0; j < NN; ++j) { \
    T acc = 0; \
    for (long long k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]); \
    C[i * ldc + j] = acc; } }
LUM_LOOP_GEMM(float, f)
LUM_LOOP_GEMM(double, d)
LUM_LOOP_GEMM(int, i)
LUM_LOOP_GEMM(long long, ll)
/* C = A B^T for a few rows of A (M <= 16, 8 in float64: a GRU or LSTM step at a small batch, a few tokens
   through a linear layer whose weight B is stored as its rows), element (i, j) at C[i * ci + j * cj]
   so that the same loop serves a few columns (C^T = B A^T: a strided conv's output positions, an
   STFT's frames; a BLAS packs all of the weight first).
   The float32 one is few_rows.h's (vector types, FMAs); this loop the float64 one: each block of
   four of B's rows read once for every row of A, blocks split across the team where `par`, one
   dot product an element in one order whatever the split. */
#define LUM_FEW_ROWS_GEMM(T, N) static void lum_few_rows_gemm_##N(long long M, long long NN, long long K, \
    const T* A, long long lda, const T* Bt, long long ldb, T* C, long long ci, long long cj, int par) { \
  _Pragma("omp parallel for num_threads(lum_threads) schedule(static) if (par)") \
  for (long long j0 = 0; j0 < NN; j0 += 4) { \
    if (j0 + 4 <= NN) { \
      const T *b0 = Bt + j0 * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb; \
      for (long long i = 0; i < M; ++i) { \
        const T* a = A + i * lda; \
        T s0 = 0, s1 = 0, s2 = 0, s3 = 0; \
        _Pragma("omp simd reduction(+:s0, s1, s2, s3)") \
        for (long long k = 0; k < K; ++k) { const T x = a[k]; s0 += x * b0[k]; s1 += x * b1[k]; s2 += x * b2[k]; s3 += x * b3[k]; } \
        T* c = C + i * ci + j0 * cj; \
        c[0] = s0; c[cj] = s1; c[2 * cj] = s2; c[3 * cj] = s3; } \
    } else for (long long j = j0; j < NN; ++j) { \
      const T* b0 = Bt + j * ldb; \
      for (long long i = 0; i < M; ++i) { \
        const T* a = A + i * lda; T s0 = 0; \
        _Pragma("omp simd reduction(+:s0)") \
        for (long long k = 0; k < K; ++k) s0 += a[k] * b0[k]; \
        C[i * ci + j * cj] = s0; } } } }
LUM_FEW_ROWS_GEMM(double, d)
static void lum_few_rows_gemm_f32(long long M, long long NN, long long K, const float* A, long long lda,
                                  const float* Bt, long long ldb, float* C, long long ci, long long cj, int par);  /* few_rows.h */
/* C = op(A) B for a few rows of op(A) and B stored plain, K x NN (an ONNX MatMul's weight, in x out):
   each output a sum over k in order, from 0, of A's element times B's row k (the axpy form), the
   columns in blocks split across the team where `par`, so each element's bits do not depend on
   the split. One gemv_n a row read all of B on one thread (OpenBLAS's form does not split without
   changing the bits: `lum_gemv_block`). The float32 one is few_rows.h's (vector types, FMAs). */
#define LUM_FEW_ROWS_NN(T, N) static void lum_few_rows_nn_##N(long long M, long long NN, long long K, const T* A, \
    long long sam, long long sak, const T* B, long long ldb, T* C, long long ldc, int par) { \
  _Pragma("omp parallel for num_threads(lum_threads) schedule(static) if (par)") \
  for (long long c0 = 0; c0 < NN; c0 += 64) { \
    const long long cn = lum_min(64, NN - c0); \
    for (long long i = 0; i < M; ++i) { \
      T acc[64] = {0}; \
      for (long long k = 0; k < K; ++k) { \
        const T x = A[i * sam + k * sak]; const T* b = B + k * ldb + c0; \
        _Pragma("omp simd") for (long long j = 0; j < cn; ++j) acc[j] += x * b[j]; } \
      for (long long j = 0; j < cn; ++j) C[i * ldc + c0 + j] = acc[j]; } } }
LUM_FEW_ROWS_NN(double, d)
static void lum_few_rows_nn_f32(long long M, long long NN, long long K, const float* A, long long sam, long long sak,
                                const float* B, long long ldb, float* C, long long ldc, int par);  /* few_rows.h */
/* M == 1 or N == 1 (one token's linear layers in decode) is a matrix-vector product: gemv reads
   the matrix once, where gemm packs it first (5x slower for a 1408 x 512 weight) */
/* Which SGEMM serves a call: luminal's own when it stands in front of the BLAS
   (sgemm.py), except for at most 16 rows times a transposed B (a linear layer over a few
   tokens, where B's transposition into panels costs more than the rows gain; the few-rows
   loops take most such calls first). From 17 rows luminal's, which a weight packed once
   (`lum_gemm_fw`) also runs: the same bits packed or not (README, "Weights packed once").
   Decided on the whole call, before any split into blocks, so every block of a call runs the
   same code and the bits never depend on the team's size. */
static inline lum_sgemm_fn lum_pick_sgemm(int tb, long long M) {
  return tb && M <= 16 && lum_sgemm_blas ? lum_sgemm_blas : lum_sgemm;
}
#define lum_pick_dgemm(tb, M) lum_dgemm
/* A matrix-vector product of at least 2^17 matrix elements (a 128 x 1536 layer: 10 us on one
   thread, its weight past one core's L2 beside the next layer's) split across the team by blocks
   of outputs, multiples of 16 (OpenBLAS called single-threaded; MKL threads its own): the block
   size, or 0 to run it whole. Only the dot-product form (each output a row of the matrix times
   the vector: a linear layer's transposed weight) is split: every output is then the same dot
   product in the same order whatever the split, so the bits do not depend on the team. The
   other form (the vector's elements times the matrix's rows, summed: OpenBLAS's gemv_n) rounds
   differently with the block's size (K = 2048: 14 of 203 outputs differed) and runs whole. */
static long long lum_gemv_block(long long outputs, long long K) {
  if (lum_blas_in_team || lum_threads <= 1 || outputs < 32 || outputs * K < (1LL << 17) || omp_in_parallel()) return 0;
  return ((outputs + lum_threads - 1) / lum_threads + 15) / 16 * 16;
}
/* Whether a GEMM runs split across the team in blocks of C: from 2^18 multiply-adds a thread (2^21
   at most), not inside a parallel region (`LUM_BLAS_GEMM`, `lum_gemm_fw`); and a block's extent:
   the team's share of `extent`, rounded up to a multiple of `unit` */
static inline int lum_gemm_splits(long long M, long long NN, long long K) {
  return lum_threads > 1 && M * NN * K >= lum_min(1LL << 21, (1LL << 18) * lum_threads) && !omp_in_parallel();
}
static inline long long lum_gemm_block(long long extent, int team, long long unit) {
  return ((extent + team - 1) / team + unit - 1) / unit * unit;
}
#define LUM_BLAS_GEMM(T, N, PICK, GEMV) \
static void lum_gemm_##N(int ta, int tb, long long M, long long NN, long long K, const T* A, long long lda, \
                         const T* B, long long ldb, T* C, long long ldc) { \
  const __typeof__(PICK(0, 0)) GEMM = PICK(tb, M); \
  if (M <= 4 && !tb && NN >= 32 && K >= 16 && (M > 1 || NN * K >= (1LL << 15)))  /* from 8 rows the GEMM \
      is as fast, on AVX2 faster (README) */ \
    lum_few_rows_nn_##N(M, NN, K, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, \
                        lum_threads > 1 && NN * K >= (1LL << 15) && !omp_in_parallel()); \
  else if (GEMV && M == 1 && !(sizeof(T) == 4 && lum_own_gemv && tb && !ta && NN >= 32 && K >= 16)) { \
    /* C[1 x N] = a . op(B): op(B)^T a, a's elements lda apart when transposed */ \
    const long long per = tb ? lum_gemv_block(NN, K) : 0; \
    if (per) {  /* op(B)^T = B's rows: block s0.. of them */ \
      _Pragma("omp parallel for num_threads(lum_threads) schedule(static)") \
      for (long long s0 = 0; s0 < NN; s0 += per) \
        GEMV(101, 111, lum_min(per, NN - s0), K, (T)1, B + s0 * ldb, ldb, A, ta ? lda : 1, (T)0, C + s0, 1); \
    } else GEMV(101, tb ? 111 : 112, tb ? NN : K, tb ? K : NN, (T)1, B, ldb, A, ta ? lda : 1, (T)0, C, 1); \
  } \
  else if (M <= (sizeof(T) == 4 ? 16 : 8) && tb && !ta && NN >= 32 && K >= 16)  /* faster than the BLAS's small-M sgemm */ \
    lum_few_rows_gemm_##N(M, NN, K, A, lda, B, ldb, C, ldc, 1, \
                          lum_threads > 1 && NN * K >= (1LL << 15) && !omp_in_parallel()); \
  else if (GEMV && M <= 4 && !lum_blas_in_team)  /* OpenBLAS: a row at a time (sgemm at M = 2 took 124 us, 2 gemv 36) */ \
    for (long long i = 0; i < M; ++i) \
      GEMV(101, tb ? 111 : 112, tb ? NN : K, tb ? K : NN, (T)1, B, ldb, A + i * (ta ? 1 : lda), ta ? lda : 1, (T)0, C + i * ldc, 1); \
  else if (GEMV && NN == 1) {  /* C[M x 1] = op(A) b */ \
    const long long per = ta ? 0 : lum_gemv_block(M, K); \
    if (per) {  /* A's rows: block s0.. of them */ \
      _Pragma("omp parallel for num_threads(lum_threads) schedule(static)") \
      for (long long s0 = 0; s0 < M; s0 += per) \
        GEMV(101, 111, lum_min(per, M - s0), K, (T)1, A + s0 * lda, lda, B, tb ? 1 : ldb, (T)0, C + s0 * ldc, ldc); \
    } else GEMV(101, ta ? 112 : 111, ta ? K : M, ta ? M : K, (T)1, A, lda, B, tb ? 1 : ldb, (T)0, C, ldc); \
  } \
  else if (!ta && NN >= 2 && NN <= 8 && K >= 16 && M >= 16) {  /* C^T = op(B)^T A^T: A's rows as B's */ \
    const int par_ = lum_threads > 1 && M * K >= (1LL << 15) && !omp_in_parallel();  /* A: the rows read once */ \
    if (tb) lum_few_rows_gemm_##N(NN, M, K, B, ldb, A, lda, C, 1, ldc, par_); \
    else {  /* B's NN columns as rows: a small copy */ \
      T* bt = (T*)malloc(sizeof(T) * NN * K); \
      for (long long k = 0; k < K; ++k) for (long long j = 0; j < NN; ++j) bt[j * K + k] = B[k * ldb + j]; \
      lum_few_rows_gemm_##N(NN, M, K, bt, K, A, lda, C, 1, ldc, par_); \
      free(bt); } \
  } \
  else if (GEMM && (NN >= 32 || M >= 64) && lum_gemm_splits(M, NN, K)) { \
    /* The BLAS (or luminal's SGEMM) single-threaded on blocks of C (multiples of 16), one \
       per thread of the loops' team, from 2^18 multiply-adds per thread (2^21 at most). MKL too: \
       in the team's region it runs on its calling thread, faster than its own threads (README), \
       and its bits do not depend on the blocks. A loop over the blocks, so every block is computed \
       whatever team OpenMP gives. Blocks of columns, or of rows when there are more rows than \
       columns (each thread packs its block of one operand and all of the other: rows copy A \
       once in all; ResNet50's 7x7 stage, 512 x 49 x 4608, read all of A per thread) */ \
    const int team = lum_threads, by_rows = M > NN; \
    const long long extent = by_rows ? M : NN; \
    const long long per = lum_gemm_block(extent, team, 16), n_blocks = (extent + per - 1) / per; \
    _Pragma("omp parallel for num_threads(team) schedule(static)") \
    for (long long blk = 0; blk < n_blocks; ++blk) { \
      const long long s0 = blk * per, w = lum_min(per, extent - s0); \
      const int mkl_ = lum_mkl_one(); \
      if (by_rows) \
        GEMM(101, ta ? 112 : 111, tb ? 112 : 111, w, NN, K, (T)1, A + (ta ? s0 : s0 * lda), lda, B, ldb, (T)0, \
             C + s0 * ldc, ldc); \
      else \
        GEMM(101, ta ? 112 : 111, tb ? 112 : 111, M, w, K, (T)1, A, lda, B + (tb ? s0 * ldb : s0), ldb, (T)0, \
             C + s0, ldc); \
      lum_mkl_restore(mkl_); } \
  } \
  else if (GEMM) GEMM(101, ta ? 112 : 111, tb ? 112 : 111, M, NN, K, (T)1, A, lda, B, ldb, (T)0, C, ldc); \
  else lum_loop_gemm_##N(ta, tb, M, NN, K, A, lda, B, ldb, C, ldc); \
}
#define lum_loop_gemm_f32 lum_loop_gemm_f
LUM_BLAS_GEMM(float, f32, lum_pick_sgemm, lum_sgemv)
LUM_BLAS_GEMM(double, d, lum_pick_dgemm, lum_dgemv)
/* set_precision("float64") (the call's `precision` argument; thread-local: the GEMMs run on the
   calling thread): f32 GEMMs accumulate in double and round once, as the NumPy runtime's. A
   matrix-vector product is a double-accumulating loop over the f32 values (memory-bound: as fast
   as sgemv); a GEMM widens its operands and calls dgemm. */
static double* lum_widen(long long rows, long long cols, const float* X, long long ld) {
  /* the stored matrix X (rows x cols, rows ld apart) as a contiguous double matrix: streaming reads */
  double* w = (double*)malloc(sizeof(double) * lum_max(1, rows * cols));
  #pragma omp parallel for if (rows * cols >= 262144)
  for (long long r = 0; r < rows; ++r)
    for (long long c = 0; c < cols; ++c) w[r * cols + c] = (double)X[r * ld + c];
  return w;
}
static void lum_gemm_f(int ta, int tb, long long M, long long N, long long K, const float* A, long long lda,
                       const float* B, long long ldb, float* C, long long ldc) {
  if (!lum_f64) { lum_gemm_f32(ta, tb, M, N, K, A, lda, B, ldb, C, ldc); return; }
  if (M == 1 || N == 1 || !lum_dgemm) {  /* dot products over contiguous or strided rows of op(A), op(B) */
    const long long sak = ta ? lda : 1, sam = ta ? 1 : lda, sbk = tb ? 1 : ldb, sbn = tb ? ldb : 1;
    const long long nq = sak == 1 && sbk == 1 ? N / 4 : 0;  /* column quads of contiguous rows */
    #pragma omp parallel for collapse(2) if (M * N * K >= 262144)
    for (long long i = 0; i < M; ++i)
      for (long long q = 0; q < nq; ++q) {  /* 4 dots at once: a[k] loaded once, 4 independent sums */
        const float* a = A + i * sam; const float* b = B + 4 * q * sbn;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        #pragma omp simd reduction(+:s0, s1, s2, s3)
        for (long long k = 0; k < K; ++k) {
          const double x = (double)a[k];
          s0 += x * (double)b[k]; s1 += x * (double)b[sbn + k]; s2 += x * (double)b[2 * sbn + k]; s3 += x * (double)b[3 * sbn + k];
        }
        float* c = C + i * ldc + 4 * q;
        c[0] = (float)s0; c[1] = (float)s1; c[2] = (float)s2; c[3] = (float)s3;
      }
    #pragma omp parallel for collapse(2) if (M * (N - 4 * nq) * K >= 262144)
    for (long long i = 0; i < M; ++i)
      for (long long j = 4 * nq; j < N; ++j) {
        const float* a = A + i * sam; const float* b = B + j * sbn;
        double acc = 0;
        if (sak == 1 && sbk == 1) {
          #pragma omp simd reduction(+:acc)
          for (long long k = 0; k < K; ++k) acc += (double)a[k] * (double)b[k];
        } else {
          for (long long k = 0; k < K; ++k) acc += (double)a[k * sak] * (double)b[k * sbk];
        }
        C[i * ldc + j] = (float)acc;
      }
    return;
  }
  double* a = ta ? lum_widen(K, M, A, lda) : lum_widen(M, K, A, lda);  /* as stored; dgemm transposes */
  double* b = tb ? lum_widen(N, K, B, ldb) : lum_widen(K, N, B, ldb);
  double* c = (double*)malloc(sizeof(double) * M * N);
  lum_gemm_d(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, c, N);
  for (long long i = 0; i < M; ++i) for (long long j = 0; j < N; ++j) C[i * ldc + j] = (float)c[i * N + j];
  free(a); free(b); free(c);
}
#define lum_gemm_i lum_loop_gemm_i
#define lum_gemm_ll lum_loop_gemm_ll
/* Weights packed once: a GEMM whose B is a weight stored in the graph (a linear layer's), with
   luminal's SGEMM in front of the BLAS, reads B from panels packed on the runtime's first
   call instead of packing (transposing) it every call: the table (`lum_pack_table`, one per
   runtime, CpuRuntime.pack_weights) maps the weight's address and view to its panels. The
   table's entries, 8 words: address, N, K, ldb, tb, panels, state (0 free, 1 being packed, 2
   ready, 3 failed); after them, the count of entries claimed, which tells the frontend that
   owns the weights which ones to watch (`weight_watch.py`). A thread finding an entry
   being packed computes this call unpacked; the frontend replaces the table when a packed weight
   changes in place. NULL: unpacked. */
static const float* lum_packed_weight(int tb, long long N, long long K, const float* B, long long ldb) {
  long long* const t = lum_pack_table;
  const long long n = lum_pack_entries, key = (long long)(uintptr_t)B;
  if (!t || n <= 0 || !lum_own_pack_b) return NULL;
  const unsigned long long h = ((unsigned long long)key >> 6) * 0x9E3779B97F4A7C15ULL;
  for (long long probe = 0; probe < n; ++probe) {
    long long* const e = t + 8 * (long long)((h + (unsigned long long)probe) % (unsigned long long)n);
    long long seen = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
    if (seen == 0) {
      long long expected = 0;
      if (__atomic_compare_exchange_n(&e[0], &expected, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(&t[8 * n], 1, __ATOMIC_RELEASE);  /* the entries claimed (`packed_generation`) */
        e[1] = N; e[2] = K; e[3] = ldb; e[4] = tb;
        const size_t bytes = ((size_t)((N + 31) / 32 * 32 * K) * sizeof(float) + 63) / 64 * 64;  /* 32: NR, the panels' width */
        float* p = (float*)aligned_alloc(64, bytes);
        if (p) lum_own_pack_b(tb ? 112 : 111, N, K, B, ldb, p);
        e[5] = (long long)(uintptr_t)p;
        __atomic_store_n(&e[6], p ? 2 : 3, __ATOMIC_RELEASE);
        return p;
      }
      seen = expected;
    }
    if (seen != key) continue;
    if (__atomic_load_n(&e[6], __ATOMIC_ACQUIRE) != 2) return NULL;  /* being packed, or failed */
    if (e[1] == N && e[2] == K && e[3] == ldb && e[4] == tb) return (const float*)(uintptr_t)e[5];
    /* the same address in another view: its own entry further on */
  }
  return NULL;  /* the table is full */
}
/* lum_gemm_f for a B that is a stored weight read in place (`stored`; not a copy the kernel made):
   from its packed panels where lum_packed_weight gives them and the call would run luminal's
   SGEMM anyway (from 32 columns; from 17 rows, or from 5 where B is not transposed: below, the
   few-rows loops and the BLAS; not at precision "float64"), split across the team as lum_gemm_f
   splits it (columns in multiples of the panels' 32); the same bits as lum_gemm_f. A few rows
   gain most: read in place, B's K rows are as many strided streams from memory (README). */
static void lum_gemm_fw(int stored, int ta, int tb, long long M, long long NN, long long K, const float* A, long long lda,
                        const float* B, long long ldb, float* C, long long ldc) {
  const float* bp = NULL;
  if (stored && !lum_f64 && lum_own_packed && lum_sgemm_blas && (M > 16 || (!tb && M > 4)) && NN >= 32 && K >= 16)
    bp = lum_packed_weight(tb, NN, K, B, ldb);
  if (!bp) { lum_gemm_f(ta, tb, M, NN, K, A, lda, B, ldb, C, ldc); return; }
  const int team = lum_threads, by_rows = M > NN;
  if (lum_gemm_splits(M, NN, K)) {
    const long long extent = by_rows ? M : NN;
    const long long per = lum_gemm_block(extent, team, by_rows ? 16 : 32), n_blocks = (extent + per - 1) / per;
    #pragma omp parallel for num_threads(team) schedule(static)
    for (long long blk = 0; blk < n_blocks; ++blk) {
      const long long s0 = blk * per, w = lum_min(per, extent - s0);
      const float* a = by_rows ? A + (ta ? s0 : s0 * lda) : A;
      if (by_rows ? lum_own_packed(ta ? 112 : 111, w, NN, K, a, lda, bp, C + s0 * ldc, ldc)
                  : lum_own_packed(ta ? 112 : 111, M, w, K, A, lda, bp + s0 * K, C + s0, ldc))
        lum_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, by_rows ? w : M, by_rows ? NN : w, K, 1.0f, a, lda,
                  by_rows ? B : B + (tb ? s0 * ldb : s0), ldb, 0.0f, by_rows ? C + s0 * ldc : C + s0, ldc);
    }
  } else if (lum_own_packed(ta ? 112 : 111, M, NN, K, A, lda, bp, C, ldc))
    lum_sgemm(101, ta ? 112 : 111, tb ? 112 : 111, M, NN, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}
/* exp(x) for x in [-87, 0], its result a normal float, in under 1 ulp: x = n ln2 + r (Cody-Waite's
   two-part ln2, n rounded by adding and taking 1.5 * 2^23), exp(r) by Cephes expf's degree-6
   polynomial, 2^n as the exponent field. Inline, so an `omp simd` loop vectorizes it without a
   call: glibc's vector expf saves and restores every vector register (attention_gemm.py). */
static inline float lum_expf_nonpos(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f; p = p * r + 8.3334519073E-3f; p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f; p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  const int e = ((int)n + 127) << 23;
  float two_n; memcpy(&two_n, &e, 4);
  return p * two_n;
}
