/*
 * test_rt_fmtfloat.c — the shortest round-trip float printer (fmtfloat.c,
 * Schubfach) against a slow reference and against strtod/strtof.
 *
 * Key design choice: the reference is the search sflow used before, built
 * on the C library's correctly rounded printf and strtod: try 1, 2, ...
 * significant digits and the decimal on the other side of the value.  It
 * is obviously right and 100x slower, so it checks a sample of each kind
 * of input (random bit patterns, short decimals, powers of two and ten,
 * subnormals, integers near 2^53), while every printed value of a much
 * larger sample must read back to the same bits.
 */
#include <inttypes.h>
#include <math.h>
#include <time.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_fmtfloat", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL};

/* ------------------------------------------------------ the reference */

static bool reads_back(const char *text, double v, bool as_f32) {
  return as_f32 ? strtof(text, NULL) == (float)v : strtod(text, NULL) == v;
}

static uint64_t pow10u(int p) {
  uint64_t r = 1;
  while (p-- > 0)
    r *= 10;
  return r;
}

/* Shortest digits m (no trailing zeros) and exponent e of the first digit,
 * closest to v among those of the shortest length. */
static void ref_digits(double v, bool as_f32, uint64_t *m, int *e) {
  for (int p = 1; p <= 17; p++) {
    char text[48];
    snprintf(text, sizeof text, "%.*e", p - 1, v);
    char *x = strchr(text, 'e');
    uint64_t acc = 0;
    for (char *c = text; c < x; c++)
      if (*c != '.')
        acc = acc * 10 + (uint64_t)(*c - '0');
    *m = acc;
    *e = atoi(x + 1);
    if (reads_back(text, v, as_f32))
      break;
    /* The p-digit decimal on the other side of v. */
    uint64_t nm = acc;
    int ne = *e;
    if (strtod(text, NULL) > v) {
      if (nm == pow10u(p - 1)) {
        nm = pow10u(p) - 1;
        ne--;
      } else {
        nm--;
      }
    } else if (++nm == pow10u(p)) {
      nm = pow10u(p - 1);
      ne++;
    }
    snprintf(text, sizeof text, "%" PRIu64 "e%d", nm, ne - (p - 1));
    if (reads_back(text, v, as_f32)) {
      *m = nm;
      *e = ne;
      break;
    }
  }
  while (*m % 10 == 0 && *m != 0)
    *m /= 10;
}

/* Python's repr layout of the reference digits. */
static void ref_repr(double v, bool as_f32, char *out) {
  if (isnan(v) || isinf(v) || v == 0) {
    sprintf(out, isnan(v) ? "nan" : isinf(v) ? (v < 0 ? "-inf" : "inf")
                                             : (signbit(v) ? "-0.0" : "0.0"));
    return;
  }
  uint64_t m;
  int e;
  ref_digits(fabs(v), as_f32, &m, &e);
  char d[24];
  int n = sprintf(d, "%" PRIu64, m);
  char *o = out;
  if (signbit(v))
    *o++ = '-';
  if (e < -4 || e >= 16) {
    o += sprintf(o, "%c%s%s", d[0], n > 1 ? "." : "", d + 1);
    sprintf(o, "e%c%02d", e < 0 ? '-' : '+', abs(e));
  } else if (e < 0) {
    sprintf(o, "0.%0*d%s", -e - 1, 0, d);
    if (e == -1)
      sprintf(o, "0.%s", d);
  } else if (n > e + 1) {
    sprintf(o, "%.*s.%s", e + 1, d, d + e + 1);
  } else {
    sprintf(o, "%s%0*d.0", d, e + 1 - n, 0);
    if (e + 1 == n)
      sprintf(o, "%s.0", d);
  }
}

/* -------------------------------------------------------- helpers */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double from_bits(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

static float from_bits32(uint32_t b) {
  float v;
  memcpy(&v, &b, sizeof v);
  return v;
}

static int mismatches;

/* v printed by the runtime must be the reference's text and read back. */
static void check64(double v) {
  char got[SF__FLOAT_BUF], want[64];
  int n = sf__fmt_f64_repr(v, got);
  ref_repr(v, false, want);
  bool ok = n == (int)strlen(got) && !strcmp(got, want) && (isnan(v) || strtod(got, NULL) == v);
  if (!ok && mismatches++ < 10)
    fprintf(stderr, "\n  f64 %a: got %s, want %s", v, got, want);
  CU_ASSERT(ok);
}

static void check32(float v) {
  char got[SF__FLOAT_BUF], want[64];
  int n = sf__fmt_f32_repr(v, got);
  ref_repr(v, true, want);
  bool ok = n == (int)strlen(got) && !strcmp(got, want) && (isnan(v) || strtof(got, NULL) == v);
  if (!ok && mismatches++ < 10)
    fprintf(stderr, "\n  f32 %a: got %s, want %s", (double)v, got, want);
  CU_ASSERT(ok);
}

/* ---------------------------------------------------------- tests */

static void test_f64_edges(void) {
  static const double cases[] = {
      5e-324, 1e-323, 1.5e-323, 2.2250738585072014e-308, 2.225073858507201e-308,
      1.7976931348623157e308, 1.7976931348623155e308, 0x1p-1017, 0x1p-1022, 0x1p-1021,
      9007199254740992.0, 9007199254740993.0, 9007199254740994.0, 9007199254740991.0,
      4503599627370496.5, 1e15, 1e16, 1e17, 1e21, 1e22, 1e23, 0.1, 0.2, 0.3,
      0.30000000000000004, 1.0 / 3.0, 2.0 / 3.0, 5.555555555555556e-06, 1e-05,
      9.999999999999999e-05, 0.0001, 123456789012345680.0, 2.5, 0.5, 1e100,
      /* %.17g is not shortest: */ 0.1 + 0.7, 1.1, 100.1, 3.14, 299792.458,
      -0.0, 0.0, INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    check64(cases[i]);
    check64(-cases[i]);
  }
  for (int e = -1074; e <= 1023; e++) /* powers of two */
    check64(ldexp(1.0, e));
  for (int e = -323; e <= 308; e++) { /* powers of ten and their neighbours */
    char t[16];
    snprintf(t, sizeof t, "1e%d", e);
    double v = strtod(t, NULL);
    check64(v);
    check64(nextafter(v, 0));
    check64(nextafter(v, INFINITY));
  }
  for (uint64_t c = 1; c < 3000; c++) /* the smallest subnormals */
    check64(from_bits(c));
  for (int64_t d = -2000; d <= 2000; d++) /* integers near 2^53 */
    check64((double)((1ll << 53) + d));
}

static void test_f64_random(void) {
  mismatches = 0;
  for (int i = 0; i < 60000; i++) { /* random bit patterns, all exponents */
    double v = from_bits(next());
    if (!isnan(v))
      check64(v);
  }
  for (int i = 0; i < 60000; i++) { /* short decimals: shortest is not %.17g */
    char t[40];
    snprintf(t, sizeof t, "%" PRIu64 "e%d", next() % pow10u(1 + (int)(next() % 9)),
             (int)(next() % 600) - 300);
    check64(strtod(t, NULL));
  }
  /* Many more just read back. */
  int bad = 0;
  for (int i = 0; i < 2000000; i++) {
    double v = from_bits(next());
    char got[SF__FLOAT_BUF];
    sf__fmt_f64_repr(v, got);
    if (!isnan(v) && strtod(got, NULL) != v && bad++ < 10)
      fprintf(stderr, "\n  f64 %a printed %s does not read back", v, got);
  }
  CHECK_INT(bad, 0);
}

static void test_f32(void) {
  mismatches = 0;
  static const float cases[] = {1e-45f, 3e-45f, 1.1754944e-38f, 3.4028235e38f, 0.1f, 16777216.0f,
                                16777217.0f, 1.0f / 3.0f, 3.14159f, 1e-5f, 1e16f, -0.0f};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    check32(cases[i]);
  for (int e = -149; e <= 127; e++)
    check32(ldexpf(1.0f, e));
  for (uint32_t c = 1; c < 3000; c++)
    check32(from_bits32(c));
  for (int i = 0; i < 60000; i++) {
    float v = from_bits32((uint32_t)next());
    if (!isnan(v))
      check32(v);
  }
  for (int i = 0; i < 30000; i++) {
    char t[40];
    snprintf(t, sizeof t, "%" PRIu64 "e%d", next() % pow10u(1 + (int)(next() % 7)),
             (int)(next() % 80) - 40);
    check32(strtof(t, NULL));
  }
  int bad = 0;
  for (int i = 0; i < 2000000; i++) {
    float v = from_bits32((uint32_t)next());
    char got[SF__FLOAT_BUF];
    sf__fmt_f32_repr(v, got);
    if (!isnan(v) && strtof(got, NULL) != v && bad++ < 10)
      fprintf(stderr, "\n  f32 %a printed %s does not read back", (double)v, got);
  }
  CHECK_INT(bad, 0);
}

/* The printer that issue #26 replaced took 16 us a value; this one must
 * stay under 1 us of CPU time (it takes about 0.1), whatever else runs. */
static void test_f64_speed(void) {
  enum { N = 300000 };
  double *vs = malloc(N * sizeof *vs);
  for (int i = 0; i < N; i++)
    vs[i] = from_bits(next() & ~(1ull << 62)); /* |v| < 2: no inf or nan */
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  size_t total = 0;
  for (int i = 0; i < N; i++) {
    char got[SF__FLOAT_BUF];
    total += (size_t)sf__fmt_f64_repr(vs[i], got);
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / N;
  fprintf(stderr, "\n  %.3f us a value (%zu bytes)", us, total);
  CU_ASSERT(us < 1.0);
  free(vs);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"f64_edges", test_f64_edges},
      {"f64_random", test_f64_random},
      {"f32", test_f32},
      {"f64_speed", test_f64_speed},
      {NULL, NULL},
  };
  return rt_run("rt_fmtfloat", tests, argc, argv);
}
