#!/usr/bin/env python3
"""The transfer counters of SFLOW_GPU_STATS under the host emulator
(tests/gpu/emu), for the two ways a loop of GPU work used to wait or grow:

 - settle: bench/gpu/mlp_bench.sflow at a tiny size for 1, 5, 20 and 80
   repetitions.  The arrays a repetition drops (the previous h and z) are
   released unread, so the bytes copied back (d2h_bytes) are the same for
   every count, the host-to-device bytes too, and the touched-array list
   (pending_peak) stops growing: 20 and 80 repetitions hold as many.
 - upload: tests/gpu/nn/mlp_ce.sflow's @gpus(1) training; every tensor
   upload goes through pinned staging (h2d_pinned == h2d_bytes) without a
   counted wait, and with SFLOW_PINNED_STAGING=0 the synchronous copies
   are counted as waits (h2d_waits > 0).

Usage: counters.py --sflowc PATH --emu LIBSFLOW_EMU
"""
import argparse, atexit, os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stats(cmd, env_extra):
    env = dict(os.environ, SFLOW_GPU_STATS="1", **env_extra)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        sys.exit(f"counters: {' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
    line = [l for l in p.stderr.splitlines() if l.startswith("sflow-gpu-stats:")]
    if not line:
        sys.exit(f"counters: {cmd[0]} printed no sflow-gpu-stats line:\n{p.stderr}")
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line[-1])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu", required=True)
    a = ap.parse_args()
    emu = {"SFLOW_CUDA": a.emu, "SFLOW_NVRTC": a.emu, "SFLOW_CUBLAS": a.emu, "SFLOW_NCCL": "off"}
    tmp = tempfile.mkdtemp(prefix="sflow-counters-")
    atexit.register(shutil.rmtree, tmp, True)
    fails = []

    def want(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            fails.append(what)

    mlp = os.path.join(tmp, "mlp_bench")
    subprocess.run([a.sflowc, "-O2", os.path.join(ROOT, "bench/gpu/mlp_bench.sflow"), "-o", mlp], check=True)
    runs = {}
    for reps in (1, 5, 20, 80):
        runs[reps] = stats([mlp, "--require-gpu", "--batch", "8", "--dim", "8", "--hidden", "16",
                            "--classes", "4", "--reps", str(reps)], emu)
        s = runs[reps]
        print(f"mlp_bench reps={reps}: d2h_bytes={s['d2h_bytes']:.0f} h2d_bytes={s['h2d_bytes']:.0f} "
              f"pending_peak={s.get('pending_peak', -1):.0f} settle_dropped={s.get('settle_dropped', -1):.0f}")
    for key in ("d2h_bytes", "h2d_bytes"):
        vals = [runs[r][key] for r in runs]
        want(len(set(vals)) == 1, f"mlp_bench {key} flat over 1, 5, 20, 80 repetitions: {vals}")
    pk = [runs[r].get("pending_peak") for r in (20, 80)]
    want(None not in pk and pk[0] == pk[1], f"mlp_bench pending_peak bounded (20 and 80 repetitions): {pk}")
    want(runs[80].get("settle_dropped", 0) > runs[20].get("settle_dropped", 0),
         "mlp_bench drops the arrays no one refers to (settle_dropped grows with the loop)")

    ce = os.path.join(tmp, "mlp_ce")
    subprocess.run([a.sflowc, "-O2", os.path.join(ROOT, "tests/gpu/nn/mlp_ce.sflow"), "-o", ce], check=True)
    s = stats([ce, "--require-gpu", "--quiet"], emu)
    print(f"mlp_ce: h2d_bytes={s['h2d_bytes']:.0f} h2d_pinned={s.get('h2d_pinned', -1):.0f} "
          f"h2d_waits={s.get('h2d_waits', -1):.0f}")
    want(s["h2d_bytes"] > 0 and s.get("h2d_pinned") == s["h2d_bytes"],
         "mlp_ce: every tensor upload staged through pinned memory")
    want(s.get("h2d_waits") == 0, "mlp_ce: no host-to-device wait counted")
    s = stats([ce, "--require-gpu", "--quiet"], dict(emu, SFLOW_PINNED_STAGING="0"))
    print(f"mlp_ce, SFLOW_PINNED_STAGING=0: h2d_pinned={s.get('h2d_pinned', -1):.0f} "
          f"h2d_waits={s.get('h2d_waits', -1):.0f}")
    want(s.get("h2d_pinned") == 0 and s.get("h2d_waits", 0) > 0,
         "mlp_ce without staging: each synchronous upload counted as a wait")
    if fails:
        sys.exit(f"counters: {len(fails)} check(s) failed")
    print("counters: all checks passed (host emulator, not a GPU)")


if __name__ == "__main__":
    main()
