/*
 * mpi_allreduce.c — the peer for sflow's ring allreduce: MPI_Allreduce of
 * float sums, in place, over the same sizes and hosts (bench/cluster/run.py).
 * Prints one line per size: "mpi bytes=B time_us=T algbw_MBps=X", where T
 * is the slowest rank's mean over ITERS timed iterations after one warm-up,
 * the same measure sflow's selftest reports.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 5;
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
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      total += MPI_Wtime() - t0;
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
  MPI_Finalize();
  return 0;
}
