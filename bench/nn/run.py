#!/usr/bin/env python3
"""run.py — the std.nn benchmarks of issue 16 beside PyTorch eager on the
CPU, with the same number of threads, in one run:

    python3 bench/nn/run.py [--build build] [--threads 1,2] [--repeat R]
                            [--only mlp|encoder|encoder_explicit] [--mkl]

Sets up the peer first (bench/nn/setup.sh: PyTorch in build/peers/torch;
network once), then for each benchmark and thread count runs
bench/nn/peer.py in a process of its own (OMP_NUM_THREADS and
MKL_NUM_THREADS set to the count, torch.set_num_threads too) and, where
its sflow side exists (bench/nn/<bench>.sflow, compiled by build/bin/sflowc,
run with --threads N; it prints the same RESULT line with `sflow`), that
too.  Prints every RESULT line, then one table: median ms per step, peak
RSS, and peak RSS less the RSS before the first step (torch's libraries
alone hold about 500 MB, which says nothing of the step), and sflow's speed
as a multiple of torch's.  Both sides share the machine with whatever else
runs: on a busy one, --repeat keeps the fastest of several processes.

Each sflow program also runs with SFLOW_BLAS=openblas (row `sflow-oblas`):
the default `sflow` row multiplies on sflow's own GEMM (runtime/gpu/gemm.c,
the same bits on every CPU), this one on OpenBLAS, as before 2026-12-03.

--mkl adds a row `sflow-mkl`: the same sflow program with SFLOW_BLAS
naming oneMKL's libmkl_rt (installed by `setup.sh --mkl` into
build/peers/mkl, network once), the BLAS torch's products use, so the
difference the BLAS makes is visible beside the rest.
"""
import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "bench", "nn")
BENCHES = {"mlp": ("nn_mlp_train_step", ["mlp"], "mlp.sflow"),
           "encoder": ("nn_encoder_fwd_bwd", ["encoder"], "encoder.sflow"),
           "encoder_explicit": ("nn_encoder_fwd_bwd_explicit", ["encoder", "--attention", "explicit"], None)}


def results(text):
    """{(bench, side, threads): (ms, peak MB, base MB)} of RESULT lines."""
    out = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) >= 7 and p[0] == "RESULT":
            out[(p[1], p[2], int(p[3]))] = (float(p[4]), float(p[5]), float(p[6]))
    return out


def run(cmd, env, what, repeat, side=None):
    """The RESULT lines of `repeat` runs of cmd, the fastest of each kept
    (under `side` instead of the side the line names, when given)."""
    best = {}
    for _ in range(repeat):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit(f"bench-nn: {what} failed ({p.returncode}):\n{p.stderr[-2000:]}")
        for line in p.stdout.splitlines():
            if line.startswith(("RESULT", "INFO")):
                tag = f" ({side})" if side and line.startswith("RESULT") else ""
                print(line + tag, flush=True)
        for k, v in results(p.stdout).items():
            k = (k[0], side, k[2]) if side else k
            if k not in best or v[0] < best[k][0]:
                best[k] = v
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--only", action="append", choices=sorted(BENCHES), help="one benchmark (repeatable)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each process this many times and keep the fastest (a busy machine)")
    ap.add_argument("--mkl", action="store_true",
                    help="also run sflow with SFLOW_BLAS=oneMKL (setup.sh --mkl installs it)")
    a = ap.parse_args()
    peers = os.path.join(a.build, "peers", "torch")
    subprocess.run(["bash", os.path.join(HERE, "setup.sh"), peers], check=True)
    mkl = None
    if a.mkl:
        mkl = subprocess.run(["bash", os.path.join(HERE, "setup.sh"), "--mkl",
                              os.path.join(a.build, "peers", "mkl")],
                             check=True, capture_output=True, text=True).stdout.strip()
    py = os.path.join(peers, "venv", "bin", "python")
    sflowc = os.path.join(a.build, "bin", "sflowc")
    threads = [int(t) for t in a.threads.split(",")]
    got = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in a.only or list(BENCHES):
            name, args, sf = BENCHES[key]
            exe = None
            if sf and os.path.exists(os.path.join(HERE, sf)) and os.access(sflowc, os.X_OK):
                exe = os.path.join(tmp, key)
                subprocess.run([sflowc, os.path.join(HERE, sf), "-o", exe], check=True)
            elif sf:
                print(f"INFO {name} sflow: not run ({'bench/nn/' + sf if not os.path.exists(os.path.join(HERE, sf)) else sflowc} missing)")
            for n in threads:
                env = dict(os.environ, OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
                got.update(run([py, os.path.join(HERE, "peer.py"), *args, "--threads", str(n)], env,
                               f"peer.py {' '.join(args)} --threads {n}", a.repeat))
                if exe:
                    got.update(run([exe, "--threads", str(n), "--bench_threads", str(n)], os.environ, f"{key}.sflow --threads {n}", a.repeat))
                if exe:  # the same program with f32 products on OpenBLAS (the default is sflow's GEMM)
                    got.update(run([exe, "--threads", str(n), "--bench_threads", str(n)],
                                   dict(os.environ, SFLOW_BLAS="openblas"),
                                   f"{key}.sflow --threads {n} (OpenBLAS)", a.repeat,
                                   side="sflow-oblas"))
                if exe and mkl:
                    got.update(run([exe, "--threads", str(n), "--bench_threads", str(n)],
                                   dict(os.environ, SFLOW_BLAS=mkl),
                                   f"{key}.sflow --threads {n} (MKL)", a.repeat, side="sflow-mkl"))
    load = open("/proc/loadavg").read().split()[:3]
    print(f"\nINFO load average {' '.join(load)} on {os.cpu_count()} CPUs at the end"
          + (f"; fastest of {a.repeat} runs each" if a.repeat > 1 else ""))
    print(f"{'benchmark':<30} {'thr':>3} {'side':>11} {'ms/step':>9} {'peak MB':>8} {'step MB':>8} {'speed':>6}")
    for (name, side, n), (ms, peak, base) in sorted(got.items()):
        ref = got.get((name, "torch", n))
        speed = f"{ref[0] / ms:.2f}x" if ref and side != "torch" else ""
        print(f"{name:<30} {n:>3} {side:>11} {ms:>9.2f} {peak:>8.1f} {peak - base:>8.1f} {speed:>6}")


if __name__ == "__main__":
    main()
