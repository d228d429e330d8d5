/*
 * front_test.h — helpers shared by the front end's CUnit tests
 * (tests/unit/test_lexer.c, test_diag.c): a runner that takes test names
 * on the command line, a string check that prints both values on failure,
 * capture of stderr into a string, and a diagnostic sink that records
 * messages so a test can assert on exactly what a user would be told.
 */
#ifndef FRONT_TEST_H
#define FRONT_TEST_H

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sflowc.h"

typedef struct {
  const char *name;
  void (*fn)(void);
} ft_test;

/* Runs every test, or only those named in argv; non-zero on any failure. */
static inline int ft_run(const char *suite_name, const ft_test *tests, int argc, char **argv) {
  if (CU_initialize_registry() != CUE_SUCCESS)
    return 2;
  CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
  for (const ft_test *t = tests; t->name; t++) {
    bool wanted = argc < 2;
    for (int i = 1; i < argc; i++)
      wanted |= strcmp(argv[i], t->name) == 0;
    if (wanted)
      CU_add_test(suite, t->name, t->fn);
  }
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures();
  unsigned ran = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  if (ran == 0)
    fprintf(stderr, "no test matched\n");
  return failed || ran == 0 ? 1 : 0;
}

/* String equality that prints both values when it fails. */
#define CHECK_STR(got, want) ft_check_str((got), (want), #got, __FILE__, __LINE__)
static inline void ft_check_str(const char *got, const char *want, const char *expr,
                                const char *file, int line) {
  bool ok = got && want && strcmp(got, want) == 0;
  if (!ok)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  \"%s\"\n    want: \"%s\"\n", file, line, expr,
            got ? got : "(null)", want);
  CU_assertImplementation(ok, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Integer equality that prints both values when it fails. */
#define CHECK_INT(got, want) ft_check_int((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
static inline void ft_check_int(long long got, long long want, const char *expr, const char *file,
                                int line) {
  if (got != want)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  %lld\n    want: %lld\n", file, line, expr, got, want);
  CU_assertImplementation(got == want, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Everything written to stderr between capture_begin and capture_end
 * (heap string; the caller frees it). */
static int ft_saved_fd = -1;
static FILE *ft_tmp;
static inline void capture_begin(void) {
  fflush(stderr);
  ft_tmp = tmpfile();
  ft_saved_fd = dup(2);
  dup2(fileno(ft_tmp), 2);
}
static inline char *capture_end(void) {
  fflush(stderr);
  dup2(ft_saved_fd, 2);
  close(ft_saved_fd);
  long n = ftell(ft_tmp);
  char *s = calloc(1, (size_t)n + 1);
  rewind(ft_tmp);
  if (fread(s, 1, (size_t)n, ft_tmp) != (size_t)n)
    s[0] = 0;
  fclose(ft_tmp);
  return s;
}

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
