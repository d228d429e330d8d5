/*
 * simd.h — four-float vectors for the nn layer's hot loops (relu and its
 * backward, the optimizers' steps), through GCC/Clang vector extensions,
 * and vector exp and normal CDF for GELU and the attention softmax (four
 * lanes, and eight for CPUs with AVX2: see SF__VMATH below).
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

#include <stdbool.h>
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
 * Gaussian density): 2^n e^r with n = floor(x log2 e + 1/2), r = x - n ln 2
 * in two parts (Cody and Waite), e^r by Cephes' degree-6 polynomial, 2^n
 * built in the exponent bits.  Within 1 ulp of expf on [-87, 0]; below
 * -87.33 (and -inf) it gives 0, where expf gives subnormals (which a
 * softmax or a density never tells apart); NaN stays NaN.
 *
 * The normal CDF Φ(x) = erfc(-x/√2) / 2: erfc by the Chebyshev fit of
 * Numerical Recipes' erfcc (fractional error below 1.2e-7 for every
 * argument), taken directly for x < 0 so the lower tail keeps its relative
 * accuracy (GELU of -5 is -1.4e-6, which 1 + erf(x) would cancel away), and
 * as 1 - erfc/2 above.
 *
 * Not bitwise libm's, unlike the helpers above: the scalar expf and erff
 * were a third of an encoder's forward pass (docs/nn.md, "How they run").
 * Both are defined once, by SF__VMATH, for four lanes (sf__exp4, sf__phi4:
 * SSE, the baseline) and for eight (sf__exp8, sf__phi8: compiled for AVX2,
 * called only where the CPU has it, see sf__have_avx2).  Every step is one
 * IEEE operation lane by lane (no fused multiply-add: AVX2 without FMA),
 * so the two widths give the same bits, and so does every x86-64 CPU. */
#define SF__VMATH(F, I, EXP, PHI, ATTR)                                                   \
  static inline ATTR F EXP(F x) {                                                         \
    const F lo = (F){0} + -87.3365448f;                                                   \
    I under = x < lo, nan = x != x;                                                       \
    F xc = (F)(((I)x & ~under) | ((I)lo & under));                                        \
    F fx = xc * 1.44269504088896341f + 0.5f;                                              \
    F tf = __builtin_convertvector(__builtin_convertvector(fx, I), F);                    \
    tf = tf + __builtin_convertvector(tf > fx, F); /* truncation to floor */              \
    F r = xc - tf * 0.693359375f - tf * -2.12194440e-4f;                                  \
    F y = (F){0} + 1.9875691500e-4f;                                                      \
    y = y * r + 1.3981999507e-3f;                                                         \
    y = y * r + 8.3334519073e-3f;                                                         \
    y = y * r + 4.1665795894e-2f;                                                         \
    y = y * r + 1.6666665459e-1f;                                                         \
    y = y * r + 5.0000001201e-1f;                                                         \
    y = y * (r * r) + r + 1.0f;                                                           \
    I n = __builtin_convertvector(tf, I);                                                 \
    F scale = (F)((n + 127) << 23);                                                       \
    F out = (F)((I)(y * scale) & ~under);                                                 \
    return (F)(((I)out & ~nan) | ((I)x & nan));                                           \
  }                                                                                       \
  static inline ATTR F PHI(F x) {                                                         \
    I neg = x < 0.0f;                                                                     \
    F z = (F)((I)x & 0x7fffffff) * 0.70710678118654752f;                                  \
    F t = 1.0f / (1.0f + 0.5f * z);                                                       \
    F p = (F){0} + 0.17087277f;                                                           \
    p = p * t + -0.82215223f;                                                             \
    p = p * t + 1.48851587f;                                                              \
    p = p * t + -1.13520398f;                                                             \
    p = p * t + 0.27886807f;                                                              \
    p = p * t + -0.18628806f;                                                             \
    p = p * t + 0.09678418f;                                                              \
    p = p * t + 0.37409196f;                                                              \
    p = p * t + 1.00002368f;                                                              \
    p = p * t + -1.26551223f;                                                             \
    F half_erfc = 0.5f * t * EXP(p - z * z);                                              \
    F upper = 1.0f - half_erfc;                                                           \
    return (F)(((I)half_erfc & neg) | ((I)upper & ~neg));                                 \
  }

SF__VMATH(sf__f4, sf__i4, sf__exp4, sf__phi4, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
typedef float sf__f8 __attribute__((vector_size(32)));
typedef int32_t sf__i8 __attribute__((vector_size(32)));
#define SF__AVX2 __attribute__((target("avx2")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
SF__VMATH(sf__f8, sf__i8, sf__exp8, sf__phi8, SF__AVX2)
/* Whether the eight-lane versions may run here. */
static inline bool sf__have_avx2(void) { return __builtin_cpu_supports("avx2"); }

/* Sixteen lanes (sf__exp16, sf__phi16) for CPUs with AVX-512F, called only
 * where sf__have_avx512 says so and only from functions named *_avx512
 * (tests/robust's default_no_avx rule).  GCC's avx512f target implies FMA,
 * and -O2 would contract a * b + c into one rounding there: fp-contract=off
 * keeps every step the separate IEEE operation it is in the four- and
 * eight-lane versions, so all three widths give the same bits. */
typedef float sf__f16 __attribute__((vector_size(64)));
typedef int32_t sf__i16 __attribute__((vector_size(64)));
#define SF__AVX512 __attribute__((target("avx512f"), optimize("fp-contract=off")))
SF__VMATH(sf__f16, sf__i16, sf__exp16, sf__phi16, SF__AVX512)
static inline bool sf__have_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#pragma GCC diagnostic pop
#else
static inline bool sf__have_avx2(void) { return false; }
#endif

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
