#!/usr/bin/env python3
"""version_test.py — `sflowc --version` says what a bug report needs.

The first line names sflow's version, the commit the compiler was built
from (`git describe --always --dirty` of the source tree, captured at build
time by cmake/commit.cmake) and the LLVM version it was built with; the
second names the default target: the triple and the CPU a compile without
--target-cpu targets (x86-64-v2 on x86_64).  Outside a git checkout the
commit is "unknown" (the fallback of cmake/commit.cmake, checked by running
it on a folder without .git).

    version_test.py --sflowc PATH --llvm-version X.Y.Z
"""
import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what, got=None):
    if not cond:
        print("FAIL " + what + ("" if got is None else "\n  got: %r" % (got,)))
        failures.append(what)


def is_commit(name):
    """Whether the git checkout at ROOT knows name ("6636cb6", "v0.1-3-g6636cb6",
    either with "-dirty") as a commit; None when ROOT is not a checkout."""
    if not shutil.which("git") or not os.path.exists(os.path.join(ROOT, ".git")):
        return None
    name = re.sub(r"-dirty$", "", name)
    name = re.sub(r"^.*-g([0-9a-f]+)$", r"\1", name)
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", name + "^{commit}"],
                       capture_output=True, text=True)
    return p.returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--llvm-version", required=True)
    a = ap.parse_args()
    p = subprocess.run([a.sflowc, "--version"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "--version exits 0", p.returncode)
    lines = p.stdout.splitlines()
    check(len(lines) == 2, "--version prints two lines", p.stdout)
    m = re.fullmatch(r"sflowc (\S+) \(commit (\S+), LLVM (\S+)\)", lines[0] if lines else "")
    check(m is not None, "first line: sflowc VERSION (commit C, LLVM V)", lines[:1])
    if m:
        check(m.group(3) == a.llvm_version, "the LLVM version is the one built with (%s)"
              % a.llvm_version, m.group(3))
        # A commit of this checkout (HEAD's when the build is fresh; an
        # older one when commits were made since the last build).
        known = is_commit(m.group(2))
        if known is not None:
            check(known, "the commit is one this checkout has", m.group(2))
    m2 = re.fullmatch(r"default target: (\S+-\S+), CPU (\S+)( \(tuned for \S+\))?",
                      lines[1] if len(lines) > 1 else "")
    check(m2 is not None, "second line: default target: TRIPLE, CPU NAME", lines[1:2])
    if m2 and platform.machine() == "x86_64":
        check(m2.group(1).startswith("x86_64"), "the triple is x86_64's", m2.group(1))
        check(m2.group(2) == "x86-64-v2", "the default CPU is x86-64-v2", m2.group(2))
    # The fallback: a source tree without .git gives "unknown".
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "commit.h")
        r = subprocess.run(["cmake", "-DSRC=" + d, "-DOUT=" + out, "-P",
                            os.path.join(ROOT, "cmake", "commit.cmake")],
                           capture_output=True, text=True)
        check(r.returncode == 0, "commit.cmake runs on a folder without .git", r.stderr)
        text = open(out).read() if os.path.exists(out) else ""
        check('#define SFLOW_COMMIT "unknown"' in text, "without .git the commit is unknown", text)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("PASS version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
