#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  long n = 4000000, reps = 100;
  float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
  for (long i = 0; i < n; i++) { x[i] = (float)(i % 100) * 0.01f; y[i] = 1.0f; }
  for (long r = 0; r < reps; r++)
    for (long i = 0; i < n; i++) y[i] = 0.5f * x[i] + y[i];
  double s = 0;
  for (long i = 0; i < n; i++) s += y[i];
  printf("%.17g\n", s);
  free(x); free(y);
  return 0;
}
