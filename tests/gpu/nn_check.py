#!/usr/bin/env python3
"""Tests of bench/gpu/nn_check.sflow, the std.nn op checker of
bench/gpu/run.sh (docs/performance.md, "GPU"), at a small size (--n 8).

    nn_check.py --sflowc SFLOWC --mode compare
        SFLOW_NO_GPU=1, so both sides run on the CPU: every row must be ok
        (the two sides computed the same bits), and the comparison must
        catch a difference: --perturb moves one op's device value by 3 of
        its class's tolerances (the row must read "rel 3.0e-06" for an
        elementwise op, and FAIL), an index by 1, or makes it NaN, or fails
        one op's device call (its row fails with the message, the others
        run), and the program fails.
    nn_check.py --sflowc SFLOWC --mode emulator
        under the host emulator (tests/gpu/emu; the ctest sets SFLOW_CUDA,
        SFLOW_NVRTC and SFLOW_CUBLAS): the actor's side must have launched
        kernels (SFLOW_GPU_STATS's gpu_launches > 0), every row must be ok
        and say "emulator", never "GPU"; nn_check_autocast too when it
        builds (it needs nn.autocast), and nn_check again with each
        block's threads run in reverse order (SFLOW_EMU_ORDER=reverse: an
        order-dependent kernel differs); nn_bench.sflow's MLP step (one,
        which must read back once: its item()) and `@` at n 64, each
        printing its RESULT line with kernels launched and an allocator
        peak in SFLOW_GPU_STATS; then bench/gpu/nn.sh (run.sh's std.nn
        part) at rehearsal sizes, its rows checked.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "gpu")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def build(sflowc, name, out):
    exe = os.path.join(out, name)
    p = subprocess.run([sflowc, "-O2", os.path.join(BENCH, name + ".sflow"), "-o", exe],
                       capture_output=True, text=True)
    return (exe, "") if p.returncode == 0 else (None, p.stderr)


def run(exe, args, env_extra):
    env = dict(os.environ, **env_extra)
    return subprocess.run([exe, "--n", "8"] + args, capture_output=True, text=True, env=env, timeout=900)


def rows(stdout):
    """{op: (figure, goal)} of the TABLE rows."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("TABLE|nn "):
            _, check_, figure, _, goal = line.split("|")
            out[check_] = (figure, goal)
    return out


def compare(sflowc, tmp):
    exe, err = build(sflowc, "nn_check", tmp)
    if exe is None:
        check(False, f"nn_check.sflow compiles: {err}")
        return
    cpu = {"SFLOW_NO_GPU": "1"}
    p = run(exe, [], cpu)
    r = rows(p.stdout)
    check(p.returncode == 0, f"CPU against CPU: exit 0 (got {p.returncode}) {p.stderr[-300:]}")
    n_ops = len(r)
    check(n_ops >= 50, f"one row per op: {n_ops} rows")
    check(all(g.endswith(": ok") and f == "abs 0, rel 0" for f, g in r.values()),
          "every row: abs 0, rel 0, ok (the same code on the same CPU)")
    check(f"NNCHECK rows {len(r)} failed 0" in p.stdout, "the summary line counts them")
    for op, figure, goal in (("relu", "abs 5.6e-06, rel 3.0e-06", "rel <= 1.0e-06: FAIL"),
                             ("matmul 2-D", None, "rel <= 1.0e-04: FAIL"),
                             ("softmax axis -1", None, "rel <= 1.0e-05: FAIL"),
                             ("argmax", "abs 1.0e+00,", "exact: FAIL")):
        p = run(exe, ["--perturb", op], cpu)
        r = rows(p.stdout)
        bad = [k for k, (f, g) in r.items() if g.endswith("FAIL")]
        check(p.returncode != 0 and len(bad) == 1 and bad[0].startswith("nn " + op),
              f"--perturb {op}: exactly its row fails, and the program ({p.returncode}): {bad}")
        mine = r.get(bad[0]) if bad else None
        check(mine is not None and mine[1] == goal and (figure is None or mine[0].startswith(figure))
              and ("rel 3.0e" in mine[0] or goal == "exact: FAIL"), f"--perturb {op}: 3 tolerances off reads as such: {mine}")
    p = run(exe, ["--perturb", "nan"], cpu)
    bad = [f for f, g in rows(p.stdout).values() if g.endswith("FAIL")]
    check(p.returncode != 0 and len(bad) == 1 and re.match(r"tensor 0 value 0: nan, CPU -?[0-9]", bad[0]),
          f"a NaN where the CPU has a number fails, named: {bad}")
    p = run(exe, ["--perturb", "error"], cpu)
    r = rows(p.stdout)
    bad = [(k, f) for k, (f, g) in r.items() if g.endswith("FAIL")]
    check(p.returncode != 0 and len(r) == n_ops and len(bad) == 1 and bad[0][0].startswith("nn sub ")
          and "error: " in bad[0][1] and "injected by --perturb error" in bad[0][1],
          f"an op whose device side fails fails its own row, with the message, and the "
          f"others still run: {len(r)} rows, failing {bad}")
    p = run(exe, ["--perturb", "nothing such"], cpu)
    check(p.returncode != 0 and "--perturb nothing such names no op" in p.stderr,
          f"a --perturb that names no op is an error: {p.stderr.strip()[-200:]}")
    p = run(exe, ["--n", "2"], cpu)
    check(p.returncode != 0 and "--n must be at least 4 (got 2)" in p.stderr, "--n below 4 is an error")


def emulator(sflowc, tmp):
    for name in ("nn_check", "nn_check_autocast"):
        exe, err = build(sflowc, name, tmp)
        if exe is None:
            if name == "nn_check_autocast" and "has no 'autocast'" in err:
                print(f"note: {name} not built: std.nn has no autocast yet")
                continue
            check(False, f"{name}.sflow compiles: {err}")
            continue
        p = run(exe, ["--require-gpu", "--device", "emulator"], {"SFLOW_GPU_STATS": "1"})
        r = rows(p.stdout)
        sys.stdout.write(p.stdout)
        m = re.search(r"gpu_launches=(\d+)", p.stderr)
        check(m is not None and int(m.group(1)) > 0,
              f"{name}: kernels ran on the emulated device (gpu_launches={m and m.group(1)})")
        check(p.returncode == 0, f"{name}: every op within its tolerance (exit {p.returncode}) "
              f"{p.stderr[-600:] if p.returncode else ''}")
        check(len(r) > 0 and all("(emulator vs CPU)" in k for k in r) and
              not any("GPU" in k for k in r), f"{name}: {len(r)} rows, each says emulator, none GPU")


def reverse(sflowc, tmp):
    """nn_check again with each block's threads run last to first
    (SFLOW_EMU_ORDER=reverse): a kernel whose result depends on the order
    its threads run in (a missing barrier) differs from the CPU."""
    exe, err = build(sflowc, "nn_check", tmp)
    if exe is None:
        check(False, f"nn_check.sflow compiles: {err}")
        return
    p = run(exe, ["--require-gpu", "--device", "emulator"], {"SFLOW_EMU_ORDER": "reverse"})
    bad = [k for k, (f, g) in rows(p.stdout).items() if not g.endswith(": ok")]
    check(p.returncode == 0 and not bad, f"nn_check, threads in reverse order: every op ok "
          f"(exit {p.returncode}) {bad}")


def bench_smoke(sflowc, tmp):
    """nn_bench.sflow's GPU path once, small: the MLP step (one step, so
    the reads are its item() alone) and `@` at n 64."""
    exe, err = build(sflowc, "nn_bench", tmp)
    if exe is None:
        check(False, f"nn_bench.sflow compiles: {err}")
        return
    env = dict(os.environ, SFLOW_GPU_STATS="1")
    for what, args in (("mlp", ["--steps", "1", "--warmup", "0"]),
                       ("matmul", ["--n", "64", "--steps", "2", "--warmup", "1"])):
        p = subprocess.run([exe, "--require-gpu", "--what", what] + args, capture_output=True,
                           text=True, env=env, timeout=900)
        stats = dict(re.findall(r"(\w+)=([0-9.]+)", p.stderr))
        check(p.returncode == 0 and re.search(rf"^RESULT gpu_{what} sflow [0-9.]+ [0-9]+$", p.stdout, re.M),
              f"nn_bench --what {what}: a RESULT line (exit {p.returncode}) {p.stdout.strip()} "
              f"{p.stderr[-400:] if p.returncode else ''}")
        check(int(stats.get("gpu_launches", 0)) > 0 and "dev_peak" in stats,
              f"nn_bench --what {what}: kernels on the device, an allocator peak: "
              f"gpu_launches={stats.get('gpu_launches')} dev_peak={stats.get('dev_peak')}")
        if what == "mlp":
            check(stats.get("d2h_syncs") == "1",
                  f"nn_bench --what mlp: one step reads back once, its item() (d2h_syncs={stats.get('d2h_syncs')})")


def section(sflowc, tmp):
    """bench/gpu/nn.sh, run.sh's std.nn part, end to end at rehearsal sizes:
    the rows it makes from the programs' output (the part of the GPU run
    that otherwise first runs on the GPU machine)."""
    out = os.path.join(tmp, "out")
    os.makedirs(os.path.join(out, "nn"))
    for name in ("nn_check", "nn_check_autocast", "nn_bench"):
        p = subprocess.run([sflowc, "-O2", os.path.join(BENCH, name + ".sflow"), "-o",
                            os.path.join(out, "nn", name)], capture_output=True, text=True)
        if p.returncode != 0:
            with open(os.path.join(out, "nn", name + ".missing"), "w") as f:
                f.write(p.stderr)
    subprocess.run(["cp", os.path.join(BENCH, "torch_peer.py"), os.path.join(out, "nn")], check=True)
    table = os.path.join(tmp, "table")
    open(table, "w").close()
    env = dict(os.environ, NN_DEVICE="emulator", NN_CHECK_N="8", NN_STEPS="1", NN_WARMUP="0",
               NN_BATCH="1", NN_MATMUL_N="64")
    p = subprocess.run([os.path.join(BENCH, "nn.sh"), out, table], capture_output=True, text=True,
                       env=env, timeout=900)
    rows = [line.rstrip("\n").split("|")[1:] for line in open(table) if line.startswith("TABLE|")]
    by = {r[0]: r for r in rows}
    check(p.returncode == 0, f"nn.sh: exit 0 (got {p.returncode}) {p.stdout[-500:]}")
    checks = [r for r in rows if "(emulator vs CPU)" in r[0]]
    check(len(checks) >= 51 and all(r[3].endswith(": ok") for r in checks),
          f"nn.sh: the checkers' {len(checks)} rows, all ok")
    def fig(key, pattern):
        r = by.get(key)
        check(r is not None and re.match(pattern, r[1]) is not None, f"nn.sh: {key}: {r}")
    fig("nn MLP train step (784-1024-1024-10, b256)", r"[0-9.]+ ms$")
    fig("nn MLP step: peak device memory", r"[0-9.]+ MB$")
    fig("nn MLP step: device-to-host reads per step", r"1\.00 \(1 in 1 steps\): ok$")
    fig("nn encoder layer fwd+bwd (B1 T128 C384 H12)", r"[0-9.]+ ms$")
    fig("nn encoder layer: peak device memory", r"[0-9.]+ MB$")
    fig("nn @ f32 64^3 (@gpus(1) actor)", r"[0-9]+ GFLOP/s$")
    fig("nn @ TF32 64^3 (@gpus(1) actor)", r"[0-9]+ GFLOP/s$")
    check(not any("GPU vs CPU" in r[0] for r in rows), "nn.sh: no row says GPU")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--mode", choices=("compare", "emulator"), required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.mode == "compare":
            compare(a.sflowc, tmp)
        else:
            emulator(a.sflowc, tmp)
            reverse(a.sflowc, tmp)
            bench_smoke(a.sflowc, tmp)
            section(a.sflowc, tmp)
    if failures:
        print(f"nn_check.py: {len(failures)} failed")
        return 1
    print("nn_check.py: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
