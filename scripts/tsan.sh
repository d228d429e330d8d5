#!/usr/bin/env bash
# Runs the task runtime's tests under ThreadSanitizer: builds sflowc and a
# TSan-instrumented runtime into build-tsan/, then compiles and runs the
# run tests of tasks, actors, futures, the scheduler, the stress suite and
# strings, plus the fault, observation, many-threads, serve and serve_stream tests, linking
# every program with -fsanitize=thread.  Any data race report fails the run (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
# An absolute or repository-relative build folder.
build=${1:-build-tsan}
cmake -S . -B "$build" -DSFLOW_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target sflowc sflowrt >/dev/null
case $build in /*) ;; *) build="$PWD/$build" ;; esac
wrap="$build/tsan-cc"
printf '#!/bin/sh\nexec cc -fsanitize=thread "$@"\n' >"$wrap"
chmod +x "$wrap"
export CC="$wrap"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 exitcode=66"
export SFLOW_RSS_SCALE=8 # TSan shadow memory
export SFLOW_TIME_SCALE=15 # and 5-15x the CPU time (// max-seconds)
status=0
# TSan runs the stress programs several times slower; on a loaded 2-core
# machine million_tasks alone has needed close to 60 s.
export SFLOW_TEST_TIMEOUT=${SFLOW_TEST_TIMEOUT:-240}
# strings: appended strings grown in place, shared with tasks and actors.
for d in tasks actors futures scheduler stress strings; do
  python3 tests/run_golden.py --run --sflowc "$build/bin/sflowc" --dir "tests/run/$d" || status=1
done
python3 tests/runtime/observe_test.py --sflowc "$build/bin/sflowc" || status=1
# 1024 pool threads parking and waking (runtime/sched/sched.c's idle workers).
# Its time limits are for the race check only (runtime/threads holds the real
# ones): TSan's start of a thread costs about 4 ms of CPU, so 1024 threads add
# 4.3 s on an idle 2-core machine, near the 4.5 s that a scale of 15 allows.
SFLOW_TIME_SCALE=40 python3 tests/runtime/threads_test.py --sflowc "$build/bin/sflowc" || status=1
python3 tests/runtime/fault_test.py --sflowc "$build/bin/sflowc" kill-at-30% checkpoint-write-1 \
  journal-write-4 || status=1
# std.serve: connection threads, replica loops and the supervisor sharing
# queues, a replica dying mid-batch, a rolling update, SIGTERM in flight.
python3 tests/runtime/serve_test.py --sflowc "$build/bin/sflowc" answers shutdown killed_replica \
  rollout canary || status=1
# Continuous batching: replica loops answering by id, server-sent events
# drained by connection threads, a client gone mid-stream, SIGTERM.
python3 tests/runtime/serve_stream_test.py --sflowc "$build/bin/sflowc" || status=1
exit $status
