#!/usr/bin/env python3
"""bench_harness_test.py: bench/llm/llamacpp.py's own parts, without
llama.cpp, torch or a decoder (none is needed, nothing is downloaded).

  - its serving client against a real HTTP server on loopback that streams
    OpenAI-style server-sent events with a known delay before the first
    token: the token counts (from `usage`, and from the events when the
    server sends no usage), TTFT at least the delay and p50 <= p99, the
    aggregate tokens/s at most what the server's pacing allows, every
    request sent (16 clients x 2), and an HTTP error reported, not counted;
  - the whole script with a build folder that has neither llama.cpp nor
    sflowc: exit 0, each system's "not built" line, and no figure in the
    table (every cell "—");
  - a missing model: exit non-zero naming the file.

    bench_harness_test.py [--root DIR]
"""
import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

FIRST_DELAY = 0.05   # seconds before the first token of every request
TOKEN_GAP = 0.005    # seconds between tokens


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    usage = True
    seen = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.seen.append(body)
        if self.path != "/v1/completions" or body.get("max_tokens", 0) <= 0:
            msg = b'{"error": "max_tokens"}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(FIRST_DELAY)
        for i in range(body["max_tokens"]):
            ev = {"choices": [{"text": " t%d" % i, "index": 0}]}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(TOKEN_GAP)
        if Handler.usage:
            ev = {"choices": [], "usage": {"completion_tokens": body["max_tokens"]}}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def check(cond, what, fails):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        fails.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.root, "bench", "llm"))
    import llamacpp as L

    fails = []
    # 16 clients connect at once: socketserver's default backlog of 5
    # resets the rest when the machine is loaded (ECONNRESET seen in CI-like runs).
    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 128
    srv = Server(("127.0.0.1", 0), Handler)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    ttft, n, total = L.stream_completion(port, "hello", 10)
    check(n == 10, "one request: 10 tokens counted from usage (got %d)" % n, fails)
    check(FIRST_DELAY <= ttft < total, "TTFT %.3f s >= the server's %.3f s delay and < the total %.3f s"
          % (ttft, FIRST_DELAY, total), fails)
    sent = Handler.seen[-1]
    check(sent.get("stream") is True and sent.get("temperature") == 0 and sent.get("max_tokens") == 10,
          "the request streams at temperature 0 with max_tokens", fails)

    Handler.usage = False
    _, n, _ = L.stream_completion(port, "hello", 7)
    check(n == 7, "no usage sent: 7 tokens counted from the events (got %d)" % n, fails)
    Handler.usage = True

    Handler.seen.clear()
    r = L.load(port, 16, 2, 8)
    check(r["requests"] == 32 and len(Handler.seen) == 32, "16 clients x 2 requests: 32 sent and answered "
          "(%d, %d)" % (r["requests"], len(Handler.seen)), fails)
    check(len({b["prompt"] for b in Handler.seen}) == 32, "every request has its own prompt", fails)
    # Each client's two requests take at least 2 x (delay + 8 gaps).
    bound = 16 * 2 * 8 / (2 * (FIRST_DELAY + 8 * TOKEN_GAP))
    check(0 < r["tok_s"] <= bound, "aggregate %.0f tok/s within the pacing's bound %.0f" % (r["tok_s"], bound),
          fails)
    check(FIRST_DELAY * 1000 <= r["ttft_p50_ms"] <= r["ttft_p99_ms"],
          "TTFT p50 %.1f ms <= p99 %.1f ms, both >= %.0f ms" % (r["ttft_p50_ms"], r["ttft_p99_ms"],
                                                              FIRST_DELAY * 1000), fails)
    try:
        L.load(port, 2, 1, 0)
        check(False, "an HTTP 400 raises", fails)
    except RuntimeError as e:
        check("HTTP 400" in str(e), "an HTTP 400 is reported, not counted: %s" % e, fails)
    srv.shutdown()

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m.gguf")
        open(model, "wb").write(b"GGUF")
        env = dict(os.environ, SFLOW_LLAMACPP=os.path.join(tmp, "none"), SFLOW_LLMREF=os.path.join(tmp, "none"))
        p = subprocess.run([sys.executable, os.path.join(a.root, "bench", "llm", "llamacpp.py"), "--build", tmp,
                            "--model", model, "--only", "llamacpp,sflow"], capture_output=True, text=True,
                           env=env, timeout=60)
        out = p.stdout
        check(p.returncode == 0, "nothing built: exit 0 (got %d: %s)" % (p.returncode, p.stderr[-300:]), fails)
        check("llama.cpp: not built" in out and "setup-llamacpp.sh" in out,
              "llama.cpp's missing build is named with its setup script", fails)
        check("sflow: not built yet" in out, "sflow's missing build is said", fails)
        rows = [l for l in out.splitlines() if l.startswith("| ") and "tok/s" in l]
        cells = [c.strip() for l in rows for c in l.strip("|").split("|")[1:]]
        check(rows and cells and all(c == "—" for c in cells),
              "no figure filled in: %d cells, all \"—\"" % len(cells), fails)
        p = subprocess.run([sys.executable, os.path.join(a.root, "bench", "llm", "llamacpp.py"), "--build", tmp,
                            "--model", os.path.join(tmp, "absent.gguf")], capture_output=True, text=True,
                           env=env, timeout=60)
        check(p.returncode != 0 and "absent.gguf" in p.stderr and "no such model" in p.stderr,
              "a missing model: exit %d naming it" % p.returncode, fails)

    if fails:
        print("FAIL: %d checks failed" % len(fails))
        return 1
    print("ok: bench/llm/llamacpp.py's client and table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
