#!/usr/bin/env python3
"""std.tune checked from outside, against this file's own implementation.

curves.sflow sweeps a trainable whose loss at iteration i is
floor + scale / i (floor, scale from the config) and prints every
configuration, every scheduler decision in order and the final table.
This test re-derives all of it independently:

  * the configurations: the hash of docs/tune.md ("Search") and Ray's
    sampling rules, value for value (bit for bit);
  * the order of results: a simulation of the driver (max_concurrent
    iterations in flight, awaited oldest first), so the sequence cannot
    depend on timing;
  * PBT's exploits and the configs they explore (Ray's
    PopulationBasedTraining by iterations), simulated the same way;
  * each decision: Ray Tune's AsyncHyperBandScheduler (_Bracket.on_result,
    on_trial_result's max_t stop, on_trial_complete after every stop),
    reimplemented here with numpy's nanpercentile as the cutoff; the
    median stopping rule and FIFO likewise;
  * the same output with --threads 1 and 4 (the same configurations on
    every run), and other configurations for another seed;
  * a trial whose task fails is retried per its @retry and reported failed,
    the sweep going on; one failing once succeeds on its retry;
  * bad spaces are runtime errors naming the parameter;
  * the best checkpoint is the state of the best iteration;
  * trials take their task's @cpus: no more run at once than the pool
    holds, nor than max_concurrent;
  * kill-and-resume: SIGKILL at several points (twice in a row too) and
    --resume (an ASHA sweep, a PBT one, one with a failed trial) prints
    exactly the uninterrupted run's output, and runs
    exactly the iterations it does not answer from the journal.

Usage: tune_test.py --sflowc PATH [--only NAME]
"""

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pydeps  # noqa: E402

pydeps.ensure("tune_test", "numpy")
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
M64 = (1 << 64) - 1
GOLD = 0x9e3779b97f4a7c15
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL " + msg)


# ------------------------------------------------------------ the searcher

def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return z ^ (z >> 31)


def u01(seed, trial, slot):
    k = mix64((seed + GOLD) & M64)
    k = mix64((k + GOLD * (trial + 1)) & M64)
    k = mix64((k + GOLD * (slot + 2)) & M64)
    return (k >> 11) * 2.0 ** -53


def curves_config(seed, t, spin, log, ties=False):
    """curves.sflow's space: floor uniform(0, 1), width choice, opt.scale
    loguniform(0.1, 10), spin_ms and log one-point grids; with ties, floor
    and opt.scale choices of 3 and 2 values."""
    if ties:
        return {"floor": [0.1, 0.2, 0.3][int(math.floor(u01(seed, t, 0) * 3))],
                "width": [16.0, 32.0, 64.0][int(math.floor(u01(seed, t, 1) * 3))],
                "opt.scale": [1.0, 2.0][int(math.floor(u01(seed, t, 2) * 2))],
                "spin_ms": spin, "log": log}
    return {
        "floor": 0.0 + u01(seed, t, 0) * (1.0 - 0.0),
        "width": [16.0, 32.0, 64.0][int(math.floor(u01(seed, t, 1) * 3))],
        "opt.scale": math.exp(math.log(0.1) + u01(seed, t, 2) * (math.log(10.0) - math.log(0.1))),
        "spin_ms": spin,
        "log": log,
    }


# ------------------------------------------------------------ the schedulers

class Bracket:
    """Ray Tune's async_hyperband._Bracket, stop_last_trials=True."""

    def __init__(self, min_t, max_t, rf, s):
        self.rf = rf
        n = int(math.log(max_t / min_t) / math.log(rf) - s + 1)
        self.rungs = [(min_t * rf ** (k + s), {}) for k in reversed(range(n))]

    def cutoff(self, recorded):
        if not recorded:
            return None
        return np.nanpercentile(list(recorded.values()), (1 - 1 / self.rf) * 100)

    def on_result(self, trial, cur_iter, cur_rew):
        action = "continue"
        for milestone, recorded in self.rungs:
            if cur_iter < milestone or trial in recorded:
                continue
            cutoff = self.cutoff(recorded)
            if cutoff is not None and cur_rew < cutoff:
                action = "stop"
            recorded[trial] = cur_rew
            break
        return action


class Asha:
    def __init__(self, o, ntrials):
        self.o = o
        self.brackets = [Bracket(o["grace"], o["max_t"], o["rf"], s) for s in range(o["brackets"])]
        sizes = [len(b.rungs) for b in self.brackets]
        w = [math.exp(n - max(sizes)) for n in sizes]
        self.of = {}
        for t in range(ntrials):
            if len(w) == 1:
                self.of[t] = 0
                continue
            u, acc, self.of[t] = u01(o["seed"], t, -1) * sum(w), 0.0, len(w) - 1
            for s, x in enumerate(w):
                acc += x
                if u < acc:
                    self.of[t] = s
                    break

    def decide(self, t, it, metric, hist):
        rew = -metric if self.o["mode"] == "min" else metric
        b = self.brackets[self.of[t]]
        if it >= self.o["max_t"]:
            b.on_result(t, it, rew)  # on_trial_complete
            return "terminate"
        action = b.on_result(t, it, rew)
        if action == "stop":
            b.on_result(t, it, rew)  # on_trial_complete: a no-op, as in Ray
        return action


class Median:
    """docs/tune.md's median stopping rule, by iterations."""

    def __init__(self, o):
        self.o = o

    def decide(self, t, it, metric, hist):
        if it >= self.o["max_t"]:
            return "terminate"
        if it < self.o["grace"]:
            return "continue"
        sign = -1.0 if self.o["mode"] == "min" else 1.0
        means = [sum(sign * x for x in h[:it]) / it for u, h in hist.items() if u != t and len(h) >= it]
        if len(means) < 3:
            return "continue"
        best = max(sign * x for x in hist[t])
        return "stop" if best < float(np.percentile(means, 50)) else "continue"


class Fifo:
    def __init__(self, o):
        self.o = o

    def decide(self, t, it, metric, hist):
        return "terminate" if it >= self.o["max_t"] else "continue"


# curves.sflow's space in order: (name, kind, lo, hi, values).
SPACE = [("floor", "uniform", 0.0, 1.0, None), ("width", "choice", 0, 0, [16.0, 32.0, 64.0]),
         ("opt.scale", "loguniform", 0.1, 10.0, None), ("spin_ms", "grid", 0, 0, None), ("log", "grid", 0, 0, None)]


def sample(kind, lo, hi, values, u):
    if kind == "uniform":
        return lo + u * (hi - lo)
    if kind == "loguniform":
        return math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
    return values[int(math.floor(u * len(values)))]


def pbt_explore(o, cfg, t, it):
    """Ray's pbt._explore with resample_probability 0.25, factors 1.2/0.8,
    list values moved to a neighbour; the draws of docs/tune.md."""
    out = dict(cfg)
    for j, (name, kind, lo, hi, values) in enumerate(SPACE):
        if kind == "grid":
            continue
        slot = 2000000 + it * 4096 + j * 3
        if u01(o["seed"], t, slot) < 0.25:
            out[name] = sample(kind, lo, hi, values, u01(o["seed"], t, slot + 2))
        elif kind == "choice":
            i = values.index(cfg[name]) + (1 if u01(o["seed"], t, slot + 1) < 0.5 else -1)
            out[name] = values[min(max(i, 0), len(values) - 1)]
        else:
            out[name] = cfg[name] * (1.2 if u01(o["seed"], t, slot + 1) < 0.5 else 0.8)
    return out


def expected_pbt(o, cfgs):
    """PBT by iterations (Ray's PopulationBasedTraining: _quantiles over the
    running trials' latest rewards, exploit a top trial's checkpoint and
    config, explore), simulated with the driver's order of results."""
    n = len(cfgs)
    cfg = [dict(c) for c in cfgs]
    iters, last, lastp, state = [0] * n, [None] * n, [0] * n, ["pending"] * n
    hist = {t: [] for t in range(n)}
    sign = -1.0 if o["mode"] == "min" else 1.0
    fly, nxt, out = [], 0, []
    while fly or nxt < n:
        while len(fly) < o["concurrent"] and nxt < n:
            fly.append(nxt)
            state[nxt] = "running"
            nxt += 1
        t = fly.pop(0)
        it = iters[t] + 1
        metric = cfg[t]["floor"] + cfg[t]["opt.scale"] / float(it)
        iters[t], last[t] = it, metric
        hist[t].append(metric)
        action = "continue"
        if it >= o["max_t"]:
            action = "terminate"
        elif it - lastp[t] >= o["interval"]:
            lastp[t] = it
            live = sorted((u for u in range(n) if hist[u] and state[u] == "running"), key=lambda u: sign * last[u])
            if len(live) > 1:
                k = int(math.ceil(len(live) * 0.25))
                if k > len(live) / 2:
                    k = len(live) // 2
                if t in live[:k]:
                    donor = live[len(live) - k + int(math.floor(u01(o["seed"], t, 1000000 + it) * k))]
                    action = "exploit %d" % donor
                    cfg[t] = pbt_explore(o, cfg[donor], t, it)
                    iters[t] = iters[donor]
        out.append((t, it, metric, action))
        if action == "terminate":
            state[t] = "terminated"
        else:
            fly.append(t)
    return out, hist, cfg


def expected(o, cfgs):
    """The decisions the sweep must print, by simulating the driver."""
    n = len(cfgs)
    sched = {"asha": lambda: Asha(o, n), "median": lambda: Median(o), "fifo": lambda: Fifo(o)}[o["scheduler"]]()
    hist = {t: [] for t in range(n)}
    fly, nxt, out = [], 0, []
    while fly or nxt < n:
        while len(fly) < o["concurrent"] and nxt < n:
            fly.append(nxt)
            nxt += 1
        t = fly.pop(0)
        it = len(hist[t]) + 1
        c = cfgs[t]
        metric = c["floor"] + c["opt.scale"] / float(it)
        hist[t].append(metric)
        action = sched.decide(t, it, metric, hist)
        out.append((t, it, metric, action))
        if action == "continue":
            fly.append(t)
    return out, hist


# ------------------------------------------------------------ running

def compile_(sflowc, src, exe):
    r = subprocess.run([sflowc, src, "-o", exe], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("tune_test: cannot compile %s:\n%s" % (src, r.stderr))


def run(exe, args, cwd, timeout=300):
    r = subprocess.run([exe] + args, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def parse(out):
    cfgs, decs, trials, best = {}, [], {}, None
    for line in out.splitlines():
        w = line.split(" ", 3)
        if w[0] == "config":
            cfgs[int(w[1])] = (int(w[2]), json.loads(w[3]))
        elif w[0] == "decision":
            t, it, m, a = line.split(" ", 4)[1:]
            decs.append((int(t), int(it), float(m), a))
        elif w[0] == "trial":
            x = line.split()
            trials[int(x[1])] = (x[2], int(x[3]), float(x[4]))
        elif w[0] == "best":
            best = line
    return cfgs, decs, trials, best


def check_sweep(exe, tmp, name, o, extra=()):
    args = ["--journal=false", "--scheduler", o["scheduler"], "--samples", str(o["samples"]),
            "--max_t", str(o["max_t"]), "--concurrent", str(o["concurrent"]), "--seed", str(o["seed"]),
            "--rf", str(o["rf"]), "--grace", str(o["grace"]), "--brackets", str(o["brackets"]),
            "--mode", o["mode"], "--interval", str(o.get("interval", 4))] + (["--ties"] if o.get("ties") else []) + list(extra)
    rc, out, err = run(exe, args, tmp)
    if rc != 0:
        fail("%s: exit %d\n%s" % (name, rc, err))
        return None
    cfgs, decs, trials, best = parse(out)
    want_cfgs = [curves_config(o["seed"], t, 0.0, 0.0, o.get("ties")) for t in range(o["samples"])]
    if o["scheduler"] == "pbt":
        want, hist, final_cfgs = expected_pbt(o, want_cfgs)
    else:
        want, hist = expected(o, want_cfgs)
        final_cfgs = want_cfgs
    for t, c in enumerate(final_cfgs):
        got = cfgs.get(t, (None, None))[1]
        if got != c:
            fail("%s: trial %d config %s, expected %s" % (name, t, got, c))
            return None
    if o["scheduler"] == "asha":
        a = Asha(o, o["samples"])
        for t in range(o["samples"]):
            if cfgs[t][0] != a.of[t]:
                fail("%s: trial %d in bracket %d, expected %d" % (name, t, cfgs[t][0], a.of[t]))
    for i, (g, w) in enumerate(zip(decs, want)):
        if g != w:
            fail("%s: decision %d is %s, expected %s (trial, iteration, metric, action)" % (name, i, g, w))
            return None
    if len(decs) != len(want):
        fail("%s: %d decisions, expected %d" % (name, len(decs), len(want)))
        return None
    for t, h in hist.items():
        final = {"stop": "stopped", "terminate": "terminated"}[[d for d in want if d[0] == t][-1][3]]
        if o["scheduler"] == "pbt":
            # A trial's iterations jump to its donor's when it exploits.
            n_it = [d for d in want if d[0] == t][-1][1]
            best_t = min(h) if o["mode"] == "min" else max(h)
            if trials.get(t) != (final, n_it, best_t):
                fail("%s: trial %d is %s, expected %s" % (name, t, trials.get(t), (final, n_it, best_t)))
            continue
        best_t = min(h) if o["mode"] == "min" else max(h)
        if trials.get(t) != (final, len(h), best_t):
            fail("%s: trial %d is %s, expected %s" % (name, t, trials.get(t), (final, len(h), best_t)))
    # The best result: the first trial, at its first iteration, with the
    # best metric; its checkpoint is that iteration's state.
    sign = 1.0 if o["mode"] == "min" else -1.0
    bt, bi, bm = min(((t, it, m) for t, it, m, a in want), key=lambda d: (sign * d[2], d[0], d[1]))
    b = best.split()
    if (int(b[1]), int(b[2]), float(b[3])) != (bt, bi, bm) or int(b[-2]) != bi:
        fail("%s: best line %r, expected trial %d iteration %d metric %r" % (name, best, bt, bi, bm))
    stops = sum(1 for d in want if d[3] == "stop")
    exploits = sum(1 for d in want if d[3].startswith("exploit"))
    print("ok %s: %d configs, %d decisions (%d stops, %d exploits) as the reference"
          % (name, len(want_cfgs), len(want), stops, exploits))
    return out


BASE = dict(scheduler="asha", samples=40, max_t=30, concurrent=4, seed=7, rf=4.0, grace=1, brackets=1, mode="min")


def test_decisions(sflowc, tmp):
    exe = os.path.join(tmp, "curves")
    compile_(sflowc, os.path.join(HERE, "curves.sflow"), exe)
    out = check_sweep(exe, tmp, "asha-defaults", BASE)
    check_sweep(exe, tmp, "asha-rf3-grace2-3brackets-max", dict(BASE, rf=3.0, grace=2, brackets=3, max_t=27,
                                                               mode="max", concurrent=3, samples=30))
    check_sweep(exe, tmp, "asha-rf2-concurrent1", dict(BASE, rf=2.0, concurrent=1, max_t=16, samples=20))
    check_sweep(exe, tmp, "asha-ties", dict(BASE, ties=True, samples=30, rf=2.0, max_t=8))
    check_sweep(exe, tmp, "median", dict(BASE, scheduler="median", grace=3, max_t=12, samples=20))
    check_sweep(exe, tmp, "pbt", dict(BASE, scheduler="pbt", samples=16, max_t=20, interval=4))
    check_sweep(exe, tmp, "pbt-max-interval3", dict(BASE, scheduler="pbt", samples=12, max_t=15, interval=3,
                                                    mode="max", concurrent=6))
    check_sweep(exe, tmp, "fifo", dict(BASE, scheduler="fifo", max_t=5, samples=8))
    # The CSV holds every result in order with its decision; the JSON the
    # best trial and every trial's metrics.
    csv_path = os.path.join(tmp, "sweep.csv")
    rc, o1, err = run(exe, ["--journal=false", "--seed", "7", "--out", csv_path], tmp)
    import csv as csvmod
    with open(csv_path) as f:
        rows = list(csvmod.DictReader(f))
    with open(csv_path + ".json") as f:
        summary = json.load(f)
    decs = parse(o1)[1]
    best = parse(o1)[3].split()
    got = [(int(r["trial"]), int(r["iter"]), float(r["metric"]), r["action"]) for r in rows]
    if got != decs or summary["best_trial"] != int(best[1]) or summary["best_metric"] != float(best[3]) or \
            len(summary["trials"]) != 40 or [len(t["metrics"]) for t in summary["trials"]] != \
            [parse(o1)[2][t][1] for t in range(40)]:
        fail("the CSV or JSON of a sweep does not match its decisions")
    else:
        print("ok the CSV holds every result and decision in order, the JSON the best trial and all metrics")
    # The same configurations and decisions on every run, whatever the pool.
    for threads in ("1", "4"):
        rc, o2, _ = run(exe, ["--journal=false", "--threads", threads, "--seed", "7"], tmp)
        if o2 != out:
            fail("--threads %s printed another sweep than the first run" % threads)
    rc, o3, _ = run(exe, ["--journal=false", "--seed", "8"], tmp)
    if parse(o3)[0] == parse(out)[0]:
        fail("--seed 8 gave the configurations of --seed 7")
    print("ok the same sweep with --threads 1 and 4; another for another seed")


FAILING = r'''
import std.tune
// Trial 2 always fails; trial 3 fails on the first attempt of its second
// iteration only.
@retry(2)
task step(cfg: map<str, f64>, st: tune.State) -> tune.State {
  if st.trial == 2 { fail("diverged at iteration " + str(st.iter)) }
  if st.trial == 3 && st.iter == 1 && attempt() == 0 { fail("flaky") }
  return tune.report(st, cfg["x"] / f64(st.iter + 1))
}
workflow main() {
  let r = tune.run(step, [tune.uniform("x", 1.0, 2.0)], tune.options(scheduler = "fifo", num_samples = 5, max_t = 3))
  for t in r.trials { print(t.id, t.state, t.iters, t.error) }
  print("best", r.best_trial)
}
'''


def test_failures(sflowc, tmp):
    src = os.path.join(tmp, "failing.sflow")
    with open(src, "w") as f:
        f.write(FAILING)
    exe = os.path.join(tmp, "failing")
    compile_(sflowc, src, exe)
    rc, out, err = run(exe, ["--journal=false"], tmp)
    lines = out.splitlines()
    want2 = "2 failed 0 task 'step' failed after 3 attempts:"
    ok = (rc == 0 and len(lines) == 6 and lines[2].startswith(want2) and "diverged at iteration 0" in lines[2]
          and all(lines[i].startswith("%d terminated 3 " % i) for i in (0, 1, 3, 4)))
    if not ok or "retries" not in err:
        fail("a failing trial: exit %d\n%s\n%s" % (rc, out, err))
    else:
        print("ok a failing trial is retried per @retry (3 attempts), reported failed; a flaky one recovers")
    # The live table: a final one on stderr (trial, state, iter, metric,
    # best, config), none with --quiet.
    table = [l for l in err.splitlines() if l.startswith("tune: 5 trials (")]
    rows = [l.split() for l in err.splitlines() if l[:1].isdigit()]
    want_rows = [["2", "failed", "0", "-", "-"], ["4", "terminated", "3"]]
    if not table or table[-1] != "tune: 5 trials (4 terminated, 1 failed)" or \
            not any(r[:5] == want_rows[0] for r in rows) or not any(r[:3] == want_rows[1] for r in rows):
        fail("the final table on stderr:\n%s" % err)
    # The failed trial's reason under its row, on the error's first line.
    errline = [l for l in err.splitlines() if l.startswith("      error: ")]
    if not errline or "task 'step' failed after 3 attempts:" not in errline[-1] or \
            "diverged at iteration 0" not in errline[-1]:
        fail("the table does not give the failed trial's error:\n%s" % err)
    else:
        print("ok the table gives a failed trial's error under its row")
    rc, out, err = run(exe, ["--journal=false", "--quiet"], tmp)
    if "tune:" in err:
        fail("--quiet still shows the table:\n%s" % err)
    else:
        print("ok the live table on stderr (states, iterations, metrics, configs); none with --quiet")


ALL_FAIL = r'''
import std.tune
// Every trial fails, with a message holding a comma, quotes and a line
// break, so the CSV and the JSON must quote it.
task step(cfg: map<str, f64>, st: tune.State) -> tune.State {
  if st.trial == 1 && st.iter == 0 { return tune.report(st, 1.0) }
  fail("bad \"lr\", trial " + str(st.trial) + "\nsecond line")
  return st
}
workflow main(out: str = "") {
  let r = tune.run(step, [tune.uniform("x", 1.0, 2.0)],
                   tune.options(scheduler = "fifo", num_samples = 3, max_t = 2, out = out))
  print("returned", len(r.trials))
}
'''


def test_all_failed(sflowc, tmp):
    """Each failed trial's error in the CSV and the JSON; a sweep whose
    every trial failed is an error giving the first one; examples/tune.sflow
    on a data path that does not exist says so, not a slice error."""
    import csv
    src = os.path.join(tmp, "all_fail.sflow")
    with open(src, "w") as f:
        f.write(ALL_FAIL)
    exe = os.path.join(tmp, "all_fail")
    compile_(sflowc, src, exe)
    out_csv = os.path.join(tmp, "all_fail.csv")
    rc, out, err = run(exe, ["--journal=false", "--out", out_csv], tmp)
    want = 'tune: every one of the 3 trials failed; the first (trial 0): task \'step\' failed'
    if rc != 70 or want not in err or 'bad "lr", trial 0' not in err or "returned" in out:
        fail("every trial failed: exit %d, stdout %r, stderr:\n%s" % (rc, out, err))
    else:
        print("ok a sweep whose every trial failed is an error giving the first trial's")
    try:
        with open(out_csv, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(out_csv + ".json") as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        fail("the results of a failed sweep: %s" % e)
        return
    failed = {int(r["trial"]): r.get("error") or "" for r in rows if r["action"] == "failed"}
    ok_rows = [r for r in rows if r["action"] != "failed"]
    errs = {t["trial"]: t.get("error", "") for t in summary["trials"]}
    good = (sorted(failed) == [0, 1, 2] and all('bad "lr", trial %d\nsecond line' % t in failed[t] for t in failed)
            and len(ok_rows) == 1 and ok_rows[0].get("error") == ""
            and all(t["state"] == "failed" for t in summary["trials"])
            and all('bad "lr", trial %d\nsecond line' % t in errs[t] for t in (0, 1, 2)))
    if not good:
        fail("the errors in the CSV and JSON:\n%s\n%s" % (open(out_csv).read(), open(out_csv + ".json").read()))
    else:
        print("ok each failed trial's error in the CSV (a quoted field) and in the JSON")
    ex = os.path.join(tmp, "tune_example")
    compile_(sflowc, os.path.join(ROOT, "examples", "tune.sflow"), ex)
    rc, out, err = run(ex, ["--journal=false", "--samples", "2", "--epochs", "1",
                            "--path", os.path.join(tmp, "no-such.csv")], tmp)
    if rc != 70 or "every one of the 2 trials failed" not in err or "no-such.csv" not in err or \
            "out of range" in err:
        fail("examples/tune.sflow with no data: exit %d, stderr:\n%s" % (rc, err))
    else:
        print("ok examples/tune.sflow whose trials all fail names the first error")


BAD = [
    ('tune.uniform("lr", 0.1, 0.01)', r'tune: parameter "lr": low 0.1 is above high 0.01'),
    ('tune.loguniform("lr", 0.0, 1.0)', r'tune: parameter "lr": log-uniform needs bounds above 0, got low 0.0'),
    ('tune.loguniform("lr", -1.0, 1.0)', r'tune: parameter "lr": log-uniform needs bounds above 0, got low -1.0'),
    ('tune.choice("act", xs)', r'tune: parameter "act": choice of no values'),
    ('tune.grid("bs", xs)', r'tune: parameter "bs": grid of no values'),
    ('tune.randint("width", 8, 8)', r'tune: parameter "width": low 8 must be below high 8 (high is excluded)'),
    ('tune.quniform("drop", 0.0, 1.0, 0.0)', r'tune: parameter "drop": quantum q must be above 0, got 0.0'),
]


def expect_error(sflowc, tmp, name, body, msg):
    """A sweep whose main is `body` exits 70 before printing anything,
    with msg on stderr."""
    src = os.path.join(tmp, name + ".sflow")
    with open(src, "w") as f:
        f.write("import std.tune\n"
                "task step(cfg: map<str, f64>, st: tune.State) -> tune.State { return tune.report(st, 1.0) }\n"
                "workflow main() {\n%s  print(len(r.trials))\n}\n" % body)
    exe = os.path.join(tmp, name)
    compile_(sflowc, src, exe)
    rc, out, err = run(exe, ["--journal=false"], tmp)
    if rc != 70 or msg not in err or out:
        fail("%s: exit %d, stderr %r (wanted %r)" % (name, rc, err, msg))


def test_bad_spaces(sflowc, tmp):
    for i, (p, msg) in enumerate(BAD):
        expect_error(sflowc, tmp, "bad%d" % i,
                     "  let xs: f64[] = []\n"
                     "  let r = tune.run(step, [tune.uniform(\"ok\", 0.0, 1.0), %s], tune.options())\n" % p,
                     msg)
    for i, (opt, msg) in enumerate([('scheduler = "hyperband"', 'tune: scheduler must be "fifo", "asha", "median" or "pbt", got "hyperband"'),
                                    ('reduction_factor = 1.0', 'tune: reduction_factor must be above 1, got 1.0'),
                                    ('grace_period = 0', 'tune: grace_period must be in [1, max_t], got 0')]):
        expect_error(sflowc, tmp, "badopt%d" % i,
                     "  let r = tune.run(step, [tune.uniform(\"x\", 0.0, 1.0)], tune.options(%s))\n" % opt,
                     msg)
    print("ok %d bad spaces and 3 bad options are runtime errors naming the parameter" % len(BAD))


BEST = r'''
import std.tune
// The best iteration is the second (loss 1.0); the state it returned must
// come back as the best checkpoint, values included, though the later
// iterations set the same key.
task step(cfg: map<str, f64>, st: tune.State) -> tune.State {
  var s = tune.report(st, [3.0, 1.0, 2.0, 4.0][st.iter])
  s.values["at"] = f64(st.iter + 1)
  return s
}
workflow main() {
  let r = tune.run(step, [tune.uniform("x", 0.0, 1.0)], tune.options(scheduler = "fifo", num_samples = 1, max_t = 4))
  print(r.best_iter, r.best_state.iter, r.best_state.metric, r.best_state.values["at"])
}
'''


def test_best_checkpoint(sflowc, tmp):
    src = os.path.join(tmp, "best.sflow")
    with open(src, "w") as f:
        f.write(BEST)
    exe = os.path.join(tmp, "best")
    compile_(sflowc, src, exe)
    rc, out, err = run(exe, ["--journal=false", "--quiet"], tmp)
    if rc != 0 or out != "2 2 1.0 2.0\n":
        fail("best checkpoint: exit %d, printed %r, expected '2 2 1.0 2.0'\n%s" % (rc, out, err))
    else:
        print("ok the best checkpoint is the best iteration's state, values included")


PLACED = r'''
import std.tune
// Each trial spins 60 ms and says when it ran: @cpus(2) on a pool of 4
// lets two run at once, max_concurrent bounds them further.
@cpus(2)
task step(cfg: map<str, f64>, st: tune.State) -> tune.State {
  var s = tune.report(st, cfg["x"])
  s.values["start"] = now()
  while now() - s.values["start"] < 0.06 { }
  s.values["end"] = now()
  return s
}
workflow main(concurrent: i64 = 4) {
  let r = tune.run(step, [tune.uniform("x", 0.0, 1.0)],
                   tune.options(scheduler = "fifo", num_samples = 8, max_t = 1, max_concurrent = concurrent))
  for t in r.trials { print(t.ckpt.values["start"], t.ckpt.values["end"]) }
}
'''


def overlap(out):
    """The most trials running at one instant."""
    ev = []
    for line in out.splitlines():
        a, b = map(float, line.split())
        ev += [(a, 1), (b, -1)]
    cur = most = 0
    for _, d in sorted(ev, key=lambda e: (e[0], e[1])):
        cur += d
        most = max(most, cur)
    return most


def test_resources(sflowc, tmp):
    src = os.path.join(tmp, "placed.sflow")
    with open(src, "w") as f:
        f.write(PLACED)
    exe = os.path.join(tmp, "placed")
    compile_(sflowc, src, exe)
    for conc, want in (("4", 2), ("1", 1)):
        rc, out, err = run(exe, ["--journal=false", "--threads", "4", "--concurrent", conc], tmp)
        got = overlap(out) if rc == 0 else None
        if got != want:
            fail("@cpus(2) on 4 threads, max_concurrent %s: %s trials at once, expected %d\n%s%s"
                 % (conc, got, want, out, err))
            return
    print("ok trials placed with their @cpus: 2 at once on 4 threads; 1 with max_concurrent 1")


# ------------------------------------------------------------ kill and resume

def count_lines(path):
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def run_killed(exe, args, cwd, after_execs):
    """Starts the sweep and SIGKILLs it once exec.log has that many lines."""
    p = subprocess.Popen([exe] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    t0 = time.time()
    while count_lines(os.path.join(cwd, "exec.log")) < after_execs and p.poll() is None:
        if time.time() - t0 > 120:
            break
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    return p.returncode


FAILRES = r'''
import std.io
import std.tune
// An ASHA sweep in which trial 2's second iteration always fails (twice,
// per its @retry): killed and resumed, it must end as it does uninterrupted.
@retry(1)
task step(cfg: map<str, f64>, st: tune.State) -> tune.State {
  io.append_text("exec.log", str(st.trial) + " " + str(st.iter) + "\n")
  let t0 = now()
  while now() - t0 < 0.02 { }
  if st.trial == 2 && st.iter == 1 { fail("diverged") }
  return tune.report(st, cfg["x"] / f64(st.iter + 1))
}
workflow main() {
  let r = tune.run(step, [tune.uniform("x", 1.0, 2.0)],
                   tune.options(num_samples = 12, max_t = 6, reduction_factor = 2.0, max_concurrent = 3))
  for t in r.trials { print(t.id, t.state, t.iters, t.best, t.error) }
  print("done")
}
'''


def test_kill_resume(sflowc, tmp):
    exe = os.path.join(tmp, "curves")
    if not os.path.exists(exe):
        compile_(sflowc, os.path.join(HERE, "curves.sflow"), exe)
    args = ["--samples", "16", "--max_t", "12", "--rf", "2", "--concurrent", "4", "--spin_ms", "20", "--log",
            "--checkpoint-dir", "ck"]
    kill_points = ([3], [12], [30], [8, 25], lambda n: [n - 5])
    kill_and_resume(exe, tmp, "asha", args, kill_points)
    pbt = ["--scheduler", "pbt", "--samples", "8", "--max_t", "10", "--interval", "3", "--concurrent", "4",
           "--spin_ms", "20", "--log", "--checkpoint-dir", "ck"]
    kill_and_resume(exe, tmp, "pbt", pbt, ([20], [45]))
    src = os.path.join(tmp, "failres.sflow")
    with open(src, "w") as f:
        f.write(FAILRES)
    fexe = os.path.join(tmp, "failres")
    compile_(sflowc, src, fexe)
    kill_and_resume(fexe, tmp, "failed-trial", ["--checkpoint-dir", "ck"], ([6], [15]))


def kill_and_resume(exe, tmp, name, args, kill_points):
    ref_dir = os.path.join(tmp, name + "-ref")
    os.makedirs(ref_dir)
    rc, ref, err = run(exe, args + ["--journal=false"], ref_dir)
    ref_execs = count_lines(os.path.join(ref_dir, "exec.log"))
    if rc != 0 or not ref.endswith("done\n"):
        fail("kill-resume %s reference exited %d\n%s" % (name, rc, err))
        return
    for kills in kill_points:
        if callable(kills):
            kills = kills(ref_execs)
        d = os.path.join(tmp, name + "-kill-" + "-".join(map(str, kills)))
        os.makedirs(d)
        first = True
        for k in kills:
            rc = run_killed(exe, args + ([] if first else ["--resume"]), d, k)
            first = False
            if rc != -signal.SIGKILL:
                fail(name + " kill at %s: the run ended (exit %d) before it was killed" % (kills, rc))
        before = count_lines(os.path.join(d, "exec.log"))
        rc, out, err = run(exe, args + ["--resume"], d)
        total = count_lines(os.path.join(d, "exec.log"))
        if rc != 0 or out != ref:
            fail("kill at %s: resume exited %d, output differs from the uninterrupted run\n%s" % (kills, rc, err[-2000:]))
            continue
        # Finished iterations come from the journal: the resume runs exactly
        # the iterations it does not answer from it (the journal lost those
        # in flight at the kill and those of its last, unflushed
        # milliseconds), none that it holds.
        m = re.search(r"(\d+) answered from the journal", err)
        replayed = int(m.group(1)) if m else 0
        rerun = total - ref_execs
        if total - before != ref_execs - replayed:
            fail("kill at %s: the resume ran %d iterations, answered %d from the journal, of %d\n%s"
                 % (kills, total - before, replayed, ref_execs, err[-1500:]))
            continue
        print("ok " + name + " kill after %s iterations: resumed to the same output; %d answered from the journal, "
              "%d of %d ran again" % (kills, replayed, rerun, ref_execs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    tests = [("decisions", test_decisions), ("failures", test_failures), ("all_failed", test_all_failed), ("bad_spaces", test_bad_spaces),
             ("resources", test_resources), ("best_checkpoint", test_best_checkpoint),
             ("kill_resume", test_kill_resume)]
    with tempfile.TemporaryDirectory(prefix="sflow-tune-") as tmp:
        for name, fn in tests:
            if not a.only or a.only == name:
                fn(os.path.abspath(a.sflowc), tmp)
    if FAILURES:
        print("%d failures" % len(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
