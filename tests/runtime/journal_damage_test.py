#!/usr/bin/env python3
"""Damaged journals: --resume either repairs safely or refuses, never lies.

A run is killed partway (leaving a journal and checkpoints), the folder is
copied, and the copy's journal is damaged: truncated to zero, to half and
to random lengths, one byte flipped at random positions past the header,
and one byte flipped in each field of the header (magic, flags checksum,
header checksum).  Each damaged copy is resumed, and the resume must end
in one of two ways:

  repaired  exit 0, stdout byte for byte the uninterrupted run's, and the
            journal and checkpoints removed as after any finished run;
  refused   a non-zero exit (not a signal) whose message names the journal
            and says what is wrong ("damaged", "truncated" ...; "header"
            for damage in the header).

Exit 0 with other output ("wrong"), a crash, a hang or a refusal without a
clear message fails.  Also checks that a resume that answers every call from
the journal, and so appends nothing, still removes it when it finishes.

Programs: examples/pipeline.sflow --batches 40 (extract -> transform tasks
and a checkpointed actor) and tests/runtime/pipeline.sflow --n 60 (tasks, a
checkpointed actor, a checkpointed group reached through g.any and g.all,
rand_f32 in main).

Usage: journal_damage_test.py --sflowc PATH [--trials N] [--snapshots N]
                              [--seed S] [CASE ...]
CASE: examples, runtime (the two programs), fallback (the journal cut just
short of the newest checkpoint: an older one is used, and a kill of that
resume and another resume still print the uninterrupted output),
adds-nothing.  The short form
(the ctest) runs 5 random truncations and 5 random flips per snapshot, one
snapshot per program; `make soak-journal` runs many more.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = {
    "examples": (os.path.join(ROOT, "examples", "pipeline.sflow"), ["--batches", "40"]),
    "runtime": (os.path.join(HERE, "pipeline.sflow"), ["--n", "60"]),
}
# The header's fields, by format: (name, offset) of one byte in each.
HEADER = {
    b"SFJ2": (12, [("magic", 1), ("flags checksum", 5)]),
    b"SFJ3": (20, [("magic", 2), ("run id", 6), ("flags checksum", 13),
                   ("header checksum", 17)]),
}
CLEAR = ("damaged", "truncated", "not an sflow journal", "corrupt")


class Fail(Exception):
    pass


def run(cmd, timeout=60, kill_after=None):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=kill_after if kill_after is not None else timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate()
        if kill_after is None:
            return None, out.decode(), err.decode()  # a hang
    return p.returncode, out.decode(), err.decode()


def snapshot(exe, args, ck, wall, frac, ref):
    """A folder left by a run killed at frac of its wall time, with a
    journal and at least one checkpoint; frac moves until there is one."""
    for _ in range(12):
        shutil.rmtree(ck, ignore_errors=True)
        rc, out, _ = run([exe] + args + ["--checkpoint-dir", ck], kill_after=wall * frac)
        j = os.path.join(ck, "journal")
        d = os.path.join(ck, "ckpt")
        if os.path.exists(j) and os.path.isdir(d) and os.listdir(d) and rc != 0:
            return os.path.getsize(j)
        if rc == 0 or out == ref:
            frac *= 0.7  # finished (or was exiting) first: kill it sooner
        else:
            frac = min(frac * 1.3, 0.95)  # killed before a checkpoint
    raise Fail("no run left a journal and a checkpoint behind (kill at %.2f of %.2f s)"
               % (frac, wall))


def classify(rc, out, err, ref, ck, header):
    """'repaired', 'refused', or raises Fail with what is wrong."""
    if rc is None:
        raise Fail("hang")
    if rc < 0:
        raise Fail("killed by signal %d\n%s" % (-rc, err[-2000:]))
    if rc == 0:
        if out != ref:
            raise Fail("WRONG: exit 0 with other output (%d lines, %d expected)\n%s"
                       % (out.count("\n"), ref.count("\n"), err[-2000:]))
        if os.path.exists(os.path.join(ck, "journal")) or os.path.exists(os.path.join(ck, "ckpt")):
            raise Fail("the journal or checkpoints are left after a finished resume")
        return "repaired"
    low = err.lower()
    if "journal" not in low or not any(w in low for w in CLEAR):
        raise Fail("UNCLEAR: exit %d without a clear message\n%s" % (rc, err[-2000:]))
    if header and "header" not in low:
        raise Fail("UNCLEAR: header damage refused without saying so\n%s" % err[-2000:])
    return "refused"


def damages(size, hdr_len, fields, trials, rng):
    """(name, function of the journal's bytes, header?) for each trial."""
    out = [("undamaged", lambda b: b, False),
           ("truncate-0", lambda b: b"", False),
           ("truncate-half", lambda b: b[:len(b) // 2], False)]
    for name, off in fields:
        out.append(("flip-header-%s@%d" % (name.replace(" ", "-"), off),
                    lambda b, o=off: b[:o] + bytes([b[o] ^ 0x5A]) + b[o + 1:], True))
    for _ in range(trials):
        n = rng.randrange(1, size)
        out.append(("truncate-%d" % n, lambda b, n=n: b[:n], False))
    for _ in range(trials):
        at = rng.randrange(hdr_len, size)
        bit = 1 << rng.randrange(8)
        out.append(("flip-%d" % at, lambda b, at=at, bit=bit:
                    b[:at] + bytes([b[at] ^ bit]) + b[at + 1:], False))
    return out


def campaign(sflowc, key, tmp, trials, snapshots, rng, tally, verbose):
    src, args = PROGRAMS[key]
    exe = os.path.join(tmp, key)
    subprocess.run([sflowc, src, "-o", exe], check=True)
    t0 = time.time()
    rc, ref, err = run([exe] + args + ["--journal=false"])
    wall = time.time() - t0
    if rc != 0 or not ref.startswith(("batch", "0 ")):
        raise Fail("%s: reference run exited %s\n%s" % (key, rc, err))
    failures = []
    for s in range(snapshots):
        frac = 0.5 + 0.4 * (s + 1) / (snapshots + 1)
        base = os.path.join(tmp, "%s-snap%d" % (key, s))
        size = snapshot(exe, args, base, wall, frac, ref)
        with open(os.path.join(base, "journal"), "rb") as f:
            data = f.read()
        hdr_len, fields = HEADER.get(data[:4], (12, []))
        for name, damage, header in damages(size, hdr_len, fields, trials, rng):
            ck = os.path.join(tmp, "trial")
            shutil.rmtree(ck, ignore_errors=True)
            shutil.copytree(base, ck)
            with open(os.path.join(ck, "journal"), "wb") as f:
                f.write(damage(data))
            rc, out, err = run([exe] + args + ["--checkpoint-dir", ck, "--resume"])
            what = "%s snapshot %d (%d bytes) %s" % (key, s, size, name)
            try:
                kind = classify(rc, out, err, ref, ck, header)
                if name == "undamaged" and kind != "repaired":
                    raise Fail("an undamaged journal was refused\n%s" % err[-2000:])
                tally[kind] += 1
                if verbose:
                    why = [l for l in err.splitlines() if "error" in l or "notice" in l]
                    print("%s %s: %s" % (kind, what, why[0] if why else ""))
            except Fail as f:
                tally["wrong" if str(f).startswith("WRONG") else "bad"] += 1
                failures.append("%s: %s" % (what, f))
                print("FAIL %s: %s" % (what, str(f).splitlines()[0]))
        shutil.rmtree(base, ignore_errors=True)
    return failures


ADDS_NOTHING = """
task one(i: i64) -> i64 { return i + 1 }
workflow main(spin: i64 = 400000000) {
  let x = await one(1)
  print("got", x)
  var s: i64 = 0
  for k in 0..spin { s = (s * 31 + k) % 1000003 }
  print("spun", s)
}
"""


def adds_nothing(sflowc, tmp):
    """A run killed after its only call was journaled: the resume answers
    it from the journal, appends nothing, and must still remove it."""
    src = os.path.join(tmp, "nothing.sflow")
    with open(src, "w") as f:
        f.write(ADDS_NOTHING)
    exe = os.path.join(tmp, "nothing")
    subprocess.run([sflowc, src, "-o", exe], check=True)
    t0 = time.time()
    rc, ref, err = run([exe, "--journal=false"])
    wall = time.time() - t0
    ck = os.path.join(tmp, "nothing-ck")
    rc, part, _ = run([exe, "--checkpoint-dir", ck], kill_after=max(wall * 0.5, 0.2))
    if rc == 0 or not os.path.exists(os.path.join(ck, "journal")):
        raise Fail("adds-nothing: the run was not killed after its call (%s)" % rc)
    rc, out, err = run([exe, "--checkpoint-dir", ck, "--resume"])
    if rc != 0 or out != ref:
        raise Fail("adds-nothing: resume exited %s with %r\n%s" % (rc, out, err))
    if os.path.exists(os.path.join(ck, "journal")):
        raise Fail("adds-nothing: the journal is left after the resume finished")
    rc, out, err = run([exe, "--checkpoint-dir", ck, "--resume"])
    if rc != 0 or out != ref or "from the start" not in err:
        raise Fail("adds-nothing: a second --resume did not run from the start: %s %s"
                   % (rc, err))


def fallback_then_kill(sflowc, tmp):
    """The journal cut just short of what the newest checkpoint of Acc
    depends on: the resume falls back to an older checkpoint; killed
    halfway and resumed again, it must still print the uninterrupted
    output."""
    src, args = PROGRAMS["runtime"]
    exe = os.path.join(tmp, "fallback")
    subprocess.run([sflowc, src, "-o", exe], check=True)
    t0 = time.time()
    rc, ref, err = run([exe] + args + ["--journal=false"])
    wall = time.time() - t0
    ck = os.path.join(tmp, "fallback-ck")
    snapshot(exe, args, ck, wall, 0.7, ref)
    d = os.path.join(ck, "ckpt")
    newest = max((f for f in os.listdir(d) if f.startswith("Acc-")),
                 key=lambda f: int(f.rsplit(".", 1)[1]))
    with open(os.path.join(d, newest), "rb") as f:
        head = f.read(64)
    if head[:4] != b"SFC3":
        raise Fail("fallback: checkpoint %s is not in the SFC3 format" % newest)
    depends = int.from_bytes(head[28:36], "little")  # the journal's length it depends on
    with open(os.path.join(ck, "journal"), "r+b") as f:
        f.truncate(depends - 1)
    rc, part, err = run([exe] + args + ["--checkpoint-dir", ck, "--resume"],
                        kill_after=wall * 0.5)
    if rc not in (0, -signal.SIGKILL) or "is removed and" not in err:
        raise Fail("fallback: the resume did not fall back to an older checkpoint (%s)\n%s"
                   % (rc, err[-2000:]))
    if rc != 0:
        rc, out, err = run([exe] + args + ["--checkpoint-dir", ck, "--resume"])
    else:
        out = part
    if rc != 0 or out != ref:
        raise Fail("fallback: the resume after the fallback exited %s, %s output\n%s"
                   % (rc, "the same" if out == ref else "other", err[-2000:]))
    if os.path.exists(os.path.join(ck, "journal")):
        raise Fail("fallback: the journal is left after the run finished")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--trials", type=int, default=5, help="random truncations and flips each")
    ap.add_argument("--snapshots", type=int, default=1, help="killed runs per program")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--verbose", action="store_true", help="a line per trial")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print("seed %d" % seed)
    tmp = tempfile.mkdtemp(prefix="sflow-jdamage-")
    failures = []
    tally = {"repaired": 0, "refused": 0, "wrong": 0, "bad": 0}
    try:
        for key in ("examples", "runtime"):
            if a.cases and key not in a.cases:
                continue
            try:
                failures += campaign(a.sflowc, key, tmp, a.trials, a.snapshots, rng, tally,
                                     a.verbose)
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
        if not a.cases or "fallback" in a.cases:
            try:
                fallback_then_kill(a.sflowc, tmp)
                print("PASS fallback")
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
        if not a.cases or "adds-nothing" in a.cases:
            try:
                adds_nothing(a.sflowc, tmp)
                print("PASS adds-nothing")
            except Fail as f:
                failures.append(str(f))
                print("FAIL %s" % f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = sum(tally.values())
    print("%d damaged-journal trials: %d repaired (identical output), %d refused clearly, "
          "%d wrong output, %d other failures (seed %d)"
          % (total, tally["repaired"], tally["refused"], tally["wrong"], tally["bad"], seed))
    for f in failures:
        print("----\n" + f)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
