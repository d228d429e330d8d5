#!/usr/bin/env python3
"""Device operations per training step under the host emulator
(tests/gpu/emu's SFLOW_EMU_COUNT: kernel launches, cuBLAS calls, copies and
memsets, each counted at its API call), against PyTorch's count of the same
step (tests/gpu/torch_opcounts.json, made by bench/gpu/torch_opcount.py):

 - bench/gpu/nn_bench.sflow --what mlp: the MLP step (forward, backward,
   SGD with momentum, the loss's item());
 - --what encoder: the encoder layer's forward and backward, at batch 2
   and 3 (batch 1 has no padded sequence): the count must not depend on
   the batch (attention's B·H head products are one call each), so it is
   the count at nn_bench's batch 32.

A step's count is the difference between a run of 2 steps and a run of 1
(the setup's uploads and compiles cancel).  Each must be at most 1.5 x
PyTorch's (issue 28).  Prints each figure and the per-name breakdown.

Usage: opcount.py --sflowc PATH [--counts tests/gpu/torch_opcounts.json]
(under the emulator's variables: SFLOW_CUDA, SFLOW_NVRTC, SFLOW_CUBLAS)
"""
import argparse, atexit, json, os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 1.5


def counts(exe, args):
    env = dict(os.environ, SFLOW_EMU_COUNT="names")
    p = subprocess.run([exe, "--require-gpu"] + args, capture_output=True, text=True, env=env,
                       timeout=600)
    if p.returncode != 0:
        sys.exit(f"opcount: {' '.join(args)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    lines = [l for l in p.stderr.splitlines() if l.startswith("sflow-emu-count: ")]
    if not lines or "ops=" not in lines[0]:
        sys.exit(f"opcount: no sflow-emu-count line (is this the emulator?):\n{p.stderr[-2000:]}")
    total = {k: int(v) for k, v in re.findall(r"(\w+)=([0-9]+)", lines[0])}
    names = {}
    for l in lines[1:]:
        name, n = l[len("sflow-emu-count: "):].rsplit(" ", 1)
        names[name] = int(n)
    return total, names


def per_step(exe, args):
    t1, n1 = counts(exe, args + ["--steps", "1", "--warmup", "0"])
    t2, n2 = counts(exe, args + ["--steps", "2", "--warmup", "0"])
    step = {k: t2[k] - t1.get(k, 0) for k in t2}
    names = {k: n2[k] - n1.get(k, 0) for k in n2 if n2[k] - n1.get(k, 0)}
    return step, names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--counts", default=os.path.join(ROOT, "tests/gpu/torch_opcounts.json"))
    a = ap.parse_args()
    ref = json.load(open(a.counts))
    tmp = tempfile.mkdtemp(prefix="sflow-opcount-")
    atexit.register(shutil.rmtree, tmp, True)
    exe = os.path.join(tmp, "nn_bench")
    subprocess.run([a.sflowc, "-O2", os.path.join(ROOT, "bench/gpu/nn_bench.sflow"), "-o", exe],
                   check=True)
    fails = []

    def want(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            fails.append(what)

    runs = {"mlp": per_step(exe, ["--what", "mlp"]),
            "encoder": per_step(exe, ["--what", "encoder", "--batch", "2"])}
    enc3, _ = per_step(exe, ["--what", "encoder", "--batch", "3"])
    want(enc3["ops"] == runs["encoder"][0]["ops"],
         f"encoder: ops per step the same at batch 2 and 3 ({runs['encoder'][0]['ops']}, "
         f"{enc3['ops']}), so batch 32's is {runs['encoder'][0]['ops']}")
    for what, (step, names) in runs.items():
        torch = ref[what]["ops"]
        ratio = step["ops"] / torch
        print(f"{what}: sflow {step['ops']} ops per step (launches {step['launches']}, "
              f"cuBLAS {step['blas']}, copies {step['copies']}, memsets {step['sets']}); "
              f"PyTorch {torch} ({ref['method']}); ratio {ratio:.2f}")
        for name, n in sorted(names.items(), key=lambda kv: -kv[1]):
            print(f"       {n:4d}  {name}")
        want(ratio <= LIMIT, f"{what}: {step['ops']} <= {LIMIT} x PyTorch's {torch}")
        want(step["launches"] > 0 and step["blas"] > 0,
             f"{what}: the step ran on the (emulated) device")
    if fails:
        sys.exit(f"opcount: {len(fails)} failed")


if __name__ == "__main__":
    main()
