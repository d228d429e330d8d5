/*
 * batch.c — the shuffled order of a data set for one epoch, and each
 * worker's part of every batch in it.
 *
 * Key design choice: the global order is a function of (seed, epoch) and
 * nothing else — not of the worker count, the rank, the thread or the
 * node — and a worker's batch is a slice of the global batch.  So the
 * union of the workers' batches at step k is the same set of examples for
 * 1, 2 or 4 workers, and a data-parallel run with averaged gradients
 * trains on what a single worker would.  The generator is SplitMix64
 * (Steele, Lea and Flood 2014) seeded by mixing seed and epoch, driving a
 * Fisher-Yates shuffle with Lemire's unbiased bounded draw; it is written
 * out here, not borrowed from the language's per-call random streams,
 * whose values depend on where the call runs.
 */
#include <inttypes.h>

#include "data.h"

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A uniform draw in [0, n), n > 0, without modulo bias. */
static uint64_t below(uint64_t *s, uint64_t n) {
  unsigned __int128 m = (unsigned __int128)splitmix(s) * n;
  uint64_t lo = (uint64_t)m;
  if (lo < n) {
    uint64_t t = (0 - n) % n;
    while (lo < t) {
      m = (unsigned __int128)splitmix(s) * n;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

sf_array *sf_std_data_permutation(int64_t n, int64_t seed, int64_t epoch, const sf_loc *loc) {
  if (n < 0)
    sf_runtime_error(loc, "permutation: n must not be negative, got %" PRId64, n);
  sf_array *a = sf_array_new(&sf_type_i64, n, loc);
  int64_t *p = a->data;
  for (int64_t i = 0; i < n; i++)
    p[i] = i;
  uint64_t s = (uint64_t)seed;
  uint64_t e = (uint64_t)epoch ^ 0x5851f42d4c957f2dull;
  s = splitmix(&s) ^ splitmix(&e);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)below(&s, (uint64_t)i + 1);
    int64_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  return a;
}

sf_array *sf_std_data_batches(int64_t n, int64_t batch_size, int64_t seed, int64_t epoch,
                              int64_t rank, int64_t workers, bool drop_last, const sf_loc *loc) {
  if (batch_size <= 0)
    sf_runtime_error(loc, "batches: batch_size must be positive, got %" PRId64, batch_size);
  if (workers <= 0 || rank < 0 || rank >= workers)
    sf_runtime_error(loc, "batches: rank %" PRId64 " of %" PRId64 " workers (need 0 <= rank < "
                     "workers)", rank, workers);
  sf_array *perm = sf_std_data_permutation(n, seed, epoch, loc);
  int64_t nb = drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
  sf_array *out = sf_array_new(sf__array_type(&sf_type_i64), nb, loc);
  for (int64_t b = 0; b < nb; b++) {
    int64_t from = b * batch_size, size = n - from < batch_size ? n - from : batch_size;
    /* This worker's slice of the global batch, as sf_array_split cuts. */
    int64_t base = size / workers, extra = size % workers;
    int64_t off = rank * base + (rank < extra ? rank : extra);
    int64_t len = base + (rank < extra);
    sf_array *part = sf_array_new(&sf_type_i64, len, loc);
    memcpy(part->data, (int64_t *)perm->data + from + off, (size_t)len * sizeof(int64_t));
    ((sf_array **)out->data)[b] = part;
  }
  sf_release(perm);
  return out;
}
