/*
 * fuzz_frontend.c — libFuzzer target for the whole sflow front end.
 *
 * Each input is one source file: it is lexed, parsed and type-checked
 * exactly as `sflowc --check` would, with diagnostics swallowed by a sink
 * so the fuzzer spends its time in the compiler, not in stderr.  After
 * every input all global front-end state is reset (arena and source
 * table, interned types, diagnostic counters), so runs are independent
 * and LeakSanitizer sees every allocation returned.
 *
 * Build and run: scripts/fuzz.sh (or `make fuzz`).
 */
#include "sflowc.h"

#include <stdint.h>
#include <stdlib.h>

static void swallow(void *ctx, DiagLevel lvl, Loc loc, const char *msg) {
  (void)ctx;
  (void)lvl;
  (void)msg;
  /* Touch the location's source so a bad Loc.file is caught here. */
  Source *s = src_get(loc.file);
  if (s && loc.off >= 0 && (size_t)loc.off < s->len) {
    volatile char c = s->text[loc.off];
    (void)c;
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  diag_init(DIAG_HUMAN, 0);
  diag_set_sink(swallow, NULL);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A directory that does not exist, so `import name` never reads a real
   * file next to the fuzzer and every run is deterministic. */
  int file = src_add("/nonexistent/fuzz.sflow", (const char *)data, size, "");
  Program prog = {0};
  prog.main = parse_source(file);
  if (diag_error_count() == 0)
    sema_program(&prog);
  src_reset(); /* the source texts live in the arena */
  arena_free_all();
  types_reset();
  diag_reset();
  return 0;
}
