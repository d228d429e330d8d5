#!/usr/bin/env python3
"""run.py — std.serve against Ray Serve on this machine, in one run.

Both serve the digits MLP of examples/serve.sflow (the sflow program
trains it once and saves it; ray_peer.py loads the same safetensors file)
and a no-op, behind the same JSON, on loopback; wrk (Debian's) drives each
route at several concurrencies (connections) for --duration seconds and
reports requests/s and the 50th and 99th latency percentiles.  Rows:

  noop            POST /noop                      both, --replicas replicas
  model           POST /predict, batching on      sflow max_batch 10 / 10 ms, Ray @serve.batch(10, 0.01)
  model-nobatch   the model one request per call  sflow --max_batch 1, Ray's /predict1

Every response must be 2xx: wrk's non-2xx count and socket errors are
printed with each row, and a row with any is marked.

  python3 bench/serve/run.py --sflowc build/bin/sflowc --python PEER_PYTHON
          [--duration 5] [--conc 1,8,32,64] [--replicas 2] [--json OUT]

PEER_PYTHON has ray[serve] 2.60.0 and torch (bench/serve/setup.sh makes
build/peers/torch/venv/bin/python); without --python only sflow runs.
"""
import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
PIXELS = [0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0, 0, 4, 12,
          0, 0, 8, 8, 0, 0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0, 0, 2, 14, 5, 10, 12, 0,
          0, 0, 0, 6, 13, 10, 0, 0, 0]


def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v


def wrk(port, path, body, conc, duration):
    env = dict(os.environ, BODY=json.dumps(body))
    cmd = ["wrk", "-t", str(min(conc, 2)), "-c", str(conc), "-d", "%ds" % duration, "--latency",
           "-s", os.path.join(HERE, "post.lua"), "http://127.0.0.1:%d%s" % (port, path)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
    row = {"rps": float(re.search(r"Requests/sec:\s*([\d.]+)", out).group(1)),
           "p50_ms": ms(re.search(r"\s50%\s+(\S+)", out).group(1)),
           "p99_ms": ms(re.search(r"\s99%\s+(\S+)", out).group(1)),
           "non2xx": int((re.search(r"Non-2xx or 3xx responses:\s*(\d+)", out) or [0, 0])[1]),
           "errors": sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))}
    return row


def wait_line(p, word, timeout):
    buf = b""
    deadline = time.time() + timeout
    while word.encode() not in buf:
        r, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.time()))
        chunk = os.read(p.stdout.fileno(), 4096) if r else b""
        if not chunk:
            raise SystemExit("run.py: no %r from %s: %r" % (word, p.args[0], buf))
        buf += chunk
    return buf.decode()


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build", "bin", "sflowc"))
    ap.add_argument("--python", default="")
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--conc", default="1,8,32,64")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    concs = [int(c) for c in args.conc.split(",")]
    work = os.path.join(ROOT, "build", "bench", "serve")
    os.makedirs(work, exist_ok=True)
    exe = os.path.join(work, "serve")
    weights = os.path.join(work, "weights.safetensors")
    subprocess.run([args.sflowc, os.path.join(ROOT, "examples", "serve.sflow"), "-o", exe], check=True)
    ex = os.path.join(ROOT, "examples")
    subprocess.run([exe, "--weights", weights, "--stop_at_once", "--port", "0"], check=True, cwd=ex,
                   stdout=subprocess.DEVNULL)
    rows = []

    def measure(system, port, routes):
        for name, path, body in routes:
            for c in concs:
                r = wrk(port, path, body, c, args.duration)
                r.update(system=system, route=name, conc=c)
                rows.append(r)
                bad = " BAD" if r["non2xx"] or r["errors"] else ""
                print("%-6s %-14s c=%-3d %9.0f req/s  p50 %7.2f ms  p99 %7.2f ms  non2xx %d errors %d%s" %
                      (system, name, c, r["rps"], r["p50_ms"], r["p99_ms"], r["non2xx"], r["errors"], bad),
                      flush=True)

    noop = ("noop", "/noop", {"n": 1})
    model = ("model", "/predict", {"pixels": PIXELS})
    for batch in (10, 1):
        p = subprocess.Popen([exe, "--weights", weights, "--port", "0", "--replicas", str(args.replicas),
                              "--max_batch", str(batch)], cwd=ex, stdout=subprocess.PIPE)
        port = int(wait_line(p, "listening on", 60).split("listening on")[1].split()[0].rsplit(":", 1)[1])
        if batch == 10:
            measure("sflow", port, [noop, model])
        else:
            measure("sflow", port, [("model-nobatch", "/predict", {"pixels": PIXELS})])
        stop(p)
    if args.python:
        p = subprocess.Popen([args.python, os.path.join(HERE, "ray_peer.py"), "--weights", weights,
                              "--port", "18765", "--replicas", str(args.replicas)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            wait_line(p, "ready", 240)
            measure("ray", 18765, [noop, model, ("model-nobatch", "/predict1", {"pixels": PIXELS})])
        finally:
            stop(p)
    print()
    print("%-14s %5s %12s %12s %8s %10s %10s" % ("route", "conc", "sflow req/s", "ray req/s", "ratio",
                                                "sflow p99", "ray p99"))
    for r in rows:
        if r["system"] != "sflow":
            continue
        peer = [q for q in rows if q["system"] == "ray" and q["route"] == r["route"] and q["conc"] == r["conc"]]
        if peer:
            q = peer[0]
            print("%-14s %5d %12.0f %12.0f %7.1fx %8.2fms %8.2fms" % (r["route"], r["conc"], r["rps"], q["rps"],
                  r["rps"] / q["rps"] if q["rps"] else float("inf"), r["p99_ms"], q["p99_ms"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
