#!/usr/bin/env python3
"""sources_test.py — docs/architecture.md names every source file.

Its section "Source files" has a heading per folder (### `runtime/core/`)
and under it one item per file (- `mem.c` — what it is for).  This test
fails when a tracked .c, .h, .cu or .sflow file under compiler/, runtime/,
kernels/ or stdlib/ is not listed under its folder's heading, or when a
listed file of those folders is not tracked any more; the failure names
each, so a file added, moved or removed is one line to write.

    sources_test.py [--root DIR]
"""
import argparse
import os
import re
import subprocess
import sys

TREES = ("compiler/", "runtime/", "kernels/", "stdlib/")
EXTS = (".c", ".h", ".cu", ".sflow")


def tracked(root):
    """The source files git tracks; outside a git checkout (a release
    tarball), every file of the trees."""
    p = subprocess.run(["git", "ls-files", "--"] + list(TREES), cwd=root, capture_output=True,
                       text=True)
    if p.returncode == 0:
        paths = p.stdout.splitlines()
    else:
        paths = [os.path.relpath(os.path.join(d, f), root)
                 for t in TREES for d, _, fs in os.walk(os.path.join(root, t)) for f in fs]
    return {p for p in paths if p.endswith(EXTS)}


def listed(doc):
    """{path} of the items under each folder heading of "Source files"."""
    text = doc.split("\n## Source files", 1)
    if len(text) < 2:
        return None
    section = re.split(r"\n## ", text[1], maxsplit=1)[0]
    names, folder = set(), None
    for line in section.splitlines():
        m = re.match(r"### `([^`]+)/`\s*$", line)
        if m:
            folder = m.group(1)
            continue
        m = re.match(r"- `([^`/]+)`", line)
        if m and folder:
            names.add(folder + "/" + m.group(1))
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    a = ap.parse_args()
    with open(os.path.join(a.root, "docs", "architecture.md")) as f:
        names = listed(f.read())
    if names is None:
        print("FAIL: docs/architecture.md has no section \"## Source files\"")
        return 1
    files = tracked(a.root)
    in_trees = {n for n in names if n.startswith(TREES) and n.endswith(EXTS)}
    missing = sorted(files - names)
    stale = sorted(in_trees - files)
    for p in missing:
        print("FAIL: %s is not named in docs/architecture.md (\"Source files\", ### `%s/`)"
              % (p, os.path.dirname(p)))
    for p in stale:
        print("FAIL: docs/architecture.md names %s, which is not a tracked file" % p)
    if missing or stale:
        print("FAIL: %d files missing from docs/architecture.md, %d named there that do not "
              "exist (above)" % (len(missing), len(stale)))
        return 1
    print("ok: docs/architecture.md names all %d source files" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
