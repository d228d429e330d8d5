/*
 * rt_test.h — small helpers shared by the runtime's CUnit tests
 * (tests/unit/test_rt_*.c), on top of unit_test.h: an sf_str check and a
 * way to catch a runtime error instead of exiting.
 *
 * Key design choice: errors are caught through the same hook the task
 * runtime uses (sf__error_jmp), so the tests check exactly the message a
 * user would see.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include "unit_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

typedef unit_test rt_test;
#define rt_run unit_run

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

/* Output capture (unit_test.h). */
typedef unit_capture rt_capture;
#define rt_capture_begin unit_capture_begin
#define rt_capture_end unit_capture_end

#endif
