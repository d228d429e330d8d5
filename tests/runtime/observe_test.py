#!/usr/bin/env python3
"""What a run shows: --trace JSON, the progress line, the summary, and
now()/rand_f32() replayed by --resume.  Usage: observe_test.py --sflowc PATH"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-observe-")
    try:
        exe = os.path.join(tmp, "observe")
        subprocess.run([a.sflowc, os.path.join(HERE, "observe.sflow"), "-o", exe], check=True)
        ck = ["--checkpoint-dir", os.path.join(tmp, "ck")]

        # The trace: valid JSON, one event per attempt, named tracks, nesting.
        tr = os.path.join(tmp, "trace.json")
        p = subprocess.run([exe, "--trace", tr] + ck, capture_output=True, timeout=60)
        check(p.returncode == 0, "traced run exits 0")
        with open(tr) as f:
            doc = json.load(f)
        ev = doc["traceEvents"]
        xs = [e for e in ev if e["ph"] == "X"]
        flaky = [e for e in xs if e["name"] == "flaky"]
        check(len(flaky) == 15, "one event per attempt of flaky (10 tasks, 5 retried): %d" % len(flaky))
        failed = [e for e in flaky if "error" in e["args"]]
        check(len(failed) == 5 and all("even input" in e["args"]["error"] for e in failed),
              "failed attempts carry their error in args")
        check(sorted(e["args"]["attempt"] for e in flaky) == [0] * 10 + [1] * 5,
              "attempt numbers in args")
        check(len([e for e in xs if e["name"] == "Counter.add"]) == 5, "one event per actor call")
        named = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
        check({e["tid"] for e in xs} <= named, "every track has a thread_name")
        check(all(e["pid"] == 0 and e["dur"] >= 0 and "ts" in e for e in xs),
              "pid 0 on one machine, ts and dur present")
        nest_ok = True
        for tid in {e["tid"] for e in xs}:
            stack = []
            for e in sorted((e for e in xs if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
                while stack and stack[-1] <= e["ts"]:
                    stack.pop()
                if stack and e["ts"] + e["dur"] > stack[-1] + 1.0:  # 1 us of rounding
                    nest_ok = False
                stack.append(e["ts"] + e["dur"])
        check(nest_ok, "slices on each track nest (Perfetto's rule)")

        p = subprocess.run([exe, "--trace", os.path.join(tmp, "no", "such", "t.json")] + ck,
                           capture_output=True, timeout=60)
        check(p.returncode == 2 and p.stdout == b"" and b"cannot write the trace" in p.stderr,
              "an unwritable --trace path exits 2 before the run starts")

        # Progress: drawn with --progress=always, never drawn otherwise.
        p = subprocess.run([exe, "--progress=always"] + ck, capture_output=True, timeout=60)
        err = p.stderr.decode()
        check("\r\x1b[K" in err and "tasks" in err and "done" in err,
              "--progress=always draws the line on stderr")
        p = subprocess.run([exe] + ck, capture_output=True, timeout=60)
        err = p.stderr.decode()
        check("\r" not in err, "off a terminal (auto) there are no redraws")
        check("tasks (0 failed, 5 retries), 1 actors, 5 actor calls in" in err,
              "the summary line: %r" % err.strip())
        p = subprocess.run([exe, "--quiet"] + ck, capture_output=True, timeout=60)
        check(p.stderr == b"", "--quiet prints nothing on stderr")
        p = subprocess.run([exe, "--progress=sometimes"] + ck, capture_output=True, timeout=60)
        check(p.returncode == 2 and b"--progress" in p.stderr, "a bad --progress value exits 2")

        # now() and rand_f32() read by main are replayed by --resume.
        cmd = [exe, "--slow_tasks", "400"] + ck
        q = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        first = q.stdout.readline()
        time.sleep(0.3)
        q.send_signal(signal.SIGKILL)
        q.wait()
        p = subprocess.run(cmd + ["--resume"], capture_output=True, timeout=120)
        out = p.stdout.decode().splitlines()
        check(p.returncode == 0 and out and out[0] == first.decode().rstrip("\n"),
              "the resumed run prints the first run's now() and rand_f32(): %r vs %r"
              % (out[:1], first))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
