#!/usr/bin/env bash
# Builds llama.cpp, the speed peer of bench/llm/llamacpp.py, from sources
# that PyPI carries: the sdist of llama-cpp-python vendors llama.cpp whole
# (vendor/llama.cpp).  Opt-in: `make test` never runs this; `make bench-llm`
# does.  Idempotent: a stamp file names the pin and the flags, and a second
# run with the same ones does nothing.
#
#   bash bench/llm/setup-llamacpp.sh      # -> build/llamacpp/bin/llama-{bench,cli,completion,server}
#
# Pin: llama-cpp-python 0.3.36 (its CHANGELOG: "update llama.cpp to
# ggml-org/llama.cpp@0c1e57098").  The sdist has no .git, so llama.cpp's
# build number is not known from it; the build records the commit by
# -DLLAMA_BUILD_COMMIT and the build number as 0 (the binaries print
# "version: 0 (0c1e57098)").
#
# Flags: Release, CPU only (no CUDA/Vulkan/Metal), GGML_NATIVE=ON (what a
# user who builds it gets: -march=native, so AVX-512 and VNNI where the
# CPU has them), OpenMP threads (GCC's libgomp), static libraries (the
# binaries stand alone in bin/), no libcurl/OpenSSL (models are local
# files), no web UI download.  Override the place with $SFLOW_LLAMACPP and
# the parallelism with $JOBS (default: nproc), the targets with $TARGETS.
#
# Needs only build-essential and cmake (scripts/install-deps.sh has both)
# and pip (python3 -m pip) to fetch the sdist; pip's isolated build env
# fetches scikit-build-core to read the sdist's metadata.
set -euo pipefail
cd "$(dirname "$0")/../.."

ver=0.3.36
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
commit=0c1e57098
dir="${SFLOW_LLAMACPP:-$PWD/build/llamacpp}"
jobs="${JOBS:-$(nproc)}"
# $TARGETS (space-separated) builds fewer, e.g. TARGETS=llama-bench for
# the decode columns alone (the stamp names them, so a later full run builds the rest).
read -r -a targets <<<"${TARGETS:-llama-bench llama-cli llama-completion llama-server}"
flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DGGML_NATIVE=ON
  -DGGML_OPENMP=ON
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF
  -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_BUILD_COMMIT="$commit" -DLLAMA_BUILD_NUMBER=0
)
want="llama-cpp-python==$ver sha256=$sha ${flags[*]} ${targets[*]}"
stamp="$dir/sflow-llamacpp.txt"
built() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] || return 1
  for t in "${targets[@]}"; do [ -x "$dir/bin/$t" ] || return 1; done
}
if built; then exit 0; fi

mkdir -p "$dir/dl" "$dir/bin"
tgz="$dir/dl/llama_cpp_python-$ver.tar.gz"
if ! echo "$sha  $tgz" | sha256sum -c --status 2>/dev/null; then
  echo "setup-llamacpp: downloading llama-cpp-python $ver (sdist, ~77 MB)" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-input \
    --no-deps --no-binary llama-cpp-python "llama-cpp-python==$ver" -d "$dir/dl"
  echo "$sha  $tgz" | sha256sum -c --status ||
    { echo "setup-llamacpp: $tgz: sha256 is not $sha" >&2; exit 1; }
fi
src="$dir/src/llama_cpp_python-$ver/vendor/llama.cpp"
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$dir/src"; mkdir -p "$dir/src"
  tar -xzf "$tgz" -C "$dir/src"
fi
echo "setup-llamacpp: building ${targets[*]} (llama.cpp $commit, -j$jobs; many minutes on 2 cores)" >&2
# GIT_CEILING_DIRECTORIES: the sources sit inside sflow's own work tree,
# whose git HEAD llama.cpp's build-info.cmake would otherwise record.
GIT_CEILING_DIRECTORIES="$dir/src" cmake -S "$src" -B "$dir/build" "${flags[@]}" >"$dir/cmake.log"
cmake --build "$dir/build" -j "$jobs" --target "${targets[@]}" >"$dir/build.log"
for t in "${targets[@]}"; do install -m 0755 "$dir/build/bin/$t" "$dir/bin/$t"; done
printf '%s\n' "$want" >"$stamp"
echo "setup-llamacpp: done: $dir/bin" >&2
