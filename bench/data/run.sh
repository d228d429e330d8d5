#!/usr/bin/env bash
# bench/data/run.sh — reading a numeric CSV into typed columns: sflow's
# std.data (1 thread, and the pool's threads) beside pandas.read_csv (C
# engine, single-threaded) of pandas 3.1.1 and of 2.3.3, and pyarrow.csv
# (one thread, and its default thread pool), on one file, in one run, as
# one table (docs/performance.md, "std.data").
#
#   bench/data/run.sh [BUILD] [ROWS] [ROUNDS]     (make bench-data)
#
# The file (ROWS rows x 8 f64 columns, default 1,000,000, about 150 MB) is
# written once by gen_csv.py into BUILD/bench-data/.  The peers live in two
# virtual environments of their own, BUILD/peers/data/pandas3 (pandas
# 3.1.1, pyarrow 26.0.1) and BUILD/peers/data/pandas2 (pandas 2.3.3, the
# pin the earlier figures used), installed on first use; `make test` never
# runs this.  Each of ROUNDS rounds (default 3) runs every reader once, one
# after the other, so a change in the machine's load falls on all of them;
# each reader's time is its best round, on a file already in the page
# cache.  The load average is printed before and after.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
ROWS=${2:-1000000}
ROUNDS=${3:-3}
OUT=$BUILD/bench-data
mkdir -p "$OUT"

# venv NAME PIN...: BUILD/peers/data/NAME holding the pins (once).
venv() {
  local dir=$BUILD/peers/data/$1
  shift
  if [ "$(cat "$dir/sflow-bench-data.txt" 2>/dev/null)" != "$*" ]; then
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    echo "bench-data: installing $* into $dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$@"
    printf '%s\n' "$*" >"$dir/sflow-bench-data.txt"
  fi
}
venv pandas3 numpy==2.4.6 pandas==3.1.1 pyarrow==26.0.1
venv pandas2 numpy==2.4.6 pandas==2.3.3
py3=$BUILD/peers/data/pandas3/bin/python
py2=$BUILD/peers/data/pandas2/bin/python

csv=$OUT/numeric_$ROWS.csv
[ -f "$csv" ] || python3 "$ROOT/bench/data/gen_csv.py" "$csv" --rows "$ROWS"
"$BUILD/bin/sflowc" "$ROOT/bench/data/csv_read.sflow" -o "$OUT/csv_read"
bytes=$(stat -c %s "$csv")
threads=$(nproc)
load0=$(cut -d' ' -f1 /proc/loadavg)
for _ in $(seq "$ROUNDS"); do
  "$OUT/csv_read" --path "$csv" --repeat 1 --quiet --threads 1 | awk '{print "sflow_types_given_1_thread", $4, $6}'
  "$OUT/csv_read" --path "$csv" --repeat 1 --quiet | awk -v t="$threads" '{print "sflow_types_given_" t "_threads", $4, $6}'
  "$OUT/csv_read" --path "$csv" --repeat 1 --infer --quiet | awk -v t="$threads" '{print "sflow_inferred_" t "_threads", $4, $6}'
  "$py3" "$ROOT/bench/data/peers.py" "$csv" 1 all
  "$py2" "$ROOT/bench/data/peers.py" "$csv" 1 pandas
done | awk -v bytes="$bytes" -v rows="$ROWS" -v rounds="$ROUNDS" -v load0="$load0" \
           -v threads="$threads" -v cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" '
  !($1 in t) { order[++n] = $1 }
  !($1 in t) || $2 < t[$1] { t[$1] = $2; c[$1] = $3 }
  END {
    getline load1 < "/proc/loadavg"; split(load1, l, " ")
    printf "numeric CSV: %d rows x 8 f64 columns, %.1f MB; best of %d alternating rounds\n", rows, bytes / 1e6, rounds
    printf "CPU: %s, %d cores; load average %s before, %s after\n", cpu, threads, load0, l[1]
    for (i = 1; i <= n; i++) if (order[i] ~ /^pandas_c_3_\(/) p3 = t[order[i]]; else if (order[i] == "pyarrow_threads") pa = t[order[i]]
    printf "%-30s %9s %8s %12s %12s  %s\n", "reader", "seconds", "MB/s", "vs pandas 3", "vs pyarrow", "checksum"
    for (i = 1; i <= n; i++) { k = order[i]
      printf "%-30s %9.3f %8.0f %11.2fx %11.2fx  %s\n", k, t[k], bytes / 1e6 / t[k], p3 / t[k], pa / t[k], c[k] } }'
