/*
 * mpi_allreduce.c — the peer for sflow's ring allreduce: MPI_Allreduce of
 * float sums, in place, over the same sizes and hosts (bench/cluster/run.py).
 * Prints one line per size: "mpi bytes=B time_us=T algbw_MBps=X", where T
 * is the slowest rank's mean over ITERS timed iterations after one warm-up,
 * the same measure sflow's selftest reports.  Every result is checked.
 *
 * By default a barrier starts each timed call, so the time is the
 * collective's alone.  sflow's selftest (runtime/cluster/worker_main.c) has no barrier:
 * each member fills its buffer, times the call and checks the result, so
 * a member that starts early also times its wait for the others' filling
 * and checking.  MPI_ALLREDUCE_NO_BARRIER=1 times MPI the same way.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 5;
  const char *nb = getenv("MPI_ALLREDUCE_NO_BARRIER");
  int barrier = !nb || !strcmp(nb, "0");
  long wrong = 0;
  for (int a = 2; a < argc; a++) {
    long bytes = atol(argv[a]);
    long count = bytes / 4;
    float *buf = malloc((size_t)count * 4 + 4);
    for (long i = 0; i < count; i++)
      buf[i] = (float)((rank + 1) * (i % 1024 + 1));
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double total = 0;
    for (int it = 0; it < iters; it++) {
      for (long i = 0; i < count; i++)
        buf[i] = (float)((rank + 1) * (i % 1024 + 1));
      if (barrier)
        MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      total += MPI_Wtime() - t0;
      /* The sum of (r+1)*(i%1024+1) over ranks, as the selftest checks it. */
      double k = (double)size * (size + 1) / 2.0;
      for (long i = 0; i < count; i++)
        wrong += (double)buf[i] != k * (double)(i % 1024 + 1);
    }
    double worst;
    MPI_Reduce(&total, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double t = worst / iters;
      printf("mpi nodes=%d bytes=%ld time_us=%.1f algbw_MBps=%.1f\n", size, bytes, t * 1e6,
             bytes / t / 1e6);
      fflush(stdout);
    }
    free(buf);
  }
  if (wrong)
    fprintf(stderr, "mpi rank %d: %ld wrong sums\n", rank, wrong);
  MPI_Finalize();
  return wrong != 0;
}
