#!/usr/bin/env python3
"""nn_buckets_test.py — a tensor[] goes through a group's collective in
buckets, few large transport calls, not one per tensor.

tests/runtime/nn_buckets.sflow: two members reduce 40 tensors of 10 f32
(1600 bytes) with allreduce_sum and broadcast them, and allreduce_mean a
transposed view.  Under --trace every transport call is a "collective"
slice; the test counts them per collective for three bucket caps
(SFLOW_BUCKET_MB): the default 25 MB packs the 40 tensors into one call
per member, 400 bytes into 4 (10 tensors each), 10 bytes, smaller than a
tensor, into 40 (a tensor is never split).  The values must be right for
each cap (the sum of both members', the root's, the view's mean written
back through its strides).

usage: nn_buckets_test.py --sflowc PATH
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = ("sum true\n"
       "view [[0.0, 4.5, 1.5, 6.0, 3.0, 7.5], [0.0, 4.5, 1.5, 6.0, 3.0, 7.5]]\n"
       "bcast [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], "
       "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]\n")
# cap (MB) -> transport calls per member for the 40 tensors
CASES = [(None, 1), ("0.0004", 4), ("0.00001", 40)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        exe, trace = os.path.join(d, "nn_buckets"), os.path.join(d, "t.json")
        subprocess.run([a.sflowc, os.path.join(ROOT, "tests/runtime/nn_buckets.sflow"), "-o", exe],
                       check=True)
        for cap, calls in CASES:
            env = dict(os.environ)
            env.pop("SFLOW_BUCKET_MB", None)
            if cap:
                env["SFLOW_BUCKET_MB"] = cap
            r = subprocess.run([exe, "--quiet", "--threads", "2", "--trace", trace], env=env,
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0 or r.stdout != OUT:
                print("FAIL cap %s: exit %d, output\n%s%s" % (cap, r.returncode, r.stdout, r.stderr))
                bad += 1
                continue
            events = json.load(open(trace))
            events = events["traceEvents"] if isinstance(events, dict) else events
            got = collections.Counter(e["name"] for e in events if e.get("cat") == "collective")
            want = {"allreduce_sum": 2 * calls, "broadcast": 2 * calls, "allreduce_mean": 2}
            print("cap %s MB: transport calls %s (want %s)" % (cap or "25 (default)", dict(got), want))
            if dict(got) != want:
                print("FAIL cap %s: wrong number of transport calls" % cap)
                bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
