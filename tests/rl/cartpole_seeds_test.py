#!/usr/bin/env python3
"""PPO solves CartPole-v1 from almost every seed, not from one (docs/rl.md,
issue #26).

Runs examples/cartpole.sflow from seeds 1..20 with the test budget
(--total_steps 200000), two runs at a time, and requires at least 19 of
the 20 to say they solved (the greedy policy's mean return >= 475 over 100
evaluation episodes).  Prints each seed's result and the steps it needed,
so a regression shows which seeds it lost.  The suite runs it under the
default OpenBLAS kernel and again with OPENBLAS_CORETYPE=Haswell and =Zen
(the environment is passed through): kernels differ in their last bits,
and the learner must not depend on them.

Usage: cartpole_seeds_test.py --sflowc PATH [--example PATH] [--seeds N]
                              [--need K] [--jobs J]
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET = 200000


def run_seed(exe, tmp, seed):
    """(seed, solved, steps or None, seconds, tail of the output on failure)."""
    t0 = time.time()
    r = subprocess.run([exe, "--seed", str(seed), "--total_steps", str(BUDGET),
                        "--timing=false", "--journal=false",
                        "--checkpoint-dir", os.path.join(tmp, "seed%d" % seed)],
                       capture_output=True, text=True, timeout=300)
    secs = time.time() - t0
    solved = r.returncode == 0 and "episodes): true" in r.stdout
    m = re.search(r"solved after (\d+) steps", r.stdout)
    tail = "" if solved else ("exit %d\n%s%s" % (r.returncode, r.stdout[-600:], r.stderr[-600:]))
    return seed, solved, int(m.group(1)) if m else None, secs, tail


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--example", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                      "examples", "cartpole.sflow"))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--need", type=int, default=19)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    kernel = os.environ.get("OPENBLAS_CORETYPE", "default")
    with tempfile.TemporaryDirectory(prefix="sflow-cartpole-seeds-") as tmp:
        exe = os.path.join(tmp, "cartpole")
        subprocess.run([a.sflowc, a.example, "-o", exe], check=True)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            results = sorted(pool.map(lambda s: run_seed(exe, tmp, s), range(1, a.seeds + 1)))
        wall = time.time() - t0
    solves = 0
    for seed, solved, steps, secs, tail in results:
        solves += solved
        print("seed %2d: %s%s (%.1f s)" % (seed, "solved" if solved else "NOT SOLVED",
                                           " after %d steps" % steps if steps else "", secs))
        if tail:
            print(tail)
    print("cartpole seeds (kernel %s): %d of %d solved within %d steps, %.1f s"
          % (kernel, solves, a.seeds, BUDGET, wall))
    if solves < a.need:
        print("FAIL %d of %d seeds solved; at least %d must" % (solves, a.seeds, a.need))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
