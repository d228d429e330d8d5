/*
 * blas_split.c — is a product cut into blocks of C's rows bitwise the one
 * call, under the OpenBLAS kernel OPENBLAS_CORETYPE picks?  The harness
 * behind runtime/gpu/blas.c's split_cores (docs/performance.md,
 * "Splitting a product over the pool"): for each shape, transpose pair
 * and beta 0/1, the one call against 2 to 4 row blocks whose edges are on
 * multiples of each alignment, every block at least argv[1] multiply-adds
 * (default 2^23).  Prints the kernel and, per alignment, the cases that
 * differ; with a second argument every differing case.
 *
 *   cc -O2 bench/nn/blas_split.c -o /tmp/blas_split -lopenblas
 *   for c in Haswell Zen SkylakeX; do OPENBLAS_CORETYPE=$c /tmp/blas_split; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
enum { RM = 101, NT = 111, TR = 112 };
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
char *openblas_get_corename(void);
void openblas_set_num_threads(int);
static uint64_t st = 88172645463325252ull;
static float fr(void) { st ^= st << 13; st ^= st >> 7; st ^= st << 17; return (float)((st >> 40) / (double)(1 << 24)) * 2 - 1; }
static int run(int ta, int tb, int m, int n, int k, float beta, int cols, int per, const float *a, const float *b, const float *c0, const float *one, float *c) {
  int lda = ta ? m : k, ldb = tb ? k : n;
  memcpy(c, c0, sizeof(float) * m * n);
  int all = cols ? n : m;
  for (int r0 = 0; r0 < all; r0 += per) {
    int r1 = r0 + per < all ? r0 + per : all;
    const float *ap = a, *bp = b; float *cp = c; int mm = m, nn = n;
    if (cols) { bp += tb ? (size_t)r0 * ldb : r0; cp += r0; nn = r1 - r0; }
    else { ap += ta ? r0 : (size_t)r0 * lda; cp += (size_t)r0 * n; mm = r1 - r0; }
    cblas_sgemm(RM, ta ? TR : NT, tb ? TR : NT, mm, nn, k, 1.0f, ap, lda, bp, ldb, beta, cp, n);
  }
  return memcmp(c, one, sizeof(float) * m * n) == 0;
}
int main(int argc, char **argv) {
  double minblock = argc > 1 ? atof(argv[1]) : 8388608;
  int verbose = argc > 2;
  openblas_set_num_threads(1);
  printf("core %s\n", openblas_get_corename());
  static const int shapes[][3] = {
    {4096, 384, 384}, {384, 1536, 4096}, {256, 1024, 784}, {784, 1024, 256}, {256, 784, 1024},
    {1000, 333, 517}, {4099, 383, 385}, {999, 999, 99}, {512, 1536, 384}};
  int ns = sizeof shapes / sizeof *shapes;
  static const int aligns[] = {48};
  int na = sizeof aligns / sizeof *aligns;
  int bad[16] = {0}, tot[16] = {0};
  for (int s = 0; s < ns; s++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    int cols = 0, all = m;
    float *a = malloc(4u * m * k), *b = malloc(4u * k * n), *c0 = malloc(4u * m * n), *one = malloc(4u * m * n), *c = malloc(4u * m * n);
    for (int i = 0; i < m * k; i++) a[i] = fr();
    for (int i = 0; i < k * n; i++) b[i] = fr();
    for (int i = 0; i < m * n; i++) c0[i] = fr();
    for (int t = 0; t < 8; t++) {
      int ta = t & 1, tb = (t >> 1) & 1; float beta = (t & 4) ? 1.0f : 0.0f;
      memcpy(one, c0, 4u * m * n);
      cblas_sgemm(RM, ta ? TR : NT, tb ? TR : NT, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, beta, one, n);
      for (int ai = 0; ai < na; ai++) {
        int A = aligns[ai], last = -1;
        for (int ways = 2; ways <= 4; ways++) {
          int per = (all + ways - 1) / ways; per = (per + A - 1) / A * A;
          if (per >= all || per == last) continue;
          last = per;
          int tail = all - (all - 1) / per * per;  /* the last block's size */
          double small = (double)(tail < per ? tail : per) * (cols ? m : n) * k;
          if (small < minblock) continue;
          tot[ai]++;
          if (!run(ta, tb, m, n, k, beta, cols, per, a, b, c0, one, c)) {
            bad[ai]++;
            if (verbose) printf("  bad A=%d %s %dx%dx%d ta%d tb%d beta%g per %d blockmnk %.0f\n", A, cols ? "cols" : "rows", m, n, k, ta, tb, beta, per, small);
          }
        }
      }
    }
    free(a); free(b); free(c0); free(one); free(c);
  }
  for (int ai = 0; ai < na; ai++)
    printf("  align %3d: %d/%d bad\n", aligns[ai], bad[ai], tot[ai]);
  return 0;
}
