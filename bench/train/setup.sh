#!/usr/bin/env bash
# setup.sh — the Python peers of bench/train in one virtual environment:
# PyTorch (CPU use) exactly as bench/nn/setup.sh installs it, then Hugging
# Face transformers and tokenizers (BertModel over the same
# all-MiniLM-L6-v2 weights, the same tokenizer.json) and Ray Train
# (TorchTrainer, the start-up peer):
#
#   bash bench/train/setup.sh [PEERS_DIR]      # default build/peers/torch
#
#   venv/    torch 2.15.0, transformers 5.24.0, tokenizers 0.23.3,
#            ray[train,tune,serve] 2.60.0 (and their dependencies);
#            `venv/bin/python` runs bench/train/peer_finetune.py and
#            bench/train/ray_startup.py
#
# Needs the network (PyPI) once; idempotent after that, without touching it
# (a stamp holds the pins, and a smoke test imports everything).  `make test`
# never runs this.  The venv is bench/nn/setup.sh's, which bench/rl and
# bench/serve extend too: one PyTorch install (2.1 GB) for every peer, each
# script with its own stamp (this one's is train-ready).
#
# Why torch first and separately: bench/nn/setup.sh installs it with
# --no-deps beside only the libraries it loads (PyPI's Linux wheel would
# otherwise pull 3 GB of NVIDIA wheels); the packages here are then
# installed with their dependencies resolved against that torch, under a
# constraints file that holds torch and numpy at their pins so that pip
# never swaps them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/torch}
pins=(transformers==5.24.0 tokenizers==0.23.3 "ray[train,tune,serve]==2.60.0")
hold=(torch==2.15.0 numpy==2.4.6 safetensors==0.8.0)
want="${pins[*]} ${hold[*]}"
py=$peers/venv/bin/python
smoke='import torch, transformers, tokenizers, ray, ray.train.torch, ray.tune, ray.serve; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "ray", ray.__version__)'
if [ "$(cat "$peers/train-ready" 2>/dev/null)" = "$want" ] && "$py" -c "$smoke" >/dev/null 2>&1; then
  exit 0
fi
bash "$root/bench/nn/setup.sh" "$peers"
rm -f "$peers/train-ready"
constraints=$peers/constraints.txt
printf '%s\n' "${hold[@]}" >"$constraints"
echo "train-setup: ${pins[*]} into $peers/venv" >&2
"$py" -m pip install --quiet --disable-pip-version-check --no-input -c "$constraints" "${pins[@]}"
"$py" -c "$smoke" >&2
printf '%s\n' "$want" >"$peers/train-ready"
echo "train-setup: ready in $peers ($(du -sh "$peers/venv" | cut -f1))" >&2
