/*
 * front_test.h — helpers shared by the front end's CUnit tests
 * (tests/unit/test_lexer.c, test_diag.c), on top of unit_test.h: capture
 * of stderr into a string, and a diagnostic sink that records
 * messages so a test can assert on exactly what a user would be told.
 */
#ifndef FRONT_TEST_H
#define FRONT_TEST_H

#include "unit_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sflowc.h"

typedef unit_test ft_test;
#define ft_run unit_run

/* Everything written to stderr between capture_begin and capture_end
 * (heap string; the caller frees it). */
static unit_capture ft_capture;
static inline void capture_begin(void) { ft_capture = unit_capture_begin(2); }
static inline char *capture_end(void) { return unit_capture_end(ft_capture); }

/* A sink that records diagnostics, one "LEVEL line:col: msg" per line. */
static Buf ft_diags;
static int ft_ndiags;
static inline void ft_sink(void *ctx, DiagLevel lvl, Loc loc, const char *msg) {
  (void)ctx;
  buf_printf(&ft_diags, "%s %d:%d: %s\n",
             lvl == DIAG_ERROR ? "error" : lvl == DIAG_WARNING ? "warning" : "note", loc.line,
             loc.col, msg);
  ft_ndiags++;
}
/* Forgets all front-end state and starts recording diagnostics afresh. */
static inline void ft_reset(void) {
  src_reset();
  arena_free_all();
  types_reset();
  diag_reset();
  diag_init(DIAG_HUMAN, 0);
  buf_free(&ft_diags);
  buf_putn(&ft_diags, "", 0);
  ft_ndiags = 0;
  diag_set_sink(ft_sink, NULL);
}

#endif
