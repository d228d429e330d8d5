#!/usr/bin/env python3
"""Kill-and-resume check for examples/pipeline.sflow (issue 4, Examples).

Compiles the example, runs it once uninterrupted, then for several kill
points: starts it with a fresh --checkpoint-dir, SIGKILLs it after it has
printed K lines, runs it again with --resume and checks that the resumed
run's stdout equals the uninterrupted run's, that it exits 0, that it took
answers from the journal, and that the journal is gone afterwards.  One
scenario kills the resumed run too and resumes a second time.

Usage: resume_check.py --sflowc PATH [--example FILE] [--args "..."]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 60
TRIES = 3


def run_full(cmd):
    p = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def run_killed(cmd, after_lines):
    """Runs cmd, SIGKILLs it once it has printed after_lines lines of stdout.
    Returns (lines read, whether it was killed before it finished)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         stdin=subprocess.DEVNULL)
    lines = []
    while len(lines) < after_lines:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line.decode())
    p.send_signal(signal.SIGKILL)
    rest = p.stdout.read()  # whatever it wrote before the signal landed
    p.wait(timeout=TIMEOUT)
    if rest:
        lines += rest.decode().splitlines(True)
    return lines, p.returncode == -signal.SIGKILL


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--example", default=os.path.join(ROOT, "examples/pipeline.sflow"))
    # Two batches in flight: after line K is printed, at least one batch's
    # transform is still to run, so a kill after line K lands before the end.
    ap.add_argument("--args", default="--ahead 2", help="flags for every run")
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "pipeline")
        c = subprocess.run([a.sflowc, a.example, "-o", exe], capture_output=True, timeout=TIMEOUT)
        if c.returncode != 0:
            sys.exit("compile failed:\n" + c.stderr.decode())
        flags = a.args.split()

        def cmd(ck, *more):
            return [exe] + flags + ["--checkpoint-dir", os.path.join(tmp, ck)] + list(more)

        rc, want, err = run_full(cmd("ref"))
        if rc != 0:
            sys.exit("uninterrupted run exited %d:\n%s" % (rc, err))
        total = len(want.splitlines())
        print("uninterrupted run: %d lines; %s" % (total, err.strip()))

        # (name, kill points): each point after the previous resume's start.
        scenarios = [("kill after 1 line", [1]),
                     ("kill after 5 lines", [5]),
                     ("kill after %d lines" % (total - 3), [total - 3]),
                     ("kill after 3 lines, kill the resume after 8", [3, 8])]
        for name, points in scenarios:
            ck = "ck-" + re.sub(r"\W+", "-", name)
            # A busy machine can let a run finish before the signal lands;
            # that run leaves nothing to resume, so the scenario starts over.
            for _ in range(TRIES):
                shutil.rmtree(os.path.join(tmp, ck), ignore_errors=True)
                early = None
                for i, k in enumerate(points):
                    extra = ["--resume"] if i > 0 else []
                    lines, killed = run_killed(cmd(ck, *extra), k)
                    if not killed:
                        early = len(lines)
                        break
                if early is None:
                    break
                print("%s: a run finished before the kill landed (%d lines); again" % (name, early))
            if early is not None:
                failures.append("%s: the run finished before it was killed, %d times; "
                                "make it slower with a larger --window" % (name, TRIES))
                continue
            if not os.path.exists(os.path.join(tmp, ck, "journal")):
                failures.append("%s: no journal in --checkpoint-dir after the kill" % name)
                continue
            ckpts = sorted(os.path.relpath(os.path.join(d, f), os.path.join(tmp, ck))
                           for d, _, fs in os.walk(os.path.join(tmp, ck)) for f in fs
                           if f not in ("journal", "lock"))
            # The journal is written in group commits every 20 ms: a kill
            # that lands before the first one leaves a journal of no records
            # (its 20-byte header at most), and the resume then has nothing
            # to answer from.  Wherever a record was written, it must be used.
            journaled = os.path.getsize(os.path.join(tmp, ck, "journal")) - 20
            rc, got, err = run_full(cmd(ck, "--resume"))
            m = re.search(r"(\d+) answered from the journal", err)
            print("%s: killed at %s line(s); checkpoint files %s; resumed: %s" %
                  (name, "+".join(map(str, points)), ckpts or "none", err.strip()))
            if rc != 0:
                failures.append("%s: --resume exited %d:\n%s" % (name, rc, err))
            elif got != want:
                failures.append("%s: resumed stdout differs:\n--- uninterrupted\n%s--- resumed\n%s" %
                                (name, want, got))
            elif (not m or int(m.group(1)) == 0) and journaled > 0:
                failures.append("%s: the resumed run answered nothing from the journal:\n%s" % (name, err))
            if os.path.exists(os.path.join(tmp, ck, "journal")):
                failures.append("%s: the journal is still there after the run finished" % name)
    for f in failures:
        print("FAIL " + f)
    print("%d scenario(s) failed" % len(failures) if failures else "all kill/resume scenarios passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
