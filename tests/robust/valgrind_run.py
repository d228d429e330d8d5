#!/usr/bin/env python3
"""Every program under tests/run, compiled -O2, runs under valgrind memcheck:
no memory error (invalid read or write, uninitialised use) in any, and no
"definitely lost" block in a program that ends normally.  A program that
ends in a runtime error (exit 70) exits at once from inside the failing
code, so the references its callers held are not released: those blocks
are reported, not counted as failures.

usage: valgrind_run.py --sflowc PATH [-j N] [TEST ...]
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from run_golden import parse_expectations  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
LOST = re.compile(r"definitely lost: ([\d,]+) bytes")
ERRORS = re.compile(r"ERROR SUMMARY: (\d+) errors")


def check(sflowc, path, tmp):
    exp = parse_expectations(path)
    if exp["diags"] or exp["module"]:
        return None  # a compile-error test or an imported module: nothing runs
    exe = os.path.join(tmp, os.path.relpath(path, ROOT).replace("/", "_")[:-6])
    p = subprocess.run([sflowc, "-O2", path, "-o", exe], capture_output=True, text=True)
    if p.returncode != 0:
        return (path, "FAIL", "compile failed:\n" + p.stderr)
    q = subprocess.run(["valgrind", "--leak-check=full", "--errors-for-leak-kinds=none",
                        "--child-silent-after-fork=yes", exe] + exp["args"]
                       + ["--checkpoint-dir", exe + ".ckpt"],  # not the source tree
                       capture_output=True, text=True, cwd=os.path.dirname(path),
                       stdin=subprocess.DEVNULL, timeout=600)
    m, e = LOST.search(q.stderr), ERRORS.search(q.stderr)
    lost = int(m.group(1).replace(",", "")) if m else 0
    errors = int(e.group(1)) if e else -1
    if errors != 0:
        return (path, "FAIL", "%d memcheck errors (exit %d):\n%s" % (errors, q.returncode, q.stderr))
    if q.returncode == 70:
        return (path, "RTERR", "runtime error exit; definitely lost %d bytes at exit" % lost)
    if lost:
        return (path, "FAIL", "definitely lost %d bytes:\n%s" % (lost, q.stderr))
    return (path, "PASS", "definitely lost: 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build/bin/sflowc"))
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("tests", nargs="*")
    args = ap.parse_args()
    files = args.tests or sorted(os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(ROOT, "tests/run"))
                                 for f in fs if f.endswith(".sflow"))
    counts = {"PASS": 0, "RTERR": 0, "FAIL": 0}
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.j) as ex:
        for r in ex.map(lambda f: check(args.sflowc, os.path.abspath(f), tmp), files):
            if r is None:
                continue
            path, status, msg = r
            counts[status] += 1
            if status != "PASS":
                print("%s %s: %s" % (status, os.path.relpath(path, ROOT), msg))
    print("%d programs clean (definitely lost: 0, no errors), %d ended in a runtime error, %d failed"
          % (counts["PASS"], counts["RTERR"], counts["FAIL"]))
    sys.exit(1 if counts["FAIL"] else 0)


if __name__ == "__main__":
    main()
