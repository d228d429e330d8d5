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

/* v where mask is all ones, +0 where it is zero (a compare's result). */
static inline sf__f4 sf__select4(sf__i4 mask, sf__f4 v) {
  return (sf__f4)((sf__i4)v & mask);
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
