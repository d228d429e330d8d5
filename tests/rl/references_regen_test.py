#!/usr/bin/env python3
"""The committed references of tests/rl equal a fresh run of
scripts/gen_rl_reference.py byte for byte (Gymnasium 1.2.2 and PyTorch 2.15.0
from bench/rl/setup.sh).  Exits 77 (skipped) when the peer's Python is
missing or lacks gymnasium or torch.

Usage: references_regen_test.py [--python PATH]   (default build/peers/torch/venv/bin/python)
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAMES = ["cartpole_reference.json", "ppo_loss_reference.json"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=os.path.join(ROOT, "build", "peers", "torch", "venv",
                                                      "bin", "python"))
    a = ap.parse_args()
    probe = subprocess.run([a.python, "-c", "import gymnasium, torch"], capture_output=True) \
        if os.path.exists(a.python) else None
    if probe is None or probe.returncode != 0:
        print("skipped: no %s with gymnasium and torch (bash bench/rl/setup.sh makes it)"
              % a.python)
        return 77
    with tempfile.TemporaryDirectory(prefix="sflow-rl-regen-") as tmp:
        subprocess.run([a.python, os.path.join(ROOT, "scripts", "gen_rl_reference.py"),
                        "--out", tmp], check=True)
        bad = [n for n in NAMES if open(os.path.join(tmp, n), "rb").read() !=
               open(os.path.join(HERE, n), "rb").read()]
    for n in bad:
        print("FAIL tests/rl/%s differs from a fresh run of scripts/gen_rl_reference.py" % n)
    print("%d of %d references equal a fresh run" % (len(NAMES) - len(bad), len(NAMES)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
