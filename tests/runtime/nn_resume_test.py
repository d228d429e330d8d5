#!/usr/bin/env python3
"""A training run killed with SIGKILL and resumed ends with the same weights.

Compiles nn_train.sflow (a @checkpoint actor holding an MLP and its AdamW
state, tensors in struct fields, stepped 40 times on seeded batches), runs
it once with --journal=false (the reference), then SIGKILLs runs after a
number of printed lines and resumes them: every resume must print exactly
the reference output (every loss, then every weight as its shortest
round-trip text, so equal text is equal bits), and past the first
checkpoints the actor must come back from one (its tensors read back from
bytes), not from init.

Usage: nn_resume_test.py --sflowc PATH
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile


def run(exe, ckdir, extra=(), kill_after_lines=None):
    """Runs the program; with kill_after_lines, SIGKILLs it once that many
    lines are out.  Returns (rc, stdout, stderr)."""
    cmd = [exe, "--checkpoint-dir", ckdir] + list(extra)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    if kill_after_lines is not None:
        for _ in range(kill_after_lines):
            line = p.stdout.readline()
            if not line:
                break
            out += line
        p.send_signal(signal.SIGKILL)
    rest, err = p.communicate(timeout=120)
    return p.returncode, (out + rest).decode(), err.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    failures = 0
    with tempfile.TemporaryDirectory(prefix="sflow-nn-") as tmp:
        exe = os.path.join(tmp, "nn_train")
        subprocess.run([a.sflowc, os.path.join(here, "nn_train.sflow"), "-o", exe], check=True)
        rc, ref, err = run(exe, os.path.join(tmp, "ref"), ["--journal=false"])
        if rc != 0 or not ref.endswith("done\n"):
            print("FAIL reference run exited %d\n%s" % (rc, err))
            return 1
        for k in (3, 12, 27, 38):
            ck = os.path.join(tmp, "kill-%d" % k)
            rc, part, _ = run(exe, ck, kill_after_lines=k)
            if rc == 0:
                print("FAIL kill-after-%d: the run finished before it was killed" % k)
                failures += 1
                continue
            rc, out, err = run(exe, ck, ["--resume"])
            if rc != 0 or out != ref:
                import difflib
                diff = "".join(difflib.unified_diff(ref.splitlines(True), out.splitlines(True),
                                                    "uninterrupted", "resumed", n=1))
                print("FAIL kill-after-%d: resume exited %d\n%s%s" % (k, rc, diff[:3000], err))
                failures += 1
                continue
            if k >= 12 and " 1 actor restored" not in err:
                print("FAIL kill-after-%d: the actor was not restored from a checkpoint:\n%s"
                      % (k, err))
                failures += 1
                continue
            print("PASS kill-after-%d (%d of %d lines before the kill)"
                  % (k, part.count("\n"), ref.count("\n")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
