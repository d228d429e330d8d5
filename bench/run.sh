#!/usr/bin/env bash
# `make bench`: every benchmark, each printing its figures beside a peer's.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
echo "== numeric programs: sflow vs C (cc -O2)"
python3 bench/numeric/run.py --sflowc "$build/bin/sflowc"
if [ -x bench/frontend.sh ] || [ -f bench/frontend.sh ]; then
  echo "== front end: sflowc --check vs cc -fsyntax-only"
  bash bench/frontend.sh "$build"
fi
echo "== string building: s += \"ab\" in sflow vs Python and a C realloc loop"
python3 bench/strings/run.py --sflowc "$build/bin/sflowc"
echo "== tokenizing Debian fortunes: std.tokenizer vs the Python tokenizers package"
python3 bench/tokenizer/run.py --build "$build" || echo "bench/tokenizer: failed (its peers need the network once)"
echo "== reading a numeric CSV: std.data vs pandas 3.1.1 and 2.3.3 (C engine) and pyarrow.csv"
bash bench/data/run.sh "$build" || echo "bench/data: failed (its peers need the network once)"
echo "== word count: split and map<str, i64> in sflow vs Python (dict, Counter) and C"
python3 bench/wordcount/run.py --sflowc "$build/bin/sflowc"
echo "== tasks, actors, futures, allreduce: sflow vs OpenMP, C and Ray"
bash bench/tasks/run.sh "$build"
echo "== std.tune: sweep overhead vs Ray Tune and a plain loop; ASHA vs FIFO on examples/tune"
python3 bench/tune/run.py || echo "bench/tune: failed"
echo "== small allreduces (f32[10], f32[1K]), idle and beside two busy loops: sflow vs a pthread_barrier peer"
python3 bench/collectives/run.py --sflowc "$build/bin/sflowc"

echo "== cluster: start-up and allreduce, sflow vs OpenMPI over the same sshd hosts"
bash bench/cluster/setup.sh || echo "bench/cluster: OpenMPI not installed; sflow figures only"
python3 bench/cluster/run.py --sflowc "$build/bin/sflowc"
echo "== cluster: task throughput across 1, 2 and 4 simulated nodes"
python3 bench/cluster/tasks.py --sflowc "$build/bin/sflowc"
