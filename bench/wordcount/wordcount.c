/* Word count in C: the file read whole, split on ASCII whitespace in
 * place, words counted in an open-addressing hash table (FNV-1a, linear
 * probing, doubled at 1/2 load).  The peer sflow aims to be within 2x of.
 * Prints distinct, total, top word, its count and the seconds of the
 * split and count. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { const char *w; size_t n; long count; uint64_t h; } slot;
static slot *tab;
static size_t cap = 1 << 16, used;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t fnv(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static void grow(void) {
  slot *old = tab;
  size_t oc = cap;
  cap *= 2;
  tab = calloc(cap, sizeof *tab);
  for (size_t i = 0; i < oc; i++)
    if (old[i].w) {
      size_t j = old[i].h & (cap - 1);
      while (tab[j].w)
        j = (j + 1) & (cap - 1);
      tab[j] = old[i];
    }
  free(old);
}

static void add(const char *w, size_t n) {
  uint64_t h = fnv(w, n);
  size_t j = h & (cap - 1);
  while (tab[j].w) {
    if (tab[j].h == h && tab[j].n == n && !memcmp(tab[j].w, w, n)) {
      tab[j].count++;
      return;
    }
    j = (j + 1) & (cap - 1);
  }
  tab[j] = (slot){w, n, 1, h};
  if (++used * 2 > cap)
    grow();
}

static int space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f)
    return 1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)len + 1);
  if (fread(text, 1, (size_t)len, f) != (size_t)len)
    return 1;
  fclose(f);
  double t0 = now();
  tab = calloc(cap, sizeof *tab);
  for (long i = 0; i < len;) {
    while (i < len && space((unsigned char)text[i]))
      i++;
    long s = i;
    while (i < len && !space((unsigned char)text[i]))
      i++;
    if (i > s)
      add(text + s, (size_t)(i - s));
  }
  double secs = now() - t0;
  long total = 0, most = 0;
  const char *best = "";
  size_t bn = 0;
  for (size_t i = 0; i < cap; i++)
    if (tab[i].w) {
      total += tab[i].count;
      int less = 0;
      if (tab[i].count == most) {
        size_t m = tab[i].n < bn ? tab[i].n : bn;
        int c = memcmp(tab[i].w, best, m);
        less = c < 0 || (c == 0 && tab[i].n < bn);
      }
      if (tab[i].count > most || less) {
        most = tab[i].count;
        best = tab[i].w;
        bn = tab[i].n;
      }
    }
  printf("%zu %ld %.*s %ld %.6f\n", used, total, (int)bn, best, most, secs);
  return 0;
}
