#!/usr/bin/env python3
"""resources_race_test.py — @cpus calls that wait for CPU slots never hang.

tests/run/scheduler/resources.sflow (with --threads 2, so @cpus(2) calls
take every slot and others wait) run RUNS times, each within 10 s.  A call
that found no free slots used to be put on the waiting list in a second
hold of the lock; a give-back between the two emptied the list without it,
and the run waited for ever: about 5 runs in 100 hung.

usage: resources_race_test.py --sflowc PATH [--runs N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "resources")
        src = os.path.join(ROOT, "tests/run/scheduler/resources.sflow")
        subprocess.run([a.sflowc, src, "-o", exe], check=True)
        ref = subprocess.run([exe, "--threads", "2"], capture_output=True, text=True, timeout=30)
        if ref.returncode != 0:
            print("FAIL first run: exit %d\n%s" % (ref.returncode, ref.stderr))
            return 1
        bad = 0
        for i in range(a.runs):
            try:
                r = subprocess.run([exe, "--threads", "2", "--quiet"], capture_output=True,
                                   text=True, timeout=10)
            except subprocess.TimeoutExpired:
                print("FAIL run %d: no end within 10 s (a call waiting for slots was lost)" % i)
                bad += 1
                continue
            if r.returncode != 0 or r.stdout != ref.stdout:
                print("FAIL run %d: exit %d, output differs\n%s" % (i, r.returncode, r.stderr))
                bad += 1
    print("%d of %d runs hung or failed" % (bad, a.runs))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
