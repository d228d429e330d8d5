/*
 * ring_algos.c — how long each allreduce algorithm of runtime/cluster/ring.c takes
 * at each size, to set the thresholds in net.h (SF__RING_RD_MAX,
 * SF__RING_HALVING_MAX).  Forks P processes that connect over loopback TCP
 * with sf__ring_connect (ring and partner links, as the workers do), then
 * in each of R rounds times every algorithm at every size, interleaved so
 * that a burst of load on a shared machine hits all of them; prints the
 * median over rounds of the slowest member's mean time, and of the CPU
 * time all members spent per call (which load on a shared machine
 * inflates far less than wall time).
 *
 *   cc -O2 -Iruntime -iquote runtime/core -iquote runtime/sched -iquote runtime/durable -iquote runtime/gpu -iquote runtime/cluster bench/cluster/ring_algos.c BUILD/lib/sflow/libsflowrt.a \
 *      -ldl -lpthread -lm -o ring_algos
 *   ./ring_algos P ROUNDS ITERS SIZE...      (sizes in bytes of floats)
 *
 * SEGMENT=BYTES in the environment sets the pipelining unit (sf__ring.segment);
 * ALGOS=ring,halving times only those.  BARRIER=1 starts every timed call
 * after a barrier, as bench/cluster/mpi_allreduce.c does, so the time no
 * longer includes waiting for members still filling their buffers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

enum { RD, HALVING, RING, NALGO };
static const char *const names[NALGO] = {"doubling", "halving", "ring"};

static double clock_s(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The slowest member's mean time per call of one algorithm at one size;
 * the CPU time of all members per call goes to *cpu. */
static double measure(sf__ring *r, float *buf, size_t count, int algo, int iters, double *cpu) {
  char err[256];
  bool barrier = getenv("BARRIER") != NULL;
  r->rd_max = algo == RD ? SIZE_MAX : 0;
  r->halving_max = algo == HALVING ? SIZE_MAX : 0;
  double total = 0, c = 0;
  for (int it = 0; it <= iters; it++) {
    for (size_t i = 0; i < count; i++)
      buf[i] = (float)((r->rank + 1) * (int)(i % 1024 + 1));
    if (barrier && sf__ring_barrier(r, err, sizeof err))
      exit(1);
    double t0 = now(), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (sf__ring_allreduce(r, buf, count, SF__DT_F32, SF__OP_SUM, err, sizeof err)) {
      fprintf(stderr, "rank %d: %s\n", r->rank, err);
      exit(1);
    }
    if (it > 0) { /* the first call warms up */
      total += now() - t0;
      c += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
  }
  r->rd_max = r->halving_max = SIZE_MAX;
  double worst = total / iters;
  *cpu = c / iters;
  if (sf__ring_allreduce(r, &worst, 1, SF__DT_F64, SF__OP_MAX, err, sizeof err) ||
      sf__ring_allreduce(r, cpu, 1, SF__DT_F64, SF__OP_SUM, err, sizeof err))
    exit(1);
  return worst;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: ring_algos P ROUNDS ITERS SIZE...\n");
    return 2;
  }
  int p = atoi(argv[1]), rounds = atoi(argv[2]), iters = atoi(argv[3]), nsizes = argc - 4;
  if (p < 1 || p > 64 || rounds < 1 || iters < 1)
    return 2;
  char err[256];
  sf__peer peers[64];
  int lfd[64];
  for (int i = 0; i < p; i++) {
    snprintf(peers[i].addr, sizeof peers[i].addr, "127.0.0.%d", 2 + i);
    lfd[i] = sf__ring_listen(peers[i].addr, &peers[i].port, err, sizeof err);
    if (lfd[i] < 0) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
  }
  uint8_t secret[SF__SECRET_LEN] = {1};
  for (int rank = 0; rank < p; rank++) {
    if (fork())
      continue;
    sf__ring r;
    if (sf__ring_connect(&r, 1, rank, p, peers, lfd[rank], secret, 10000, err, sizeof err)) {
      fprintf(stderr, "rank %d: %s\n", rank, err);
      _exit(1);
    }
    if (getenv("SEGMENT"))
      r.segment = (size_t)atol(getenv("SEGMENT"));
    size_t maxb = 0;
    for (int s = 0; s < nsizes; s++)
      if ((size_t)atol(argv[4 + s]) > maxb)
        maxb = (size_t)atol(argv[4 + s]);
    float *buf = malloc(maxb + 4);
    double *t = calloc((size_t)nsizes * NALGO * rounds, sizeof *t);
    double *cpu = calloc((size_t)nsizes * NALGO * rounds, sizeof *cpu);
    for (int k = 0; k < rounds; k++)
      for (int s = 0; s < nsizes; s++)
        for (int a = 0; a < NALGO; a++) {
          int algo = (a + k) % NALGO;
          if (getenv("ALGOS") && !strstr(getenv("ALGOS"), names[algo]))
            continue;
          size_t at = ((size_t)s * NALGO + algo) * rounds + k;
          t[at] = measure(&r, buf, (size_t)atol(argv[4 + s]) / 4, algo, iters, &cpu[at]);
        }
    if (rank == 0) {
      for (int table = 0; table < 2; table++) {
        double *x = table ? cpu : t;
        printf("%d members, median of %d rounds of %d calls: %s (us)\n%10s", p, rounds, iters,
               table ? "CPU time of all members" : "wall time", "bytes");
        for (int a = 0; a < NALGO; a++)
          printf(" %10s", names[a]);
        printf("  best\n");
        for (int s = 0; s < nsizes; s++) {
          printf("%10ld", atol(argv[4 + s]));
          int best = 0;
          double bt = 1e300;
          for (int a = 0; a < NALGO; a++) {
            double *v = &x[((size_t)s * NALGO + a) * rounds];
            qsort(v, (size_t)rounds, sizeof *v, cmp);
            printf(" %10.1f", v[rounds / 2] * 1e6);
            if (v[rounds / 2] > 0 && v[rounds / 2] < bt)
              bt = v[rounds / 2], best = a;
          }
          printf("  %s\n", names[best]);
        }
      }
    }
    fflush(stdout);
    sf__ring_close(&r);
    _exit(0);
  }
  int rc = 0, st;
  while (wait(&st) > 0)
    rc |= !WIFEXITED(st) || WEXITSTATUS(st);
  return rc;
}
