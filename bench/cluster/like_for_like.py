#!/usr/bin/env python3
"""sflow's allreduce against Open MPI's, both timed from a barrier.

run.py compares `--sflow-selftest allreduce` (which times each call
without a barrier, runtime/cluster/worker_main.c) with mpi_allreduce.c (a barrier
before each call).  This times both the same way on one host: ring_algos
(BARRIER=1, 4 members on loopback TCP, the algorithm sflow's thresholds
pick at each size) against `mpirun -np 4` of mpi_allreduce.c (TCP BTL on
loopback, mpi_yield_when_idle), in interleaved rounds; it prints each
side's median, the spread (slowest / fastest round) and the ratio.

    cc -O2 -Iruntime -iquote runtime/core -iquote runtime/sched -iquote runtime/durable -iquote runtime/gpu -iquote runtime/cluster bench/cluster/ring_algos.c BUILD/lib/sflow/libsflowrt.a \\
       -ldl -lpthread -lm -o ring_algos
    mpicc -O2 bench/cluster/mpi_allreduce.c -o mpi_allreduce
    python3 bench/cluster/like_for_like.py ./ring_algos ./mpi_allreduce [ROUNDS]
"""
import os
import re
import statistics
import subprocess
import sys

SIZES = [1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
RD_MAX, HALVING_MAX = 32 << 10, 4 << 20  # runtime/cluster/cluster.h, for a group of 4


def column(b):
    """ring_algos' column (doubling, halving, ring) that sflow uses at b bytes."""
    return 0 if b <= RD_MAX else 1 if b <= HALVING_MAX else 2


def run_mpi(mpi_bin):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MPI_ALLREDUCE_NO_BARRIER="0")
    out = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                          "-x", "MPI_ALLREDUCE_NO_BARRIER", "--mca", "btl", "tcp,self",
                          "--mca", "btl_tcp_if_include", "lo", "--mca", "mpi_yield_when_idle", "1",
                          mpi_bin, "20"] + [str(b) for b in SIZES],
                         capture_output=True, text=True, env=env, timeout=300, check=True).stdout
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"bytes=(\d+) time_us=([\d.]+)", out)}


def run_sflow(ring_algos):
    out = subprocess.run([ring_algos, "4", "1", "20"] + [str(b) for b in SIZES],
                         capture_output=True, text=True, env=dict(os.environ, BARRIER="1"),
                         timeout=300, check=True).stdout
    res = {}
    for line in out.split("CPU")[0].splitlines():  # the wall-time table
        f = line.split()
        if len(f) >= 4 and f[0].isdigit() and int(f[0]) in SIZES:
            res[int(f[0])] = float(f[1 + column(int(f[0]))])
    return res


def fmt(us):
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.0f} us"


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ring_algos, mpi_bin = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    sf, mp = {b: [] for b in SIZES}, {b: [] for b in SIZES}
    print("load average at start:", open("/proc/loadavg").read().split()[0])
    for r in range(rounds):
        sides = [("mpi", run_mpi, mpi_bin, mp), ("sflow", run_sflow, ring_algos, sf)]
        for _, fn, arg, into in (sides if r % 2 == 0 else sides[::-1]):
            for b, t in fn(arg).items():
                into[b].append(t)
    print("load average at end:", open("/proc/loadavg").read().split()[0])
    print("| size | sflow (ring_algos, BARRIER=1) | spread | MPI_Allreduce (mpirun, one host) "
          "| spread | sflow / MPI |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in SIZES:
        s, m = statistics.median(sf[b]), statistics.median(mp[b])
        label = f"{b >> 20} MB" if b >= 1 << 20 else f"{b >> 10} KB"
        print(f"| {label} | {fmt(s)} | {max(sf[b]) / min(sf[b]):.2f} | {fmt(m)} | "
              f"{max(mp[b]) / min(mp[b]):.2f} | {m / s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
