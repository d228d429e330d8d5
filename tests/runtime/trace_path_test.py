#!/usr/bin/env python3
"""Where `--trace PATH` writes, whatever PATH names (docs/runtime.md, "Seeing
what runs"): a FIFO is written as it is (a reader gets the JSON), a symlink
is followed and stays a link, a device node stays a device (as root; a
char device made with mknod in a temporary folder, never one under /dev),
the file of stdout is written after the program's output, a reader that
goes away costs a notice and not the exit status, and a directory or a
missing folder is an error (exit 2) before the program prints anything.
Another run's temporary file beside the path is left alone.

Usage: trace_path_test.py --sflowc PATH [CASE ...]   (cases: see CASES)"""
import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def skip(what, why):
    print("SKIP %s: %s" % (what, why))


def run(exe, tmp, path, **kw):
    """The observe program traced to path; its CompletedProcess."""
    ck = ["--checkpoint-dir", os.path.join(tmp, "ck")]
    kw.setdefault("capture_output", True)
    return subprocess.run([exe, "--trace", path] + ck, timeout=120, **kw)


def is_trace(data):
    """True when data is a JSON trace of the observe program."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        print("  not JSON (%s): %r" % (e, data[:80]))
        return False
    return any(e.get("name") == "flaky" and e.get("ph") == "X" for e in doc["traceEvents"])


def slurp(path):
    """The bytes of path, or b"" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def leftovers(folder):
    return sorted(n for n in os.listdir(folder) if ".tmp" in n)


class FifoReader(threading.Thread):
    """Opens the FIFO for reading and reads it to the end (or, with
    hang_up, closes it at once)."""

    def __init__(self, path, hang_up=False):
        super().__init__(daemon=True)  # a FIFO replaced by a file never opens
        self.path, self.hang_up, self.data = path, hang_up, None
        self.start()

    def run(self):
        with open(self.path, "rb") as f:
            self.data = b"" if self.hang_up else f.read()


def case_fifo(exe, tmp):
    fifo = os.path.join(tmp, "trace.fifo")
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    p = run(exe, tmp, fifo)
    reader.join(60)
    check(p.returncode == 0, "a run traced into a FIFO exits 0: %d %r" % (p.returncode, p.stderr[-200:]))
    check(reader.data is not None and is_trace(reader.data),
          "the FIFO's reader receives the JSON trace")
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
    check(leftovers(tmp) == [], "no temporary file left: %r" % leftovers(tmp))


def case_fifo_hangup(exe, tmp):
    fifo = os.path.join(tmp, "gone.fifo")
    os.mkfifo(fifo)
    reader = FifoReader(fifo, hang_up=True)
    p = run(exe, tmp, fifo)
    reader.join(60)
    check(p.returncode == 0 and b"cannot write the trace" in p.stderr,
          "a FIFO reader that went away costs a notice, not SIGPIPE: exit %d, %r"
          % (p.returncode, p.stderr[-200:]))


def case_symlink(exe, tmp):
    target = os.path.join(tmp, "real.json")
    with open(target, "w") as f:
        f.write("old")
    os.chmod(target, 0o640)
    link = os.path.join(tmp, "latest.json")
    os.symlink("real.json", link)
    p = run(exe, tmp, link)
    check(p.returncode == 0, "a run traced through a symlink exits 0")
    check(os.path.islink(link) and os.readlink(link) == "real.json",
          "the symlink is still a symlink to its target")
    check(is_trace(slurp(target)), "the symlink's target holds the trace")
    check(stat.S_IMODE(os.stat(target).st_mode) == 0o640, "the replaced target keeps its mode")
    check(leftovers(tmp) == [], "no temporary file left: %r" % leftovers(tmp))

    dangling = os.path.join(tmp, "dangling.json")
    os.symlink("made.json", dangling)
    p = run(exe, tmp, dangling)
    made = os.path.join(tmp, "made.json")
    check(p.returncode == 0 and os.path.islink(dangling) and os.path.isfile(made),
          "a dangling symlink: its target is created, the link kept")
    check(is_trace(slurp(made)), "the created target holds the trace")


def case_device(exe, tmp):
    if os.geteuid() != 0:
        skip("device", "not root (mknod needs root); the char device case did not run")
        return
    dev = os.path.join(tmp, "null")
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    try:
        os.close(os.open(dev, os.O_WRONLY))
    except OSError as e:  # a temporary folder on a nodev mount
        skip("device", "cannot open a device made in %s (%s)" % (tmp, e))
        return
    p = run(exe, tmp, dev)
    st = os.lstat(dev)
    check(p.returncode == 0, "a run traced into a char device exits 0: %r" % p.stderr[-200:])
    check(stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3),
          "the char device (1:3) is still that device")
    check(leftovers(tmp) == [], "no temporary file left: %r" % leftovers(tmp))
    # A block device is refused before the run: it is never opened (the
    # numbers name a loop device that need not exist).
    blk = os.path.join(tmp, "blk")
    os.mknod(blk, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    p = run(exe, tmp, blk)
    check(p.returncode == 2 and p.stdout == b"" and b"block device" in p.stderr
          and stat.S_ISBLK(os.lstat(blk).st_mode),
          "a block device is refused with exit 2 before the run: %d %r" % (p.returncode, p.stderr))


def case_stdout(exe, tmp):
    # The file of stdout, named through a link to /proc/self/fd/1 (what
    # /dev/stdout is; /dev itself is never touched here): the trace comes
    # after the program's output on the same pipe.
    link = os.path.join(tmp, "stdout")
    os.symlink("/proc/self/fd/1", link)
    p = run(exe, tmp, link)
    out = p.stdout
    at = out.find(b"{\"displayTimeUnit\"")
    check(p.returncode == 0 and out.startswith(b"started at") and at > 0 and is_trace(out[at:]),
          "a link to stdout (a pipe) gets the trace after the output: %r" % out[:60])
    check(os.path.islink(link), "that link is still a link")
    # `--trace out.txt > out.txt`: appended after the output, which stays.
    both = os.path.join(tmp, "both.txt")
    with open(both, "wb") as f:
        p = run(exe, tmp, both, stdout=f, stderr=subprocess.PIPE, capture_output=False)
    data = slurp(both)
    at = data.find(b"{\"displayTimeUnit\"")
    check(p.returncode == 0 and data.startswith(b"started at") and at > 0 and is_trace(data[at:]),
          "--trace F > F: the output, then the trace: %r" % data[:60])


def case_regular(exe, tmp):
    path = os.path.join(tmp, "t.json")
    other = path + ".tmp"  # what another run (the old fixed name) may hold
    with open(other, "w") as f:
        f.write("another run's file")
    with open(path, "w") as f:
        f.write("old trace")
    p = run(exe, tmp, path)
    check(p.returncode == 0 and is_trace(slurp(path)), "a regular file is replaced by the trace")
    check(slurp(other) == b"another run's file", "a file named PATH.tmp beside it is left alone")
    check(leftovers(tmp) == ["t.json.tmp"], "no temporary file of ours left: %r" % leftovers(tmp))


def case_directory(exe, tmp):
    d = os.path.join(tmp, "adir")
    os.mkdir(d)
    p = run(exe, tmp, d)
    check(p.returncode == 2 and p.stdout == b"" and b"is a directory" in p.stderr,
          "--trace DIR exits 2 before the program prints: %d %r %r"
          % (p.returncode, p.stdout[:40], p.stderr))
    check(os.path.isdir(d) and leftovers(tmp) == [],
          "the directory is untouched and no file is left beside it: %r" % leftovers(tmp))


def case_missing_parent(exe, tmp):
    p = run(exe, tmp, os.path.join(tmp, "no", "such", "t.json"))
    check(p.returncode == 2 and p.stdout == b"" and b"folder does not exist" in p.stderr,
          "a missing folder exits 2 before the program prints: %d %r" % (p.returncode, p.stderr))
    f = os.path.join(tmp, "plain")
    open(f, "w").close()
    p = run(exe, tmp, os.path.join(f, "t.json"))
    check(p.returncode == 2 and p.stdout == b"" and b"is not a directory" in p.stderr,
          "a file used as a folder exits 2 before the run: %d %r" % (p.returncode, p.stderr))


CASES = {"fifo": case_fifo, "fifo_hangup": case_fifo_hangup, "symlink": case_symlink,
         "device": case_device, "stdout": case_stdout, "regular": case_regular,
         "directory": case_directory, "missing_parent": case_missing_parent}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args()
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        ap.error("unknown case %s (cases: %s)" % (", ".join(unknown), ", ".join(CASES)))
    top = tempfile.mkdtemp(prefix="sflow-trace-path-")
    try:
        exe = os.path.join(top, "observe")
        subprocess.run([a.sflowc, os.path.join(HERE, "observe.sflow"), "-o", exe], check=True)
        for name in a.cases or list(CASES):
            tmp = os.path.join(top, name)
            os.mkdir(tmp)
            print("-- %s" % name)
            CASES[name](exe, tmp)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
