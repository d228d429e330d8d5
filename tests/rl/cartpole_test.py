#!/usr/bin/env python3
"""examples/cartpole.sflow solves CartPole-v1, the same way every run, and
a killed run --resumes to the same curve (docs/rl.md).

1. Runs the example twice from seed 1 with a step budget (--total_steps
   200000, where it needs about 40k to 50k) and --timing=false: both runs must
   print the same return curve, line for line, and say it solved (the
   greedy policy's mean return >= 475 over 100 evaluation episodes).
2. Kill and resume: a reference run (--journal=false), then runs SIGKILLed
   after 3 printed lines, half the reference's lines and all but its last
   4, and --resume'd (the points follow the reference, since how soon it
   solves depends on the BLAS kernel's last bits); each resumed run must
   print exactly the reference (curve, evaluation, result), and past the
   first checkpoints its actors must come back from checkpoints (the
   learner's agent and Adam state, the runners' environments), not init.

Usage: cartpole_test.py --sflowc PATH [--example PATH]
"""
import argparse
import difflib
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "runtime"))
import kill_resume  # noqa: E402

FLAGS = ["--timing=false", "--total_steps", "200000"]


def diff(a, b):
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), "first",
                                        "second", n=1))[:3000]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--example", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                      "examples", "cartpole.sflow"))
    a = ap.parse_args()
    fails = 0
    with tempfile.TemporaryDirectory(prefix="sflow-cartpole-") as tmp:
        exe = os.path.join(tmp, "cartpole")
        subprocess.run([a.sflowc, a.example, "-o", exe], check=True)
        # Bad flags stop the run before any actor starts, naming the flag.
        for flags, msg in [(["--seed", "-5"], "--seed must be >= 0, got -5"),
                           (["--envs", "0"], "--runners, --envs and --steps must be at least 1"),
                           (["--total_steps", "10"], "--total_steps 10 is less than one iteration"),
                           (["--eval_episodes", "0"], "--eval_episodes must be at least 1")]:
            r = subprocess.run([exe, "--journal=false"] + flags, capture_output=True, text=True,
                               timeout=60)
            if r.returncode != 70 or msg not in r.stderr or r.stdout:
                print("FAIL %s: exit %d, stderr %r (wanted %r)" % (flags, r.returncode,
                                                                  r.stderr[-500:], msg))
                fails += 1
        runs = []
        for k in range(2):
            rc, out, err = kill_resume.run(exe, os.path.join(tmp, "run%d" % k),
                                           FLAGS + ["--journal=false"])
            if rc != 0:
                print("FAIL run %d exited %d\n%s" % (k, rc, err))
                return 1
            runs.append(out)
        ref = runs[0]
        if runs[1] != ref:
            print("FAIL the second run's curve differs from the first's:\n" + diff(ref, runs[1]))
            fails += 1
        if "): true" not in ref:
            print("FAIL it did not solve CartPole-v1 within the budget:\n" + ref[-2000:])
            fails += 1
        curve = [l for l in ref.splitlines() if l.startswith("iteration")]
        print("cartpole: %d curve lines, %s" % (len(curve), ref.splitlines()[-1]))
        n = len(ref.splitlines())
        for kill in (3, n // 2, n - 4):
            ck = os.path.join(tmp, "kill-%d" % kill)
            rc, part, _ = kill_resume.run(exe, ck, FLAGS, kill_after_lines=kill)
            if rc == 0:
                print("FAIL kill-after-%d: the run finished before it was killed" % kill)
                fails += 1
                continue
            rc, out, err = kill_resume.run(exe, ck, FLAGS + ["--resume"])
            if rc != 0 or out != ref:
                print("FAIL kill-after-%d: resume exited %d\n%s%s" % (kill, rc, diff(ref, out),
                                                                       err[-2000:]))
                fails += 1
                continue
            if kill >= 8 and "3 actors restored" not in err:
                print("FAIL kill-after-%d: the learner and both runners must come back from checkpoints:\n%s"
                      % (kill, err))
                fails += 1
                continue
            print("kill-after-%d: resumed to the same output (%s)"
                  % (kill, [l for l in err.splitlines() if "restored" in l]))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
