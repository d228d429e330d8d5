#!/usr/bin/env python3
"""unit/test_rt_nn's sgemm_split under every OpenBLAS kernel the split is
measured on (runtime/gpu/blas.c's split_cores): OPENBLAS_CORETYPE=X for
each, the kernel that loaded checked to be X (so a kernel OpenBLAS
silently replaced is not reported as checked), and the split bitwise the
one call there.  Each run prints the kernel and its row alignment.

Usage: blas_cores_test.py --unit PATH/test_rt_nn
"""

import argparse
import os
import re
import subprocess
import sys

CORES = ["Haswell", "Zen", "SkylakeX", "Cooperlake", "Sandybridge", "Prescott", "Nehalem",
         "Core2", "Atom", "Penryn", "Dunnington", "Barcelona", "Nano", "Bobcat"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    a = ap.parse_args()
    failures = 0
    for core in CORES:
        env = dict(os.environ, OPENBLAS_CORETYPE=core)
        p = subprocess.run([a.unit, "sgemm_split"], env=env, capture_output=True, text=True,
                           timeout=300)
        out = p.stdout + p.stderr
        m = re.search(r"(\S+) kernel (\S+): row blocks on multiples of (\d+)", out)
        if not m:
            print("FAIL %s: no kernel line (exit %d)\n%s" % (core, p.returncode, out[-2000:]))
            failures += 1
            continue
        lib, loaded, align = m.groups()
        if lib == "OpenBLAS" and loaded != core:
            print("FAIL %s: OpenBLAS loaded the %s kernel instead" % (core, loaded))
            failures += 1
        elif p.returncode != 0:
            print("FAIL %s (align %s):\n%s" % (core, align, out[-3000:]))
            failures += 1
        else:
            print("PASS %s %s: row blocks on multiples of %s bitwise one call" % (lib, loaded, align))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
