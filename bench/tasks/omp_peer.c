/*
 * omp_peer.c — the C peers of bench/tasks, measured in the same run as the
 * sflow programs (bench/tasks/run.sh).  Same protocol: a warm-up round, then
 * the best of `reps`, printed as `RESULT name count best_seconds`.
 *
 *   omp_peer tasks N N_ONE REPS   OpenMP tasks (#pragma omp task) doing
 *                                 nothing: N created then one taskwait
 *                                 (pipelined); N_ONE each followed by a
 *                                 taskwait (one by one)
 *   omp_peer cold N               one pipelined round of N tasks in a fresh
 *                                 process, no warm-up (the peer of
 *                                 cold.sflow; run.sh also times the process)
 *   omp_peer chain N REPS         N tasks chained by depend(inout: x)
 *   omp_peer allreduce SIZE MEMBERS ITERS REPS [in]
 *                                 a plain C allreduce of MEMBERS host f32
 *                                 arrays on one thread: sum into member 0,
 *                                 memcpy back to the others (filled as in
 *                                 allreduce.sflow, so every sum is 0);
 *                                 "in" names it allreduce_in_SIZE, the peer
 *                                 of allreduce.sflow --inside 1
 *
 *   gcc -O2 -fopenmp bench/tasks/omp_peer.c -o omp_peer
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __attribute__((noinline)) long noop(long x) {
  __asm__ volatile("" ::: "memory");
  return x;
}

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "omp_peer: %s: wrong result\n", what);
    exit(1);
  }
}

/* ---------------------------------------------------------------- tasks */

static double pipelined(long n, long *out) {
  double t0 = omp_get_wtime();
  for (long i = 0; i < n; i++) {
#pragma omp task firstprivate(i) shared(out)
    out[i] = noop(i);
  }
#pragma omp taskwait
  double dt = omp_get_wtime() - t0;
  long s = 0;
  for (long i = 0; i < n; i++)
    s += out[i];
  check(s == n * (n - 1) / 2, "tasks pipelined");
  return dt;
}

static double one_by_one(long n) {
  double t0 = omp_get_wtime();
  long s = 0;
  for (long i = 0; i < n; i++) {
    long r;
#pragma omp task firstprivate(i) shared(r)
    r = noop(i);
#pragma omp taskwait
    s += r;
  }
  double dt = omp_get_wtime() - t0;
  check(s == n * (n - 1) / 2, "tasks one by one");
  return dt;
}

static double chain(long n) {
  long x = 0;
  double t0 = omp_get_wtime();
  for (long i = 0; i < n; i++) {
#pragma omp task depend(inout: x) shared(x)
    x = noop(x) + 1;
  }
#pragma omp taskwait
  double dt = omp_get_wtime() - t0;
  check(x == n, "chain");
  return dt;
}

#define BEST(expr, reps, best)                                                                  \
  do {                                                                                          \
    (void)(expr);                                                                               \
    best = 1e300;                                                                               \
    for (int r_ = 0; r_ < (reps); r_++) {                                                       \
      double t_ = (expr);                                                                       \
      if (t_ < best)                                                                            \
        best = t_;                                                                              \
    }                                                                                           \
  } while (0)

/* ------------------------------------------------------------ allreduce */

static double allreduce_round(float **bufs, long size, int members, long iters) {
  for (int m = 0; m < members; m++) {
    float v = m == members - 1 && members > 1 ? -(float)((members - 1) * members / 2) : (float)(m + 1);
    for (long i = 0; i < size; i++)
      bufs[m][i] = v;
  }
  float want = members == 1 ? 1.0f : 0.0f, first = -1;
  double t0 = omp_get_wtime();
  for (long it = 0; it < iters; it++) {
    float *a = bufs[0];
    for (int m = 1; m < members; m++) {
      const float *b = bufs[m];
      for (long i = 0; i < size; i++)
        a[i] += b[i];
    }
    for (int m = 1; m < members; m++)
      memcpy(bufs[m], a, (size_t)size * sizeof(float));
    if (it == 0)
      first = bufs[members - 1][size - 1];
  }
  double dt = omp_get_wtime() - t0;
  check(first == want, "allreduce");
  return dt;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: omp_peer tasks N N_ONE REPS | chain N REPS | "
                    "allreduce SIZE MEMBERS ITERS REPS\n");
    return 2;
  }
  double best;
  if (!strcmp(argv[1], "tasks") && argc == 5) {
    long n = atol(argv[2]), m = atol(argv[3]);
    int reps = atoi(argv[4]);
    long *out = malloc((size_t)n * sizeof *out);
#pragma omp parallel
#pragma omp single
    {
      BEST(pipelined(n, out), reps, best);
      printf("RESULT tasks_pipelined %ld %.9g\n", n, best);
      BEST(one_by_one(m), reps, best);
      printf("RESULT tasks_one_by_one %ld %.9g\n", m, best);
    }
    free(out);
  } else if (!strcmp(argv[1], "cold") && argc == 3) {
    long n = atol(argv[2]);
    long *out = malloc((size_t)n * sizeof *out);
#pragma omp parallel
#pragma omp single
    printf("RESULT tasks_cold %ld %.9g\n", n, pipelined(n, out));
    free(out);
  } else if (!strcmp(argv[1], "chain") && argc == 4) {
    long n = atol(argv[2]);
    int reps = atoi(argv[3]);
#pragma omp parallel
#pragma omp single
    {
      BEST(chain(n), reps, best);
      printf("RESULT chain %ld %.9g\n", n, best);
    }
  } else if (!strcmp(argv[1], "allreduce") && (argc == 6 || (argc == 7 && !strcmp(argv[6], "in")))) {
    long size = atol(argv[2]), iters = atol(argv[4]);
    int members = atoi(argv[3]), reps = atoi(argv[5]);
    float **bufs = malloc((size_t)members * sizeof *bufs);
    for (int m = 0; m < members; m++)
      bufs[m] = malloc((size_t)size * sizeof(float));
    BEST(allreduce_round(bufs, size, members, iters), reps, best);
    printf("RESULT allreduce_%s%ld %ld %.9g\n", argc == 7 ? "in_" : "", size, iters, best);
    for (int m = 0; m < members; m++)
      free(bufs[m]);
    free(bufs);
  } else {
    fprintf(stderr, "omp_peer: bad arguments\n");
    return 2;
  }
  return 0;
}
