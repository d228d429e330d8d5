#!/usr/bin/env python3
"""peers.py — bench/data's Python side: the same numeric CSV read by
pandas.read_csv (C engine, which is single-threaded), pyarrow.csv with
use_threads=False and with its default thread pool.  Prints one line per
reader: NAME SECONDS (best of REPEAT) CHECKSUM."""
import sys
import time

path, repeat = sys.argv[1], int(sys.argv[2])


def best(fn):
    b, out = 1e9, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        b = min(b, time.perf_counter() - t0)
    return b, out


import pandas as pd
import pyarrow.csv as pacsv

t, df = best(lambda: pd.read_csv(path, engine="c", dtype="float64"))
print("pandas_c", "%.4f" % t, "%.3f" % (df["c0"].sum() + df["c7"].sum()))
t, df = best(lambda: pd.read_csv(path, engine="c", dtype="float64", float_precision="round_trip"))
print("pandas_c_round_trip", "%.4f" % t, "%.3f" % (df["c0"].sum() + df["c7"].sum()))
ro = pacsv.ReadOptions(use_threads=False)
t, tb = best(lambda: pacsv.read_csv(path, read_options=ro))
print("pyarrow_1_thread", "%.4f" % t, "%.3f" % (tb["c0"].to_numpy().sum() + tb["c7"].to_numpy().sum()))
t, tb = best(lambda: pacsv.read_csv(path))
print("pyarrow_threads", "%.4f" % t, "%.3f" % (tb["c0"].to_numpy().sum() + tb["c7"].to_numpy().sum()))
