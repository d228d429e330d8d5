#!/usr/bin/env python3
"""A task that fails under @retry releases its locals (docs/runtime.md,
"Failures"): retry_leak.sflow's failing attempts each hold about 800 KB of
one kind of owned value (array, str, map, a struct of them, tensor, future,
locals two fns down, a loop's locals, a temporary argument of the failing
call, the left operand of a failing right one, a var copied from a
parameter, and an
actor method's local that the actor also keeps).  For each kind the peak
RSS of a run with FEW calls (5 failed attempts each) and one with MANY must
stay within LIMIT_KB, where a leak grows by 800 KB a failure (100 more
failures here: 80 MB); the output shows that what the caller and the actor still hold is
intact (a value freed too soon would print garbage or crash).

Usage: retry_leak_test.py --sflowc PATH [--many N]"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["array", "str", "map", "struct", "tensor", "future", "deep", "loop", "argument",
         "operand", "param", "method"]
FEW = 12  # past the warm-up: a future's deque entry holds its value a while
LIMIT_KB = 8 * 1024  # ten failures' worth; glibc's arenas move a few MB
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def peak_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def run(exe, tmp, kind, calls):
    """The exit status, output and peak RSS (KB) of one run.  The peak is
    VmHWM, read while the program waits at its end for the FIFO --hold
    names: a child's ru_maxrss would start at this Python process's."""
    fifo = os.path.join(tmp, "hold")
    os.mkfifo(fifo)
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen([exe, "--kind", kind, "--calls", str(calls), "--quiet",
                              "--hold", fifo], stdout=out, stderr=subprocess.STDOUT)
        peak, deadline = -1, time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            try:  # no reader yet: ENXIO
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.01)
                continue
            peak = peak_kb(p.pid)
            os.write(fd, b"done")
            os.close(fd)
            break
        if p.poll() is None and peak < 0:
            p.kill()
        rc = p.wait()
        out.seek(0)
        os.unlink(fifo)
        return rc, out.read().decode(errors="replace"), peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--many", type=int, default=32)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-retry-leak-")
    try:
        exe = os.path.join(tmp, "retry_leak")
        subprocess.run([a.sflowc, "-O2", os.path.join(HERE, "retry_leak.sflow"), "-o", exe],
                       check=True)
        for kind in KINDS:
            rc1, out1, rss1 = run(exe, tmp, kind, FEW)
            rc2, out2, rss2 = run(exe, tmp, kind, a.many)
            want = "%s failed %d keep [7, 8, 9]\ndone"
            kept = "kept 199999\n" if kind == "method" else ""
            check(rc1 == 0 and out1 == kept + want % (kind, FEW) + "\n",
                  "%s: %d calls: exit %d, output %r" % (kind, FEW, rc1, out1))
            check(rc2 == 0 and out2 == kept + want % (kind, a.many) + "\n",
                  "%s: %d calls: exit %d, output %r" % (kind, a.many, rc2, out2))
            check(rss1 > 0 and rss2 > 0 and rss2 - rss1 <= LIMIT_KB,
                  "%s: peak RSS %d KB after %d failed attempts, %d KB after %d (growth %d KB, "
                  "limit %d)" % (kind, rss1, 5 * FEW, rss2, 5 * a.many, rss2 - rss1, LIMIT_KB))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
