#!/usr/bin/env bash
# `make demo`: compiles three of the examples (docs/examples.md) and runs them:
# batch scoring with a retried chunk, a replica group serving requests, and a
# pipeline killed with SIGKILL halfway and finished with --resume.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
sflowc="$build/bin/sflowc"
demo="$build/demo"
mkdir -p "$demo"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ -t 1 ] || say() { printf '\n== %s\n' "$*"; }
show() { echo "+ $*"; "$@"; }

for ex in scoring service pipeline; do
  show "$sflowc" "examples/$ex.sflow" -o "$demo/$ex"
done

say "1. Batch scoring (examples/scoring.sflow)"
cat <<'EOF'
200,000 rows cut into 16 chunks, one task per chunk on the thread pool. The
first try of chunk 3 fails on purpose; @retry(2) runs it again (tries: 2),
and an @checkpoint actor folds the chunk results into totals.
EOF
show "$demo/scoring" --rows 200000 --chunks 16

say "2. An online service (examples/service.sflow)"
cat <<'EOF'
A group of 4 model replicas (spawn Model(dim) * 4) answers waves of 5,000
requests; g.any sends each to the least-loaded replica, and g.all rolls out
new weights to every replica before the last wave.
EOF
show "$demo/service" --replicas 4 --requests 5000

say "3. Kill and resume (examples/pipeline.sflow)"
cat <<'EOF'
Extract and transform tasks per batch feed an @checkpoint actor. The run is
killed with SIGKILL after its first lines; the same command with --resume
answers what was done from the journal in --checkpoint-dir, restores the
actor from its checkpoint and prints exactly what an uninterrupted run prints.
EOF
ck=$(mktemp -d "${TMPDIR:-/tmp}/sflow-demo.XXXXXX")
trap 'rm -rf "$ck"' EXIT
log="$ck/killed.out"
: >"$log"
echo "+ $demo/pipeline --checkpoint-dir $ck/state --window 2001 &   # then kill -9 after 4 lines"
"$demo/pipeline" --checkpoint-dir "$ck/state" --window 2001 >"$log" 2>/dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null && [ "$(wc -l <"$log")" -lt 4 ]; do sleep 0.005; done
kill -9 "$pid" 2>/dev/null || true
status=0
wait "$pid" 2>/dev/null || status=$?
cat "$log"
if [ "$status" -eq 137 ]; then
  echo "[killed with SIGKILL after $(wc -l <"$log") lines]"
else
  echo "[the run finished before the kill landed; resuming would have nothing to do]"
fi
if [ -e "$ck/state/journal" ]; then
  echo "+ $demo/pipeline --checkpoint-dir $ck/state --window 2001 --resume"
  "$demo/pipeline" --checkpoint-dir "$ck/state" --window 2001 --resume >"$ck/resumed.out" 2>"$ck/resumed.err"
  cat "$ck/resumed.out" "$ck/resumed.err"
  "$demo/pipeline" --checkpoint-dir "$ck/fresh" --window 2001 --quiet >"$ck/fresh.out"
  if cmp -s "$ck/resumed.out" "$ck/fresh.out"; then
    echo "[the resumed output is identical to an uninterrupted run's]"
  else
    echo "[the resumed output differs from an uninterrupted run's]"
    diff "$ck/fresh.out" "$ck/resumed.out" || true
    exit 1
  fi
fi
