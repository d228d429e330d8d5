#!/usr/bin/env python3
"""The random-kill campaign: `--resume` must never print anything else.

Compiles campaign.sflow (tasks, a plain actor, a @checkpoint actor, g.all
and g.any, and a task fed another task's future, all of which print), runs
it once uninterrupted (the reference), then runs trials.  A trial kills the
program with SIGKILL at a moment drawn uniformly over the reference run's
duration, or at an SFLOW_FAULT point (inside the Nth journal write or
checkpoint write), resumes it, sometimes kills the resume again (up to
three kills in a row), and finally resumes it to the end.  The finished
run's stdout must equal the reference byte for byte, its exit code must be
0 and the journal must be gone.  Any mismatch prints the trial's seed, its
kill plan and a diff; `--trial SEED` replays one trial.

Every trial draws its plan from its own seed, itself drawn from --seed, so
a campaign is reproducible up to the scheduling of the kills.

Usage: campaign_test.py --sflowc PATH [--kills N] [--seed S] [--trial SEED]
                        [--exe PATH] [--runner-args ...]
"""
import argparse
import difflib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = ("journal-write", "checkpoint-write")


class Fail(Exception):
    """kind: 'output' for a wrong output, 'other' for a wrong exit code, a
    journal left behind or a hang."""

    def __init__(self, msg, kind="other"):
        Exception.__init__(self, msg)
        self.kind = kind


class Campaign:
    """One compiled program and its reference output.  `base` is the
    command that runs it (with its flags); `cwd` the folder trials run in."""

    def __init__(self, base, tmp, env=None, fault_share=0.2, normalize=None, after_kill=None):
        self.base = list(base)
        self.fault_share = fault_share
        # A --nodes run prefixes lines with the node that printed them,
        # which varies for a re-run call: normalize(bytes) drops that.
        self.normalize = normalize or (lambda b: b)
        self.after_kill = after_kill or (lambda: None)  # e.g. wait for workers to end
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.ref = None
        self.wall = None

    def run(self, ckdir, extra=(), env=None, kill_after=None, timeout=180):
        """Runs the program; with kill_after, SIGKILLs it after that many
        seconds if it still runs.  Returns (rc, stdout bytes, stderr text,
        killed)."""
        e = dict(self.env)
        e.update(env or {})
        cmd = self.base + ["--checkpoint-dir", ckdir] + list(extra)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                             start_new_session=True)
        killed = False
        try:
            out, err = p.communicate(timeout=kill_after if kill_after is not None else timeout)
        except subprocess.TimeoutExpired:
            if kill_after is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                raise Fail("%s did not finish in %ds" % (" ".join(cmd), timeout))
            # The whole session: in a --nodes run the head's ssh children too.
            os.killpg(p.pid, signal.SIGKILL)
            killed = True
            out, err = p.communicate()
        return p.returncode, out, err.decode(errors="replace"), killed

    def reference(self):
        ck = os.path.join(self.tmp, "ref")
        rc, plain, err, _ = self.run(ck, ["--journal=false"])
        plain = self.normalize(plain)
        if rc != 0 or not plain.endswith(b"done\n"):
            raise Fail("reference run (--journal=false) exited %d\n%s" % (rc, err))
        # The shorter of two journaled runs: the first may pay for cold
        # caches (or a --nodes run for copying the executable to workers).
        self.wall = None
        for _ in range(2):
            t0 = time.time()
            rc, out, err, _ = self.run(ck)
            wall = time.time() - t0
            self.wall = wall if self.wall is None else min(self.wall, wall)
            out = self.normalize(out)
            if rc != 0 or out != plain:
                raise Fail("the uninterrupted journaled run differs from --journal=false "
                           "(exit %d)\n%s" % (rc, diff(plain, out)[:3000] + err))
        self.ref = out

    def plan(self, seed):
        """The kills of one trial: a list of ('time', seconds) or
        ('fault', 'point:N'), one per interrupted run."""
        rng = random.Random(seed)
        kills = []
        while True:
            if rng.random() < self.fault_share:
                kills.append(("fault", "%s:%d" % (rng.choice(FAULTS), rng.randint(1, 12))))
            else:
                kills.append(("time", round(rng.uniform(0.0, self.wall), 4)))
            if len(kills) == 3 or rng.random() >= 0.35:
                return kills

    def trial(self, seed, number):
        """Runs one trial; returns the number of runs actually killed."""
        kills = self.plan(seed)
        ck = os.path.join(self.tmp, "t%d" % number)
        shutil.rmtree(ck, ignore_errors=True)
        killed_runs = 0
        log = []
        for i, (how, what) in enumerate(kills):
            extra = ["--resume"] if i > 0 else []
            if how == "time":
                rc, out, err, killed = self.run(ck, extra, kill_after=what)
            else:
                rc, out, err, _ = self.run(ck, extra, env={"SFLOW_FAULT": what})
                killed = rc == -signal.SIGKILL
            log.append("%s %s: %s" % (how, what, "killed" if killed else "exit %d" % rc))
            if killed:
                killed_runs += 1
                self.after_kill()
                continue
            # It finished before the kill: then it must be right already.
            break
        else:
            rc, out, err, _ = self.run(ck, ["--resume"])
            log.append("resume: exit %d" % rc)
        try:
            check_done(self, ck, rc, out, err, seed, kills, log)
        except Fail as e:
            e.killed = killed_runs
            raise
        shutil.rmtree(ck, ignore_errors=True)
        return killed_runs


def diff(want, got):
    return "".join(difflib.unified_diff(want.decode(errors="replace").splitlines(True),
                                        got.decode(errors="replace").splitlines(True),
                                        "uninterrupted", "resumed", n=1))


def check_done(c, ck, rc, out, err, seed, kills, log):
    what = "trial seed %d, kills %s (%s)" % (seed, kills, "; ".join(log))
    out = c.normalize(out)
    if rc != 0:
        raise Fail("%s: exit %d\n%s" % (what, rc, err[-3000:]))
    if out != c.ref:
        raise Fail("%s: the output differs from the uninterrupted run's\n%s%s"
                   % (what, diff(c.ref, out)[:4000], err[-2000:]), "output")
    if os.path.exists(os.path.join(ck, "journal")):
        raise Fail("%s: the journal is still there after the run finished" % what)


def campaign(c, kills, seed, only=None, say=print):
    """Runs trials until `kills` runs were killed; returns (trials, killed,
    failures).  Each failure is printed as it happens."""
    master = random.Random(seed)
    trials = killed = 0
    failures = []
    t0 = time.time()
    while killed < kills and trials < 3 * kills + 10:
        s = only if only is not None else master.randrange(1 << 32)
        try:
            killed += c.trial(s, trials)
        except Fail as e:
            failures.append((s, e.kind))
            say("FAIL %s" % e)
            killed += getattr(e, "killed", 0)
        trials += 1
        if only is not None:
            break
    wrong = sum(1 for _, k in failures if k == "output")
    say("%d trials, %d killed runs, %d wrong outputs, %d other failures (seed %d, %.1fs)"
        % (trials, killed, wrong, len(failures) - wrong, seed, time.time() - t0))
    return trials, killed, failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--trial", type=int, default=None, help="replay the trial of this seed")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--fault-share", type=float, default=0.2,
                    help="the share of kills made at SFLOW_FAULT points")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(os.environ.get("SFLOW_CAMPAIGN_SEED", "1"))
    tmp = tempfile.mkdtemp(prefix="sflow-campaign-")
    try:
        exe = os.path.join(tmp, "campaign")
        subprocess.run([a.sflowc, os.path.join(HERE, "campaign.sflow"), "-o", exe], check=True)
        base = [exe]
        if a.threads:
            base.append("--threads=%d" % a.threads)
        c = Campaign(base, tmp, fault_share=a.fault_share)
        c.reference()
        print("reference: %d lines in %.2fs" % (c.ref.count(b"\n"), c.wall))
        _, _, failures = campaign(c, a.kills, seed, a.trial)
        if failures:
            print("FAIL: %d failed trials; replay one with --trial SEED (seeds %s)"
                  % (len(failures), ", ".join(str(f[0]) for f in failures[:10])))
            return 1
        print("PASS")
        return 0
    except Fail as e:
        print("FAIL %s" % e)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
