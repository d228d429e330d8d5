#!/usr/bin/env python3
"""read_tfevents.py — sflow's TensorBoard event files read by TensorBoard's
own reader (EventAccumulator), against the metrics CSVs (docs/observability.md,
"TensorBoard").  Run by bench/observability/run.sh, which installs
tensorboard into build/bench-tb; `make test` checks the framing without it
(tests/obs, case tfevents).

  1. tests/obs/train_small.sflow --tensorboard DIR --metrics CSV: the six
     scalars per step, each at its step; loss, learning_rate and grad_norm
     equal the CSV's as float32; the committed tests/obs/data file too.
  2. examples/tune.sflow --tensorboard DIR --out CSV: one run per trial
     (DIR/trial_N), `metric` per iteration equal to the sweep's CSV.

    read_tfevents.py --sflowc build/bin/sflowc
"""
import argparse
import csv
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAGS = ["loss", "learning_rate", "grad_norm", "samples_per_s", "step_seconds", "comm_seconds"]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(cond, msg):
    if not cond:
        print("FAIL: " + msg)
        sys.exit(1)
    print("ok: " + msg)


def scalars(path):
    ea = EventAccumulator(path)
    ea.Reload()
    return ea, {t: ea.Scalars(t) for t in ea.Tags()["scalars"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sflowc", required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sflow-tb-")
    try:
        exe = os.path.join(tmp, "train_small")
        subprocess.run([a.sflowc, os.path.join(ROOT, "tests", "obs", "train_small.sflow"), "-o", exe],
                       check=True)
        d, log = os.path.join(tmp, "tb"), os.path.join(tmp, "m.csv")
        subprocess.run([exe, "--epochs", "3", "--tensorboard", d, "--metrics", log], check=True,
                       stdout=subprocess.DEVNULL)
        rows = list(csv.DictReader(open(log)))
        ea, sc = scalars(d)
        check(sorted(sc) == sorted(TAGS), "EventAccumulator finds the six scalars: %s" % sorted(sc))
        for t in TAGS:
            check([e.step for e in sc[t]] == [int(r["step"]) for r in rows],
                  "%s at every step (%d)" % (t, len(rows)))
        for t, col in (("loss", "loss"), ("learning_rate", "lr"), ("grad_norm", "grad_norm")):
            check([e.value for e in sc[t]] == [f32(float(r[col])) for r in rows],
                  "%s equals the CSV's %s as float32" % (t, col))
        cdir = os.path.join(tmp, "committed")
        os.makedirs(cdir)
        shutil.copy(os.path.join(ROOT, "tests", "obs", "data", "train_small.tfevents"),
                    os.path.join(cdir, "events.out.tfevents.0.committed"))
        _, csc = scalars(cdir)
        check(sorted(csc) == sorted(TAGS) and [e.step for e in csc["loss"]] == [1, 2],
              "the committed file: six scalars at steps 1 and 2")
        tune = os.path.join(tmp, "tune")
        subprocess.run([a.sflowc, os.path.join(ROOT, "examples", "tune.sflow"), "-o", tune], check=True)
        td, out = os.path.join(tmp, "tbt"), os.path.join(tmp, "sweep.csv")
        subprocess.run([tune, "--samples", "4", "--epochs", "4", "--tensorboard", td, "--out", out,
                        "--quiet"], check=True, cwd=os.path.join(ROOT, "examples"),
                       stdout=subprocess.DEVNULL)
        res = [r for r in csv.DictReader(open(out)) if r["metric"]]
        for t in range(4):
            _, tsc = scalars(os.path.join(td, "trial_%d" % t))
            want = [(int(r["iter"]), f32(float(r["metric"]))) for r in res if int(r["trial"]) == t]
            got = [(e.step, e.value) for e in tsc.get("metric", [])]
            check(got == want, "trial_%d: metric per iteration as in the sweep's CSV (%d)" %
                  (t, len(got)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
