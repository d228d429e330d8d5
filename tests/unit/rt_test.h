/*
 * rt_test.h — small helpers shared by the runtime's CUnit tests
 * (tests/unit/test_rt_*.c): a runner that takes test names on the command
 * line, string checks that print both values on failure, a way to catch a
 * runtime error instead of exiting, and capture of what a call writes to a
 * file descriptor.
 *
 * Key design choice: errors are caught through the same hook the task
 * runtime uses (sf__error_jmp), so the tests check exactly the message a
 * user would see.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

typedef struct rt_test {
  const char *name;
  void (*fn)(void);
} rt_test;

/* Runs every test, or only those named in argv; non-zero on any failure. */
static inline int rt_run(const char *suite_name, const rt_test *tests, int argc, char **argv) {
  if (CU_initialize_registry() != CUE_SUCCESS)
    return 2;
  CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
  for (const rt_test *t = tests; t->name; t++) {
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
#define CHECK_STR(got, want) rt_check_str((got), (want), #got, __FILE__, __LINE__)
static inline void rt_check_str(const char *got, const char *want, const char *expr,
                                const char *file, int line) {
  bool ok = got && want && strcmp(got, want) == 0;
  if (!ok)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  \"%s\"\n    want: \"%s\"\n", file, line, expr,
            got ? got : "(null)", want);
  CU_assertImplementation(ok, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Integer equality that prints both values when it fails. */
#define CHECK_INT(got, want) \
  rt_check_int((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
static inline void rt_check_int(long long got, long long want, const char *expr, const char *file,
                                int line) {
  if (got != want)
    fprintf(stderr, "\n  %s:%d: %s\n    got:  %lld\n    want: %lld\n", file, line, expr, got, want);
  CU_assertImplementation(got == want, (unsigned)line, expr, file, "", CU_FALSE);
}

/* Checks an owned sf_str against text and releases it. */
#define CHECK_SF_STR(s, want)      \
  do {                             \
    sf_str *s_ = (s);              \
    CHECK_STR(sf__str_data(s_), (want)); \
    sf_release(s_);                \
  } while (0)

/* Runs stmt expecting a runtime error with exactly the message want. */
#define EXPECT_ERROR(stmt, want)                                  \
  do {                                                            \
    jmp_buf jb_;                                                  \
    sf__error_jmp = &jb_;                                         \
    if (setjmp(jb_) == 0) {                                       \
      stmt;                                                       \
      sf__error_jmp = NULL;                                       \
      fprintf(stderr, "\n  %s:%d: no runtime error from: %s\n",   \
              __FILE__, __LINE__, #stmt);                         \
      CU_FAIL("expected a runtime error");                        \
    } else {                                                      \
      sf__error_jmp = NULL;                                       \
      CHECK_STR(sf__error_message, (want));                       \
    }                                                             \
  } while (0)

/* Output capture: fd is redirected to a temporary file until
 * rt_capture_end, which returns what was written (caller frees). */
typedef struct rt_capture {
  int fd, saved, tmp;
} rt_capture;

static inline rt_capture rt_capture_begin(int fd) {
  char path[] = "/tmp/sflow_rt_test_XXXXXX";
  rt_capture c = {fd, dup(fd), mkstemp(path)};
  unlink(path);
  fflush(NULL);
  dup2(c.tmp, fd);
  return c;
}

static inline char *rt_capture_end(rt_capture c) {
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
