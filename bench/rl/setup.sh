#!/usr/bin/env bash
# setup.sh — the Python peers of bench/rl and of scripts/gen_rl_reference.py:
# bench/nn/setup.sh's PyTorch virtual environment plus Gymnasium.
#
#   bash bench/rl/setup.sh [PEERS_DIR]      # default build/peers/torch
#
# Pins gymnasium==1.2.2 (and its pure-Python dependencies) on top of
# torch==2.15.0 from bench/nn/setup.sh.  Needs the network (PyPI) once;
# idempotent after that.  `make test` never runs this: the references the
# tests compare with are committed (tests/rl/*.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/torch}
bash "$root/bench/nn/setup.sh" "$peers"
py=$peers/venv/bin/python
want=(gymnasium==1.2.2 cloudpickle==3.1.3 farama-notifications==0.0.6)
smoke='import gymnasium, torch; assert gymnasium.__version__ == "1.2.2"; e = gymnasium.make("CartPole-v1"); e.reset(seed=0); e.step(0); print("gymnasium", gymnasium.__version__, "torch", torch.__version__)'
if ! "$py" -c "$smoke" >/dev/null 2>&1; then
  echo "rl-setup: ${want[*]} into $peers/venv" >&2
  "$py" -m pip install --quiet --disable-pip-version-check --no-input --no-deps "${want[@]}"
fi
"$py" -c "$smoke" >&2
