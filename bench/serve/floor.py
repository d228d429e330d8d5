#!/usr/bin/env python3
"""floor.py — std.serve's no-op route against the HTTP floor (issue 34).

The floor is bench/serve/epoll_peer.c: one thread, one epoll set, keep-
alive, no allocation per request, answering POST {"n": N} with {"n": N} as
examples/serve.sflow's /noop does.  wrk (Debian's) drives each server in
turn, alternating, for several rounds at each concurrency (connections,
keep-alive), and the table gives each round's requests/s, the median of
the rounds, the ratio sflow/floor of the medians and the load average
(/proc/loadavg's 1-minute figure) read before each round, and per request
the server's CPU time (user + system, every thread, from /proc/PID/stat
around wrk's run) and its context switches (voluntary and not, from the
process's rusage at exit: each route runs in a process of its own).
On a loaded machine a one-thread server gets a smaller share of the cores
than one of many threads, so the CPU per request is the figure to compare
there; requests/s is the figure on an idle one.  The batched
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
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402  (wrk, wait_line, stop, PIXELS, ROOT)


def cpu_s(pid):
    """The process's user + system CPU seconds, all its threads."""
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def stop_rusage(p):
    """SIGTERM, then the whole process's rusage (threads that ended too)."""
    p.send_signal(signal.SIGTERM)
    deadline = time.time() + 60
    while time.time() < deadline:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = status
            return ru
        time.sleep(0.05)
    p.kill()
    return os.wait4(p.pid, 0)[2]


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
    exes = [(n, os.path.abspath(x)) for n, x in (e.split("=", 1) for e in args.exe)]
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
                # A process per route: its rusage at exit counts the context
                # switches of every thread, those that ended with their
                # connections too (startup's few included).
                for path, body in routes:
                    p, port = start(cmd, cwd=ex, env=env)
                    try:
                        load = float(open("/proc/loadavg").read().split()[0])
                        t0 = cpu_s(p.pid)
                        r = run.wrk(port, path, body, c, args.duration)
                        cpu = cpu_s(p.pid) - t0
                    finally:
                        ru = stop_rusage(p)
                    n = r["rps"] * args.duration
                    r.update(system=system, route=path, conc=c, round=rnd, load=load,
                             cpu_us=cpu / n * 1e6, csw=(ru.ru_nvcsw + ru.ru_nivcsw) / n)
                    rows.append(r)
                    bad = " BAD" if r["non2xx"] or r["errors"] else ""
                    print("round %d %-12s %-9s c=%-3d %9.0f req/s  p50 %6.2f ms  p99 %6.2f ms  "
                          "%5.1f us CPU/req  %4.2f csw/req  load %.2f%s" %
                          (rnd, system, path, c, r["rps"], r["p50_ms"], r["p99_ms"], r["cpu_us"],
                           r["csw"], load, bad), flush=True)
    print()
    print("%-12s %-9s %5s %10s %8s %11s %8s  %s" % ("system", "route", "conc", "median", "vs floor",
                                                  "us CPU/req", "csw/req", "rounds (req/s)"))
    for c in concs:
        base = statistics.median(r["rps"] for r in rows if r["system"] == "floor" and r["conc"] == c)
        for system in ["floor"] + [e[0] for e in exes]:
            for path in ("/noop", "/predict"):
                got = [r["rps"] for r in rows if r["system"] == system and r["conc"] == c and
                       r["route"] == path]
                if not got:
                    continue
                m = statistics.median(got)
                sel = [r for r in rows if r["system"] == system and r["conc"] == c and
                       r["route"] == path]
                cpu = statistics.median(r["cpu_us"] for r in sel)
                csw = statistics.median(r["csw"] for r in sel)
                print("%-12s %-9s %5d %10.0f %7.2fx %11.1f %8.2f  %s" %
                      (system, path, c, m, m / base, cpu, csw, " ".join("%.0f" % g for g in got)))
    loads = [r["load"] for r in rows]
    print("load average (1 min) during the run: %.2f-%.2f" % (min(loads), max(loads)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
