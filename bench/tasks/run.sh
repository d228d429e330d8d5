#!/usr/bin/env bash
# `make bench-tasks` (also part of `make bench`): tasks, actor calls, chains
# of futures and group allreduce in sflow, beside OpenMP tasks in C, a plain
# C allreduce loop and Ray, all measured in this one run; prints one table.
#
#   bash bench/tasks/run.sh [BUILD_DIR]          (default: build)
#
# Every program does a warm-up round and keeps the best of 3 (REPS) rounds,
# in its own process, so Ray's start-up and OpenMP's thread team are not
# timed.  Environment knobs:
#   SFLOW_BENCH_RAY=0     skip Ray (and its install)
#   SFLOW_BENCH_QUICK=1   smaller sizes (a smoke test of the harness)
#   SFLOW_BENCH_RAW=FILE  also keep the raw RESULT lines in FILE
#   REPS=3
# A side that fails or times out shows as "n/a (why)" in the table; the run
# goes on.  Ray is installed on first use by scripts/install-benchdeps.sh
# (opt-in: `make test` never downloads it).
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
here=bench/tasks
sflowc="$build/bin/sflowc"
reps=${REPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw="$tmp/raw.txt"
: >"$raw"

if [ "${SFLOW_BENCH_QUICK:-0}" = 1 ]; then
  n_tasks=100000 n_tasks_one=20000 n_calls=100000 n_calls_one=20000 n_chain=10000
  r_tasks=200 r_tasks_one=100 r_calls=200 r_calls_one=100 r_chain=100
  ar_sizes=(1024 1048576) ar_iters=(100 5) ar_ray_iters=(3 2) n_cold=20000
else
  n_tasks=1000000 n_tasks_one=200000 n_calls=1000000 n_calls_one=200000 n_chain=100000
  r_tasks=2000 r_tasks_one=500 r_calls=2000 r_calls_one=500 r_chain=500
  ar_sizes=(1024 65536 1048576 16777216) ar_iters=(1000 200 20 5) ar_ray_iters=(10 10 5 2)
  n_cold=200000
fi
in_sizes=(1024 65536) in_iters=(20000 2000) # allreduce inside the members' method
members=2
limit=${SFLOW_BENCH_TIMEOUT:-60}    # seconds for one program (Ray: twice that)

# run_side SIDE "NAME..." CMD...: runs CMD, keeps its RESULT lines under SIDE
# and writes an ERROR line for each expected NAME it did not report.
run_side() {
  local side=$1 names=$2
  shift 2
  echo "bench-tasks: $side: $*" >&2
  timeout "$limit" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  grep '^RESULT ' "$tmp/out" | sed "s/^/$side /" >>"$raw"
  local why
  if [ $rc = 124 ]; then
    why="timed out after ${limit}s"
  else
    why=$(grep -m1 -iE 'error|fail|assert' "$tmp/err" | sed -E 's/^.*runtime error: //; s/^ +//' | cut -c1-90)
    [ -n "$why" ] || why="exit $rc"
  fi
  for n in $names; do
    grep -q "^$side RESULT $n " "$raw" || echo "$side ERROR $n $why" >>"$raw"
  done
}

# ------------------------------------------------------------------ build
[ -x "$sflowc" ] || { echo "bench-tasks: no $sflowc (run make first)" >&2; exit 1; }
for p in tasks actors chain allreduce cold; do
  "$sflowc" -O2 "$here/$p.sflow" -o "$tmp/$p" || { echo "bench-tasks: $p.sflow failed to compile" >&2; exit 1; }
done
have_omp=1
gcc -O2 -fopenmp "$here/omp_peer.c" -o "$tmp/omp_peer" || have_omp=0
py="" no_ray="Ray skipped (SFLOW_BENCH_RAY=0)"
if [ "${SFLOW_BENCH_RAY:-1}" != 0 ]; then
  no_ray="Ray could not be installed (scripts/install-benchdeps.sh failed)"
  if bash scripts/install-benchdeps.sh; then
    py="${SFLOW_PYDEPS:-$PWD/build/pydeps}/bin/python"
  else
    echo "bench-tasks: Ray could not be installed; its columns read n/a" >&2
  fi
fi

# run_cold SIDE CMD...: REPS fresh processes of CMD (one cold round each),
# alternating with the other side by the caller; keeps the best round as
# tasks_cold and the best whole-process wall time as tasks_cold_process.
run_cold() {
  local side=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  run_side "$side" tasks_cold "$@"
  t1=$(date +%s.%N)
  grep -q "^$side ERROR tasks_cold" "$raw" ||
    echo "$side RESULT tasks_cold_process $n_cold $(awk "BEGIN { print $t1 - $t0 }")" >>"$raw"
}

# -------------------------------------------------------------------- run
run_side sflow "tasks_pipelined tasks_one_by_one" \
  "$tmp/tasks" --n $n_tasks --n_one $n_tasks_one --reps "$reps"
run_side sflow "actor_pipelined actor_one_by_one" \
  "$tmp/actors" --n $n_calls --n_one $n_calls_one --reps "$reps"
run_side sflow chain "$tmp/chain" --n $n_chain --reps "$reps"
for i in "${!ar_sizes[@]}"; do
  run_side sflow "allreduce_${ar_sizes[$i]}" "$tmp/allreduce" --size "${ar_sizes[$i]}" \
    --members $members --iters "${ar_iters[$i]}" --reps "$reps"
done

for i in "${!in_sizes[@]}"; do
  run_side sflow "allreduce_in_${in_sizes[$i]}" "$tmp/allreduce" --size "${in_sizes[$i]}" \
    --members $members --iters "${in_iters[$i]}" --reps "$reps" --inside 1
  [ $have_omp = 0 ] || run_side c "allreduce_in_${in_sizes[$i]}" "$tmp/omp_peer" allreduce \
    "${in_sizes[$i]}" $members "${in_iters[$i]}" "$reps" in
done
# Cold rounds, alternating sides, each in a fresh process; report.py keeps
# the best of the REPS processes of each side.
for r in $(seq "$reps"); do
  run_cold sflow "$tmp/cold" --n $n_cold
  [ $have_omp = 0 ] || run_cold omp "$tmp/omp_peer" cold $n_cold
done

if [ $have_omp = 1 ]; then
  run_side omp "tasks_pipelined tasks_one_by_one" "$tmp/omp_peer" tasks $n_tasks $n_tasks_one "$reps"
  run_side omp chain "$tmp/omp_peer" chain $n_chain "$reps"
  for i in "${!ar_sizes[@]}"; do
    run_side c "allreduce_${ar_sizes[$i]}" "$tmp/omp_peer" allreduce "${ar_sizes[$i]}" \
      $members "${ar_iters[$i]}" "$reps"
  done
else
  for n in tasks_pipelined tasks_one_by_one chain; do echo "omp ERROR $n gcc -fopenmp failed" >>"$raw"; done
fi

ray_names="tasks_pipelined tasks_one_by_one actor_pipelined actor_one_by_one chain"
ray_names+=$(printf ' allreduce_%s' "${ar_sizes[@]}")
if [ -n "$py" ]; then
  sizes=$(IFS=,; echo "${ar_sizes[*]}") iters=$(IFS=,; echo "${ar_ray_iters[*]}")
  limit=$((limit * 2)) run_side ray "$ray_names" "$py" "$here/ray_peer.py" --reps "$reps" \
    --tasks $r_tasks --tasks-one $r_tasks_one --calls $r_calls --calls-one $r_calls_one \
    --chain $r_chain --allreduce "$sizes" --iters "$iters" --members $members
else
  for n in $ray_names; do echo "ray ERROR $n $no_ray" >>"$raw"; done
fi

# ------------------------------------------------------------------ table
[ -z "${SFLOW_BENCH_RAW:-}" ] || cp "$raw" "$SFLOW_BENCH_RAW"
echo
echo "== tasks and actors: sflow $(git rev-parse --short HEAD 2>/dev/null || echo '?') vs OpenMP, C and Ray;" \
  "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date +%F)"
python3 "$here/report.py" "$raw"
