#!/usr/bin/env bash
# bench/gpu/run.sh — every GPU check and GPU benchmark in one go, one table.
#
#   bench/gpu/run.sh prepare [BUILD]   here (flex/bison/LLVM): build and
#                                      compile everything into bench/gpu/out/
#   bench/gpu/run.sh [OUT]             on the GPU machine (only CUDA, Python,
#                                      PyTorch needed): run it all, print the table
#
# Without a GPU the run still goes end to end: every GPU row says "not run"
# with the reason, and the script exits 0 only if nothing that ran failed.
# The GPU runs should take under 10 minutes on an H200 (the NCCL part, 6,
# is bounded by its timeouts at about 6 minutes and normally needs one;
# std.nn's part, 5, about 2: the op checker, then 5 benchmark processes
# per side of a few seconds each, every one bounded by `timeout`).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ "${1:-}" = prepare ]; then
  build=${2:-$root/build}
  out=$here/out
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
  cp "$here/torch_peer.py" "$out/nn/"
  mkdir -p "$out/cu"
  cp "$root"/kernels/*.cu "$out/cu/"
  for src in "$root"/tests/gpu/programs/*.sflow "$root"/tests/run/kernels/*.sflow; do
    "$build/bin/sflowc" --emit=cuda "$src" > "$out/cu/$(basename "$src" .sflow).cu" 2>/dev/null || rm -f "$out/cu/$(basename "$src" .sflow).cu"
  done
  echo "prepared $out ($(ls "$out/progs" | grep -vc stats) programs, $(ls "$out/nn" | grep -c '^nn_[a-z_]*$') nn programs); run: bench/gpu/run.sh"
  exit 0
fi

out=${1:-$here/out}
[ -x "$out/gpu_check" ] || { echo "run.sh: $out is not prepared; run 'bench/gpu/run.sh prepare' first" >&2; exit 2; }
export SFLOW_KERNEL_CACHE=${SFLOW_KERNEL_CACHE:-$(mktemp -d)/kernels}
# NCCL: the system's libnccl.so.2, else the one PyTorch ships (pip's
# nvidia-nccl), else the CUDA toolkit's; SFLOW_NCCL set by hand wins.
if [ -z "${SFLOW_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  for f in $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null) \
           /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda-13.0/lib/libnccl.so.2; do
    [ -f "$f" ] && { export SFLOW_NCCL=$f; break; }
  done
fi
table=$(mktemp)
failed=0
row() { echo "TABLE|$*" >> "$table"; }

# 1. NVRTC for sm_80/sm_90 and for this GPU's own architecture (no GPU needed).
if "$out/nvrtc_check" sm_80 sm_90 -- "$out"/cu/*.cu > "$table.nvrtc" 2>&1; then
  row "NVRTC compiles every kernel (sm_80, sm_90)|$(tail -1 "$table.nvrtc" | sed 's/nvrtc_check: //')|-|0 failed"
else
  rc=$?; [ $rc = 77 ] && row "NVRTC compiles every kernel|not run: $(cat "$table.nvrtc")|-|-" || { row "NVRTC compiles every kernel|FAIL (see below)|-|0 failed"; cat "$table.nvrtc"; failed=1; }
fi

# 2. Library kernels against their CPU references, bandwidth, NVRTC times, matmul.
timeout 300 "$out/gpu_check" --bench > "$table.check" 2>&1; rc=$?
if [ $rc = 77 ]; then row "library kernels, bandwidth, matmul|not run: $(tail -1 "$table.check")|-|-"
else grep '^TABLE|' "$table.check" >> "$table"; [ $rc = 0 ] || { failed=1; cat "$table.check"; }; fi

# 3. sflow programs: GPU against the CPU version, identical output; transfer counters.
gpu_ok=1
for exe in "$out"/progs/*; do
  case $exe in *.stats) continue;; esac
  name=$(basename "$exe"); [ "$name" = mlp_bench ] || [ "$name" = group_allreduce ] && continue
  g_out=$(SFLOW_GPU_STATS=1 timeout 120 "$exe" --require-gpu 2>"$table.gerr"); g_rc=$?
  if grep -qE -- '--require-gpu (was given|is set)' "$table.gerr"; then
    row "sflow kernels GPU vs CPU|not run: $(grep -o 'no GPU ([^)]*)' "$table.gerr" | head -1)|-|-"; gpu_ok=0; break
  fi
  c_out=$(SFLOW_NO_GPU=1 timeout 120 "$exe" --quiet 2>"$table.cerr"); c_rc=$?
  # Notices (GPU run only: the CPU run is --quiet) say how work was placed.
  stats=$(grep '^sflow-gpu-stats:' "$table.gerr"); grep -v '^sflow-gpu-stats:' "$table.gerr" | grep -v '^[^ ]*: notice: ' > "$table.gerr2"
  verdict=identical
  [ "$g_out" = "$c_out" ] && [ $g_rc = $c_rc ] && cmp -s "$table.gerr2" "$table.cerr" || verdict=DIFFERENT
  for kv in $(cat "$exe.stats" 2>/dev/null); do
    echo "$stats" | grep -qw -- "$kv" || verdict="$verdict; counters: want $kv"
  done
  [ "$verdict" = identical ] || failed=1
  row "$name: GPU vs CPU|$verdict ($(echo "$stats" | grep -o 'h2d_bytes=[0-9]* d2h_bytes=[0-9]*'))|CPU version|identical"
done

# 4. MLP forward pass against PyTorch.
if [ $gpu_ok = 1 ]; then
  mlp=$(timeout 300 "$out/progs/mlp_bench" --require-gpu 2>&1 | grep -o 'mlp_ms [0-9.]*' | cut -d' ' -f2)
  row "sflow MLP forward 4096x1024x4096x1024|${mlp:-FAIL} ms|torch row below|<= torch"
fi
timeout 300 python3 "$here/torch_peer.py" > "$table.torch" 2>&1; rc=$?
if [ $rc = 0 ]; then grep '^TABLE|' "$table.torch" >> "$table"
else row "PyTorch peers|not run: $(tail -1 "$table.torch")|-|-"; fi

# 5. std.nn on the device (bench/gpu/nn_*.sflow; docs/performance.md, "GPU").
#    The op checker: every op forward and backward on the CPU and in a
#    @gpus(1) actor, one row per op (its own TABLE| lines); its kernels must
#    have run on the device (gpu_launches > 0), else the ops ran on the CPU.
#    Then the MLP step, the encoder layer and `@` beside torch.cuda, each
#    side one process per benchmark, with the allocators' peaks.
#    The whole part has 300 s (nn_end; NN_BUDGET_S=N for another): each process's timeout is the
#    smaller of its own and what is left, and a part with under 10 s left
#    is not started (its row says so).
nn_gpu=1
nn_end=$((SECONDS + ${NN_BUDGET_S:-300}))
left() { local l=$((nn_end - SECONDS)); [ $l -lt "$1" ] && echo $l || echo "$1"; }
spent="not run: section 5's ${NN_BUDGET_S:-300} s were spent"
counter() { grep -o "\b$1=[0-9]*" "$2" 2>/dev/null | tail -1 | cut -d= -f2; }
nn_checker() {   # nn_checker NAME TIMEOUT
  local exe=$out/nn/$1
  if [ -f "$exe.missing" ] || [ ! -x "$exe" ]; then
    row "nn $1|not built: $(grep -m1 error "$exe.missing" 2>/dev/null | sed 's/^[^ ]* //' | cut -c1-60)|-|-"; return
  fi
  local lim; lim=$(left "$2"); [ "$lim" -lt 10 ] && { row "nn $1|$spent|-|-"; return; }
  SFLOW_GPU_STATS=1 timeout "$lim" "$exe" --require-gpu --n 128 --device GPU > "$table.nn" 2> "$table.nnerr"; local rc=$?
  if grep -q -- '--require-gpu' "$table.nnerr"; then
    row "nn $1 (every op, GPU vs CPU)|not run: no GPU|-|-"; nn_gpu=0; return
  fi
  grep '^TABLE|' "$table.nn" >> "$table"
  local launches; launches=$(counter gpu_launches "$table.nnerr")
  if [ "${launches:-0}" = 0 ]; then
    row "nn $1: kernels on the device|FAIL: gpu_launches=${launches:-?} (the ops ran on the CPU)|-|> 0"; failed=1
  fi
  if [ $rc != 0 ]; then
    failed=1; row "nn $1|FAIL (rc $rc$([ $rc = 124 ] && echo ", timed out after $lim s"))|-|-"
    echo "--- $1"; tail -20 "$table.nnerr"
  fi
}
nn_checker nn_check 240
nn_checker nn_check_autocast 120

# One benchmark on each side: sets s_ms s_x s_peak t_ms t_x t_peak ("" when
# a side did not run; *_x is the steps, or GFLOP/s for matmul).
nn_pair() {   # nn_pair WHAT TIMEOUT [--tf32]
  local what=$1 lim tf32=${3:-} r
  s_ms=; s_x=; s_peak=; t_ms=; t_x=; t_peak=; s_reads=; t_why=; s_state=$nn_gpu
  lim=$(left "$2"); [ "$lim" -lt 10 ] && { s_state=2; t_why=${spent#not run: }; return; }
  if [ $nn_gpu = 1 ]; then
    SFLOW_ALLOW_TF32=$([ -n "$tf32" ] && echo 1 || echo 0) SFLOW_GPU_STATS=1 \
      timeout "$lim" "$out/nn/nn_bench" --require-gpu --what "$what" > "$table.nb" 2> "$table.nberr"; r=$?
    read -r _ _ _ s_ms s_x < <(grep "^RESULT gpu_$what sflow" "$table.nb")
    if [ -z "$s_ms" ]; then
      failed=1; echo "--- nn_bench --what $what $tf32 (rc $r)"; tail -20 "$table.nberr"
    fi
    local p; p=$(counter dev_peak "$table.nberr"); [ -n "$p" ] && s_peak=$(awk -v b="$p" 'BEGIN { printf "%.1f", b / 1048576 }')
    s_reads=$(counter d2h_syncs "$table.nberr")
  fi
  lim=$(left "$2"); [ "$lim" -lt 10 ] && { t_why=${spent#not run: }; return; }
  timeout "$lim" python3 "$out/nn/torch_peer.py" nn "$what" $tf32 > "$table.nt" 2>&1
  read -r _ _ _ t_ms t_x t_peak < <(grep "^RESULT gpu_$what torch" "$table.nt")
  [ -n "$t_ms" ] || t_why=$(tail -1 "$table.nt" | cut -c1-50)
}
# "X ms", "FAIL" when the side ran and printed nothing, "not run: no GPU",
# or not run for want of time (state 2).
side() {
  if [ -n "$1" ]; then echo "$1 $2"; elif [ "$3" = 1 ]; then echo FAIL
  elif [ "$3" = 2 ]; then echo "$spent"; elif [ "$3" = 3 ]; then echo "- (no dev_peak counter)"
  else echo "not run: no GPU"; fi
}
torch_side() { if [ -n "$1" ]; then echo "$1 $2"; else echo "torch.cuda not run: ${t_why:-?}"; fi; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf " (%.2fx torch)", a / b }'; }
torch_gpu=1
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || torch_gpu=0
if [ $nn_gpu = 0 ] && [ $torch_gpu = 0 ]; then
  for r in "nn MLP train step (784-1024-1024-10, b256)" "nn encoder layer fwd+bwd (B32 T128 C384 H12)" \
           "nn @ f32 4096^3 (@gpus(1) actor)" "nn @ TF32 4096^3 (@gpus(1) actor)" "nn peak device memory, MLP and encoder"; do
    row "$r|not run: no GPU|not run: no GPU|-"
  done
else
  for what in mlp encoder; do
    nn_pair $what 150
    [ $what = mlp ] && { label="nn MLP train step (784-1024-1024-10, b256)"; short="nn MLP step"; } ||
      { label="nn encoder layer fwd+bwd (B32 T128 C384 H12)"; short="nn encoder layer"; }
    row "$label|$(side "$s_ms" ms $s_state)$(ratio "$t_ms" "$s_ms")|$(torch_side "$t_ms" ms)|>= 0.9x torch"
    row "$short: peak device memory|$(side "$s_peak" MB $([ -n "$s_ms" ] && echo 3 || echo $s_state))$(ratio "$s_peak" "$t_peak" | sed 's/x torch/x/')|$(torch_side "$t_peak" MB)$([ -n "$t_peak" ] && echo " (max_memory_allocated)")|<= 1.2x"
    if [ $what = mlp ] && [ -n "$s_reads" ] && [ -n "$s_x" ]; then
      # Every tensor read back counts; the step asks for one, its item().
      per=$(awk -v r="$s_reads" -v n="$s_x" 'BEGIN { printf "%.2f", r / (n + 3) }')
      v=ok; awk -v p="$per" 'BEGIN { exit !(p > 1.0) }' && { v=FAIL; failed=1; }
      row "nn MLP step: device-to-host reads per step|$per ($s_reads in $((s_x + 3)) steps): $v|-|1 (the loss's item())"
    fi
  done
  t_ms=; t_why=${spent#not run: }; lim=$(left 150)
  if [ "$lim" -ge 10 ]; then
    timeout "$lim" python3 "$out/nn/torch_peer.py" nn encoder --attention explicit > "$table.nt" 2>&1
    t_ms=$(grep -o '^RESULT gpu_encoder_explicit torch [0-9.]*' "$table.nt" | cut -d' ' -f4)
    t_why=$(tail -1 "$table.nt" | cut -c1-50)
  fi
  row "torch encoder layer, explicit softmax attention|$(torch_side "$t_ms" ms)|peer (sdpa above)|-"
  for tf in "" --tf32; do
    nn_pair matmul 150 $tf
    pct=; [ -n "$s_x" ] && [ -n "$t_x" ] && pct=$(awk -v a="$s_x" -v b="$t_x" 'BEGIN { printf " (%.0f%% of torch)", 100 * a / b }')
    row "nn @ $([ -n "$tf" ] && echo TF32 || echo f32) 4096^3 (@gpus(1) actor)|$(side "$s_x" GFLOP/s $s_state)$pct|torch.matmul $(torch_side "$t_x" GFLOP/s | sed 's/^torch.cuda //')|>= 95%"
  done
fi

# 6. NCCL (runtime/gpu/nccl.c): two processes as two ranks (exact results, a
#    dead and a stopped peer caught by the watchdog, allreduce bandwidth
#    1 KB-256 MB), the torch.distributed peer, and an sflow group in one
#    process (NCCL on two GPUs, host staging when its members share one).
timeout 400 "$out/nccl_check" --bench > "$table.nccl" 2>&1; rc=$?
if [ $rc = 77 ]; then row "NCCL checks and allreduce bandwidth|not run: $(grep -o 'SKIP.*' "$table.nccl" | head -1)|-|-"
else grep '^TABLE|' "$table.nccl" >> "$table"; [ $rc = 0 ] || { failed=1; echo "--- nccl_check"; cat "$table.nccl"; }; fi
timeout 240 python3 "$here/torch_nccl_peer.py" > "$table.tnccl" 2>&1; rc=$?
if [ $rc = 0 ]; then grep '^TABLE|' "$table.tnccl" >> "$table"
else row "torch.distributed NCCL peer|not run: $(tail -1 "$table.tnccl")|-|-"; fi
if [ $gpu_ok = 1 ]; then
  timeout 180 "$out/progs/group_allreduce" --require-gpu > "$table.group" 2> "$table.gerr"; rc=$?
  via=$(grep -q 'share GPU' "$table.gerr" && echo "1 GPU shared: host staging" || echo "NCCL")
  while read -r _ bytes us gbs; do
    row "sflow group allreduce_sum $bytes B, 2 members ($via)|$gbs GB/s bus ($us us/round)|nccl_check row|-"
  done < <(grep '^group_allreduce' "$table.group")
  [ $rc = 0 ] || { failed=1; row "sflow group allreduce|FAIL (rc $rc)|-|-"; cat "$table.gerr"; }
fi

echo
printf '%-52s | %-40s | %-30s | %s\n' check figure peer goal
printf '%s\n' "$(printf -- '-%.0s' {1..140})"
sed 's/^TABLE|//' "$table" | while IFS='|' read -r a b c d; do
  printf '%-52s | %-40s | %-30s | %s\n' "$a" "$b" "$c" "$d"
done
rm -f "$table" "$table".*
exit $failed
