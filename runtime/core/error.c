/*
 * error.c — runtime errors: integer division by zero, bad index, failed
 * cast, fail(msg), out of memory, unreadable file.
 *
 * An error is one line, "file:line:col: runtime error: message", formatted
 * into a fixed thread-local buffer (never the heap: the error may be "out of
 * memory").  Key design choice: the same entry point serves the program and
 * its tasks.  Outside a task the line goes to stderr and the process exits
 * with code 70; a task runner sets sf__error_jmp on its thread, and the
 * error instead ends only the task attempt by longjmp, leaving the message
 * in sf__error_message for retries and for the error `await` reports.
 * Before the longjmp the generated frames it skips are unwound: their
 * locals are released here, since the releases codegen emits at scope exit
 * never run (10,000 failed attempts cost what one does).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"

_Thread_local sf__error_fn sf__error_handler;
_Thread_local jmp_buf *sf__error_jmp;
_Thread_local char sf__error_message[SF__ERROR_MAX];
_Thread_local int64_t sf__attempt;
_Thread_local sf_frame *sf_frames;
_Thread_local sf_frame *sf__error_frames;

void sf__frames_unwind(sf_frame *mark) {
  /* Each frame leaves the stack before its locals are released, so a
   * destructor that fails cannot release them twice.  The frames are still
   * intact: this runs on the failing call's stack, below all of them. */
  for (sf_frame *f = sf_frames; f && f != mark; f = sf_frames) {
    sf_frames = f->up;
    for (int64_t i = 0; i < f->desc->n; i++)
      sf_value_release(f->desc->types[i], f->slots[i]);
  }
  sf_frames = mark;
}

/* Set by the first thread that ends the process, so two threads failing at
 * once print one error and call exit() once. */
static int exiting;

static void format_message(const sf_loc *loc, const char *fmt, va_list ap) {
  char *m = sf__error_message;
  size_t n = sizeof sf__error_message, o = 0;
  int k = 0;
  if (loc && loc->file)
    k = snprintf(m, n, "%s:%d:%d: runtime error: ", loc->file, (int)loc->line, (int)loc->col);
  else
    k = snprintf(m, n, "runtime error: ");
  o = k > 0 && (size_t)k < n ? (size_t)k : 0;
  vsnprintf(m + o, n - o, fmt, ap);
}

/* Writes the message and a newline to stderr with one write(2). */
void (*sf__before_stderr)(void);

static void report(void) {
  if (sf__before_stderr) /* progress.c: the progress line is cleared first */
    sf__before_stderr();
  size_t n = strlen(sf__error_message);
  if (n == SF__ERROR_MAX - 1)
    n--;
  sf__error_message[n] = '\n';
  (void)sf__write_all(2, sf__error_message, n + 1);
  sf__error_message[n] = '\0';
}

_Noreturn static void raise_error(void) {
  static _Thread_local bool in_exit;
  if (sf__error_handler)
    sf__error_handler(sf__error_message);
  if (sf__error_jmp) {
    sf__frames_unwind(sf__error_frames);
    longjmp(*sf__error_jmp, 1);
  }
  if (in_exit) { /* an error while exiting (an atexit hook): stop now */
    report();
    _exit(SF__EXIT_RUNTIME);
  }
  if (__atomic_exchange_n(&exiting, 1, __ATOMIC_SEQ_CST))
    for (;;) /* another thread is already reporting and exiting */
      pause();
  in_exit = true;
  fflush(stdout);
  report();
  exit(SF__EXIT_RUNTIME);
}

_Noreturn void sf_runtime_error(const sf_loc *loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  format_message(loc, fmt, ap);
  va_end(ap);
  raise_error();
}

_Noreturn void sf__raise_message(const char *message) {
  snprintf(sf__error_message, sizeof sf__error_message, "%s", message);
  raise_error();
}

_Noreturn void sf_div_zero(const sf_loc *loc) {
  sf_runtime_error(loc, "integer division by zero");
}

_Noreturn void sf_fail(sf_str *msg, const sf_loc *loc) {
  /* The message is the user's own text: printed whole up to the buffer
   * size, with no quoting. */
  int64_t n = sf__str_len(msg);
  sf_runtime_error(loc, "fail: %.*s", (int)(n < SF__ERROR_MAX ? n : SF__ERROR_MAX),
                   sf__str_data(msg));
}

int64_t sf_attempt(void) { return sf__attempt; }
