#!/usr/bin/env python3
"""examples/digits_gpu.sflow on the GPU against the CPU: both runs train the
same MLP on the same batches (--verbose prints each epoch's mean loss and
time, then the test accuracy and the mean ms per epoch after the first);
the GPU run's losses must equal the CPU run's within --loss-tol (relative)
and its count of right test images within --right-tol, and it must read
the device back once per epoch and once for the evaluation (SFLOW_GPU_STATS
d2h_syncs = epochs + 1: a training step makes no host round trip).  With
--expect SRC the CPU run with the default flags must print exactly SRC's
`// expect:` lines, and bad --epochs, --batch and --lr must each be an error
naming the flag.  Prints one TABLE row (bench/gpu/run.sh's format).

The "GPU" side is whatever the environment gives the program: a GPU, or
the host emulator when SFLOW_CUDA/SFLOW_NVRTC/SFLOW_CUBLAS name it (ctest's
gpu_emu/digits; its rows say "emulator", never "GPU").  Exits 77 when the
GPU side has no GPU.

Usage: digits.py (--exe EXE | --sflowc SFLOWC --src SRC) --csv CSV
                 [--epochs N] [--loss-tol T] [--right-tol K] [--expect SRC]
"""
import argparse, os, re, subprocess, sys, tempfile


def run(cmd, env):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def parse(out):
    losses = [float(m.group(1)) for m in re.finditer(r"^epoch \d+ loss (\S+) ms", out, re.M)]
    acc = re.search(r"^test accuracy (\S+) right (\d+)", out, re.M)
    ms = re.search(r"^ms per epoch (\S+)", out, re.M)
    return losses, (float(acc.group(1)), int(acc.group(2))) if acc else None, \
        float(ms.group(1)) if ms else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe")
    ap.add_argument("--sflowc")
    ap.add_argument("--src")
    ap.add_argument("--csv", required=True)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--loss-tol", type=float, default=1e-4)
    ap.add_argument("--right-tol", type=int, default=0)
    ap.add_argument("--expect")
    args = ap.parse_args()
    exe = args.exe
    if not exe:
        exe = os.path.join(tempfile.mkdtemp(prefix="sflow-digits-"), "digits_gpu")
        r = subprocess.run([args.sflowc, "-O2", args.src, "-o", exe], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL: {args.src} does not compile\n{r.stderr}")
            return 1
    emu = bool(os.environ.get("SFLOW_CUDA"))
    side = "emulator" if emu else "GPU"
    flags = ["--path", args.csv, "--epochs", str(args.epochs), "--verbose"]
    cpu_env = dict(os.environ, SFLOW_NO_GPU="1")
    gpu_env = dict(os.environ, SFLOW_GPU_STATS="1")
    gpu_env.pop("SFLOW_NO_GPU", None)
    label = f"examples/digits on the {side}: accuracy, ms per epoch vs CPU"
    g = run([exe, "--require-gpu"] + flags, gpu_env)
    if g.returncode and "no GPU" in g.stderr and "--require-gpu" in g.stderr:
        reason = next((l for l in g.stderr.splitlines() if "no GPU" in l), "no GPU")
        print(f"TABLE|{label}|not run: {reason}|-|-")
        return 77
    c = run([exe, "--quiet"] + flags, cpu_env)
    ok, why = True, []
    if g.returncode or c.returncode:
        ok = False
        why.append(f"rc {side} {g.returncode}, CPU {c.returncode}")
    gl, ga, gms = parse(g.stdout)
    cl, ca, cms = parse(c.stdout)
    if len(gl) != args.epochs or len(cl) != args.epochs or not ga or not ca:
        ok = False
        why.append("missing epoch or accuracy lines")
    worst = max([abs(a - b) / max(abs(b), 1e-12) for a, b in zip(gl, cl)], default=0.0)
    if worst > args.loss_tol:
        ok = False
        why.append(f"losses differ by {worst:.2e} relative (tolerance {args.loss_tol:g})")
    if ga and ca and abs(ga[1] - ca[1]) > args.right_tol:
        ok = False
        why.append(f"{ga[1]} right on the {side}, {ca[1]} on the CPU")
    stats = {}
    for l in g.stderr.splitlines():
        if l.startswith("sflow-gpu-stats:"):
            stats = dict(kv.split("=", 1) for kv in l.split()[1:] if "=" in kv)
    syncs = stats.get("d2h_syncs")
    if syncs != str(args.epochs + 1):
        ok = False
        why.append(f"d2h_syncs {syncs}, want {args.epochs + 1} (one item() per epoch, one argmax)")
    if int(stats.get("gpu_launches", "0") or 0) == 0:
        ok = False
        why.append("no kernel launched on the GPU side")
    if args.expect:
        want = [m.group(1) for m in (re.search(r"//\s*expect:\s?(.*)$", l)
                                     for l in open(args.expect).read().splitlines()) if m]
        d = run([exe, "--quiet", "--path", args.csv], cpu_env)
        if d.returncode or d.stdout.splitlines() != want:
            ok = False
            why.append("the CPU run's output is not the expected:\n" + d.stdout + d.stderr)
        # Bad flags: a message naming the flag and a non-zero exit, before any data is read.
        for flags, name in (["--epochs", "0"], "--epochs"), (["--batch", "-2"], "--batch"), \
                           (["--lr", "0"], "--lr"):
            d = run([exe, "--quiet", "--path", args.csv] + flags, cpu_env)
            if d.returncode == 0 or name not in d.stderr:
                ok = False
                why.append(f"{' '.join(flags)}: want an error naming {name}, got rc "
                           f"{d.returncode}:\n{d.stderr}")
    fig = (f"acc {ga[0]:.4f}, {gms} ms/epoch, losses within {worst:.1e}" if ga else "FAIL")
    peer = f"CPU: acc {ca[0]:.4f}, {cms} ms/epoch" if ca else "CPU: FAIL"
    print(f"TABLE|{label}|{fig if ok else 'FAIL: ' + fig}|{peer}|"
          f"same accuracy (+-{args.right_tol}), losses {args.loss_tol:g}, {args.epochs + 1} reads")
    if not ok:
        print("\n".join(why))
        print(f"--- {side} run\n{g.stdout}{g.stderr[-3000:]}\n--- CPU run\n{c.stdout}{c.stderr[-3000:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
