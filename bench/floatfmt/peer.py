#!/usr/bin/env python3
"""bench/floatfmt's Python side: repr() of every value of an f64 .npy
file (CPython's shortest round-trip printer, David Gay's dtoa) and
pandas.DataFrame.to_csv of the same values as COLS columns; each the best
of REPEAT runs, printed as `name seconds checksum`.
Usage: peer.py VALUES.npy OUT.csv COLS REPEAT"""
import sys
import time

import numpy as np
import pandas as pd

npy, out, cols, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
xs = np.load(npy)
vals = xs.tolist()
df = pd.DataFrame(xs[: len(xs) // cols * cols].reshape(-1, cols), columns=[f"c{c}" for c in range(cols)])
best_repr = best_csv = 1e9
n = 0
for _ in range(repeat):
    t0 = time.perf_counter()
    n = 0
    for x in vals:
        n += len(repr(x))
    best_repr = min(best_repr, time.perf_counter() - t0)
    t0 = time.perf_counter()
    df.to_csv(out, index=False)
    best_csv = min(best_csv, time.perf_counter() - t0)
print("python_repr", "%.4f" % best_repr, n)
print("pandas_to_csv", "%.4f" % best_csv, df.size)
print("VERSION", sys.version.split()[0], pd.__version__)
