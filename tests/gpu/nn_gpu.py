#!/usr/bin/env python3
"""std.nn on the GPU against the CPU: every program in tests/gpu/nn/ is
compiled once and run twice, with SFLOW_NO_GPU=1 and with --require-gpu
(on a real GPU, or under the host emulator of tests/gpu/emu when the
environment names it: SFLOW_CUDA, SFLOW_NVRTC, SFLOW_CUBLAS).  Their @gpus
actors' tensor ops run on the device in the second run.

The outputs must agree line by line: words exactly, numbers within the
program's `// tolerance: T` (default 1e-5) relative to the largest
magnitude on the line (max(1, max |x|)), the measure docs/nn.md's "GPU"
table states.  A `// gpu-stats: key=value ...` line checks the GPU run's
counters (SFLOW_GPU_STATS=1), e.g. d2h_syncs: the tensor reads back, which
in a training loop must be the item() calls the program makes and nothing
else.  Exits 77 (ctest: skipped) when there is no GPU and no emulator.

Usage: nn_gpu.py --sflowc PATH
"""
import argparse, glob, os, re, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM = re.compile(r"^[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|nan)$")


def run(exe, gpu):
    env = dict(os.environ, SFLOW_GPU_STATS="1")
    env.setdefault("SFLOW_KERNEL_CACHE", os.path.join(tempfile.gettempdir(), "sflow-nn-gpu-cache"))
    if not gpu:
        env["SFLOW_NO_GPU"] = "1"
    args = [exe, "--quiet"] + (["--require-gpu"] if gpu else [])
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)


def tokens(line):
    return line.replace("[", " ").replace("]", " ").replace(",", " ").replace("(", " ").replace(")", " ").split()


def compare(cpu, gpu, tol):
    """The first difference beyond tol, or None."""
    cl, gl = cpu.splitlines(), gpu.splitlines()
    if len(cl) != len(gl):
        return f"{len(cl)} lines on the CPU, {len(gl)} on the GPU"
    worst = 0.0
    for n, (c, g) in enumerate(zip(cl, gl), 1):
        ct, gt = tokens(c), tokens(g)
        if len(ct) != len(gt):
            return f"line {n}: {c!r} vs {g!r}"
        nums = [float(x) for x in ct if NUM.match(x)]
        scale = max([1.0] + [abs(x) for x in nums if x == x and abs(x) != float("inf")])
        for x, y in zip(ct, gt):
            if NUM.match(x) and NUM.match(y):
                a, b = float(x), float(y)
                if a != a or b != b or abs(a) == float("inf") or abs(b) == float("inf"):
                    if str(a) != str(b):
                        return f"line {n}: {x} vs {y}"
                    continue
                d = abs(a - b) / scale
                worst = max(worst, d)
                if d > tol:
                    return f"line {n}: {x} vs {y} (difference {d:.3g} of the line's scale, over {tol})"
            elif x != y:
                return f"line {n}: {c!r} vs {g!r}"
    print(f"     largest difference {worst:.3g} of a line's scale (tolerance {tol})")
    return None


def stats_of(err):
    for l in err.splitlines():
        if l.startswith("sflow-gpu-stats:"):
            return dict(kv.split("=") for kv in l.split()[1:])
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    args = ap.parse_args()
    progs = sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "nn", "*.sflow")))
    tmp = tempfile.mkdtemp(prefix="sflow-nn-gpu-")
    emulated = bool(os.environ.get("SFLOW_CUDA"))
    failed = 0
    for src in progs:
        name = os.path.relpath(src, ROOT)
        text = open(src).read()
        exe = os.path.join(tmp, os.path.basename(src)[:-6])
        r = subprocess.run([args.sflowc, src, "-o", exe], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {name}: does not compile\n{r.stderr}")
            failed += 1
            continue
        g = run(exe, True)
        if "no GPU" in g.stderr and "--require-gpu" in g.stderr:
            print(f"nn_gpu: SKIP: {g.stderr.strip()}")
            return 77
        c = run(exe, False)
        m = re.search(r"//\s*tolerance:\s*(\S+)", text)
        tol = float(m.group(1)) if m else 1e-5
        why = None
        if c.returncode or g.returncode:
            why = f"exit {c.returncode} on the CPU, {g.returncode} on the GPU\n{c.stderr}{g.stderr}"
        else:
            why = compare(c.stdout, g.stdout, tol)
        stats = stats_of(g.stderr)
        want = re.search(r"//\s*gpu-stats:\s*(.*)", text)
        if not why and want:
            for kv in want.group(1).split():
                k, v = kv.split("=")
                if stats.get(k) != v:
                    why = f"{k}: want {v}, got {stats.get(k)}"
        print(f"{'ok  ' if not why else 'FAIL'} {name} ({'emulator' if emulated else 'GPU'}: "
              f"{stats.get('gpu_launches')} launches, {stats.get('gpu_matmuls')} products, "
              f"{stats.get('d2h_syncs')} reads back, {stats.get('cpu_matmuls')} CPU products)")
        if why:
            print(f"     {why}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
