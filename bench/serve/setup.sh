#!/usr/bin/env bash
# setup.sh — the peer of bench/serve: Ray Serve 2.60.0 beside PyTorch (CPU
# use) in bench/nn's virtual environment:
#
#   bash bench/serve/setup.sh [PEERS_DIR]     # default build/peers/torch
#
# then `python3 bench/serve/run.py --python PEERS_DIR/venv/bin/python`.
# Needs the network (PyPI) once; idempotent after that.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/torch}
bash "$root/bench/nn/setup.sh" "$peers"
py=$peers/venv/bin/python
pin='ray[serve]==2.60.0'
if "$py" -c 'import ray, ray.serve, starlette; assert ray.__version__ == "2.60.0"' 2>/dev/null; then
  exit 0
fi
echo "serve-setup: $pin into $peers/venv" >&2
"$py" -m pip install --quiet --disable-pip-version-check --no-input "$pin"
"$py" -c 'import ray, ray.serve; print("ray", ray.__version__)'
