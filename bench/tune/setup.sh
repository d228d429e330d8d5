#!/usr/bin/env bash
# setup.sh — Ray Tune, the peer of bench/tune, in a virtual environment of
# its own:
#
#   bash bench/tune/setup.sh [PEERS_DIR]     # default build/peers/ray
#
#   venv/    ray[tune]==2.60.0 (its dependencies as pip resolves them)
#
# Needs the network (PyPI) once; idempotent after that.  `make test` never
# runs it: the tests of std.tune carry their own reference implementation.
# PEER_PYTHON=/path/to/python in bench/tune/run.py uses another
# interpreter that has ray[tune] 2.60.0 instead.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/ray}
want="ray[tune]==2.60.0"
py=$peers/venv/bin/python
smoke='import ray, ray.tune; assert ray.__version__ == "2.60.0", ray.__version__; print("ray", ray.__version__)'
if [ "$(cat "$peers/ready" 2>/dev/null)" = "$want" ] && "$py" -c "$smoke" >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$peers"
python3 -m venv "$peers/venv"
"$py" -m pip install --quiet --upgrade pip
"$py" -m pip install --quiet "$want"
"$py" -c "$smoke"
echo "$want" > "$peers/ready"
