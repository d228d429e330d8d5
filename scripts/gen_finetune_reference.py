#!/usr/bin/env python3
"""The PyTorch reference trajectory for tests/examples/finetune_test.py's
`reference` case: PyTorch's per-step losses for examples/finetune.sflow's
small recipe, so that the suite checks sflow's fine-tune against an
independent implementation, not only against itself.

Writes tests/examples/finetune/reference.json (committed; the test needs no
PyTorch):
  recipe            the flags, finetune_test.RECIPE (the test refuses a
                    reference made for another recipe)
  head_init_sha256  the SHA-256 of the head init both sides started from:
                    the file `finetune --init-out` writes, which is drawn
                    from the run's seed, so sflow regenerates it bit for
                    bit and no weights are committed
  steps             each optimizer step's loss, learning rate and gradient
                    norm (before clipping) as PyTorch computed them
  accuracy          the eval accuracy after each epoch
  torch, transformers  the versions that made it

How: compiles examples/finetune.sflow, runs it once (1 worker) with
--dropout 0 --init-out HEAD, then bench/train/peer_finetune.py --mode plain
--threads 1 --dropout 0 --init HEAD --step-log CSV on the same recipe.
With dropout off and the same init, data, order, AdamW, schedule and
clipping, the two follow one trajectory to float rounding; this script
prints the largest relative step-loss difference it saw (a reference that
already disagrees with sflow here is not written, unless --force).

Run with the PyTorch peer (torch, transformers, tokenizers, safetensors):
  build/peers/torch/venv/bin/python scripts/gen_finetune_reference.py \\
      --sflowc build/bin/sflowc --model build/models/all-minilm-l6-v2
"""
import argparse
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench", "train"))
from finetune_test import FORTUNES, PARITY, RECIPE  # noqa: E402


def flag(args, name):
    return args[args.index(name) + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sflowc", default=os.path.join(ROOT, "build", "bin", "sflowc"))
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "models", "all-minilm-l6-v2"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "examples", "finetune", "reference.json"))
    ap.add_argument("--force", action="store_true", help="write even if sflow disagrees by over 1e-5")
    a = ap.parse_args()
    import torch
    import transformers
    tmp = tempfile.mkdtemp(prefix="gen-finetune-ref-")
    exe = os.path.join(tmp, "finetune")
    subprocess.run([a.sflowc, "-O2", os.path.join(ROOT, "examples", "finetune.sflow"), "-o", exe], check=True)
    head = os.path.join(tmp, "head.safetensors")
    sf_csv = os.path.join(tmp, "sflow.csv")
    subprocess.run([exe, "--model", a.model, "--data", FORTUNES, "--workers", "1", *RECIPE, *PARITY,
                    "--init-out", head, "--metrics", sf_csv, "--checkpoint-dir", os.path.join(tmp, "ck"),
                    "--journal=false"], check=True, stdout=subprocess.DEVNULL, cwd=tmp)
    t_csv = os.path.join(tmp, "torch.csv")
    # peer_finetune.py takes the recipe's flags but --log-every (sflow's).
    peer_flags = [x for i, x in enumerate(RECIPE)
                  if x != "--log-every" and (i == 0 or RECIPE[i - 1] != "--log-every")]
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train", "peer_finetune.py"),
                        "--mode", "plain", "--threads", "1", "--model", a.model, "--data", FORTUNES,
                        *peer_flags, "--dropout", flag(PARITY, "--dropout"), "--init", head,
                        "--step-log", t_csv], check=True, capture_output=True, text=True)
    acc = [float(x) for x in re.findall(r"accuracy (\d\.\d+)", p.stdout)]
    with open(t_csv) as f:
        steps = [{"step": int(r["step"]), "epoch": int(r["epoch"]), "loss": float(r["loss"]),
                  "lr": float(r["lr"]), "grad_norm": float(r["grad_norm"])} for r in csv.DictReader(f)]
    with open(sf_csv) as f:
        mine = [float(r["loss"]) for r in csv.DictReader(f)]
    worst = max(abs(m / s["loss"] - 1) for m, s in zip(mine, steps))
    print(f"sflow against torch: {len(steps)} steps, largest relative loss difference {worst:.3g}")
    if len(mine) != len(steps) or (worst > 1e-5 and not a.force):
        sys.exit("gen_finetune_reference: sflow and torch disagree; not written (--force writes it)")
    with open(head, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"recipe": RECIPE + PARITY, "head_init_sha256": sha, "steps": steps, "accuracy": acc,
                   "torch": torch.__version__, "transformers": transformers.__version__}, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}: losses {[s['loss'] for s in steps]}, accuracy {acc}")


if __name__ == "__main__":
    main()
