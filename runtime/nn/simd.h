/*
 * simd.h — four-float vectors for the nn layer's hot loops (relu and its
 * backward, the optimizers' steps), through GCC/Clang vector extensions.
 *
 * Key design choice: explicit vectors rather than hoping the loops
 * vectorise.  The runtime builds at -O2 for the x86-64 baseline, where
 * GCC's "very cheap" cost model leaves any loop that needs an alias check
 * or a scalar tail alone: relu stayed a compare and a branch per value
 * that mispredicted half the time on random signs (7% of the MLP step,
 * and as much again for its backward).  Four floats are one SSE register,
 * the baseline's width (wider vectors would pass in memory between
 * functions, and these loops are bound by memory, not by lanes); loads
 * and stores go through memcpy, so no alignment is assumed.  Each vector operation is the scalar one lane by lane (no
 * reassociation, no fused multiply-add the scalar code would not do), so
 * results are bitwise those of the scalar loops they replace.
 *
 * Beside them, the one rule for splitting a flat loop over the pool
 * (sf__t_run_chunks), so every op and optimizer splits alike.
 */
#ifndef SF_NN_SIMD_H
#define SF_NN_SIMD_H

#include <stdint.h>
#include <string.h>

#include "sched.h"

typedef float sf__f4 __attribute__((vector_size(16)));
typedef int32_t sf__i4 __attribute__((vector_size(16)));
#define SF__V 4

static inline sf__f4 sf__ld4(const float *p) {
  sf__f4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void sf__st4(float *p, sf__f4 v) { memcpy(p, &v, sizeof v); }

static inline sf__f4 sf__splat4(float s) { return (sf__f4){s, s, s, s}; }
static inline sf__i4 sf__splat4i(int32_t s) { return (sf__i4){s, s, s, s}; }

/* v where mask is all ones, +0 where it is zero (a compare's result). */
static inline sf__f4 sf__select4(sf__i4 mask, sf__f4 v) {
  return (sf__f4)((sf__i4)v & mask);
}

/* e^x for x <= 0 (a softmax row after its maximum is subtracted, the
 * Gaussian density), four lanes at once: 2^n e^r with n = floor(x log2 e
 * + 1/2), r = x - n ln 2 in two parts (Cody and Waite), e^r by Cephes'
 * degree-6 polynomial, 2^n built in the exponent bits.  Within 2 ulp of
 * expf; below -87.33 (and -inf) it gives 0, where expf gives subnormals
 * (which a softmax or a density never tells apart); NaN stays NaN.  Not
 * bitwise libm's, unlike the helpers above: the scalar expf was a fifth
 * of an encoder's forward pass (docs/nn.md, "How they run"). */
static inline sf__f4 sf__exp4(sf__f4 x) {
  const sf__f4 lo = sf__splat4(-87.3365448f);
  sf__i4 under = x < lo, nan = x != x;
  sf__f4 xc = (sf__f4)(((sf__i4)x & ~under) | ((sf__i4)lo & under));
  sf__f4 fx = xc * sf__splat4(1.44269504088896341f) + sf__splat4(0.5f);
  sf__f4 tf = __builtin_convertvector(__builtin_convertvector(fx, sf__i4), sf__f4);
  tf = tf + __builtin_convertvector(tf > fx, sf__f4); /* truncation to floor: -1 where above */
  sf__f4 r = xc - tf * sf__splat4(0.693359375f) - tf * sf__splat4(-2.12194440e-4f);
  sf__f4 y = sf__splat4(1.9875691500e-4f);
  y = y * r + sf__splat4(1.3981999507e-3f);
  y = y * r + sf__splat4(8.3334519073e-3f);
  y = y * r + sf__splat4(4.1665795894e-2f);
  y = y * r + sf__splat4(1.6666665459e-1f);
  y = y * r + sf__splat4(5.0000001201e-1f);
  y = y * (r * r) + r + sf__splat4(1.0f);
  sf__i4 n = __builtin_convertvector(tf, sf__i4);
  sf__f4 scale = (sf__f4)((n + 127) << 23);
  sf__f4 out = sf__select4(~under, y * scale);
  return (sf__f4)(((sf__i4)out & ~nan) | ((sf__i4)x & nan));
}

/* The standard normal CDF Φ(x) = erfc(-x/√2) / 2, four lanes: erfc by
 * the Chebyshev fit of Numerical Recipes' erfcc (fractional error below
 * 1.2e-7 for every argument), taken directly for x < 0 so the lower tail
 * keeps its relative accuracy (GELU of -5 is -1.4e-6, which 1 + erf(x)
 * would cancel away), and as 1 - erfc/2 above. */
static inline sf__f4 sf__phi4(sf__f4 x) {
  sf__i4 neg = x < sf__splat4(0.0f);
  sf__f4 z = (sf__f4)((sf__i4)x & sf__splat4i(0x7fffffff)) * sf__splat4(0.70710678118654752f);
  sf__f4 t = sf__splat4(1.0f) / (sf__splat4(1.0f) + sf__splat4(0.5f) * z);
  sf__f4 p = sf__splat4(0.17087277f);
  p = p * t + sf__splat4(-0.82215223f);
  p = p * t + sf__splat4(1.48851587f);
  p = p * t + sf__splat4(-1.13520398f);
  p = p * t + sf__splat4(0.27886807f);
  p = p * t + sf__splat4(-0.18628806f);
  p = p * t + sf__splat4(0.09678418f);
  p = p * t + sf__splat4(0.37409196f);
  p = p * t + sf__splat4(1.00002368f);
  p = p * t + sf__splat4(-1.26551223f);
  sf__f4 half_erfc = sf__splat4(0.5f) * t * sf__exp4(p - z * z);
  sf__f4 upper = sf__splat4(1.0f) - half_erfc;
  return (sf__f4)(((sf__i4)half_erfc & neg) | ((sf__i4)upper & ~neg));
}

/* Values below which a loop runs inline on the caller.  A helper thread
 * woken from its futex takes 10-50 us to start on a shared VM, and a
 * vectorised pass over 128K floats (512 KB) takes about that long, so
 * smaller loops lose more to the wake-up than they gain; the grain keeps
 * each chunk long enough to amortise claiming it. */
#define SF__PAR_MIN (1 << 17)
#define SF__PAR_GRAIN (1 << 15)

/* fn over [0, n), split over the pool when n is large enough to pay. */
static inline void sf__t_run_chunks(int64_t n, void (*fn)(void *, int64_t, int64_t), void *ctx) {
  if (n >= SF__PAR_MIN)
    sf__parallel_for(n, SF__PAR_GRAIN, fn, ctx);
  else if (n > 0)
    fn(ctx, 0, n);
}

#endif
