#!/usr/bin/env python3
"""std.llm's decoder on the GPU (runtime/nn/gpu_llama.c) against the CPU
decoder: tests/gpu/llm/decoder.sflow on SmolLM2-135M-Instruct (Q4_1 and
Q8_0 weights), under --require-gpu so that its @gpus(1) actor's forward
calls run on a device: a real GPU, or the host emulator of tests/gpu/emu
when the environment names it (SFLOW_CUDA, SFLOW_NVRTC, SFLOW_CUBLAS).

Checks, printing the measured figures:
- the prompt's logits at every position (prefill: the tiled product),
  the forward_batch steps of 2 and 5 sequences of different lengths (the
  GEMV and the tiled product): the largest difference within 1e-4 of each
  row's largest logit (docs/llm.md, "On a GPU", says why 1e-4);
- greedy tokens identical (decode: the GEMV, one row);
- the weights uploaded once in the process (h2d_bytes below the file's
  size, though 11 forward calls ran) and nothing read back but the
  logits the program reads (d2h_bytes: 21 rows of the vocabulary);
- a cache whose tokens are on the GPU used by a CPU call: a runtime error
  naming both places, exit 70.
Exits 77 (ctest: not run) with neither a GPU nor the emulator.

Usage: llm_gpu.py --sflowc PATH [--models DIR]
"""
import argparse, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOUND = 1e-4


def fail(msg, detail=""):
    print("llm_gpu: FAIL:", msg)
    if detail:
        print(detail[-3000:])
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--models", default=None)
    a = ap.parse_args()
    models = a.models or os.environ.get("SFLOW_MODELS") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(a.sflowc))), "models")
    gguf = os.path.join(models, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(gguf):
        fail(f"no model at {gguf} (scripts/install-models.sh installs it)")
    tmp = tempfile.mkdtemp(prefix="sflow-llm-gpu-")
    exe = os.path.join(tmp, "decoder")
    c = subprocess.run([a.sflowc, os.path.join(ROOT, "tests", "gpu", "llm", "decoder.sflow"), "-o", exe],
                       capture_output=True, text=True, timeout=300)
    if c.returncode:
        fail("decoder.sflow compiles", c.stderr)
    env = dict(os.environ, SFLOW_GPU_STATS="1")
    env.setdefault("SFLOW_KERNEL_CACHE", os.path.join(tempfile.gettempdir(), "sflow-llm-gpu-cache"))
    p = subprocess.run([exe, "--require-gpu", "--path", gguf, "--tokens", "2"], capture_output=True,
                       text=True, env=env, timeout=600)
    if p.returncode and ("no GPU" in p.stderr or "GPU is required" in p.stderr) and "SFLOW_CUDA" not in os.environ:
        print("llm_gpu: SKIP: no GPU and no emulator:", p.stderr.strip()[-300:])
        sys.exit(77)
    if p.returncode:
        fail("decoder.sflow runs", p.stdout + p.stderr)
    print(p.stdout.strip())
    out = p.stdout
    diffs = re.findall(r"^(prefill|batch \d+) rows (\d+) rel_diff ([0-9.e+-]+)$", out, re.M)
    if len(diffs) != 3:
        fail("three comparisons printed", out)
    for what, rows, d in diffs:
        if not float(d) < BOUND:
            fail(f"{what}: logits within {BOUND} of the CPU's (got {d})", out)
    print(f"ok: prefill and batch logits within {BOUND} of the CPU's (worst "
          f"{max(float(d) for _, _, d in diffs):.2e})")
    cpu = re.search(r"^greedy cpu (.*)$", out, re.M)
    gpu = re.search(r"^greedy gpu (.*)$", out, re.M)
    if not cpu or not gpu or cpu.group(1) != gpu.group(1):
        fail("greedy tokens identical", out)
    print("ok: greedy tokens identical:", gpu.group(1))
    stats = dict(kv.split("=", 1) for l in p.stderr.splitlines() if l.startswith("sflow-gpu-stats:")
                 for kv in l.split()[1:])
    h2d, d2h = int(stats.get("h2d_bytes", "-1")), int(stats.get("d2h_bytes", "-1"))
    if not 0 < h2d < os.path.getsize(gguf):
        fail(f"weights uploaded once (h2d_bytes {h2d}, the file {os.path.getsize(gguf)})", p.stderr)
    if d2h != 21 * 49152 * 4:
        fail(f"only the 21 logit rows read back (d2h_bytes {d2h}, want {21 * 49152 * 4})", p.stderr)
    print(f"ok: h2d_bytes {h2d} (weights once), d2h_bytes {d2h} (the logits read)")
    q = subprocess.run([exe, "--require-gpu", "--path", gguf, "--what", "placed"], capture_output=True,
                       text=True, env=env, timeout=600)
    want = "tokens are in GPU 0's memory, but this call runs on the CPU"
    if q.returncode != 70 or want not in q.stderr or "no error" in q.stdout:
        fail(f"a GPU cache used on the CPU: exit 70 naming it (got {q.returncode})", q.stderr)
    print("ok: a GPU cache used on the CPU named:", [l for l in q.stderr.splitlines() if want in l][0].strip())


if __name__ == "__main__":
    main()
