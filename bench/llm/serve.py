#!/usr/bin/env python3
"""Aggregate generated tokens/s of examples/llm_serve.sflow: 1 client vs many.

    python3 bench/llm/serve.py --sflowc build/bin/sflowc [--clients 1,8,16]
        [--requests 2] [--max-tokens 64] [--threads N] [--model FILE]

Compiles and starts the server (--port 0, --max-batch = the most clients),
then for each client count runs that many clients at once, each sending
--requests completions one after another (prompt "Story N:", temperature
(default 0.8) with seed N, max_tokens --max-tokens) and prints the generated tokens
(the answers' usage.completion_tokens), the wall time and their ratio.
Standard library only.
"""
import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--model", default=os.path.join(
        ROOT, "build", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", default="1,8,16")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--threads", type=int, default=0, help="the server's --threads (0: its default)")
    a = ap.parse_args()
    counts = [int(c) for c in a.clients.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "llm_serve")
        subprocess.run([a.sflowc, os.path.join(ROOT, "examples", "llm_serve.sflow"), "-o", exe],
                       check=True)
        log = open(os.path.join(tmp, "log"), "w+")
        cmd = [exe, "--model", a.model, "--port", "0", "--max-batch", str(max(counts))]
        if a.threads:
            cmd += ["--threads", str(a.threads)]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = None
        while url is None:
            time.sleep(0.1)
            log.seek(0)
            for line in log.read().splitlines():
                if line.startswith("listening on"):
                    url = line.split()[2]
            if p.poll() is not None:
                raise SystemExit("the server exited")
        post(url, {"prompt": "warm up", "max_tokens": 4})
        try:
            for n in counts:
                toks = [0] * n

                def client(i):
                    for k in range(a.requests):
                        seed = i * 100 + k
                        r = post(url, {"prompt": "Story %d:" % seed, "temperature": a.temperature,
                                       "seed": seed, "max_tokens": a.max_tokens})
                        toks[i] += r["usage"]["completion_tokens"]
                ts = [threading.Thread(target=client, args=(i,)) for i in range(n)]
                t0 = time.time()
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                dt = time.time() - t0
                print("clients %2d  requests %3d  tokens %5d  %6.2f s  %7.1f tokens/s"
                      % (n, n * a.requests, sum(toks), dt, sum(toks) / dt), flush=True)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


if __name__ == "__main__":
    main()
