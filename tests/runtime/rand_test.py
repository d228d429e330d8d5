#!/usr/bin/env python3
"""Random streams per call: rand_f32() in tasks, retries, nested calls,
actors and group members draws the same numbers whatever thread runs each
call, and a killed run resumed with --resume prints what an uninterrupted
one prints.

Cases (all by default, or name them):
  model    the output of rand.sflow equals this file's own model of the
           derivation documented in docs/runtime.md ("Random numbers"), so
           the documentation is exact
  threads  --threads 1, 2 and 4, each run three times: one output
  resume   SIGKILLed after a few lines, then --resume (twice, the second
           killed again in its middle): the uninterrupted output exactly

Usage: rand_test.py --sflowc PATH [CASE ...]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


class Fail(Exception):
    pass


# ------------------------------------------------------------ the model

def mix64(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def child(key, index):
    """The key of child `index` of a call (its task calls and spawns, in
    order), or of message `index` of an actor (init 0, calls 1, 2, ...),
    or of member `index` of a group."""
    return mix64(key + GAMMA * (index + 1))


def seed_key(s):
    return mix64(s & M64)


class Stream:
    """pcg32_srandom_r(initstate = key, initseq = key), then pcg32."""

    def __init__(self, key):
        self.inc = ((key << 1) | 1) & M64
        self.state = 0
        self.next()
        self.state = (self.state + key) & M64
        self.next()

    def next(self):
        old = self.state
        self.state = (old * 6364136223846793005 + self.inc) & M64
        x = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        rot = old >> 59
        return ((x >> rot) | (x << ((-rot) & 31))) & 0xFFFFFFFF

    def bits(self):
        """rand_f32() * 2^24, the integer rand.sflow prints."""
        return self.next() >> 8


def first(key):
    return Stream(key).bits()


def model(n, seed):
    """The lines rand.sflow prints for --n n --seed seed."""
    main = seed_key(seed)
    mine = Stream(main)
    kids = iter(range(1 << 30))  # main's children, in the order it makes them
    walker = child(main, next(kids))
    group = child(main, next(kids))
    members = [child(group, r) for r in range(3)]
    next(kids)  # reseeded(7): its rand_seed(7) gives it the key of seed 7
    out = ["reseeded %d" % first(seed_key(7))]
    total = 1 + first(child(walker, 0))  # init is message 0
    for i in range(n):
        pairs = []
        for k in range(4):
            p = child(main, next(kids))
            # pair's own draw, then its second child's (busy is the first)
            pairs.append((first(p), first(child(p, 1))))
        flaky = first(child(main, next(kids)))  # the retry draws it again
        total += first(child(walker, i + 1))
        m = [first(child(members[r], i + 1)) for r in range(3)]
        out.append(" ".join(str(v) for v in (i, pairs[0][0], pairs[0][1], pairs[3][0],
                                             pairs[3][1], flaky, total, m[0], m[1], m[2],
                                             mine.bits())))
    out.append("main %d" % mine.bits())
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- runs

def run(exe, args, ckdir, kill_after_lines=None):
    """(exit status, stdout); with kill_after_lines, SIGKILLed once that
    many lines have come out."""
    cmd = [exe] + list(args) + ["--checkpoint-dir", ckdir]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_after_lines is None:
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            raise Fail("%s exited %d\n%s" % (" ".join(cmd), p.returncode, err))
        return p.returncode, out
    lines = []
    for line in p.stdout:
        lines.append(line)
        if len(lines) >= kill_after_lines:
            p.send_signal(signal.SIGKILL)
            break
    rest, _ = p.communicate(timeout=120)
    return p.returncode, "".join(lines) + rest


def same(want, got, what):
    if want != got:
        import difflib
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                            "expected", what, n=1))
        raise Fail("%s differs:\n%s" % (what, diff[:4000]))


def case_model(exe, tmp):
    for n, seed in ((8, 42), (3, 0), (2, -5)):
        _, out = run(exe, ["--n", str(n), "--seed", str(seed), "--journal=false"],
                     os.path.join(tmp, "model"))
        same(model(n, seed), out, "--n %d --seed %d" % (n, seed))


def case_threads(exe, tmp):
    want = None
    for threads in ("1", "2", "4"):
        for k in range(3):
            _, out = run(exe, ["--threads", threads, "--journal=false"], os.path.join(tmp, "t"))
            if want is None:
                want = out
            same(want, out, "--threads %s (run %d)" % (threads, k + 1))


def case_resume(exe, tmp):
    args = ["--n", "30", "--spin", "3000000"]
    _, ref = run(exe, args + ["--journal=false"], os.path.join(tmp, "ref"))
    for name, kills in (("once", [6]), ("twice", [4, 12])):
        ck = os.path.join(tmp, "resume-" + name)
        rc, part = run(exe, args, ck, kill_after_lines=kills[0])
        if rc == 0:
            raise Fail("resume-%s: the run finished before it was killed" % name)
        for again in kills[1:]:
            rc, _ = run(exe, args + ["--resume"], ck, kill_after_lines=again)
            if rc == 0:
                raise Fail("resume-%s: the resume finished before it was killed" % name)
        _, out = run(exe, args + ["--resume"], ck)
        same(ref, out, "resume-%s (killed after %s lines)" % (name, kills))
        shutil.rmtree(ck, ignore_errors=True)


CASES = {"model": case_model, "threads": case_threads, "resume": case_resume}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-rand-")
    failures = 0
    try:
        exe = os.path.join(tmp, "rand")
        subprocess.run([a.sflowc, os.path.join(HERE, "rand.sflow"), "-o", exe], check=True)
        for name in a.cases or CASES:
            try:
                CASES[name](exe, tmp)
                print("PASS", name)
            except Fail as e:
                failures += 1
                print("FAIL %s: %s" % (name, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
