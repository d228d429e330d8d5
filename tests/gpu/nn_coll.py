#!/usr/bin/env python3
"""Group collectives over device tensors (docs/nn.md, "GPU", Collectives):
tests/gpu/coll/allreduce_grads.sflow, a @gpus(1) group of 2 doing
data-parallel SGD with allreduce_mean(grads(m)), run three times:

  cpu     SFLOW_NO_GPU=1: the host path (shared memory, host buckets);
  nccl    on the GPUs, NCCL: every bucket packed, reduced and unpacked on
          the device (the emulator's in-process NCCL with --emu);
  staged  on the GPUs with SFLOW_NCCL=off: device buckets staged through
          the host by the transport;
  shared  (--emu only) both members on one emulated device, NCCL named:
          the transport stages through the host (NCCL needs a GPU a member).

All with SFLOW_BUCKET_MB=0.0004 (100 floats), so the MLP's 195 params go in
two buckets (fc1.weight alone, over the cap; then the other three).
Checks: the replicas end bitwise equal in every run; nccl and staged print
the same as each other and the CPU's numbers within TOL (the measure of
nn_gpu.py); the --trace "collective" slices (transport calls) are the same
in every run and as counted below; the GPU runs read back only what the
program reads (d2h_syncs: 10 item() + 2 x 4 params' data() + 2 x 2 views'
data() = 22); and NCCL moved the buckets without the host: the staged run
copies each device bucket to the host once per member, 8040 bytes more
d2h_bytes than the nccl run (2 members x (4 steps x 195 + 195 broadcast +
15 + 15) floats x 4 bytes).

--emu LIB runs the GPU side under the host emulator (tests/gpu/emu) with two
emulated devices and LIB as the NCCL library: that is not a GPU run.
Without it the runs are on the machine's GPUs (exit 77, skipped, without
one); the d2h_bytes check needs two GPUs and NCCL and is left out with
fewer (nvidia-smi -L counts them).

Usage: nn_coll.py --sflowc PATH [--emu LIB]
"""
import argparse, collections, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_gpu import compare, stats_of  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "gpu", "coll", "allreduce_grads.sflow")
TOL = 1e-5
CALLS = {"allreduce_mean": 16, "broadcast": 6, "allreduce_sum": 2}  # both members
D2H_SYNCS = "22"
STAGED_BYTES = 8040


def run(exe, tmp, name, emu, gpu, nccl, devices="2"):
    env = dict(os.environ, SFLOW_GPU_STATS="1", SFLOW_BUCKET_MB="0.0004")
    env.setdefault("SFLOW_KERNEL_CACHE", os.path.join(tempfile.gettempdir(), "sflow-nn-coll-cache"))
    if emu:
        env.update(SFLOW_CUDA=emu, SFLOW_NVRTC=emu, SFLOW_CUBLAS=emu, SFLOW_EMU_DEVICES=devices)
    if not gpu:
        env["SFLOW_NO_GPU"] = "1"
    if nccl:
        env["SFLOW_NCCL"] = nccl
    trace = os.path.join(tmp, name + ".json")
    args = [exe, "--quiet", "--threads", "2", "--trace", trace] + (["--require-gpu"] if gpu else [])
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    calls = None
    if r.returncode == 0:
        ev = json.load(open(trace))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        calls = dict(collections.Counter(e["name"] for e in ev if e.get("cat") == "collective"))
    return r, calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu", help="the host emulator's library (also its NCCL)")
    a = ap.parse_args()
    emu = os.path.abspath(a.emu) if a.emu else None
    side = "emulator" if emu else "GPU"
    tmp = tempfile.mkdtemp(prefix="sflow-nn-coll-")
    exe = os.path.join(tmp, "allreduce_grads")
    r = subprocess.run([a.sflowc, PROG, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL: {PROG} does not compile\n{r.stderr}")
        return 1
    runs = {"cpu": run(exe, tmp, "cpu", None, False, None),
            "nccl": run(exe, tmp, "nccl", emu, True, emu),
            "staged": run(exe, tmp, "staged", emu, True, "off")}
    if emu:
        runs["shared"] = run(exe, tmp, "shared", emu, True, emu, devices="1")
    g = runs["nccl"][0]
    if not emu and g.returncode and (("no GPU" in g.stderr and "--require-gpu" in g.stderr) or
                                     "which needs NCCL" in g.stderr):
        print(f"nn_coll: SKIP: {g.stderr.strip()}")
        return 77
    bad = 0
    for name, (r, calls) in runs.items():
        stats = stats_of(r.stderr)
        print(f"{name:6}: exit {r.returncode}, transport calls {calls}, "
              f"d2h_syncs {stats.get('d2h_syncs')}, d2h_bytes {stats.get('d2h_bytes')}")
        if r.returncode:
            print(f"FAIL {name}: exit {r.returncode}\n{r.stderr}")
            bad += 1
            continue
        if "replicas equal true 195" not in r.stdout or "views equal true" not in r.stdout:
            print(f"FAIL {name}: the replicas differ\n{r.stdout}")
            bad += 1
        if calls != CALLS:
            print(f"FAIL {name}: transport calls {calls}, want {CALLS} (the CPU's buckets)")
            bad += 1
        if name != "cpu":
            why = compare(runs["cpu"][0].stdout, r.stdout, TOL)
            if why:
                print(f"FAIL {name} against the CPU: {why}")
                bad += 1
            if stats.get("d2h_syncs") != D2H_SYNCS:
                print(f"FAIL {name}: d2h_syncs {stats.get('d2h_syncs')}, want {D2H_SYNCS} "
                      "(a collective read a tensor back)")
                bad += 1
    gpus = 2
    if not emu:
        try:
            l = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
            gpus = l.stdout.count("GPU ")
        except OSError:
            gpus = 1
    if not bad:
        for name in runs:
            if name not in ("cpu", "nccl") and runs[name][0].stdout != runs["nccl"][0].stdout:
                print(f"FAIL: {name} and nccl give different answers")
                bad += 1
    if not bad and gpus < 2:
        print(f"nn_coll: {gpus} GPU: the NCCL run stages through the host too; d2h_bytes not checked")
    elif not bad:
        moved = (int(stats_of(runs["staged"][0].stderr)["d2h_bytes"]) -
                 int(stats_of(runs["nccl"][0].stderr)["d2h_bytes"]))
        print(f"staged - nccl d2h_bytes: {moved} (want {STAGED_BYTES}: NCCL kept the buckets "
              f"on the device, {side})")
        if moved != STAGED_BYTES:
            print("FAIL: the NCCL run did not keep every bucket on the device")
            bad += 1
        if "shared" in runs and (stats_of(runs["shared"][0].stderr)["d2h_bytes"] !=
                                 stats_of(runs["staged"][0].stderr)["d2h_bytes"]):
            print("FAIL: members sharing a device did not stage every bucket through the host")
            bad += 1
    print("nn_coll:", "FAIL" if bad else f"ok ({side})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
