#!/usr/bin/env bash
# frontend.sh — front-end speed: lines per second of `sflowc --check` on a
# generated 100k-line program, beside `cc -fsyntax-only` on a C program of
# the same shape and line count (bench/gen_program.py).  Best of 3 runs.
#
#   bench/frontend.sh [BUILD_DIR] [LINES]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
LINES=${2:-100000}
SFLOWC=$BUILD/bin/sflowc
CC=${CC:-cc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

python3 "$ROOT/bench/gen_program.py" --lang sflow --lines "$LINES" -o "$TMP/prog.sflow"
python3 "$ROOT/bench/gen_program.py" --lang c --lines "$LINES" -o "$TMP/prog.c"
"$SFLOWC" --check "$TMP/prog.sflow" || { echo "frontend.sh: generated program does not check" >&2; exit 1; }

# Best wall-clock time of 3 runs, in seconds.
best_of_3() {
  python3 - "$@" <<'PY'
import subprocess, sys, time
best = None
for _ in range(3):
    t = time.perf_counter()
    subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
    d = time.perf_counter() - t
    best = d if best is None else min(best, d)
print(f"{best:.4f}")
PY
}

ts=$(best_of_3 "$SFLOWC" --check "$TMP/prog.sflow")
tc=$(best_of_3 "$CC" -fsyntax-only "$TMP/prog.c")
python3 - "$LINES" "$ts" "$tc" "$CC" <<'PY'
import sys
n, ts, tc, cc = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"{'front end':<24} {'lines':>8} {'seconds':>9} {'lines/s':>12}")
print(f"{'sflowc --check':<24} {n:>8} {ts:>9.3f} {n / ts:>12,.0f}")
print(f"{cc + ' -fsyntax-only':<24} {n:>8} {tc:>9.3f} {n / tc:>12,.0f}")
PY
