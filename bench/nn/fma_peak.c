/* fma_peak.c — the FMA-loop peak of one core, AVX2: 10 independent chains of
 * vfmadd231ps on ymm registers, 2e8 steps, GFLOP/s in CPU time.
 *   cc -O2 bench/nn/fma_peak.c -o fma_peak && ./fma_peak */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
__attribute__((target("avx2,fma"))) int main(void) {
  __m256 a0=_mm256_set1_ps(0.1f),a1=a0,a2=a0,a3=a0,a4=a0,a5=a0,a6=a0,a7=a0,a8=a0,a9=a0;
  __m256 x = _mm256_set1_ps(0.9999f), y = _mm256_set1_ps(0.0001f);
  struct timespec t0, t1; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  long n = 200000000;
  for (long i = 0; i < n; i++) {
#define F(r) a##r = _mm256_fmadd_ps(a##r, x, y);
    F(0)F(1)F(2)F(3)F(4)F(5)F(6)F(7)F(8)F(9)
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9));
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  double s = t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
  a0 = _mm256_add_ps(a0, a9); float r[8]; _mm256_storeu_ps(r, a0);
  printf("fma peak %.1f GFLOP/s (%g)\n", n * 10.0 * 16 / s / 1e9, r[0]);
}
