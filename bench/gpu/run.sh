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
  # examples/digits_gpu.sflow (section 5b) with its data and its checker.
  mkdir -p "$out/examples"
  "$build/bin/sflowc" -O2 "$root/examples/digits_gpu.sflow" -o "$out/examples/digits_gpu" || exit 1
  cp "$root/examples/data/digits.csv" "$here/digits.py" "$out/examples/"
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
# GPU_SECTIONS="5 5b" runs only those sections (ids 1 2 3 4 5 5b 6; all
# when unset), so a short device session can split the run in two calls.
want() { [ -z "${GPU_SECTIONS:-}" ] || [[ " $GPU_SECTIONS " == *" $1 "* ]]; }
for id in ${GPU_SECTIONS:-}; do
  case $id in 1|2|3|4|5|5b|6) ;; *) echo "run.sh: GPU_SECTIONS: no section '$id' (sections: 1 2 3 4 5 5b 6)" >&2; rm -f "$table"; exit 2;; esac
done
print_table() {
  echo
  printf '%-52s | %-40s | %-30s | %s\n' check figure peer goal
  printf '%s\n' "$(printf -- '-%.0s' {1..140})"
  sed 's/^TABLE|//' "$table" | while IFS='|' read -r a b c d; do
    printf '%-52s | %-40s | %-30s | %s\n' "$a" "$b" "$c" "$d"
  done
}
# A run stopped from outside (a time limit) still prints the rows it has.
trap 'print_table; exit 124' TERM INT
gpu_ok=1

# 1. NVRTC for sm_80/sm_90 and for this GPU's own architecture (no GPU needed).
if want 1; then
if "$out/nvrtc_check" sm_80 sm_90 -- "$out"/cu/*.cu > "$table.nvrtc" 2>&1; then
  row "NVRTC compiles every kernel (sm_80, sm_90)|$(tail -1 "$table.nvrtc" | sed 's/nvrtc_check: //')|-|0 failed"
else
  rc=$?; [ $rc = 77 ] && row "NVRTC compiles every kernel|not run: $(cat "$table.nvrtc")|-|-" || { row "NVRTC compiles every kernel|FAIL (see below)|-|0 failed"; cat "$table.nvrtc"; failed=1; }
fi
fi

# 2. Library kernels against their CPU references, bandwidth, NVRTC times, matmul.
if want 2; then
timeout 300 "$out/gpu_check" --bench > "$table.check" 2>&1; rc=$?
if [ $rc = 77 ]; then row "library kernels, bandwidth, matmul|not run: $(tail -1 "$table.check")|-|-"
else grep '^TABLE|' "$table.check" >> "$table"; [ $rc = 0 ] || { failed=1; cat "$table.check"; }; fi
fi

# 3. sflow programs: GPU against the CPU version, identical output; transfer counters.
if want 3; then
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
fi

# 4. MLP forward pass against PyTorch.
if want 4; then
if [ $gpu_ok = 1 ]; then
  mlp=$(timeout 300 "$out/progs/mlp_bench" --require-gpu 2>&1 | grep -o 'mlp_ms [0-9.]*' | cut -d' ' -f2)
  row "sflow MLP forward 4096x1024x4096x1024|${mlp:-FAIL} ms|torch row below|<= torch"
fi
timeout 300 python3 "$here/torch_peer.py" > "$table.torch" 2>&1; rc=$?
if [ $rc = 0 ]; then grep '^TABLE|' "$table.torch" >> "$table"
else row "PyTorch peers|not run: $(tail -1 "$table.torch")|-|-"; fi
fi

# 5. std.nn on the device (bench/gpu/nn.sh): every op against the CPU, the
#    MLP step, the encoder layer and `@` against torch.cuda, within 300 s.
if want 5; then
"$here/nn.sh" "$out" "$table" || failed=1
fi

# 5b. examples/digits_gpu.sflow, the MLP on scikit-learn's digits trained in a
#     @gpus(1) actor, 15 epochs on the GPU and on the CPU: the test accuracy
#     (within 2 of 297 images: cuBLAS and OpenBLAS round differently over
#     360 AdamW steps), the losses (1e-3 relative), one read per epoch, and
#     the mean ms per epoch after the first beside the CPU's.
if want 5b; then
timeout 300 python3 "$out/examples/digits.py" --exe "$out/examples/digits_gpu" \
  --csv "$out/examples/digits.csv" --epochs 15 --loss-tol 1e-3 --right-tol 2 > "$table.digits" 2>&1; rc=$?
if grep -q '^TABLE|' "$table.digits"; then grep '^TABLE|' "$table.digits" >> "$table"
else row "examples/digits on the GPU: accuracy, ms per epoch vs CPU|FAIL (rc $rc)|-|-"; fi
[ $rc = 0 ] || [ $rc = 77 ] || { failed=1; cat "$table.digits"; }
fi

# 6. NCCL (runtime/gpu/nccl.c): two processes as two ranks (exact results, a
#    dead and a stopped peer caught by the watchdog, allreduce bandwidth
#    1 KB-256 MB), the torch.distributed peer, and an sflow group in one
#    process (NCCL on two GPUs, host staging when its members share one).
if want 6; then
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
fi


print_table
rm -f "$table" "$table".*
exit $failed
