#!/usr/bin/env bash
# bench/gpu/nn.sh — section 5 of bench/gpu/run.sh: std.nn on the device
# (docs/performance.md, "std.nn on the GPU beside PyTorch").
#
#   bench/gpu/nn.sh OUT TABLE    OUT prepared by `run.sh prepare` (its nn/
#                                folder); appends "TABLE|check|figure|peer|goal"
#                                rows to the file TABLE; exits 1 when
#                                something that ran failed, else 0
#
# The op checkers (nn_check, nn_check_autocast): every op forward and
# backward on the CPU and in a @gpus(1) actor, one row per op (their own
# TABLE| lines); their kernels must have run on the device (gpu_launches >
# 0), else the ops ran on the CPU.  Then the MLP step, the encoder layer and
# `@` (f32, TF32) beside torch.cuda (torch_peer.py nn), each side one
# process per benchmark, with the allocators' peaks and the MLP step's
# device-to-host reads.  Without a GPU every row says "not run: no GPU".
#
# The whole part has NN_BUDGET_S seconds (300): each process's timeout is
# the smaller of its own and what is left, and a part with under 10 s left
# is not started (its row says so).  For a rehearsal under the host
# emulator (tests/gpu/nn_check.py runs one): NN_DEVICE labels the checkers'
# rows (GPU), NN_CHECK_N is their size (128), NN_STEPS / NN_WARMUP the
# benchmarks' steps (nn_bench's defaults / 3), NN_BATCH the encoder's batch
# (32) and NN_MATMUL_N the product's size (4096).  NN_PARTS picks parts
# ("check steps matmul", all when unset: the op checkers, the MLP step and
# encoder layer, `@`), so that run.sh can put `@` after the NCCL checks.
set -uo pipefail
out=$1 table=$2
failed=0
row() { echo "TABLE|$*" >> "$table"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dev=${NN_DEVICE:-GPU}
steps=() ; [ -n "${NN_STEPS:-}" ] && steps=(--steps "$NN_STEPS")
warmup=${NN_WARMUP:-3}
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
  SFLOW_GPU_STATS=1 timeout "$lim" "$exe" --require-gpu --n "${NN_CHECK_N:-128}" --device "$dev" \
    > "$tmp/nn" 2> "$tmp/nnerr"; local rc=$?
  if grep -q -- '--require-gpu' "$tmp/nnerr"; then
    row "nn $1 (every op, $dev vs CPU)|not run: no GPU|-|-"; nn_gpu=0; return
  fi
  grep '^TABLE|' "$tmp/nn" >> "$table"
  local launches; launches=$(counter gpu_launches "$tmp/nnerr")
  if [ "${launches:-0}" = 0 ]; then
    row "nn $1: kernels on the device|FAIL: gpu_launches=${launches:-?} (the ops ran on the CPU)|-|> 0"; failed=1
  fi
  if [ $rc != 0 ]; then
    failed=1; row "nn $1|FAIL (rc $rc$([ $rc = 124 ] && echo ", timed out after $lim s"))|-|-"
    echo "--- $1"; tail -20 "$tmp/nnerr"
  fi
}
part() { [ -z "${NN_PARTS:-}" ] || [[ " $NN_PARTS " == *" $1 "* ]]; }
if part check; then
  nn_checker nn_check 240
  nn_checker nn_check_autocast 120
fi

# One benchmark on each side: sets s_ms s_x s_peak s_reads t_ms t_x t_peak
# ("" when a side did not run; *_x is the steps, or GFLOP/s for matmul) and
# s_state (0 no GPU, 1 ran, 2 no time left).
nn_pair() {   # nn_pair WHAT TIMEOUT [--tf32]
  local what=$1 lim tf32=${3:-} r size=()
  s_ms=; s_x=; s_peak=; t_ms=; t_x=; t_peak=; s_reads=; t_why=; s_state=$nn_gpu
  [ "$what" = matmul ] && size=(--n "${NN_MATMUL_N:-4096}")
  [ "$what" = encoder ] && [ -n "${NN_BATCH:-}" ] && size=(--batch "$NN_BATCH")
  lim=$(left "$2"); [ "$lim" -lt 10 ] && { s_state=2; t_why=${spent#not run: }; return; }
  if [ $nn_gpu = 1 ]; then
    SFLOW_ALLOW_TF32=$([ -n "$tf32" ] && echo 1 || echo 0) SFLOW_GPU_STATS=1 \
      timeout "$lim" "$out/nn/nn_bench" --require-gpu --what "$what" ${steps[@]+"${steps[@]}"} --warmup "$warmup" \
      ${size[@]+"${size[@]}"} > "$tmp/nb" 2> "$tmp/nberr"; r=$?
    read -r _ _ _ s_ms s_x < <(grep "^RESULT gpu_$what sflow" "$tmp/nb")
    if grep -qE -- '--require-gpu (was given|is set)' "$tmp/nberr"; then
      nn_gpu=0; s_state=0 # no GPU (the checkers, which find it out first, did not run)
    elif [ -z "$s_ms" ]; then
      failed=1; echo "--- nn_bench --what $what $tf32 (rc $r)"; tail -20 "$tmp/nberr"
    fi
    local p; p=$(counter dev_peak "$tmp/nberr")
    [ -n "$p" ] && s_peak=$(awk -v b="$p" 'BEGIN { printf "%.1f", b / 1048576 }')
    s_reads=$(counter d2h_syncs "$tmp/nberr")
  fi
  lim=$(left "$2"); [ "$lim" -lt 10 ] && { t_why=${spent#not run: }; return; }
  timeout "$lim" python3 "$out/nn/torch_peer.py" nn "$what" $tf32 ${steps[@]+"${steps[@]}"} --warmup "$warmup" \
    ${size[@]+"${size[@]}"} > "$tmp/nt" 2>&1
  read -r _ _ _ t_ms t_x t_peak < <(grep "^RESULT gpu_$what torch" "$tmp/nt")
  [ -n "$t_ms" ] || t_why=$(tail -1 "$tmp/nt" | cut -c1-50)
}
# "X ms"; "FAIL" when the side ran and printed nothing; not run for want of
# time (2) or of a GPU (0); 3: ran, but no dev_peak counter.
side() {
  if [ -n "$1" ]; then echo "$1 $2"; elif [ "$3" = 1 ]; then echo FAIL
  elif [ "$3" = 2 ]; then echo "$spent"; elif [ "$3" = 3 ]; then echo "- (no dev_peak counter)"
  else echo "not run: no GPU"; fi
}
torch_side() { if [ -n "$1" ]; then echo "$1 $2"; else echo "torch.cuda not run: ${t_why:-?}"; fi; }
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf " (%.2fx torch)", a / b }'; }

torch_gpu=1
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || torch_gpu=0
mlp="nn MLP train step (784-1024-1024-10, b256)"
enc="nn encoder layer fwd+bwd (B${NN_BATCH:-32} T128 C384 H12)"
mm="${NN_MATMUL_N:-4096}^3 (@gpus(1) actor)"
if [ $nn_gpu = 0 ] && [ $torch_gpu = 0 ]; then
  part steps && for r in "$mlp" "$enc" "nn peak device memory, MLP and encoder"; do
    row "$r|not run: no GPU|not run: no GPU|-"
  done
  part matmul && for r in "nn @ f32 $mm" "nn @ TF32 $mm"; do
    row "$r|not run: no GPU|not run: no GPU|-"
  done
  exit $failed
fi
part steps && for what in mlp encoder; do
  nn_pair $what 150
  [ $what = mlp ] && { label=$mlp; short="nn MLP step"; } || { label=$enc; short="nn encoder layer"; }
  row "$label|$(side "$s_ms" ms $s_state)$(ratio "$t_ms" "$s_ms")|$(torch_side "$t_ms" ms)|>= 0.9x torch"
  row "$short: peak device memory|$(side "$s_peak" MB $([ -n "$s_ms" ] && echo 3 || echo $s_state))$(ratio "$s_peak" "$t_peak" | sed 's/x torch/x/')|$(torch_side "$t_peak" MB)$([ -n "$t_peak" ] && echo " (max_memory_allocated)")|<= 1.2x"
  if [ $what = mlp ] && [ -n "$s_reads" ] && [ -n "$s_x" ]; then
    # Every tensor read back counts; the step asks for one, its item().
    per=$(awk -v r="$s_reads" -v n="$((s_x + warmup))" 'BEGIN { printf "%.2f", r / n }')
    v=ok; awk -v p="$per" 'BEGIN { exit !(p > 1.0) }' && { v=FAIL; failed=1; }
    row "nn MLP step: device-to-host reads per step|$per ($s_reads in $((s_x + warmup)) steps): $v|-|1 (the loss's item())"
  fi
done
t_ms=; t_why=${spent#not run: }; lim=$(left 150)
if part steps && [ "$lim" -ge 10 ]; then
  timeout "$lim" python3 "$out/nn/torch_peer.py" nn encoder --attention explicit ${steps[@]+"${steps[@]}"} \
    --warmup "$warmup" ${NN_BATCH:+--batch "$NN_BATCH"} > "$tmp/nt" 2>&1
  t_ms=$(grep -o '^RESULT gpu_encoder_explicit torch [0-9.]*' "$tmp/nt" | cut -d' ' -f4)
  t_why=$(tail -1 "$tmp/nt" | cut -c1-50)
fi
part steps && row "torch encoder layer, explicit softmax attention|$(torch_side "$t_ms" ms)|peer (sdpa above)|-"
# PyTorch's device operations per step (torch_opcount.py, torch.profiler):
# the figures tests/gpu/torch_opcounts.json should hold (gpu_emu/opcount
# bounds sflow's emulator count by 1.5x them).
lim=$(left 90)
if part steps && [ "$lim" -ge 10 ]; then
  timeout "$lim" python3 "$out/nn/torch_opcount.py" > "$tmp/oc" 2>&1
  if grep -q '^TABLE|' "$tmp/oc"; then
    grep '^TABLE|' "$tmp/oc" >> "$table"
  else
    row "torch device ops per step (profiler)|not run: $(tail -1 "$tmp/oc" | cut -c1-50)|-|-"
  fi
fi
part matmul && for tf in "" --tf32; do
  nn_pair matmul 150 $tf
  pct=; [ -n "$s_x" ] && [ -n "$t_x" ] && pct=$(awk -v a="$s_x" -v b="$t_x" 'BEGIN { printf " (%.0f%% of torch)", 100 * a / b }')
  row "nn @ $([ -n "$tf" ] && echo TF32 || echo f32) $mm|$(side "$s_x" GFLOP/s $s_state)$pct|torch.matmul $(torch_side "$t_x" GFLOP/s | sed 's/^torch.cuda //')|>= 95%"
done
exit $failed
