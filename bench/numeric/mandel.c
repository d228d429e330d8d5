#include <stdio.h>
static long escape(double cr, double ci, long limit) {
  double zr = 0, zi = 0; long k = 0;
  while (k < limit && zr * zr + zi * zi < 4.0) {
    double t = zr * zr - zi * zi + cr;
    zi = 2.0 * zr * zi + ci; zr = t; k++;
  }
  return k;
}
int main(void) {
  long size = 1200, limit = 200, total = 0;
  for (long y = 0; y < size; y++)
    for (long x = 0; x < size; x++)
      total += escape((double)x * 3.0 / (double)size - 2.0, (double)y * 2.0 / (double)size - 1.0, limit);
  printf("%ld\n", total);
  return 0;
}
