#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 300000000, s = 0;
  for (long i = 0; i < n; i++) s += (i * i) % 7 + (i >> 3);
  printf("%ld\n", s);
  return 0;
}
