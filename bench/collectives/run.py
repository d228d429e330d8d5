#!/usr/bin/env python3
"""`make bench-collectives`: the latency of a small group collective, idle and
under CPU contention, beside a peer.

Each side does ITERS calls of allreduce_mean on SIZE f32 elements (10 and
1024 by default, --sizes) between 2 members, every call timed by member 0 (`allreduce_small.sflow`; the peer,
`barrier_peer.c`, is the same algorithm on two pthreads meeting in glibc's
futex-based pthread_barrier_wait).  Idle, then with two busy loops (python
`while True: pass`) pinned to the first two CPUs this process may use,
started before and killed after.  Prints the median of ROUNDS runs of each
run's median, in microseconds per call, and the contended/idle ratio.

  python3 bench/collectives/run.py --sflowc build/bin/sflowc [--before OLD_SFLOWC]

--before compiles the sflow program with a second sflowc too (an older
build) and measures it in the same rounds.  PyTorch's gloo is not a peer
here: its wheels on the reachable package index pull the CUDA libraries
(gigabytes); docs/performance.md says so beside the figures.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def busy_loops():
    cpus = sorted(os.sched_getaffinity(0))
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda c=cpu: os.sched_setaffinity(0, {c}))
            for cpu in (cpus * 2)[:2]]


def once(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    line = [l for l in r.stdout.splitlines() if l.startswith("RESULT ")]
    if r.returncode != 0 or not line:
        raise RuntimeError("%s: exit %d %s" % (cmd[0], r.returncode, r.stderr[-300:]))
    _, _, median_us, total = line[0].split()
    return float(median_us), float(total)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--before", help="another sflowc, measured in the same rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=2000, help="calls per idle run")
    ap.add_argument("--busy-iters", type=int, default=200, help="calls per contended run")
    ap.add_argument("--sizes", default="10,1024", help="f32 elements per call, comma-separated")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-bench-coll-")
    try:
        sides = []
        for name, sflowc in (("sflow", a.sflowc), ("sflow before", a.before)):
            if not sflowc:
                continue
            exe = os.path.join(tmp, name.replace(" ", "_"))
            subprocess.run([sflowc, "-O2", os.path.join(HERE, "allreduce_small.sflow"), "-o",
                            exe], check=True)
            sides.append((name, lambda n, size, exe=exe: [exe, "--iters", str(n), "--size",
                                                           str(size), "--journal=false",
                                                           "--quiet"]))
        peer = os.path.join(tmp, "barrier_peer")
        subprocess.run(["cc", "-O2", "-pthread", os.path.join(HERE, "barrier_peer.c"), "-o",
                        peer], check=True)
        sides.append(("C pthread_barrier", lambda n, size: [peer, str(size), "2", str(n)]))
        sizes = [int(x) for x in a.sizes.split(",")]
        res = {(s, z, m): [] for s, _ in sides for z in sizes for m in ("idle", "busy")}
        for _ in range(a.rounds):
            for z in sizes:
                for s, cmd in sides:
                    res[(s, z, "idle")].append(once(cmd(a.iters, z)))
            procs = busy_loops()
            try:
                for z in sizes:
                    for s, cmd in sides:
                        res[(s, z, "busy")].append(once(cmd(a.busy_iters, z)))
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
        load = open("/proc/loadavg").read().split()[:3]
        print("== allreduce_mean, 2 members: median us per call (median of %d runs); "
              "%d CPUs, load average %s" % (a.rounds, os.cpu_count(), " ".join(load)))
        print("| side | f32[n] | idle | 2 busy loops | busy/idle | 200 calls busy (s) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for z in sizes:
            for s, _ in sides:
                idle = statistics.median(m for m, _ in res[(s, z, "idle")])
                busy = statistics.median(m for m, _ in res[(s, z, "busy")])
                total = statistics.median(t for _, t in res[(s, z, "busy")]) * 200 / a.busy_iters
                print("| %s | %d | %.2f us | %.2f us | %.1fx | %.3f |" % (s, z, idle, busy,
                                                                       busy / idle, total))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
