#!/usr/bin/env python3
"""A rehearsal of bench/gpu/run.sh, the bounded device run, under the host
emulator (tests/gpu/emu; the ctest's environment names it), at tiny sizes,
so that on a lent GPU only the hardware can surprise it:

 - prepare: stripped (no .debug_info in any executable), under 48 MiB with
   the tracked tree;
 - the whole run in its budget: exit 0, every program identical on both
   sides (both runs --quiet), the environment rows naming the libraries
   loaded, table.txt and table.md under RUN_LOGS;
 - a budget too small for the steps: each skipped step's row says so, and
   the run ends inside it;
 - no CPU BLAS: the environment row and the digits row's CPU peer say so;
 - SIGTERM while gpu_check runs: exit 124 at once, the rows gpu_check had
   printed so far (its stdout is line-buffered) kept in the table, a row
   naming the step it stopped in.

Usage: run_rehearsal.py --build BUILD
"""
import argparse, atexit, os, shutil, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "bench", "gpu", "run.sh")
TINY = {"RUN_CHECK_ARGS": "", "RUN_MLP_ARGS": "--batch 8 --dim 8 --hidden 16 --classes 4 --reps 2",
        "RUN_DIGITS_EPOCHS": "1", "RUN_GROUP_ARGS": "--sizes 2", "RUN_SANITIZER": "none",
        "NN_DEVICE": "emulator", "NN_CHECK_N": "8", "NN_STEPS": "1", "NN_WARMUP": "0",
        "NN_BATCH": "1", "NN_MATMUL_N": "64", "RUN_LLM_GGUF_ARGS": "--layers 1 --vocab 8192", "RUN_LLM_TOKENS": "2",
        "RUN_LLM_ARGS": "--prompt 4 --decode 2 --clients 2 --steps 1"}
fails = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        fails.append(what)


def rows(logs):
    path = os.path.join(logs, "table.txt")
    if not os.path.exists(path):
        return []
    return [l[len("TABLE|"):].split("|") for l in open(path).read().splitlines() if l.startswith("TABLE|")]


def find(rs, prefix):
    return [r for r in rs if r[0].startswith(prefix)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-rehearsal-")
    atexit.register(shutil.rmtree, tmp, True)
    prep = os.path.join(tmp, "out")

    p = subprocess.run([RUN, "prepare", a.build, prep], capture_output=True, text=True, timeout=600)
    print(p.stdout.strip())
    check(p.returncode == 0, f"prepare: exit 0 (got {p.returncode}) {p.stderr[-300:]}")
    if p.returncode != 0:
        sys.exit("run_rehearsal: prepare failed")
    unstripped = []
    for d, _, files in os.walk(prep):
        for f in files:
            path = os.path.join(d, f)
            with open(path, "rb") as fh:
                data = fh.read()
            if data[:4] == b"\x7fELF" and b".debug_info" in data:
                unstripped.append(f)
    check(not unstripped, f"prepare: every executable stripped ({unstripped[:3]})")
    check("MiB with the tracked tree" in p.stdout, "prepare: says its size with the tree")

    def run(env_extra, logs, **kw):
        env = dict(os.environ, RUN_LOGS=logs, **TINY)
        env.update(env_extra)
        env.pop("OUT", None)
        return subprocess.Popen([RUN, prep], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, start_new_session=True, **kw)

    # The whole run.
    logs = os.path.join(tmp, "full")
    t0 = time.time()
    pr = run({"RUN_BUDGET_S": "240"}, logs)
    out, _ = pr.communicate(timeout=600)
    rs = rows(logs)
    print(f"full run: {time.time() - t0:.0f} s, {len(rs)} rows, exit {pr.returncode}")
    check(pr.returncode == 0, f"full run: exit 0 (got {pr.returncode}) {out[-1500:] if pr.returncode else ''}")
    progs = [r for r in rs if r[0].endswith(": GPU vs CPU")]
    check(len(progs) >= 15 and all(r[1].startswith("identical") for r in progs),
          f"full run: {len(progs)} programs, all identical: {[r[:2] for r in progs if not r[1].startswith('identical')]}")
    nvrtc = find(rs, "environment: NVRTC")
    check(nvrtc and "NVRTC 99.0 from " in nvrtc[0][1] and "libsflow_emu" in nvrtc[0][1],
          f"full run: the NVRTC row names the file loaded: {nvrtc}")
    check(bool(find(rs, "sum_f32 vs CPU")), "full run: gpu_check's rows")
    check(bool(find(rs, "nn relu")), "full run: the op checker's rows")
    check(bool(find(rs, "examples/digits")), "full run: the digits row")
    llm = find(rs, "llm decoder GPU vs CPU")
    check(llm and llm[0][1].startswith("ok: ") and "greedy identical" in llm[0][1],
          f"full run: the GPU decoder against the CPU's: {llm}")
    check(len(find(rs, "llm SmolLM2-135M shapes")) == 3, "full run: the decoder's three speed rows")
    check(any("not run: RUN_SANITIZER=none" in r[1] for r in find(rs, "compute-sanitizer")),
          "full run: the sanitizer row says why it did not run")
    check(not any("skipped" in r[1] for r in rs), "full run: nothing skipped in a 240 s budget")
    check(os.path.exists(os.path.join(logs, "table.md")) and
          "| run.sh |" in open(os.path.join(logs, "table.md")).read(), "full run: table.md written")
    check("nothing that ran failed" in (find(rs, "run.sh") or [["", ""]])[0][1], "full run: the last row")

    # A budget too small for most steps.
    logs = os.path.join(tmp, "small")
    t0 = time.time()
    pr = run({"RUN_BUDGET_S": "12"}, logs)
    out, _ = pr.communicate(timeout=300)
    took = time.time() - t0
    rs = rows(logs)
    skipped = [r[0] for r in rs if r[1].startswith("skipped: ") and "budget left" in r[1]]
    print(f"12 s budget: {took:.0f} s, skipped: {skipped}")
    check(pr.returncode == 0, f"12 s budget: exit 0 (got {pr.returncode})")
    # The four steps that need more than 12 s (nn op checkers, digits, NCCL,
    # nn @) are always skipped; others only when the machine is slow.
    check(len(skipped) >= 4, f"12 s budget: the steps it cannot hold say 'skipped' ({len(skipped)})")
    check(took < 12 + 20, f"12 s budget: ended in {took:.0f} s")

    # No CPU BLAS (SFLOW_BLAS names a file that does not load): the
    # environment row says so, and the digits row's CPU peer is marked.
    logs = os.path.join(tmp, "noblas")
    pr = run({"RUN_BUDGET_S": "120", "GPU_SECTIONS": "0 5b", "SFLOW_BLAS": os.path.join(tmp, "nonexistent.so")}, logs)
    out, _ = pr.communicate(timeout=300)
    rs = rows(logs)
    blas = find(rs, "environment: CPU BLAS")
    check(bool(blas) and "none found" in blas[0][1], f"no CPU BLAS: the environment row says so: {blas}")
    dig = find(rs, "examples/digits")
    check(bool(dig) and "no CPU BLAS: a reference loop" in dig[0][2], f"no CPU BLAS: the digits row's peer says so: {dig}")

    # SIGTERM while gpu_check's figures are being measured.
    logs = os.path.join(tmp, "term")
    pr = run({"RUN_BUDGET_S": "240", "GPU_SECTIONS": "0 2", "RUN_CHECK_ARGS": "--bench --bench-log2 16"}, logs)
    log = os.path.join(logs, "gpu_check.log")
    seen = False
    for _ in range(1200):
        if os.path.exists(log) and "NVRTC cold compile" in open(log).read():
            seen = True
            break
        if pr.poll() is not None:
            break
        time.sleep(0.1)
    check(seen, "SIGTERM: gpu_check's rows reach its log while it runs (line-buffered)")
    t0 = time.time()
    os.kill(pr.pid, signal.SIGTERM)
    try:
        out, _ = pr.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(pr.pid, signal.SIGKILL)
        out, _ = pr.communicate()
    rs = rows(logs)
    print(f"SIGTERM: exit {pr.returncode} after {time.time() - t0:.1f} s, {len(rs)} rows")
    check(pr.returncode == 124, f"SIGTERM: exit 124 (got {pr.returncode})")
    check(bool(find(rs, "sum_f32 vs CPU")) and bool(find(rs, "elementwise add bandwidth (2^16 f32)")),
          "SIGTERM: the rows gpu_check printed before it was stopped are in the table")
    stop = find(rs, "run stopped by a signal")
    check(bool(stop) and "during gpu_check" in stop[0][1], f"SIGTERM: a row names the step: {stop}")
    check("run stopped by a signal" in out and "check " in out, "SIGTERM: the table is printed")
    if fails:
        sys.exit(f"run_rehearsal: {len(fails)} check(s) failed")
    print("run_rehearsal: all checks passed (host emulator, not a GPU)")


if __name__ == "__main__":
    main()
