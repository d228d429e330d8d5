#!/usr/bin/env python3
"""run.py — the fine-tuning benchmark of issue 17, sflow beside PyTorch and
Ray Train in one run, one table (`make bench-train`):

    python3 bench/train/run.py [--build build] [--full] [--nodes HOSTS]
                               [--threads 1,2] [--workers 1,2,4] [--shard none,optimizer]
                               [--no-ray] [--no-sflow]

Sets up the peers first (bench/train/setup.sh: PyTorch, transformers, Ray
in build/peers/torch; network once), then runs, each in a process of its
own and one after the other, the same recipe (model, data, categories,
samples, epochs, seq-len, lr, batch, seed):

  torch   bench/train/peer_finetune.py --mode plain, once per --threads count
  ddp     the same over DistributedDataParallel (gloo, loopback), 2
          processes of 1 thread each (2 cores: 2 threads in all)
  sflow   examples/finetune.sflow compiled by <build>/bin/sflowc, with
          --workers N for each of --workers (and --threads T, the total, for
          each of --threads with 1 worker; the largest with more), and with
          --nodes HOSTS --workers 2 when a hosts file is given, or on 2
          simulated nodes (sshd on 127.0.0.2 and .3, tests/cluster's set-up)
          with --loopback-nodes; with 2 or more workers once per --shard
          value (rows "sflow/optimizer", ...)
  fsdp    the same over FSDP2's fully_shard (gloo, CPU), one unit per
          BertLayer, 2 processes of 1 thread: "fsdp" frees each unit's
          gathered params after its forward (FULL_SHARD), "fsdp/grad-op"
          keeps them for the backward (SHARD_GRAD_OP)
  ray     bench/train/ray_startup.py: TorchTrainer, 4 CPU workers, start-up
          to the end of the first step

The default recipe is small, so that the whole run takes about 10 minutes
on the 2-core development machine (256 train and 256 eval samples, 2
epochs, seq-len 64); --full is the seed's recipe (1,000 and 1,000, 3
epochs, seq-len 128).  Peak RSS is the largest sum of the resident sets of
the run's process tree, sampled every 50 ms (a DDP run is 2 processes, an
sflow run 1 or more; a --nodes run's remote workers are not counted).
The "cpu s" column is the whole run's CPU time (user + sys, start-up and
evaluation included): on a shared machine whose load swings, it is the
steadier figure of the work each side does.
--vs-fsdp R runs only the 2-worker duel instead: R rounds of DDP, FSDP
(both reshard values) and sflow --workers 2 with each --shard value (all
four by default), the order reversed every other round, then the table
of every run and each sflow row's mean samples/s over each peer's mean.
--parity checks the arithmetic instead of the speed: sflow with 1 and 2
workers and the torch loop, all from sflow's head init (--init-out,
peer_finetune.py --init) with every dropout off (--dropout 0), so that
they follow one trajectory; prints each step's relative loss and gradient
norm differences from torch's and the accuracies, and exits 1 unless the
losses agree within 1e-3 and the accuracies within 1 point.

Prints every run's epoch and RESULT lines, then the table and the ratios
(the "vs peer" column: sflow's samples/s over the PyTorch peer's with the
same threads in all — DDP for 2 workers, the plain loop otherwise — then
start-up and scaling).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "finetune.sflow")
SMALL = dict(samples=256, eval_samples=256, epochs=2, seq_len=64)
FULL = dict(samples=1000, eval_samples=1000, epochs=3, seq_len=128)


def tree_rss_mb(pid):
    """The summed VmRSS of pid and its descendants, in MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return total / 1024


def measured(cmd, env, what, timeout, cwd=None):
    """(stdout, peak tree RSS MB, CPU s) of cmd; its epoch/RESULT lines echoed.
    The CPU seconds (user + sys of cmd and the children it waited for, from
    wait4) barely move with the machine's load where the wall times do."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=cwd)
    peak = [0.0]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], tree_rss_mb(p.pid))
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out_lines = []
    err = []
    te = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
    te.start()
    for line in p.stdout:
        out_lines.append(line)
        if line.startswith(("epoch ", "first step", "RESULT", "INFO")):
            print(f"  {line.rstrip()}", flush=True)
    killer = threading.Timer(max(1.0, timeout - (time.perf_counter() - t0)), p.kill)
    killer.start()
    _, status, ru = os.wait4(p.pid, 0)
    killer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    th.join()
    te.join()
    cpu = ru.ru_utime + ru.ru_stime
    if p.returncode != 0:
        print(f"bench-train: {what} failed ({p.returncode}):\n{''.join(err)[-3000:]}", file=sys.stderr)
        return None, peak[0], cpu
    return "".join(out_lines), peak[0], cpu


def parse(text):
    """The RESULT line's key=value fields and the first-step time of a run."""
    got = {}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            for kv in line.split()[2:]:
                k, _, v = kv.partition("=")
                got[k] = v
        m = re.match(r"first step after ([0-9.]+) s", line)
        if m:
            got["first_step_s"] = m.group(1)
    return got


def recipe_flags(r, a):
    """The flags every side takes, spelled as the contract does (--seq-len)."""
    return ["--model", a.model, "--data", a.data, "--categories", a.categories,
            "--samples", str(r["samples"]), "--eval-samples", str(r["eval_samples"]),
            "--epochs", str(r["epochs"]), "--seq-len", str(r["seq_len"]),
            "--lr", str(a.lr), "--batch", str(a.batch), "--seed", str(a.seed)]


def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--full", action="store_true", help="the seed's recipe: 1000/1000 samples, 3 epochs, seq-len 128")
    ap.add_argument("--samples", type=int, help="override the recipe's train samples")
    ap.add_argument("--eval-samples", type=int, help="override the recipe's eval samples")
    ap.add_argument("--epochs", type=int, help="override the recipe's epochs")
    ap.add_argument("--seq-len", type=int, help="override the recipe's seq-len")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default="1,2", help="thread counts of the 1-worker runs (default 1,2)")
    ap.add_argument("--workers", default="1,2,4", help="sflow worker counts (default 1,2,4)")
    ap.add_argument("--shard", default="none",
                    help="examples/finetune --shard values of the runs with 2 or more workers, "
                         "comma-separated (default none; e.g. none,optimizer)")
    ap.add_argument("--nodes", help="a hosts file: also run sflow --nodes FILE --workers 2")
    ap.add_argument("--loopback-nodes", action="store_true",
                    help="also run sflow on 2 simulated nodes: sshd on 127.0.0.2 and .3, "
                         "started as tests/cluster does (needs openssh-server)")
    ap.add_argument("--model", default="")
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    ap.add_argument("--categories", default="computers,politics,science,songs-poems,work")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray Train start-up peer")
    ap.add_argument("--no-sflow", action="store_true", help="run the peers only")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch fine-tune peers")
    ap.add_argument("--peers", help="a ready peers venv's python instead of setup.sh's "
                    "(development: build/peers/torch/venv/bin/python)")
    ap.add_argument("--vs-fsdp", type=int, default=0, metavar="R",
                    help="only the 2-worker duel: R alternated rounds of DDP, FSDP and sflow "
                         "--workers 2 with each --shard value (default all four)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    ap.add_argument("--parity", action="store_true",
                    help="check the arithmetic instead of timing: sflow (1 and 2 workers) and the "
                         "torch loop from the same head init with dropout 0, step by step")
    a = ap.parse_args()
    r = dict(FULL if a.full else SMALL)
    for k in r:
        if getattr(a, k) is not None:
            r[k] = getattr(a, k)
    sys.path.insert(0, HERE)
    from peer_finetune import default_model
    a.model = os.path.abspath(a.model or default_model())
    if not os.path.isfile(os.path.join(a.model, "model.safetensors")):
        sys.exit(f"bench-train: no model.safetensors in {a.model} (scripts/install-models.sh)")
    threads = [int(t) for t in a.threads.split(",")]
    most = max(threads)
    workers = [int(w) for w in a.workers.split(",")]
    if a.peers:
        py = os.path.abspath(a.peers)   # the runs' folders are their own
    else:
        peers = os.path.join(a.build, "peers", "torch")
        subprocess.run(["bash", os.path.join(HERE, "setup.sh"), peers], check=True)
        py = os.path.join(peers, "venv", "bin", "python")
    flags = recipe_flags(r, a)
    if a.parity:
        sys.exit(parity(a, r, py, flags))
    if a.vs_fsdp:
        sys.exit(duel(a, r, py, flags))
    print(f"INFO recipe samples {r['samples']} eval {r['eval_samples']} epochs {r['epochs']} "
          f"seq-len {r['seq_len']} batch {a.batch} lr {a.lr} seed {a.seed} model {a.model} "
          f"data {a.data} categories {a.categories}", flush=True)
    rows = []   # (side, workers, threads per worker, fields, peak MB, load)

    def one(side, w, tpw, cmd, cwd=None):
        print(f"== {side} workers={w} threads/worker={tpw}: {' '.join(cmd)}", flush=True)
        before = load()
        out, peak, cpu = measured(cmd, os.environ, f"{side} workers={w}", a.timeout, cwd)
        if out is not None:
            x = parse(out)
            x["cpu_s"] = f"{cpu:.1f}"
            rows.append((side, w, tpw, x, peak, before))

    if not a.no_torch:
        for n in threads:
            one("torch", 1, n, [py, os.path.join(HERE, "peer_finetune.py"), "--mode", "plain",
                                "--threads", str(n), *flags])
        one("ddp", 2, 1, [py, os.path.join(HERE, "peer_finetune.py"), "--mode", "ddp",
                          "--workers", "2", "--threads", "1", *flags])
        for rs in ("full", "grad-op"):
            one("fsdp" if rs == "full" else "fsdp/grad-op", 2, 1,
                [py, os.path.join(HERE, "peer_finetune.py"), "--mode", "fsdp", "--fsdp-reshard", rs,
                 "--workers", "2", "--threads", "1", *flags])
    sflowc = os.path.join(a.build, "bin", "sflowc")
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        exe = os.path.join(tmp, "finetune")
        if a.no_sflow:
            exe = None
        elif not os.path.exists(EXAMPLE):
            print("INFO sflow: not run (examples/finetune.sflow missing)", flush=True)
            exe = None
        else:
            t0 = time.perf_counter()
            subprocess.run([sflowc, "-O2", EXAMPLE, "-o", exe], check=True)
            print(f"INFO sflowc -O2 examples/finetune.sflow: {time.perf_counter() - t0:.2f} s", flush=True)
        if exe:
            for w in workers:
                for n in (threads if w == 1 else [most]):
                    for sh in (["none"] if w == 1 else a.shard.split(",")):
                        # --threads is the process's pool, shared by its members.
                        # Each run in a fresh folder: the program keeps its journal
                        # and the members' checkpoints in ./.sflow/finetune/.
                        side = "sflow" if sh == "none" else "sflow/" + sh
                        one(side, w, n / w, [exe, "--workers", str(w), "--threads", str(n),
                                             "--shard", sh, *flags], cwd=tempfile.mkdtemp(dir=tmp))
            if a.nodes:
                one("sflow-nodes", 2, most, [exe, "--nodes", os.path.abspath(a.nodes), "--workers", "2",
                                             "--threads", str(most), *flags], cwd=tempfile.mkdtemp(dir=tmp))
            if a.loopback_nodes:
                sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
                import cluster_test
                c = cluster_test.Cluster(sflowc, 2)
                try:
                    # Each node's worker takes one member; the hosts share
                    # this machine's 2 cores, so each gets 1 thread.
                    one("sflow-nodes", 2, 1, c.args("--workers", "2", "--threads", "1", *flags, prog=exe),
                        cwd=tempfile.mkdtemp(dir=tmp))
                finally:
                    c.close()
    if not a.no_ray:
        one("ray", 4, 1, [py, os.path.join(HERE, "ray_startup.py"), "--workers", "4",
                          "--model", a.model, "--data", a.data, "--categories", a.categories,
                          "--samples", str(r["samples"]), "--seq-len", str(r["seq_len"]),
                          "--batch", str(a.batch), "--lr", str(a.lr), "--seed", str(a.seed)])
    report(rows, r, most)


def step_losses(path):
    """[(loss, lr, grad_norm)] of a --metrics or --step-log CSV."""
    import csv
    with open(path) as f:
        return [(float(x["loss"]), float(x["lr"]), float(x["grad_norm"])) for x in csv.DictReader(f)]


def parity(a, r, py, flags):
    """--parity: the same trajectory on both sides.  sflow writes its head
    init (--init-out), the torch loop starts from it, every dropout is off,
    and the rest (data, order, AdamW, schedule, clipping) is already the
    same; so the per-step losses may differ only by float rounding, which
    grows with the steps but stays near 1e-6 relative (goal: under 1e-3),
    and the eval accuracies must be within 1 point (they are equal where
    no eval sample sits on a decision boundary).  Exit status 1 when not."""
    sflowc = os.path.join(a.build, "bin", "sflowc")
    tmp = tempfile.mkdtemp(prefix="bench-train-parity-")
    exe = os.path.join(tmp, "finetune")
    subprocess.run([sflowc, "-O2", EXAMPLE, "-o", exe], check=True)
    head = os.path.join(tmp, "head.safetensors")
    print(f"INFO parity: recipe samples {r['samples']} eval {r['eval_samples']} epochs {r['epochs']} "
          f"seq-len {r['seq_len']} batch {a.batch} lr {a.lr} categories {a.categories}, dropout 0, "
          f"head init {head} (sflow's); sflow N workers at --threads N, torch at 1 thread", flush=True)
    runs, accs = {}, {}
    for w in (1, 2):
        csv_path = os.path.join(tmp, f"sflow{w}.csv")
        cmd = [exe, "--workers", str(w), "--threads", str(w), *flags, "--dropout", "0",
               "--metrics", csv_path, "--checkpoint-dir", os.path.join(tmp, f"ck{w}"), "--journal=false"]
        if w == 1:
            cmd += ["--init-out", head]
        print(f"== sflow workers={w}: {' '.join(cmd)}", flush=True)
        out, _, _ = measured(cmd, os.environ, f"sflow workers={w}", a.timeout, cwd=tmp)
        if out is None:
            return 1
        runs[f"sflow {w}w"] = step_losses(csv_path)
        accs[f"sflow {w}w"] = [float(x) for x in re.findall(r"accuracy (\d\.\d+)", out)]
    t_csv = os.path.join(tmp, "torch.csv")
    cmd = [py, os.path.join(HERE, "peer_finetune.py"), "--mode", "plain", "--threads", "1", *flags,
           "--dropout", "0", "--init", head, "--step-log", t_csv]
    print(f"== torch: {' '.join(cmd)}", flush=True)
    out, _, _ = measured(cmd, os.environ, "torch", a.timeout)
    if out is None:
        return 1
    ref = step_losses(t_csv)
    acc_t = [float(x) for x in re.findall(r"accuracy (\d\.\d+)", out)]
    names = list(runs)
    print(f"\n{'step':>4} {'torch loss':>11} " + " ".join(f"{n + ' rel':>12}" for n in names) +
          f" {'torch |g|':>10} " + " ".join(f"{n + ' |g| rel':>14}" for n in names))
    worst = {n: 0.0 for n in names}
    ok = True
    for i, (lt, lrt, gt) in enumerate(ref):
        cells, gcells = [], []
        for n in names:
            if i >= len(runs[n]):
                cells.append(f"{'missing':>12}")
                gcells.append(f"{'':>14}")
                ok = False
                continue
            ls, lrs, gs = runs[n][i]
            d = abs(ls / lt - 1)
            worst[n] = max(worst[n], d)
            ok &= abs(lrs - lrt) <= 1e-12 * max(lrt, 1e-30)
            cells.append(f"{d:>12.2e}")
            gcells.append(f"{abs(gs / gt - 1):>14.2e}")
        print(f"{i + 1:>4} {lt:>11.7f} " + " ".join(cells) + f" {gt:>10.5f} " + " ".join(gcells))
    for n in names:
        ok &= len(runs[n]) == len(ref) and worst[n] < 1e-3
    print(f"\naccuracy per epoch: torch {acc_t}, " + ", ".join(f"{n} {accs[n]}" for n in names))
    acc_ok = all(len(accs[n]) == len(acc_t) and all(abs(x - y) <= 0.01 + 1e-9 for x, y in zip(accs[n], acc_t))
                 for n in names)
    print("largest relative step-loss difference from torch: " +
          ", ".join(f"{n} {worst[n]:.3g}" for n in names) +
          f" (goal < 1e-3: {'yes' if ok else 'NO'}); accuracy within 1 point: {'yes' if acc_ok else 'NO'}")
    ok &= acc_ok
    print("PARITY " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def duel(a, r, py, flags):
    """--vs-fsdp: 2 workers of 1 thread each, sflow beside DDP and FSDP,
    alternated over rounds; the table and the ratios of the means."""
    # "parameters" runs FSDP's units (bert.units), "parameters-whole" one
    # unit (--units=false: the whole params gathered per training call)
    shards = a.shard.split(",") if a.shard != "none" else ["none", "optimizer", "gradients", "parameters",
                                                          "parameters-whole"]
    peer = os.path.join(HERE, "peer_finetune.py")
    rows = []   # (side, round, fields, peak MB, load)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        exe = os.path.join(tmp, "finetune")
        subprocess.run([os.path.join(a.build, "bin", "sflowc"), "-O2", EXAMPLE, "-o", exe], check=True)
        runs = [("ddp", [py, peer, "--mode", "ddp", "--workers", "2", "--threads", "1", *flags]),
                ("fsdp", [py, peer, "--mode", "fsdp", "--workers", "2", "--threads", "1", *flags]),
                ("fsdp/grad-op", [py, peer, "--mode", "fsdp", "--fsdp-reshard", "grad-op",
                                  "--workers", "2", "--threads", "1", *flags])]
        if a.no_torch:
            runs = []
        runs += [("sflow/" + sh, [exe, "--workers", "2", "--threads", "2", "--shard",
                                  "parameters" if sh == "parameters-whole" else sh,
                                  *(["--units=false"] if sh == "parameters-whole" else []), *flags])
                 for sh in shards]
        for k in range(a.vs_fsdp):
            for side, cmd in (runs if k % 2 == 0 else runs[::-1]):
                print(f"== round {k + 1} {side}: {' '.join(cmd)}", flush=True)
                before = load()
                out, peak, cpu = measured(cmd, os.environ, side, a.timeout, tempfile.mkdtemp(dir=tmp))
                if out is not None:
                    x = parse(out)
                    x["cpu_s"] = f"{cpu:.1f}"
                    rows.append((side, k + 1, x, peak, before))
    print(f"\nINFO recipe: {r['samples']} train / {r['eval_samples']} eval samples, {r['epochs']} "
          f"epochs, seq-len {r['seq_len']}; 2 workers, 2 threads in all; {os.cpu_count()} CPUs")
    head = f"{'side':<17} {'round':>5} {'samples/s':>9} {'train s':>8} {'accuracy':>8} {'peak MB':>8} {'cpu s':>7}  load"
    print(head)
    print("-" * len(head))
    for side, k, x, peak, ld in rows:
        print(f"{side:<17} {k:>5} {float(x.get('samples_per_s', 0)):>9.1f} {float(x.get('train_s', 0)):>8.2f} "
              f"{float(x.get('accuracy', 0)):>8.4f} {peak:>8.0f} {x.get('cpu_s', '-'):>7}  {ld}")
    mean = {}
    for side, _, x, peak, _ in rows:
        mean.setdefault(side, []).append((float(x.get("samples_per_s", 0)), peak))
    print()
    for side, v in mean.items():
        sps = sum(s for s, _ in v) / len(v)
        pk = max(p for _, p in v)
        line = f"{side:<17} mean {sps:.1f} samples/s, peak {pk:.0f} MB"
        if side.startswith("sflow"):
            for p in ("ddp", "fsdp", "fsdp/grad-op"):
                if mean.get(p):
                    line += f"; vs {p} {sps / (sum(s for s, _ in mean[p]) / len(mean[p])):.2f}x"
        print(line)
    return 0 if rows else 1


def report(rows, r, most):
    def f(x, k, fmt="{:.1f}"):
        v = x.get(k)
        return fmt.format(float(v)) if v not in (None, "") else "-"

    print(f"\nINFO recipe: {r['samples']} train / {r['eval_samples']} eval samples, {r['epochs']} "
          f"epochs, seq-len {r['seq_len']}; {os.cpu_count()} CPUs; load average before each run in the last column")
    head = (f"{'side':<11} {'wk':>2} {'thr/wk':>6} {'samples/s':>9} {'train s':>8} {'eval s':>7} "
            f"{'accuracy':>8} {'1st step s':>10} {'peak MB':>8} {'cpu s':>7} {'vs peer':>8}  load")
    print(head)
    print("-" * len(head))
    torch_at = {}
    for side, w, tpw, x, peak, ld in rows:
        if side == "torch":
            torch_at[w * tpw] = float(x["samples_per_s"])
    ddp = next((float(x["samples_per_s"]) for s, _, _, x, _, _ in rows if s == "ddp"), None)
    for side, w, tpw, x, peak, ld in rows:
        vs = ""
        # The peer at the same threads in all: DDP for 2 workers, else the plain loop.
        ref = ddp if side.startswith("sflow") and w == 2 and ddp else torch_at.get(w * tpw)
        if side.startswith("sflow") and ref and x.get("samples_per_s"):
            vs = f"{float(x['samples_per_s']) / ref:.2f}x"
        tpw_s = f"{tpw:g}"
        print(f"{side:<11} {w:>2} {tpw_s:>6} {f(x, 'samples_per_s'):>9} {f(x, 'train_s', '{:.2f}'):>8} "
              f"{f(x, 'eval_s', '{:.2f}'):>7} {f(x, 'accuracy', '{:.4f}'):>8} "
              f"{f(x, 'first_step_s', '{:.3f}'):>10} {peak:>8.0f} {f(x, 'cpu_s'):>7} {vs:>8}  {ld}")
    by = {(side, w, tpw): x for side, w, tpw, x, _, _ in rows}
    ray = by.get(("ray", 4, 1))
    sf4 = next((x for (s, w, _), x in by.items() if s == "sflow" and w == 4), None)
    if ray:
        print(f"\nstart-up to the end of the first step, 4 workers: "
              f"sflow {f(sf4 or {}, 'first_step_s', '{:.3f}')} s, Ray Train TorchTrainer "
              f"{f(ray, 'first_step_s', '{:.3f}')} s (ray.init alone {f(ray, 'ray_init_s', '{:.3f}')} s)")
    s1 = by.get(("sflow", 1, float(most))) or by.get(("sflow", 1, most))
    s2 = by.get(("sflow", 2, most / 2))
    t1 = by.get(("torch", 1, 1))
    d2 = by.get(("ddp", 2, 1))
    parts = []
    if s1 and s2:
        parts.append(f"sflow 1 -> 2 workers ({most} threads in all) "
                     f"{float(s2['samples_per_s']) / float(s1['samples_per_s']):.2f}x")
    if t1 and d2:
        parts.append(f"torch 1 process x 1 thread -> DDP 2 x 1 "
                     f"{float(d2['samples_per_s']) / float(t1['samples_per_s']):.2f}x")
    sn = next((x for (s, w, _), x in by.items() if s == "sflow-nodes"), None)
    if sn and s2:
        parts.append(f"sflow 2 workers on 2 loopback nodes / on 1 node "
                     f"{float(sn['samples_per_s']) / float(s2['samples_per_s']):.2f}x")
    if parts:
        print("scaling (samples/s): " + "; ".join(parts))


if __name__ == "__main__":
    main()
