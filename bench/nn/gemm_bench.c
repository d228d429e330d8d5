/*
 * gemm_bench.c — sflow's own f32 GEMM (runtime/gpu/gemm.c) beside
 * OpenBLAS's cblas_sgemm on one shape, both single-threaded unless a
 * thread count is given, best of 20 in CPU time (a loaded machine's wall
 * clock says more about the other jobs); with no shape, 300 random
 * products checked bitwise against the plain fma chain.
 *
 *   cc -O2 -iquote runtime -iquote runtime/gpu -iquote runtime/core ... -c runtime/gpu/gemm.c
 *   (every runtime/ directory as -iquote), then
 *   cc -O2 bench/nn/gemm_bench.c gemm.o -lm -lpthread -ldl -o gemm_bench
 *   ./gemm_bench M N K TA TB [THREADS]      (OPENBLAS_CORETYPE picks its kernel)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdbool.h>
#include <math.h>
#include <time.h>
#include <pthread.h>
#include <dlfcn.h>
typedef struct sf_loc sf_loc;
int64_t sf__gemm_sflow(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                       float *c, int64_t ldc, int64_t ways);
const char *sf__gemm_isa(void);
void sf_runtime_error(const sf_loc *l, const char *f, ...) { (void)l; fprintf(stderr, "%s\n", f); exit(1); }
typedef struct { void (*fn)(void*,int64_t,int64_t); void *ctx; int64_t i; } targ;
static void *thr(void *p) { targ *t = p; t->fn(t->ctx, t->i, t->i + 1); return NULL; }
void sf__parallel_for(int64_t n, int64_t g, void (*fn)(void *, int64_t, int64_t), void *ctx) {
  (void)g; pthread_t th[64]; targ a[64];
  for (int64_t i = 1; i < n; i++) { a[i] = (targ){fn, ctx, i}; pthread_create(&th[i], 0, thr, &a[i]); }
  fn(ctx, 0, 1);
  for (int64_t i = 1; i < n; i++) pthread_join(th[i], 0);
}
static float fr(void) { return (float)rand() / RAND_MAX * 2 - 1; }
static void ref(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
  const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  for (int64_t i = 0; i < m; i++) for (int64_t j = 0; j < n; j++) {
    float acc = beta == 0 ? 0 : beta == 1 ? c[i*ldc+j] : beta * c[i*ldc+j];
    for (int64_t p = 0; p < k; p++) {
      float x = ta ? a[p*lda+i] : a[i*lda+p]; if (alpha != 1) x = alpha * x;
      acc = fmaf(x, tb ? b[j*ldb+p] : b[p*ldb+j], acc);
    }
    c[i*ldc+j] = acc;
  }
}
static double now(void) { struct timespec t; clock_gettime(getenv("WALL") ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  printf("isa %s\n", sf__gemm_isa());
  if (argc > 1) {
    int64_t m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]); int ta = atoi(argv[4]), tb = atoi(argv[5]), ways = argc > 6 ? atoi(argv[6]) : 1;
    float *a = malloc(m*k*4), *b = malloc(k*n*4), *c = malloc(m*n*4);
    for (int64_t i = 0; i < m*k; i++) a[i] = fr(); for (int64_t i = 0; i < k*n; i++) b[i] = fr();
    double best = 1e9;
    for (int r = 0; r < 20; r++) { double t0 = now(); sf__gemm_sflow(ta, tb, m, n, k, 1, a, ta ? m : k, b, tb ? k : n, 0, c, n, ways); double t = now() - t0; if (t < best) best = t; }
    printf("%ldx%ldx%ld ta%d tb%d: %.2f ms %.1f GFLOP/s\n", m, n, k, ta, tb, best*1e3, 2.0*m*n*k/best/1e9);
    void *h = dlopen("libopenblas.so.0", RTLD_NOW); void (*sg)(int,int,int,int,int,int,float,const float*,int,const float*,int,float,float*,int) = dlsym(h, "cblas_sgemm");
    void (*st)(int) = dlsym(h, "openblas_set_num_threads"); st(ways); char *(*cn)(void) = dlsym(h, "openblas_get_corename");
    double best2 = 1e9;
    for (int r = 0; r < 20; r++) { double t0 = now(); sg(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1, a, ta ? m : k, b, tb ? k : n, 0, c, n); double t = now() - t0; if (t < best2) best2 = t; }
    printf("   openblas %s: %.2f ms %.1f GFLOP/s  sflow/openblas speed %.2f\n", cn(), best2*1e3, 2.0*m*n*k/best2/1e9, best2/best);
    return 0;
  }
  int bad = 0;
  for (int it = 0; it < 300; it++) {
    int64_t m = 1 + rand() % 70, n = 1 + rand() % 90, k = rand() % 600;
    if (it % 10 == 0) { m += 300; n += 100; }
    bool ta = rand() & 1, tb = rand() & 1; float beta = (float[]){0, 1, 0.5f}[rand() % 3], alpha = rand() % 4 ? 1 : -0.75f;
    int64_t lda = (ta ? m : k) + rand() % 3, ldb = (tb ? k : n) + rand() % 3, ldc = n + rand() % 3;
    float *a = malloc((ta ? k : m) * lda * 4 + 4), *b = malloc((tb ? n : k) * ldb * 4 + 4), *c0 = malloc(m * ldc * 4), *c1 = malloc(m * ldc * 4);
    for (int64_t i = 0; i < (ta ? k : m) * lda; i++) a[i] = fr();
    for (int64_t i = 0; i < (tb ? n : k) * ldb; i++) b[i] = fr();
    for (int64_t i = 0; i < m * ldc; i++) c0[i] = c1[i] = fr();
    ref(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc);
    sf__gemm_sflow(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c1, ldc, 1 + it % 3);
    if (memcmp(c0, c1, m * ldc * 4)) { bad++; printf("bad %ldx%ldx%ld ta%d tb%d beta %g\n", m, n, k, ta, tb, beta); }
    free(a); free(b); free(c0); free(c1);
  }
  printf("bad %d\n", bad);
  return bad != 0;
}
