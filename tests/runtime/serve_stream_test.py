#!/usr/bin/env python3
"""serve_stream_test.py — std.serve's request-level answers (serve.take,
answer, send, finish, cancelled; docs/serve.md, "Continuous batching")
over real HTTP on loopback.

tests/runtime/serve_stream.sflow (a stand-in decoder: one "token" per
step for every running sequence, requests joining and leaving the
running set at any step) is compiled once and started per case on an
ephemeral port; a Python client (http.client, whose chunked decoding the
SSE parser below reads line by line; no openai package) checks:

  out_of_order  a 40-token request, then a 3-token one 50 ms later: the
                later one is answered first, both whole and right
  stream        60 events read as they come: text/event-stream, chunked,
                "data: {json}" events 0..59 in order, then [DONE] and the
                end of the body; the first arrives long before the last
  mixed         12 clients at once on one route, half streaming, half not,
                of 5..40 tokens: each answer right; /metrics counts the
                streams' events and first events; none left open
  disconnect    a client that reads 5 events of a 100000-token stream and
                closes its socket: the replica drops it within 1 s (send
                false), no more events are made, streams_open back to 0
  plain_disconnect  a client that waits for a 100000-token answer as one
                body and closes its socket after 0.3 s: serve.cancelled
                turns true within 1 s (100 ms looks), the replica drops
                it, the server serves on
  sigterm       SIGTERM after a stream's 3rd event: the stream finishes
                (all 40 events and [DONE]), new connections refused, exit 0
  first_byte    request_timeout_s 0.5 with one sequence at a time: a
                1.2 s stream is not cut off; a request queued behind it
                gets 504 (no first byte in time) and the replica drops it
  bad_request   the handler's status: n 0 answered 400 {"error": ...}
  errors        a request answered twice, send after finish, finish of an
                id never taken: each a runtime error naming the id (the
                client of the first two got its answer; that of the third
                503, its replica gone), the replica taken out (the next
                request 503 at once), no crash
  json_route    a route of data.Json: any JSON body, fields left out or
                not (OpenAI's clients send only those set), read by the
                handler; bad JSON still 400 naming line:column

    serve_stream_test.py --sflowc build/bin/sflowc [CASE ...]
"""
import argparse
import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(ROOT, "tests", "runtime", "serve_stream.sflow")
ROUTE = "/v1/completions"


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


class Server:
    def __init__(self, exe, *flags):
        self.p = subprocess.Popen([exe] + list(flags), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.out = b""
        self.lock = threading.Lock()
        deadline = time.time() + 30
        while b"listening on" not in self.out:
            r, _, _ = select.select([self.p.stdout], [], [], max(0.0, deadline - time.time()))
            chunk = os.read(self.p.stdout.fileno(), 4096) if r else b""
            if not chunk:
                self.kill()
                raise Fail("the server did not start: %r" % self.out)
            self.out += chunk
        line = [l for l in self.out.decode().splitlines() if l.startswith("listening on")][0]
        self.port = int(line.rsplit(":", 1)[1])
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                return
            with self.lock:
                self.out += chunk

    def stdout(self):
        with self.lock:
            return self.out.decode()

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def post(self, body, timeout=10):
        c = self.conn(timeout)
        try:
            c.request("POST", ROUTE, body=json.dumps(body))
            r = c.getresponse()
            return r.status, r.read().decode(), dict(r.getheaders())
        finally:
            c.close()

    def metrics(self):
        c = self.conn()
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self, timeout=30):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail("the server did not stop within %d s of SIGTERM" % timeout)
        time.sleep(0.1)  # the reader thread's last bytes
        return self.p.returncode, self.stdout(), self.p.stderr.read().decode(errors="replace")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def sse_events(resp):
    """(seconds since the call, data) for each event of an SSE body, as
    they arrive: http.client undoes the chunking, the lines are SSE's."""
    t0 = time.time()
    data = []
    while True:
        line = resp.readline()
        if not line:
            if data:
                raise Fail("the stream ended inside an event: %r" % data)
            return
        line = line.decode().rstrip("\n")
        if line == "":
            if data:
                yield time.time() - t0, "\n".join(data)
            data = []
        elif line.startswith("data: "):
            data.append(line[6:])
        elif line.startswith("event:") or line.startswith(":"):
            pass
        else:
            raise Fail("not an SSE line: %r" % line)


def open_stream(srv, prompt, n, timeout=10):
    c = srv.conn(timeout)
    c.request("POST", ROUTE, body=json.dumps({"prompt": prompt, "n": n, "stream": True}))
    r = c.getresponse()
    if r.status != 200:
        raise Fail("stream %s: status %d %r" % (prompt, r.status, r.read()))
    return c, r


def check_stream(prompt, n, events):
    datas = [d for _, d in events]
    check(len(datas) == n + 1, "stream %s: %d events, want %d and [DONE]" % (prompt, len(datas), n))
    check(datas[-1] == "[DONE]", "stream %s: last event %r" % (prompt, datas[-1]))
    for i, d in enumerate(datas[:-1]):
        e = json.loads(d)
        check(e["index"] == i and e["token"] == prompt + str(i),
              "stream %s: event %d is %r" % (prompt, i, d))


def want_text(prompt, n):
    return " ".join(prompt + str(i) for i in range(n))


def read_stream(srv, prompt, n, results):
    try:
        c, r = open_stream(srv, prompt, n)
        check(r.getheader("Content-Type") == "text/event-stream",
              "Content-Type %r" % r.getheader("Content-Type"))
        check(r.getheader("Transfer-Encoding") == "chunked",
              "Transfer-Encoding %r" % r.getheader("Transfer-Encoding"))
        ev = list(sse_events(r))
        c.close()
        check_stream(prompt, n, ev)
        results[prompt] = "ok"
    except Exception as e:  # noqa: BLE001 - reported by the case
        results[prompt] = "%s: %s" % (type(e).__name__, e)


def read_plain(srv, prompt, n, results, order=None):
    try:
        s, body, h = srv.post({"prompt": prompt, "n": n, "stream": False})
        if order is not None:
            order.append(prompt)
        check(s == 200, "%s: status %d %r" % (prompt, s, body))
        check(h.get("Content-Type") == "application/json", "%s: Content-Type %r" % (prompt, h))
        got = json.loads(body)
        check(got == {"text": want_text(prompt, n), "tokens": n}, "%s: answer %r" % (prompt, got))
        results[prompt] = "ok"
    except Exception as e:  # noqa: BLE001
        results[prompt] = "%s: %s" % (type(e).__name__, e)


def join_all(threads, results):
    for t in threads:
        t.join(60)
    bad = {k: v for k, v in results.items() if v != "ok"}
    check(not bad and len(results) == len(threads), "failed: %r (of %d)" % (bad, len(threads)))


# ------------------------------------------------------------------ cases

def case_out_of_order(exe):
    srv = Server(exe, "--step_ms", "20")
    try:
        results, order = {}, []
        a = threading.Thread(target=read_plain, args=(srv, "long", 40, results, order))
        b = threading.Thread(target=read_plain, args=(srv, "short", 3, results, order))
        a.start()
        time.sleep(0.05)
        b.start()
        join_all([a, b], results)
        check(order == ["short", "long"], "answered in the order %r, want the short one first" % order)
    finally:
        srv.kill()


def case_stream(exe):
    srv = Server(exe, "--step_ms", "20")
    try:
        c, r = open_stream(srv, "s", 60)
        check(r.getheader("Content-Type") == "text/event-stream", "Content-Type %r" % r.getheader("Content-Type"))
        check(r.getheader("Transfer-Encoding") == "chunked", "not chunked: %r" % r.getheaders())
        ev = list(sse_events(r))
        check(r.read() == b"", "bytes after the end")
        c.close()
        check_stream("s", 60, ev)
        first, last = ev[0][0], ev[-1][0]
        # 60 steps of 20 ms: 1.2 s; the first event comes at once.
        check(last >= 1.0, "the whole stream took %.2f s, under 60 steps of 20 ms" % last)
        check(first < 0.3 and first < last / 3, "first event after %.2f s of %.2f: not streamed" % (first, last))
    finally:
        srv.kill()


def case_mixed(exe):
    srv = Server(exe, "--step_ms", "5")
    try:
        results, threads = {}, []
        streams = 0
        events = 0
        for i in range(12):
            n = 5 + 3 * i
            if i % 2 == 0:
                threads.append(threading.Thread(target=read_stream, args=(srv, "q%d" % i, n, results)))
                streams += 1
                events += n + 1
            else:
                threads.append(threading.Thread(target=read_plain, args=(srv, "q%d" % i, n, results)))
        for t in threads:
            t.start()
        join_all(threads, results)
        m = srv.metrics()
        lab = '{route="%s"}' % ROUTE
        check(m["sflow_serve_stream_events_total" + lab] == events,
              "events_total %r, want %d" % (m.get("sflow_serve_stream_events_total" + lab), events))
        check(m["sflow_serve_stream_first_event_seconds_count" + lab] == streams,
              "first-event count %r, want %d" % (m.get("sflow_serve_stream_first_event_seconds_count" + lab), streams))
        check(m['sflow_serve_stream_first_event_seconds_bucket{route="%s",le="+Inf"}' % ROUTE] == streams,
              "first-event +Inf bucket")
        check(m["sflow_serve_streams_open" + lab] == 0, "streams_open %r" % m.get("sflow_serve_streams_open" + lab))
        check(m['sflow_serve_requests_total{route="%s",code="200"}' % ROUTE] == 12, "requests_total 200")
        rc, out, err = srv.stop()
        check(rc == 0 and "served 12 dropped 0" in out, "exit %d, %r %s" % (rc, out, err))
    finally:
        srv.kill()


def case_disconnect(exe):
    srv = Server(exe, "--step_ms", "10")
    try:
        c, r = open_stream(srv, "gone", 100000)
        got = []
        for _, d in sse_events(r):
            got.append(d)
            if len(got) == 5:
                break
        m = srv.metrics()
        check(m['sflow_serve_streams_open{route="%s"}' % ROUTE] == 1, "streams_open while streaming")
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        t0 = time.time()
        while "dropped gone" not in srv.stdout() and time.time() - t0 < 5:
            time.sleep(0.02)
        took = time.time() - t0
        out = srv.stdout()
        check("dropped gone" in out, "the replica did not drop the stream within 5 s: %r" % out)
        check(took < 1.0, "dropped after %.2f s" % took)
        line = [l for l in out.splitlines() if l.startswith("dropped gone")][0]
        k = int(line.split()[3])
        check(k < 200, "%d events made before it was dropped: %r" % (k, line))
        m1 = srv.metrics()
        time.sleep(0.3)
        m2 = srv.metrics()
        ev = 'sflow_serve_stream_events_total{route="%s"}' % ROUTE
        check(m1[ev] == m2[ev], "events still made after the drop: %r, %r" % (m1[ev], m2[ev]))
        check(m2['sflow_serve_streams_open{route="%s"}' % ROUTE] == 0, "streams_open after the drop")
        # The server goes on: a stream and a plain answer after it.
        results = {}
        read_stream(srv, "after", 4, results)
        read_plain(srv, "plain", 2, results)
        check(results == {"after": "ok", "plain": "ok"}, "after the drop: %r" % results)
        rc, out, err = srv.stop()
        check(rc == 0 and "served 2 dropped 1" in out, "exit %d, %r %s" % (rc, out, err))
    finally:
        srv.kill()


def case_plain_disconnect(exe):
    srv = Server(exe, "--step_ms", "10")
    try:
        c = srv.conn()
        c.request("POST", ROUTE, body=json.dumps({"prompt": "left", "n": 100000, "stream": False}))
        time.sleep(0.3)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        t0 = time.time()
        while "dropped left" not in srv.stdout() and time.time() - t0 < 5:
            time.sleep(0.02)
        took = time.time() - t0
        check("dropped left" in srv.stdout(), "the replica did not drop it within 5 s: %r" % srv.stdout())
        check(took < 1.0, "dropped after %.2f s" % took)
        results = {}
        read_plain(srv, "plain", 3, results)
        check(results == {"plain": "ok"}, "after the drop: %r" % results)
        rc, out, err = srv.stop()
        check(rc == 0 and "served 1 dropped 1" in out, "exit %d, %r %s" % (rc, out, err))
    finally:
        srv.kill()


def case_sigterm(exe):
    srv = Server(exe, "--step_ms", "25")
    try:
        c, r = open_stream(srv, "t", 40)
        ev = []
        it = sse_events(r)
        for e in it:
            ev.append(e)
            if len(ev) == 3:
                break
        srv.p.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
            refused = False
        except OSError:
            refused = True
        check(refused, "a new connection was accepted during the stop")
        ev += list(it)
        c.close()
        check_stream("t", 40, ev)
        srv.p.wait(timeout=10)
        time.sleep(0.1)
        out = srv.stdout()
        check(srv.p.returncode == 0 and "served 1 dropped 0" in out,
              "exit %r, %r %s" % (srv.p.returncode, out, srv.p.stderr.read().decode()))
    finally:
        srv.kill()


def case_first_byte(exe):
    srv = Server(exe, "--step_ms", "20", "--cap", "1", "--request_timeout_s", "0.5")
    try:
        results = {}
        a = threading.Thread(target=read_stream, args=(srv, "slow", 60, results))
        a.start()
        time.sleep(0.1)
        t0 = time.time()
        s, body, _ = srv.post({"prompt": "late", "n": 2, "stream": True})
        took = time.time() - t0
        check(s == 504 and "request_timeout_s" in body, "queued request: %d %r" % (s, body))
        check(0.3 < took < 1.0, "504 after %.2f s" % took)
        join_all([a], results)  # 1.2 s, longer than the timeout, whole
        t0 = time.time()
        while "dropped late" not in srv.stdout() and time.time() - t0 < 3:
            time.sleep(0.02)
        check("dropped late after 1 of 2" in srv.stdout(), "the 504'd request: %r" % srv.stdout())
    finally:
        srv.kill()


def case_bad_request(exe):
    srv = Server(exe)
    try:
        s, body, _ = srv.post({"prompt": "x", "n": 0, "stream": False})
        check(s == 400 and json.loads(body) == {"error": "n must be at least 1"}, "%d %r" % (s, body))
        s, body, _ = srv.post({"prompt": "x", "stream": True})
        check(s == 400 and "n" in body, "a missing field: %d %r" % (s, body))
    finally:
        srv.kill()


def case_errors(exe):
    want = {
        "twice": ("plain", r"serve.answer: request 1 is not held by replica 0 of /v1/completions "
                  "(v1): it was already answered or finished"),
        "after_finish": ("stream", r"serve.send: request 1 is not held by replica 0 of "
                         "/v1/completions (v1): it was already answered or finished"),
        "unknown": ("503", "serve.finish: no request 1001 was ever taken"),
    }
    for fault, (kind, msg) in want.items():
        srv = Server(exe, "--fault", fault)
        try:
            results = {}
            if kind == "plain":
                read_plain(srv, "x", 3, results)
                check(results == {"x": "ok"}, "%s: %r" % (fault, results))
            elif kind == "stream":
                read_stream(srv, "x", 3, results)
                check(results == {"x": "ok"}, "%s: %r" % (fault, results))
            else:
                s, body, _ = srv.post({"prompt": "x", "n": 3, "stream": False})
                check(s == 503 and "failed" in body, "%s: %d %r" % (fault, s, body))
            # The replica's loop failed: it is out, so a new request is
            # answered 503 at once rather than left waiting (queued on it
            # just before it died, the request is sent on and refused).
            s, body, _ = srv.post({"prompt": "y", "n": 1, "stream": False}, timeout=5)
            check(s == 503 and ("no replica" in body or "no other can take it" in body),
                  "%s: after: %d %r" % (fault, s, body))
            rc, out, err = srv.stop()
            check(rc != 0 and msg in err, "%s: exit %d, stderr %r" % (fault, rc, err))
            check("serve_stream.sflow:" in err, "%s: no line named: %r" % (fault, err))
            check("Segmentation" not in err and rc > 0, "%s: crashed: %d %r" % (fault, rc, err))
        finally:
            srv.kill()


def case_json_route(exe):
    srv = Server(exe)
    try:
        c = srv.conn()
        for body, want in [
                ({"prompt": "x"}, {"keys": ["prompt"], "stream": False}),
                ({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                 {"keys": ["model", "stream", "messages"], "stream": True}),
                ([1, 2], {"keys": [], "stream": False})]:
            c.request("POST", "/v1/raw", body=json.dumps(body))
            r = c.getresponse()
            got = r.read().decode()
            check(r.status == 200 and json.loads(got) == want, "%r: %d %r, want %r" % (body, r.status, got, want))
        c.request("POST", "/v1/raw", body="{\"a\": ")
        r = c.getresponse()
        got = r.read().decode()
        check(r.status == 400 and "<body>:1:" in got, "bad JSON: %d %r" % (r.status, got))
        c.close()
        rc, out, err = srv.stop()
        check(rc == 0 and "raw 3" in out, "exit %d, %r %s" % (rc, out, err))
    finally:
        srv.kill()


CASES = {
    "out_of_order": case_out_of_order,
    "stream": case_stream,
    "mixed": case_mixed,
    "disconnect": case_disconnect,
    "plain_disconnect": case_plain_disconnect,
    "sigterm": case_sigterm,
    "first_byte": case_first_byte,
    "bad_request": case_bad_request,
    "errors": case_errors,
    "json_route": case_json_route,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    names = args.cases or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit("serve_stream_test: no case %r (cases: %s)" % (n, ", ".join(CASES)))
    failed = 0
    with tempfile.TemporaryDirectory(prefix="sflow-serve-stream.") as tmp:
        exe = os.path.join(tmp, "serve_stream")
        p = subprocess.run([args.sflowc, PROGRAM, "-o", exe], capture_output=True, text=True)
        if p.returncode:
            sys.exit("serve_stream_test: sflowc failed:\n" + p.stderr)
        for n in names:
            t0 = time.time()
            try:
                CASES[n](exe)
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
