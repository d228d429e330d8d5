#!/usr/bin/env bash
# bench/gpu/run.sh — every GPU check and GPU benchmark in one bounded run, one table.
#
#   bench/gpu/run.sh prepare [BUILD [DIR]]  here (flex/bison/LLVM): build and
#                                      compile everything into DIR (bench/gpu/out/),
#                                      stripped (well under 48 MiB with the tree)
#   bench/gpu/run.sh [OUT]             on the GPU machine (only CUDA, Python,
#                                      PyTorch needed): run it all, print the table
#
# The run has RUN_BUDGET_S seconds (280, so that it fits in five minutes of
# a device session) and spends them on the most telling checks first: the
# environment and library versions, the library kernels through NVRTC
# (the first launches), every std.nn op against the CPU, the MLP step and
# encoder layer against torch.cuda, the sflow programs against their CPU
# runs, the MLP forward pass, digits, NCCL between two processes, `@`
# against torch.matmul, compute-sanitizer's memcheck, and last the NVRTC
# compiles of every kernel (no GPU needed: make test does them too).  Each
# step runs under its own timeout, the smaller of its own bound and what is
# left; a step that the budget cannot hold is skipped and its row says so.
# Rows go to RUN_LOGS/table.txt as they are measured (RUN_LOGS: $OUT where
# the device tool sets it, else OUT/logs), each step's output to its own
# log there, and the table is printed at the end and on SIGTERM/SIGINT
# (exit 124), so a run stopped at any moment still reports what it has;
# table.md is the same table for docs/performance.md.
#
# Without a GPU the run still goes end to end: every GPU row says "not run"
# with the reason, and the script exits 0 only if nothing that ran failed.
# For a rehearsal under the host emulator (tests/gpu/run_rehearsal.py):
# RUN_CHECK_ARGS (gpu_check's, "--bench"), RUN_MLP_ARGS (mlp_bench's),
# RUN_GROUP_ARGS (group_allreduce's: "--sizes 2"),
# RUN_DIGITS_EPOCHS (15), RUN_LLM_GGUF_ARGS (llm_gguf.py's: "--layers 1"), RUN_LLM_TOKENS (8),
# RUN_LLM_ARGS (llm_bench's: "--prompt 4 --decode 2"), RUN_SANITIZER (the compute-sanitizer to use;
# "none": not run) and nn.sh's NN_* sizes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ "${1:-}" = prepare ]; then
  build=${2:-$root/build}
  out=${3:-$here/out}
  cmake --build "$build" -j "$(nproc)" --target sflowc gpu_check nvrtc_check nccl_check >/dev/null || exit 1
  rm -rf "$out" && mkdir -p "$out/progs"
  cp "$build/tests/gpu_check" "$build/tests/nvrtc_check" "$build/tests/nccl_check" "$out/"
  for src in "$root"/tests/gpu/programs/*.sflow "$root"/tests/run/kernels/*.sflow "$here"/mlp_bench.sflow "$here"/group_allreduce.sflow; do
    name=$(basename "$src" .sflow)
    "$build/bin/sflowc" -O2 "$src" -o "$out/progs/$name" || exit 1
    grep -h '// gpu-stats:' "$src" | sed 's|.*gpu-stats: *||' > "$out/progs/$name.stats" || true
  done
  # std.nn on the device (section 5): the op checker and the benchmarks, in
  # nn/ so that section 3 does not take them for kernel programs.  The bf16
  # checker needs nn.autocast; without it the reason goes to a .missing file
  # and its row says "not built".
  mkdir -p "$out/nn"
  for name in nn_check nn_bench; do
    "$build/bin/sflowc" -O2 "$here/$name.sflow" -o "$out/nn/$name" || exit 1
  done
  "$build/bin/sflowc" -O2 "$here/nn_check_autocast.sflow" -o "$out/nn/nn_check_autocast" 2> "$out/nn/nn_check_autocast.missing" &&
    rm -f "$out/nn/nn_check_autocast.missing"
  cp "$here/torch_peer.py" "$here/torch_opcount.py" "$out/nn/"
  # examples/digits_gpu.sflow (section 5b) with its data and its checker.
  mkdir -p "$out/examples"
  "$build/bin/sflowc" -O2 "$root/examples/digits_gpu.sflow" -o "$out/examples/digits_gpu" || exit 1
  cp "$root/examples/data/digits.csv" "$here/digits.py" "$out/examples/"
  # std.llm's decoder on the device (section 9): the benchmark, the GPU
  # against CPU check, and the writer of a random model of SmolLM2's
  # shapes (the real file, 98 MB, does not fit what travels).
  mkdir -p "$out/llm"
  "$build/bin/sflowc" -O2 "$here/llm_bench.sflow" -o "$out/llm/llm_bench" || exit 1
  "$build/bin/sflowc" -O2 "$root/tests/gpu/llm/decoder.sflow" -o "$out/llm/llm_decoder" || exit 1
  cp "$here/llm_gguf.py" "$out/llm/"
  mkdir -p "$out/cu"
  # Each kernel file as the runtime embeds it (cmake/embed.cmake): every
  # line `#include "x.h"` replaced by the text of runtime/nn/x.h (kinds.h,
  # counter.h, ...).
  for cu in "$root"/kernels/*.cu; do
    awk -v dir="$root/runtime/nn" '
      /^#include "[A-Za-z0-9_.]+"/ {
        f = $2; gsub(/"/, "", f)
        while ((getline line < (dir "/" f)) > 0) print line
        close(dir "/" f); next
      }
      { print }' "$cu" >"$out/cu/$(basename "$cu")"
  done
  for src in "$root"/tests/gpu/programs/*.sflow "$root"/tests/run/kernels/*.sflow; do
    "$build/bin/sflowc" --emit=cuda "$src" > "$out/cu/$(basename "$src" .sflow).cu" 2>/dev/null || rm -f "$out/cu/$(basename "$src" .sflow).cu"
  done
  # Stripped: what travels to the device is limited (64 MiB with the tree);
  # the debug info of RelWithDebInfo is three quarters of the bytes.
  find "$out" -type f -perm -u+x ! -name '*.py' -exec strip --strip-unneeded {} + || exit 1
  # The newest glibc symbol version they need: the device's glibc must be as new.
  find "$out" -type f -perm -u+x ! -name '*.py' -exec objdump -T {} + 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//' > "$out/glibc.needed"
  kb=$(du -sk "$out" | cut -f1)
  tree_kb=$(git -C "$root" ls-files -z | (cd "$root" && du -skc --files0-from=- 2>/dev/null) | tail -1 | cut -f1)
  echo "prepared $out ($(ls "$out/progs" | grep -vc stats) programs, $(ls "$out/nn" | grep -c '^nn_[a-z_]*$') nn programs," \
       "$((kb / 1024)) MiB stripped, $(((kb + tree_kb) / 1024)) MiB with the tracked tree; glibc $(cat "$out/glibc.needed") or later); run: bench/gpu/run.sh"
  [ $((kb + tree_kb)) -lt $((48 * 1024)) ] || { echo "run.sh prepare: over 48 MiB with the tree" >&2; exit 1; }
  exit 0
fi

prep=${1:-$here/out}
[ -x "$prep/gpu_check" ] || { echo "run.sh: $prep is not prepared; run 'bench/gpu/run.sh prepare' first" >&2; exit 2; }
out=$prep
logs=${RUN_LOGS:-${OUT:-$prep/logs}}
mkdir -p "$logs" || exit 2
table=$logs/table.txt
: > "$table"
export SFLOW_KERNEL_CACHE=${SFLOW_KERNEL_CACHE:-$(mktemp -d)/kernels}
# NCCL: the system's libnccl.so.2, else the one PyTorch ships (pip's
# nvidia-nccl), else the CUDA toolkit's; SFLOW_NCCL set by hand wins.
if [ -z "${SFLOW_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  for f in $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null) \
           /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda-13.0/lib/libnccl.so.2; do
    [ -f "$f" ] && { export SFLOW_NCCL=$f; break; }
  done
fi
# Both NCCL ranks run on this host: sockets over the loopback, no
# InfiniBand, and a watchdog that fires well inside the step's timeout.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
export SFLOW_NCCL_TIMEOUT=${SFLOW_NCCL_TIMEOUT:-20}
failed=0
row() { echo "TABLE|$*" >> "$table"; echo "TABLE|$*"; }
# GPU_SECTIONS="5 5b" runs only those sections (ids 0 1 2 3 4 5 5b 6 7 8 9;
# all when unset), so a short device session can split the run in two calls.
want() { [ -z "${GPU_SECTIONS:-}" ] || [[ " $GPU_SECTIONS " == *" $1 "* ]]; }
for id in ${GPU_SECTIONS:-}; do
  case $id in 0|1|2|3|4|5|5b|6|7|8|9) ;; *) echo "run.sh: GPU_SECTIONS: no section '$id' (sections: 0 1 2 3 4 5 5b 6 7 8 9)" >&2; exit 2;; esac
done
print_table() {
  echo
  printf '%-52s | %-40s | %-30s | %s\n' check figure peer goal
  printf '%s\n' "$(printf -- '-%.0s' {1..140})"
  { echo "| check | figure | peer | goal |"; echo "|---|---|---|---|"; } > "$logs/table.md"
  sed 's/^TABLE|//' "$table" | while IFS='|' read -r a b c d; do
    printf '%-52s | %-40s | %-30s | %s\n' "$a" "$b" "$c" "$d"
    echo "| $a | $b | $c | $d |" >> "$logs/table.md"
  done
}

budget=${RUN_BUDGET_S:-280}
t_end=$((SECONDS + budget))
# left OWN: the smaller of OWN and the seconds left.
left() { local l=$((t_end - SECONDS)); [ $l -lt "$1" ] && echo $((l > 0 ? l : 0)) || echo "$1"; }
# room NAME MIN OWN: sets lim, or writes NAME's "skipped" row and fails
# when fewer than MIN seconds are left.
room() {
  lim=$(left "$3")
  [ "$lim" -ge "$2" ] && return 0
  row "$1|skipped: $lim s of the ${budget} s budget left, the step needs $2|-|-"
  return 1
}
# guard LIMIT LOG CMD...: CMD under `timeout` in the background, so that a
# SIGTERM to this script is handled at once (the trap ends it); rc in rc.
child=; step=; harvest=:
guard() {
  local l=$1 log=$2; shift 2
  [ "$l" -ge 1 ] || l=1 # timeout 0 would mean none
  timeout -k 5 "$l" "$@" > "$log" 2>&1 &
  child=$!
  wait "$child"; rc=$?
  child=
}
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }
# A run stopped from outside (a time limit) keeps the rows it has: the
# running step's own rows so far (its harvest), a row that says where it
# stopped, the table.
on_stop() {
  trap '' TERM INT
  [ -n "$child" ] && { kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; }
  eval "$harvest"
  row "run stopped by a signal|during ${step:-?}, after $SECONDS s|-|-"
  print_table
  exit 124
}
trap on_stop TERM INT
gpu_ok=1 no_blas=0
echo "run.sh: budget ${budget} s; table and logs in $logs"

# 0. The environment: the GPU and driver, the libraries each side loads
#    (their files and versions), the CPU side's BLAS, torch, NCCL.
if want 0; then
step="environment"
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}') need=$(cat "$out/glibc.needed" 2>/dev/null)
if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "${have:-0}" | sort -V | head -1)" != "$need" ]; then
  row "environment: glibc|FAIL: ${have:-unknown} here, the prepared programs need $need|-|>= $need"; failed=1
else row "environment: glibc|${have:-unknown} (the programs need ${need:-?})|-|>= ${need:-?}"; fi
smi=$(timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
row "environment: GPU, driver, memory (nvidia-smi)|${smi:-not run: no nvidia-smi}|-|-"
guard "$(left 30)" "$logs/which.log" "$out/gpu_check" --which
if [ $rc = 77 ]; then
  row "environment: libraries|not run: $(tail -1 "$logs/which.log")|-|-"
else
  for what in NVRTC cuBLAS "no cuBLAS" "CPU BLAS"; do
    l=$(grep -m1 "^gpu_check: $what " "$logs/which.log" | sed 's/^gpu_check: //')
    [ -n "$l" ] && row "environment: ${what#no }|$l|-|-"
  done
  grep -m1 '^gpu_check: device' "$logs/which.log" | sed 's/^gpu_check: //' | while read -r l; do row "environment: device|$l|-|-"; done
  # Without a CPU BLAS the CPU side's products are a reference loop: the
  # rows with a CPU peer say so rather than pass it off as the CPU figure.
  grep -q '^gpu_check: CPU BLAS none' "$logs/which.log" && no_blas=1
fi
torch=$(timeout 30 python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU" if torch.cuda.is_available() else "no GPU")' 2>&1 | tail -1)
row "environment: PyTorch|$torch|-|-"
row "environment: NCCL|${SFLOW_NCCL:-libnccl.so.2 from the loader path}|-|-"
fi

# 2. Library kernels against their CPU references (the first NVRTC
#    compiles and launches), then bandwidth, NVRTC times, matmul.
if want 2 && room "library kernels, bandwidth, matmul" 10 90; then
  step="gpu_check"; harvest='grep "^TABLE|" "$logs/gpu_check.log" >> "$table"'
  guard "$lim" "$logs/gpu_check.log" "$out/gpu_check" ${RUN_CHECK_ARGS---bench}
  harvest=:
  if [ $rc = 77 ]; then row "library kernels, bandwidth, matmul|not run: $(tail -1 "$logs/gpu_check.log")|-|-"; gpu_ok=0
  else
    grep '^TABLE|' "$logs/gpu_check.log" | while read -r l; do row "${l#TABLE|}"; done
    [ $rc = 0 ] || { failed=1; row "gpu_check|FAIL (rc $rc$(timed_out $rc && echo ", timed out after $lim s"))|-|-"; }
  fi
fi

# 5. std.nn on the device (bench/gpu/nn.sh): every op against the CPU,
#    then the MLP step and the encoder layer against torch.cuda.
if want 5 && room "nn op checkers, MLP step, encoder layer" 15 150; then
  step="nn.sh check steps"
  NN_PARTS="check steps" NN_BUDGET_S=$lim "$here/nn.sh" "$out" "$table" > "$logs/nn.log" 2>&1 &
  child=$!; wait $child || failed=1; child=
fi

# 9. std.llm's decoder on the device (runtime/nn/gpu_llama.c), never run
#    on a GPU before this script: a random GGUF of SmolLM2-135M's shapes
#    and types written here (llm_gguf.py), the GPU decoder's logits,
#    greedy tokens and batches against the CPU decoder's
#    (tests/gpu/llm/decoder.sflow), then prompt tokens/s, decode tokens/s
#    at batch 1 and 16 clients' aggregate tokens/s (llm_bench.sflow) on
#    the GPU and, as the peer, the CPU decoder on this machine.  No
#    transformers peer: run.sh installs nothing, and the device's Python
#    is not known to hold transformers and gguf.
if want 9 && [ $gpu_ok = 1 ] && room "llm decoder on the GPU" 30 100; then
  step="llm_gguf"; gg=$logs/smollm2_shapes.gguf
  guard "$(left 30)" "$logs/llm_gguf.log" python3 "$out/llm/llm_gguf.py" "$gg" ${RUN_LLM_GGUF_ARGS:-}
  if [ $rc != 0 ]; then row "llm decoder: random SmolLM2-shaped GGUF|FAIL (rc $rc): $(tail -1 "$logs/llm_gguf.log" | cut -c1-60)|-|-"; failed=1
  else
    step="llm_decoder"
    SFLOW_GPU_STATS=1 guard "$(left 60)" "$logs/llm_decoder.log" "$out/llm/llm_decoder" --require-gpu --raw --path "$gg" --tokens "${RUN_LLM_TOKENS:-8}"
    worst=$(grep -oE 'rel_diff [0-9.e+-]+' "$logs/llm_decoder.log" | awk '{ if ($2 > w) w = $2 } END { print w + 0 }')
    greedy=$(grep -c '^greedy' "$logs/llm_decoder.log"); same=$(grep '^greedy' "$logs/llm_decoder.log" | cut -d' ' -f3- | uniq | wc -l)
    ok=$([ $rc = 0 ] && [ "$greedy" = 2 ] && awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }' && echo ok || echo FAIL)
    [ $ok = ok ] || failed=1
    row "llm decoder GPU vs CPU (logits, ${RUN_LLM_TOKENS:-8} greedy, batch 2/5)|$ok: rel diff $worst, greedy $([ "$same" = 1 ] && echo identical || echo DIFFERENT) (rc $rc)|CPU decoder|< 1e-4, identical"
    for side in gpu cpu; do
      room "llm bench ($side)" 10 60 || continue
      step="llm_bench $side"
      if [ $side = gpu ]; then guard "$lim" "$logs/llm_bench.gpu.log" "$out/llm/llm_bench" --require-gpu --path "$gg" ${RUN_LLM_ARGS:-}
      else guard "$lim" "$logs/llm_bench.cpu.log" "$out/llm/llm_bench" --cpu --path "$gg" ${RUN_LLM_ARGS:-}; fi
      [ $rc = 0 ] || row "llm bench ($side)|FAIL (rc $rc$(timed_out $rc && echo ", timed out after $lim s"))|-|-"
    done
    fig() { grep -oE "^llm_bench $2 [0-9.]+" "$logs/llm_bench.$1.log" 2>/dev/null | awk '{print $3}'; }
    for what in $(grep -oE '^llm_bench (prefill|decode|serve)[_a-z0-9]*' "$logs/llm_bench.gpu.log" 2>/dev/null | cut -d' ' -f2); do
      row "llm SmolLM2-135M shapes ($(grep -o '[0-9]* layers' "$logs/llm_gguf.log")) Q4_1: $what tokens/s|$(fig gpu $what || true)|CPU decoder $(fig cpu $what || true)|> CPU"
    done
  fi
fi

# 3. sflow programs: GPU against the CPU version, identical output (both
#    runs --quiet: the GPU run's notices are not output); transfer counters.
if want 3 && [ $gpu_ok = 1 ]; then
for exe in "$out"/progs/*; do
  case $exe in *.stats) continue;; esac
  name=$(basename "$exe"); [ "$name" = mlp_bench ] || [ "$name" = group_allreduce ] && continue
  room "$name: GPU vs CPU" 5 30 || continue
  step="$name"
  SFLOW_GPU_STATS=1 timeout -k 5 "$lim" "$exe" --require-gpu --quiet > "$logs/$name.gpu.out" 2> "$logs/$name.gpu.err" &
  child=$!; wait $child; g_rc=$?; child=
  if grep -qE -- '--require-gpu (was given|is set)' "$logs/$name.gpu.err"; then
    row "sflow kernels GPU vs CPU|not run: $(grep -o 'no GPU ([^)]*)' "$logs/$name.gpu.err" | head -1)|-|-"; gpu_ok=0; break
  fi
  room "$name: CPU side" 5 30 || continue
  SFLOW_NO_GPU=1 timeout -k 5 "$lim" "$exe" --quiet > "$logs/$name.cpu.out" 2> "$logs/$name.cpu.err" &
  child=$!; wait $child; c_rc=$?; child=
  stats=$(grep '^sflow-gpu-stats:' "$logs/$name.gpu.err")
  grep -v '^sflow-gpu-stats:' "$logs/$name.gpu.err" > "$logs/$name.gpu.err2"
  verdict=identical
  cmp -s "$logs/$name.gpu.out" "$logs/$name.cpu.out" && [ $g_rc = $c_rc ] && cmp -s "$logs/$name.gpu.err2" "$logs/$name.cpu.err" || verdict=DIFFERENT
  timed_out $g_rc && verdict="timed out after $lim s"
  for kv in $(cat "$exe.stats" 2>/dev/null); do
    echo "$stats" | grep -qw -- "$kv" || verdict="$verdict; counters: want $kv"
  done
  [ "$verdict" = identical ] || failed=1
  row "$name: GPU vs CPU|$verdict ($(echo "$stats" | grep -o 'h2d_bytes=[0-9]* d2h_bytes=[0-9]*'))|CPU version|identical"
done
fi

# 4. MLP forward pass against PyTorch.
if want 4 && room "sflow MLP forward and PyTorch peers" 10 60; then
  step="mlp_bench"
  if [ $gpu_ok = 1 ]; then
    SFLOW_GPU_STATS=1 guard "$lim" "$logs/mlp.log" "$out/progs/mlp_bench" --require-gpu ${RUN_MLP_ARGS:-}
    mlp=$(grep -o 'mlp_ms [0-9.]*' "$logs/mlp.log" | cut -d' ' -f2)
    row "sflow MLP forward ${RUN_MLP_ARGS:-4096x1024x4096x1024}|${mlp:-FAIL (rc $rc)} ms ($(grep -o 'd2h_bytes=[0-9]*' "$logs/mlp.log"))|torch row below|<= torch"
    [ -n "$mlp" ] || failed=1
  fi
  if room "PyTorch peers" 10 60; then
    step="torch_peer"; guard "$lim" "$logs/torch.log" python3 "$here/torch_peer.py"
    if [ $rc = 0 ]; then grep '^TABLE|' "$logs/torch.log" | while read -r l; do row "${l#TABLE|}"; done
    else row "PyTorch peers|not run: $(tail -1 "$logs/torch.log" | cut -c1-60)|-|-"; fi
  fi
fi

# 5b. examples/digits_gpu.sflow, the MLP on scikit-learn's digits trained in a
#     @gpus(1) actor, on the GPU and on the CPU: the test accuracy (within 2
#     of 297 images: cuBLAS and OpenBLAS round differently over 360 AdamW
#     steps), the losses (1e-3 relative), one read per epoch, and the mean
#     ms per epoch after the first beside the CPU's.
if want 5b && room "examples/digits on the GPU" 15 60; then
  step="digits"; harvest='grep "^TABLE|" "$logs/digits.log" >> "$table"'
  guard "$lim" "$logs/digits.log" python3 "$out/examples/digits.py" --exe "$out/examples/digits_gpu" \
    --csv "$out/examples/digits.csv" --epochs "${RUN_DIGITS_EPOCHS:-15}" --loss-tol 1e-3 --right-tol 2
  harvest=:
  if grep -q '^TABLE|' "$logs/digits.log"; then
    grep '^TABLE|' "$logs/digits.log" | while IFS='|' read -r _ a b c d; do
      [ $no_blas = 1 ] && c="$c (no CPU BLAS: a reference loop, not a CPU figure)"
      row "$a|$b|$c|$d"
    done
  else row "examples/digits on the GPU: accuracy, ms per epoch vs CPU|FAIL (rc $rc$(timed_out $rc && echo ", timed out after $lim s"))|-|-"; fi
  [ $rc = 0 ] || [ $rc = 77 ] || failed=1
fi

# 6. NCCL (runtime/gpu/nccl.c): two processes as two ranks (exact results, a
#    dead and a stopped peer caught by the watchdog, allreduce bandwidth
#    1 KB-256 MB), the torch.distributed peer, and an sflow group in one
#    process (NCCL on two GPUs, host staging when its members share one).
if want 6 && room "NCCL checks and allreduce bandwidth" 20 120; then
  step="nccl_check"; harvest='grep "^TABLE|" "$logs/nccl.log" >> "$table"'
  guard "$lim" "$logs/nccl.log" "$out/nccl_check" --bench
  harvest=:
  if [ $rc = 77 ]; then row "NCCL checks and allreduce bandwidth|not run: $(grep -o 'SKIP.*' "$logs/nccl.log" | head -1)|-|-"
  elif grep -q 'turns NCCL off' "$logs/nccl.log"; then row "NCCL checks and allreduce bandwidth|not run: $(grep -o 'SFLOW_NCCL=[a-z0-9]* turns NCCL off' "$logs/nccl.log")|-|-"
  else grep '^TABLE|' "$logs/nccl.log" | while read -r l; do row "${l#TABLE|}"; done
    [ $rc = 0 ] || { failed=1; row "nccl_check|FAIL (rc $rc$(timed_out $rc && echo ", timed out after $lim s"))|-|-"; }; fi
  if room "torch.distributed NCCL peer" 10 60; then
    step="torch_nccl_peer"; guard "$lim" "$logs/tnccl.log" python3 "$here/torch_nccl_peer.py"
    if [ $rc = 0 ]; then grep '^TABLE|' "$logs/tnccl.log" | while read -r l; do row "${l#TABLE|}"; done
    else row "torch.distributed NCCL peer|not run: $(tail -1 "$logs/tnccl.log" | cut -c1-60)|-|-"; fi
  fi
  if [ $gpu_ok = 1 ] && room "sflow group allreduce" 10 40; then
    step="group_allreduce"; guard "$lim" "$logs/group.log" "$out/progs/group_allreduce" --require-gpu ${RUN_GROUP_ARGS:-}
    via=$(grep -q 'share GPU' "$logs/group.log" && echo "1 GPU shared: host staging" || echo "NCCL")
    while read -r _ bytes us gbs; do
      row "sflow group allreduce_sum $bytes B, 2 members ($via)|$gbs GB/s bus ($us us/round)|nccl_check row|-"
    done < <(grep -E '^group_allreduce [0-9]+ ' "$logs/group.log")
    [ $rc = 0 ] || { failed=1; row "sflow group allreduce|FAIL (rc $rc)|-|-"; }
  fi
fi

# 7. `@` against torch.matmul (nn.sh's matmul part), f32 and TF32.
if want 7 && room "nn @ against torch.matmul" 15 90; then
  step="nn.sh matmul"
  NN_PARTS=matmul NN_BUDGET_S=$lim "$here/nn.sh" "$out" "$table" >> "$logs/nn.log" 2>&1 &
  child=$!; wait $child || failed=1; child=
fi

# 8. compute-sanitizer memcheck (with what time is left) on the library
#    kernels and one program, then NVRTC for sm_80/sm_90 (no GPU needed).
if want 8; then
  san=${RUN_SANITIZER:-$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)}
  if [ -z "$san" ] || [ "$san" = none ] || [ ! -x "$san" ]; then
    row "compute-sanitizer memcheck|not run: $([ -n "$san" ] && echo "RUN_SANITIZER=$san" || echo "no compute-sanitizer")|-|0 errors"
  elif [ $gpu_ok = 1 ]; then
    for t in gpu_check progs/custom_op; do
      room "compute-sanitizer memcheck $(basename $t)" 20 60 || continue
      step="memcheck $t"; guard "$lim" "$logs/memcheck.$(basename $t).log" "$san" --tool memcheck --error-exitcode 9 "$out/$t"
      errs=$(grep -o 'ERROR SUMMARY: [0-9]* error' "$logs/memcheck.$(basename $t).log" | tail -1)
      [ $rc = 0 ] || failed=1
      row "compute-sanitizer memcheck $(basename $t)|${errs:-no summary} (rc $rc$(timed_out $rc && echo ", timed out after $lim s"))|-|0 errors"
    done
  fi
fi
if want 1 && room "NVRTC compiles every kernel (sm_80, sm_90)" 10 60; then
  step="nvrtc_check"
  guard "$lim" "$logs/nvrtc.log" "$out/nvrtc_check" sm_80 sm_90 -- "$out"/cu/*.cu
  if [ $rc = 0 ]; then row "NVRTC compiles every kernel (sm_80, sm_90)|$(tail -1 "$logs/nvrtc.log" | sed 's/nvrtc_check: //')|-|0 failed"
  elif [ $rc = 77 ]; then row "NVRTC compiles every kernel|not run: $(cat "$logs/nvrtc.log")|-|-"
  else row "NVRTC compiles every kernel|FAIL (rc $rc$(timed_out $rc && echo ", timed out after $lim s"); see nvrtc.log)|-|0 failed"; failed=1; fi
fi

step="the table"
row "run.sh|$SECONDS s of the ${budget} s budget; $([ $failed = 0 ] && echo "nothing that ran failed" || echo "FAILED: see the rows and $logs")|-|-"
print_table
exit $failed
