#!/usr/bin/env python3
"""What the journal leaves on disk (docs/runtime.md, "Durable resume"):

- journal_off: with --journal=false no checkpoint file is written (only
  --resume reads them, and it needs the journal): a run of @checkpoint
  calls leaves nothing in --checkpoint-dir, also when SFLOW_FAULT would
  have killed it in the middle of a checkpoint write (no half-written
  temporary file either).
- torn_checkpoint: the temporary file of a checkpoint write that a kill
  cut short is removed by the --resume after it.
- disk_full: the journal's folder on a small tmpfs (as root; else the file
  size is limited with RLIMIT_FSIZE): the journal write fails with a
  notice saying what was kept and that --resume continues from the last
  complete record (not "cannot be resumed"); the run is killed, room is
  made, and --resume prints exactly what an uninterrupted run prints,
  answering the journaled calls from the journal.

Usage: journal_files_test.py --sflowc PATH [journal_off|torn_checkpoint|disk_full ...]"""
import argparse
import os
import re
import resource
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


def listing(folder):
    """Every path under folder, relative to it."""
    out = []
    for root, dirs, files in os.walk(folder):
        out += [os.path.relpath(os.path.join(root, n), folder) for n in dirs + files]
    return sorted(out)


def case_journal_off(sflowc, tmp):
    exe = os.path.join(tmp, "writers")
    subprocess.run([sflowc, os.path.join(HERE, "writers.sflow"), "-o", exe], check=True)
    for fault in (None, "checkpoint-write:2"):
        ck = os.path.join(tmp, "ck-%s" % (fault or "clean"))
        os.mkdir(ck)
        env = dict(os.environ)
        if fault:
            env["SFLOW_FAULT"] = fault
        p = subprocess.run([exe, "--kind", "checkpoint", "--checkpoint-dir", ck, "--journal=false"],
                           capture_output=True, timeout=60, env=env)
        check(p.returncode == 0 and b"total 6" in p.stdout,
              "--journal=false%s: the run finishes: %d %r"
              % (" with " + fault if fault else "", p.returncode, p.stderr[-200:]))
        check(listing(ck) == [], "--journal=false%s: nothing written in the checkpoint folder: %r"
              % (" with " + fault if fault else "", listing(ck)))


def case_torn_checkpoint(sflowc, tmp):
    """A run killed in the middle of a checkpoint write leaves its
    temporary file; the --resume after it removes it (the resumed run,
    killed at its own first checkpoint write, leaves only its own)."""
    exe = os.path.join(tmp, "writers")
    subprocess.run([sflowc, os.path.join(HERE, "writers.sflow"), "-o", exe], check=True)
    ck = os.path.join(tmp, "ck")
    args = [exe, "--kind", "checkpoint", "--checkpoint-dir", ck, "--quiet"]
    p = subprocess.run(args, capture_output=True, timeout=60,
                       env=dict(os.environ, SFLOW_FAULT="checkpoint-write:2"))
    temps = lambda: sorted(n for n in os.listdir(os.path.join(ck, "ckpt")) if ".tmp-" in n)
    first = temps()
    check(p.returncode == -signal.SIGKILL and len(first) == 1,
          "killed mid-write: one temporary file left: %d %r" % (p.returncode, first))
    p = subprocess.run(args + ["--resume"], capture_output=True, timeout=60,
                       env=dict(os.environ, SFLOW_FAULT="checkpoint-write:1"))
    second = temps()
    check(p.returncode == -signal.SIGKILL and len(second) == 1 and second != first,
          "--resume removed the killed run's temporary file: %r, then %r" % (first, second))
    p = subprocess.run(args + ["--resume"], capture_output=True, timeout=60)
    check(p.returncode == 0 and b"total 6" in p.stdout and not os.path.exists(ck),
          "the last --resume finishes and leaves nothing: %d %r" % (p.returncode, p.stdout))


def mount_tmpfs(folder, size):
    """Mounts a tmpfs of size bytes on folder; False when that is not possible."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", folder],
                       capture_output=True)
    return p.returncode == 0


def case_disk_full(sflowc, tmp):
    exe = os.path.join(tmp, "journal_full")
    subprocess.run([sflowc, os.path.join(HERE, "journal_full.sflow"), "-o", exe], check=True)
    ref = subprocess.run([exe, "--checkpoint-dir", os.path.join(tmp, "ref")], capture_output=True,
                         timeout=120)
    check(ref.returncode == 0 and ref.stdout.count(b"\n") == 501, "the uninterrupted run")
    disk = os.path.join(tmp, "disk")
    os.mkdir(disk)
    mounted = mount_tmpfs(disk, 48 * 1024)
    print("-- the journal on %s" % ("a 48 KiB tmpfs" if mounted else
                                    "disk, its size limited to 48 KiB (RLIMIT_FSIZE)"))
    ck = os.path.join(disk, "ck")

    def limit():
        if not mounted:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))

    try:
        out = open(os.path.join(tmp, "first.out"), "wb")
        p = subprocess.Popen([exe, "--checkpoint-dir", ck], stdout=out, stderr=subprocess.PIPE,
                             preexec_fn=limit, restore_signals=False)
        err = b""
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            err += line
            if b"the journal" in line and b"failed" in line:
                break
        p.kill()
        p.wait()
        out.close()
        err = err.decode(errors="replace")
        note = re.search(r"notice: writing the journal (\S+) failed \(([^)]*)\): it keeps the "
                         r"records written whole before it \(at least (\d+)\); this run journals "
                         r"and checkpoints nothing more, and --resume continues from the last "
                         r"complete record", err)
        check(note is not None and "cannot be resumed" not in err,
              "the failed write says what was kept and that --resume works: %r" % err[-400:])
        if mounted:
            subprocess.run(["mount", "-o", "remount,size=%d" % (16 << 20), disk], check=True)
        r = subprocess.run([exe, "--checkpoint-dir", ck, "--resume"], capture_output=True,
                           timeout=120)
        rerr = r.stderr.decode(errors="replace")
        replayed = re.search(r", (\d+) answered from the journal", rerr)
        check(r.returncode == 0 and r.stdout == ref.stdout,
              "--resume prints exactly the uninterrupted output: %d %r" % (r.returncode, rerr[-300:]))
        check(replayed is not None and int(replayed.group(1)) > 0 and
              (note is None or int(replayed.group(1)) >= int(note.group(3))),
              "--resume answers the journaled calls from the journal: %r"
              % (replayed.group(0) if replayed else rerr[-200:]))
        check(not os.path.exists(ck), "the finished resumed run removed its journal")
    finally:
        if mounted:
            subprocess.run(["umount", disk])


CASES = {"journal_off": case_journal_off, "torn_checkpoint": case_torn_checkpoint,
         "disk_full": case_disk_full}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args()
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        ap.error("unknown case %s (cases: %s)" % (", ".join(unknown), ", ".join(CASES)))
    top = tempfile.mkdtemp(prefix="sflow-journal-files-")
    try:
        for name in a.cases or list(CASES):
            tmp = os.path.join(top, name)
            os.mkdir(tmp)
            print("-- %s" % name)
            CASES[name](a.sflowc, tmp)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
