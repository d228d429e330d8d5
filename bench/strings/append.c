/* The C peer of append.sflow: a buffer grown by realloc, doubling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 160000;
  double t0 = now();
  size_t len = 0, cap = 32;
  char *s = malloc(cap);
  if (!s)
    return 1;
  s[0] = '\0';
  for (long i = 0; i < n; i++) {
    if (len + 3 > cap) {
      cap *= 2;
      char *g = realloc(s, cap);
      if (!g)
        return 1;
      s = g;
    }
    memcpy(s + len, "ab", 3);
    len += 2;
  }
  double dt = now() - t0;
  printf("%zu %.6f\n", len, dt);
  free(s);
  return 0;
}
