#!/usr/bin/env python3
"""obs_test.py — --metrics-port, --dashboard, --trace counters and
TensorBoard event files (docs/observability.md), over real HTTP on
loopback, with a real Prometheus and a real headless Chromium.

Cases (one ctest each, tests/obs/suite.cmake):

  metrics      tests/obs/train_small.sflow with --metrics-port, scraped
               while it trains: prometheus_client's parser reads the text;
               the build, task, actor, process and train families are
               there with their types; the train gauges are a step's
               figures of the metrics CSV exactly (loss, lr, grad_norm);
               samples_total is 16 per step; the failed task counted (1
               failed, 1 retry); /api/state's loss curve has the CSV's
               losses by step and its errors name the fail()'s
               file:line:col; / is the page; 404, 405
  flags        bad --metrics-port / --dashboard values, the same port for
               both, a port in use, a --metrics-bind that is no address,
               and 0.0.0.0 without SFLOW_METRICS_TOKEN: exit 2 naming the
               flag before any work; nothing listens without the flags
  token        --metrics-bind 0.0.0.0 with SFLOW_METRICS_TOKEN: 401
               without or with a wrong bearer token, 200 with it
  trace        --trace gains counter tracks ("ph":"C"): tasks queued, RSS
               bytes, samples/s (one per step, equal to the CSV's)
  tfevents     the committed event file (tests/obs/data) read by this
               file's own TFRecord reader: every length and data CRC-32C
               right, file_version first, 6 scalars a step; a fresh run
               writes the same records (wall times aside; the timing
               scalars' values aside) byte for byte; losses equal the
               CSV's as float32; a TensorBoard folder that is a file is a
               runtime error naming it; std.tune writes DIR/trial_N
  prometheus_train  Debian's prometheus scrapes examples/finetune.sflow
               (2 workers, a small recipe) every second; its HTTP API's
               query_range of sflow_train_loss has only the run's step
               losses (its CSV) and at least 3 of them
  prometheus_sweep  the same for examples/tune.sflow: sflow_tune_trials by
               state and sflow_tune_best_metric, which ends at the sweep's
               best (its JSON summary)
  nodes        a 4-node run (head and 3 workers behind real sshd on
               127.0.0.2-4, a member per worker): the head's /metrics has
               every node up, each worker's RSS, CPU seconds and collective
               calls under its node="K", a heartbeat round trip per worker,
               member 0's loss from its worker equal to a CSV step's; a
               scrape answers within 50 ms (median of 20)
  own          tests/obs/own_metrics.sflow: a program's own gauge, counter
               (from main and from tasks), histogram and dashboard curve
               through std.metrics in /metrics (prometheus_client's parser)
               and /api/state, with their labels and help; each bad use (a
               bad name, an sflow_ name, bad label text, a second kind, a
               falling counter) a runtime error naming it, exit 70
  serve        examples/serve.sflow with --metrics-port: std.serve's families
               in the run's /metrics, 7 requests counted
  gpu_emu      tests/gpu/nn/mlp_ce.sflow under the GPU emulator with no NVML:
               the caching allocator's families and its trace counter; no
               NVML family and nothing said
  dashboard    headless Chromium loads the page of --dashboard twice,
               seconds apart: the loss curve's points grow and match the
               steps the run has printed, the nodes and tasks are drawn,
               the failed task's error shows its location; a screenshot is
               kept as build/tests/obs/dashboard.png

    obs_test.py --sflowc build/bin/sflowc CASE
"""
import argparse
import csv
import glob
import http.client
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import pydeps  # noqa: E402

pydeps.ensure("obs_test", "prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

SKIP = 77
SMALL = os.path.join(HERE, "train_small.sflow")
COMMITTED = os.path.join(HERE, "data", "train_small.tfevents")
MODEL = os.path.join(ROOT, "build", "models", "all-minilm-l6-v2")
FORTUNES = "/usr/share/games/fortunes"


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)
    print("ok: " + msg)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(port, path, headers=None, method="GET", host="127.0.0.1"):
    c = http.client.HTTPConnection(host, port, timeout=10)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("Content-Type") or "", body


def wait_port(port, proc, deadline=15):
    end = time.time() + deadline
    while time.time() < end:
        if proc.poll() is not None:
            raise Fail("the program exited (%d) before its port %d answered" % (proc.returncode, port))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise Fail("nothing listened on port %d within %d s" % (port, deadline))


def compile_to(sflowc, src, out):
    p = subprocess.run([sflowc, src, "-o", out], capture_output=True, text=True)
    if p.returncode:
        raise Fail("sflowc %s: %s" % (src, p.stderr))
    return out


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# ---------------------------------------------------------- TFRecord

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xFFFFFFFF


def records(path):
    """Every record's bytes, each length and data CRC checked."""
    raw = open(path, "rb").read()
    out, at = [], 0
    while at < len(raw):
        if len(raw) - at < 12:
            raise Fail("%s: a torn header at byte %d" % (path, at))
        head = raw[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (lcrc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if lcrc != masked(crc32c(head)):
            raise Fail("%s: the length CRC at byte %d is wrong" % (path, at))
        data = raw[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", raw[at + 12 + n:at + 16 + n])
        if len(data) != n or dcrc != masked(crc32c(data)):
            raise Fail("%s: the data CRC of the record at byte %d is wrong" % (path, at))
        out.append(data)
        at += 16 + n
    return out


def varint(b, i):
    v, s = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    """A protobuf message's (field, wire, value, start, end) tuples."""
    i, out = 0, []
    while i < len(b):
        start = i
        key, i = varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise Fail("wire type %d" % w)
        out.append((f, w, v, start, i))
    return out


def event(b):
    """{wall, step, version | tag, value} of an Event."""
    e = {"step": 0}
    for f, w, v, _, _ in fields(b):
        if f == 1 and w == 1:
            e["wall"] = struct.unpack("<d", v)[0]
        elif f == 2 and w == 0:
            e["step"] = v
        elif f == 3 and w == 2:
            e["version"] = v.decode()
        elif f == 5 and w == 2:
            for f2, _, v2, _, _ in fields(v):
                if f2 == 1:
                    for f3, _, v3, _, _ in fields(v2):
                        if f3 == 1:
                            e["tag"] = v3.decode()
                        elif f3 == 2:
                            e["value"] = struct.unpack("<f", v3)[0]
    return e


def without_wall(b):
    """An Event's bytes with its wall_time field cut out."""
    for f, w, _, s, t in fields(b):
        if f == 1 and w == 1:
            return b[:s] + b[t:]
    return b


def read_events(path):
    rs = records(path)
    es = [event(r) for r in rs]
    check(es and es[0].get("version") == "brain.Event:2",
          "%s: the first record is file_version brain.Event:2" % os.path.basename(path))
    return rs, es


# ---------------------------------------------------------------- cases

class Ctx:
    def __init__(self, sflowc, tmp):
        self.sflowc = sflowc
        self.tmp = tmp
        self.small = compile_to(sflowc, SMALL, os.path.join(tmp, "train_small"))

    def start(self, *args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.Popen([self.small] + list(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=e, cwd=ROOT)

    def run(self, *args, env=None, timeout=120):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run([self.small] + list(args), capture_output=True, text=True, env=e,
                              cwd=ROOT, timeout=timeout)


def case_metrics(c):
    port = free_port()
    log = os.path.join(c.tmp, "m.csv")
    p = c.start("--metrics-port", str(port), "--epochs", "6", "--pace-ms", "150",
                "--metrics", log, "--fail-task")
    wait_port(port, p)
    time.sleep(1.5)
    st, ctype, body = get(port, "/metrics")
    check(st == 200 and ctype.startswith("text/plain; version=0.0.4"),
          "/metrics answers 200 in the text format 0.0.4 (%s)" % ctype)
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    want = {"sflow_build_info": "gauge", "sflow_tasks_submitted": "counter",
            "sflow_tasks_failed": "counter", "sflow_task_retries": "counter",
            "sflow_tasks_running": "gauge", "sflow_actors": "gauge",
            "sflow_actor_calls": "counter", "sflow_process_resident_memory_bytes": "gauge",
            "sflow_process_cpu_seconds": "counter", "sflow_node_up": "gauge",
            "sflow_train_loss": "gauge", "sflow_train_learning_rate": "gauge",
            "sflow_train_grad_norm": "gauge", "sflow_train_samples_per_second": "gauge",
            "sflow_train_step_seconds": "histogram", "sflow_train_comm_seconds": "histogram"}
    for name, kind in want.items():
        check(name in fams and fams[name].type == kind, "%s is a %s" % (name, kind))
    val = {f.name: {s.name: s.value for s in f.samples} for f in fams.values()}
    check(val["sflow_tasks_failed"]["sflow_tasks_failed_total"] == 1 and
          val["sflow_task_retries"]["sflow_task_retries_total"] == 1,
          "the failed task: 1 failed, 1 retry")
    check(val["sflow_process_resident_memory_bytes"]["sflow_process_resident_memory_bytes"] > 1e6,
          "RSS is over 1 MB")
    st2, _, js = get(port, "/api/state")
    state = json.loads(js)
    st3, ctype3, page = get(port, "/")
    check(st3 == 200 and ctype3.startswith("text/html") and b"<canvas" in page,
          "/ is the dashboard page")
    check(get(port, "/nowhere")[0] == 404, "404 for another path")
    check(get(port, "/metrics", method="POST")[0] == 405, "405 for POST")
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0, "the run ends with 0 (%s)" % err[-300:])
    rows = read_csv(log)
    step = int(val["sflow_train_step"]["sflow_train_step"])
    row = rows[step - 1]
    check(int(row["step"]) == step and float(row["loss"]) ==
          val["sflow_train_loss"]["sflow_train_loss"] and float(row["lr"]) ==
          val["sflow_train_learning_rate"]["sflow_train_learning_rate"] and
          float(row["grad_norm"]) == val["sflow_train_grad_norm"]["sflow_train_grad_norm"],
          "step %d's loss, lr and grad_norm equal the CSV's row exactly" % step)
    check(val["sflow_train_samples"]["sflow_train_samples_total"] == 16 * step,
          "samples_total is 16 per step")
    hist = val["sflow_train_step_seconds"]
    check(hist["sflow_train_step_seconds_count"] == step and
          abs(hist["sflow_train_step_seconds_sum"] -
              sum(float(r["seconds"]) for r in rows[:step])) < 1e-6,
          "the step-seconds histogram sums the CSV's seconds")
    curve = state["series"]["loss"]
    check(len(curve) >= 2 and all(float(rows[int(x) - 1]["loss"]) == y for x, y in curve),
          "/api/state's loss curve is the CSV's losses by step (%d points)" % len(curve))
    check(any("tests/obs/train_small.sflow:" in e and "fails on purpose" in e
              for e in state["errors"]), "the errors name the fail()'s location")


def case_flags(c):
    bad = [
        (["--metrics-port", "abc"], "--metrics-port: expected a TCP port from 1 to 65535"),
        (["--metrics-port", "0"], "--metrics-port: expected a TCP port from 1 to 65535"),
        (["--dashboard", "70000"], "--dashboard: expected a TCP port from 1 to 65535"),
        (["--metrics-port", "9", "--dashboard", "9"], "are both 9"),
        (["--metrics-port", str(free_port()), "--metrics-bind", "nowhere"],
         "--metrics-bind \"nowhere\" is not an IPv4 address"),
        (["--metrics-port", str(free_port()), "--metrics-bind", "0.0.0.0"],
         "set SFLOW_METRICS_TOKEN"),
    ]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    bad.append((["--dashboard", str(busy.getsockname()[1])],
                "cannot listen on 127.0.0.1:%d" % busy.getsockname()[1]))
    for args, text in bad:
        p = c.run(*args, env={"SFLOW_METRICS_TOKEN": ""})
        msg = p.stderr.replace("invalid value '", "").replace("' for ", ": ")
        check(p.returncode == 2 and (text in p.stderr or text in msg) and "done" not in p.stdout,
              "%s: exit 2, %r, no work done (%s)" % (" ".join(args), text, p.stderr.strip()[:120]))
    busy.close()


def case_token(c):
    port = free_port()
    p = c.start("--metrics-port", str(port), "--metrics-bind", "0.0.0.0", "--epochs", "20",
                "--pace-ms", "100", env={"SFLOW_METRICS_TOKEN": "s3cret-token"})
    try:
        wait_port(port, p)
        check(get(port, "/metrics")[0] == 401, "401 without a token")
        check(get(port, "/metrics", {"Authorization": "Bearer wrong"})[0] == 401,
              "401 with a wrong token")
        check(get(port, "/api/state", {"Authorization": "Bearer s3cret-tokenX"})[0] == 401,
              "401 with a longer token")
        st, _, body = get(port, "/metrics", {"Authorization": "Bearer s3cret-token"})
        check(st == 200 and b"sflow_build_info" in body, "200 with the token")
    finally:
        p.kill()
        p.communicate()


def case_trace(c):
    tr = os.path.join(c.tmp, "t.json")
    log = os.path.join(c.tmp, "t.csv")
    p = c.run("--trace", tr, "--epochs", "3", "--pace-ms", "100", "--metrics", log)
    check(p.returncode == 0, "the traced run ends with 0")
    evs = json.load(open(tr))["traceEvents"]
    cs = [e for e in evs if e.get("ph") == "C"]
    names = {e["name"] for e in cs}
    for n in ["tasks queued", "actor calls queued", "RSS bytes", "samples/s"]:
        check(n in names, "a counter track %r" % n)
    rss = [e["args"]["value"] for e in cs if e["name"] == "RSS bytes"]
    check(len(rss) >= 4 and all(v > 1e6 for v in rss),
          "RSS sampled %d times through the 1.2 s run, each over 1 MB" % len(rss))
    sps = [e["args"]["value"] for e in cs if e["name"] == "samples/s"]
    rows = read_csv(log)
    check(sps == [float(r["samples_per_s"]) for r in rows],
          "one samples/s sample per step, equal to the CSV's (%d)" % len(sps))
    ts = [e["ts"] for e in cs]
    check(ts == sorted(ts), "the counter samples are in time order")


SCALARS = ["loss", "learning_rate", "grad_norm", "samples_per_s", "step_seconds", "comm_seconds"]
TIMED = {"samples_per_s", "step_seconds", "comm_seconds"}


def case_tfevents(c):
    rs, es = read_events(COMMITTED)
    check(len(rs) == 1 + 6 * 2, "the committed file: file_version and 6 scalars for 2 steps")
    check([e["tag"] for e in es[1:]] == SCALARS * 2 and [e["step"] for e in es[1:]] ==
          [1] * 6 + [2] * 6, "its tags and steps in order")
    d = os.path.join(c.tmp, "tb")
    log = os.path.join(c.tmp, "tb.csv")
    p = c.run("--epochs", "1", "--samples", "32", "--tensorboard", d, "--metrics", log)
    check(p.returncode == 0, "the run with --tensorboard ends with 0")
    files = glob.glob(os.path.join(d, "events.out.tfevents.*.sflow"))
    check(len(files) == 1, "one event file in the folder: %s" % [os.path.basename(f) for f in files])
    fr, fe = read_events(files[0])
    check(len(fr) == len(rs), "the fresh file has the committed file's %d records" % len(rs))
    for a, b, e in zip(rs, fr, fe):
        if e.get("tag") in TIMED:
            check(len(a) == len(b), "record %s step %d: the same length" % (e["tag"], e["step"]))
        else:
            check(without_wall(a) == without_wall(b),
                  "record %s step %d: byte for byte the committed one (wall time aside)" %
                  (e.get("tag", "file_version"), e["step"]))
    rows = read_csv(log)
    losses = [e["value"] for e in fe if e.get("tag") == "loss"]
    check(losses == [struct.unpack("<f", struct.pack("<f", float(r["loss"])))[0] for r in rows],
          "the losses are the CSV's as float32")
    now = time.time()
    check(all(abs(e["wall"] - now) < 120 for e in fe), "wall times are the time of day")
    blocker = os.path.join(c.tmp, "afile")
    open(blocker, "w").close()
    p = c.run("--epochs", "1", "--tensorboard", blocker + "/sub")
    check(p.returncode == 70 and "TensorBoard folder " + blocker + "/sub" in p.stderr,
          "a folder under a file: a runtime error naming it (%s)" % p.stderr.strip()[-160:])
    tune = compile_to(c.sflowc, os.path.join(ROOT, "examples", "tune.sflow"),
                      os.path.join(c.tmp, "tune"))
    td = os.path.join(c.tmp, "tbt")
    out = os.path.join(c.tmp, "sweep.csv")
    p = subprocess.run([tune, "--samples", "3", "--epochs", "2", "--tensorboard", td, "--out", out,
                        "--quiet", "--checkpoint-dir", os.path.join(c.tmp, "ckpt-tune")], capture_output=True, text=True, cwd=os.path.join(ROOT, "examples"))
    check(p.returncode == 0, "the sweep with --tensorboard ends with 0 (%s)" % p.stderr[-200:])
    res = [r for r in read_csv(out) if r["metric"]]
    for t in range(3):
        fs = glob.glob(os.path.join(td, "trial_%d" % t, "events.out.tfevents.*"))
        check(len(fs) == 1, "trial_%d has its event file" % t)
        _, te = read_events(fs[0])
        want = [(int(r["iter"]), float(r["metric"])) for r in res if int(r["trial"]) == t]
        got = [(e["step"], e["value"]) for e in te[1:]]
        check([s for s, _ in got] == [s for s, _ in want] and
              all(abs(a - b) <= 1e-6 * max(1, abs(b)) for (_, a), (_, b) in zip(got, want)),
              "trial_%d: metric per iteration as in the sweep's CSV (%d)" % (t, len(got)))


# ---------------------------------------------------------- Prometheus

class Prometheus:
    def __init__(self, tmp, target_port):
        self.port = free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: sflow\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % target_port)
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.p = subprocess.Popen(["prometheus", "--config.file=" + cfg,
                                   "--storage.tsdb.path=" + os.path.join(tmp, "tsdb"),
                                   "--web.listen-address=127.0.0.1:%d" % self.port],
                                  stdout=self.log, stderr=subprocess.STDOUT)
        # Ready, and then the target's scrape loop running (its first try
        # made, against nothing yet): else the first scrape of a short run
        # can come seconds late.
        end = time.time() + 60
        while time.time() < end:
            try:
                st, _, body = get(self.port, "/api/v1/targets")
                ts = json.loads(body)["data"]["activeTargets"] if st == 200 else []
                if ts and not ts[0]["lastScrape"].startswith("0001"):
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise Fail("prometheus did not start scraping within 60 s")

    def range(self, query, t0, t1):
        q = urllib.parse.urlencode({"query": query, "start": "%.3f" % t0, "end": "%.3f" % t1,
                                    "step": "0.5"})
        st, _, body = get(self.port, "/api/v1/query_range?" + q)
        r = json.loads(body)
        check(st == 200 and r["status"] == "success", "query_range %s answers" % query)
        return r["data"]["result"]

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=30)
        self.log.close()


def need_prometheus():
    if not shutil.which("prometheus"):
        print("skip: no prometheus (scripts/install-deps.sh installs it)")
        sys.exit(SKIP)


def case_prometheus_train(c):
    need_prometheus()
    if not os.path.isdir(MODEL) or not os.path.isdir(FORTUNES):
        print("skip: the model (scripts/install-models.sh) or fortunes is missing")
        sys.exit(SKIP)
    exe = compile_to(c.sflowc, os.path.join(ROOT, "examples", "finetune.sflow"),
                     os.path.join(c.tmp, "finetune"))
    port = free_port()
    prom = Prometheus(c.tmp, port)
    try:
        log = os.path.join(c.tmp, "ft.csv")
        t0 = time.time()
        p = subprocess.run([exe, "--model", MODEL, "--data", FORTUNES, "--workers", "2",
                            "--categories", "computers,politics,science", "--samples", "64",
                            "--eval-samples", "8", "--epochs", "2", "--seq-len", "32",
                            "--batch", "16", "--log-every", "1", "--journal=false",
                            "--metrics", log, "--metrics-port", str(port)],
                           capture_output=True, text=True, timeout=600)
        t1 = time.time()
        check(p.returncode == 0, "the fine-tune ends with 0 (%s)" % p.stderr[-300:])
        time.sleep(1.5)
        rows = read_csv(log)
        losses = {float(r["loss"]) for r in rows}
        series = prom.range("sflow_train_loss", t0, t1 + 1)
        check(len(series) == 1 and series[0]["metric"]["job"] == "sflow",
              "one sflow_train_loss series from the job")
        got = [float(v) for _, v in series[0]["values"]]
        check(all(v in losses for v in got), "every scraped loss is a step's loss of the CSV")
        check(len(set(got)) >= 3, "at least 3 steps' losses scraped (%d of %d steps)" %
              (len(set(got)), len(rows)))
        printed = [float(m) for m in re.findall(r"^step \d+ epoch \d+ loss ([0-9.]+)", p.stdout, re.M)]
        check(all(any(abs(v - q) <= 5e-5 for q in printed) for v in got),
              "and each is one the run printed on a step line")
        up = prom.range("up", t0, t1)
        check(up and any(float(v) == 1 for _, v in up[0]["values"]), "prometheus saw the target up")
    finally:
        prom.close()


def case_prometheus_sweep(c):
    need_prometheus()
    exe = compile_to(c.sflowc, os.path.join(ROOT, "examples", "tune.sflow"),
                     os.path.join(c.tmp, "tune"))
    port = free_port()
    prom = Prometheus(c.tmp, port)
    try:
        out = os.path.join(c.tmp, "sweep.csv")
        # Prometheus scrapes once a second: a sweep that ends before two
        # scrapes says nothing, so a quick one runs again, larger (each run
        # its own time window), until the scrapes saw it fall.
        for samples, epochs in ((12, 16), (24, 32), (48, 64)):
            t0 = time.time()
            p = subprocess.run([exe, "--samples", str(samples), "--epochs", str(epochs),
                                "--concurrent", "2", "--out", out, "--metrics-port", str(port),
                                "--quiet", "--checkpoint-dir", os.path.join(c.tmp, "ckpt-sweep")],
                               capture_output=True, text=True, timeout=600,
                               cwd=os.path.join(ROOT, "examples"))
            t1 = time.time()
            check(p.returncode == 0, "the sweep ends with 0 (%s)" % p.stderr[-300:])
            time.sleep(1.5)
            series = prom.range("sflow_tune_best_metric", t0, t1 + 1)
            vals = [float(v) for _, v in series[0]["values"]] if len(series) == 1 else []
            if len(vals) >= 3:
                break
            print("note: %d samples x %d epochs took %.1f s, %d scrapes of the best metric; "
                  "again, larger" % (samples, epochs, t1 - t0, len(vals)))
        summary = json.load(open(out + ".json"))
        check(len(series) == 1, "one sflow_tune_best_metric series")
        check(len(vals) >= 2 and all(b <= a for a, b in zip(vals, vals[1:])),
              "the best metric only falls (mode min) over %d samples" % len(vals))
        best = summary.get("best_metric")
        check(best is not None and min(vals) >= best - 1e-12,
              "never below the sweep's best %s" % best)
        states = {s["metric"]["state"] for s in prom.range("sflow_tune_trials", t0, t1 + 1)}
        check({"pending", "running", "done", "failed"} <= states, "trials by state: %s" % sorted(states))
        metric = prom.range("sflow_tune_trial_metric", t0, t1 + 1)
        check(len(metric) >= 2, "a metric series per trial (%d)" % len(metric))
    finally:
        prom.close()


# ----------------------------------------------------------- Chromium

def chromium(*args):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    p = subprocess.run([exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                        "--disable-dev-shm-usage", "--user-data-dir=" + tempfile.mkdtemp()] +
                       list(args), capture_output=True, text=True, timeout=120)
    return p


def case_dashboard(c):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        print("skip: no chromium (scripts/install-deps.sh installs it)")
        sys.exit(SKIP)
    port = free_port()
    log = os.path.join(c.tmp, "d.csv")
    p = c.start("--dashboard", str(port), "--epochs", "80", "--pace-ms", "150", "--metrics", log,
                "--fail-task")
    url = "http://127.0.0.1:%d/" % port
    try:
        wait_port(port, p)
        time.sleep(1)
        seen = []
        for k in range(2):
            d = chromium("--virtual-time-budget=3000", "--dump-dom", url)
            m = re.search(r'<span id="points">(\d+)</span>', d.stdout)
            check(m is not None, "dump %d: the page rendered its point count" % k)
            n = int(m.group(1))
            canvas = re.search(r'id="c_loss"[^>]*data-points="(\d+)"', d.stdout) or \
                re.search(r'data-points="(\d+)"[^>]*id="c_loss"', d.stdout)
            check(canvas is not None and int(canvas.group(1)) == n,
                  "dump %d: the loss chart drew %d points" % (k, n))
            seen.append((n, d.stdout))
            if k == 0:
                time.sleep(3)
        (n0, dom0), (n1, dom1) = seen
        check(0 < n0 < n1, "the curve grows as steps complete: %d then %d points" % (n0, n1))
        check(re.search(r'id="status"[^>]*>live<', dom1) is not None, "the page says it is live")
        check("train_small.sflow:" in dom1 and "fails on purpose" in dom1,
              "the failed task's error with its location is listed")
        check(re.search(r'<td>localhost</td><td class="ok">yes</td><td>-</td>', dom1) is not None,
              "node 0 is listed up")
        check(re.search(r'class="n">1</span> failed', dom1) is not None,
              "the tasks box shows the failed task")
        shot = os.path.join(ROOT, "build", "tests", "obs", "dashboard.png")
        os.makedirs(os.path.dirname(shot), exist_ok=True)
        s = chromium("--virtual-time-budget=3000", "--window-size=1200,860", "--screenshot=" + shot,
                     "--hide-scrollbars", url)
        check(os.path.exists(shot) and os.path.getsize(shot) > 10000,
              "a screenshot kept at %s (%d bytes)" % (shot, os.path.getsize(shot) if
                                                     os.path.exists(shot) else 0))
    finally:
        p.kill()
        p.communicate()


def case_nothing(c):
    """Without the flags no port is opened (checked on a run's own /proc)."""
    p = c.start("--epochs", "6", "--pace-ms", "100")
    time.sleep(0.8)
    fds = os.listdir("/proc/%d/fd" % p.pid)
    socks = [f for f in fds if os.readlink("/proc/%d/fd/%s" % (p.pid, f)).startswith("socket:")]
    p.kill()
    p.communicate()
    check(not socks, "no socket is open in a run without --metrics-port or --dashboard")


def case_nodes(c):
    """A 4-node run (the head and 3 workers behind real sshd servers on
    127.0.0.2-4, tests/cluster's Cluster): the head's /metrics has every
    node up, each worker's RSS, CPU and collective figures under its
    node="K", and answers within 50 ms."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
    import cluster_test  # noqa: E402
    if not os.path.exists(cluster_test.SSHD):
        print("skip: no sshd (openssh-server, scripts/install-deps.sh)")
        sys.exit(SKIP)
    cl = cluster_test.Cluster(c.sflowc, 3)
    try:
        exe = cl.compile("train_small", open(SMALL).read())
        port = free_port()
        log = os.path.join(c.tmp, "n.csv")
        # A member per worker (the head only places them): each worker's
        # collectives and member 0's step figures come from node 1..3.
        p = cl.start("--metrics-port", str(port), "--workers", "3", "--head-runs-work=false",
                     "--epochs", "12", "--pace-ms", "150", "--metrics", log, prog=exe)
        wait_port(port, p, deadline=60)
        end = time.time() + 60
        fams = {}
        while time.time() < end:
            st, _, body = get(port, "/metrics")
            fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
            rss = fams.get("sflow_process_resident_memory_bytes")
            coll = fams.get("sflow_collective_calls")
            if rss and len(rss.samples) == 4 and coll and \
                    {s.labels.get("node") for s in coll.samples} >= {"1", "2", "3"}:
                break
            time.sleep(0.3)
        up = {s.labels["node"]: s.value for s in fams["sflow_node_up"].samples}
        check(up == {"0": 1, "1": 1, "2": 1, "3": 1}, "every node up: %s" % up)
        rss = {s.labels["node"]: s.value for s in fams["sflow_process_resident_memory_bytes"].samples}
        check(sorted(rss) == ["0", "1", "2", "3"] and all(v > 1e6 for v in rss.values()),
              "RSS of each node, labelled by node")
        cpu = {s.labels["node"] for s in fams["sflow_process_cpu_seconds"].samples}
        check(cpu == {"0", "1", "2", "3"}, "CPU seconds of each node")
        coll = {s.labels.get("node") for s in fams["sflow_collective_calls"].samples}
        check({"1", "2", "3"} <= coll, "the workers' collective calls by node: %s" % sorted(coll))
        rtt = {s.labels["node"] for s in fams["sflow_node_heartbeat_rtt_seconds"].samples}
        check(rtt == {"1", "2", "3"}, "a heartbeat round trip per worker")
        gaps = {s.labels["node"]: s.value for s in fams["sflow_node_heartbeat_gap_max_seconds"].samples}
        check(sorted(gaps) == ["1", "2", "3"] and all(0 <= v < 3 for v in gaps.values()),
              "each worker's longest heartbeat gap, under the 3 s limit: %s" % gaps)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            st, _, body = get(port, "/metrics")
            times.append(time.perf_counter() - t0)
        times.sort()
        print("scrape of the 4-node run: median %.1f ms, max %.1f ms (%d bytes)" %
              (1e3 * times[10], 1e3 * times[-1], len(body)))
        check(times[10] < 0.05, "a scrape answers within 50 ms (median %.1f ms)" % (1e3 * times[10]))
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "the run ends with 0 (%s)" % err[-300:])
        rows = read_csv(log)
        loss = [s for s in fams["sflow_train_loss"].samples]
        step = [s for s in fams["sflow_train_step"].samples]
        check(len(loss) == 1 and loss[0].labels.get("node") in ("1", "2", "3"),
              "member 0's loss comes from its worker, labelled node=%s" % loss[0].labels.get("node"))
        check(any(float(r["loss"]) == loss[0].value for r in rows) and
              0 < step[0].value <= len(rows), "and is a step's loss of the CSV (step %d)" % step[0].value)
        cl.expect_no_workers()
    finally:
        cl.close()


def case_own(c):
    exe = compile_to(c.sflowc, os.path.join(HERE, "own_metrics.sflow"), os.path.join(c.tmp, "own"))
    port = free_port()
    p = subprocess.Popen([exe, "--metrics-port", str(port), "--steps", "6", "--pace-ms", "400"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wait_port(port, p)
    time.sleep(1.2)
    body = get(port, "/metrics")[2].decode()
    state = json.loads(get(port, "/api/state")[2])
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0 and "own done 6" in out, "the run ends with 0 (%s)" % err[-300:])
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    kinds = {"own_value": "gauge", "own_steps": "counter", "own_tasks": "counter",
             "own_pause_seconds": "histogram"}
    for name, kind in kinds.items():
        check(name in fams and fams[name].type == kind, "%s is a %s" % (name, kind))
    check(fams["own_value"].documentation == "Half the step, by parity.", "own_value's help line")
    val = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    steps = val[("own_steps_total", ())]
    check(2 <= steps <= 5, "own_steps_total counts the steps so far (%g)" % steps)
    check(val[("own_tasks_total", (("where", "task"),))] >= steps,
          "own_tasks_total, counted in the tasks, has its label")
    par = {k[1]: v for k, v in val.items() if k[0] == "own_value"}
    check(len(par) == 2 and all(dict(l)["kind"] == "half" for l in par),
          "own_value has a series per parity label: %r" % par)
    check(val[("own_pause_seconds_count", ())] == steps and
          abs(val[("own_pause_seconds_sum", ())] - 0.02 * steps) < 1e-9,
          "own_pause_seconds' count and sum")
    curve = state["series"].get("own_curve", [])
    check(len(curve) >= 2 and all(y == (x * 0.5) ** 2 for x, y in curve),
          "/api/state has the program's curve own_curve (%d points)" % len(curve))
    bad = {"name": 'metrics.gauge: "9lives" is not a metric name',
           "reserved": "names starting with sflow_ are the runtime's",
           "labels": "are not Prometheus label text",
           "kind": "own_twice_total is a counter (its first use), not a gauge",
           "negative": "a counter only rises"}
    for flag, msg in bad.items():
        r = subprocess.run([exe, "--bad", flag, "--steps", "1"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
        check(r.returncode == 70 and "tests/obs/own_metrics.sflow:" in r.stderr and msg in r.stderr,
              "--bad %s: exit %d, %r" % (flag, r.returncode, r.stderr.strip()[-160:]))


def case_serve(c):
    """examples/serve.sflow with --metrics-port: std.serve's families are in
    the run's /metrics beside the runtime's, the request counter equal to
    the requests sent."""
    exe = compile_to(c.sflowc, os.path.join(ROOT, "examples", "serve.sflow"),
                     os.path.join(c.tmp, "serve"))
    sport, mport = free_port(), free_port()
    p = subprocess.Popen([exe, "--port", str(sport), "--metrics-port", str(mport),
                          "--checkpoint-dir", os.path.join(c.tmp, "ckpt-serve")],
                         cwd=os.path.join(ROOT, "examples"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_port(sport, p, deadline=60)
        body = json.dumps({"pixels": [float(i % 17) for i in range(64)]})

        def predict():
            cn = http.client.HTTPConnection("127.0.0.1", sport, timeout=10)
            cn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
            r = cn.getresponse()
            r.read()
            cn.close()
            return r.status

        # The port opens before the first replica is ready (503 until then).
        end = time.time() + 60
        while predict() != 200:
            check(time.time() < end, "a replica answers within 60 s")
            time.sleep(0.1)
        n = 1 + sum(predict() == 200 for _ in range(6))
        check(n == 7, "7 predictions answered 200")
        fams = {f.name: f for f in
                text_string_to_metric_families(get(mport, "/metrics")[2].decode())}
        req = [s for s in fams["sflow_serve_requests"].samples
               if s.labels.get("route") == "/predict" and s.labels.get("code") == "200"]
        check(req and req[0].value == 7, "sflow_serve_requests_total{route=/predict,code=200} is 7")
        check("sflow_serve_request_seconds" in fams and "sflow_build_info" in fams,
              "the serve histogram beside the runtime's families")
    finally:
        p.terminate()
        p.communicate(timeout=30)


def case_gpu_emu(c):
    """tests/gpu/nn/mlp_ce.sflow (a @gpus(1) actor training) under the host
    emulator (tests/gpu/emu) with SFLOW_NVML naming no file: the caching
    allocator's families in /metrics and its counter track in the trace;
    no NVML family and not a word about NVML."""
    if not c.emu or not os.path.exists(c.emu):
        print("skip: no emulator library (--emu)")
        sys.exit(SKIP)
    exe = compile_to(c.sflowc, os.path.join(ROOT, "tests", "gpu", "nn", "mlp_ce.sflow"),
                     os.path.join(c.tmp, "mlp_ce"))
    env = dict(os.environ, SFLOW_CUDA=c.emu, SFLOW_NVRTC=c.emu, SFLOW_CUBLAS=c.emu,
               SFLOW_NVML=os.path.join(c.tmp, "no-libnvidia-ml.so.1"),
               SFLOW_KERNEL_CACHE=os.path.join(ROOT, "build", "tests", "emu-kernel-cache"))
    port = free_port()
    tr = os.path.join(c.tmp, "g.json")
    p = subprocess.Popen([exe, "--metrics-port", str(port), "--trace", tr], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_port(port, p, deadline=60)
    vals = {}
    end = time.time() + 120
    while time.time() < end and p.poll() is None:
        try:
            body = get(port, "/metrics")[2].decode()
        except OSError:
            break
        vals = {f.name: f.samples[0].value for f in text_string_to_metric_families(body)
                if f.name.startswith("sflow_gpu")}
        if vals.get("sflow_gpu_alloc_in_use_bytes", 0) > 0:
            break
        time.sleep(0.2)
    out, err = p.communicate(timeout=180)
    check(p.returncode == 0 and "right 32" in out, "the emulated GPU run ends with 0")
    check(vals.get("sflow_gpu_alloc_in_use_bytes", 0) > 0 and
          vals.get("sflow_gpu_alloc_peak_bytes", 0) >= vals["sflow_gpu_alloc_in_use_bytes"] and
          "sflow_gpu_alloc_cached_bytes" in vals,
          "the allocator's in-use, cached and peak bytes: %s" % vals)
    check(not any(k.startswith(("sflow_gpu_utilization", "sflow_gpu_memory", "sflow_gpu_power",
                                "sflow_gpu_temperature")) for k in vals),
          "no NVML family without NVML")
    check("nvml" not in err.lower() and "nvidia-ml" not in err.lower(), "and nothing said about it")
    evs = json.load(open(tr))["traceEvents"]
    dm = [e["args"]["value"] for e in evs if e.get("name") == "device memory in use bytes"]
    check(dm and max(dm) > 0, "a device memory counter track in the trace (peak %d bytes)" %
          (max(dm) if dm else 0))


CASES = {n[5:]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--emu", help="the GPU emulator library (tests/gpu/emu), for gpu_emu")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    names = a.cases or list(CASES)
    with tempfile.TemporaryDirectory(prefix="sflow-obs-") as tmp:
        c = Ctx(os.path.abspath(a.sflowc), tmp)
        c.emu = os.path.abspath(a.emu) if a.emu else None
        for n in names:
            print("== " + n)
            try:
                CASES[n](c)
            except Fail as e:
                print("FAIL: %s: %s" % (n, e))
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
