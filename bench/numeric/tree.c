#include <stdio.h>
#include <stdlib.h>
static long tree(long lo, long hi) {
  if (hi - lo < 2) return lo * 3 % 7;
  long mid = lo + (hi - lo) / 2;
  return tree(lo, mid) + tree(mid, hi);
}
int main(int argc, char **argv) { long n = argc > 1 ? atol(argv[1]) : 40000000; printf("%ld\n", tree(0, n)); return 0; }
