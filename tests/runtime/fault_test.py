#!/usr/bin/env python3
"""Fault tests of durable resume: real processes killed with SIGKILL.

Compiles pipeline.sflow, runs it once uninterrupted (the reference), then
kills runs at many points and resumes them until they finish; every
finished run must print exactly the reference output.  Kill points: a
spread of times across the run, a second kill during the resume itself,
inside a checkpoint write and inside a journal write (SFLOW_FAULT, which
the runtime honours for tests only), and a damaged latest checkpoint.
Also checks the errors of a wrong --resume.

Usage: fault_test.py --sflowc PATH [CASE ...]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ["--n", "120"]


class Fail(Exception):
    pass


def run(exe, ckdir, extra=(), env=None, kill_after=None):
    """Runs the program; with kill_after, SIGKILLs it after that many
    seconds (if still running).  Returns (rc, stdout, stderr)."""
    cmd = [exe] + ARGS + ["--checkpoint-dir", ckdir] + list(extra)
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    if kill_after is not None:
        try:
            out, err = p.communicate(timeout=kill_after)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            out, err = p.communicate()
    else:
        out, err = p.communicate(timeout=120)
    return p.returncode, out.decode(), err.decode()


def acc_checkpoints(ckdir):
    d = os.path.join(ckdir, "ckpt")
    try:
        return sorted((f for f in os.listdir(d) if f.startswith("Acc-")),
                      key=lambda f: int(f.rsplit(".", 1)[1]))
    except FileNotFoundError:
        return []


def run_until_checkpoints(exe, ckdir, want):
    """Runs the program and SIGKILLs it once `want` checkpoints of Acc are on
    disk (polled), so the kill point does not depend on how busy the
    machine is, as a kill after a share of the reference's wall time did
    (under load no checkpoint had been written yet).  Raises Fail when the
    run ends first."""
    cmd = [exe] + ARGS + ["--checkpoint-dir", ckdir]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while p.poll() is None and len(acc_checkpoints(ckdir)) < want:
        time.sleep(0.002)
    if p.poll() is not None:
        raise Fail("the run ended before %d checkpoints of Acc were written" % want)
    p.send_signal(signal.SIGKILL)
    p.wait()


def finish(exe, ckdir, ref, what):
    rc, out, err = run(exe, ckdir, ["--resume"])
    if rc != 0:
        raise Fail("%s: --resume exited %d\n%s" % (what, rc, err))
    if out != ref:
        import difflib
        diff = "".join(difflib.unified_diff(ref.splitlines(True), out.splitlines(True),
                                            "uninterrupted", "resumed", n=1))
        raise Fail("%s: resumed output differs\n%s%s" % (what, diff[:3000], err))
    if os.path.exists(os.path.join(ckdir, "journal")):
        raise Fail("%s: the journal is still there after the run finished" % what)
    if "damaged" in err and what != "damaged-checkpoint":
        raise Fail("%s: a checkpoint nobody damaged was refused:\n%s" % (what, err))
    return err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-fault-")
    failures = []
    try:
        exe = os.path.join(tmp, "pipeline")
        subprocess.run([a.sflowc, os.path.join(HERE, "pipeline.sflow"), "-o", exe], check=True)
        t0 = time.time()
        rc, ref, err = run(exe, os.path.join(tmp, "ref"), ["--journal=false"])
        wall = time.time() - t0
        if rc != 0 or not ref.endswith("done\n"):
            print("FAIL reference run: %d\n%s" % (rc, err))
            return 1
        cases = []
        for k, frac in enumerate([0.05, 0.15, 0.3, 0.45, 0.6, 0.75, 0.85]):
            cases.append(("kill-at-%d%%" % int(frac * 100), frac, None, None))
        cases.append(("kill-twice", 0.3, 0.35, None))
        cases.append(("kill-thrice", 0.2, 0.2, 0.2))
        names = set(a.cases)
        for name, frac, again, third in cases:
            if names and name not in names:
                continue
            ck = os.path.join(tmp, name)
            try:
                rc, part, _ = run(exe, ck, kill_after=wall * frac)
                while rc == 0 and frac > 0.01:  # a fast run on an idle machine
                    frac /= 2
                    shutil.rmtree(ck, ignore_errors=True)
                    rc, part, _ = run(exe, ck, kill_after=wall * frac)
                if rc == 0:
                    raise Fail("%s: the run finished before it was killed" % name)
                done = None
                for more in (x for x in (again, third) if x):
                    rc2, out2, err2 = run(exe, ck, ["--resume"], kill_after=wall * more)
                    if rc2 == 0:
                        # It finished before the kill (the machine got
                        # faster than when `wall` was measured): that run
                        # is the resume to check.
                        done = (out2, err2)
                        break
                if done:
                    if done[0] != ref:
                        raise Fail("%s: a resume that finished printed other output\n%s"
                                   % (name, done[1]))
                    err = done[1]
                else:
                    err = finish(exe, ck, ref, name)
                # Past a third of the run the actors have checkpoints: the
                # resume must start them from one, not from init.
                if frac >= 0.3 and " 0 actors restored" in err:
                    raise Fail("%s: no actor was restored from a checkpoint:\n%s" % (name, err))
                print("PASS %s (killed after %d of %d lines)" % (name, part.count("\n"),
                                                                  ref.count("\n")))
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
        # Inside a checkpoint write and inside a journal write.
        for point, nth in [("checkpoint-write", 1), ("checkpoint-write", 7),
                           ("journal-write", 1), ("journal-write", 4)]:
            name = "%s-%d" % (point, nth)
            if names and name not in names:
                continue
            ck = os.path.join(tmp, name)
            try:
                rc, part, _ = run(exe, ck, env={"SFLOW_FAULT": "%s:%d" % (point, nth)})
                if rc != -signal.SIGKILL:
                    raise Fail("%s: expected the fault to kill the run, got exit %d" % (name, rc))
                err = finish(exe, ck, ref, name)
                if point == "journal-write" and "torn or corrupt" not in err:
                    raise Fail("%s: the torn journal tail was not reported:\n%s" % (name, err))
                print("PASS %s (killed after %d lines)" % (name, part.count("\n")))
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
        # A damaged newest checkpoint: the next older one is used.
        name = "damaged-checkpoint"
        if not names or name in names:
            ck = os.path.join(tmp, name)
            try:
                run_until_checkpoints(exe, ck, 2)
                d = os.path.join(ck, "ckpt")
                files = acc_checkpoints(ck)
                if not files:
                    raise Fail("%s: no checkpoint of Acc was written" % name)
                with open(os.path.join(d, files[-1]), "r+b") as f:
                    f.seek(40)
                    b = f.read(1)
                    f.seek(40)
                    f.write(bytes([b[0] ^ 0xFF]))
                err = finish(exe, ck, ref, name)
                if "damaged" not in err:
                    raise Fail("%s: the damaged checkpoint was not reported:\n%s" % (name, err))
                print("PASS %s" % name)
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
        # Wrong uses of --resume.
        name = "resume-errors"
        if not names or name in names:
            try:
                # Nothing to resume: the program runs from its start, with a
                # notice, so that a restart script can always say --resume.
                rc, out, err = run(exe, os.path.join(tmp, "nothing"), ["--resume"])
                if rc != 0 or out != ref or "running the program from the start" not in err:
                    raise Fail("%s: resume with nothing to resume: %d %s" % (name, rc, err))
                ck = os.path.join(tmp, name)
                run_until_checkpoints(exe, ck, 1)
                cmd = [exe, "--n", "7", "--checkpoint-dir", ck, "--resume"]
                p = subprocess.run(cmd, capture_output=True)
                if p.returncode != 2 or b"flags differ" not in p.stderr:
                    raise Fail("%s: resume with other flags: %d %s" % (name, p.returncode, p.stderr))
                print("PASS %s" % name)
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
