#!/usr/bin/env bash
# Installs what bench/cluster needs beyond scripts/install-deps.sh: OpenMPI,
# the peer it measures against.  Not needed by `make test`.
set -euo pipefail
need=()
for p in openmpi-bin libopenmpi-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
((${#need[@]})) || exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
