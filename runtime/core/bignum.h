/*
 * bignum.h — the little-endian bignum of 32-bit limbs that both float
 * conversions build their power tables with at first use (fmtfloat.c's
 * powers of ten for printing, data's numparse.c powers of five for
 * reading): one definition, static inline so each file keeps its tables
 * to itself.  Room for 2^1400; only small multipliers and divisors.
 */
#ifndef SF_BIGNUM_H
#define SF_BIGNUM_H

#include <stdint.h>

enum { SF__BIG_LIMBS = 44 };
typedef struct {
  uint32_t d[SF__BIG_LIMBS];
  int n; /* limbs in use; d[n - 1] != 0 unless n == 0 */
} sf__big;

static inline void sf__big_mul_small(sf__big *b, uint32_t m) {
  uint64_t carry = 0;
  for (int i = 0; i < b->n; i++) {
    uint64_t v = (uint64_t)b->d[i] * m + carry;
    b->d[i] = (uint32_t)v;
    carry = v >> 32;
  }
  if (carry)
    b->d[b->n++] = (uint32_t)carry;
}

static inline void sf__big_div_small(sf__big *b, uint32_t m) {
  uint64_t rem = 0;
  for (int i = b->n - 1; i >= 0; i--) {
    uint64_t v = (rem << 32) | b->d[i];
    b->d[i] = (uint32_t)(v / m);
    rem = v % m;
  }
  while (b->n > 0 && b->d[b->n - 1] == 0)
    b->n--;
}

static inline int sf__big_bits(const sf__big *b) {
  return b->n == 0 ? 0 : (b->n - 1) * 32 + (32 - __builtin_clz(b->d[b->n - 1]));
}

#endif
