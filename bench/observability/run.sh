#!/usr/bin/env bash
# TensorBoard's own reader on sflow's event files (read_tfevents.py), in a
# virtual environment of its own (build/bench-tb): tensorboard pulls
# protobuf and grpcio, which nothing else needs.  Opt-in; `make test` never
# runs it.  Needs PyPI once.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=build/bench-tb
pin="tensorboard==2.21.0"
if ! "$venv/bin/python" -c 'import tensorboard' 2>/dev/null ||
   [ "$(cat "$venv/sflow-pin.txt" 2>/dev/null)" != "$pin" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$pin"
  echo "$pin" >"$venv/sflow-pin.txt"
fi
exec "$venv/bin/python" bench/observability/read_tfevents.py --sflowc build/bin/sflowc "$@"
