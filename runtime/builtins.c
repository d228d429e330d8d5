/*
 * builtins.c — now(), rand_seed()/rand_f32(), node_id(), hostname().
 *
 * now() reads CLOCK_MONOTONIC and counts from the start of the process:
 * it measures durations (it never jumps when NTP sets the clock), and small
 * values keep full sub-microsecond precision in an f64.
 *
 * Random numbers are a per-thread PCG32 stream (O'Neill, pcg-random.org):
 * small, fast, and deterministic given the seed, which reproducible runs
 * need.  Each thread starts as if rand_seed(0) had been called, so an
 * unseeded program still prints the same numbers on every run.
 */
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

int64_t sf__node_id;

/* ---------------------------------------------------------------- now */

static double mono_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double start_time;

__attribute__((constructor)) static void start_clock(void) { start_time = mono_seconds(); }

double sf_now(void) { return sf__journal_value(mono_seconds() - start_time); }

/* --------------------------------------------------------------- rand */

#define PCG_MULT 6364136223846793005ULL
#define PCG_INC 1442695040888963407ULL /* the stream; any odd constant */

typedef struct {
  uint64_t state;
  bool seeded;
} pcg32;

static _Thread_local pcg32 rng;

static uint32_t pcg32_next(pcg32 *r) {
  uint64_t old = r->state;
  r->state = old * PCG_MULT + PCG_INC;
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

/* The reference pcg32_srandom_r seeding sequence. */
void sf_rand_seed(int64_t seed) {
  rng.state = 0;
  pcg32_next(&rng);
  rng.state += (uint64_t)seed;
  pcg32_next(&rng);
  rng.seeded = true;
}

float sf_rand_f32(void) {
  if (!rng.seeded)
    sf_rand_seed(0);
  /* The top 24 bits, scaled by 2^-24: every value is exact in an f32 and
   * the result is in [0, 1), never rounded up to 1.0. */
  float v = (float)(pcg32_next(&rng) >> 8) * 0x1p-24f;
  return (float)sf__journal_value(v); /* main's draws are journaled */
}

/* ------------------------------------------------------- node, host */

int64_t sf_node_id(void) { return sf__node_id; }

sf_str *sf_hostname(void) {
  char name[HOST_NAME_MAX + 1];
  if (gethostname(name, sizeof name) != 0)
    return sf_str_new("localhost", 9);
  name[HOST_NAME_MAX] = '\0'; /* POSIX leaves truncation unterminated */
  return sf_str_new(name, (int64_t)strlen(name));
}
