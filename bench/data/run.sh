#!/usr/bin/env bash
# bench/data/run.sh — reading a numeric CSV into typed columns: sflow's
# std.data beside pandas.read_csv (C engine, single-threaded) and
# pyarrow.csv (one thread, and its default thread pool), on one file, in
# one run, as one table (docs/performance.md, "std.data").
#
#   bench/data/run.sh [BUILD] [ROWS]     (make bench-data)
#
# The file (ROWS rows x 8 f64 columns, default 1,000,000, about 150 MB) is
# written once by gen_csv.py into BUILD/bench-data/.  pandas and pyarrow
# are installed into the bench virtual environment (build/pydeps, or
# $SFLOW_PYDEPS) on first use; `make test` never runs this.  Each reader's
# time is the best of 3 reads of a file already in the page cache.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
ROWS=${2:-1000000}
OUT=$BUILD/bench-data
mkdir -p "$OUT"
venv="${SFLOW_PYDEPS:-$ROOT/build/pydeps}"
pins=(numpy==2.4.6 pandas==2.3.3 pyarrow==22.0.0)
stamp="$venv/sflow-bench-data.txt"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ] ||
   ! "$venv/bin/python" -c 'import pandas, pyarrow' 2>/dev/null; then
  bash "$ROOT/scripts/install-pydeps.sh"
  echo "bench-data: installing ${pins[*]} into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "${pins[@]}"
  printf '%s\n' "${pins[*]}" >"$stamp"
fi
csv=$OUT/numeric_$ROWS.csv
[ -f "$csv" ] || python3 "$ROOT/bench/data/gen_csv.py" "$csv" --rows "$ROWS"
"$BUILD/bin/sflowc" "$ROOT/bench/data/csv_read.sflow" -o "$OUT/csv_read"
bytes=$(stat -c %s "$csv")
{
  "$OUT/csv_read" --path "$csv" --quiet | awk '{print "sflow_types_given", $4, $6}'
  "$OUT/csv_read" --path "$csv" --infer --quiet | awk '{print "sflow_inferred", $4, $6}'
  "$venv/bin/python" "$ROOT/bench/data/peers.py" "$csv" 3
} | awk -v bytes="$bytes" -v rows="$ROWS" '
  BEGIN { printf "numeric CSV: %d rows x 8 f64 columns, %.1f MB; best of 3\n", rows, bytes / 1e6
          printf "%-24s %10s %10s %10s  %s\n", "reader", "seconds", "MB/s", "vs pandas", "checksum" }
  { name[NR] = $1; t[NR] = $2; c[NR] = $3; if ($1 == "pandas_c") p = $2 }
  END { for (i = 1; i <= NR; i++)
          printf "%-24s %10.3f %10.0f %9.2fx  %s\n", name[i], t[i], bytes / 1e6 / t[i], p / t[i], c[i] }'
