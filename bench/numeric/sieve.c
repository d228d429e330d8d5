#include <stdio.h>
#include <stdlib.h>
int main(void) {
  long n = 50000000, count = 0;
  int *composite = calloc(n + 1, sizeof *composite);
  for (long i = 2; i <= n; i++)
    if (!composite[i]) { count++; for (long j = i * i; j <= n; j += i) composite[j] = 1; }
  printf("%ld\n", count);
  free(composite);
  return 0;
}
