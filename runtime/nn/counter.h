/*
 * counter.h — the counter-based draws of std.nn's multinomial and
 * std.llm's sampler, written once for the C runtime and the CUDA C of
 * kernels/nn_select.cu (cmake/embed.cmake inlines it there, as kinds.h).
 *
 * Key design choice: a draw is a pure function of (seed, a, b) — for
 * multinomial (row, draw), for the sampler (step, 0) — through
 * splitmix64's finalizer, never a stream's state: a seeded request draws
 * the same values on any thread, replica or device, and draw i needs no
 * draws before it.  Plain C, no includes; SF_CTR_FN is the storage class
 * (a __device__ function under CUDA).
 */
#ifndef SF_NN_COUNTER_H
#define SF_NN_COUNTER_H

#ifdef __CUDACC__
#define SF_CTR_FN __device__ static
#else
#define SF_CTR_FN static inline
#endif

SF_CTR_FN unsigned long long sf_ctr_mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A double in [0, 1) in steps of 2^-53 from (seed, a, b). */
SF_CTR_FN double sf_ctr_unit(unsigned long long seed, unsigned long long a,
                             unsigned long long b) {
  unsigned long long z = sf_ctr_mix(sf_ctr_mix(sf_ctr_mix(seed) ^ a) ^ b);
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

#endif
