#!/usr/bin/env python3
"""The progress line says what a training run and a sweep are doing.

std.train's member 0 sets the line's status after each optimizer step
("epoch 3/200, step 70/4800, loss 0.1234, 90000 samples/s, 2 s left") and
std.tune's sweep sets its own ("trials 5/8 done, 2 running, 0 failed, best
0.1186 (trial 4)"), which wins over its trials' training.  Off a terminal,
--progress=always writes them as plain periodic lines; this checks their
form and that the bare task counters ("tasks 0/0 done, ...; actor calls")
no longer stand in for them.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


def progress_lines(exe, args, cwd, first):
    """The plain progress lines from the first that holds `first` on (before
    the module's first status, while the data loads, the counters show)."""
    env = dict(os.environ, SFLOW_PROGRESS_INTERVAL="0.02")
    p = subprocess.run([exe, "--progress=always"] + args, cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stderr.splitlines() if ": progress: " in l]
    at = next((i for i, l in enumerate(lines) if first in l), len(lines))
    return p.returncode, lines[at:], p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    ex = os.path.join(ROOT, "examples")
    with tempfile.TemporaryDirectory() as tmp:
        digits = os.path.join(tmp, "digits")
        tune = os.path.join(tmp, "tune")
        for src, exe in (("digits.sflow", digits), ("tune.sflow", tune)):
            subprocess.run([a.sflowc, os.path.join(ex, src), "-o", exe], check=True)

        rc, lines, err = progress_lines(digits, ["--epochs", "200", "--out", "",
                                                 "--metrics", ""], ex, ": progress: epoch ")
        check(rc == 0, "digits --epochs 200 exits 0 (%d): %s" % (rc, err[-300:]))
        pat = re.compile(r"^digits: progress: epoch (\d+)/200, step (\d+)/(\d+), "
                         r"loss \d+\.\d{4}, \d+ samples/s, (\d+ s left|\d+:\d\d left|done), "
                         r"[\d.]+ s$")
        status = [pat.match(l) for l in lines]
        check(len(lines) >= 2 and all(status),
              "training lines give epoch and step of total, loss, samples/s and the time "
              "left: %r" % lines[:4])
        ok = [m for m in status if m]
        check(all(int(m.group(3)) == int(ok[0].group(3)) for m in ok) and
              all(int(x.group(2)) <= int(y.group(2)) for x, y in zip(ok, ok[1:])),
              "the step count grows toward one total")
        check(not any("actor calls" in l for l in lines),
              "no bare counter line once training reports")

        rc, lines, err = progress_lines(tune, ["--samples", "8", "--epochs", "9"], ex,
                                    ": progress: trials ")
        check(rc == 0, "tune exits 0 (%d): %s" % (rc, err[-300:]))
        pat = re.compile(r"^tune: progress: trials (\d+)/8 done, (\d+) running, (\d+) failed"
                         r"(, best [-\d.e+]+ \(trial \d+\))?, [\d.]+ s$")
        check(len(lines) >= 1 and all(pat.match(l) for l in lines),
              "sweep lines give trials done of all, running, failed and the best: %r"
              % lines[:4])
        check(any(", best " in l for l in lines), "the best so far is shown")
        check(not any("epoch " in l for l in lines),
              "the sweep's status wins over its trials' training")
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
