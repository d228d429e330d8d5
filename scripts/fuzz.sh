#!/usr/bin/env bash
# fuzz.sh — build and run the libFuzzer targets: the sflow front end, the
# control plane's frame decoder (runtime/cluster/proto/wire.c), std.data's CSV,
# JSON and .npy parsers (runtime/data/, tests/fuzz/fuzz_data.c) and
# std.tokenizer's normalizer, pre-tokenizer and WordPiece matcher
# (runtime/data/wordpiece.c, tests/fuzz/fuzz_tokenizer.c).
#
#   scripts/fuzz.sh [SECONDS]   fuzz for SECONDS (default 300) from the seed
#                               corpus; findings land in build/fuzz/artifacts
#                               (FUZZ_TARGET=wire fuzzes the frame decoder,
#                               FUZZ_TARGET=csv|json|npy|gguf std.data's parsers,
#                               FUZZ_TARGET=tokenizer the tokenizer)
#   scripts/fuzz.sh --build     only build the targets
#   scripts/fuzz.sh --check     run every seed and regression of the targets
#                               once (ctest)
#   scripts/fuzz.sh --available exit 0 when clang's fuzzer runtime exists
#
# The binary is the front end (compiler/*.c without the driver and the
# LLVM back end) plus the generated parser, scanner and embedded stdlib,
# built with clang -fsanitize=fuzzer,address,undefined.  It links no LLVM
# library: tests/fuzz/fuzz_stubs.c stands in for the back end.  Objects are
# rebuilt only when a source is newer, so repeated runs start at once.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=$BUILD/fuzz
BIN=$OUT/fuzz_frontend
CC_FUZZ=${CC_FUZZ:-clang}
MODE=${1:-300}

available() {
  command -v "$CC_FUZZ" >/dev/null || return 1
  local t; t=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const char*d,unsigned long n){return 0;}\n' >"$t/t.c"
  "$CC_FUZZ" -fsanitize=fuzzer,address,undefined "$t/t.c" -o "$t/t" >/dev/null 2>&1
  local rc=$?; rm -rf "$t"; return $rc
}

gen_sources() {
  # The parser, scanner and stdlib table are build artefacts of CMake.
  local need=0
  for f in parser.c parser.h scanner.c stdlib_embed.c; do
    [[ -f $BUILD/gen/$f ]] || need=1
  done
  [[ $BUILD/gen/parser.c -nt $ROOT/grammar/sflow.y ]] || need=1
  [[ $BUILD/gen/scanner.c -nt $ROOT/grammar/sflow.l ]] || need=1
  if ((need)); then
    [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >/dev/null
    cmake --build "$BUILD" --target sflowfront -j "$(nproc)" >/dev/null
  fi
}

build() {
  gen_sources
  mkdir -p "$OUT/obj"
  local srcs=() f
  for f in "$ROOT"/compiler/*.c; do
    case $(basename "$f") in
      main.c | codegen*.c | link.c | cudagen.c | lsp*.c | fmt.c | stubs*.c) continue ;;
    esac
    grep -q '#include <llvm-c/' "$f" && continue  # back-end code needs LLVM
    srcs+=("$f")
  done
  srcs+=("$BUILD/gen/parser.c" "$BUILD/gen/scanner.c" "$BUILD/gen/stdlib_embed.c"
         "$ROOT/tests/fuzz/fuzz_stubs.c" "$ROOT/tests/fuzz/fuzz_frontend.c")
  local cflags="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
    -fno-sanitize-recover=undefined -I$BUILD/gen -I$ROOT/compiler -I$ROOT/runtime
    $(llvm-config --cflags 2>/dev/null | tr ' ' '\n' | grep -E '^-(I|D)' | tr '\n' ' ')
    -w"
  local todo=() objs=() o
  for f in "${srcs[@]}"; do
    o=$OUT/obj/$(basename "${f%.c}").o
    objs+=("$o")
    if [[ ! -f $o || $f -nt $o || $ROOT/compiler/sflowc.h -nt $o || $ROOT/compiler/sema_internal.h -nt $o ||
          $BUILD/gen/parser.h -nt $o ]]; then
      todo+=("$f")
    fi
  done
  if ((${#todo[@]})); then
    echo "fuzz.sh: compiling ${#todo[@]} file(s)" >&2
    printf '%s\n' "${todo[@]}" | xargs -P "$(nproc)" -I{} sh -c '
      f={}; n=$(basename "$f" .c)
      case $n in fuzz_frontend) san=fuzzer ;; *) san=fuzzer-no-link ;; esac
      exec '"$CC_FUZZ"' '"$(echo $cflags)"' -fsanitize=$san -c "$f" -o '"$OUT"'/obj/$n.o'
  fi
  local newest=0
  for o in "${objs[@]}"; do [[ $o -nt $BIN ]] && newest=1; done
  if [[ ! -x $BIN ]] || ((newest)); then
    "$CC_FUZZ" -fsanitize=fuzzer,address,undefined "${objs[@]}" -lm -o "$BIN"
  fi
}

# The frame decoder: runtime/cluster/proto/ (wire.c, conn.c) with net/crypto.c, net/net.c and
# core/sha256.c (the handshake's HMAC), nothing else of the runtime.
WIRE_BIN=$OUT/fuzz_wire
build_wire() {
  mkdir -p "$OUT"
  local srcs=("$ROOT/runtime/cluster/proto/wire.c" "$ROOT/runtime/cluster/proto/conn.c"
              "$ROOT/runtime/cluster/net/crypto.c"
              "$ROOT/runtime/cluster/net/net.c" "$ROOT/runtime/core/sha256.c"
              "$ROOT/tests/fuzz/fuzz_wire.c")
  local f need=0
  for f in "${srcs[@]}" "$ROOT"/runtime/*/*.h "$ROOT"/runtime/cluster/*/*.h; do [[ $f -nt $WIRE_BIN ]] && need=1; done
  if [[ ! -x $WIRE_BIN ]] || ((need)); then
    "$CC_FUZZ" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
      -fno-sanitize-recover=undefined -I"$ROOT/runtime" -iquote "$ROOT/runtime/core" -iquote "$ROOT/runtime/sched" -iquote "$ROOT/runtime/durable" \
      -iquote "$ROOT/runtime/gpu" -iquote "$ROOT/runtime/cluster" -w "${srcs[@]}" -ldl -o "$WIRE_BIN"
  fi
}

# std.data's parsers: runtime/data/*.c over the core layer (what they stand
# on), one binary per format from tests/fuzz/fuzz_data.c.  JSON needs
# libcjson.so.1 at run time (dlopen), as programs do.
DATA_FORMATS=(csv json npy gguf)
build_data() {
  mkdir -p "$OUT"
  local srcs=("$ROOT"/runtime/core/*.c "$ROOT"/runtime/data/*.c "$ROOT/tests/fuzz/fuzz_data.c")
  local fmt f need
  for fmt in "${DATA_FORMATS[@]}"; do
    need=0
    for f in "${srcs[@]}" "$ROOT"/runtime/core/*.h "$ROOT"/runtime/data/*.h "$ROOT/runtime/sflow.h"; do
      [[ $f -nt $OUT/fuzz_$fmt ]] && need=1
    done
    if [[ ! -x $OUT/fuzz_$fmt ]] || ((need)); then
      echo "fuzz.sh: building fuzz_$fmt" >&2
      "$CC_FUZZ" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
        -fno-sanitize-recover=undefined -DFUZZ_${fmt^^} -I"$ROOT/runtime" -iquote "$ROOT/runtime/core" \
        -iquote "$ROOT/runtime/data" -w "${srcs[@]}" -lm -ldl -lpthread -o "$OUT/fuzz_$fmt"
    fi
  done
}

# The tokenizer: runtime/data/ over the core layer (strings, arrays,
# errors), driven by tests/fuzz/fuzz_tokenizer.c.
TOK_BIN=$OUT/fuzz_tokenizer
build_tokenizer() {
  mkdir -p "$OUT"
  local srcs=("$ROOT"/runtime/core/*.c "$ROOT"/runtime/data/*.c "$ROOT/tests/fuzz/fuzz_tokenizer.c")
  local f need=0
  for f in "${srcs[@]}" "$ROOT"/runtime/core/*.h "$ROOT"/runtime/data/*.h "$ROOT"/runtime/sflow.h; do
    [[ $f -nt $TOK_BIN ]] && need=1
  done
  if [[ ! -x $TOK_BIN ]] || ((need)); then
    echo "fuzz.sh: building fuzz_tokenizer" >&2
    "$CC_FUZZ" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
      -fno-sanitize-recover=undefined -I"$ROOT/runtime" -iquote "$ROOT/runtime/core" \
      -iquote "$ROOT/runtime/data" -w "${srcs[@]}" -lm -ldl -lpthread -o "$TOK_BIN"
  fi
}

# Seeds: every .sflow in the tree, the regressions, and the bench program.
seed_dirs() {
  mkdir -p "$OUT/seeds"
  find "$ROOT/tests" "$ROOT/examples" "$ROOT/stdlib" -name '*.sflow' -print0 2>/dev/null |
    while IFS= read -r -d '' f; do
      cp -f "$f" "$OUT/seeds/$(echo "$f" | md5sum | cut -c1-16).sflow"
    done
  echo "$OUT/seeds" "$ROOT/tests/fuzz/regressions"
}

case $MODE in
  --available) available; exit $? ;;
  --build) build; build_wire; build_data; build_tokenizer; exit 0 ;;
  --check)
    available || { echo "fuzz.sh: clang's libFuzzer runtime is missing; skipping" >&2; exit 77; }
    build
    build_wire
    build_tokenizer
    # -runs=0 executes each input of the given directories once, then stops.
    "$WIRE_BIN" -runs=0 -rss_limit_mb=2560 -timeout=25 "$ROOT/tests/fuzz/wire_seeds"
    build_data
    for fmt in "${DATA_FORMATS[@]}"; do
      "$OUT/fuzz_$fmt" -runs=0 -rss_limit_mb=2560 -timeout=25 "$ROOT/tests/fuzz/data_seeds/$fmt"
    done
    "$TOK_BIN" -runs=0 -rss_limit_mb=2560 -timeout=25 "$ROOT/tests/fuzz/tokenizer_seeds"
    exec "$BIN" -runs=0 -rss_limit_mb=2560 -timeout=25 $(seed_dirs)
    ;;
esac

if [[ ${FUZZ_TARGET:-frontend} == wire ]]; then
  available || { echo "fuzz.sh: clang with -fsanitize=fuzzer is required" >&2; exit 1; }
  build_wire
  mkdir -p "$OUT/wire_corpus" "$OUT/artifacts"
  echo "fuzz.sh: fuzzing the frame decoder for ${MODE}s; findings in $OUT/artifacts" >&2
  exec "$WIRE_BIN" "$OUT/wire_corpus" "$ROOT/tests/fuzz/wire_seeds" -max_total_time="$MODE" \
    -rss_limit_mb=2560 -timeout=25 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/wire-"
fi

if [[ ${FUZZ_TARGET:-frontend} == tokenizer ]]; then
  available || { echo "fuzz.sh: clang with -fsanitize=fuzzer is required" >&2; exit 1; }
  build_tokenizer
  mkdir -p "$OUT/tokenizer_corpus" "$OUT/artifacts"
  echo "fuzz.sh: fuzzing the tokenizer for ${MODE}s; findings in $OUT/artifacts" >&2
  exec "$TOK_BIN" "$OUT/tokenizer_corpus" "$ROOT/tests/fuzz/tokenizer_seeds" -max_total_time="$MODE" \
    -rss_limit_mb=2560 -timeout=25 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/tokenizer-"
fi

case ${FUZZ_TARGET:-frontend} in
  csv | json | npy | gguf)
    available || { echo "fuzz.sh: clang with -fsanitize=fuzzer is required" >&2; exit 1; }
    build_data
    mkdir -p "$OUT/${FUZZ_TARGET}_corpus" "$OUT/artifacts"
    echo "fuzz.sh: fuzzing the $FUZZ_TARGET parser for ${MODE}s; findings in $OUT/artifacts" >&2
    exec "$OUT/fuzz_$FUZZ_TARGET" "$OUT/${FUZZ_TARGET}_corpus" "$ROOT/tests/fuzz/data_seeds/$FUZZ_TARGET" \
      -max_total_time="$MODE" -rss_limit_mb=2560 -timeout=25 -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="$OUT/artifacts/$FUZZ_TARGET-"
    ;;
esac

SECONDS_TO_RUN=$MODE
available || { echo "fuzz.sh: clang with -fsanitize=fuzzer is required" >&2; exit 1; }
build
mkdir -p "$OUT/corpus" "$OUT/artifacts"
seeds=$(seed_dirs)
echo "fuzz.sh: fuzzing for ${SECONDS_TO_RUN}s; corpus $OUT/corpus, findings in $OUT/artifacts" >&2
exec "$BIN" "$OUT/corpus" $seeds -dict="$ROOT/tests/fuzz/sflow.dict" \
  -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=2560 -timeout=25 -max_len=65536 \
  ${FUZZ_JOBS:+-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS} -print_final_stats=1 \
  -artifact_prefix="$OUT/artifacts/"
