/*
 * test_rt_errors.c — runtime errors: the message format, exit code 70 with
 * stdout flushed first, catching an error on a task's thread through
 * sf__error_jmp / sf__error_handler, fail(msg) and attempt().
 */
#include <pthread.h>
#include <sys/wait.h>

#include "rt_test.h"

const sf_program sf_program_desc = {SF_ABI_VERSION, "test_rt_errors", "", 0, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, ""};

static const sf_loc LOC = {"w.sflow", 12, 5};

static void test_messages(void) {
  EXPECT_ERROR(sf_div_zero(&LOC), "w.sflow:12:5: runtime error: integer division by zero");
  EXPECT_ERROR(sf_runtime_error(NULL, "boom %d", 3), "runtime error: boom 3");
  sf_str *m = sf_str_new("loss is nan", 11);
  EXPECT_ERROR(sf_fail(m, &LOC), "w.sflow:12:5: runtime error: fail: loss is nan");
  EXPECT_ERROR(sf_fail(NULL, &LOC), "w.sflow:12:5: runtime error: fail: ");
  sf_release(m);
}

static void test_long_message_is_cut(void) {
  char big[3000];
  memset(big, 'y', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  jmp_buf jb;
  sf__error_jmp = &jb;
  if (setjmp(jb) == 0)
    sf_runtime_error(&LOC, "%s", big);
  sf__error_jmp = NULL;
  CHECK_INT(strlen(sf__error_message), SF__ERROR_MAX - 1);
}

static char seen[SF__ERROR_MAX + 64];
static void remember(const char *msg) { snprintf(seen, sizeof seen, "%s", msg); }

static void test_handler_sees_message(void) {
  sf__error_handler = remember;
  EXPECT_ERROR(sf_div_zero(&LOC), "w.sflow:12:5: runtime error: integer division by zero");
  sf__error_handler = NULL;
  CHECK_STR(seen, "w.sflow:12:5: runtime error: integer division by zero");
}

/* A task body on its own thread: the error ends the task, not the test. */
static void *task(void *arg) {
  jmp_buf jb;
  sf__error_jmp = &jb;
  sf__attempt = 2;
  if (setjmp(jb) == 0)
    sf_index_fail((int64_t)(intptr_t)arg, 1, &LOC);
  sf__error_jmp = NULL;
  snprintf(seen, sizeof seen, "%s attempt=%lld", sf__error_message, (long long)sf_attempt());
  return NULL;
}

static void test_error_inside_task_thread(void) {
  pthread_t th;
  pthread_create(&th, NULL, task, (void *)7);
  pthread_join(th, NULL);
  CHECK_STR(seen, "w.sflow:12:5: runtime error: index 7 out of bounds for length 1 attempt=2");
  CHECK_INT(sf_attempt(), 0); /* attempt() is per thread */
}

static void test_exit_code_and_order(void) {
  rt_capture co = rt_capture_begin(1), ce = rt_capture_begin(2);
  pid_t pid = fork();
  if (pid == 0) {
    printf("buffered by stdio\n"); /* must come out before the error */
    sf_print_begin();
    sf_print_i64(1);
    sf_print_end();
    sf_div_zero(&LOC);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char *err = rt_capture_end(ce), *out = rt_capture_end(co);
  CU_ASSERT(WIFEXITED(status));
  CHECK_INT(WEXITSTATUS(status), 70);
  CHECK_STR(out, "buffered by stdio\n1\n");
  CHECK_STR(err, "w.sflow:12:5: runtime error: integer division by zero\n");
  free(err);
  free(out);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"messages", test_messages},
      {"long_message_is_cut", test_long_message_is_cut},
      {"handler_sees_message", test_handler_sees_message},
      {"error_inside_task_thread", test_error_inside_task_thread},
      {"exit_code_and_order", test_exit_code_and_order},
      {NULL, NULL},
  };
  return rt_run("rt_errors", tests, argc, argv);
}
