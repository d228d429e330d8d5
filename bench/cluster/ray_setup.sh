#!/usr/bin/env bash
# ray_setup.sh — Ray, the Ray-on-Slurm column of bench/cluster/launch_startup.py,
# in a virtual environment of its own (the pin is scripts/install-benchdeps.sh's):
#
#   bash bench/cluster/ray_setup.sh [PEERS_DIR]     # default build/peers/ray-core
#
# Needs the network (PyPI) once; idempotent after that.  `make test` never runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/ray-core}
want="ray==2.60.0"
py=$peers/venv/bin/python
smoke='import ray; assert ray.__version__ == "2.60.0", ray.__version__; print("ray", ray.__version__)'
if [ "$(cat "$peers/ready" 2>/dev/null)" = "$want" ] && "$py" -c "$smoke" >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$peers"
python3 -m venv "$peers/venv"
"$py" -m pip install --quiet --disable-pip-version-check --no-input "$want"
"$py" -c "$smoke"
echo "$want" > "$peers/ready"
