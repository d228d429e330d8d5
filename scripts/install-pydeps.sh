#!/usr/bin/env bash
# Installs the Python packages that sflow's tests need (the TextMate engine
# behind tests/editors/tmgrammar_test.py, numpy for
# tests/runtime/data_interop_test.py) into one virtual environment,
# so that no test downloads anything and the system Python stays untouched.
#
# The environment lives at build/pydeps, or at $SFLOW_PYDEPS when that is set;
# tests/editors/tmgrammar_test.py looks in the same two places.  Versions are
# pinned.  Idempotent: when the environment already holds exactly these pins it
# exits at once, without touching the network.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${SFLOW_PYDEPS:-$PWD/build/pydeps}"
pins=(
  babi==1.8.0            # babi.highlight: TextMate engine after vscode-textmate
  onigurumacffi==1.5.0   # the Oniguruma regex engine that VS Code also uses
  babi-grammars==0.0.74 identify==2.6.20 cffi==2.1.1 pycparser==3.12
  numpy==2.4.6           # .npy files std.data must agree with (the same pin as the benches')
  prometheus-client==0.26.0  # its text-format parser reads std.serve's /metrics
  openai==3.57.0         # the OpenAI Python client, against examples/llm_serve.sflow (tests/llm/serve_test.py)
)
stamp="$venv/sflow-pydeps.txt"
want="${pins[*]}"

if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
   "$venv/bin/python" -c 'import babi.highlight, numpy, prometheus_client, openai' 2>/dev/null; then
  exit 0
fi

echo "install-pydeps: installing ${pins[*]%%==*} into $venv" >&2
python="${PYTHON:-python3}"
if ! "$python" -m venv "$venv"; then
  echo "install-pydeps: '$python -m venv' failed; on Debian install python3-venv" >&2
  exit 1
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-input "${pins[@]}"
printf '%s\n' "$want" >"$stamp"
