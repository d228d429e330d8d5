#!/usr/bin/env python3
"""floor.py — std.serve's no-op route against the HTTP floor (issue 34).

The floor is bench/serve/epoll_peer.c: one thread, one epoll set, keep-
alive, no allocation per request, answering POST {"n": N} with {"n": N} as
examples/serve.sflow's /noop does.  wrk (Debian's) drives each server in
turn, alternating, for several rounds at each concurrency (connections,
keep-alive), and the table gives each round's requests/s, the median of
the rounds, the ratio sflow/floor of the medians and the load average
(/proc/loadavg's 1-minute figure) read before each round.  The batched
model route (/predict, max_batch 10, wait_ms 10) is measured in the same
rounds, so its time per request can be set beside the no-op's.

  python3 bench/serve/floor.py [--sflowc build/bin/sflowc] [--rounds 5]
          [--duration 3] [--conc 8,64] [--replicas 2] [--exe SERVE ...]
          [--json OUT]

--exe NAME=PATH adds a compiled examples/serve.sflow (an older build, to
compare two runtimes side by side); without it the current sflowc's is used.
--nospin adds each one again run with SFLOW_SERVE_SPIN_US=0 (the hand-offs
sleep at once, as before issue 34), named NAME-nospin.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402  (wrk, wait_line, stop, PIXELS, ROOT)


def start(cmd, cwd=None, env=None):
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, env=dict(os.environ, **(env or {})))
    line = run.wait_line(p, "listening on", 60)
    port = int(line.split("listening on")[1].split()[0].rsplit(":", 1)[1])
    return p, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(run.ROOT, "build", "bin", "sflowc"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=3)
    ap.add_argument("--conc", default="8,64")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--exe", action="append", default=[])
    ap.add_argument("--nospin", action="store_true")
    ap.add_argument("--model", action="store_true", help="also the batched /predict route")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    concs = [int(c) for c in args.conc.split(",")]
    work = os.path.join(run.ROOT, "build", "bench", "serve")
    os.makedirs(work, exist_ok=True)
    peer = os.path.join(work, "epoll_peer")
    subprocess.run(["cc", "-O2", "-o", peer, os.path.join(HERE, "epoll_peer.c")], check=True)
    exes = [tuple(e.split("=", 1)) for e in args.exe]
    if not exes:
        exe = os.path.join(work, "serve")
        subprocess.run([args.sflowc, os.path.join(run.ROOT, "examples", "serve.sflow"), "-o", exe],
                       check=True)
        exes = [("sflow", exe)]
    exes = [(n, x, {}) for n, x in exes]
    if args.nospin:
        exes += [(n + "-nospin", x, {"SFLOW_SERVE_SPIN_US": "0"}) for n, x, _ in exes]
    ex = os.path.join(run.ROOT, "examples")
    weights = os.path.join(work, "weights.safetensors")
    if not os.path.exists(weights):
        subprocess.run([exes[0][1], "--weights", weights, "--stop_at_once", "--port", "0"],
                       check=True, cwd=ex, stdout=subprocess.DEVNULL)
    noop = ("/noop", {"n": 1})
    predict = ("/predict", {"pixels": run.PIXELS})
    rows = []
    for rnd in range(args.rounds):
        for c in concs:
            order = [("floor", [peer, "0"], [noop], {})] + [
                (name, [path, "--weights", weights, "--port", "0", "--replicas",
                        str(args.replicas), "--max_batch", "10"],
                 [noop, predict] if args.model else [noop], env) for name, path, env in exes]
            if rnd % 2:
                order.reverse()
            for system, cmd, routes, env in order:
                p, port = start(cmd, cwd=ex, env=env)
                try:
                    for path, body in routes:
                        load = float(open("/proc/loadavg").read().split()[0])
                        r = run.wrk(port, path, body, c, args.duration)
                        r.update(system=system, route=path, conc=c, round=rnd, load=load)
                        rows.append(r)
                        bad = " BAD" if r["non2xx"] or r["errors"] else ""
                        print("round %d %-8s %-9s c=%-3d %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  "
                              "load %.2f%s" % (rnd, system, path, c, r["rps"], r["p50_ms"],
                                               r["p99_ms"], load, bad), flush=True)
                finally:
                    run.stop(p)
    print()
    print("%-8s %-9s %5s %10s %8s  %s" % ("system", "route", "conc", "median", "vs floor",
                                           "rounds (req/s)"))
    for c in concs:
        base = statistics.median(r["rps"] for r in rows if r["system"] == "floor" and r["conc"] == c)
        for system in ["floor"] + [e[0] for e in exes]:
            for path in ("/noop", "/predict"):
                got = [r["rps"] for r in rows if r["system"] == system and r["conc"] == c and
                       r["route"] == path]
                if not got:
                    continue
                m = statistics.median(got)
                print("%-8s %-9s %5d %10.0f %7.2fx  %s" % (system, path, c, m, m / base,
                                                          " ".join("%.0f" % g for g in got)))
    loads = [r["load"] for r in rows]
    print("load average (1 min) during the run: %.2f-%.2f" % (min(loads), max(loads)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
