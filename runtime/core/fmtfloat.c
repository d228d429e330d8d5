/*
 * fmtfloat.c — f64 and f32 to the shortest decimal that reads back to the
 * same bits, laid out as Python's repr() lays it out.
 *
 * Key design choice: the digits come from Schubfach (Raffaello Giulietti,
 * "The Schubfach way to render doubles", 2020), a proven shortest-round-
 * trip algorithm with no loop over digit counts and no bignum at run time.
 * A finite v = c * 2^q has the rounding interval R of the decimals that
 * read back as v (half an ulp either side, closed when c is even because
 * reading rounds half to even; a quarter ulp below a power of two).  With
 * k = floor(log10(width of R)), R holds at least one multiple of 10^k and
 * at most one of 10^(k+1).  So the answer is that multiple of 10^(k+1)
 * when R holds it (fewer digits than any other member), otherwise the
 * member of R among s = floor(v / 10^k) and s + 1 that is closer to v
 * (ties to even).  The bounds of R times 4 / 10^k come from one 126-bit
 * multiplication each, rounded to odd, which the paper proves decides
 * every comparison exactly.
 *
 * Unlike Java's Double.toString, which the paper's reference code serves,
 * sflow wants the shortest digits even when they are a single digit
 * (Python's repr(5e-324) is "5e-324", repr of the least f32 "1e-45"), so
 * the one-digit-shorter candidate is tried at every size of s and tiny
 * subnormals are not scaled up.
 *
 * The table of 10^e, e in [-292, 324], as 126-bit significands is computed
 * once, on first use, with a small bignum, so no generated table is
 * committed.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "bignum.h"
#include "core.h"

/* ---------------------------------------------------- powers of ten */

/* 10^e = beta * 2^r with 2^125 <= beta < 2^126; g = floor(beta) + 1,
 * kept as g1 = g >> 63 and g0 = g mod 2^63. */
typedef struct {
  uint64_t g1, g0;
  int32_t r;
} pow10_entry;

#define E_MIN (-292)
#define E_MAX 324
static pow10_entry pow10_tab[E_MAX - E_MIN + 1];
static pthread_once_t pow10_once = PTHREAD_ONCE_INIT;

enum { BIG_DIV_BITS = 1300 };

/* floor(b * 2^-shift) for a shift that leaves at most 128 bits; a negative
 * shift multiplies. */
static unsigned __int128 big_shifted(const sf__big *b, int shift) {
  unsigned __int128 v = 0;
  for (int i = sf__big_bits(b) - 1; i >= 0 && i >= shift; i--)
    v = (v << 1) | ((b->d[i / 32] >> (i % 32)) & 1);
  return shift < 0 ? v << -shift : v;
}

static void set_entry(int e, const sf__big *b, int extra_r) {
  int bits = sf__big_bits(b);
  unsigned __int128 g = big_shifted(b, bits - 126) + 1;
  pow10_entry *p = &pow10_tab[e - E_MIN];
  p->g1 = (uint64_t)(g >> 63);
  p->g0 = (uint64_t)g & ((1ull << 63) - 1);
  p->r = bits - 126 + extra_r;
}

static void pow10_init(void) {
  sf__big b = {{1}, 1};
  for (int e = 0; e <= E_MAX; e++) {
    set_entry(e, &b, 0);
    sf__big_mul_small(&b, 10);
  }
  /* 10^-m as floor(2^1300 / 10^m): its top 126 bits are those of the
   * exact quotient, which has far more than 126 integer bits. */
  sf__big x = {{0}, BIG_DIV_BITS / 32 + 1};
  x.d[x.n - 1] = 1u << (BIG_DIV_BITS % 32);
  for (int m = 1; m <= -E_MIN; m++) {
    sf__big_div_small(&x, 10);
    set_entry(-m, &x, -BIG_DIV_BITS);
  }
}

/* ------------------------------------------------------- Schubfach */

/* floor(log10(2^q)) and floor(log10(3/4 * 2^q)), exact for |q| <= 1200. */
static int flog10_pow2(int q) { return (int)(((int64_t)q * 661971961083LL) >> 41); }
static int flog10_three_quarters_pow2(int q) {
  return (int)(((int64_t)q * 661971961083LL - 274743187321LL) >> 41);
}

/* g * cp / 2^127 rounded to odd: the floor, with its lowest bit set when
 * anything was cut off. */
static uint64_t round_to_odd(const pow10_entry *g, uint64_t cp) {
  uint64_t x1 = (uint64_t)(((unsigned __int128)g->g0 * cp) >> 64);
  unsigned __int128 y = (unsigned __int128)g->g1 * cp;
  uint64_t z = ((uint64_t)y >> 1) + x1;
  uint64_t vbp = (uint64_t)(y >> 64) + (z >> 63);
  const uint64_t mask63 = (1ull << 63) - 1;
  return vbp | (((z & mask63) + mask63) >> 63);
}

/* The shortest decimal d * 10^*k that reads back as c * 2^q (c > 0),
 * closest to it among those of its length, ties to even.  asym: c is the
 * least significand of a binade above the first, whose interval below is
 * half as wide.  d may end in zeros. */
static uint64_t shortest(uint64_t c, int q, bool asym, int *k_out) {
  uint64_t out = c & 1; /* an odd c's interval is open */
  uint64_t cb = c << 2, cbr = cb + 2, cbl;
  int k;
  if (asym) {
    cbl = cb - 1;
    k = flog10_three_quarters_pow2(q);
  } else {
    cbl = cb - 2;
    k = flog10_pow2(q);
  }
  const pow10_entry *g = &pow10_tab[-k - E_MIN];
  int h = q + g->r + 127; /* 1..4: makes cb << h times g / 2^127 = 4 v / 10^k */
  uint64_t vb = round_to_odd(g, cb << h);
  uint64_t vbl = round_to_odd(g, cbl << h);
  uint64_t vbr = round_to_odd(g, cbr << h);
  uint64_t s = vb >> 2;
  *k_out = k;
  uint64_t sp10 = s / 10 * 10, tp10 = sp10 + 10;
  bool upin = vbl + out <= sp10 << 2;
  bool wpin = (tp10 << 2) + out <= vbr;
  if (upin != wpin)
    return upin ? sp10 : tp10;
  uint64_t t = s + 1;
  bool uin = vbl + out <= s << 2;
  bool win = (t << 2) + out <= vbr;
  if (uin != win)
    return uin ? s : t;
  int64_t cmp = (int64_t)(vb - ((s + t) << 1));
  return cmp < 0 || (cmp == 0 && (s & 1) == 0) ? s : t;
}

/* ------------------------------------------------------ the layout */

/* The decimal digits of d (no leading zeros) into out; returns how many. */
static int put_digits(uint64_t d, char *out) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + d % 10);
    d /= 10;
  } while (d);
  for (int i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  return n;
}

/* Python's float repr layout for digits d1d2...dn x 10^(e - n + 1):
 * positional for 1e-4 <= |v| < 1e16 (with ".0" on integers), otherwise
 * d1.d2...dne+XX with at least two exponent digits. */
static int layout(bool neg, const char *d, int n, int e, char *buf) {
  char *o = buf;
  if (neg)
    *o++ = '-';
  if (e < -4 || e >= 16) {
    *o++ = d[0];
    if (n > 1) {
      *o++ = '.';
      memcpy(o, d + 1, (size_t)n - 1);
      o += n - 1;
    }
    *o++ = 'e';
    *o++ = e < 0 ? '-' : '+';
    int a = e < 0 ? -e : e;
    if (a >= 100)
      *o++ = (char)('0' + a / 100);
    *o++ = (char)('0' + a / 10 % 10);
    *o++ = (char)('0' + a % 10);
  } else if (e < 0) {
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -e - 1; i++)
      *o++ = '0';
    memcpy(o, d, (size_t)n);
    o += n;
  } else {
    for (int i = 0; i <= e; i++)
      *o++ = i < n ? d[i] : '0';
    *o++ = '.';
    if (n > e + 1) {
      memcpy(o, d + e + 1, (size_t)(n - e - 1));
      o += n - e - 1;
    } else {
      *o++ = '0';
    }
  }
  *o = '\0';
  return (int)(o - buf);
}

/* Digits d * 10^k of a finite nonzero value, then its repr. */
static int finish(bool neg, uint64_t d, int k, char *buf) {
  while (d % 10 == 0) {
    d /= 10;
    k++;
  }
  char digits[20];
  int n = put_digits(d, digits);
  return layout(neg, digits, n, k + n - 1, buf);
}

static int special(bool neg, bool nan, char *buf) {
  const char *t = nan ? "nan" : neg ? "-inf" : "inf";
  size_t n = strlen(t);
  memcpy(buf, t, n + 1);
  return (int)n;
}

static int zero(bool neg, char *buf) {
  memcpy(buf, neg ? "-0.0" : "0.0", neg ? 5 : 4);
  return neg ? 4 : 3;
}

int sf__fmt_f64_repr(double v, char *buf) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  bool neg = bits >> 63;
  uint64_t frac = bits & ((1ull << 52) - 1);
  int bexp = (int)((bits >> 52) & 0x7FF);
  if (bexp == 0x7FF)
    return special(neg, frac != 0, buf);
  if (bexp == 0 && frac == 0)
    return zero(neg, buf);
  pthread_once(&pow10_once, pow10_init);
  uint64_t c = bexp ? frac | (1ull << 52) : frac;
  int q = (bexp ? bexp : 1) - 1075;
  /* An integer below 2^53 is its own shortest form: no other decimal
   * within half an ulp (at most 1/4 here) has fewer digits. */
  if (q < 0 && q > -53 && (c & ((1ull << -q) - 1)) == 0)
    return finish(neg, c >> -q, 0, buf);
  int k;
  uint64_t d = shortest(c, q, frac == 0 && bexp > 1, &k);
  return finish(neg, d, k, buf);
}

int sf__fmt_f32_repr(float v, char *buf) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  bool neg = bits >> 31;
  uint32_t frac = bits & ((1u << 23) - 1);
  int bexp = (int)((bits >> 23) & 0xFF);
  if (bexp == 0xFF)
    return special(neg, frac != 0, buf);
  if (bexp == 0 && frac == 0)
    return zero(neg, buf);
  pthread_once(&pow10_once, pow10_init);
  uint64_t c = bexp ? frac | (1u << 23) : frac;
  int q = (bexp ? bexp : 1) - 150;
  if (q < 0 && q > -24 && (c & ((1ull << -q) - 1)) == 0)
    return finish(neg, c >> -q, 0, buf);
  int k;
  uint64_t d = shortest(c, q, frac == 0 && bexp > 1, &k);
  return finish(neg, d, k, buf);
}
