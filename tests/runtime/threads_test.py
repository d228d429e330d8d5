#!/usr/bin/env python3
"""--threads far above the CPU count costs idle threads nothing, and the
flag is bounded (docs/runtime.md, "Scheduling"): a 0.05 s job on 1024
threads (the maximum) takes well under 1.5 s of wall time and adds little
CPU time to the same job on 2 threads (idle workers park on a futex
instead of scanning every deque and yielding; each thread no longer
zeroes a MiB of thread-local buffers); 0 and 1025 exit 2 with the range
before the program prints, and --help states the range.

Usage: threads_test.py --sflowc PATH
SFLOW_TIME_SCALE=N loosens the time limits N times (scripts/tsan.sh)."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = float(os.environ.get("SFLOW_TIME_SCALE", "1"))
MAX = 1024
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def best_of(exe, threads, runs=3):
    """Best wall and CPU time of a few runs (a loaded machine inflates
    some of them); also the outputs."""
    walls, cpus, outs = [], [], set()
    for _ in range(runs):
        before = os.times()
        t0 = time.monotonic()
        p = subprocess.run([exe, "--threads", str(threads), "--quiet"], capture_output=True,
                           timeout=120)
        walls.append(time.monotonic() - t0)
        after = os.times()
        cpus.append((after.children_user - before.children_user) +
                    (after.children_system - before.children_system))
        outs.add((p.returncode, p.stdout))
    return min(walls), min(cpus), outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-threads-")
    try:
        exe = os.path.join(tmp, "threads")
        subprocess.run([a.sflowc, "-O2", os.path.join(HERE, "threads.sflow"), "-o", exe],
                       check=True)
        wall2, cpu2, outs2 = best_of(exe, 2)
        wall, cpu, outs = best_of(exe, MAX)
        print("  --threads 2: %.3f s wall, %.3f s CPU; --threads %d: %.3f s wall, %.3f s CPU"
              % (wall2, cpu2, MAX, wall, cpu))
        check(len(outs) == 1 and outs == outs2 and list(outs)[0][0] == 0,
              "--threads %d prints what --threads 2 prints, exit 0" % MAX)
        check(wall < 1.5 * SCALE, "--threads %d runs the 0.05 s job in under 1.5 s: %.3f s"
              % (MAX, wall))
        check(cpu - cpu2 < 0.3 * SCALE,
              "%d threads add under 0.3 s of CPU time to the job: %.3f s" % (MAX, cpu - cpu2))

        for bad in ("0", str(MAX + 1), "65536", "-3", "many"):
            try:
                p = subprocess.run([exe, "--threads", bad], capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:  # it ran, with that many threads
                p = subprocess.CompletedProcess([], -1, b"", b"(timed out after 30 s)")
            err = p.stderr.decode()
            check(p.returncode == 2 and p.stdout == b"" and
                  "invalid value '%s' for --threads: expected a number of threads from 1 to %d"
                  % (bad, MAX) in err,
                  "--threads %s exits 2 with the range before the run: %d %r"
                  % (bad, p.returncode, err[:120]))
        p = subprocess.run([exe, "--help"], capture_output=True, timeout=60)
        line = [l for l in p.stdout.decode().splitlines() if "--threads" in l]
        check(len(line) == 1 and "1 to %d" % MAX in line[0], "--help gives the range: %r" % line)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
