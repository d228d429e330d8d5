#!/usr/bin/env python3
"""examples/llm_serve.sflow over loopback HTTP: the OpenAI client, continuous batching, bad requests.

    serve_test.py --sflowc SFLOWC [--models DIR]

Starts the server (SmolLM2-135M-Instruct, --port 0) and checks:
  openai    the real `openai` client (pinned in scripts/install-pydeps.sh)
            streams a greedy chat completion equal to examples/chat.sflow's
            answer ("The capital of France is Paris."), and a non-stream
            completion has usage and finish_reason "length"
  batching  6 concurrent requests (chat and completions, prompts of
            different lengths, max_tokens 6..40, three sampled with seeds),
            each equal to the same request sent alone, the greedy chat ones
            to chat.sflow's; the server's log shows a batch of more than one
  bad       each bad field a 400 with an OpenAI error body naming it
  cancel    a client that disconnects mid-stream is dropped ("dropped" in
            the log) while a concurrent request completes unchanged
  budget    --max-batch-tokens 100 (a pool of 7 KV blocks): 3 requests of 45
            KV tokens (3 blocks) run at most 2 at a time (the third waits for
            blocks), each equal to alone; /metrics has the blocks in use (at
            most 7, back to 0 after) and total; 125 tokens is a 400
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import pydeps  # noqa: E402

pydeps.ensure("serve_test", "openai")
import openai  # noqa: E402

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
failures = []


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
        if detail:
            print("  " + str(detail)[:2000])


class Server:
    def __init__(self, exe, model, extra=()):
        self.log = tempfile.NamedTemporaryFile(prefix="llm-serve-", suffix=".log", delete=False)
        self.p = subprocess.Popen([exe, "--model", model, "--port", "0", "--max-batch", "16"] + list(extra),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            text = self.text()
            if "listening on" in text:
                break
            if self.p.poll() is not None or time.time() - t0 > 60:
                raise SystemExit("serve_test: the server did not start:\n" + text)
            time.sleep(0.05)
        line = [l for l in text.splitlines() if l.startswith("listening on")][0]
        self.url = line.split()[2]
        self.port = int(self.url.rsplit(":", 1)[1])

    def text(self):
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            check(False, "the server stops on SIGTERM")
        os.unlink(self.log.name)


def post(url, path, body, timeout=120):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def output(url, path, body):
    """The text of a request, streamed or not, and its finish_reason."""
    status, text = post(url, path, body)
    if status != 200:
        return "HTTP %d %s" % (status, text), None
    if not body.get("stream"):
        c = json.loads(text)["choices"][0]
        return (c["message"]["content"] if "message" in c else c["text"]), c["finish_reason"]
    out, fin = "", None
    for ev in text.split("\n\n"):
        if not ev.startswith("data: ") or ev == "data: [DONE]":
            continue
        c = json.loads(ev[6:])["choices"][0]
        out += c.get("text") or (c.get("delta") or {}).get("content") or ""
        fin = c.get("finish_reason") or fin
    return out, fin


def chat_sflow(chat_exe, model, prompt, max_tokens):
    p = subprocess.run([chat_exe, "--model", model, "--prompt", prompt, "--max-tokens",
                        str(max_tokens)], capture_output=True, text=True, timeout=120)
    return p.stdout[:-1] if p.stdout.endswith("\n") else p.stdout


def case_openai(srv, chat_exe, model):
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
    q = "What is the capital of France?"
    want = chat_sflow(chat_exe, model, q, 32)
    check(want == "The capital of France is Paris.", "chat.sflow answers %r" % want)
    parts, fin = [], None
    for ch in client.chat.completions.create(model="smollm2", stream=True, temperature=0,
                                             max_tokens=32,
                                             messages=[{"role": "user", "content": q}]):
        if ch.choices and ch.choices[0].delta.content:
            parts.append(ch.choices[0].delta.content)
        if ch.choices and ch.choices[0].finish_reason:
            fin = ch.choices[0].finish_reason
    got = "".join(parts)
    check(got == want and fin == "stop" and len(parts) > 1,
          "openai client: streamed chat (%d chunks) %r, finish %s" % (len(parts), got, fin))
    r = client.completions.create(model="smollm2", prompt="The capital of France is",
                                  max_tokens=5, temperature=0)
    u = r.usage
    check(r.choices[0].finish_reason == "length" and r.choices[0].text.startswith(" Paris")
          and u.prompt_tokens == 5 and u.completion_tokens == 5 and u.total_tokens == 10,
          "openai client: completion %r, usage %s/%s/%s, finish %s" % (
              r.choices[0].text, u.prompt_tokens, u.completion_tokens, u.total_tokens,
              r.choices[0].finish_reason))


def case_batching(srv, chat_exe, model):
    reqs = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                                  "temperature": 0, "max_tokens": 40}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Name three colors."}],
                                  "temperature": 0, "max_tokens": 24, "stream": True}),
        ("/v1/completions", {"prompt": "Once upon a time", "temperature": 0.8, "seed": 7,
                             "max_tokens": 30}),
        ("/v1/completions", {"prompt": "The quick brown fox jumps over the lazy dog. " * 6,
                             "temperature": 1.0, "top_k": 40, "seed": 3, "max_tokens": 12,
                             "stream": True}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Write a haiku about the sea."}],
                                  "temperature": 0.7, "top_p": 0.9, "seed": 11, "max_tokens": 20}),
        ("/v1/completions", {"prompt": "1, 2, 3, 4,", "temperature": 0, "max_tokens": 6}),
    ]
    alone = [output(srv.url, p, b) for p, b in reqs]
    before = srv.text()
    got = [None] * len(reqs)

    def one(i):
        got[i] = output(srv.url, *reqs[i])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(reqs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, (p, b) in enumerate(reqs):
        check(got[i] == alone[i] and alone[i][1] in ("stop", "length"),
              "batched request %d (%s, temperature %s) equals it alone: %r" % (
                  i, p, b["temperature"], got[i][0][:60]), "alone: %r" % (alone[i],))
    for i in (0, 1):
        q = reqs[i][1]["messages"][0]["content"]
        want = chat_sflow(chat_exe, model, q, reqs[i][1]["max_tokens"])
        check(got[i][0] == want, "greedy chat %d equals chat.sflow's %r" % (i, want), got[i][0])
    sizes = [int(l.split()[1]) for l in srv.text()[len(before):].splitlines()
             if l.startswith("batch ")]
    check(sizes and max(sizes) > 1, "the log shows batches of %s sequences" % sorted(set(sizes)))
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % srv.metrics_port, timeout=10) as r:
        prom = r.read().decode()
    val = {}
    for l in prom.splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            val[k] = float(v)
    steps, tokens = val.get("llm_decode_step_seconds_count", 0), val.get("llm_decode_tokens_total", 0)
    check("# TYPE llm_batch_sequences gauge" in prom and steps > 0 and tokens > steps,
          "--metrics-port has the program's batch figures (std.metrics): %d tokens in %d decode steps"
          % (tokens, steps), prom[:600])
    chunks = val.get("llm_prefill_chunks_total", 0)
    check(chunks >= len(reqs) + 7,
          "--prefill-chunk 8: %d prompts prefilled in %d chunks (%d tokens), each answer as alone" % (
              len(reqs), chunks, val.get("llm_prefill_tokens_total", 0)))


def case_bad(srv):
    chat = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -3}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 9000}, "max_tokens"),
        ("/v1/completions", {"prompt": "hello " * 9000}, "prompt"),
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {"max_tokens": 5}, "prompt"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, "temperature"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
        ("/v1/completions", {"prompt": "x", "top_k": 1.5}, "top_k"),
        ("/v1/completions", {"prompt": "x", "seed": "s"}, "seed"),
        ("/v1/completions", {"prompt": "x", "stop": 5}, "stop"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream"),
        (chat, {"messages": "hi"}, "messages"),
        (chat, {"messages": []}, "messages"),
        (chat, {"messages": [{"role": "user"}]}, "messages[0].content"),
        (chat, {"messages": [{"content": "hi"}]}, "messages[0].role"),
        (chat, {"messages": ["hi"]}, "messages[0]"),
        (chat, {"messages": msgs, "max_tokens": 0}, "max_tokens"),
    ]
    for path, body, field in cases:
        status, text = post(srv.url, path, body)
        try:
            err = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            err = {}
        check(status == 400 and err.get("param") == field and field in err.get("message", "")
              and err.get("type") == "invalid_request_error",
              "%s %s: %d naming %s" % (path, json.dumps(body)[:50], status, field), text)


def case_cancel(srv):
    body = json.dumps({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 400,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    first = b""
    while b"data: " not in first:
        first += s.recv(4096)
    other = {"prompt": "1, 2, 3, 4,", "temperature": 0, "max_tokens": 20}
    alone = output(srv.url, "/v1/completions", other)
    res = [None]
    t = threading.Thread(target=lambda: res.__setitem__(0, output(srv.url, "/v1/completions", other)))
    t.start()
    s.close()
    t.join()
    deadline = time.time() + 20
    while "dropped" not in srv.text() and time.time() < deadline:
        time.sleep(0.1)
    check("dropped" in srv.text(), "a client gone mid-stream is dropped",
          srv.text()[-500:])
    check(res[0] == alone, "a concurrent request completes unchanged: %r" % (res[0],))
    check(output(srv.url, "/v1/completions", other) == alone, "the server still answers after")


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def metric_values(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        prom = r.read().decode()
    val = {}
    for l in prom.splitlines():
        if l and not l.startswith("#"):
            k, v = l.rsplit(" ", 1)
            val[k] = float(v)
    return val


def case_budget(exe, model):
    """--max-batch-tokens 100 (a pool of 7 blocks of 16 tokens): requests of
    5 + 40 tokens (3 blocks each) run two at a time, the third waits for
    blocks, all equal to alone; /metrics has the pool's blocks in use
    (never above 7, back to 0) and total; one of 125 tokens is a 400."""
    mport = free_port()
    srv = Server(exe, model, ["--max-batch-tokens", "100", "--metrics-port", str(mport)])
    try:
        body = {"prompt": "Once upon a time", "temperature": 0, "max_tokens": 40}
        alone = output(srv.url, "/v1/completions", body)
        got = [None] * 3
        ts = [threading.Thread(target=lambda i=i: got.__setitem__(
            i, output(srv.url, "/v1/completions", body))) for i in range(3)]
        seen = []
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            seen.append(metric_values(mport).get("llm_kv_blocks_in_use", -1))
            time.sleep(0.02)
        for t in ts:
            t.join()
        sizes = [int(l.split()[1]) for l in srv.text().splitlines() if l.startswith("batch ")]
        check(all(g == alone for g in got) and sizes and max(sizes) <= 2,
              "--max-batch-tokens 100: 3 requests of 45 tokens, batches %s, each equal to alone"
              % sorted(set(sizes)), got)
        time.sleep(0.2)
        val = metric_values(mport)
        check(val.get("llm_kv_blocks_total") == 7 and seen and 0 < max(seen) <= 7
              and val.get("llm_kv_blocks_in_use") == 0 and val.get("llm_kv_blocks_reserved") == 0,
              "/metrics: a pool of %s KV blocks, in use up to %s while the requests ran (of 7), "
              "%s once they ended" % (val.get("llm_kv_blocks_total"), max(seen) if seen else None,
                                      val.get("llm_kv_blocks_in_use")), str(val))
        status, text = post(srv.url, "/v1/completions", dict(body, max_tokens=120))
        check(status == 400 and "--max-batch-tokens" in text and '"max_tokens"' in text,
              "a request larger than --max-batch-tokens: 400 naming max_tokens", text)
    finally:
        srv.stop()


def build(sflowc, src, out):
    subprocess.run([sflowc, src, "-o", out], check=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--models", default=None, help="default: $SFLOW_MODELS or <build>/models")
    args = ap.parse_args()
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(args.sflowc)))
    models = args.models or os.environ.get("SFLOW_MODELS") or os.path.join(build_dir, "models")
    model = os.path.join(models, "smollm2-135m-instruct", GGUF)
    if not os.path.isfile(model):
        sys.exit("serve_test: no model at %s; run `bash scripts/install-models.sh`" % model)
    with tempfile.TemporaryDirectory(prefix="sflow-llm-serve-") as tmp:
        exe = build(args.sflowc, os.path.join(ROOT, "examples", "llm_serve.sflow"),
                    os.path.join(tmp, "llm_serve"))
        chat_exe = build(args.sflowc, os.path.join(ROOT, "examples", "chat.sflow"),
                         os.path.join(tmp, "chat"))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
        sock.close()
        # Prefill chunks of 8: the 60-token prompts below take 8 steps, beside the others' decode.
        srv = Server(exe, model, ["--metrics-port", str(metrics_port), "--prefill-chunk", "8"])
        srv.metrics_port = metrics_port
        try:
            case_openai(srv, chat_exe, model)
            case_batching(srv, chat_exe, model)
            case_bad(srv)
            case_cancel(srv)
        finally:
            srv.stop()
        case_budget(exe, model)
    if failures:
        sys.exit("serve_test: %d check(s) failed" % len(failures))
    print("serve_test: all checks passed")


if __name__ == "__main__":
    main()
