#!/usr/bin/env python3
"""unit/test_rt_nn's sgemm_split under every OpenBLAS kernel the split is
measured on (runtime/gpu/blas.c's split_cores): OPENBLAS_CORETYPE=X for
each, the kernel that loaded checked to be X (so a kernel OpenBLAS
silently replaced is not reported as checked), and the split bitwise the
one call there.  Each run prints the kernel and its row alignment.
A kernel whose instructions this CPU lacks (SkylakeX and Cooperlake need
AVX-512; Cooperlake also AVX512_BF16) cannot run here: it is named as
not run, with the missing flags, and the summary says how many kernels
were checked; it is never counted as checked.

Usage: blas_cores_test.py --unit PATH/test_rt_nn
"""

import argparse
import os
import re
import subprocess
import sys

CORES = ["Haswell", "Zen", "SkylakeX", "Cooperlake", "Sandybridge", "Prescott", "Nehalem",
         "Core2", "Atom", "Penryn", "Dunnington", "Barcelona", "Nano", "Bobcat"]


# The CPU flags (/proc/cpuinfo) each kernel needs beyond AVX2.
NEEDS = {"SkylakeX": ["avx512f", "avx512dq", "avx512bw", "avx512vl"],
         "Cooperlake": ["avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16"]}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    a = ap.parse_args()
    failures, checked, not_run = 0, 0, []
    flags = cpu_flags()
    for core in CORES:
        missing = [f for f in NEEDS.get(core, []) if f not in flags]
        if missing:
            print("NOT RUN %s: this CPU lacks %s" % (core, " ".join(missing)))
            not_run.append(core)
            continue
        env = dict(os.environ, OPENBLAS_CORETYPE=core, SFLOW_BLAS="openblas")
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
            checked += 1
    print("%d of %d kernels checked%s" % (checked, len(CORES), "; not run on this CPU: " +
                                         ", ".join(not_run) if not_run else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
