/*
 * barrier_peer.c — the peer of allreduce_small.sflow: MEMBERS threads of one
 * process call an allreduce_mean of SIZE floats ITERS times, each call
 * timed by thread 0; prints `RESULT allreduce_mean_<size> <median us>
 * <total seconds>` as the sflow program does.
 *
 * The algorithm is sflow's small-array path (each member reduces every
 * array into its own buffer, in the same order, between two barriers), and
 * the barrier is glibc's pthread_barrier_wait, which sleeps on a futex that
 * the last thread to arrive wakes: what a blocking shared-memory
 * collective costs with no runtime around it.  PyTorch's gloo would be the
 * natural peer, but its wheels cannot be installed here (see
 * docs/performance.md, "Collectives under CPU contention").
 *
 *   cc -O2 -pthread bench/collectives/barrier_peer.c -o barrier_peer
 *   ./barrier_peer SIZE MEMBERS ITERS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long size, members, iters;
static float **bufs;
static double *times;
static pthread_barrier_t bar;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void allreduce_mean(long rank, float *acc) {
  pthread_barrier_wait(&bar); /* every array is ready */
  for (long i = 0; i < size; i++) {
    long owner = i * members / size; /* the slice owner's value first */
    float s = bufs[owner][i];
    for (long k = 0; k < members; k++)
      if (k != owner)
        s += bufs[k][i];
    acc[i] = s / (float)members;
  }
  pthread_barrier_wait(&bar); /* every array is read */
  memcpy(bufs[rank], acc, (size_t)size * sizeof(float));
}

static void *member(void *arg) {
  long rank = (long)arg;
  float *acc = malloc((size_t)size * sizeof(float));
  for (long i = 0; i < size; i++)
    bufs[rank][i] = (float)(rank + 1);
  for (long it = 0; it < iters; it++) {
    double t0 = now();
    allreduce_mean(rank, acc);
    if (rank == 0)
      times[it] = now() - t0;
  }
  free(acc);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: barrier_peer SIZE MEMBERS ITERS\n");
    return 2;
  }
  size = atol(argv[1]);
  members = atol(argv[2]);
  iters = atol(argv[3]);
  if (size < 1 || members < 1 || iters < 1)
    return 2;
  bufs = calloc((size_t)members, sizeof *bufs);
  for (long m = 0; m < members; m++)
    bufs[m] = calloc((size_t)size, sizeof(float));
  times = calloc((size_t)iters, sizeof *times);
  pthread_barrier_init(&bar, NULL, (unsigned)members);
  pthread_t *th = calloc((size_t)members, sizeof *th);
  double t0 = now();
  for (long m = 0; m < members; m++)
    pthread_create(&th[m], NULL, member, (void *)m);
  for (long m = 0; m < members; m++)
    pthread_join(th[m], NULL);
  double total = now() - t0;
  float want = (float)(members + 1) / 2.0f;
  if (bufs[0][0] != want) {
    fprintf(stderr, "barrier_peer: got %g, want %g\n", bufs[0][0], want);
    return 1;
  }
  qsort(times, (size_t)iters, sizeof *times, cmp);
  printf("RESULT allreduce_mean_%ld %.3f %.6f\n", size, times[iters / 2] * 1e6, total);
  return 0;
}
