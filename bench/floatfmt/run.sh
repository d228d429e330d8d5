#!/usr/bin/env bash
# bench/floatfmt/run.sh — printing floats: sflow's str(f64) beside
# CPython's repr(), and std.data's write_csv beside pandas' to_csv, on the
# same N random f64 values (standard normal, seed 1; default 1,600,000,
# written as COLS = 8 columns), in one run (docs/performance.md, "Printing
# floats").  Both sides check the other's text: the CSVs must be equal.
#
#   bench/floatfmt/run.sh [BUILD] [N]     (make bench-floatfmt)
#
# numpy and pandas are installed into their own virtual environment,
# BUILD/peers/floatfmt/venv, on first use; `make test` never runs this.
# Each figure is the best of 3 runs.  BEFORE=OTHER_SFLOWC also times
# fmt.sflow compiled by another sflowc (an older build), one run each.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-1600000}
COLS=8
OUT=$BUILD/peers/floatfmt
venv=$OUT/venv
pins=(numpy==2.4.6 pandas==2.3.3)
stamp=$venv/sflow-bench-floatfmt.txt
mkdir -p "$OUT"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ] || ! "$venv/bin/python" -c 'import pandas' 2>/dev/null; then
  echo "bench-floatfmt: installing ${pins[*]} into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${pins[@]}"
  printf '%s\n' "${pins[*]}" >"$stamp"
fi
npy=$OUT/values_$N.npy
[ -f "$npy" ] || "$venv/bin/python" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).standard_normal(int(sys.argv[2])))" "$npy" "$N"
"$BUILD/bin/sflowc" "$ROOT/bench/floatfmt/fmt.sflow" -o "$OUT/fmt"
{
  "$OUT/fmt" --npy "$npy" --csv "$OUT/sflow.csv" --cols "$COLS"
  if [ -n "${BEFORE:-}" ]; then
    "$BEFORE" "$ROOT/bench/floatfmt/fmt.sflow" -o "$OUT/fmt_before"
    "$OUT/fmt_before" --npy "$npy" --csv "$OUT/before.csv" --cols "$COLS" --repeat 1 | sed 's/^sflow_/before_/'
  fi
  "$venv/bin/python" "$ROOT/bench/floatfmt/peer.py" "$npy" "$OUT/pandas.csv" "$COLS" 3
} | awk -v n="$N" -v cols="$COLS" '
  /^VERSION/ { ver = "Python " $2 ", pandas " $3; next }
  { name[++k] = $1; t[k] = $2; c[k] = $3 }
  END { printf "printing %d random f64 (standard normal); CSV as %d columns; best of 3; %s\n", n, cols, ver
        printf "%-18s %10s %12s %12s\n", "case", "seconds", "ns a value", "checksum"
        for (i = 1; i <= k; i++) printf "%-18s %10.3f %12.0f %12s\n", name[i], t[i], t[i] / n * 1e9, c[i] }'
if cmp -s "$OUT/sflow.csv" "$OUT/pandas.csv"; then
  echo "the two CSV files are byte for byte the same"
else
  echo "bench-floatfmt: sflow's and pandas' CSV files differ" >&2
  exit 1
fi
