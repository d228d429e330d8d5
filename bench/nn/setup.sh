#!/usr/bin/env bash
# setup.sh — PyTorch (CPU use only) and safetensors in one virtual
# environment, the peer of std.nn's fixtures and benchmarks:
#
#   bash bench/nn/setup.sh [PEERS_DIR]      # default build/peers/torch
#   bash bench/nn/setup.sh --mkl [MKL_DIR]  # default build/peers/mkl
#
#   venv/    torch, safetensors, numpy (pinned); `venv/bin/python` runs
#            scripts/gen_nn_fixtures.py and bench/nn/peer.py
#
# --mkl instead puts Intel's oneMKL from PyPI (the `mkl` wheel and the
# OpenMP and TBB runtimes it loads, pinned, about 1 GB unpacked) in a
# virtual environment of its own, MKL_DIR/venv, and prints the path of its
# libmkl_rt.so.3: `bench/nn/run.py --mkl` runs sflow a second time with
# SFLOW_BLAS set to it, beside torch (whose products are MKL's), so the
# two sides can be compared with the same BLAS.  sflow never depends on it.
#
# Needs the network (PyPI) once; idempotent after that, without touching it.
# `make test` never runs this: the fixtures it feeds are committed
# (tests/nn/fixtures/), so the tests need no PyTorch.
#
# Why not a plain `pip install torch`: PyPI's Linux wheel of torch is the
# CUDA build, and its dependencies pull about 3 GB of NVIDIA wheels that a
# CPU peer never calls.  So torch goes in with --no-deps, beside its
# pure-Python dependencies, and only the NVIDIA libraries that loading
# libtorch_cuda.so still asks for on this machine kind, whose image has CUDA
# 13.0 in /usr/local/cuda-13.0 (cuBLAS, cuDNN, cuFFT ... are found there):
# cuFile, cuSPARSELt and NVSHMEM (absent from that image) and NCCL (the
# image's is too old: `undefined symbol: ncclCommResume`).  About 300 MB.
# If `import torch` still fails (another machine, no CUDA image), the script
# falls back to torch's full dependency set and says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${1:-}" = --mkl ]; then
  dir=${2:-$root/build/peers/mkl}
  want_mkl="mkl==2026.2.0 intel-openmp==2026.2.0 tbb==2023.2.0"
  lib=$dir/venv/lib/libmkl_rt.so.3
  if [ "$(cat "$dir/ready" 2>/dev/null)" != "$want_mkl" ] || [ ! -e "$lib" ]; then
    echo "nn-setup: $want_mkl into $dir/venv" >&2
    mkdir -p "$dir"
    rm -f "$dir/ready"
    [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
    # --no-deps: the three are the whole set; the wheels' libraries land in venv/lib.
    "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
      --no-deps $want_mkl
    [ -e "$lib" ] || { echo "nn-setup: $lib missing after the install" >&2; exit 1; }
    printf '%s\n' "$want_mkl" >"$dir/ready"
  fi
  echo "$lib"
  exit 0
fi
peers=${1:-$root/build/peers/torch}
torch_pin=torch==2.15.0
pure=(filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
      networkx==3.6.1 jinja2==3.1.6 MarkupSafe==3.0.4 fsspec==2026.9.0
      numpy==2.4.6 safetensors==0.8.0)
nvidia=(nvidia-cufile==1.17.1.22 nvidia-cusparselt-cu13==0.8.1
        nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.7.2)
want="$torch_pin ${pure[*]} ${nvidia[*]}"
py=$peers/venv/bin/python
# The smoke test: a product on the CPU, and the CPU really used.
smoke='import torch; x = torch.ones(2, 2) @ torch.ones(2, 2); assert x.sum().item() == 8.0; import safetensors, numpy; print("torch", torch.__version__, "threads", torch.get_num_threads())'
if [ "$(cat "$peers/ready" 2>/dev/null)" = "$want" ] && "$py" -c "$smoke" >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$peers"
rm -f "$peers/ready"
pip_in() { "$py" -m pip install --quiet --disable-pip-version-check --no-input "$@"; }

echo "nn-setup: $torch_pin (no dependencies) and its pure-Python ones into $peers/venv" >&2
[ -x "$py" ] || python3 -m venv "$peers/venv"
pip_in --no-deps "$torch_pin" "${pure[@]}"
echo "nn-setup: the NVIDIA libraries libtorch_cuda.so links: ${nvidia[*]}" >&2
pip_in --no-deps "${nvidia[@]}"
if ! err=$("$py" -c "$smoke" 2>&1 >/dev/null); then
  echo "nn-setup: import torch failed with the light install (${err##*$'\n'});" \
       "installing torch's full dependency set (about 3 GB)" >&2
  pip_in "$torch_pin"
  "$py" -c "$smoke" >/dev/null
fi
"$py" -c "$smoke" >&2
printf '%s\n' "$want" >"$peers/ready"
echo "nn-setup: ready in $peers ($(du -sh "$peers/venv" | cut -f1))" >&2
