#!/usr/bin/env bash
# `make demo`: compiles the richest example that works end to end and runs it.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
example=examples/scoring.sflow
out="$build/demo/scoring"
mkdir -p "$build/demo"
echo "+ $build/bin/sflowc $example -o $out"
"$build/bin/sflowc" "$example" -o "$out"
echo "+ $out --rows 1000 --chunks 4"
"$out" --rows 1000 --chunks 4
