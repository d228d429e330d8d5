#!/usr/bin/env python3
"""Every file writer of sflow against what its path names (docs/runtime.md,
"Files sflow writes"): nn.save, data.write_csv/json/jsonl/npy/bytes,
std.tune's --out, io.write_text and io.save.  A regular file is replaced
(its mode kept, no temporary file left); a FIFO is written as it is (its
reader gets the bytes) and stays a FIFO; a symlink is followed and stays a
link; a char device made with mknod in a temporary folder (as root; never
one under /dev) stays that device; a block device and a directory are
refused naming the path, with a non-zero exit, and left as they were; a
file whose folder takes no new file (/proc/self/comm) is written in place.
Checkpoints, which must be replaced whole, refuse a FIFO or a device
where a checkpoint file goes, with a notice, and leave it alone.

Usage: writers_test.py --sflowc PATH [CASE ...]   (cases: see CASES)"""
import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["nn.save", "csv", "json", "jsonl", "npy", "bytes", "tune.out", "io.write_text",
         "io.save"]
failures = []


def check(cond, what):
    print("%s %s" % ("PASS" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def skip(what, why):
    print("SKIP %s: %s" % (what, why))


def run(exe, kind, path, *extra):
    ck = os.path.join(os.path.dirname(path), "ck")
    return subprocess.run([exe, "--kind", kind, "--path", path, "--checkpoint-dir", ck, "--quiet",
                           *extra], capture_output=True, timeout=60)


def slurp(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def leftovers(folder):
    return sorted(n for n in os.listdir(folder) if ".tmp" in n)


def looks_written(kind, data):
    """True when data is what the writer of kind writes (the bytes of a
    reference run for the deterministic ones)."""
    if kind == "tune.out":  # the CSV holds seconds: its header and rows
        return data.startswith(b"trial,iter,metric,action,seconds,config,error\n") and data.count(b"\n") == 5
    return data == REFERENCE[kind]


REFERENCE = {}


class FifoReader(threading.Thread):
    def __init__(self, path):
        super().__init__(daemon=True)  # a FIFO replaced by a file never opens
        self.path, self.data = path, None
        self.start()

    def run(self):
        with open(self.path, "rb") as f:
            self.data = f.read()


def case_regular(exe, tmp, kind):
    path = os.path.join(tmp, "out")
    with open(path, "w") as f:
        f.write("old")
    os.chmod(path, 0o640)
    p = run(exe, kind, path)
    check(p.returncode == 0 and looks_written(kind, slurp(path)),
          "%s: a regular file is replaced: %d %r" % (kind, p.returncode, p.stderr[-200:]))
    check(stat.S_IMODE(os.stat(path).st_mode) == 0o640, "%s: the replaced file keeps its mode" % kind)
    check(leftovers(tmp) == [], "%s: no temporary file left: %r" % (kind, leftovers(tmp)))


def case_fifo(exe, tmp, kind):
    fifo = os.path.join(tmp, "out.fifo")
    os.mkfifo(fifo)
    reader = FifoReader(fifo)
    p = run(exe, kind, fifo)
    reader.join(30)
    check(p.returncode == 0, "%s: writing into a FIFO exits 0: %d %r" % (kind, p.returncode, p.stderr[-200:]))
    check(reader.data is not None and looks_written(kind, reader.data),
          "%s: the FIFO's reader receives the file: %r" % (kind, (reader.data or b"")[:60]))
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "%s: the FIFO is still a FIFO" % kind)
    check(leftovers(tmp) == [], "%s: no temporary file left: %r" % (kind, leftovers(tmp)))


def case_symlink(exe, tmp, kind):
    target = os.path.join(tmp, "real")
    with open(target, "w") as f:
        f.write("old")
    link = os.path.join(tmp, "latest")
    os.symlink("real", link)
    p = run(exe, kind, link)
    check(p.returncode == 0 and os.path.islink(link) and os.readlink(link) == "real",
          "%s: the symlink is still a symlink to its target: %r" % (kind, p.stderr[-200:]))
    check(looks_written(kind, slurp(target)), "%s: the symlink's target holds the file" % kind)
    dangling = os.path.join(tmp, "dangling")
    os.symlink("made", dangling)
    p = run(exe, kind, dangling)
    made = os.path.join(tmp, "made")
    check(p.returncode == 0 and os.path.islink(dangling) and looks_written(kind, slurp(made)),
          "%s: a dangling symlink: its target is created, the link kept" % kind)
    check(leftovers(tmp) == [], "%s: no temporary file left: %r" % (kind, leftovers(tmp)))


def make_device(tmp, name="null"):
    """A char device with /dev/null's numbers in tmp, or None (not root, or
    a nodev mount)."""
    if os.geteuid() != 0:
        return None
    dev = os.path.join(tmp, name)
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    try:
        os.close(os.open(dev, os.O_WRONLY))
    except OSError:
        os.unlink(dev)
        return None
    return dev


def is_null_device(path):
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def case_device(exe, tmp, kind):
    dev = make_device(tmp)
    if not dev:
        skip("%s device" % kind, "not root or a nodev temporary folder: the device case did not run")
        return
    p = run(exe, kind, dev)
    check(p.returncode == 0, "%s: writing into a char device exits 0: %r" % (kind, p.stderr[-200:]))
    check(is_null_device(dev), "%s: the char device (1:3) is still that device" % kind)
    check(leftovers(tmp) == [], "%s: no temporary file left: %r" % (kind, leftovers(tmp)))
    blk = os.path.join(tmp, "blk")  # a loop device's numbers: never opened
    os.mknod(blk, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    p = run(exe, kind, blk)
    check(p.returncode != 0 and b"cannot write " in p.stderr and blk.encode() in p.stderr
          and b"block device" in p.stderr and stat.S_ISBLK(os.lstat(blk).st_mode),
          "%s: a block device is refused, named, and left: %d %r" % (kind, p.returncode, p.stderr[-300:]))


def case_directory(exe, tmp, kind):
    d = os.path.join(tmp, "adir")
    os.mkdir(d)
    p = run(exe, kind, d)
    check(p.returncode != 0 and b"is a directory" in p.stderr and os.path.isdir(d)
          and os.listdir(d) == [] and leftovers(tmp) == [],
          "%s: a directory is refused and untouched: %d %r" % (kind, p.returncode, p.stderr[-300:]))


def case_checkpoint(exe, tmp):
    """Where checkpoint 2 of Acc goes, a FIFO, then a device: refused with a
    notice (never opened: no reader is needed), the node left as it was,
    the other checkpoints written, the run's answer unchanged."""
    nodes = [("fifo", lambda p: os.mkfifo(p),
              lambda p: os.path.lexists(p) and stat.S_ISFIFO(os.lstat(p).st_mode))]
    if os.geteuid() == 0:
        nodes.append(("device", lambda p: os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3)),
                      is_null_device))
    else:
        skip("checkpoint device", "not root")
    for what, make, still in nodes:
        ck = os.path.join(tmp, what)
        os.makedirs(os.path.join(ck, "ckpt"))
        node = os.path.join(ck, "ckpt", "Acc-0-0.2")
        make(node)
        # The finished run removes its checkpoints, but not the node.
        p = subprocess.run([exe, "--kind", "checkpoint", "--checkpoint-dir", ck],
                           capture_output=True, timeout=60)
        err = p.stderr.decode(errors="replace")
        check(p.returncode == 0 and b"total 6" in p.stdout,
              "checkpoint over a %s: the run goes on: %d %r" % (what, p.returncode, err[-300:]))
        check("cannot write checkpoint %s: it is a %s" % (node, "FIFO" if what == "fifo" else
                                                          "character device") in err
              and "must be replaced whole" in err,
              "checkpoint over a %s: a notice names it and why: %r" % (what, err[-300:]))
        check(still(node), "checkpoint over a %s: it is still a %s" % (what, what))
        check(leftovers(os.path.join(ck, "ckpt")) == [], "checkpoint over a %s: no temporary file" % what)


def case_procfs(exe, tmp, kind):
    """A regular file whose folder takes no new file (the writer's own
    /proc/self/comm): written in place, as `>` does, not refused."""
    if kind not in ("nn.save", "csv", "io.write_text") or not os.path.exists("/proc/self/comm"):
        return
    p = run(exe, kind, "/proc/self/comm")
    check(p.returncode == 0 and p.stdout == b"wrote %s\n" % kind.encode(),
          "%s: /proc/self/comm is written in place: %d %r" % (kind, p.returncode, p.stderr[-200:]))


CASES = {"regular": case_regular, "fifo": case_fifo, "symlink": case_symlink,
         "device": case_device, "directory": case_directory, "procfs": case_procfs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*", help="case names (default: all, and checkpoint)")
    a = ap.parse_args()
    names = a.cases or list(CASES) + ["checkpoint"]
    unknown = [c for c in names if c not in CASES and c != "checkpoint"]
    if unknown:
        ap.error("unknown case %s (cases: %s, checkpoint)" % (", ".join(unknown), ", ".join(CASES)))
    top = tempfile.mkdtemp(prefix="sflow-writers-")
    try:
        exe = os.path.join(top, "writers")
        subprocess.run([a.sflowc, os.path.join(HERE, "writers.sflow"), "-o", exe], check=True)
        ref = os.path.join(top, "ref")
        os.mkdir(ref)
        for kind in KINDS:  # what each writer writes to a new file
            path = os.path.join(ref, kind)
            p = run(exe, kind, path)
            if p.returncode != 0:
                print(p.stderr.decode(errors="replace"))
            REFERENCE[kind] = slurp(path)
        for name in names:
            print("-- %s" % name)
            if name == "checkpoint":
                tmp = os.path.join(top, name)
                os.mkdir(tmp)
                case_checkpoint(exe, tmp)
                continue
            for kind in KINDS:
                tmp = os.path.join(top, name, kind)
                os.makedirs(tmp)
                CASES[name](exe, tmp, kind)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
