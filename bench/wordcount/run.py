#!/usr/bin/env python3
"""Word count (split on whitespace, count in a map) in sflow, Python (the
same loop with a dict, and collections.Counter) and C (an open-addressing
table), side by side on one text.

The text is real English no one here wrote: the licence and copyright
files Debian installs (/usr/share/common-licenses, /usr/share/doc/*/copyright),
sorted by path, kept to printable ASCII (so every side splits on the same
whitespace), repeated to --mb megabytes.  Each program times its own split
and count (the read and start-up are left out) and runs --runs times; the
best is kept.  All must report the same distinct and total counts and the
same most frequent word.
Usage: run.py [--sflowc build/bin/sflowc] [--mb 50] [--runs 3]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def corpus(path, mb):
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + \
        sorted(glob.glob("/usr/share/doc/*/copyright"))
    parts = []
    for f in files:
        if not os.path.isfile(f):
            continue
        with open(f, "rb") as fh:
            b = fh.read()
        parts.append(bytes(c for c in b if 32 <= c < 127 or c in (9, 10)))
    base = b"\n".join(parts)
    if not base:
        sys.exit("wordcount: no text found under /usr/share/common-licenses or /usr/share/doc")
    want = mb * 1000 * 1000
    with open(path, "wb") as out:
        n = 0
        while n < want:
            out.write(base)
            n += len(base)
    return n


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), p.stderr))
    distinct, total, word, most, secs = p.stdout.split()
    return (int(distinct), int(total), word, int(most)), float(secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build/bin/sflowc"))
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    text = os.path.join(tmp, "corpus.txt")
    size = corpus(text, a.mb)
    sf, c = os.path.join(tmp, "wc_sf"), os.path.join(tmp, "wc_c")
    subprocess.run([a.sflowc, "-O2", os.path.join(HERE, "wordcount.sflow"), "-o", sf], check=True)
    subprocess.run(["cc", "-O2", os.path.join(HERE, "wordcount.c"), "-o", c], check=True)
    py = os.path.join(HERE, "wordcount.py")
    peers = [("sflow", [sf, "--quiet", "--path", text]),
             ("python", [sys.executable, py, text]),
             ("py-Counter", [sys.executable, py, text, "--counter"]),
             ("C", [c, text])]
    got, times = {}, {}
    for name, cmd in peers:
        rs = [run(cmd) for _ in range(a.runs)]
        got[name] = rs[0][0]
        times[name] = min(s for _, s in rs)
    d, t, w, m = got["C"]
    print("word count of %.1f MB of text (%d words, %d distinct, top %r x%d): seconds, best of %d"
          % (size / 1e6, t, d, w, m, a.runs))
    print("".join("%12s" % n for n, _ in peers) + "    sflow/C  sflow/python")
    print("".join("%12.3f" % times[n] for n, _ in peers) +
          "    %6.2fx  %11.2fx" % (times["sflow"] / times["C"], times["sflow"] / times["python"]))
    bad = [n for n in got if got[n] != got["C"]]
    if bad:
        sys.exit("wordcount: %s disagree with C: %s" % (", ".join(bad), {n: got[n] for n in got}))


if __name__ == "__main__":
    main()
