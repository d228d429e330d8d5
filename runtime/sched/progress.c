/*
 * progress.c — what a run shows while and after it runs: the counters, the
 * progress line, the end-of-run summary, runtime notices, and the @timeout
 * watchdog (which shares the progress thread's clock).
 *
 * Key design choices:
 *  - The counters are relaxed atomics bumped by the scheduler; nothing on
 *    the hot path takes a lock or makes a system call for them.
 *  - One helper thread, started only when needed (a progress line is shown
 *    or some attempt has a deadline), wakes every 10 ms: it fires expired
 *    deadlines and redraws the progress line at most 10 times a second.
 *  - On a terminal (stderr, where the line goes, is a tty; --progress=auto
 *    or always) the line is drawn with "\r\033[K" and cut to the
 *    terminal's width, so "\r" always returns to its start.  Every other
 *    write to the terminal during the run (print lines, a worker's
 *    forwarded output, errors, notices, cluster messages) goes through
 *    sf__out_write, which under the one lock clears the line, writes, and
 *    draws the line again after it, so output never lands on the line.
 *    Writes to stdout pay for that only when stdout is a terminal too;
 *    otherwise, and without a line, sf__out_write is a plain write(2).
 *  - Off a terminal (a file or a pipe), --progress=always writes plain,
 *    whole lines instead, one every SFLOW_PROGRESS_INTERVAL seconds
 *    (default 1): no control characters in a log file.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched.h"

sf__stats_t sf__stats;

_Thread_local sf__counters *sf__my_counters;
static sf__counters *_Atomic all_counters;

sf__counters *sf__counters_register(void) {
  sf__counters *c = calloc(1, sizeof *c);
  if (!c)
    sf_runtime_error(NULL, "out of memory");
  c->next = atomic_load(&all_counters);
  while (!atomic_compare_exchange_weak(&all_counters, &c->next, c))
    ;
  sf__my_counters = c;
  return c;
}

void sf__counters_sum(sf__counters *t) {
  int64_t v[6] = {0};
  for (sf__counters *c = atomic_load(&all_counters); c; c = c->next) {
    v[0] += atomic_load_explicit(&c->tasks, memory_order_relaxed);
    v[1] += atomic_load_explicit(&c->tasks_done, memory_order_relaxed);
    v[2] += atomic_load_explicit(&c->started, memory_order_relaxed);
    v[3] += atomic_load_explicit(&c->finished, memory_order_relaxed);
    v[4] += atomic_load_explicit(&c->calls, memory_order_relaxed);
    v[5] += atomic_load_explicit(&c->calls_done, memory_order_relaxed);
  }
  atomic_init(&t->tasks, v[0]);
  atomic_init(&t->tasks_done, v[1]);
  atomic_init(&t->started, v[2]);
  atomic_init(&t->finished, v[3]);
  atomic_init(&t->calls, v[4]);
  atomic_init(&t->calls_done, v[5]);
}
static const sf_program *program;
static double started;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sf__stats_wait_begin(void) { atomic_fetch_add_explicit(&sf__stats.waiting, 1, memory_order_relaxed); }
void sf__stats_wait_end(void) { atomic_fetch_sub_explicit(&sf__stats.waiting, 1, memory_order_relaxed); }

/* ------------------------------------------------------ progress line */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool started, stop;
  bool line;  /* the terminal line is shown (stderr is a tty) */
  bool plain; /* --progress=always off a terminal: periodic plain lines */
  bool drawn; /* the line is on the screen now */
  bool held;  /* output ended mid-line: no redraw until its newline */
  pthread_t thread;
  double last_draw, interval;
  char status[SF__STATUS_SLOTS][200]; /* sf__progress_status's texts ("" unset) */
} T = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* Read without the lock on every write: set once, before the run's work. */
static _Atomic bool line_on, stdout_tty;

static const char *prog_name(void) {
  return program && program->name && *program->name ? program->name : "sflow";
}

const char *sf__plural(int64_t n, const char *one, const char *many) {
  return n == 1 ? one : many;
}

static void clear_line(void) {
  if (T.drawn) {
    (void)sf__write_all(2, "\r\033[K", 4);
    T.drawn = false;
  }
}

/* The counters in words: "tasks 3/10 done, 2 running, 0 failed, 1 retry;
 * actor calls 5/5".  Under T.lock. */
static int counters_text(char *buf, size_t n) {
  sf__counters c;
  sf__counters_sum(&c);
  int64_t retries = atomic_load(&sf__stats.retries);
  return snprintf(buf, n, "%s %lld/%lld done, %lld running, %lld failed, %lld %s; %s %lld/%lld",
                  sf__plural(c.tasks, "task", "tasks"), (long long)c.tasks_done,
                  (long long)c.tasks, (long long)(c.started - c.finished),
                  (long long)atomic_load(&sf__stats.tasks_failed), (long long)retries,
                  sf__plural(retries, "retry", "retries"),
                  sf__plural(c.calls, "actor call", "actor calls"), (long long)c.calls_done,
                  (long long)c.calls);
}

/* What the line says: a std module's status when one is set (a sweep's
 * over its trials' training), followed by the task counters only where
 * tasks fail or retry (what a sweep's or a training run's own figures do
 * not show); else the counters.  Under T.lock. */
static int status_text(char *buf, size_t n) {
  const char *st = T.status[SF__STATUS_SWEEP][0] ? T.status[SF__STATUS_SWEEP]
                   : T.status[SF__STATUS_TRAIN];
  if (!*st)
    return counters_text(buf, n);
  int64_t failed = atomic_load(&sf__stats.tasks_failed), retries = atomic_load(&sf__stats.retries);
  if (!failed && !retries)
    return snprintf(buf, n, "%s", st);
  return snprintf(buf, n, "%s; %lld %s failed, %lld %s", st, (long long)failed,
                  sf__plural(failed, "task", "tasks"), (long long)retries,
                  sf__plural(retries, "retry", "retries"));
}

void sf__progress_status(int slot, const char *text) {
  if (slot < 0 || slot >= SF__STATUS_SLOTS)
    return;
  pthread_mutex_lock(&T.lock);
  snprintf(T.status[slot], sizeof T.status[slot], "%s", text ? text : "");
  pthread_mutex_unlock(&T.lock);
}

void sf__fmt_duration(char *buf, size_t n, double seconds) {
  long long s = seconds > 0 && seconds < 1e9 ? (long long)(seconds + 0.5) : 0;
  if (s < 60)
    snprintf(buf, n, "%lld s", s);
  else if (s < 3600)
    snprintf(buf, n, "%lld:%02lld", s / 60, s % 60);
  else
    snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

bool sf__progress_wanted(void) {
  pthread_mutex_lock(&T.lock);
  bool on = T.line || T.plain;
  pthread_mutex_unlock(&T.lock);
  return on;
}

/* Cut to one row of the terminal: a wrapped line could not be cleared. */
static void draw(void) {
  char buf[320];
  int k = snprintf(buf, sizeof buf, "\r\033[K%s: ", prog_name());
  int m = status_text(buf + k, sizeof buf - (size_t)k);
  size_t len = (size_t)k + (m > 0 ? (size_t)m : 0);
  if (len >= sizeof buf)
    len = sizeof buf - 1;
  struct winsize ws;
  if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && len - 4 > (size_t)ws.ws_col - 1)
    len = 4 + (size_t)ws.ws_col - 1;
  (void)sf__write_all(2, buf, len);
  T.drawn = true;
}

static void plain_line(double t) {
  char buf[320];
  int k = snprintf(buf, sizeof buf, "%s: progress: ", prog_name());
  int m = status_text(buf + k, sizeof buf - (size_t)k - 24);
  size_t len = (size_t)k + (m > 0 ? (size_t)m : 0);
  if (len > sizeof buf - 24)
    len = sizeof buf - 24;
  len += (size_t)snprintf(buf + len, 24, ", %.1f s\n", t - started);
  (void)sf__write_all(2, buf, len);
}

/* Under T.lock: buf to fd with the line out of its way. */
static bool emit_locked(int fd, const char *buf, size_t n) {
  clear_line();
  bool ok = sf__write_all(fd, buf, n);
  if (n)
    T.held = buf[n - 1] != '\n';
  if (T.line && !T.held)
    draw();
  return ok;
}

bool sf__out_write(int fd, const char *buf, size_t n) {
  if (!atomic_load_explicit(&line_on, memory_order_relaxed) ||
      (fd == 1 && !atomic_load_explicit(&stdout_tty, memory_order_relaxed)))
    return sf__write_all(fd, buf, n);
  pthread_mutex_lock(&T.lock);
  bool ok = emit_locked(fd, buf, n);
  pthread_mutex_unlock(&T.lock);
  return ok;
}

void sf__notice(const char *fmt, ...) {
  if (sf__options.quiet)
    return;
  char buf[512];
  int k = snprintf(buf, sizeof buf, "%s: notice: ", prog_name());
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + k, sizeof buf - (size_t)k - 1, fmt, ap);
  va_end(ap);
  size_t n = strlen(buf);
  buf[n++] = '\n';
  pthread_mutex_lock(&T.lock);
  (void)emit_locked(2, buf, n);
  pthread_mutex_unlock(&T.lock);
}

/* ------------------------------------------------------------ timeouts */

typedef struct watch {
  struct watch *prev, *next;
  void *task;
  int32_t attempt;
  double deadline;
} watch;

static watch watches = {&watches, &watches, NULL, 0, 0};

static void *helper_main(void *arg);

static void helper_start_locked(void) {
  if (T.started)
    return;
  T.started = true;
  pthread_create(&T.thread, NULL, helper_main, NULL);
}

void *sf__watch_begin(void *task, int32_t attempt, double seconds) {
  watch *w = sf_alloc(sizeof *w);
  w->task = task;
  w->attempt = attempt;
  w->deadline = now_s() + seconds;
  pthread_mutex_lock(&T.lock);
  w->next = &watches;
  w->prev = watches.prev;
  watches.prev->next = w;
  watches.prev = w;
  helper_start_locked();
  pthread_mutex_unlock(&T.lock);
  return w;
}

bool sf__watch_end(void *handle) {
  watch *w = handle;
  pthread_mutex_lock(&T.lock);
  bool fired = !w->next;
  if (!fired) {
    w->prev->next = w->next;
    w->next->prev = w->prev;
  }
  pthread_mutex_unlock(&T.lock);
  sf_free(w);
  return fired;
}

static void *helper_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&T.lock);
  while (!T.stop) {
    sf__cond_wait_ns(&T.cond, &T.lock, 10 * 1000000L);
    if (T.stop)
      break;
    double t = now_s();
    /* Fire expired deadlines: unlink first so watch_end leaves them be;
     * the attempt's thread frees the watch when it gets back. */
    for (watch *w = watches.next; w != &watches;) {
      watch *next = w->next;
      if (t >= w->deadline) {
        w->prev->next = w->next;
        w->next->prev = w->prev;
        w->next = w->prev = NULL;
        void *task = w->task;
        int32_t attempt = w->attempt;
        pthread_mutex_unlock(&T.lock);
        sf__task_timed_out(task, attempt);
        pthread_mutex_lock(&T.lock);
        next = watches.next; /* the list may have changed meanwhile */
      }
      w = next;
    }
    if (T.line && !T.held && t - T.last_draw >= 0.1) {
      T.last_draw = t;
      draw();
    } else if (T.plain && t - T.last_draw >= T.interval) {
      T.last_draw = t;
      plain_line(t);
    }
  }
  pthread_mutex_unlock(&T.lock);
  return NULL;
}

/* ---------------------------------------------------------------- run */

void sf__run_begin(const sf_program *prog) {
  program = prog;
  started = now_s();
  int mode = sf__options.progress;
  bool tty = isatty(2);
  if (sf__options.quiet || mode == SF__PROGRESS_NEVER || (mode == SF__PROGRESS_AUTO && !tty))
    return;
  const char *iv = getenv("SFLOW_PROGRESS_INTERVAL");
  double interval = iv && *iv ? strtod(iv, NULL) : 1.0;
  pthread_mutex_lock(&T.lock);
  T.line = tty;
  T.plain = !tty;
  T.interval = interval >= 0.01 ? interval : 1.0;
  T.last_draw = started; /* the first plain line after one interval */
  atomic_store(&stdout_tty, isatty(1));
  atomic_store(&line_on, tty);
  helper_start_locked();
  pthread_mutex_unlock(&T.lock);
}

/* Clears the progress line for good before an error message that ends
 * the run goes to stderr. */
void sf__progress_clear(void) {
  pthread_mutex_lock(&T.lock);
  T.line = T.plain = false;
  atomic_store(&line_on, false);
  clear_line();
  pthread_mutex_unlock(&T.lock);
}

void sf__run_end(void) {
  pthread_mutex_lock(&T.lock);
  T.stop = true;
  T.line = T.plain = false;
  atomic_store(&line_on, false);
  clear_line();
  pthread_cond_broadcast(&T.cond);
  bool joined = T.started;
  pthread_mutex_unlock(&T.lock);
  if (joined)
    pthread_join(T.thread, NULL);
  sf__counters c;
  sf__counters_sum(&c);
  int64_t tasks = c.tasks, calls = c.calls;
  if (sf__options.quiet || (tasks == 0 && calls == 0 && atomic_load(&sf__stats.actors) == 0))
    return;
  char buf[512], extra[288] = "";
  int64_t replayed = atomic_load(&sf__stats.replayed);
  int64_t restored = atomic_load(&sf__stats.restored);
  if (replayed || restored)
    snprintf(extra, sizeof extra, ", %lld answered from the journal, %lld %s restored from "
             "checkpoints", (long long)replayed, (long long)restored,
             sf__plural(restored, "actor", "actors"));
  int64_t objs = atomic_load(&sf__stats.objects_fetched);
  int64_t bytes = atomic_load(&sf__stats.object_bytes);
  if (objs) /* objects.c: large results fetched from the workers that made them */
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
             ", %lld %s (%lld %s) fetched", (long long)objs, sf__plural(objs, "object", "objects"),
             (long long)bytes, sf__plural(bytes, "byte", "bytes"));
  int64_t moved = atomic_load(&sf__stats.objects_moved);
  bytes = atomic_load(&sf__stats.moved_bytes);
  if (moved) /* objects.c: task inputs fetched by one worker from another */
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
             ", %lld %s (%lld %s) moved worker to worker", (long long)moved,
             sf__plural(moved, "object", "objects"), (long long)bytes,
             sf__plural(bytes, "byte", "bytes"));
  int64_t retries = atomic_load(&sf__stats.retries), actors = atomic_load(&sf__stats.actors);
  int n = snprintf(buf, sizeof buf, "%s: %lld %s (%lld failed, %lld %s), %lld %s, %lld %s%s in %.3f s\n",
                   prog_name(), (long long)tasks, sf__plural(tasks, "task", "tasks"),
                   (long long)atomic_load(&sf__stats.tasks_failed), (long long)retries,
                   sf__plural(retries, "retry", "retries"), (long long)actors,
                   sf__plural(actors, "actor", "actors"), (long long)calls,
                   sf__plural(calls, "actor call", "actor calls"), extra, now_s() - started);
  if (n > 0)
    (void)sf__write_all(2, buf, (size_t)n);
}

void sf__sched_install(void) {
  sf__out_writer = sf__out_write;
  sf__before_stderr = sf__progress_clear;
  sf__par_hook = sf__parallel_for;
  sf__par_threads_hook = sf__pool_size;
}
