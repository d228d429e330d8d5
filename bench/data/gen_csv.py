#!/usr/bin/env python3
"""gen_csv.py — the numeric CSV of bench/data: ROWS rows of 8 float columns.

    gen_csv.py OUT [--rows N] [--seed S]

Values are uniform in (-1000, 1000) written as Python's repr (up to 17
significant digits, as pandas' to_csv and numpy.savetxt('%r') write them),
so the parsers see full-precision numbers, not short decimals.  The same
seed always writes the same bytes.
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--rows", type=int, default=1_000_000)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
rng = random.Random(a.seed)
cols = ["c%d" % i for i in range(8)]
with open(a.out, "w", newline="") as f:
    f.write(",".join(cols) + "\n")
    u = rng.uniform
    lines = []
    for r in range(a.rows):
        lines.append(",".join(repr(u(-1000.0, 1000.0)) for _ in cols))
        if len(lines) == 10000:
            f.write("\n".join(lines) + "\n")
            lines = []
    if lines:
        f.write("\n".join(lines) + "\n")
