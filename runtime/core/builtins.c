/*
 * builtins.c — now(), rand_seed()/rand_f32(), node_id(), hostname().
 *
 * now() reads CLOCK_MONOTONIC and counts from the start of the process:
 * it measures durations (it never jumps when NTP sets the clock), and small
 * values keep full sub-microsecond precision in an f64.
 *
 * Random numbers: every call has its own PCG32 stream (O'Neill,
 * pcg-random.org), derived from the run's seed and the call's identity,
 * never from the thread that runs it, so a seeded program draws the same
 * numbers whatever --threads, node, retry or --resume ran each call.  The
 * identity is a 64-bit key: main's is mix64(seed); a task call's or a
 * spawn's is mix64(parent key + GAMMA * (index + 1)), index counting the
 * calls and spawns its parent made before it (deterministic whenever the
 * parent's code is); an actor message's is the same mix of the actor's key
 * and the message's number (init 0, then its calls 1, 2, ... in the order
 * they run).  Only the key travels with a call; the stream is made from it
 * at the call's first draw (docs/runtime.md, "Random numbers").
 *
 * rand_int and randn_f32 draw raw 32-bit words from the same stream, each
 * through the journal's tap (exact: a u32 fits a double), so a resumed
 * main replays them bit for bit; rand_int is unbiased (Lemire's
 * multiply-and-reject) and randn_f32 is Box-Muller over two draws.
 */
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

int64_t sf__node_id;

/* ---------------------------------------------------------------- now */

static double mono_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double start_time;

__attribute__((constructor)) static void start_clock(void) { start_time = mono_seconds(); }

double (*sf__value_tap)(double live, bool clock);

/* On main, through the journal's tap: recorded, or on --resume replayed. */
static double tapped(double v, bool clock) { return sf__value_tap ? sf__value_tap(v, clock) : v; }

double sf_now(void) { return tapped(mono_seconds() - start_time, true); }

/* --------------------------------------------------------------- rand */

#define PCG_MULT 6364136223846793005ULL
#define RNG_GAMMA 0x9e3779b97f4a7c15ULL /* splitmix64's increment */

_Thread_local sf__rng sf__rng_cur; /* zero: main before any rand_seed, key mix64(0) = 0 */
_Thread_local bool sf__no_grad; /* std.nn: off; the scheduler resets it per call */
_Thread_local bool sf__autocast; /* std.nn: off; reset per call as no_grad */
_Thread_local int32_t sf__nn_ckpt_depth; /* std.nn: 0; reset per call as no_grad */

/* The splitmix64 finalizer (Steele, Lea, Flood): a bijection of 64-bit
 * words whose outputs for neighbouring inputs look unrelated. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t sf__rng_mix(uint64_t key, uint64_t index) { return mix64(key + RNG_GAMMA * (index + 1)); }

static uint32_t pcg32_next(sf__rng *r) {
  uint64_t old = r->state;
  r->state = old * PCG_MULT + r->inc;
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

/* The reference pcg32_srandom_r(initstate = key, initseq = key): the key
 * picks both the start and the sequence, so two calls never share one. */
static void rng_start(sf__rng *r) {
  r->inc = (r->key << 1u) | 1u;
  r->state = 0;
  pcg32_next(r);
  r->state += r->key;
  pcg32_next(r);
  r->live = true;
}

/* The calling context (main, a task attempt, an actor message) starts
 * over as if its key were mix64(seed): its own draws, and the streams of
 * the calls and spawns it makes from here on.  In main this is the run's
 * seed. */
void sf_rand_seed(int64_t seed) {
  sf__rng_cur.key = mix64((uint64_t)seed);
  sf__rng_cur.children = 0;
  sf__rng_cur.live = false;
}

float sf_rand_f32(void) {
  sf__rng *r = &sf__rng_cur;
  if (!r->live)
    rng_start(r);
  /* The top 24 bits, scaled by 2^-24: every value is exact in an f32 and
   * the result is in [0, 1), never rounded up to 1.0. */
  float v = (float)(pcg32_next(r) >> 8) * 0x1p-24f;
  return (float)tapped(v, false); /* main's draws are journaled */
}

static uint32_t draw32(void) {
  sf__rng *r = &sf__rng_cur;
  if (!r->live)
    rng_start(r);
  return (uint32_t)tapped((double)pcg32_next(r), false);
}

static uint64_t draw64(void) {
  uint64_t hi = draw32();
  return hi << 32 | draw32();
}

/* Uniform in [0, n) for n >= 1: Lemire, "Fast Random Integer Generation
 * in an Interval" (2019), 64-bit form; rejects fewer than n/2^64 draws. */
static uint64_t below(uint64_t n) {
  unsigned __int128 m = (unsigned __int128)draw64() * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    uint64_t t = -n % n;
    while (low < t) {
      m = (unsigned __int128)draw64() * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

int64_t sf_rand_int(int64_t lo, int64_t hi, const sf_loc *loc) {
  if (lo >= hi)
    sf_runtime_error(loc, "rand_int(%" PRId64 ", %" PRId64 "): the range is empty (hi is "
                     "exclusive, so hi must be greater than lo)", lo, hi);
  uint64_t n = (uint64_t)hi - (uint64_t)lo; /* exact, even for the full i64 range */
  return (int64_t)((uint64_t)lo + below(n));
}

float sf_randn_f32(void) {
  /* u1 in (0, 1] so log(u1) is finite; 24-bit draws as rand_f32. */
  double u1 = ((double)(draw32() >> 8) + 1.0) * 0x1p-24;
  double u2 = (double)(draw32() >> 8) * 0x1p-24;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) /* 2 pi */);
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
