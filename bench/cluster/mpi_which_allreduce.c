/*
 * mpi_which_allreduce.c — which allreduce algorithm Open MPI's tuned
 * component picks: an LD_PRELOAD shim over the six
 * ompi_coll_base_allreduce_intra_* functions of libmpi (4.1) that prints
 * the name and element count of the first one each rank calls, then
 * forwards to the real one.  The tuned component calls them through the
 * PLT, so the shim sees every choice.
 *
 *   cc -O2 -shared -fPIC bench/cluster/mpi_which_allreduce.c -o which.so -ldl
 *   mpirun -np 4 -x LD_PRELOAD=$PWD/which.so --mca btl tcp,self \
 *       mpi_allreduce 1 BYTES 2>&1 | grep which
 *
 * (one size per mpirun: only the first call of each rank is printed.)
 * The functions take at most eight integer or pointer arguments, so
 * forwarding eight register-sized values passes every signature through
 * unchanged on x86-64 and aarch64.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef long (*allreduce_fn)(void *, void *, long, void *, void *, void *, void *, long);

#define WHICH(name)                                                                    \
  long name(void *a, void *b, long count, void *d, void *e, void *f, void *g, long h) { \
    static allreduce_fn real;                                                          \
    static int said;                                                                   \
    if (!real)                                                                         \
      real = (allreduce_fn)dlsym(RTLD_NEXT, #name);                                    \
    if (!said++)                                                                       \
      fprintf(stderr, "which %s count=%ld\n", #name, count);                           \
    return real(a, b, count, d, e, f, g, h);                                           \
  }

WHICH(ompi_coll_base_allreduce_intra_basic_linear)
WHICH(ompi_coll_base_allreduce_intra_nonoverlapping)
WHICH(ompi_coll_base_allreduce_intra_recursivedoubling)
WHICH(ompi_coll_base_allreduce_intra_redscat_allgather)
WHICH(ompi_coll_base_allreduce_intra_ring)
WHICH(ompi_coll_base_allreduce_intra_ring_segmented)
