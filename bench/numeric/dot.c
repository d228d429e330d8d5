#include <stdio.h>
#include <stdlib.h>
static double dot(const double *a, const double *b, long n) {
  double s = 0; for (long i = 0; i < n; i++) s += a[i] * b[i]; return s;
}
int main(void) {
  long n = 2000000, reps = 100;
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  for (long i = 0; i < n; i++) { a[i] = (double)(i % 10) * 0.5; b[i] = (double)(i % 7) * 0.25; }
  /* a changes every rep, so no compiler can compute one dot for several reps */
  double t = 0;
  for (long r = 0; r < reps; r++) {
    a[r % n] += 1.0;
    t += dot(a, b, n);
  }
  printf("%.17g\n", t);
  free(a); free(b);
  return 0;
}
