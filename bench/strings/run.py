#!/usr/bin/env python3
"""String building: n appends of "ab" to one string in sflow (`s += "ab"`),
Python (the same loop) and C (a buffer grown by realloc, doubling), timed
side by side for n = 160,000 and 1,000,000.

Each program times its own loop (sflow's now(), Python's perf_counter, C's
clock_gettime), so start-up is left out; each runs --runs times and the
best is kept.  All must print the same length (2n).
--before OTHER_SFLOWC also times append.sflow compiled by another sflowc
(an older build) in the same rounds; a build whose `+=` copies the string
takes minutes at 1,000,000 (--sizes 160000 keeps it short).
Usage: run.py [--sflowc build/bin/sflowc] [--before SFLOWC] [--runs N] [--sizes N,N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    length, secs = p.stdout.split()
    return int(length), float(secs)


def best(cmd, runs):
    got = [run(cmd) for _ in range(runs)]
    return got[0][0], min(s for _, s in got)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build/bin/sflowc"))
    ap.add_argument("--before", help="another sflowc, timed in the same rounds")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="160000,1000000")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    sf, c = os.path.join(tmp, "append_sf"), os.path.join(tmp, "append_c")
    subprocess.run([a.sflowc, "-O2", os.path.join(HERE, "append.sflow"), "-o", sf], check=True)
    subprocess.run(["cc", "-O2", os.path.join(HERE, "append.c"), "-o", c], check=True)
    peers = [("sflow", lambda n: [sf, "--quiet", "--n", str(n)])]
    if a.before:
        bf = os.path.join(tmp, "append_before")
        subprocess.run([a.before, "-O2", os.path.join(HERE, "append.sflow"), "-o", bf], check=True)
        peers.insert(0, ("before", lambda n: [bf, "--quiet", "--n", str(n)]))
    peers += [("python", lambda n: [sys.executable, os.path.join(HERE, "append.py"), str(n)]),
              ("C", lambda n: [c, str(n)])]
    print("seconds of the append loop, best of %d (s += \"ab\", n times)" % a.runs)
    print("%-10s" % "n" + "".join("%12s" % name for name, _ in peers) + "   sflow/C  sflow/python")
    ok = True
    for n in [int(x) for x in a.sizes.split(",")]:
        times = {}
        for name, cmd in peers:
            length, secs = best(cmd(n), 1 if name == "before" else a.runs)
            ok &= length == 2 * n
            times[name] = secs
        print("%-10d" % n + "".join("%12.6f" % times[name] for name, _ in peers) +
              "   %6.1fx  %11.1fx" % (times["sflow"] / max(times["C"], 1e-9),
                                      times["sflow"] / max(times["python"], 1e-9)))
    if not ok:
        sys.exit("a program built a string of the wrong length")


if __name__ == "__main__":
    main()
