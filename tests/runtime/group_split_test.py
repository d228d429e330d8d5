#!/usr/bin/env python3
"""A group's products split the same after --resume as in the fresh run.

Compiles group_split.sflow (a @checkpoint group of two members in one
process, each product big enough to split into row blocks over the pool)
and runs it with SFLOW_BLAS_STATS=1 at --threads 4: fresh, then killed
after a few lines and --resume'd.  The resume must print exactly the fresh
output (equal bits) and its products must have run on the same number of
threads (pool / members here: 2), although its members skip init, where
train.start used to count them; at --threads 1 the output must be the
same bits again.  Where OpenBLAS is not split (another library or
kernel) the stats say align=0 and only the bits are compared.

Usage: group_split_test.py --sflowc PATH
"""

import argparse
import os
import re
import sys
import tempfile

import kill_resume

STATS = re.compile(r"sflow-blas-stats: library=(\S+) core=(\S+) align=(\d+) splits=(\d+) ways=(\S+)")


def stats(err):
    m = STATS.search(err)
    return m.groups() if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["SFLOW_BLAS_STATS"] = "1"
    with tempfile.TemporaryDirectory(prefix="sflow-group-split-") as tmp:
        exe = os.path.join(tmp, "group_split")
        kill_resume.subprocess.run([a.sflowc, os.path.join(here, "group_split.sflow"), "-o", exe],
                                   check=True)
        rc, ref, err = kill_resume.run(exe, os.path.join(tmp, "ref"), ["--threads", "4", "--journal=false"])
        fresh = stats(err)
        if rc != 0 or not ref.endswith("done\n") or not fresh:
            print("FAIL fresh run exited %d\n%s" % (rc, err))
            return 1
        print("fresh:   library %s, kernel %s, align %s, %s products split, on %s threads"
              % fresh)
        failures = 0
        rc, one, err = kill_resume.run(exe, os.path.join(tmp, "one"), ["--threads", "1", "--journal=false"])
        if rc != 0 or one != ref:
            print("FAIL --threads 1 differs from --threads 4 (rc %d)\n%s" % (rc, err))
            failures += 1
        ck = os.path.join(tmp, "kill")
        rc, part, _ = kill_resume.run(exe, ck, ["--threads", "4"], kill_after_lines=4)
        if rc == 0:
            print("FAIL the run finished before it was killed")
            return 1
        rc, out, err = kill_resume.run(exe, ck, ["--threads", "4", "--resume"])
        resumed = stats(err)
        if rc != 0 or not resumed:
            print("FAIL resume exited %d\n%s" % (rc, err))
            return 1
        print("resumed: library %s, kernel %s, align %s, %s products split, on %s threads"
              % resumed)
        if out != ref:
            print("FAIL the resumed output is not the fresh one's:\n%s\n---\n%s" % (out, ref))
            failures += 1
        if " 2 actors restored" not in err:
            print("FAIL the members were not restored from a checkpoint:\n%s" % err)
            failures += 1
        if fresh[2] != "0":
            if fresh[4] != "2" or resumed[4] != "2":
                print("FAIL split products ran on %s threads fresh and %s resumed, want 2 (4 threads, "
                      "2 members)" % (fresh[4], resumed[4]))
                failures += 1
            if int(resumed[3]) == 0:
                print("FAIL the resumed run split no product")
                failures += 1
        # OPENBLAS_NUM_THREADS set by the user: the library threads each
        # product, so sflow does not split them, and the two members'
        # products must run one at a time (issue 34: two threaded calls at
        # once oversubscribe the cores); the bits stay the fresh run's.
        os.environ["OPENBLAS_NUM_THREADS"] = "2"
        try:
            rc, lib, err = kill_resume.run(exe, os.path.join(tmp, "lib"),
                                           ["--threads", "2", "--journal=false"])
        finally:
            del os.environ["OPENBLAS_NUM_THREADS"]
        m = re.search(r"lib_threads=(\d+) most_at_once=(\d+)", err)
        print("OPENBLAS_NUM_THREADS=2: %s" % (m.group(0) if m else "no stats"))
        sgemm = re.search(r"sgemm=(\S+)", err)
        if fresh[0] == "OpenBLAS" and sgemm and sgemm.group(1) == "OpenBLAS":
            if rc != 0 or not m or m.groups() != ("2", "1"):
                print("FAIL with OPENBLAS_NUM_THREADS=2 (rc %d) the products were not one at a "
                      "time on the library's 2 threads:\n%s" % (rc, err))
                failures += 1
            if lib != ref:
                print("FAIL with OPENBLAS_NUM_THREADS=2 the output is not the fresh run's")
                failures += 1
        elif sgemm and sgemm.group(1).startswith("sflow"):
            # sflow's own GEMM (the default) ignores the variable: its
            # products still split over the pool, with the same bits.
            if rc != 0 or lib != ref or not m or m.group(2) != "0":
                print("FAIL with OPENBLAS_NUM_THREADS=2 and sflow's GEMM (rc %d) the output "
                      "changed or a product ran in the library:\n%s" % (rc, err))
                failures += 1
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
