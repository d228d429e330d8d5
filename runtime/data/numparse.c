/*
 * numparse.c — decimal text to f64, f32 and i64, correctly rounded and
 * fast: the inner loop of reading a numeric CSV.
 *
 * Key design choice: three tiers, each exact where it answers.  A number
 * with at most 19 significant digits is a 64-bit integer w and a power of
 * ten q.  (1) When w < 2^53 and |q| <= 22 both are exact doubles and one
 * IEEE multiplication or division rounds correctly (Clinger 1990).  (2)
 * Otherwise the Eisel-Lemire algorithm (Lemire, "Number Parsing at a
 * Gigabyte per Second", 2021) multiplies w by a 128-bit truncation of 5^q
 * and reads the rounded mantissa off the product, giving up when the
 * truncation leaves the rounding in doubt.  (3) Anything given up, longer
 * than 19 digits, subnormal or overflowing goes to strtod.  The table of
 * 5^q is computed once, on first use, with a small bignum, so no generated
 * table is committed.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "bignum.h"
#include "data.h"

/* ------------------------------------------------------ powers of 5 */

#define POW5_MIN (-342)
#define POW5_MAX 308
static uint64_t pow5[POW5_MAX - POW5_MIN + 1][2]; /* {high, low} 64 bits */
static pthread_once_t pow5_once = PTHREAD_ONCE_INIT;


static int big_bit(const sf__big *b, int i) { return (int)((b->d[i / 32] >> (i % 32)) & 1); }

/* The top 128 bits of b (truncated; shifted up when b is shorter). */
static void big_top128(const sf__big *b, uint64_t out[2]) {
  int bits = sf__big_bits(b);
  unsigned __int128 v = 0;
  for (int k = 0; k < 128; k++) {
    int i = bits - 1 - k;
    v = (v << 1) | (unsigned __int128)(i >= 0 ? big_bit(b, i) : 0);
  }
  out[0] = (uint64_t)(v >> 64);
  out[1] = (uint64_t)v;
}

static void pow5_init(void) {
  sf__big b = {{1}, 1};
  for (int q = 0; q <= POW5_MAX; q++) {
    big_top128(&b, pow5[q - POW5_MIN]);
    sf__big_mul_small(&b, 5);
  }
  /* 5^-k as floor(2^1100 / 5^k), truncated to 128 bits, plus one: an
   * upper bound of the true value, as the algorithm needs for q < 0. */
  sf__big x = {{0}, 35};
  x.d[x.n - 1] = 1u << 12; /* 2^(32 * 34 + 12) = 2^1100 */
  for (int k = 1; k <= -POW5_MIN; k++) {
    sf__big_div_small(&x, 5);
    uint64_t *e = pow5[-k - POW5_MIN];
    big_top128(&x, e);
    if (++e[1] == 0)
      e[0]++;
  }
}

/* ------------------------------------------------------ f64 from (w, q) */

static const double exact_pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* w * 10^q correctly rounded into *out, or false when the caller must ask
 * strtod.  w != 0. */
static bool eisel_lemire(uint64_t w, int q, double *out) {
  if (q < POW5_MIN || q > POW5_MAX)
    return false;
  pthread_once(&pow5_once, pow5_init);
  int lz = __builtin_clzll(w);
  w <<= lz;
  const uint64_t *t = pow5[q - POW5_MIN];
  unsigned __int128 p = (unsigned __int128)w * t[0];
  uint64_t hi = (uint64_t)(p >> 64), lo = (uint64_t)p;
  if ((hi & 0x1FF) == 0x1FF) {
    /* The low bits that decide rounding are all ones: the second half
     * of the table entry may carry into them. */
    unsigned __int128 p2 = (unsigned __int128)w * t[1];
    uint64_t p2hi = (uint64_t)(p2 >> 64);
    lo += p2hi;
    if (lo < p2hi)
      hi++;
    if ((hi & 0x1FF) == 0x1FF && lo == UINT64_MAX)
      return false;
  }
  int upper = (int)(hi >> 63);
  uint64_t mant = hi >> (upper + 9);
  int32_t power2 = (int32_t)((((152170 + 65536) * q) >> 16) + 63) + upper - lz + 1023;
  if (power2 <= 0)
    return false; /* subnormal */
  if (lo <= 1 && q >= -4 && q <= 23 && (mant & 3) == 1 && (mant << (upper + 9)) == hi)
    return false; /* exactly halfway: strtod rounds to even */
  mant += mant & 1;
  mant >>= 1;
  if (mant >= (2ull << 52)) {
    mant = 1ull << 52;
    power2++;
  }
  mant &= ~(1ull << 52);
  if (power2 >= 0x7FF)
    return false; /* overflow: strtod says inf */
  uint64_t bits = mant | ((uint64_t)power2 << 52);
  memcpy(out, &bits, sizeof bits);
  return true;
}

/* ----------------------------------------------------------- scanning */

static inline bool is_digit(char c) { return (unsigned)(c - '0') < 10; }

static const char *match_word(const char *p, const char *end, const char *w) {
  for (; *w; w++, p++)
    if (p >= end || (*p | 0x20) != *w)
      return NULL;
  return p;
}

/* inf, infinity or nan after an optional sign at p (sign already read). */
static const char *special(const char *p, const char *end, bool neg, double *out) {
  const char *e;
  if ((e = match_word(p, end, "infinity")) || (e = match_word(p, end, "inf"))) {
    *out = neg ? -INFINITY : INFINITY;
    return e;
  }
  if ((e = match_word(p, end, "nan"))) {
    *out = neg ? -NAN : NAN;
    return e;
  }
  return NULL;
}

/* strtod over [p, e) copied into a NUL-terminated buffer, so it cannot
 * read past the token or take a hex float the scanner did not. */
static double slow_strtod(const char *p, const char *e, bool f32) {
  char local[128];
  size_t n = (size_t)(e - p);
  char *buf = n < sizeof local ? local : sf_alloc(n + 1);
  memcpy(buf, p, n);
  buf[n] = 0;
  double v = f32 ? (double)strtof(buf, NULL) : strtod(buf, NULL);
  if (buf != local)
    sf_free(buf);
  return v;
}

/* Whether the 8 bytes at p are all digits, and their value (SWAR, as
 * fast_float does): 17-digit values spend most of the parse in the digit
 * loops, and 8 digits at a time take the same digits into m as one at a
 * time would, so w and q, and the result, are the same. */
static inline bool eight_digits(const char *p, uint64_t *v) {
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  (void)p, (void)v;
  return false; /* the arithmetic below reads the first digit as the low byte */
#else
  uint64_t x;
  memcpy(&x, p, 8);
  if (((x + 0x4646464646464646ull) | (x - 0x3030303030303030ull)) & 0x8080808080808080ull)
    return false; /* a byte below '0' or above '9' */
  x = (x & 0x0F0F0F0F0F0F0F0Full) * 2561 >> 8;
  x = (x & 0x00FF00FF00FF00FFull) * 6553601 >> 16;
  *v = (uint32_t)((x & 0x0000FFFF0000FFFFull) * 42949672960001ull >> 32);
  return true;
#endif
}

/* Scans a decimal number; on success sets *w, *q, *many (more than 19
 * significant digits) and returns its end. */
static const char *scan(const char *p, const char *end, bool *neg, uint64_t *w, int64_t *q,
                        bool *many, double *special_out, bool *is_special) {
  *neg = false;
  *is_special = false;
  if (p < end && (*p == '-' || *p == '+')) {
    *neg = *p == '-';
    p++;
  }
  const char *start = p;
  uint64_t m = 0;
  int64_t exp10 = 0;
  int sig = 0; /* significant digits taken into m */
  bool dropped = false;
  while (p < end && *p == '0')
    p++;
  for (uint64_t v8; sig + 8 <= 19 && end - p >= 8 && eight_digits(p, &v8); p += 8) {
    m = m * 100000000 + v8;
    sig += 8;
  }
  for (; p < end && is_digit(*p); p++) {
    if (sig < 19) {
      m = m * 10 + (uint64_t)(*p - '0');
      sig++;
    } else {
      exp10++;
      dropped |= *p != '0';
    }
  }
  bool int_digits = p > start;
  bool frac_digits = false;
  if (p < end && *p == '.') {
    p++;
    const char *fs = p;
    if (m == 0)
      for (; p < end && *p == '0'; p++)
        exp10--;
    for (uint64_t v8; sig + 8 <= 19 && end - p >= 8 && eight_digits(p, &v8); p += 8) {
      m = m * 100000000 + v8;
      sig += 8;
      exp10 -= 8;
    }
    for (; p < end && is_digit(*p); p++) {
      if (sig < 19) {
        m = m * 10 + (uint64_t)(*p - '0');
        sig++;
        exp10--;
      } else {
        dropped |= *p != '0';
      }
    }
    frac_digits = p > fs;
  }
  if (!int_digits && !frac_digits) {
    const char *e = special(start, end, *neg, special_out);
    if (e)
      *is_special = true;
    return e;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    const char *ep = p + 1;
    bool eneg = false;
    if (ep < end && (*ep == '-' || *ep == '+')) {
      eneg = *ep == '-';
      ep++;
    }
    if (ep < end && is_digit(*ep)) {
      int64_t e = 0;
      for (; ep < end && is_digit(*ep); ep++)
        if (e < 100000)
          e = e * 10 + (*ep - '0');
      exp10 += eneg ? -e : e;
      p = ep;
    }
    /* "1e" or "1e+": the exponent is not part of the number. */
  }
  *w = m;
  *q = exp10;
  *many = dropped;
  return p;
}

const char *sf__parse_double(const char *p, const char *end, double *out) {
  bool neg, many, is_special;
  uint64_t w;
  int64_t q;
  double sp;
  const char *e = scan(p, end, &neg, &w, &q, &many, &sp, &is_special);
  if (!e)
    return NULL;
  if (is_special) {
    *out = sp;
    return e;
  }
  double v;
  if (w == 0) {
    v = 0.0;
  } else if (!many && w <= (1ull << 53) && q >= -22 && q <= 22) {
    v = q < 0 ? (double)w / exact_pow10[-q] : (double)w * exact_pow10[q];
  } else if (many || !eisel_lemire(w, (int)q, &v)) {
    *out = slow_strtod(p, e, false);
    return e;
  }
  *out = neg ? -v : v;
  return e;
}

const char *sf__parse_float(const char *p, const char *end, float *out) {
  double d;
  const char *e = sf__parse_double(p, end, &d);
  if (!e)
    return NULL;
  /* d is the correctly rounded double; rounding it to f32 is exact unless
   * d sits on a midpoint between two floats (the low 29 bits of the
   * mantissa are 1 followed by zeros), or is in the f32 subnormal range,
   * where the rounding position moves. */
  uint64_t bits;
  memcpy(&bits, &d, sizeof bits);
  double a = fabs(d);
  if ((bits & 0x1FFFFFFFull) == 0x10000000ull || (a != 0 && a < 0x1p-125 && isfinite(d)))
    *out = (float)slow_strtod(p, e, true);
  else
    *out = (float)d;
  return e;
}

const char *sf__parse_int64(const char *p, const char *end, int64_t *out, bool *overflow) {
  *overflow = false;
  bool neg = false;
  if (p < end && (*p == '-' || *p == '+')) {
    neg = *p == '-';
    p++;
  }
  if (p >= end || !is_digit(*p))
    return NULL;
  uint64_t v = 0;
  const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; p < end && is_digit(*p); p++) {
    uint64_t d = (uint64_t)(*p - '0');
    if (v > (limit - d) / 10) {
      *overflow = true;
      return NULL;
    }
    v = v * 10 + d;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return p;
}
