#!/usr/bin/env python3
"""What a run shows: --trace JSON (also for messages that are not UTF-8),
the progress line on a terminal (output never lands on it) and in a file
(plain periodic lines), the summary ("1 task", not "1 tasks"), and
now()/rand_f32() replayed by --resume.  Usage: observe_test.py --sflowc PATH"""
import argparse
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def screen_lines(data):
    """The lines a terminal shows for data: \\r goes back to column 0,
    ESC [ K erases to the end of the line, other escapes are dropped, and
    characters overwrite what is under the cursor."""
    lines, cur, col, i = [], [], 0, 0
    text = data.decode("utf-8", "replace")
    while i < len(text):
        ch = text[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(cur))
            cur, col = [], 0
        elif ch == "\x1b":
            m = re.match(r"\x1b\[[0-9;]*([A-Za-z])", text[i:])
            if m:
                if m.group(1) == "K":
                    del cur[col:]
                i += m.end()
                continue
        else:
            if col < len(cur):
                cur[col] = ch
            else:
                cur.append(ch)
            col += 1
        i += 1
    if cur:
        lines.append("".join(cur))
    return lines


def run_in_pty(cmd, timeout=60, cols=120):
    """Runs cmd with stdout and stderr on one pseudo-terminal; returns (exit
    status, every byte the terminal received)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    if p.poll() is None:
        p.kill()
    return p.wait(), out


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

        # A failing task whose message holds bytes that are not UTF-8 and
        # control characters: the trace is still strict JSON, and the text
        # reads as a UTF-8 decoder with replacement shows it (each maximal
        # ill-formed subsequence one U+FFFD, docs/runtime.md).
        raw = (b"bad \xff\xfe bytes \xc3\x28 ctl \x01\x1b[31m tab\t nl\n quote\" back\\ "
               b"end \xc3\xa9 \xe2\x9c\x93 \xed\xa0\x80 \xf0\x9f\x98 trunc \xf4\x90\x80\x80")
        bad = os.path.join(tmp, "bad.txt")
        with open(bad, "wb") as f:
            f.write(raw)
        tb = os.path.join(tmp, "trace-bytes.json")
        p = subprocess.run([exe, "--trace", tb, "--fail_with", bad] + ck, capture_output=True,
                           timeout=60)
        check(p.returncode == 70, "the failed task ends the run with 70: %d" % p.returncode)
        with open(tb, "rb") as f:
            data = f.read()
        try:
            doc = json.loads(data.decode("utf-8"))  # strict: bytes and control characters
            ok = True
        except ValueError as e:
            doc, ok = {"traceEvents": []}, False
            print("  json error: %s" % e)
        check(ok, "a trace with a non-UTF-8 message is valid UTF-8 and strict JSON")
        errs = [e["args"].get("error", "") for e in doc["traceEvents"] if e.get("name") == "boom"]
        want = raw.decode("utf-8", "replace")
        check(len(errs) == 1 and errs[0].endswith("fail: " + want),
              "the message reads as decoded with replacement: %r" % errs[:1])
        err = p.stderr.decode("utf-8", "replace")
        check("failed after 1 attempt:" in err and
              "1 task (1 failed, 0 retries), 0 actors, 0 actor calls in" in err,
              "counts of one are singular: %r" % err[-200:])

        # Progress on a terminal: every output line stays whole on its own
        # line (the line is cleared before it and drawn again after).
        rc, data = run_in_pty([exe, "--chatty", "--slow_tasks", "40"] + ck)
        shown = screen_lines(data)
        want = ["slow task %d done" % i for i in range(40)]
        printed = [l for l in shown if "slow task" in l]
        check(rc == 0 and b"\r\x1b[K" in data and b"tasks" in data,
              "on a terminal the progress line is drawn (exit %d)" % rc)
        first_draw = data.find(b"\x1b[K")
        check(first_draw >= 0 and data.find(b"slow task", first_draw) > 0,
              "some output was printed while the line was shown")
        check(sorted(printed) == sorted(want),
              "output lines appear whole, never on the progress line: %r"
              % [l for l in printed if l not in want][:3])
        check(any(re.match(r"observe: \d+ tasks \(0 failed, 5 retries\)", l) for l in shown),
              "the summary line stands on its own line: %r" % shown[-1:])

        # Progress off a terminal with --progress=always: plain periodic
        # lines, no control characters.
        env = dict(os.environ, SFLOW_PROGRESS_INTERVAL="0.2")
        p = subprocess.run([exe, "--progress=always", "--chatty", "--slow_tasks", "40"] + ck,
                           capture_output=True, timeout=60, env=env)
        err = p.stderr.decode()
        check(p.returncode == 0 and not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", err),
              "--progress=always into a pipe writes no control characters: %r" % err[:120])
        lines = [l for l in err.splitlines() if ": progress: " in l]
        pat = (r"observe: progress: tasks? \d+/\d+ done, \d+ running, \d+ failed, \d+ "
               r"retr(y|ies); actor calls? \d+/\d+, (\d+\.\d) s")
        secs = [float(re.fullmatch(pat, l).group(2)) for l in lines if re.fullmatch(pat, l)]
        check(len(lines) >= 2 and len(secs) == len(lines) and secs == sorted(secs),
              "periodic plain progress lines: %r" % lines[:3])
        p = subprocess.run([exe] + ck, capture_output=True, timeout=60)
        err = p.stderr.decode()
        check("\r" not in err, "off a terminal (auto) there are no redraws")
        check("tasks (0 failed, 5 retries), 1 actor, 5 actor calls in" in err,
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
