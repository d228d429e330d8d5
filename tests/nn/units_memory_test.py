#!/usr/bin/env python3
"""std.train's FSDP units hold less at the step's peak (docs/train.md, "Units").

Runs tests/nn/units_memory.sflow, one process per case (the runtime's
tensor counters are the process's), for groups of 1, 2 and 4 members
under shard "gradients", "parameters" and "parameters" with units, and
asserts:
  - every measured peak within 10% of train.plan_peak (plan_units);
  - with 2 and 4 members, units below "gradients", which is below
    "parameters" without units (that one holds the whole params for the
    training call, plus the pieces);
  - with 4 members, the issue's bound per worker: a quarter of the
    params, gradients and AdamW state (16 bytes a float) plus the largest
    unit's gathered values and gradients (8 bytes a float), 5% allowed for
    the activations (a batch of 4 rows) and members out of step.

Usage: units_memory_test.py --sflowc build/bin/sflowc"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
P = 4 * (256 * 256 + 256) + 256 * 4 + 4   # the MLP's floats
UNIT = 256 * 256 + 256                      # its largest unit's


def run(exe, workers, shard, units):
    out = subprocess.run([exe, "--workers", str(workers), "--shard", shard,
                          "--units=" + ("true" if units else "false"), "--journal=false"],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit("FAIL: %d %s units=%s exited %d: %s" % (workers, shard, units, out.returncode,
                                                         out.stderr[-2000:]))
    w = out.stdout.split()
    if len(w) != 4 or w[0] != "measured" or w[2] != "planned":
        sys.exit("FAIL: unexpected output %r" % out.stdout)
    return int(w[1]), int(w[3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "units_memory")
        subprocess.run([a.sflowc, os.path.join(HERE, "units_memory.sflow"), "-o", exe], check=True)
        for n in (1, 2, 4):
            got = {}
            for name, shard, units in (("gradients", "gradients", False),
                                       ("parameters", "parameters", False),
                                       ("units", "parameters", True)):
                m, p = run(exe, n, shard, units)
                got[name] = m
                off = (m - p) / p
                print("%d workers %-10s measured %8.3f MB  planned %8.3f MB  off %+.1f%%"
                      % (n, name, m / 1e6, p / 1e6, 100 * off))
                if abs(off) > 0.10:
                    bad.append("%d workers %s: measured %d, planned %d" % (n, name, m, p))
            if n > 1 and not got["units"] < got["gradients"] < got["parameters"]:
                bad.append("%d workers: want units < gradients < parameters, got %r" % (n, got))
            if n == 4:
                bound = n * (16 * P // n + 8 * UNIT)
                print("4 workers: units %.3f MB, the bound %.3f MB (%.2f of it)"
                      % (got["units"] / 1e6, bound / 1e6, got["units"] / bound))
                if got["units"] > 1.05 * bound:
                    bad.append("4 workers: units' peak %d over the bound %d" % (got["units"], bound))
    if bad:
        sys.exit("FAIL:\n  " + "\n  ".join(bad))
    print("PASS")


if __name__ == "__main__":
    main()
