#!/usr/bin/env python3
"""The layers' GPU paths end to end: every program of tests/gpu/layers/ is
compiled and run with --require-gpu, on a GPU or (with --emu) under the host
emulator, and its stdout must be its `// expect:` lines (the programs
compare their @gpus(1) actor's results with the CPU's themselves).  The
run's SFLOW_GPU_STATS line must show kernel launches, so a pass means the
GPU path ran, and a `// d2h-syncs: N` line bounds the device-to-host reads
the run may make (the reads the program asks for; the layers add none).
Exits 77 (ctest: not run) without a GPU and without --emu.

Usage: run.py --sflowc PATH [--emu-env K=V ...] [PROGRAM ...]
"""
import argparse, glob, os, re, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu-env", action="append", default=[],
                    help="K=V for the host emulator (its libraries: SFLOW_CUDA, ...)")
    ap.add_argument("programs", nargs="*")
    args = ap.parse_args()
    progs = args.programs or sorted(glob.glob(os.path.join(HERE, "*.sflow")))
    tmp = tempfile.mkdtemp(prefix="sflow-gpu-nn-")
    env = dict(os.environ, SFLOW_GPU_STATS="1",
               SFLOW_KERNEL_CACHE=os.path.join(tmp, "kernel-cache"))
    env.pop("SFLOW_NO_GPU", None)
    for kv in args.emu_env:
        k, v = kv.split("=", 1)
        env[k] = v
    failed = 0
    for src in progs:
        name = os.path.relpath(src, ROOT)
        exe = os.path.join(tmp, os.path.basename(src)[:-6])
        r = subprocess.run([args.sflowc, src, "-o", exe], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {name}: does not compile\n{r.stderr}"); failed += 1; continue
        g = subprocess.run([exe, "--require-gpu"], capture_output=True, text=True, env=env,
                           timeout=1200)
        if "--require-gpu" in g.stderr and "no GPU" in g.stderr and not args.emu_env:
            print(f"run.py: SKIP: {g.stderr.strip()}"); return 77
        want = [m.group(1) for m in
                (re.search(r"//\s*expect:\s?(.*)$", l) for l in open(src).read().splitlines()) if m]
        got = g.stdout.splitlines()
        stats = {}
        for l in g.stderr.splitlines():
            if l.startswith("sflow-gpu-stats:"):
                stats = dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv)
        launches = int(stats.get("gpu_launches", "0") or 0)
        ok = g.returncode == 0 and got == want and launches > 0
        bound = re.search(r"//\s*d2h-syncs:\s*(\d+)", open(src).read())
        syncs = int(stats.get("d2h_syncs", "-1") or -1)
        if bound and not 0 <= syncs <= int(bound.group(1)):
            print(f"  d2h syncs: at most {bound.group(1)} wanted, got {syncs}"); ok = False
        print(f"{'ok  ' if ok else 'FAIL'} {name} (gpu launches {launches}, "
              f"d2h syncs {stats.get('d2h_syncs', '?')})")
        if not ok:
            print(f"  rc {g.returncode}\n  want:\n    " + "\n    ".join(want) + "\n  got:\n    " +
                  "\n    ".join(got) + f"\n  stderr:\n{g.stderr[-4000:]}")
            failed += 1
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
