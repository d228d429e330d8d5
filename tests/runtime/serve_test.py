#!/usr/bin/env python3
"""serve_test.py — std.serve over real HTTP on loopback (docs/serve.md).

examples/serve.sflow (the digits MLP behind POST /predict, a no-op
behind POST /noop) is compiled once and started for each case on an
ephemeral port; a Python client (http.client, raw sockets for what
http.client cannot send) checks:

  answers      each answer's label and logits against the model computed
               offline in numpy from the safetensors file the program
               saved (relu(x W1^T + b1) W2^T + b2), 60 rows one by one
               and 240 from 16 concurrent clients; every answer right
  batching     25 concurrent requests to one replica with max_batch 10:
               batches of at most 10 summing to 25, fewer than 25 batches;
               with max_batch 1 exactly 25 batches of 1
  bad_input    400 naming the field ($.pixels[1]) and the line:column of
               bad JSON, a missing field, invalid UTF-8; 404; 405 with
               Allow; 413 over --max_body (declared and chunked); bytes that
               are not HTTP; a 100 KiB header; and the server still
               answers right afterwards
  slow_client  a client sending its request in 40 pieces 50 ms apart (2 s)
               holds up no one: at least 10 other requests answer
               meanwhile, median under 0.1 s, none over 1.5 s; the slow one
               gets its answer at the end
  token        --token: 401 without or with a wrong bearer token (and on
               /metrics), 200 with it; /healthz open
  queue_full   one replica, a queue of 2, batches held 1 s: of 6
               concurrent requests 2 are answered 200 and 4 get 503 with
               Retry-After: 1
  metrics      /metrics read by prometheus_client's text parser: the
               counters equal the requests sent by code, histogram buckets
               cumulative with +Inf equal to _count, replicas 2, a
               queue length per replica
  shutdown     SIGTERM while 12 requests wait in a 600 ms batch: all 12
               answered right, new connections refused, exit 0 with
               "served 12 requests"
  canary       v1 and v2 behind /predict at weights 90/10 under 6 clients:
               v2 answers 3-20%; POST /admin moves all traffic to v2 at
               run time; no request fails, every answer right
  rollout      POST /admin rollout to a model with the last bias + 1 while
               6 clients run: each answer is right by the old or the new
               model, none fails, afterwards all come from the new one;
               replicas 2 on slots 0-3 (one at a time replaced)
  killed_replica  a request that fails replica 0's loop (--faults): it is
               answered right by replica 1 (retries counted); a rolling
               update at once; the dead replica replaced (replicas back
               to 2), 4 clients see no failure; "served N" at SIGTERM is
               every 200 the clients got
  autoscale    --replicas 1 --max_replicas 3 under 32 clients: a second
               replica within 10 s, back to 1 within 20 s after the load
  stuck_replica  a request its replica holds for 3 s, --request_timeout_s 1:
               504 after about 1 s naming the limit; the late answer is
               dropped and the server answers right afterwards
  admin_token  without --token: /admin 401 unless it carries the token
               printed at start, /predict open, the fault inputs plain
               pixels (no replica lost); --faults without --token refused
  bad_rollout  rollouts of /etc/passwd, an empty file and a safetensors of
               another shape answered 400, ok false, naming the file, under 3
               clients with no failure; the replicas unchanged
  slowloris    64 connections trickling their heads against 64 slots, 16
               per address, head_timeout_s 2: a client from 127.0.0.2
               answered within 1.5 s, one from 127.0.0.1 within 4.5 s; 16
               slow ones answered 408, none past the deadline
  shutdown_race  20 runs: SIGTERM at a random moment after 16 requests
               are taken: every one answered whole and right, "served 16"
  shutdown_big_answer  an 8 MiB answer read only after the SIGTERM
               arrives whole
  not_ready    a route without a replica yet: 503 with Retry-After and
               "no replica ... ready", then 200 once it has one

prometheus_client and numpy come from scripts/install-pydeps.sh's
virtual environment (build/pydeps or $SFLOW_PYDEPS); the test re-executes
itself there when the running Python lacks them.

    serve_test.py --sflowc build/bin/sflowc [CASE ...]
"""
import argparse
import faulthandler
import http.client
import json
import re
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pydeps  # noqa: E402

pydeps.ensure("serve_test", "numpy", "prometheus_client")
import numpy as np  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "serve.sflow")
SFLOWC = None  # set by main
DIGITS = os.path.join(ROOT, "examples", "data", "digits.csv")


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# ------------------------------------------------------------------ model

def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        check(t["dtype"] == "F32", "%s: dtype %s" % (name, t["dtype"]))
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    return out


def offline_logits(w, pixels):
    x = np.asarray(pixels, dtype=np.float32) / np.float32(16.0)
    h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], np.float32(0))
    return h @ w["fc2.weight"].T + w["fc2.bias"]


def digit_rows(n):
    rows = []
    with open(DIGITS) as f:
        next(f)
        for line in f:
            rows.append([int(v) for v in line.split(",")[:64]])
            if len(rows) == n:
                break
    return rows


def check_answer(w, pixels, status, body, what):
    check(status == 200, "%s: status %d: %r" % (what, status, body))
    got = json.loads(body)
    want = offline_logits(w, pixels)
    check(got["error"] == "", "%s: error %r" % (what, got["error"]))
    check(len(got["logits"]) == 10, "%s: %d logits" % (what, len(got["logits"])))
    diff = float(np.max(np.abs(np.asarray(got["logits"], dtype=np.float32) - want)))
    check(diff <= 1e-5 * max(1.0, float(np.max(np.abs(want)))),
          "%s: logits differ by %g from the offline model: got %s, want %s" %
          (what, diff, got["logits"], want.tolist()))
    check(got["label"] == int(np.argmax(want)),
          "%s: label %d, the offline model says %d" % (what, got["label"], int(np.argmax(want))))


# ----------------------------------------------------------------- server

def flag(flags, name, default=""):
    return flags[flags.index(name) + 1] if name in flags else default


class Server:
    """examples/serve.sflow on an ephemeral port.  auth: send the --token
    with every request (the cases that need --faults, which needs it)."""
    def __init__(self, exe, tmp, *flags, auth=False):
        self.weights = os.path.join(tmp, "weights.safetensors")
        self.auth = {"Authorization": "Bearer " + flag(flags, "--token")} if auth else {}
        # The journal in tmp: a killed server leaves it, and examples/ is the source tree.
        cmd = [exe, "--port", "0", "--weights", self.weights,
               "--checkpoint-dir", os.path.join(tmp, "ckpt-%d" % id(self))] + list(flags)
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=os.path.join(ROOT, "examples"))
        self.out = b""
        deadline = time.time() + 60
        while b"listening on" not in self.out:
            r, _, _ = select.select([self.p.stdout], [], [], max(0.0, deadline - time.time()))
            chunk = os.read(self.p.stdout.fileno(), 4096) if r else b""
            if not chunk:
                err = self.p.stderr.read().decode(errors="replace") if self.p.poll() is not None else ""
                self.kill()
                raise Fail("the server did not start: %r %s" % (self.out, err))
            self.out += chunk
        lines = self.out.decode().splitlines()
        line = [l for l in lines if l.startswith("listening on")][0]
        self.port = int(line.rsplit(":", 1)[1])
        # /admin's token: --admin_token, else --token, else the one printed.
        made = [l.split(": ", 1)[1] for l in lines if l.startswith("admin token: ")]
        self.admin_token = flag(flags, "--admin_token") or flag(flags, "--token") or \
            (made[0] if made else "")
        self.w = read_safetensors(self.weights)

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10):
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=dict(self.auth, **(headers or {})))
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
        finally:
            c.close()

    def predict(self, pixels, c=None):
        body = json.dumps({"pixels": pixels})
        if c is None:
            s, b, _ = self.request("POST", "/predict", body)
            return s, b
        c.request("POST", "/predict", body=body, headers=self.auth)
        r = c.getresponse()
        return r.status, r.read().decode()

    def alive(self):
        if self.p.poll() is not None:
            raise Fail("the server exited with %s: %s" %
                       (self.p.returncode, self.p.stderr.read().decode(errors="replace")))
        s, b, _ = self.request("GET", "/healthz")
        check(s == 200 and b == "ok\n", "/healthz: %d %r" % (s, b))

    def stop(self, timeout=30):
        """SIGTERM; the exit code and stdout."""
        self.p.send_signal(signal.SIGTERM)
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail("the server did not stop within %d s of SIGTERM" % timeout)
        return self.p.returncode, (self.out + out).decode(), err.decode(errors="replace")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def metrics(srv):
    s, body, h = srv.request("GET", "/metrics")
    check(s == 200, "/metrics: %d" % s)
    check(h.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          "/metrics Content-Type %r" % h.get("Content-Type"))
    fams = {}
    for fam in text_string_to_metric_families(body):
        fams[fam.name] = fam
    return fams, body


def batch_sizes(srv, route="/predict"):
    fams, _ = metrics(srv)
    count = total = None
    for s in fams["sflow_serve_batch_size"].samples:
        if s.labels.get("route") != route:
            continue
        if s.name.endswith("_count"):
            count = s.value
        if s.name.endswith("_sum"):
            total = s.value
    return count, total, fams


def parallel(n, fn):
    """fn(i) on n threads; the results in order (an exception re-raised)."""
    out = [None] * n
    def run(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - carried to the caller
            out[i] = e
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    for r in out:
        if isinstance(r, Exception):
            raise r
    return out


# ------------------------------------------------------------------ cases

def case_answers(exe, tmp):
    srv = Server(exe, tmp)
    try:
        rows = digit_rows(300)
        for i, px in enumerate(rows[:60]):
            s, b = srv.predict(px)
            check_answer(srv.w, px, s, b, "row %d" % i)

        def client(k):
            c = srv.conn()
            try:
                for j in range(15):
                    px = rows[60 + k * 15 + j]
                    s, b = srv.predict(px, c)
                    check_answer(srv.w, px, s, b, "client %d request %d" % (k, j))
            finally:
                c.close()
        parallel(16, client)
        count, total, _ = batch_sizes(srv)
        check(total == 300, "batch sizes sum to %s, 300 requests were answered" % total)
        srv.alive()
    finally:
        srv.kill()


def case_batching(exe, tmp):
    for max_batch, wait in ((10, "200"), (1, "1")):
        srv = Server(exe, tmp, "--replicas", "1", "--max_batch", str(max_batch), "--wait_ms", wait)
        try:
            rows = digit_rows(25)
            res = parallel(25, lambda i: srv.predict(rows[i]))
            for i, (s, b) in enumerate(res):
                check_answer(srv.w, rows[i], s, b, "max_batch %d, request %d" % (max_batch, i))
            count, total, fams = batch_sizes(srv)
            check(total == 25, "max_batch %d: batch sizes sum to %s" % (max_batch, total))
            over = [s for s in fams["sflow_serve_batch_size"].samples
                    if s.name.endswith("_bucket") and s.labels.get("route") == "/predict"
                    and s.labels["le"] not in ("+Inf",) and float(s.labels["le"]) >= max_batch]
            check(all(s.value == count for s in over),
                  "max_batch %d: a batch larger than %d: %s" % (max_batch, max_batch, over))
            if max_batch == 1:
                check(count == 25, "max_batch 1: %s batches for 25 requests" % count)
            else:
                check(count < 25, "max_batch 10: %s batches for 25 concurrent requests "
                      "(no batching happened)" % count)
        finally:
            srv.kill()


def raw(port, data, timeout=2):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
        return got
    finally:
        s.close()


def case_bad_input(exe, tmp):
    srv = Server(exe, tmp, "--max_body", "4096")
    try:
        px = digit_rows(1)[0]
        bad = [(b'{"pixels": [1, "x"]}', "$.pixels[1]: expected f32, found a string"),
               (b'{"pixels": [1, 2', "<body>:1:17: unexpected end of JSON"),
               (b'{"pix": []}', 'missing field \\"pixels\\"'),
               (b'{"pixels": [1], "x": "\xff"}', "invalid UTF-8"),
               (b'', "unexpected end of JSON"),
               (b'[1, 2]', "expected")]
        for body, want in bad:
            s, b, _ = srv.request("POST", "/predict", body)
            check(s == 400, "%r: status %d (%s), expected 400" % (body, s, b))
            check(want in b, "%r: the message %r does not say %r" % (body, b, want))
        s, b, _ = srv.request("POST", "/nowhere", b"{}")
        check(s == 404, "/nowhere: %d" % s)
        s, b, h = srv.request("GET", "/predict")
        check(s == 405 and h.get("Allow") == "POST", "GET /predict: %d %s" % (s, h))
        s, b, h = srv.request("DELETE", "/metrics")
        check(s == 405, "DELETE /metrics: %d" % s)
        big = json.dumps({"pixels": [1.0] * 2000}).encode()
        s, b, _ = srv.request("POST", "/predict", big)
        check(s == 413, "a %d-byte body: %d (%s)" % (len(big), s, b))
        # The same body chunked, so no Content-Length announces it.
        chunked = b"POST /predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        for i in range(0, len(big), 1000):
            part = big[i:i + 1000]
            chunked += b"%x\r\n%s\r\n" % (len(part), part)
        chunked += b"0\r\n\r\n"
        got = raw(srv.port, chunked)
        check(got.startswith(b"HTTP/1.1 413"), "a chunked %d-byte body: %r" % (len(big), got[:80]))
        # Not HTTP at all, a request line without a version, a header flood.
        for junk in (os.urandom(3000), b"\x00\x01\x02\r\n\r\n", b"GET /\r\n\r\n",
                     b"POST /predict HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                     b"POST /predict HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n"):
            got = raw(srv.port, junk)
            check(got == b"" or got.startswith(b"HTTP/1.1 4"), "junk %r: answered %r" % (junk[:20], got[:80]))
        huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (100 * 1024) + b"\r\n\r\n"
        got = raw(srv.port, huge)
        check(got == b"" or got.startswith(b"HTTP/1.1 4"), "a 100 KiB header: answered %r" % got[:80])
        check(not got.startswith(b"HTTP/1.1 200"), "a 100 KiB header was served")
        srv.alive()
        s, b = srv.predict(px)
        check_answer(srv.w, px, s, b, "after the bad input")
    finally:
        srv.kill()


def case_slow_client(exe, tmp):
    srv = Server(exe, tmp)
    try:
        px = digit_rows(1)[0]
        body = json.dumps({"pixels": px}).encode()
        req = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        slow = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        step = max(1, len(req) // 40)
        done = threading.Event()
        times = []

        def others():
            while not done.is_set():
                t0 = time.time()
                s, b = srv.predict(px)
                times.append(time.time() - t0)
                check_answer(srv.w, px, s, b, "beside the slow client")
        t = threading.Thread(target=others)
        t.start()
        try:
            for i in range(0, len(req), step):
                slow.sendall(req[i:i + step])
                time.sleep(0.05)
        finally:
            done.set()
            t.join(30)
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            chunk = slow.recv(65536)
            if not chunk:
                break
            got += chunk
        slow.close()
        check(got.startswith(b"HTTP/1.1 200"), "the slow client's answer: %r" % got[:80])
        check_answer(srv.w, px, 200, got.split(b"\r\n\r\n", 1)[1].decode(), "the slow client")
        # The slow client takes 2 s; the others go on meanwhile.  (The
        # bounds allow for a loaded machine: 2 cores shared with builds.)
        times.sort()
        check(len(times) >= 10, "only %d requests were answered beside the slow client" % len(times))
        check(times[len(times) // 2] < 0.1 and times[-1] < 1.5,
              "beside the slow client: median %.3f s, worst %.3f s" % (times[len(times) // 2], times[-1]))
    finally:
        srv.kill()


def case_token(exe, tmp):
    srv = Server(exe, tmp, "--token", "s3cret")
    try:
        body = json.dumps({"pixels": digit_rows(1)[0]})
        s, b, h = srv.request("POST", "/predict", body)
        check(s == 401 and h.get("WWW-Authenticate") == "Bearer", "no token: %d %s" % (s, h))
        for bad in ("Bearer s3cre", "Bearer s3cret2", "Basic s3cret", "Bearer "):
            s, b, _ = srv.request("POST", "/predict", body, {"Authorization": bad})
            check(s == 401, "Authorization %r: %d" % (bad, s))
        s, b, _ = srv.request("POST", "/predict", body, {"Authorization": "Bearer s3cret"})
        check(s == 200, "the right token: %d %s" % (s, b))
        s, b, _ = srv.request("GET", "/metrics")
        check(s == 401, "/metrics without the token: %d" % s)
        s, b, _ = srv.request("GET", "/healthz")
        check(s == 200, "/healthz without the token: %d" % s)
    finally:
        srv.kill()


def case_queue_full(exe, tmp):
    srv = Server(exe, tmp, "--replicas", "1", "--queue", "2", "--max_batch", "64",
                 "--wait_ms", "1000")
    try:
        px = digit_rows(1)[0]

        def one(i):
            time.sleep(0.05 * i)  # in order, so the first two take the queue
            return srv.request("POST", "/predict", json.dumps({"pixels": px}))
        res = parallel(6, one)
        ok = [r for r in res if r[0] == 200]
        busy = [r for r in res if r[0] == 503]
        check(len(ok) == 2 and len(busy) == 4, "statuses %s, expected 2 x 200 and 4 x 503" %
              [r[0] for r in res])
        check(all(r[2].get("Retry-After") == "1" for r in busy), "503 without Retry-After: 1: %s" %
              [r[2] for r in busy])
        for s, b, _ in ok:
            check_answer(srv.w, px, s, b, "a queued request")
    finally:
        srv.kill()


def case_metrics(exe, tmp):
    srv = Server(exe, tmp)
    try:
        px = digit_rows(1)[0]
        for _ in range(7):
            srv.predict(px)
        for _ in range(3):
            srv.request("POST", "/predict", "{")
        srv.request("GET", "/predict")
        for _ in range(2):
            srv.request("POST", "/noop", '{"n": 1}')
        srv.request("GET", "/nope")
        fams, text = metrics(srv)
        for name, kind in (("sflow_serve_requests", "counter"), ("sflow_serve_request_seconds", "histogram"),
                           ("sflow_serve_queue_length", "gauge"), ("sflow_serve_batch_size", "histogram"),
                           ("sflow_serve_replicas", "gauge"), ("sflow_serve_in_flight", "gauge")):
            check(name in fams, "/metrics lacks %s:\n%s" % (name, text))
            check(fams[name].type == kind, "%s is a %s, expected %s" % (name, fams[name].type, kind))
        codes = {(s.labels["route"], s.labels["code"]): s.value
                 for s in fams["sflow_serve_requests"].samples if s.name.endswith("_total")}
        want = {("/predict", "200"): 7, ("/predict", "400"): 3, ("/predict", "405"): 1,
                ("/noop", "200"): 2, ("other", "404"): 1}
        check(codes == want, "request counters %s, expected %s" % (codes, want))
        for route in ("/predict", "/noop"):
            buckets = [s for s in fams["sflow_serve_request_seconds"].samples
                       if s.name.endswith("_bucket") and s.labels["route"] == route]
            vals = [s.value for s in buckets]
            check(vals == sorted(vals), "%s: buckets not cumulative: %s" % (route, vals))
            cnt = [s.value for s in fams["sflow_serve_request_seconds"].samples
                   if s.name.endswith("_count") and s.labels["route"] == route][0]
            check(buckets[-1].labels["le"] == "+Inf" and vals[-1] == cnt,
                  "%s: +Inf bucket %s, _count %s" % (route, vals[-1], cnt))
        reps = {s.labels["route"]: s.value for s in fams["sflow_serve_replicas"].samples}
        check(reps == {"/predict": 2, "/noop": 2, "/admin": 1}, "replicas %s" % reps)
        qs = [s for s in fams["sflow_serve_queue_length"].samples if s.labels["route"] == "/predict"]
        check(sorted(s.labels["replica"] for s in qs) == ["0", "1"], "queue lengths %s" % qs)
    finally:
        srv.kill()


def case_shutdown(exe, tmp):
    srv = Server(exe, tmp, "--replicas", "1", "--max_batch", "64", "--wait_ms", "600")
    try:
        rows = digit_rows(12)
        res = [None] * 12

        def one(i):
            res[i] = srv.predict(rows[i])
        ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in ts:
            t.start()
        time.sleep(0.25)  # all 12 queued, none answered (the batch waits 600 ms)
        srv.p.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        refused = False
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
        except OSError:
            refused = True
        for t in ts:
            t.join(30)
        for i in range(12):
            check(res[i] is not None, "request %d got no answer" % i)
            check_answer(srv.w, rows[i], res[i][0], res[i][1], "request %d in flight at SIGTERM" % i)
        check(refused, "a new connection was accepted after SIGTERM")
        try:
            out, err = srv.p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise Fail("the server did not exit after SIGTERM")
        check(srv.p.returncode == 0, "exit %d after SIGTERM: %s" % (srv.p.returncode, err.decode()))
        check(b"served 12 requests" in out, "stdout after SIGTERM: %r" % out)
    finally:
        srv.kill()


def write_safetensors(path, tensors):
    """tensors: (name, float32 array) in order, as nn.save lays them out."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, a in tensors:
        raw = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


class Load:
    """Clients sending /predict in a loop until stopped; every answer must
    be 200 and right by one of the models in `models` (name -> weights)."""
    def __init__(self, srv, models, clients=6):
        self.srv, self.models, self.stop_ev = srv, dict(models), threading.Event()
        self.answers, self.failures, self.lock = [], [], threading.Lock()
        self.rows = digit_rows(200)
        self.ts = [threading.Thread(target=self.run, args=(k,)) for k in range(clients)]
        for t in self.ts:
            t.start()

    def run(self, k):
        c = self.srv.conn()
        i = k
        while not self.stop_ev.is_set():
            px = self.rows[i % len(self.rows)]
            i += 7
            try:
                st, b = self.srv.predict(px, c)
            except Exception as e:  # noqa: BLE001 - a failed request is the finding
                with self.lock:
                    self.failures.append("request: %r" % e)
                c.close()
                c = self.srv.conn()
                continue
            which = None
            for name, w in self.models.items():
                try:
                    check_answer(w, px, st, b, name)
                    which = name
                    break
                except Fail as e:
                    last = str(e)
            with self.lock:
                if which is None:
                    self.failures.append(last)
                else:
                    self.answers.append((time.time(), which, json.loads(b)["version"]))
        c.close()

    def finish(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(30)
        check(not self.failures, "%d failed requests, the first: %s" % (len(self.failures),
              self.failures[0] if self.failures else ""))
        check(len(self.answers) > 50, "only %d answers under load" % len(self.answers))
        return self.answers


def admin(srv, want_ok=True, **cmd):
    body = {"action": "", "version": "v1", "weight": 0, "weights": ""}
    body.update(cmd)
    s, b, _ = srv.request("POST", "/admin", json.dumps(body), timeout=60,
                          headers={"Authorization": "Bearer " + srv.admin_token})
    check(s == (200 if want_ok else 400), "/admin %s: %d %s" % (cmd, s, b))
    got = json.loads(b)
    check(got["ok"] == want_ok, "/admin %s: %s" % (cmd, got["message"]))
    return got


def case_canary(exe, tmp):
    srv = Server(exe, tmp, "--canary_weight", "10")
    try:
        load = Load(srv, {"model": srv.w})
        time.sleep(1.5)
        t_change = time.time()
        admin(srv, action="weight", version="v2", weight=100)
        admin(srv, action="weight", version="v1", weight=0)
        t_done = time.time()
        time.sleep(1.0)
        answers = load.finish()
        before = [v for t, _, v in answers if t < t_change]
        after = [v for t, _, v in answers if t > t_done + 0.05]
        share = before.count("v2") / max(1, len(before))
        check(len(before) >= 100, "only %d answers before the change" % len(before))
        check(0.03 <= share <= 0.2, "v2 answered %.1f%% of %d requests at weight 10 of 100" %
              (100 * share, len(before)))
        check(after and all(v == "v2" for v in after), "after v1's weight went to 0: %d of %d from v1" %
              (after.count("v1"), len(after)))
        fams, _ = metrics(srv)
        ws = {s.labels["version"]: s.value for s in fams["sflow_serve_weight"].samples
              if s.labels["route"] == "/predict"}
        check(ws == {"v1": 0, "v2": 100}, "weights in /metrics: %s" % ws)
    finally:
        srv.kill()


def case_rollout(exe, tmp):
    srv = Server(exe, tmp)
    try:
        new = dict(srv.w)
        new["fc2.bias"] = srv.w["fc2.bias"] + np.float32(1.0)
        path = os.path.join(tmp, "new.safetensors")
        write_safetensors(path, [(n, new[n]) for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")])
        load = Load(srv, {"old": srv.w, "new": new})
        time.sleep(1.0)
        admin(srv, action="rollout", version="v1", weights=path)
        t_done = time.time()
        time.sleep(1.0)
        answers = load.finish()
        after = [m for t, m, _ in answers if t > t_done + 0.05]
        check(after and all(m == "new" for m in after), "after the rollout %d of %d answers from the old model" %
              (after.count("old"), len(after)))
        check(any(m == "old" for _, m, _ in answers), "no answer from the old model")
        fams, _ = metrics(srv)
        reps = {s.labels["route"]: s.value for s in fams["sflow_serve_replicas"].samples}
        check(reps["/predict"] == 2, "replicas after the rollout: %s" % reps)
        qs = sorted(s.labels["replica"] for s in fams["sflow_serve_queue_length"].samples
                    if s.labels["route"] == "/predict")
        check(qs == ["0", "1", "2", "3"], "replica slots after the rollout: %s" % qs)
    finally:
        srv.kill()


def case_killed_replica(exe, tmp):
    srv = Server(exe, tmp, "--token", "k1ll", "--faults", auth=True)
    try:
        load = Load(srv, {"model": srv.w}, clients=4)
        time.sleep(0.5)
        base = digit_rows(1)[0]
        kill = [-1, 0] + base[2:]  # fails replica 0; replica 1 answers it as data
        killed, kills = False, 0
        for _ in range(200):
            s, b = srv.predict(kill)
            kills += 1
            check_answer(srv.w, kill, s, b, "the request that kills replica 0")
            fams, _ = metrics(srv)
            tries = sum(x.value for x in fams["sflow_serve_retries"].samples
                        if x.name.endswith("_total") and x.labels["route"] == "/predict")
            if tries >= 1:
                killed = True
                break
        check(killed, "replica 0 never took the request that kills it")
        # At once a rolling update, which must not wait on the dead one.
        admin(srv, action="rollout", version="v1", weights=srv.weights)
        deadline = time.time() + 10
        while True:
            fams, _ = metrics(srv)
            reps = {x.labels["route"]: x.value for x in fams["sflow_serve_replicas"].samples}
            if reps["/predict"] == 2:
                break
            check(time.time() < deadline, "the dead replica was not replaced: %s" % reps)
            time.sleep(0.1)
        time.sleep(0.5)
        answers = load.finish()
        srv.alive()
        # "served N" counts every request answered, replica 0's before it
        # died included, not only the surviving replicas' loops.
        rc, out, err = srv.stop()
        want = len(answers) + kills
        check(rc == 0 and "served %d requests" % want in out,
              "exit %d after SIGTERM, %d requests answered 200; stdout %r" % (rc, want, out[-200:]))
    finally:
        srv.kill()


def case_autoscale(exe, tmp):
    srv = Server(exe, tmp, "--replicas", "1", "--max_replicas", "3", "--max_batch", "2",
                 "--wait_ms", "20", "--target_queue", "2")
    try:
        def replicas():
            fams, _ = metrics(srv)
            return {x.labels["route"]: x.value for x in fams["sflow_serve_replicas"].samples}["/predict"]
        check(replicas() == 1, "replicas before the load: %s" % replicas())
        load = Load(srv, {"model": srv.w}, clients=32)
        peak, deadline = 1, time.time() + 10
        while time.time() < deadline and peak < 3:
            peak = max(peak, replicas())
            time.sleep(0.1)
        load.finish()
        check(peak >= 2, "32 clients on one replica, queue target 2: never more than %s replica" % peak)
        deadline = time.time() + 20
        while replicas() > 1:
            check(time.time() < deadline, "replicas %s 20 s after the load ended" % replicas())
            time.sleep(0.2)
        srv.alive()
    finally:
        srv.kill()


def case_stuck_replica(exe, tmp):
    srv = Server(exe, tmp, "--replicas", "1", "--request_timeout_s", "1", "--token", "h0ld", "--faults",
                 auth=True)
    try:
        base = digit_rows(1)[0]
        t0 = time.time()
        s, b, _ = srv.request("POST", "/predict", json.dumps({"pixels": [-2, 0] + base[2:]}))
        took = time.time() - t0
        check(s == 504 and "request_timeout_s" in b, "a request its replica holds 3 s: %d %s" % (s, b))
        check(0.9 <= took < 2.8, "the 504 came after %.2f s, request_timeout_s is 1" % took)
        time.sleep(2.5)  # the replica finishes; its late answer has no one to go to
        s, b = srv.predict(base)
        check_answer(srv.w, base, s, b, "after the stuck request")
        fams, _ = metrics(srv)
        codes = {x.labels["code"]: x.value for x in fams["sflow_serve_requests"].samples
                 if x.name.endswith("_total") and x.labels["route"] == "/predict"}
        check(codes.get("504") == 1, "request counters %s" % codes)
    finally:
        srv.kill()


def case_admin_token(exe, tmp):
    """The example as people copy it: /admin needs a token (one made at
    start and printed), /predict stays open, the inputs that fail replicas
    are plain pixels without --faults, and --faults needs --token."""
    srv = Server(exe, tmp)
    try:
        check(re_hex32(srv.admin_token), "no admin token printed at start: %r" % srv.out)
        body = json.dumps({"action": "weight", "version": "v1", "weight": 0, "weights": ""})
        for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + srv.admin_token[:-1]}):
            s, b, hh = srv.request("POST", "/admin", body, headers=h)
            check(s == 401 and hh.get("WWW-Authenticate") == "Bearer", "/admin with %s: %d %s" % (h, s, b))
        base = digit_rows(1)[0]
        s, b = srv.predict(base)
        check_answer(srv.w, base, s, b, "/predict without a token")
        # The fault inputs are ordinary pixels here: answered, no replica lost.
        for px in ([-1, 0] + base[2:], [-1, 1] + base[2:], [-2, 0] + base[2:], [-2, 1] + base[2:]):
            for _ in range(4):
                t0 = time.time()
                s, b = srv.predict(px)
                check_answer(srv.w, px, s, b, "a fault input without --faults")
                check(time.time() - t0 < 2.5, "a hold input without --faults took %.1f s" % (time.time() - t0))
        fams, _ = metrics(srv)
        tries = sum(x.value for x in fams["sflow_serve_retries"].samples if x.name.endswith("_total"))
        reps = {x.labels["route"]: x.value for x in fams["sflow_serve_replicas"].samples}
        check(tries == 0 and reps["/predict"] == 2, "fault inputs without --faults: retries %s, replicas %s" %
              (tries, reps))
        got = admin(srv, action="weight", version="v1", weight=100)
        check("v1 weight 100" in got["message"], "/admin with the printed token: %s" % got)
        srv.alive()
    finally:
        srv.kill()
    p = subprocess.run([exe, "--port", "0", "--faults", "--weights", os.path.join(tmp, "weights.safetensors"),
                        "--checkpoint-dir", os.path.join(tmp, "ckpt-faults")],
                       capture_output=True, text=True, timeout=60, cwd=os.path.join(ROOT, "examples"))
    check(p.returncode != 0 and "--faults needs --token" in p.stderr,
          "--faults without --token: exit %d, %s" % (p.returncode, p.stderr[-300:]))


def re_hex32(t):
    return len(t) == 32 and all(c in "0123456789abcdef" for c in t)


def case_bad_rollout(exe, tmp):
    """A rollout naming a file that is not a model (/etc/passwd, an empty
    file, a safetensors of another shape) is refused, ok false naming the
    file; the server goes on serving the old model on both replicas, and
    a good rollout still works afterwards."""
    srv = Server(exe, tmp)
    try:
        load = Load(srv, {"model": srv.w}, clients=3)
        empty = os.path.join(tmp, "empty.safetensors")
        open(empty, "wb").close()
        shaped = os.path.join(tmp, "shaped.safetensors")
        write_safetensors(shaped, [("fc1.weight", np.zeros((3, 3), np.float32))])
        for path in ("/etc/passwd", empty, shaped):
            got = admin(srv, want_ok=False, action="rollout", version="v1", weights=path)
            check("refused" in got["message"] and path in got["message"],
                  "a rollout of %s: %s" % (path, got["message"]))
            srv.alive()
        time.sleep(0.5)
        load.finish()
        fams, _ = metrics(srv)
        reps = {x.labels["route"]: x.value for x in fams["sflow_serve_replicas"].samples}
        slots = sorted(x.labels["replica"] for x in fams["sflow_serve_queue_length"].samples
                       if x.labels["route"] == "/predict")
        check(reps["/predict"] == 2 and slots == ["0", "1"],
              "after refused rollouts: replicas %s, slots %s" % (reps, slots))
        admin(srv, action="rollout", version="v1", weights=srv.weights)
        base = digit_rows(1)[0]
        s, b = srv.predict(base)
        check_answer(srv.w, base, s, b, "after a good rollout")
    finally:
        srv.kill()


def slow_socket(port, src="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def timed_predict(srv, px, src, give_up):
    """POSTs /predict from address src, reconnecting after a refusal or a
    reset, until answered or give_up seconds: (seconds, resets, status)."""
    t0, resets = time.time(), 0
    body = json.dumps({"pixels": px}).encode()
    req = b"POST /predict HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    while time.time() - t0 < give_up:
        try:
            c = slow_socket(srv.port, src)
            c.sendall(req)
            got = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                got += chunk
            c.close()
            if got.startswith(b"HTTP/1.1 "):
                return time.time() - t0, resets, int(got[9:12]), got
            resets += 1
        except OSError:
            resets += 1
        time.sleep(0.05)
    return time.time() - t0, resets, None, b""


def case_slowloris(exe, tmp):
    """64 connections from 127.0.0.1, each sending its head a byte every
    0.5 s, against --max_connections 64 --max_connections_per_ip 16
    --head_timeout_s 2: a client from 127.0.0.2 is answered at once; one
    from 127.0.0.1 once the 16 slow ones are cut off (408) at 2 s; none of
    the slow ones lasts past the deadline."""
    srv = Server(exe, tmp, "--max_connections", "64", "--max_connections_per_ip", "16",
                 "--head_timeout_s", "2")
    slow, stop = [], threading.Event()
    try:
        head = b"POST /predict HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
        t_attack = time.time()
        for _ in range(64):
            try:
                slow.append([slow_socket(srv.port), 0, b"", None])
            except OSError:
                pass

        def trickle():
            while not stop.is_set():
                for k in slow:
                    if k[3] is not None:
                        continue
                    # Read before sending: a byte sent after the server
                    # closed draws a reset, which drops an unread 408.
                    try:
                        chunk = k[0].recv(4096, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        chunk = None
                    except OSError:
                        chunk = b""
                    if chunk is not None:
                        k[2] += chunk
                        if not chunk:
                            k[3] = time.time()
                        continue
                    try:
                        k[0].send(head[k[1]:k[1] + 1])
                        k[1] += 1
                    except OSError:
                        k[3] = time.time()  # cut off (or refused)
                stop.wait(0.5)
        t = threading.Thread(target=trickle)
        t.start()
        px = digit_rows(1)[0]
        # A keep-alive connection from a third address, answered once and
        # then idle: closed at its head deadline, with no 408 to take for
        # the answer of a next request.
        idle = slow_socket(srv.port, "127.0.0.3")
        body = json.dumps({"pixels": px}).encode()
        idle.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        first = b""
        while not first.rstrip().endswith(b"}"):
            chunk = idle.recv(65536)
            if not chunk:
                break
            first += chunk
        check(first.startswith(b"HTTP/1.1 200"), "the keep-alive client's answer: %r" % first[:80])
        time.sleep(0.5)
        other = timed_predict(srv, px, "127.0.0.2", 10)
        same = timed_predict(srv, px, "127.0.0.1", 10)
        same_at = time.time() - t_attack
        time.sleep(0.6)
        stop.set()
        t.join(10)
        # A connection libmicrohttpd accepted late (a loaded machine) has
        # its deadline late too: wait a bounded while for its 408.
        drained = 0
        for k in slow:
            if k[3] is not None or k[2]:
                continue
            try:
                k[0].settimeout(max(0.1, t_attack + 2 + 4 - time.time()))
                chunk = k[0].recv(4096)
            except OSError:
                chunk = b""
            k[2] += chunk
            drained += bool(chunk)
        print("  slowloris: %d answers read after the trickle" % drained)
        print("  slowloris: from 127.0.0.2 answered %s after %.2f s (%d resets); from 127.0.0.1 "
              "%s after %.2f s of the attack (%d resets)" %
              (other[2], other[0], other[1], same[2], same_at, same[1]))
        check(other[2] == 200, "a client from another address beside 64 slow ones: %s after %.2f s, %d resets" %
              (other[2], other[0], other[1]))
        check(other[0] < 1.5, "a client from another address waited %.2f s (%d resets)" % (other[0], other[1]))
        check(same[2] == 200 and same_at < 2 + 2.5,
              "a client from the slow ones' address: %s after %.2f s of the attack (%d resets); "
              "head_timeout_s is 2" % (same[2], same_at, same[1]))
        cut = [k for k in slow if k[2].startswith(b"HTTP/1.1 408")]
        _, mbody = metrics(srv)
        sent = sum(int(float(v)) for v in
                   re.findall(r'^sflow_serve_requests_total\{[^}]*code="408"\} (\S+)$', mbody, re.M))
        print("  slowloris: the server answered %d connections 408, the clients read %d" %
              (sent, len(cut)))
        check(16 <= sent <= 17, "the server answered %d slow connections 408 (16 taken per "
              "address)" % sent)
        # A client starved past the linger can still lose its 408 to a
        # reset (its kernel drops what it had not read): allow one.
        check(sent - 1 <= len(cut) <= sent and cut and b"head_timeout_s" in cut[0][2],
              "%d slow connections read a 408 of the %d sent: %r" %
              (len(cut), sent, [k[2][:60] for k in slow if k[2]][:3]))
        late = [k[3] - t_attack for k in cut if k[3] is not None and k[3] - t_attack > 2 + 1.5]
        check(not late, "slow connections lasting past the 2 s head deadline: %s" % late)
        idle.settimeout(3)
        try:
            after = idle.recv(65536)
        except OSError as e:
            after = repr(e).encode()
        idle.close()
        check(after == b"", "an idle keep-alive connection at its deadline: %r (expected a close, "
              "no answer)" % after[:80])
        srv.alive()
    finally:
        stop.set()
        for k in slow:
            k[0].close()
        srv.kill()


def case_shutdown_race(exe, tmp):
    """20 runs: 16 clients' requests taken (sflow_serve_in_flight 16), then
    SIGTERM at a random moment of the batch's 200 ms wait or its answer:
    every one of the 16 gets its whole answer, right, and the server says
    it served 16.  A run whose batch was answered before the poll saw all
    16 taken (a loaded machine) tests nothing and is run again."""
    import random
    rnd = random.Random(7)
    clients = int(os.environ.get("SFLOW_SERVE_RACE_CLIENTS", "16"))
    runs = int(os.environ.get("SFLOW_SERVE_RACE_RUNS", "20"))
    rows = digit_rows(clients)
    done = attempts = 0
    while done < runs:
        attempts += 1
        check(attempts <= 2 * runs, "only %d of %d attempts saw all %d requests taken before their "
              "answer" % (done, attempts - 1, clients))
        srv = Server(exe, tmp, "--max_batch", "64", "--wait_ms", "200")
        try:
            res = [None] * clients

            def one(i):
                try:
                    res[i] = srv.predict(rows[i])
                except Exception as e:  # noqa: BLE001 - a lost answer is the finding
                    res[i] = e
            ts = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
            for t in ts:
                t.start()
            deadline, seen = time.time() + 5, False
            while not seen and any(r is None for r in res):
                fams, _ = metrics(srv)
                seen = [x.value for x in fams["sflow_serve_in_flight"].samples][0] == clients
                check(seen or time.time() < deadline, "run %d: not all %d requests taken; the clients: %s" %
                      (done, clients, [r if isinstance(r, Exception) else r and r[0] for r in res]))
            if seen:
                time.sleep(rnd.uniform(0, 0.25))
            srv.p.send_signal(signal.SIGTERM)
            for t in ts:
                t.join(30)
            for i in range(clients):
                check(not isinstance(res[i], Exception) and res[i] is not None,
                      "run %d: request %d, taken before SIGTERM, got no answer: %r" % (done, i, res[i]))
                check_answer(srv.w, rows[i], res[i][0], res[i][1], "run %d request %d" % (done, i))
            out, err = srv.p.communicate(timeout=30)
            check(srv.p.returncode == 0 and b"served %d requests" % clients in out,
                  "run %d: exit %d, %r %r" % (done, srv.p.returncode, out[-100:], err[-300:]))
            done += seen
        finally:
            srv.kill()


NOT_READY = r"""
import std.serve
struct Ping { n: i64 }
actor Echo {
  init() {}
  fn run(ep: serve.Endpoint, r: i64) -> i64 {
    var n = 0
    while true {
      let xs = serve.next<Ping>(ep, r)
      if len(xs) == 0 { return n }
      serve.reply(ep, r, xs)
      n += len(xs)
    }
    return n
  }
}
// Listens 1.5 s before its replica exists (a model still loading).
workflow main() {
  let s = serve.start(0)
  let ep = serve.route<Ping>(s, "/echo")
  print("listening on", serve.url(s))
  let t = now()
  while now() - t < 1.5 { }
  let e = spawn Echo()
  let n = e.run(ep, serve.add_replica(ep))
  print("ready")
  serve.wait(s)
  print("served", await n)
}
"""


def case_not_ready(exe, tmp):
    """Before a route's first replica: 503 saying no replica is ready
    yet, with Retry-After, not "every queue full"; then 200."""
    src = os.path.join(tmp, "not_ready.sflow")
    with open(src, "w") as f:
        f.write(NOT_READY)
    nexe = os.path.join(tmp, "not_ready")
    p = subprocess.run([SFLOWC, src, "-o", nexe], capture_output=True, text=True)
    check(p.returncode == 0, "sflowc: %s" % p.stderr)
    proc = subprocess.Popen([nexe, "--journal=false"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()
        check(line.startswith("listening on"), "the first line: %r" % line)
        port = int(line.rsplit(":", 1)[1])
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/echo", body='{"n": 3}')
        r = c.getresponse()
        b = r.read().decode()
        c.close()
        check(r.status == 503 and r.getheader("Retry-After") == "1" and "no replica" in b and
              "full" not in b, "before the replica: %d %s %s" % (r.status, r.getheaders(), b))
        deadline = time.time() + 20
        while True:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST", "/echo", body='{"n": 3}')
            r = c.getresponse()
            b = r.read().decode()
            c.close()
            if r.status == 200:
                break
            check(r.status == 503 and time.time() < deadline, "waiting for the replica: %d %s" % (r.status, b))
            time.sleep(0.1)
        check(json.loads(b) == {"n": 3}, "the answer once ready: %s" % b)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


BIG = r"""
import std.serve
struct Ask { n: i64 }
struct Blob { data: str }
actor Big {
  init() {}
  fn run(ep: serve.Endpoint, r: i64) -> i64 {
    var n = 0
    while true {
      let xs = serve.next<Ask>(ep, r)
      if len(xs) == 0 { return n }
      var out: Blob[] = []
      for x in xs {
        var s = "x"
        while len(s) < x.n { s = s + s }
        out.push(Blob { data: s })
      }
      serve.reply(ep, r, out)
      n += len(xs)
    }
    return n
  }
}
workflow main() {
  let s = serve.start(0)
  let ep = serve.route<Ask>(s, "/big", max_batch = 1)
  let b = spawn Big()
  let n = b.run(ep, serve.add_replica(ep))
  print("listening on", serve.url(s))
  serve.wait(s)
  print("served", await n)
}
"""


def case_shutdown_big_answer(exe, tmp):
    """An 8 MiB answer its client reads only after the SIGTERM: the stop
    waits for its last byte (libmicrohttpd writes it after the request is
    done), so the client gets all of it and the server then exits 0."""
    src = os.path.join(tmp, "big.sflow")
    with open(src, "w") as f:
        f.write(BIG)
    bexe = os.path.join(tmp, "big")
    p = subprocess.run([SFLOWC, src, "-o", bexe], capture_output=True, text=True)
    check(p.returncode == 0, "sflowc: %s" % p.stderr)
    proc = subprocess.Popen([bexe, "--journal=false"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()
        check(line.startswith("listening on"), "the first line: %r" % line)
        port = int(line.rsplit(":", 1)[1])
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.settimeout(20)
        c.connect(("127.0.0.1", port))
        body = b'{"n": 8388608}'
        c.sendall(b"POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.5)  # the answer is made, its write blocked on the client's window
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        got = bytearray()
        while True:
            try:
                chunk = c.recv(1 << 20)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        c.close()
        head, _, rest = bytes(got).partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 200"), "the big answer's head: %r" % head[:100])
        want = len(json.dumps({"data": "x" * 8388608})) + 1  # the encoder's newline or not
        check(len(rest) >= want - 1 and rest.rstrip().endswith(b'"}'),
              "the big answer was cut off at the stop: %d of about %d bytes" % (len(rest), want))
        out, err = proc.communicate(timeout=20)
        check(proc.returncode == 0 and b"served 1" in out, "exit %d, %r %r" % (proc.returncode, out, err[-300:]))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


CASES = {
    "answers": case_answers,
    "batching": case_batching,
    "bad_input": case_bad_input,
    "slow_client": case_slow_client,
    "token": case_token,
    "queue_full": case_queue_full,
    "metrics": case_metrics,
    "shutdown": case_shutdown,
    "canary": case_canary,
    "rollout": case_rollout,
    "killed_replica": case_killed_replica,
    "autoscale": case_autoscale,
    "stuck_replica": case_stuck_replica,
    "admin_token": case_admin_token,
    "bad_rollout": case_bad_rollout,
    "slowloris": case_slowloris,
    "shutdown_race": case_shutdown_race,
    "shutdown_big_answer": case_shutdown_big_answer,
    "not_ready": case_not_ready,
}


def main():
    faulthandler.dump_traceback_later(float(os.environ.get("SFLOW_SERVE_TEST_DUMP", "1e9")), exit=False)
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    global SFLOWC
    SFLOWC = args.sflowc
    names = args.cases or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit("serve_test: no case %r (cases: %s)" % (n, ", ".join(CASES)))
    failed = 0
    with tempfile.TemporaryDirectory(prefix="sflow-serve-test.") as tmp:
        exe = os.path.join(tmp, "serve")
        p = subprocess.run([args.sflowc, EXAMPLE, "-o", exe], capture_output=True, text=True)
        if p.returncode:
            sys.exit("serve_test: sflowc failed:\n" + p.stderr)
        for n in names:
            t0 = time.time()
            try:
                CASES[n](exe, tmp)
                print("PASS %s (%.1f s)" % (n, time.time() - t0))
            except Fail as e:
                failed += 1
                print("FAIL %s: %s" % (n, e))
            except Exception as e:  # noqa: BLE001 - a case that errs fails, the others still run
                failed += 1
                print("FAIL %s: %s: %s" % (n, type(e).__name__, e))
            sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
