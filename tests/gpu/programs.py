#!/usr/bin/env python3
"""Kernels on a real GPU against the CPU path: every program in
tests/gpu/programs/ and tests/run/kernels/ is compiled once and run twice,
with SFLOW_NO_GPU=1 and with --require-gpu; stdout and stderr must match.
Programs with a `// gpu-stats: key=value ...` line also check the GPU run's
transfer counters (SFLOW_GPU_STATS=1).  Exits 77 without a GPU.

--emu LIB runs the "GPU" side under the host emulator instead (LIB is
libsflow_emu.so, tests/gpu/emu; ctest's gpu_emu/programs): the same
checks, on any machine, and a missing GPU is then a failure, not a skip.

Usage: programs.py --sflowc PATH [--emu LIB] [--only TEXT ...]
"""
import argparse, glob, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EMU = None

def run(exe, gpu):
    env = dict(os.environ, SFLOW_GPU_STATS="1")
    env.setdefault("SFLOW_KERNEL_CACHE", os.path.join(tempfile.gettempdir(), "sflow-gpu-programs-cache"))
    if EMU:
        env.update(SFLOW_CUDA=EMU, SFLOW_NVRTC=EMU, SFLOW_CUBLAS=EMU)
    if not gpu:
        env["SFLOW_NO_GPU"] = "1"
    args = [exe] + (["--require-gpu"] if gpu else ["--quiet"])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)

def split_stats(err):
    # Notices and the closing summary of tasks and actors (only without
    # --quiet, so only in the GPU run) say how the run was placed, e.g.
    # group members sharing one GPU; they are not output.
    lines = [l for l in err.splitlines()
             if not l.startswith("sflow-gpu-stats:") and not re.match(r"^\S+: notice: ", l)
             and not re.match(r"^\S+: \d+ tasks? \(\d+ failed, .* in [0-9.]+ s$", l)]
    stats = {}
    for l in err.splitlines():
        if l.startswith("sflow-gpu-stats:"):
            stats = dict(kv.split("=") for kv in l.split()[1:])
    return "\n".join(lines), stats

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu", help="the host emulator's library: run the GPU side under it")
    ap.add_argument("--only", action="append",
                    help="only the programs whose path contains this text (repeatable: any)")
    args = ap.parse_args()
    global EMU
    EMU = os.path.abspath(args.emu) if args.emu else None
    side = "emulator" if EMU else "GPU"
    progs = sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "programs", "*.sflow")) +
                   glob.glob(os.path.join(ROOT, "tests", "run", "kernels", "*.sflow")))
    progs = [p for p in progs if not args.only or any(o in p for o in args.only)]
    tmp = tempfile.mkdtemp(prefix="sflow-gpu-")
    failed = 0
    for i, src in enumerate(progs):
        exe = os.path.join(tmp, os.path.basename(src)[:-6])
        r = subprocess.run([args.sflowc, src, "-o", exe], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {src}: does not compile\n{r.stderr}"); failed += 1; continue
        g = run(exe, True)
        if "no GPU" in g.stderr and "--require-gpu" in g.stderr:
            if EMU:
                print(f"FAIL: the emulator does not load: {g.stderr.strip()}"); return 1
            print(f"programs: SKIP: {g.stderr.strip()}"); return 77
        c = run(exe, False)
        gerr, stats = split_stats(g.stderr)
        cerr, _ = split_stats(c.stderr)
        ok = g.stdout == c.stdout and gerr == cerr and g.returncode == c.returncode
        want = re.search(r"//\s*gpu-stats:\s*(.*)", open(src).read())
        if want:
            for kv in want.group(1).split():
                k, v = kv.split("=")
                if stats.get(k) != v:
                    print(f"  {k}: want {v}, got {stats.get(k)}"); ok = False
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.relpath(src, ROOT)} ({side} launches {stats.get('gpu_launches')}, "
              f"h2d {stats.get('h2d_bytes')} B, d2h {stats.get('d2h_bytes')} B)")
        if not ok:
            print(f"  {side}: rc {g.returncode}\n{g.stdout}{gerr}\n  CPU: rc {c.returncode}\n{c.stdout}{cerr}")
            failed += 1
    print(f"TABLE|sflow kernels, {side} vs CPU ({len(progs)} programs)|{len(progs) - failed} identical|CPU version|all identical")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
