#!/usr/bin/env python3
"""peers.py — bench/data's Python side: the same numeric CSV read by
pandas.read_csv (C engine, which is single-threaded), and with WHICH=all
also with float_precision="round_trip" and by pyarrow.csv with
use_threads=False and with its default thread pool.  Prints one line per
reader: NAME SECONDS (best of REPEAT) CHECKSUM; pandas' names carry its
major version (pandas_c_3, pandas_c_2).

    peers.py CSV REPEAT [all|pandas]
"""
import sys
import time
import warnings

# pandas 3 deprecates float_precision (its default parser rounds correctly now).
warnings.simplefilter("ignore", FutureWarning)
warnings.filterwarnings("ignore", message=".*float_precision.*")

path, repeat = sys.argv[1], int(sys.argv[2])
which = sys.argv[3] if len(sys.argv) > 3 else "all"


def best(fn):
    b, out = 1e9, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        b = min(b, time.perf_counter() - t0)
    return b, out


import pandas as pd

major = pd.__version__.split(".")[0]
t, df = best(lambda: pd.read_csv(path, engine="c", dtype="float64"))
print("pandas_c_%s_(%s)" % (major, pd.__version__), "%.4f" % t, "%.3f" % (df["c0"].sum() + df["c7"].sum()))
if which == "all":
    import pyarrow
    import pyarrow.csv as pacsv

    t, df = best(lambda: pd.read_csv(path, engine="c", dtype="float64", float_precision="round_trip"))
    print("pandas_c_%s_round_trip" % major, "%.4f" % t, "%.3f" % (df["c0"].sum() + df["c7"].sum()))
    ro = pacsv.ReadOptions(use_threads=False)
    t, tb = best(lambda: pacsv.read_csv(path, read_options=ro))
    print("pyarrow_1_thread_(%s)" % pyarrow.__version__, "%.4f" % t,
          "%.3f" % (tb["c0"].to_numpy().sum() + tb["c7"].to_numpy().sum()))
    t, tb = best(lambda: pacsv.read_csv(path))
    print("pyarrow_threads", "%.4f" % t, "%.3f" % (tb["c0"].to_numpy().sum() + tb["c7"].to_numpy().sum()))
