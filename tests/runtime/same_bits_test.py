#!/usr/bin/env python3
"""The same bits on every machine: same_bits.sflow (a few training steps
whose products have odd edges, forward and backward, and a plain matmul)
prints the same text, so the same bits, under every way a machine can
differ that sflow controls or must not depend on:

  - sflow's GEMM kernels, SFLOW_GEMM_ISA=avx2|portable (and avx512 where
    the CPU has it; one it lacks is named as not run),
  - every OPENBLAS_CORETYPE (f32 products do not go to OpenBLAS unless
    SFLOW_BLAS=openblas asks; users' environments set it),
  - --threads 1, 2 and 3 (the pool's split of each product),
  - the program compiled with -march=native,

and equal to same_bits.expected, committed from another machine, so a
CPU with other features (AVX-512, another vendor) is checked against the
one that wrote it.  For comparison it also prints whether OpenBLAS's own
kernels agree with each other (they need not: that is why the default is
sflow's GEMM); that line is information, not a check.

Usage: same_bits_test.py --sflowc PATH
"""

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "unit"))
from blas_cores_test import cpu_flags  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    with open(os.path.join(HERE, "same_bits.expected")) as f:
        want = f.read()
    env0 = {k: v for k, v in os.environ.items()
            if k not in ("SFLOW_BLAS", "SFLOW_GEMM_ISA", "OPENBLAS_CORETYPE",
                         "OPENBLAS_NUM_THREADS")}
    flags = cpu_flags()
    with tempfile.TemporaryDirectory(prefix="sflow-same-bits-") as tmp:
        exe = os.path.join(tmp, "same_bits")
        native = exe + "-native"
        for out, extra in ((exe, []), (native, ["-march=native"])):
            subprocess.run([a.sflowc, "-O2"] + extra + [os.path.join(HERE, "same_bits.sflow"),
                                                        "-o", out], check=True)

        def run(env, threads, prog=exe):
            p = subprocess.run([prog, "--threads", str(threads), "--quiet"], env=dict(env0, **env),
                               capture_output=True, text=True, timeout=120)
            return p.returncode, p.stdout, p.stderr

        cases = [({}, 1), ({}, 2), ({}, 3)]
        for isa in ("avx512", "avx2", "portable"):
            if isa == "avx512" and "avx512f" not in flags:
                print("NOT RUN SFLOW_GEMM_ISA=avx512: this CPU lacks avx512f")
                continue
            if isa == "avx2" and not {"avx2", "fma"} <= flags:
                print("NOT RUN SFLOW_GEMM_ISA=avx2: this CPU lacks avx2/fma")
                continue
            cases += [({"SFLOW_GEMM_ISA": isa}, 2)]
        for core in ("Haswell", "Zen", "Sandybridge", "Nehalem", "Prescott"):
            cases += [({"OPENBLAS_CORETYPE": core}, 2)]
        cases += [({"OPENBLAS_NUM_THREADS": "2"}, 2)]
        cases += [({}, 2, native)]  # the program's own code for this CPU (-march=native)
        failures = 0
        for env, threads, *prog in cases:
            what = (" ".join("%s=%s" % kv for kv in env.items()) or "default") + \
                (" -march=native" if prog else "")
            rc, out, err = run(env, threads, *prog)
            if rc != 0:
                print("FAIL %s --threads %d: exit %d\n%s" % (what, threads, rc, err))
                failures += 1
            elif out != want:
                print("FAIL %s --threads %d: not same_bits.expected\n--- got\n%s--- want\n%s"
                      % (what, threads, out, want))
                failures += 1
            else:
                print("PASS %s --threads %d: same_bits.expected, bit for bit" % (what, threads))
        seen = {}
        for core in ("Haswell", "Zen", "Sandybridge", "Nehalem"):
            rc, out, _ = run({"SFLOW_BLAS": "openblas", "OPENBLAS_CORETYPE": core}, 2)
            seen.setdefault(out if rc == 0 else "exit %d" % rc, []).append(core)
        print("for comparison, SFLOW_BLAS=openblas: %d distinct outputs over its kernels (%s)"
              % (len(seen), "; ".join(", ".join(v) for v in seen.values())))
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
