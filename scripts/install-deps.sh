#!/usr/bin/env bash
# Installs every system package that building and testing sflow needs.
# Idempotent and fast when everything is already there: it asks dpkg first
# and only runs apt-get for what is missing.  Non-interactive.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config flex bison  # g++ too: the GPU emulator's NVRTC (tests/gpu/emu)
  llvm-dev clang libclang-rt-dev     # back end; clang for libFuzzer and sanitizers
  libcunit1-dev                      # unit tests
  python3 python3-venv               # test harness
  vim-nox                            # editor tests: real headless Vim
  neovim                             # lsp/nvim: a real LSP client (Neovim 0.7 headless, vim.lsp)
  nodejs                             # editors/vscode: runs the VS Code extension's code
  libssh2-1-dev openssh-server openssh-client  # multi-node runs and their tests
  libopenblas-dev libcjson-dev zlib1g-dev valgrind gdb
  iproute2 procps                    # ip netns, ip link, ss: namespace cluster tests
  openmpi-bin                        # tests/launch: mpirun starts a run's ranks
  mpich                              # tests/launch: MPICH's mpiexec.hydra (PMI variables) starts them
  fortunes-min                       # a real text data set for examples/fortunes.sflow
  fortunes                           # labelled text (one category per file) for examples/finetune.sflow
  munge slurmctld slurmd slurm-client  # tests/slurm: a private Slurm 22.05 (munged, slurmctld, slurmd) on this host
  libmicrohttpd-dev                  # std.serve's HTTP server (header; libmicrohttpd12 dlopen'ed)
  wrk                                # bench/serve's load generator
  prometheus                         # tests/obs: a real Prometheus scrapes --metrics-port
  chromium                           # tests/obs: headless Chromium drives --dashboard
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
here=$(cd "$(dirname "$0")" && pwd)
if [ ${#missing[@]} -eq 0 ]; then
  exec bash "$here/install-pydeps.sh"
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
bash "$here/install-pydeps.sh"
