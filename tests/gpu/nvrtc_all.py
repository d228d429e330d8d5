#!/usr/bin/env python3
"""Every kernel compiles with NVRTC: the files of kernels/ and the CUDA C
that sflowc emits for every kernel in tests/ and examples/, for sm_80 and
sm_90.  Exits 77 (ctest: not run) only when NVRTC itself is missing.

Usage: nvrtc_all.py --sflowc PATH --check PATH_TO_nvrtc_check
"""
import argparse, glob, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INCLUDE_DIR = os.path.join(ROOT, "runtime", "nn")

def inline_headers(path, tmp):
    """path as the runtime embeds it (cmake/embed.cmake): each line
    `#include "x.h"` naming a file of runtime/nn replaced by its text, in a
    copy under tmp (path itself when it includes none)."""
    with open(path, "rb") as f:
        text = f.read()
    out, changed = [], False
    for line in text.split(b"\n"):
        s = line.strip()
        if s.startswith(b'#include "') and s.endswith(b'"'):
            h = os.path.join(INCLUDE_DIR, s[10:-1].decode())
            if os.path.exists(h):
                with open(h, "rb") as f:
                    line = f.read().rstrip(b"\n")
                changed = True
        out.append(line)
    if not changed:
        return path
    copy = os.path.join(tmp, "kernels__" + os.path.basename(path))
    with open(copy, "wb") as f:
        f.write(b"\n".join(out))
    return copy

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--check", required=True)
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(ROOT, "kernels", "*.cu")))
    if not files:
        print("nvrtc_all: no files in kernels/"); return 1
    sources = sorted(glob.glob(os.path.join(ROOT, "tests", "**", "*.sflow"), recursive=True) +
                     glob.glob(os.path.join(ROOT, "examples", "**", "*.sflow"), recursive=True))
    tmp = tempfile.mkdtemp(prefix="sflow-nvrtc-")
    files = [inline_headers(f, tmp) for f in files]
    nkernels = 0
    for src in sources:
        with open(src, "rb") as f:
            if b"kernel" not in f.read():
                continue
        r = subprocess.run([args.sflowc, "--emit=cuda", src], capture_output=True, timeout=60)
        if r.returncode != 0:
            continue  # a test of a compile error: it has no CUDA C to check
        if not r.stdout.strip():
            continue
        n = r.stdout.count(b'extern "C" __global__')
        nkernels += n
        out = os.path.join(tmp, os.path.relpath(src, ROOT).replace(os.sep, "__") + ".cu")
        with open(out, "wb") as f:
            f.write(r.stdout)
        files.append(out)
    print(f"nvrtc_all: {nkernels} compiled kernels from tests/ and examples/, "
          f"{len(glob.glob(os.path.join(ROOT, 'kernels', '*.cu')))} files of kernels/")
    if nkernels == 0:
        print("nvrtc_all: found no kernels to check"); return 1
    r = subprocess.run([args.check, "sm_80", "sm_90", "--"] + files)
    return r.returncode

if __name__ == "__main__":
    sys.exit(main())
