#!/usr/bin/env python3
"""overhead.py — what --metrics-port and --dashboard cost a fine-tune step
(docs/observability.md, "Cost"): examples/finetune.sflow on a small
recipe, run alternately without and with both flags (a scraper reading
/metrics and /api/state twice a second while it trains, as Prometheus and
an open dashboard would), each run's mean step seconds from its metrics
CSV (the first step of each epoch left out: it carries the epoch's start).

    overhead.py --sflowc build/bin/sflowc [--pairs 3] [--workers 2]

Prints each run's mean and the median of the with/without ratios.  On a
shared machine the figures are noisy: compare the spread of the runs of
one kind with the difference between the kinds.
"""
import argparse
import csv
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "build", "models", "all-minilm-l6-v2")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def scraper(ports, stop):
    while not stop.is_set():
        for port, path in ports:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=2).read()
            except OSError:
                pass
        stop.wait(0.5)


def one(exe, tmp, k, observed, workers):
    log = os.path.join(tmp, "run%d.csv" % k)
    args = [exe, "--model", MODEL, "--workers", str(workers), "--categories",
            "computers,politics,science", "--samples", "96", "--eval-samples", "8", "--epochs", "2",
            "--seq-len", "32", "--batch", "16", "--journal=false", "--metrics", log, "--quiet"]
    stop = threading.Event()
    t = None
    if observed:
        mp, dp = free_port(), free_port()
        args += ["--metrics-port", str(mp), "--dashboard", str(dp)]
        t = threading.Thread(target=scraper, args=([(mp, "/metrics"), (dp, "/api/state")], stop))
        t.start()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, cwd=os.path.join(ROOT, "examples"))
    stop.set()
    if t:
        t.join()
    rows = list(csv.DictReader(open(log)))
    per_epoch = {}
    for r in rows:
        per_epoch.setdefault(r["epoch"], []).append(float(r["seconds"]))
    secs = [s for v in per_epoch.values() for s in v[1:]]
    return statistics.mean(secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "finetune")
        subprocess.run([a.sflowc, os.path.join(ROOT, "examples", "finetune.sflow"), "-o", exe],
                       check=True)
        ratios = []
        for k in range(a.pairs):
            order = [False, True] if k % 2 == 0 else [True, False]
            got = {}
            for obs in order:
                got[obs] = one(exe, tmp, 2 * k + obs, obs, a.workers)
                print("pair %d %-13s mean step %.4f s" % (k, "observed" if obs else "plain",
                                                           got[obs]), flush=True)
            ratios.append(got[True] / got[False])
        print("with/without ratio per pair: %s; median %+.2f%%" %
              (", ".join("%.4f" % r for r in ratios), 100 * (statistics.median(ratios) - 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
