#!/usr/bin/env python3
"""std.train's reduce_scatter_tensors and all_gather_tensors over device
tensors: tests/gpu/coll/shard_tensors.sflow, a @gpus(1) group of 2, run

  cpu     SFLOW_NO_GPU=1: shared memory's reduce_scatter and all_gather;
  nccl    on the GPUs: device buckets, NCCL's allreduce kept in shards and
          one ncclBroadcast per shard (the emulator's NCCL with --emu);
  staged  on the GPUs with SFLOW_NCCL=off: device buckets staged through
          the host transport's reduce_scatter and all_gather.

Each must print that every member's shard equals the allreduce_sum's and
the gather the whole sum, bitwise.  --emu LIB runs the GPU side under the
host emulator (two emulated devices, LIB as NCCL): not a GPU run; without
it, on the machine's GPUs (exit 77 without one).

Usage: shard_coll.py --sflowc PATH [--emu LIB]
"""
import argparse, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "gpu", "coll", "shard_tensors.sflow")
WANT = "shards true gathers true"


def run(exe, emu, gpu, nccl):
    env = dict(os.environ, SFLOW_BUCKET_MB="0.00004")  # 10 floats: several buckets
    env.setdefault("SFLOW_KERNEL_CACHE", os.path.join(tempfile.gettempdir(), "sflow-shard-coll-cache"))
    if emu:
        env.update(SFLOW_CUDA=emu, SFLOW_NVRTC=emu, SFLOW_CUBLAS=emu, SFLOW_EMU_DEVICES="2")
    if not gpu:
        env["SFLOW_NO_GPU"] = "1"
    if nccl:
        env["SFLOW_NCCL"] = nccl
    args = [exe, "--quiet", "--threads", "2", "--cap", "10"] + (["--require-gpu"] if gpu else [])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu")
    a = ap.parse_args()
    emu = os.path.abspath(a.emu) if a.emu else None
    tmp = tempfile.mkdtemp(prefix="sflow-shard-coll-")
    exe = os.path.join(tmp, "shard_tensors")
    r = subprocess.run([a.sflowc, PROG, "-o", exe], capture_output=True, text=True)
    if r.returncode:
        print(f"FAIL: {PROG} does not compile\n{r.stderr}")
        return 1
    runs = {"cpu": run(exe, None, False, None), "nccl": run(exe, emu, True, emu),
            "staged": run(exe, emu, True, "off")}
    g = runs["nccl"]
    if not emu and g.returncode and (("no GPU" in g.stderr and "--require-gpu" in g.stderr) or
                                     "which needs NCCL" in g.stderr):
        print(f"shard_coll: SKIP: {g.stderr.strip()}")
        return 77
    bad = 0
    for name, r in runs.items():
        got = r.stdout.strip()
        print(f"{name:6}: exit {r.returncode}, {got}")
        if r.returncode or got != WANT:
            print(f"FAIL {name}: want {WANT!r}\n{r.stderr}")
            bad += 1
    print("shard_coll:", "FAIL" if bad else "ok (%s)" % ("emulator" if emu else "GPU"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
