#!/usr/bin/env python3
"""bench/llm/llamacpp.py: sflow's decoder beside llama.cpp (and
transformers), the same GGUF, side by side in one run (issue 29).

    python3 bench/llm/llamacpp.py [--build build] [--model FILE.gguf]
        [--threads 1,2] [--clients 1,16] [--tokens 64] [--requests 2]
        [--only llamacpp,sflow,transformers] [--json OUT.json]

Each system is a set of functions taking the model path and the thread
count and returning figures (None where a system cannot give one), so
that all columns fill one table:

  decode(model, threads)  -> {"pp128": tok/s, "tg64": tok/s}
      prompt processing of 128 tokens and generation of 64, batch 1;
  rss(model, threads)     -> {"rss_mib": peak RSS of a 64-token generation,
                              "system_info": what the binary printed}
  serve(model, threads, clients) -> {"tok_s": aggregate generated tok/s,
                              "ttft_p50_ms", "ttft_p99_ms", "requests"}
      an OpenAI-compatible /v1/completions server, `clients` concurrent
      clients each sending --requests streaming requests of --tokens
      tokens at temperature 0, one after the other; TTFT is the time to
      the first server-sent event carrying text.

llama.cpp: bench/llm/setup-llamacpp.sh's build (build/llamacpp/bin, or
$SFLOW_LLAMACPP/bin): `llama-bench -p 128 -n 64 -t T -o json`,
`llama-completion` under wait4() for the RSS, `llama-server --parallel 16`
(continuous batching, its default) for serving.

sflow: `build/bin/sflowc` compiles
  - bench/llm/decode.sflow (`--path FILE --threads T`, printing
    `RESULT llm_decode prompt=128 gen=64 prefill_tok_s=X decode_tok_s=Y`) for decode();
  - examples/chat.sflow (`--model FILE --prompt TEXT --max-tokens 64
    --temperature 0 --threads T`) under wait4() for rss();
  - examples/llm_serve.sflow (`--model FILE --port P --threads T`) for
    serve(), loaded by the same client as llama-server.
A program that is missing prints "sflow: not built yet (... missing)";
no figure is ever filled in for it.

transformers: the venv scripts/install-benchdeps.sh --llm makes with
SFLOW_LLMREF_LOGITS=1 (build/llmref, or $SFLOW_LLMREF):
transformers loads the same GGUF dequantized to f32, torch at T threads,
prefill of 128 tokens and 64 greedy steps with the KV cache.

Timings on a shared 2-core machine are noisy: run it alone.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = ("The history of the city begins with a small settlement on the river, where "
          "farmers and traders met each season to exchange grain, wool and news. Over")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_rss(argv, env=None, timeout=600):
    """Runs argv to completion; returns (rc, peak RSS MiB, stdout, stderr)
    from wait4() of the child itself."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        deadline = time.time() + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (p.returncode, ru.ru_maxrss / 1024.0, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


# ---- the serving client: plain http.client, SSE parsed by hand ----------

def stream_completion(port, prompt, tokens, timeout=300):
    """One streaming /v1/completions request; returns (ttft_s, n_tokens,
    total_s).  n_tokens is the server's usage count where it sends one,
    else the number of events carrying text."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True},
                       "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("/v1/completions: HTTP %d: %s" % (r.status, r.read()[:300]))
    ttft, events, usage = None, 0, None
    for raw in r:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        if ev.get("usage") and ev["usage"].get("completion_tokens") is not None:
            usage = ev["usage"]["completion_tokens"]
        ch = ev.get("choices") or []
        if ch and ch[0].get("text"):
            events += 1
            if ttft is None:
                ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    c.close()
    return ttft if ttft is not None else total, usage if usage is not None else events, total


def load(port, clients, requests, tokens):
    """`clients` threads, each `requests` streaming requests in turn."""
    results, errors = [], []
    lock = threading.Lock()

    def client(i):
        for j in range(requests):
            try:
                # A distinct prompt per request: no client reuses another's cache.
                r = stream_completion(port, "(%d.%d) %s" % (i, j, PROMPT), tokens)
            except Exception as e:  # noqa: BLE001 (reported, not hidden)
                with lock:
                    errors.append(str(e))
                return
            with lock:
                results.append(r)

    th = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("%d requests failed, first: %s" % (len(errors), errors[0]))
    ttfts = sorted(r[0] for r in results)
    return {"tok_s": sum(r[1] for r in results) / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p99_ms": 1000 * ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))],
            "requests": len(results)}


def wait_ready(proc, port, path, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited with %d before answering %s" % (proc.returncode, path))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not answer %s in %d s" % (path, timeout))


def serve_with(argv, port, health, clients_list, requests, tokens, log):
    """Starts the server argv, loads it at each client count, stops it."""
    with open(log, "w") as lf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_ready(proc, port, health)
        stream_completion(port, PROMPT, 8)  # warm-up
        return {c: load(port, c, requests, tokens) for c in clients_list}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- llama.cpp ------------------------------------------------------------

class LlamaCpp:
    name = "llama.cpp"

    def __init__(self, args):
        d = os.environ.get("SFLOW_LLAMACPP") or os.path.join(args.build, "llamacpp")
        self.bin = os.path.join(d, "bin")
        self.args = args
        self.missing = None
        for t in ("llama-bench", "llama-completion", "llama-server"):
            if not os.access(os.path.join(self.bin, t), os.X_OK):
                self.missing = "llama.cpp: not built (%s missing: bash bench/llm/setup-llamacpp.sh)" % (
                    os.path.join(self.bin, t))
                break
        self.build = None

    def decode(self, model, threads):
        p = subprocess.run([os.path.join(self.bin, "llama-bench"), "-m", model, "-p", "128", "-n", "64",
                            "-t", str(threads), "-r", str(self.args.reps), "-o", "json"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError("llama-bench exited %d:\n%s" % (p.returncode, p.stderr[-1500:]))
        rows = json.loads(p.stdout)
        out = {}
        for r in rows:
            key = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
            out[key] = r["avg_ts"]
            out[key + "_sd"] = r["stddev_ts"]
            self.build = "%s (build %s), %s" % (r.get("build_commit"), r.get("build_number"),
                                                 r.get("cpu_info"))
        return out

    def rss(self, model, threads):
        rc, mib, out, err = run_rss([os.path.join(self.bin, "llama-completion"), "-m", model, "-p", PROMPT,
                                     "-n", "64", "-t", str(threads), "--temp", "0", "-no-cnv",
                                     "--no-warmup", "--ignore-eos"])
        if rc != 0:
            raise RuntimeError("llama-completion exited %d: %s" % (rc, err[-500:]))
        info = [l[l.index("system_info"):] for l in (err + out).splitlines() if "system_info" in l]
        return {"rss_mib": mib, "system_info": info[0] if info else None}

    def serve(self, model, threads, clients_list):
        port = free_port()
        slots = max(clients_list)
        ctx = slots * (self.args.tokens + 128)
        argv = [os.path.join(self.bin, "llama-server"), "-m", model, "-t", str(threads),
                "--parallel", str(slots), "--cont-batching", "-c", str(ctx),
                "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
        self.serve_argv = argv
        return serve_with(argv, port, "/health", clients_list, self.args.requests, self.args.tokens,
                          os.path.join(self.args.logdir, "llama-server-t%d.log" % threads))


# ---- sflow ----------------------------------------------------------------

class Sflow:
    name = "sflow"

    def __init__(self, args):
        self.args = args
        self.sflowc = os.path.join(args.build, "bin", "sflowc")
        self.exe = {}
        self.missing = None
        if not os.access(self.sflowc, os.X_OK):
            self.missing = "sflow: not built yet (%s missing)" % self.sflowc

    def compile(self, rel):
        """The executable of ROOT/rel, or None (with the reason printed once)
        when the program is not there yet."""
        if rel in self.exe:
            return self.exe[rel]
        src = os.path.join(ROOT, rel)
        if self.missing or not os.path.exists(src):
            print("sflow: not built yet (%s missing)" % (rel if not self.missing else self.sflowc),
                  flush=True)
            self.exe[rel] = None
            return None
        exe = os.path.join(self.args.logdir, os.path.basename(rel)[:-6])
        subprocess.run([self.sflowc, src, "-o", exe], check=True)
        self.exe[rel] = exe
        return exe

    def decode(self, model, threads):
        exe = self.compile("bench/llm/decode.sflow")
        if not exe:
            return None
        p = subprocess.run([exe, "--path", model, "--threads", str(threads)], capture_output=True,
                           text=True, check=True)
        out = {}
        for l in p.stdout.splitlines():
            f = l.split()
            if len(f) >= 2 and f[0] == "RESULT" and f[1] == "llm_decode":
                kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
                out["pp128"] = float(kv["prefill_tok_s"])
                out["tg64"] = float(kv["decode_tok_s"])
        if not out:
            raise RuntimeError("bench/llm/decode.sflow printed no RESULT llm_decode line:\n" + p.stdout[-500:])
        return out

    def rss(self, model, threads):
        exe = self.compile("examples/chat.sflow")
        if not exe:
            return None
        rc, mib, out, err = run_rss([exe, "--model", model, "--prompt", PROMPT, "--raw",
                                     "--max-tokens", "64", "--temperature", "0", "--threads",
                                     str(threads)])
        if rc != 0:
            raise RuntimeError("examples/chat.sflow exited %d: %s" % (rc, err[-500:]))
        return {"rss_mib": mib, "system_info": None}

    def serve(self, model, threads, clients_list):
        exe = self.compile("examples/llm_serve.sflow")
        if not exe:
            return None
        port = free_port()
        argv = [exe, "--model", model, "--port", str(port), "--threads", str(threads)]
        return serve_with(argv, port, "/healthz", clients_list, self.args.requests, self.args.tokens,
                          os.path.join(self.args.logdir, "llm_serve-t%d.log" % threads))


# ---- transformers (torch on the CPU) ---------------------------------------

TRANSFORMERS_DECODE = r'''
import os, sys, time, json
import torch
from transformers import AutoModelForCausalLM
path, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
m = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                         dtype=torch.float32)
m.eval()
ids = torch.randint(100, 40000, (1, 128), generator=torch.Generator().manual_seed(0))
def prefill():
    return m(ids, use_cache=True)
def decode():
    out = m(ids[:, :1], use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    t0 = time.perf_counter()
    for _ in range(64):
        out = m(tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return time.perf_counter() - t0
with torch.inference_mode():
    prefill(); decode()
    pp, tg = [], []
    for _ in range(reps):
        t0 = time.perf_counter(); prefill(); pp.append(128 / (time.perf_counter() - t0))
        tg.append(64 / decode())
print(json.dumps({"pp128": sum(pp) / len(pp), "tg64": sum(tg) / len(tg),
                  "torch": torch.__version__, "transformers": __import__("transformers").__version__}))
'''


class Transformers:
    name = "transformers"

    def __init__(self, args):
        self.args = args
        self.py = None
        for d in (os.environ.get("SFLOW_LLMREF"), os.path.join(args.build, "llmref")):
            if d and os.access(os.path.join(d, "bin", "python"), os.X_OK):
                py = os.path.join(d, "bin", "python")
                if subprocess.run([py, "-c", "import torch, transformers, gguf"],
                                  capture_output=True).returncode == 0:
                    self.py = py
                    break
        self.missing = None if self.py else (
            "transformers: n/a (no venv with torch+transformers+gguf: "
            "SFLOW_LLMREF_LOGITS=1 scripts/install-benchdeps.sh --llm)")

    def decode(self, model, threads):
        p = subprocess.run([self.py, "-c", TRANSFORMERS_DECODE, model, str(threads),
                            str(min(self.args.reps, 3))], capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        if p.returncode != 0:
            raise RuntimeError("transformers decode exited %d:\n%s" % (p.returncode, p.stderr[-1500:]))
        r = json.loads(p.stdout.strip().splitlines()[-1])
        self.build = "torch %s, transformers %s (GGUF dequantized to f32)" % (r.pop("torch"),
                                                                            r.pop("transformers"))
        return r

    def rss(self, model, threads):
        return None

    def serve(self, model, threads, clients_list):
        return None


# ---- the table --------------------------------------------------------------

def fmt(v, spec="%.1f"):
    return "—" if v is None else spec % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--clients", default="1,16")
    ap.add_argument("--tokens", type=int, default=64, help="tokens each serving request generates")
    ap.add_argument("--requests", type=int, default=2, help="requests each client sends in turn")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="llamacpp,sflow,transformers")
    ap.add_argument("--no-serve", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    models = os.environ.get("SFLOW_MODELS") or os.path.join(args.build, "models")
    model = args.model or os.path.join(models, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(model):
        sys.exit("bench/llm/llamacpp.py: %s: no such model (scripts/install-models.sh)" % model)
    threads = [int(t) for t in args.threads.split(",")]
    clients = [int(c) for c in args.clients.split(",")]
    kinds = {"llamacpp": LlamaCpp, "sflow": Sflow, "transformers": Transformers}
    report = {"model": model, "threads": threads, "clients": clients, "tokens": args.tokens,
              "requests": args.requests, "systems": {}}
    with tempfile.TemporaryDirectory() as tmp:
        args.logdir = tmp
        systems = []
        for k in args.only.split(","):
            s = kinds[k](args)
            if s.missing:
                print(s.missing, flush=True)
                report["systems"][s.name] = {"missing": s.missing}
                continue
            systems.append(s)
        for s in systems:
            r = report["systems"][s.name] = {}
            for t in threads:
                print("== %s, %d thread(s)" % (s.name, t), flush=True)
                r["decode_t%d" % t] = s.decode(model, t)
                r["rss_t%d" % t] = s.rss(model, t)
                if not args.no_serve:
                    sv = s.serve(model, t, clients)
                    r["serve_t%d" % t] = None if sv is None else {str(c): v for c, v in sv.items()}
                print(json.dumps({k: v for k, v in r.items() if k.endswith("t%d" % t)}), flush=True)
            if getattr(s, "build", None):
                r["build"] = s.build
            if getattr(s, "serve_argv", None):
                r["serve_argv"] = " ".join(os.path.basename(a) if i == 0 else a
                                           for i, a in enumerate(s.serve_argv))
    names = list(report["systems"])
    rows = []
    for t in threads:
        rows.append(("prompt tok/s, pp128, %d thr" % t, lambda r, t=t: (r.get("decode_t%d" % t) or {}).get("pp128")))
        rows.append(("decode tok/s, tg64, %d thr" % t, lambda r, t=t: (r.get("decode_t%d" % t) or {}).get("tg64")))
        rows.append(("peak RSS MiB, 64 tokens, %d thr" % t, lambda r, t=t: (r.get("rss_t%d" % t) or {}).get("rss_mib")))
        if not args.no_serve:
            for c in clients:
                rows.append(("serve tok/s, %d client(s), %d thr" % (c, t),
                             lambda r, t=t, c=c: ((r.get("serve_t%d" % t) or {}).get(str(c)) or {}).get("tok_s")))
                rows.append(("  TTFT p50 ms, %d client(s)" % c,
                             lambda r, t=t, c=c: ((r.get("serve_t%d" % t) or {}).get(str(c)) or {}).get("ttft_p50_ms")))
                rows.append(("  TTFT p99 ms, %d client(s)" % c,
                             lambda r, t=t, c=c: ((r.get("serve_t%d" % t) or {}).get(str(c)) or {}).get("ttft_p99_ms")))
    w = max(len(r[0]) for r in rows)
    print()
    print("| %-*s | %s |" % (w, "", " | ".join("%12s" % n for n in names)))
    print("|%s|%s|" % ("-" * (w + 2), "|".join("-" * 14 for _ in names)))
    for label, get in rows:
        print("| %-*s | %s |" % (w, label, " | ".join(
            "%12s" % fmt(None if "missing" in report["systems"][n] else get(report["systems"][n]))
            for n in names)))
    for n in names:
        s = report["systems"][n]
        if s.get("build"):
            print("%s build: %s" % (n, s["build"]))
        for t in threads:
            info = (s.get("rss_t%d" % t) or {}).get("system_info")
            if info:
                print("%s %s" % (n, info))
                break
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
