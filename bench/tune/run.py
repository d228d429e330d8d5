#!/usr/bin/env python3
"""run.py — std.tune's benchmarks (issue 18) beside Ray Tune 2.60.0 and a
plain loop, in one run:

    python3 bench/tune/run.py [--build build] [--only overhead|asha] [--repeat R] [--no-peer]

overhead: 1,000 trials of a trivial objective and 100 trials of a 10 ms
one (busy-spinning), one iteration each, FIFO, one trial at a time:
bench/tune/overhead.sflow (the sweep with its journal, as a user runs it;
the plain loop of the same objective in main with --journal=false) and
ray_peer.py (Tuner.fit() of a function trainable with reuse_actors=True,
and a Python loop).
Overhead = sweep time - loop time; each side's fastest of R processes.

asha: examples/tune.sflow (32 trials of the digits MLP, up to 27 epochs)
with ASHA and with FIFO: the best validation loss each found, when it was
first reported, and the whole sweep's time.

The peer: bench/tune/setup.sh (build/peers/ray), or PEER_PYTHON.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def results(text):
    out = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) == 5 and p[0] == "RESULT":
            out[(p[1], p[2])] = float(p[4])
    return out


def fastest(cmds, repeat, cwd=None):
    best = {}
    for _ in range(repeat):
        for cmd in cmds:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
            if r.returncode != 0:
                sys.exit("bench/tune: %s failed:\n%s" % (" ".join(cmd), r.stderr[-3000:]))
            for k, v in results(r.stdout).items():
                best[k] = min(best.get(k, v), v)
    return best


def overhead(build, repeat, peer):
    with tempfile.TemporaryDirectory(prefix="sflow-tune-bench-") as tmp:
        exe = os.path.join(tmp, "overhead")
        subprocess.run([os.path.join(build, "bin", "sflowc"), os.path.join(ROOT, "bench/tune/overhead.sflow"),
                        "-o", exe], check=True)
        rows = []
        for bench, trials, ms in (("trivial", 1000, 0), ("10ms", 100, 10)):
            a = ["--bench", bench, "--trials", str(trials), "--ms", str(ms), "--quiet"]
            got = fastest([[exe, "--side", "loop", "--journal=false"] + a,
                           [exe, "--side", "tune", "--checkpoint-dir", os.path.join(tmp, "ck")] + a], repeat, tmp)
            if peer:
                # reuse_actors: Ray's setting for many short trials (its
                # default starts an actor per trial, 2.6 s a trial here).
                got.update(fastest([[peer, os.path.join(ROOT, "bench/tune/ray_peer.py"), "--bench", bench,
                                     "--trials", str(trials), "--ms", str(ms), "--reuse-actors"]], 1))
            rows.append((bench, trials, got))
    print("%-8s %7s %10s %10s %11s %10s %12s %12s" % ("bench", "trials", "sflow loop", "sflow tune", "sflow over",
                                                       "py loop", "ray tune", "ray over"))
    for bench, trials, g in rows:
        so = g[(bench, "sflow_tune")] - g[(bench, "sflow_loop")]
        line = "%-8s %7d %9.4fs %9.4fs %10.4fs" % (bench, trials, g[(bench, "sflow_loop")], g[(bench, "sflow_tune")], so)
        if (bench, "ray_tune_reuse") in g:
            ro = g[(bench, "ray_tune_reuse")] - g[(bench, "python_loop")]
            line += " %9.4fs %11.3fs %11.3fs  ray/sflow overhead %.0fx, sflow tune/loop %.3f" % (
                g[(bench, "python_loop")], g[(bench, "ray_tune_reuse")], ro, ro / max(so, 1e-9),
                g[(bench, "sflow_tune")] / g[(bench, "sflow_loop")])
        print(line)


def sweep(exe, cwd, scheduler, samples, epochs, tmp):
    out = os.path.join(tmp, scheduler + ".csv")
    subprocess.run([exe, "--journal=false", "--quiet", "--scheduler", scheduler, "--samples", str(samples),
                    "--epochs", str(epochs), "--out", out], check=True, cwd=cwd, capture_output=True)
    with open(out) as f:
        rows = [r for r in csv.DictReader(f) if r["metric"]]
    best = min(float(r["metric"]) for r in rows)
    first = min(float(r["seconds"]) for r in rows if float(r["metric"]) == best)
    return best, first, max(float(r["seconds"]) for r in rows), len(rows), rows


def asha(build, samples, epochs):
    with tempfile.TemporaryDirectory(prefix="sflow-tune-asha-") as tmp:
        exe = os.path.join(tmp, "tune")
        subprocess.run([os.path.join(build, "bin", "sflowc"), os.path.join(ROOT, "examples/tune.sflow"),
                        "-o", exe], check=True)
        got = {s: sweep(exe, os.path.join(ROOT, "examples"), s, samples, epochs, tmp) for s in ("asha", "fifo")}
    fb = got["fifo"][0]
    print("%-6s %10s %14s %12s %8s %16s" % ("", "best loss", "time to best", "sweep time", "epochs",
                                            "time to fifo+2%"))
    for s, (best, first, total, n, rows) in got.items():
        target = fb * 1.02
        hit = [float(r["seconds"]) for r in rows if float(r["metric"]) <= target]
        print("%-6s %10.4f %13.3fs %11.3fs %8d %15s" % (s, best, first, total, n,
                                                      ("%.3fs" % min(hit)) if hit else "never"))
    a, f = got["asha"], got["fifo"]
    print("asha vs fifo: time to best %.1fx less, sweep %.1fx less" % (f[1] / a[1], f[2] / a[2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=27)
    ap.add_argument("--no-peer", action="store_true", help="sflow's figures only")
    a = ap.parse_args()
    peer = os.environ.get("PEER_PYTHON")
    if not peer and a.only != "asha" and not a.no_peer:
        if subprocess.run(["bash", os.path.join(ROOT, "bench/tune/setup.sh")]).returncode == 0:
            peer = os.path.join(ROOT, "build/peers/ray/venv/bin/python")
        else:
            print("bench/tune: Ray Tune not installed (bench/tune/setup.sh failed); sflow figures only")
    if a.only in ("", "overhead"):
        overhead(a.build, a.repeat, peer)
    if a.only in ("", "asha"):
        asha(a.build, a.samples, a.epochs)


if __name__ == "__main__":
    main()
