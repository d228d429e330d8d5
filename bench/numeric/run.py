#!/usr/bin/env python3
"""Numeric programs in sflow and the same in C (cc -O2), timed side by side.

For each program: compile both (compile times reported too), run each
3 times, keep the best time, check that both print the same result, and
print sflow/C.  Run times are CPU times (user + sys of the child, from
wait4), which time slicing on a shared machine does not inflate as it does
wall times; --wall uses wall times instead.
--before OTHER_SFLOWC also compiles each program with another sflowc (an
older build) and runs it in the same rounds, for before/after tables.
Usage: run.py [--sflowc build/bin/sflowc] [--before SFLOWC] [--runs N] [--wall]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = ["fib", "tree", "loops", "saxpy", "mandel", "sieve", "dot"]


WALL = False


def timed(cmd):
    """Runs cmd; returns (seconds, stdout): wall time, or with WALL unset
    the CPU time (user + sys) of the child."""
    t = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    if not WALL:
        dt = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return dt, p.stdout.strip()


def same(a, b):
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build/bin/sflowc"))
    ap.add_argument("--before", help="another sflowc, timed in the same rounds")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wall", action="store_true", help="wall times instead of CPU times")
    args = ap.parse_args()
    global WALL
    WALL = args.wall
    tmp = tempfile.mkdtemp()
    rows = []
    print("times are %s" % ("wall seconds" if WALL else "CPU seconds (user + sys)"))
    if args.before:
        print("%-8s %10s %10s %10s %8s %8s  %s" % ("program", "before s", "sflow s", "C -O2 s",
                                                "before", "ratio", "result"))
    else:
        print("%-8s %10s %10s %8s %12s %12s  %s" % ("program", "sflow s", "C -O2 s", "ratio",
                                                  "sflowc -O2 s", "cc -O2 s", "result"))
    for name in PROGRAMS:
        sf_exe, c_exe = os.path.join(tmp, name + "_sf"), os.path.join(tmp, name + "_c")
        sf_ct, _ = timed([args.sflowc, "-O2", os.path.join(HERE, name + ".sflow"), "-o", sf_exe])
        c_ct, _ = timed(["cc", "-O2", os.path.join(HERE, name + ".c"), "-o", c_exe])
        b_exe = os.path.join(tmp, name + "_before")
        if args.before:
            timed([args.before, "-O2", os.path.join(HERE, name + ".sflow"), "-o", b_exe])
        sf_best = c_best = b_best = float("inf")
        sf_out = c_out = b_out = None
        for _ in range(args.runs):
            if args.before:
                dt, b_out = timed([b_exe])
                b_best = min(b_best, dt)
            dt, sf_out = timed([sf_exe])
            sf_best = min(sf_best, dt)
            dt, c_out = timed([c_exe])
            c_best = min(c_best, dt)
        ok = same(sf_out, c_out) and (not args.before or same(b_out, c_out))
        ratio = sf_best / c_best
        rows.append((name, ratio, ok))
        if args.before:
            print("%-8s %10.3f %10.3f %10.3f %7.2fx %7.2fx  %s" % (
                name, b_best, sf_best, c_best, b_best / c_best, ratio,
                "same (%s)" % sf_out if ok else "DIFFERENT: before %s, sflow %s, C %s" % (b_out, sf_out, c_out)))
            continue
        print("%-8s %10.3f %10.3f %7.2fx %12.3f %12.3f  %s" % (name, sf_best, c_best, ratio, sf_ct, c_ct,
              "same (%s)" % sf_out if ok else "DIFFERENT: sflow %s, C %s" % (sf_out, c_out)))
    geo = 1.0
    for _, r, _ in rows:
        geo *= r
    geo **= 1.0 / len(rows)
    print("geometric mean sflow/C: %.2fx; worst: %.2fx" % (geo, max(r for _, r, _ in rows)))
    if not all(ok for *_, ok in rows):
        sys.exit("results differ")


if __name__ == "__main__":
    main()
