#!/usr/bin/env bash
# Opt-in: the Python packages that only the benchmarks need (Ray, the peer of
# bench/tasks), installed into the same virtual environment as
# scripts/install-pydeps.sh (build/pydeps, or $SFLOW_PYDEPS).  `make test`
# never runs this, so the test suite never downloads Ray; `make bench-tasks`
# and `make bench` do (once: idempotent, no network when the pins are there).
#
# Ray is large (a ~70 MB wheel); when it cannot be installed (no network, no
# wheel for this Python) this script fails and bench/tasks/run.sh prints the
# Ray columns as "n/a" instead of stopping.
#
# --llm: instead, the reference side of std.llm and the BPE tokenizer
# (scripts/gen_llm_reference.py, bench/llm/run.py's tokenizers peer) in a
# venv of its own, build/llmref (or $SFLOW_LLMREF), so the tests' venv
# never holds them: gguf's reader, Hugging Face tokenizers, Jinja2 (the
# chat template) and numpy; with SFLOW_LLMREF_LOGITS=1 also torch,
# transformers, accelerate and peft, for gen_llm_reference.py --logits and
# gen_lm_reference.py (PyPI's torch wheel pulls CUDA libraries: about 5 GB
# on disk).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--llm" ]; then
  venv="${SFLOW_LLMREF:-$PWD/build/llmref}"
  pins=(
    gguf==0.19.0        # reads and dequantizes the GGUF (the dequant oracle)
    tokenizers==0.23.3  # the BPE ids oracle, and bench/llm's peer
    jinja2==3.1.6       # renders the GGUF's chat template as transformers does
    numpy==2.4.6        # gguf's arrays, the .npy oracle files
  )
  if [ "${SFLOW_LLMREF_LOGITS:-}" = 1 ]; then
    # transformers 4.57.3 takes tokenizers <= 0.23.0, so this venv holds
    # 0.22.2 in place of the BPE oracle's 0.23.3: make the BPE oracle
    # (gen_llm_reference.py without --logits-only) in a venv made without
    # SFLOW_LLMREF_LOGITS (the script refuses another tokenizers there).
    pins=("${pins[@]/tokenizers==0.23.3/tokenizers==0.22.2}")
    pins+=(
      torch==2.9.1         # transformers' model (CPU is enough)
      transformers==4.57.3 # loads the GGUF, dequantized: the logits oracle
      accelerate==1.12.0   # transformers' GGUF loading path wants it
      peft==0.17.1         # LoRA: scripts/gen_lm_reference.py's reference for std.lm
    )
  fi
  stamp="$venv/sflow-llmref.txt"
  want="${pins[*]}"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
     "$venv/bin/python" -c 'import gguf, tokenizers, jinja2, numpy' 2>/dev/null; then
    exit 0
  fi
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "install-benchdeps: installing ${pins[*]%%==*} into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${pins[@]}"
  printf '%s\n' "$want" >"$stamp"
  exit 0
fi

bash scripts/install-pydeps.sh
venv="${SFLOW_PYDEPS:-$PWD/build/pydeps}"
pins=(
  ray==2.60.0      # peer for tasks and actor calls (bench/tasks/ray_peer.py)
  numpy==2.4.6     # host arrays for the Ray allreduce peer
)
stamp="$venv/sflow-benchdeps.txt"
want="${pins[*]}"
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] &&
   "$venv/bin/python" -c 'import ray, numpy' 2>/dev/null; then
  exit 0
fi
echo "install-benchdeps: installing ${pins[*]%%==*} into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-input "${pins[@]}"
printf '%s\n' "$want" >"$stamp"
