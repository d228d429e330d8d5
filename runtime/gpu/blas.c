/*
 * blas.c — matmul: cuBLAS on a GPU, sflow's GEMM and OpenBLAS on the CPU.
 *
 * matmul(a, b, m, k, n) multiplies a row-major m×k matrix by a row-major
 * k×n one into a new m×n array.  On the CPU f32 products run on gemm.c
 * (the same bits on every CPU) unless SFLOW_BLAS=openblas or a library
 * is named; f64 ones, and those, on the library: OpenBLAS, or MKL when
 * SFLOW_BLAS=mkl asks for it (blas_init).  Key design choice: both BLAS libraries
 * are dlopen'ed at the first matmul, like the CUDA libraries, so a
 * compiled program links nothing but libc and starts on any machine (a GPU
 * node without OpenBLAS, a CPU box without CUDA).  When no CBLAS loads,
 * the CPU path is a plain reference loop, after a one-line notice.
 *
 * cuBLAS is column-major; a row-major C = A·B is the column-major
 * Cᵀ = Bᵀ·Aᵀ, so the call passes B first with no transposes.  TF32 tensor
 * cores are used for f32 only when SFLOW_ALLOW_TF32=1 asks for them.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);

static struct {
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  const char *name;
  void (*set_threads)(int); /* openblas_set_num_threads or MKL's; NULL for others */
  bool env_threads;         /* OPENBLAS_NUM_THREADS / MKL_NUM_THREADS set: never override */
  int64_t align;            /* row blocks' edges (gemm_split); 0: this library is never split */
  const char *core;         /* OpenBLAS's kernel (openblas_get_corename), or "" */
  _Atomic int64_t blocks;   /* the unit test's block count; 0: the pool's size */
  _Atomic int64_t splits;   /* products split so far (the unit test's witness) */
  _Atomic uint64_t ways_seen; /* bit w: a split ran on w threads (SFLOW_BLAS_STATS) */
  int lib_threads;          /* the threads each library call starts (>1: env_threads) */
  pthread_mutex_t lib_mu;   /* one threaded library call at a time (gemm_split) */
  bool sflow;               /* f32 products by sflow's own GEMM (gemm.c), not the library */
  _Atomic int64_t in_lib, most_in_lib; /* threaded calls in flight, and the most at once */
} B = {.lib_threads = 1, .lib_mu = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* The row blocks' alignment on the kernels where splitting a product
 * into blocks of C's rows was measured bitwise the one unsplit call:
 * OpenBLAS 0.3.21's x86-64 kernels below (bench/nn/blas_split.c, every
 * transpose pair, beta 0 and 1, 2 to 4 blocks, the encoder's, the MLP's
 * and odd shapes; docs/performance.md, "Splitting a product over the
 * pool").  OpenBLAS computes row-major C as the column-major Cᵀ, so C's
 * rows are the kernel's columns: the driver hands the kernel groups of
 * 3 × unroll_n of them and the kernel works through 12, 8, 4, ... at a
 * time, each width summing over k in an order of its own.  A block edge
 * on a multiple of 48 (of every core's 3 × unroll_n: 6, 12, 24) leaves
 * every row in the same group and width as in the one call.  Any other
 * library, version or kernel is never split: no such measurement says it
 * holds there: MKL, other versions, and 0.3.21's Opteron, Opteron_SSE3,
 * Bulldozer, Piledriver, Steamroller and Excavator kernels (3DNow! and
 * FMA4: they stop on the measuring machine's CPU with an illegal
 * instruction).  blas_init reads the kernel OpenBLAS chose,
 * OPENBLAS_CORETYPE included. */
static const char *const split_cores[] = {
    "Haswell", "Zen", "SkylakeX", "Cooperlake", "Sandybridge", "Prescott", "Nehalem",
    "Core2", "Atom", "Penryn", "Dunnington", "Barcelona", "Nano", "Bobcat"};

static int64_t split_align(void *h) {
  char *(*config)(void) = (char *(*)(void))dlsym(h, "openblas_get_config");
  char *(*corename)(void) = (char *(*)(void))dlsym(h, "openblas_get_corename");
  if (!config || !corename)
    return 0;
  B.core = corename();
  if (!B.core || strncmp(config(), "OpenBLAS 0.3.21 ", 16) != 0)
    return 0;
  for (size_t i = 0; i < sizeof split_cores / sizeof *split_cores; i++)
    if (strcmp(B.core, split_cores[i]) == 0)
      return 48;
  return 0;
}

/* Tells a loaded BLAS how many threads it may use: one.  --threads bounds
 * the whole program, products included, and a big product is split over
 * the pool by gemm_split below, the library running single-threaded in
 * each block: one team of threads for the products and the elementwise
 * passes between them, as torch's OpenMP, where OpenBLAS's own workers
 * beside the pool's had main wait for its woken worker (sched_yield, 10%
 * of an encoder step at --threads 2) and cleared C for beta 0 on one
 * thread.  An explicit OPENBLAS_NUM_THREADS or MKL_NUM_THREADS still
 * wins, and then the library threads itself and nothing is split.
 * OpenBLAS and MKL otherwise start one thread per core of their own. */
static void blas_threads(void *h) {
  void (*set)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  if (set) {
    B.set_threads = set;
    B.env_threads = getenv("OPENBLAS_NUM_THREADS") != NULL;
  } else if ((set = (void (*)(int))dlsym(h, "MKL_Set_Num_Threads"))) {
    B.set_threads = set;
    B.env_threads = getenv("MKL_NUM_THREADS") != NULL;
  }
  int (*get)(void) = (int (*)(void))dlsym(h, "openblas_get_num_threads");
  if (!get)
    get = (int (*)(void))dlsym(h, "MKL_Get_Max_Threads");
  if (B.env_threads && get && get() > 1)
    B.lib_threads = get();
  if (B.set_threads && !B.env_threads) {
    B.set_threads(1);
    B.align = split_align(h);
  }
}

/* OpenBLAS's worker threads, after each product, keep polling for the
 * next one with sched_yield for 2^28 cycles (about 0.1 s) before they
 * sleep: between two products of a training step they never sleep, and
 * on 2 cores the polling worker took the core from the pool's threads
 * running the elementwise passes (15% of the samples of an encoder step
 * at --threads 2 were its yields and the context switches they cost).
 * 2^4 cycles, the least OpenBLAS takes, makes it sleep at once; the next
 * product wakes it through a condition variable, a few microseconds
 * beside a product of milliseconds (docs/performance.md, "std.nn beside
 * PyTorch").  MKL's Intel OpenMP threads do the same for 200 ms
 * (KMP_BLOCKTIME); 0 makes them sleep at once (at --threads 2 the
 * encoder step's CPU time fell 17%), set only when SFLOW_BLAS asks for
 * MKL, so children using Intel's OpenMP otherwise are left alone.  Both
 * libraries read the variables when they load, so this runs from main
 * before any thread exists (setenv is not safe later), and a value the
 * user set wins. */
void sf__blas_env(void) {
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  const char *e = getenv("SFLOW_BLAS");
  if (e && strstr(e, "mkl"))
    setenv("KMP_BLOCKTIME", "0", 0);
}

/* The libraries tried, in order: OpenBLAS by default (Debian main), then
 * Intel's MKL (libmkl_rt, Debian non-free) only where no OpenBLAS is
 * installed, then any reference CBLAS.  SFLOW_BLAS names one library to
 * load instead (a path or a soname); SFLOW_BLAS=mkl is short for MKL's
 * libmkl_rt, which is faster per FLOP on Intel CPUs (docs/performance.md). */
static void blas_init(void) {
  static const char *const libs[][2] = {
      {"libopenblas.so.0", "OpenBLAS"}, {"libopenblas.so", "OpenBLAS"},
      {"libmkl_rt.so.2", "MKL"},        {"libmkl_rt.so.3", "MKL"},
      {"libmkl_rt.so", "MKL"},
      {"libcblas.so.3", "CBLAS"},       {"libblas.so.3", "BLAS"},
  };
  const char *e = getenv("SFLOW_BLAS");
  /* auto (or unset) and sflow: f32 products by gemm.c, so their bits are
   * the same on every CPU and under every OPENBLAS_CORETYPE (f64 ones by
   * the library); gemm.c runs the encoder's shapes at OpenBLAS's speed
   * (docs/performance.md, "sflow's own GEMM").  openblas (or a library
   * named): every product by the library. */
  B.sflow = !e || !*e || strcmp(e, "sflow") == 0 || strcmp(e, "auto") == 0;
  if (e && (strcmp(e, "sflow") == 0 || strcmp(e, "openblas") == 0 || strcmp(e, "auto") == 0))
    e = NULL;
  if (e && strcmp(e, "mkl") == 0)
    e = "libmkl_rt.so.2";
  for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
    const char *path = e && *e ? e : libs[i][0];
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && e && strcmp(e, "libmkl_rt.so.2") == 0) /* oneMKL 2025 on is .so.3 */
      h = dlopen("libmkl_rt.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h && e && strcmp(e, "libmkl_rt.so.2") == 0)
      h = dlopen("libmkl_rt.so", RTLD_NOW | RTLD_LOCAL);
    if (h) {
      B.sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
      B.dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
      if (B.sgemm && B.dgemm) {
        B.name = e && *e ? (strstr(e, "mkl") ? "MKL" : e) : libs[i][1];
        blas_threads(h);
        return;
      }
      dlclose(h);
    }
    if (e && *e)
      break;
  }
  B.sgemm = NULL;
  B.dgemm = NULL;
  B.name = "reference";
  if (!sf__options.quiet) {
    static const char msg[] = "sflow: no CBLAS library found (install libopenblas0); matmul uses a slow reference loop\n";
    char named[512];
    int len = e && *e ? snprintf(named, sizeof named, "sflow: SFLOW_BLAS=%s does not load as a "
                                 "CBLAS library; matmul uses a slow reference loop\n", getenv("SFLOW_BLAS"))
                      : 0;
    if (len > 0 && (size_t)len < sizeof named)
      (void)sf__out_write(2, named, (size_t)len);
    else
      (void)sf__out_write(2, msg, sizeof msg - 1);
  }
}

/* SFLOW_BLAS_STATS=1: one line on stderr at exit, for the tests that
 * check how products were split (tests/runtime/group_split_test.py): the
 * library, its kernel, the row alignment (0: never split), the products
 * split and the thread counts they ran on. */
static void blas_stats(void) {
  char ways[200] = "";
  size_t at = 0;
  for (int w = 1; w < 64 && at + 8 < sizeof ways; w++)
    if (B.ways_seen >> w & 1)
      at += (size_t)snprintf(ways + at, sizeof ways - at, "%s%d", at ? "," : "", w);
  fprintf(stderr, "sflow-blas-stats: library=%s core=%s align=%" PRId64 " splits=%" PRId64
          " ways=%s lib_threads=%d most_at_once=%" PRId64 " sgemm=%s\n", B.name ? B.name : "none",
          B.core && *B.core ? B.core : "-", B.align, (int64_t)B.splits, at ? ways : "-",
          B.lib_threads, (int64_t)B.most_in_lib, sf__blas_sgemm());
}

__attribute__((constructor)) static void blas_stats_hook(void) {
  const char *e = getenv("SFLOW_BLAS_STATS");
  if (e && *e && strcmp(e, "0"))
    atexit(blas_stats);
}

/* The test's block count (blocks > 0 sets it; 0 goes back to the pool's
 * size); returns the previous setting. */
int64_t sf__blas_split_blocks(int64_t blocks) {
  pthread_once(&blas_once, blas_init);
  int64_t was = B.blocks;
  if (blocks >= 0)
    B.blocks = blocks;
  return was;
}

int64_t sf__blas_splits(void) { return B.splits; }
int64_t sf__blas_split_align(void) {
  pthread_once(&blas_once, blas_init);
  return B.align;
}

const char *sf__blas_core(void) {
  pthread_once(&blas_once, blas_init);
  return B.core && *B.core ? B.core : "-";
}

/* ------------------------------------------------ products over the pool
 *
 * A big product is cut into blocks of C's rows, each block one call of
 * the single-threaded library, and the blocks run on the pool.  Two
 * things are kept apart, so that no value depends on timing:
 *  - where the blocks' edges are: a function of the shape and --threads
 *    alone (split_rows), on multiples of the kernel's alignment, and
 *    only where every block is bitwise its rows of the one call;
 *  - how many threads run them at once (gemm_split's ways): --threads
 *    shared among the group members in this process (sched's
 *    sf__group_members_here), so members multiplying at once do not
 *    oversubscribe the cores.  A restored member counts as a fresh one:
 *    both are counted when the runtime places them, not in their init.
 * So a run, its --resume and the run at another --threads give the same
 * bits (the resume and fixture tests compare them).  Only rows are cut:
 * a block of C's columns changes the kernel's row blocking (OpenBLAS's
 * P blocks, halved when m is under 2P), which moved values by an ulp in
 * the measurements; a block of rows re-packs B, which is O(k·n) beside
 * the block's O(rows·k·n). */
#define GEMM_SPLIT_BLOCK_MNK (1 << 23) /* every block's multiply-adds at least */
#define GEMM_SPLIT_MAX_ROWS 40960      /* under every measured kernel's GEMM_R */

/* The rows per block for an m×n×k product, or 0 for one call.  Every
 * block, the last (shortest) included, does at least 2^23 multiply-adds:
 * OpenBLAS takes other paths for small products (its AVX-512 "direct"
 * sgemm below 28·512² for row-major beta-0 products without transposes,
 * whichever kernel was forced; the small-matrix kernels), and a block on
 * another path than the whole is not its rows of the whole.  C's rows
 * stay under every measured kernel's GEMM_R, whose column panels would
 * otherwise start off the alignment. */
static int64_t split_rows(int64_t m, int64_t n, int64_t k) {
  int64_t align = B.align, blocks = B.blocks > 0 ? B.blocks : sf__pool_size();
  if (align == 0 || m > GEMM_SPLIT_MAX_ROWS || m * n * k < 2 * GEMM_SPLIT_BLOCK_MNK)
    return 0;
  for (; blocks >= 2; blocks--) {
    int64_t per = ((m + blocks - 1) / blocks + align - 1) / align * align;
    int64_t last = m - (m - 1) / per * per;
    if (per < m && last >= align && last * n * k >= GEMM_SPLIT_BLOCK_MNK)
      return per;
  }
  return 0;
}

typedef struct {
  bool f64, ta, tb;
  int64_t m, n, k, lda, ldb, ldc, per, blocks, ways;
  float alpha, beta;
  const void *a, *b;
  void *c;
} gemm_split_job;

/* Rows [r0, r1) of C: of A's too. */
static void gemm_rows(const gemm_split_job *j, int64_t r0, int64_t r1) {
  int64_t size = j->f64 ? 8 : 4;
  const char *a = (const char *)j->a + size * (j->ta ? r0 : r0 * j->lda);
  char *c = (char *)j->c + size * r0 * j->ldc;
  int m = (int)(r1 - r0);
  int ta = j->ta ? CBLAS_TRANS : CBLAS_NO_TRANS, tb = j->tb ? CBLAS_TRANS : CBLAS_NO_TRANS;
  if (j->f64)
    B.dgemm(CBLAS_ROW_MAJOR, ta, tb, m, (int)j->n, (int)j->k, j->alpha, (const double *)a,
            (int)j->lda, (const double *)j->b, (int)j->ldb, j->beta, (double *)c, (int)j->ldc);
  else
    B.sgemm(CBLAS_ROW_MAJOR, ta, tb, m, (int)j->n, (int)j->k, j->alpha, (const float *)a,
            (int)j->lda, (const float *)j->b, (int)j->ldb, j->beta, (float *)c, (int)j->ldc);
}

/* Threads [lo, hi) of the split: thread t runs blocks [t·blocks/ways,
 * (t+1)·blocks/ways), one library call each. */
static void gemm_blocks(void *ctx, int64_t lo, int64_t hi) {
  const gemm_split_job *j = ctx;
  for (int64_t b = lo * j->blocks / j->ways; b < hi * j->blocks / j->ways; b++) {
    int64_t r0 = b * j->per, r1 = r0 + j->per < j->m ? r0 + j->per : j->m;
    gemm_rows(j, r0, r1);
  }
}

/* The library's product, split over the pool when split_rows says so
 * (alpha and beta are exact in float as the callers pass them: 1 and 0
 * or 1). */
static void gemm_split(gemm_split_job *j) {
  j->per = split_rows(j->m, j->n, j->k);
  if (j->per == 0 && B.lib_threads > 1) {
    /* The user's OPENBLAS_NUM_THREADS (or MKL_NUM_THREADS) threads every
     * call: two tasks' products at once would run two teams on the same
     * cores, each spinning for the other's (exec_blas_async, issue 34).
     * One call at a time keeps the threads at the user's count; a call
     * is the same call whoever waits, so the bits do not change. */
    pthread_mutex_lock(&B.lib_mu);
    int64_t now = atomic_fetch_add(&B.in_lib, 1) + 1;
    if (now > B.most_in_lib)
      B.most_in_lib = now;
    gemm_rows(j, 0, j->m);
    atomic_fetch_sub(&B.in_lib, 1);
    pthread_mutex_unlock(&B.lib_mu);
    return;
  }
  if (j->per == 0) {
    gemm_rows(j, 0, j->m);
    return;
  }
  j->blocks = (j->m + j->per - 1) / j->per;
  int64_t members = sf__group_members_here();
  int64_t ways = sf__pool_size() / (members > 1 ? members : 1);
  j->ways = ways < 1 ? 1 : ways < j->blocks ? ways : j->blocks;
  atomic_fetch_add_explicit(&B.splits, 1, memory_order_relaxed);
  atomic_fetch_or_explicit(&B.ways_seen, 1ull << (j->ways < 63 ? j->ways : 63),
                           memory_order_relaxed);
  if (j->ways == 1)
    gemm_blocks(j, 0, 1);
  else
    sf__parallel_for(j->ways, 1, gemm_blocks, j);
}

const char *sf__blas_name(void) {
  pthread_once(&blas_once, blas_init);
  return B.name;
}

const char *sf__blas_sgemm(void) {
  pthread_once(&blas_once, blas_init);
  if (!B.sflow)
    return B.sgemm ? B.name : "reference";
  return sf__gemm_isa();
}

/* sflow's GEMM over the threads gemm_split would use: --threads shared
 * among the group members here (or the unit test's block count); any
 * split gives the same bits, so only the speed depends on it. */
static void sgemm_sflow(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                        float *c, int64_t ldc) {
  int64_t members = sf__group_members_here();
  int64_t ways = B.blocks > 0 ? B.blocks : sf__pool_size() / (members > 1 ? members : 1);
  int64_t used = sf__gemm_sflow(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                                ways < 1 ? 1 : ways);
  if (used > 1) {
    atomic_fetch_add_explicit(&B.splits, 1, memory_order_relaxed);
    atomic_fetch_or_explicit(&B.ways_seen, 1ull << (used < 63 ? used : 63),
                             memory_order_relaxed);
  }
}

/* The reference: i-k-j order so the inner loop streams rows of b and c. */
#define REF_GEMM(T)                                                          \
  static void ref_##T(const T *a, const T *b, T *c, int64_t m, int64_t k,   \
                      int64_t n) {                                           \
    memset(c, 0, (size_t)(m * n) * sizeof(T));                               \
    for (int64_t i = 0; i < m; i++)                                          \
      for (int64_t p = 0; p < k; p++) {                                      \
        T x = a[i * k + p];                                                  \
        for (int64_t j = 0; j < n; j++)                                      \
          c[i * n + j] += x * b[p * n + j];                                  \
      }                                                                      \
  }
REF_GEMM(float)
REF_GEMM(double)

void sf__gemm_cpu(bool f64, const void *a, const void *b, void *c, int64_t m, int64_t k,
                  int64_t n) {
  pthread_once(&blas_once, blas_init);
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    memset(c, 0, (size_t)(m * n) * (f64 ? 8 : 4));
    return;
  }
  bool fits = m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX;
  if (f64) {
    if (B.dgemm && fits)
      gemm_split(&(gemm_split_job){.f64 = true, .m = m, .n = n, .k = k, .lda = k, .ldb = n,
                                   .ldc = n, .alpha = 1.0f, .beta = 0.0f, .a = a, .b = b, .c = c});
    else
      ref_double(a, b, c, m, k, n);
  } else if (B.sflow) {
    sgemm_sflow(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  } else {
    if (B.sgemm && fits)
      gemm_split(&(gemm_split_job){.m = m, .n = n, .k = k, .lda = k, .ldb = n, .ldc = n,
                                   .alpha = 1.0f, .beta = 0.0f, .a = a, .b = b, .c = c});
    else
      ref_float(a, b, c, m, k, n);
  }
}

/* The general single-precision form for the nn layer (runtime/nn/):
 * C = alpha op(A) op(B) + beta C, row-major, op a transpose when ta/tb
 * is set, with leading dimensions, so a transposed view (Linear's
 * weightᵀ, the backward pass's Aᵀ·G) multiplies without a copy.  beta 0
 * overwrites C (NaNs there do not survive, as BLAS specifies). */
static void ref_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; i++) {
    float *ci = c + i * ldc;
    for (int64_t j = 0; j < n; j++)
      ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
    for (int64_t p = 0; p < k; p++) {
      float x = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      if (tb)
        for (int64_t j = 0; j < n; j++)
          ci[j] += x * b[j * ldb + p];
      else
        for (int64_t j = 0; j < n; j++)
          ci[j] += x * b[p * ldb + j];
    }
  }
}

void sf__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  pthread_once(&blas_once, blas_init);
  if (m == 0 || n == 0)
    return;
  if (B.sflow) {
    sgemm_sflow(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  bool fits = m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX;
  if (B.sgemm && fits && k > 0)
    gemm_split(&(gemm_split_job){.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                                 .ldb = ldb, .ldc = ldc, .alpha = alpha, .beta = beta, .a = a,
                                 .b = b, .c = c});
  else
    ref_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ----------------------------------------------------------- cuBLAS */

typedef void *cublasHandle_t;
enum { CUBLAS_OP_N = 0, CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
static struct {
  bool ok;
  char why[512];
  char path[512]; /* the file loaded (libs.c) */
  int (*create)(cublasHandle_t *);
  int (*mode)(cublasHandle_t, int);
  pthread_mutex_t mu;
  cublasHandle_t h[16]; /* per device: a handle belongs to the device it was made on */
  int (*sgemm)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,
               const float *, int, const float *, float *, int);
  int (*dgemm)(cublasHandle_t, int, int, int, int, int, const double *, const double *, int,
               const double *, int, const double *, double *, int);
  void *lib; /* for the entry points the nn layer resolves at first use */
} CB = {.mu = PTHREAD_MUTEX_INITIALIZER};
static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;

static void cublas_init(void) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
  static const char *const companions[] = {"libcublasLt.so.*", NULL};
  /* SFLOW_CUBLAS: another cuBLAS (the host emulator, tests/gpu/emu); libs.c searches */
  void *h = sf__cuda_lib_open("SFLOW_CUBLAS", names, companions, CB.path, sizeof CB.path, CB.why,
                              sizeof CB.why);
  if (!h)
    return;
  int (*create)(cublasHandle_t *) = (int (*)(cublasHandle_t *))dlsym(h, "cublasCreate_v2");
  int (*mode)(cublasHandle_t, int) = (int (*)(cublasHandle_t, int))dlsym(h, "cublasSetMathMode");
  *(void **)&CB.sgemm = dlsym(h, "cublasSgemm_v2");
  *(void **)&CB.dgemm = dlsym(h, "cublasDgemm_v2");
  if (!create || !CB.sgemm || !CB.dgemm) {
    snprintf(CB.why, sizeof CB.why, "cuBLAS could not start");
    return;
  }
  CB.create = create;
  CB.mode = mode;
  CB.lib = h;
  CB.ok = true;
}

void sf__cublas_describe(char *out, size_t n) {
  pthread_once(&cublas_once, cublas_init);
  if (!CB.ok) {
    snprintf(out, n, "no cuBLAS: %s", CB.why);
    return;
  }
  int (*prop)(int, int *) = (int (*)(int, int *))dlsym(CB.lib, "cublasGetProperty");
  int v[3] = {0, 0, 0}; /* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL */
  for (int i = 0; prop && i < 3; i++)
    prop(i, &v[i]);
  snprintf(out, n, "cuBLAS %d.%d.%d from %s", v[0], v[1], v[2], CB.path);
}

/* The cuBLAS handle of this thread's device, made at its first use. */
static cublasHandle_t handle(void) {
  int32_t k = sf__gpu_current_device();
  if (k < 0 || k >= 16)
    return NULL;
  pthread_mutex_lock(&CB.mu);
  if (!CB.h[k] && CB.create(&CB.h[k]) == 0 && CB.mode) {
    const char *tf = getenv("SFLOW_ALLOW_TF32");
    CB.mode(CB.h[k], tf && *tf && strcmp(tf, "0") ? CUBLAS_TF32_TENSOR_OP_MATH
                                                  : CUBLAS_DEFAULT_MATH);
  }
  cublasHandle_t h = CB.h[k];
  pthread_mutex_unlock(&CB.mu);
  return h;
}

static bool gemm_gpu(bool f64, sf_array *a, sf_array *b, sf_array *c, int64_t m, int64_t k,
                     int64_t n, const sf_loc *loc) {
  pthread_once(&cublas_once, cublas_init);
  cublasHandle_t h = CB.ok ? handle() : NULL;
  if (!h || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return false;
  uint64_t pa = sf__gpu_device_copy(a, loc), pb = sf__gpu_device_copy(b, loc);
  uint64_t pc = sf__gpu_device_alloc(c, loc);
  int rc;
  if (f64) {
    const double one = 1, zero = 0;
    rc = CB.dgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                  (const double *)(uintptr_t)pb, (int)n, (const double *)(uintptr_t)pa, (int)k,
                  &zero, (double *)(uintptr_t)pc, (int)n);
  } else {
    const float one = 1, zero = 0;
    rc = CB.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                  (const float *)(uintptr_t)pb, (int)n, (const float *)(uintptr_t)pa, (int)k,
                  &zero, (float *)(uintptr_t)pc, (int)n);
  }
  if (rc != 0)
    sf_runtime_error(loc, "GPU: cuBLAS gemm failed (status %d)", rc);
  sf__gpu_sync(loc);
  sf__gpu_touch(a);
  sf__gpu_touch(b);
  sf__gpu_device_wrote(c);
  return true;
}

/* ------------------------------------------------------------ matmul */

static int64_t dims(int64_t x, int64_t y, const char *what, const sf_loc *loc) {
  if (x < 0 || y < 0)
    sf_runtime_error(loc, "matmul: negative dimension in %s (%" PRId64 "×%" PRId64 ")", what, x, y);
  if (y && x > INT64_MAX / y)
    sf_runtime_error(loc, "matmul: %s of %" PRId64 "×%" PRId64 " is too large", what, x, y);
  return x * y;
}

sf_array *sf_matmul(sf_array *a, sf_array *b, int64_t m, int64_t k, int64_t n, int32_t flags,
                    const sf_loc *loc) {
  int64_t la = a ? a->len : 0, lb = b ? b->len : 0;
  int64_t na = dims(m, k, "a", loc), nb = dims(k, n, "b", loc), nc = dims(m, n, "the result", loc);
  if (la != na)
    sf_runtime_error(loc, "matmul: a has %" PRId64 " elements, but %" PRId64 "×%" PRId64 " needs %" PRId64,
                     la, m, k, na);
  if (lb != nb)
    sf_runtime_error(loc, "matmul: b has %" PRId64 " elements, but %" PRId64 "×%" PRId64 " needs %" PRId64,
                     lb, k, n, nb);
  const sf_type *et = a ? a->elem : b ? b->elem : &sf_type_f32;
  bool f64 = et->kind == SF_F64;
  sf_array *c = sf_array_new(et, nc, loc);
  if (nc && k && sf__gpu_ready(loc) && gemm_gpu(f64, a, b, c, m, k, n, loc)) {
    SF__GPU_STAT_ADD(gpu_matmuls, 1);
    if (!(flags & SF_MATMUL_DEFER))
      sf_gpu_settle();
    return c;
  }
  sf_array_host(a);
  sf_array_host(b);
  sf__gemm_cpu(f64, a ? a->data : NULL, b ? b->data : NULL, c->data, m, k, n);
  SF__GPU_STAT_ADD(cpu_matmuls, 1);
  return c;
}

/* -------------------------------------------- the nn layer's products */

/* cuBLAS's ABI values (cublas_api.h, library_types.h). */
enum { CUBLAS_OP_T = 1, CUDA_R_32F = 0, CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68,
       CUBLAS_GEMM_DEFAULT = -1 };
typedef int (*sgemm_batched_fn)(cublasHandle_t, int, int, int, int, int, const float *,
                                const float *, int, long long, const float *, int, long long,
                                const float *, float *, int, long long, int);
typedef int (*gemm_ex_fn)(cublasHandle_t, int, int, int, int, int, const void *, const void *,
                          int, int, const void *, int, int, const void *, void *, int, int, int,
                          int);
typedef int (*gemm_batched_ex_fn)(cublasHandle_t, int, int, int, int, int, const void *,
                                  const void *, int, int, long long, const void *, int, int,
                                  long long, const void *, void *, int, int, long long, int, int,
                                  int);
typedef int (*sgemm_ptrs_fn)(cublasHandle_t, int, int, int, int, int, const float *,
                             const float *const *, int, const float *const *, int, const float *,
                             float *const *, int, int);
static struct {
  pthread_once_t once;
  sgemm_batched_fn sgemm_batched;
  sgemm_ptrs_fn sgemm_ptrs;
  gemm_ex_fn gemm_ex;
  gemm_batched_ex_fn gemm_batched_ex;
} NB = {.once = PTHREAD_ONCE_INIT};

static void nn_syms(void) {
  if (!CB.lib)
    return;
  *(void **)&NB.sgemm_batched = dlsym(CB.lib, "cublasSgemmStridedBatched");
  *(void **)&NB.sgemm_ptrs = dlsym(CB.lib, "cublasSgemmBatched");
  *(void **)&NB.gemm_ex = dlsym(CB.lib, "cublasGemmEx");
  *(void **)&NB.gemm_batched_ex = dlsym(CB.lib, "cublasGemmStridedBatchedEx");
}

/* This thread's handle, or a runtime error naming why there is none. */
static cublasHandle_t nn_handle(const sf_loc *loc) {
  pthread_once(&cublas_once, cublas_init);
  if (!CB.ok)
    sf_runtime_error(loc, "GPU: tensor products need cuBLAS: %s", CB.why);
  cublasHandle_t h = handle();
  if (!h)
    sf_runtime_error(loc, "GPU: cuBLAS could not make a handle on device %d",
                     (int)sf__gpu_current_device());
  pthread_once(&NB.once, nn_syms);
  return h;
}

static void *need(void *fn, const char *name, const sf_loc *loc) {
  if (!fn)
    sf_runtime_error(loc, "GPU: this cuBLAS lacks %s (cuBLAS 11 or newer has it)", name);
  return fn;
}

static int fit(int64_t v, const char *what, const sf_loc *loc) {
  if (v < 0 || v > INT32_MAX)
    sf_runtime_error(loc, "GPU: a product's %s (%" PRId64 ") does not fit cuBLAS's int", what, v);
  return (int)v;
}

static void status(int rc, const char *what, const sf_loc *loc) {
  if (rc != 0)
    sf_runtime_error(loc, "GPU: %s failed (cuBLAS status %d)", what, rc);
}

void sf__sgemm_dev(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, uint64_t a,
                   int64_t lda, uint64_t b, int64_t ldb, float beta, uint64_t c, int64_t ldc,
                   const sf_loc *loc) {
  if (m == 0 || n == 0)
    return;
  cublasHandle_t h = nn_handle(loc);
  /* Row-major C (m×n) is column-major Cᵀ (n×m) = op(B)ᵀ op(A)ᵀ. */
  int rc = CB.sgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                    fit(n, "n", loc), fit(m, "m", loc), fit(k, "k", loc), &alpha,
                    (const float *)(uintptr_t)b, fit(ldb, "ldb", loc),
                    (const float *)(uintptr_t)a, fit(lda, "lda", loc), &beta,
                    (float *)(uintptr_t)c, fit(ldc, "ldc", loc));
  status(rc, "cublasSgemm", loc);
  SF__GPU_STAT_ADD(gpu_matmuls, 1);
}

void sf__sgemm_dev_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           uint64_t a, int64_t lda, int64_t sa, uint64_t b, int64_t ldb,
                           int64_t sb, float beta, uint64_t c, int64_t ldc, int64_t sc,
                           int64_t batch, const sf_loc *loc) {
  if (m == 0 || n == 0 || batch == 0)
    return;
  if (batch == 1) {
    sf__sgemm_dev(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, loc);
    return;
  }
  cublasHandle_t h = nn_handle(loc);
  sgemm_batched_fn f = need((void *)NB.sgemm_batched, "cublasSgemmStridedBatched", loc);
  int rc = f(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, fit(n, "n", loc),
             fit(m, "m", loc), fit(k, "k", loc), &alpha, (const float *)(uintptr_t)b,
             fit(ldb, "ldb", loc), sb, (const float *)(uintptr_t)a, fit(lda, "lda", loc), sa,
             &beta, (float *)(uintptr_t)c, fit(ldc, "ldc", loc), sc, fit(batch, "batch", loc));
  status(rc, "cublasSgemmStridedBatched", loc);
  SF__GPU_STAT_ADD(gpu_matmuls, 1);
}

void sf__sgemm_dev_ptrs(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        uint64_t aptrs, int64_t lda, uint64_t bptrs, int64_t ldb, float beta,
                        uint64_t cptrs, int64_t ldc, int64_t batch, const sf_loc *loc) {
  if (m == 0 || n == 0 || batch == 0)
    return;
  cublasHandle_t h = nn_handle(loc);
  sgemm_ptrs_fn f = need((void *)NB.sgemm_ptrs, "cublasSgemmBatched", loc);
  /* B's pointers first: the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, as above. */
  int rc = f(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, fit(n, "n", loc),
             fit(m, "m", loc), fit(k, "k", loc), &alpha,
             (const float *const *)(uintptr_t)bptrs, fit(ldb, "ldb", loc),
             (const float *const *)(uintptr_t)aptrs, fit(lda, "lda", loc), &beta,
             (float *const *)(uintptr_t)cptrs, fit(ldc, "ldc", loc), fit(batch, "batch", loc));
  status(rc, "cublasSgemmBatched", loc);
  SF__GPU_STAT_ADD(gpu_matmuls, 1);
}

void sf__gemm_ptr_table(uint64_t *out, uint64_t base, int64_t outer, int64_t so, int64_t inner,
                        int64_t si) {
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++)
      *out++ = base + (uint64_t)(o * so + i * si) * 4u;
}

/* ------------------------------------------------ cuBLASLt epilogues */

/* cublasLt.h's ABI values. */
enum { LT_TRANSA = 3, LT_TRANSB = 4, LT_EPILOGUE = 7, LT_BIAS_POINTER = 8, LT_EPILOGUE_BIAS = 4,
       LT_EPILOGUE_BGRADB = 512, LT_COMPUTE_32F_FAST_TF32 = 77 };
typedef void *lt_handle, *lt_desc, *lt_layout;
static struct {
  pthread_once_t once;
  bool ok;
  int (*create)(lt_handle *);
  int (*desc_create)(lt_desc *, int compute, int scale);
  int (*desc_destroy)(lt_desc);
  int (*desc_set)(lt_desc, int attr, const void *buf, size_t n);
  int (*layout_create)(lt_layout *, int type, uint64_t rows, uint64_t cols, int64_t ld);
  int (*layout_destroy)(lt_layout);
  int (*matmul)(lt_handle, lt_desc, const void *alpha, const void *a, lt_layout, const void *b,
                lt_layout, const void *beta, const void *c, lt_layout, void *d, lt_layout,
                const void *algo, void *ws, size_t wsn, void *stream);
  pthread_mutex_t mu;
  lt_handle h[16];
} LT = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* cuBLASLt's entry points through cuBLAS's handle: libcublas needs
 * libcublasLt, so dlsym finds them among its dependencies (the emulator
 * exports them itself).  SFLOW_CUBLASLT=off keeps the plain cuBLAS path. */
static void lt_syms(void) {
  const char *e = getenv("SFLOW_CUBLASLT");
  if (!CB.lib || (e && !strcmp(e, "off")))
    return;
  struct {
    void **fn;
    const char *name;
  } t[] = {{(void **)&LT.create, "cublasLtCreate"},
           {(void **)&LT.desc_create, "cublasLtMatmulDescCreate"},
           {(void **)&LT.desc_destroy, "cublasLtMatmulDescDestroy"},
           {(void **)&LT.desc_set, "cublasLtMatmulDescSetAttribute"},
           {(void **)&LT.layout_create, "cublasLtMatrixLayoutCreate"},
           {(void **)&LT.layout_destroy, "cublasLtMatrixLayoutDestroy"},
           {(void **)&LT.matmul, "cublasLtMatmul"}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (!(*t[i].fn = dlsym(CB.lib, t[i].name)))
      return;
  LT.ok = true;
}

/* One cublasLtMatmul, row-major C = op(A) op(B) with epilogue epi over the
 * vector vec (below); false when cuBLASLt is absent or refuses. */
static bool lt_matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a, int64_t lda,
                      uint64_t b, int64_t ldb, uint64_t vec, uint32_t epi, uint64_t c,
                      int64_t ldc, const sf_loc *loc) {
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
    return false;
  nn_handle(loc); /* cuBLAS loaded, or the usual error */
  pthread_once(&LT.once, lt_syms);
  int32_t dev = sf__gpu_current_device();
  if (!LT.ok || dev < 0 || dev >= 16)
    return false;
  pthread_mutex_lock(&LT.mu);
  if (!LT.h[dev] && LT.create(&LT.h[dev]) != 0)
    LT.h[dev] = NULL;
  lt_handle h = LT.h[dev];
  pthread_mutex_unlock(&LT.mu);
  if (!h)
    return false;
  const char *tf = getenv("SFLOW_ALLOW_TF32");
  int compute = tf && *tf && strcmp(tf, "0") ? LT_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  /* Column-major as above: D (n×m) = op(B)ᵀ op(A)ᵀ, so cuBLASLt's A is
   * our B and its B our A: BIAS adds a vector over D's n rows (row-major
   * C's columns); BGRADB sums cuBLASLt's op(B) over k, our op(A)'s rows. */
  int32_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const void *bp = (const void *)(uintptr_t)vec;
  lt_desc d = NULL;
  lt_layout la = NULL, lb = NULL, lc = NULL;
  int rc = LT.desc_create(&d, compute, CUDA_R_32F);
  if (rc == 0)
    rc = LT.desc_set(d, LT_TRANSA, &opa, sizeof opa) ||
         LT.desc_set(d, LT_TRANSB, &opb, sizeof opb) ||
         LT.desc_set(d, LT_EPILOGUE, &epi, sizeof epi) ||
         LT.desc_set(d, LT_BIAS_POINTER, &bp, sizeof bp);
  if (rc == 0)
    rc = LT.layout_create(&la, CUDA_R_32F, (uint64_t)(tb ? k : n), (uint64_t)(tb ? n : k),
                          ldb) ||
         LT.layout_create(&lb, CUDA_R_32F, (uint64_t)(ta ? m : k), (uint64_t)(ta ? k : m),
                          lda) ||
         LT.layout_create(&lc, CUDA_R_32F, (uint64_t)n, (uint64_t)m, ldc);
  const float one = 1.0f, zero = 0.0f;
  void *pc = (void *)(uintptr_t)c;
  if (rc == 0)
    rc = LT.matmul(h, d, &one, (const void *)(uintptr_t)b, la, (const void *)(uintptr_t)a, lb,
                   &zero, pc, lc, pc, lc, NULL, NULL, 0, NULL);
  if (la)
    LT.layout_destroy(la);
  if (lb)
    LT.layout_destroy(lb);
  if (lc)
    LT.layout_destroy(lc);
  if (d)
    LT.desc_destroy(d);
  if (rc != 0)
    return false; /* not this shape or version: the caller's two-step path */
  SF__GPU_STAT_ADD(gpu_matmuls, 1);
  return true;
}

bool sf__sgemm_dev_bias(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a,
                        int64_t lda, uint64_t b, int64_t ldb, uint64_t bias, uint64_t c,
                        int64_t ldc, const sf_loc *loc) {
  return lt_matmul(ta, tb, m, n, k, a, lda, b, ldb, bias, LT_EPILOGUE_BIAS, c, ldc, loc);
}

bool sf__sgemm_dev_bgrad(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint64_t a,
                         int64_t lda, uint64_t b, int64_t ldb, uint64_t sums, uint64_t c,
                         int64_t ldc, const sf_loc *loc) {
  return lt_matmul(ta, tb, m, n, k, a, lda, b, ldb, sums, LT_EPILOGUE_BGRADB, c, ldc, loc);
}

void sf__gemm_dev_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       uint64_t a, int64_t lda, int64_t sa, uint64_t b, int64_t ldb, int64_t sb,
                       float beta, uint64_t c, int64_t ldc, int64_t sc, int64_t batch,
                       const sf_loc *loc) {
  if (m == 0 || n == 0 || batch == 0)
    return;
  cublasHandle_t h = nn_handle(loc);
  int opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, rc;
  if (batch == 1) {
    gemm_ex_fn f = need((void *)NB.gemm_ex, "cublasGemmEx", loc);
    rc = f(h, opb, opa, fit(n, "n", loc), fit(m, "m", loc), fit(k, "k", loc), &alpha,
           (const void *)(uintptr_t)b, CUDA_R_16BF, fit(ldb, "ldb", loc),
           (const void *)(uintptr_t)a, CUDA_R_16BF, fit(lda, "lda", loc), &beta,
           (void *)(uintptr_t)c, CUDA_R_32F, fit(ldc, "ldc", loc), CUBLAS_COMPUTE_32F,
           CUBLAS_GEMM_DEFAULT);
    status(rc, "cublasGemmEx (bf16)", loc);
  } else {
    gemm_batched_ex_fn f = need((void *)NB.gemm_batched_ex, "cublasGemmStridedBatchedEx", loc);
    rc = f(h, opb, opa, fit(n, "n", loc), fit(m, "m", loc), fit(k, "k", loc), &alpha,
           (const void *)(uintptr_t)b, CUDA_R_16BF, fit(ldb, "ldb", loc), sb,
           (const void *)(uintptr_t)a, CUDA_R_16BF, fit(lda, "lda", loc), sa, &beta,
           (void *)(uintptr_t)c, CUDA_R_32F, fit(ldc, "ldc", loc), sc, fit(batch, "batch", loc),
           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    status(rc, "cublasGemmStridedBatchedEx (bf16)", loc);
  }
  SF__GPU_STAT_ADD(gpu_matmuls, 1);
}
