/*
 * gpu_check.c — the library kernels of kernels/ on a real GPU against their
 * CPU references (max difference printed), plus the figures bench/gpu
 * reports: elementwise bandwidth against a device-to-device copy, NVRTC
 * cold compile and cached load time, matmul TFLOP/s.  Exits 77 without a
 * GPU (ctest: not run).
 *
 *   gpu_check            checks, small sizes
 *   gpu_check --bench [--bench-log2 K]
 *                        also the timed figures, as "TABLE|check|figure|peer|goal" lines
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "gpu_check", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

double sf__ref_sum_f32(const float *x, int64_t n);
double sf__ref_max_f32(const float *x, int64_t n);
void sf__ref_softmax_rows(const float *x, float *y, int64_t rows, int64_t cols);
bool sf__ref_elementwise(const char *op, const float *a, const float *b, float *c, int64_t n);
double sf__gpu_reduce_f32(sf_array *x, bool max);
void sf__gpu_softmax_rows(sf_array *x, sf_array *y, int64_t rows, int64_t cols);
void sf__gpu_elementwise(const char *op, sf_array *a, sf_array *b, sf_array *c);

static int failures;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sf_array *randoms(int64_t n, unsigned seed) {
  sf_array *a = sf_array_new(&sf_type_f32, n, NULL);
  srand(seed);
  for (int64_t i = 0; i < n; i++)
    ((float *)a->data)[i] = (float)rand() / (float)RAND_MAX * 4.0f - 2.0f;
  return a;
}

static void report(const char *check, double diff, double tol) {
  bool ok = diff <= tol;
  printf("TABLE|%s vs CPU|max diff %.3g|CPU reference|<= %.0e %s\n", check, diff, tol, ok ? "ok" : "FAIL");
  if (!ok)
    failures++;
}

static double maxdiff(const float *a, const float *b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

static void check_kernels(int64_t n) {
  sf_array *x = randoms(n, 1), *y = randoms(n, 2), *z = sf_array_new(&sf_type_f32, n, NULL);
  float *ref = malloc((size_t)n * sizeof(float));
  double s = sf__gpu_reduce_f32(x, false), rs = sf__ref_sum_f32(x->data, n);
  report("sum_f32", fabs(s - rs) / fmax(1, fabs(rs)), 1e-5);
  report("max_f32", fabs(sf__gpu_reduce_f32(x, true) - sf__ref_max_f32(x->data, n)), 0);
  const char *ops[] = {"add", "sub", "mul", "div", "relu", "exp", "tanh"};
  for (int i = 0; i < 7; i++) {
    bool bin = i < 4;
    sf__gpu_elementwise(ops[i], x, bin ? y : NULL, z);
    sf_gpu_settle();
    sf__ref_elementwise(ops[i], x->data, y->data, ref, n);
    char name[32];
    snprintf(name, sizeof name, "%s_f32", ops[i]);
    report(name, maxdiff(z->data, ref, n), i < 4 || i == 4 ? 0 : 1e-6);
  }
  int64_t rows = 64, cols = n / 64;
  sf__gpu_softmax_rows(x, z, rows, cols);
  sf_gpu_settle();
  sf__ref_softmax_rows(x->data, ref, rows, cols);
  report("softmax_rows_f32", maxdiff(z->data, ref, rows * cols), 1e-6);
  free(ref);
  sf_release(x);
  sf_release(y);
  sf_release(z);
}

static void bench(int log2n) {
  /* Bandwidth: c = a + b moves 3n floats; a D2D copy of n floats moves 2n. */
  int64_t n = (int64_t)1 << log2n;
  sf_array *a = randoms(n, 3), *b = randoms(n, 4), *c = sf_array_new(&sf_type_f32, n, NULL);
  int (*d2d)(uint64_t, uint64_t, size_t) = (int (*)(uint64_t, uint64_t, size_t))sf__cuda_sym("cuMemcpyDtoD_v2");
  sf__gpu_elementwise("add", a, b, c); /* warm up, and compile */
  int reps = 20;
  double t0 = now();
  for (int i = 0; i < reps; i++)
    sf__gpu_elementwise("add", a, b, c);
  double t_add = (now() - t0) / reps;
  uint64_t pa = sf__gpu_device_copy(a, NULL), pc = sf__gpu_device_alloc(c, NULL);
  d2d(pc, pa, (size_t)n * 4);
  sf__gpu_sync(NULL);
  t0 = now();
  for (int i = 0; i < reps; i++)
    d2d(pc, pa, (size_t)n * 4);
  sf__gpu_sync(NULL);
  double t_copy = (now() - t0) / reps;
  double bw_add = 3.0 * (double)n * 4 / t_add / 1e9, bw_copy = 2.0 * (double)n * 4 / t_copy / 1e9;
  printf("TABLE|elementwise add bandwidth (2^%d f32)|%.0f GB/s (%.0f%%)|D2D copy %.0f GB/s|>= 85%%\n",
         log2n, bw_add, 100 * bw_add / bw_copy, bw_copy);
  sf_gpu_settle();
  sf_release(a);
  sf_release(b);
  sf_release(c);
  /* NVRTC: a cold compile, then a cached load in a fresh process-like state
   * (the in-memory table is keyed by text address, so new text). */
  const sf__kernel_source *k = sf__kernel_source_find("elementwise");
  char *src = malloc(k->len + 64);
  snprintf(src, k->len + 64, "%s\n// cold %ld\n", k->text, (long)time(NULL) ^ (long)getpid());
  int block;
  double c0 = now();
  sf__gpu_function(src, "sflow_add_f32", &block, NULL);
  double cold = now() - c0;
  char *src2 = strdup(src);
  c0 = now();
  sf__gpu_function(src2, "sflow_add_f32", &block, NULL);
  double warm = now() - c0;
  printf("TABLE|NVRTC cold compile / cached load (elementwise.cu)|%.1f ms / %.3f ms|-|cached < 1 ms\n",
         cold * 1e3, warm * 1e3);
  /* matmul: cuBLAS through sf_matmul, with the result left on the device. */
  int64_t sizes[] = {1024, 4096, 8192};
  for (int i = 0; i < 3; i++) {
    int64_t m = sizes[i];
    sf_array *x = randoms(m * m, 5), *w = randoms(m * m, 6);
    sf_release(sf_matmul(x, w, m, m, m, SF_MATMUL_DEFER, NULL));
    int r = m >= 8192 ? 5 : 20;
    double t = now();
    for (int j = 0; j < r; j++)
      sf_release(sf_matmul(x, w, m, m, m, SF_MATMUL_DEFER, NULL));
    double dt = (now() - t) / r;
    printf("TABLE|matmul f32 %ldx%ldx%ld (cuBLAS)|%.1f TFLOP/s|torch.matmul: see torch rows|>= 95%%\n",
           (long)m, (long)m, (long)m, 2.0 * m * m * m / dt / 1e12);
    sf_gpu_settle();
    sf_release(x);
    sf_release(w);
  }
}

int main(int argc, char **argv) {
  /* A row per line as it is measured: a run stopped by `timeout` (bench/gpu/run.sh)
   * still shows the rows it had, where a full buffer would show none. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("SFLOW_KERNEL_CACHE", "/tmp/sflow-gpu-check-cache", 0);
  if (!sf__gpu_ready(NULL)) {
    fprintf(stderr, "gpu_check: SKIP: no GPU (%s)\n", sf__gpu_unavailable_reason());
    return 77;
  }
  char name[256] = "?";
  int (*get_name)(char *, int, int) = (int (*)(char *, int, int))sf__cuda_sym("cuDeviceGetName");
  if (get_name)
    get_name(name, sizeof name, sf__gpu_current_device());
  /* The name says so under the host emulator: "sflow host emulator (not a GPU)". */
  printf("gpu_check: device %s (%s), NVRTC %d\n", name, sf__gpu_arch(), sf__nvrtc_version());
  /* The files loaded, so that a table's figures name their libraries, and
   * the CPU side's BLAS: without one the CPU figures time a fallback loop. */
  char blas[700];
  sf__cublas_describe(blas, sizeof blas);
  printf("gpu_check: NVRTC %d.%d from %s\n", sf__nvrtc_version() / 1000,
         sf__nvrtc_version() % 1000 / 10, sf__nvrtc_path());
  printf("gpu_check: %s\n", blas);
  printf("gpu_check: CPU BLAS %s\n", strcmp(sf__blas_name(), "reference")
             ? sf__blas_name() : "none found (the CPU products are a reference loop, not a CPU figure)");
  if (argc > 1 && !strcmp(argv[1], "--which"))
    return 0;
  check_kernels(1 << 20);
  /* --bench-log2 K: the bandwidth arrays' 2^K (28; run.sh's rehearsal
   * under the emulator takes a small one). */
  int log2n = argc > 3 && !strcmp(argv[2], "--bench-log2") ? atoi(argv[3]) : 28;
  if (log2n < 10 || log2n > 31) {
    fprintf(stderr, "gpu_check: --bench-log2 %s: want 10 to 31\n", argv[3]);
    return 2;
  }
  if (argc > 1 && !strcmp(argv[1], "--bench"))
    bench(log2n);
  printf("gpu_check: %d failed\n", failures);
  return failures ? 1 : 0;
}
