/*
 * unit_test.h — what every CUnit test of sflow shares: a runner that
 * takes test names on the command line, equality checks that print both
 * values on failure, and capture of what a call writes to a file
 * descriptor.  front_test.h (compiler) and rt_test.h (runtime) add their
 * own helpers on top.
 */
#ifndef UNIT_TEST_H
#define UNIT_TEST_H

#include <CUnit/Basic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct unit_test {
  const char *name;
  void (*fn)(void);
} unit_test;

/* Runs every test, or only those named in argv; non-zero on any failure. */
static inline int unit_run(const char *suite_name, const unit_test *tests, int argc,
                           char **argv) {
  if (CU_initialize_registry() != CUE_SUCCESS)
    return 2;
  CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
  for (const unit_test *t = tests; t->name; t++) {
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
#define CHECK_STR(got, want) unit_check_str((got), (want), #got, __FILE__, __LINE__)
static inline void unit_check_str(const char *got, const char *want, const char *expr,
                                  const char *file, int line) {
  bool ok = got && want && strcmp(got, want) == 0;
  if (!ok)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  \"%s\"\n    want: \"%s\"\n", file, line, expr,
            got ? got : "(null)", want);
  CU_assertImplementation(ok, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Integer equality that prints both values when it fails. */
#define CHECK_INT(got, want) \
  unit_check_int((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
static inline void unit_check_int(long long got, long long want, const char *expr,
                                  const char *file, int line) {
  if (got != want)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  %lld\n    want: %lld\n", file, line, expr, got, want);
  CU_assertImplementation(got == want, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Output capture: fd is redirected to a temporary file until
 * unit_capture_end, which returns what was written (caller frees). */
typedef struct unit_capture {
  int fd, saved, tmp;
} unit_capture;

static inline unit_capture unit_capture_begin(int fd) {
  char path[] = "/tmp/sflow_unit_test_XXXXXX";
  unit_capture c = {fd, dup(fd), mkstemp(path)};
  unlink(path);
  fflush(NULL);
  dup2(c.tmp, fd);
  return c;
}

static inline char *unit_capture_end(unit_capture c) {
  fflush(NULL);
  dup2(c.saved, c.fd);
  close(c.saved);
  off_t n = lseek(c.tmp, 0, SEEK_END);
  char *buf = calloc(1, (size_t)n + 1);
  if (n > 0 && pread(c.tmp, buf, (size_t)n, 0) != n)
    buf[0] = '\0';
  close(c.tmp);
  return buf;
}

#endif
