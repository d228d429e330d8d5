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
 *  - The line is drawn with "\r" and cleared with "\r\033[K" only when
 *    stderr is a terminal (--progress=auto), or always (--progress=always),
 *    never otherwise; runtime errors and notices clear it first so they
 *    are never glued to it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

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
  bool started, stop, line, drawn;
  pthread_t thread;
  double last_draw;
} T = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static const char *prog_name(void) {
  return program && program->name && *program->name ? program->name : "sflow";
}

static void clear_line(void) {
  if (T.drawn) {
    (void)sf__write_all(2, "\r\033[K", 4);
    T.drawn = false;
  }
}

static void draw(void) {
  char buf[256];
  sf__counters c;
  sf__counters_sum(&c);
  int64_t n = c.tasks, done = c.tasks_done;
  int n1 = snprintf(buf, sizeof buf, "\r\033[K%s: tasks %lld/%lld done, %lld running, %lld failed, "
                    "%lld retries; actor calls %lld/%lld",
                    prog_name(), (long long)done, (long long)n,
                    (long long)(c.started - c.finished),
                    (long long)atomic_load(&sf__stats.tasks_failed),
                    (long long)atomic_load(&sf__stats.retries),
                    (long long)c.calls_done, (long long)c.calls);
  if (n1 > 0)
    (void)sf__write_all(2, buf, (size_t)n1 < sizeof buf ? (size_t)n1 : sizeof buf - 1);
  T.drawn = true;
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
  clear_line();
  (void)sf__write_all(2, buf, n);
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
    if (T.line && t - T.last_draw >= 0.1) {
      T.last_draw = t;
      draw();
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
  bool line = mode == SF__PROGRESS_ALWAYS || (mode == SF__PROGRESS_AUTO && isatty(2));
  if (line && !sf__options.quiet) {
    pthread_mutex_lock(&T.lock);
    T.line = true;
    helper_start_locked();
    pthread_mutex_unlock(&T.lock);
  }
}

/* Clears the progress line before an error message goes to stderr. */
void sf__progress_clear(void) {
  if (!T.line)
    return;
  pthread_mutex_lock(&T.lock);
  T.line = false;
  clear_line();
  pthread_mutex_unlock(&T.lock);
}

void sf__run_end(void) {
  pthread_mutex_lock(&T.lock);
  T.stop = true;
  T.line = false;
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
    snprintf(extra, sizeof extra, ", %lld answered from the journal, %lld actors restored from "
             "checkpoints", (long long)replayed, (long long)restored);
  int64_t objs = atomic_load(&sf__stats.objects_fetched);
  if (objs) /* remote.c: large results fetched from the workers that made them */
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
             ", %lld objects (%lld bytes) fetched", (long long)objs,
             (long long)atomic_load(&sf__stats.object_bytes));
  int64_t moved = atomic_load(&sf__stats.objects_moved);
  if (moved) /* remote.c: task inputs fetched by one worker from another */
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
             ", %lld objects (%lld bytes) moved worker to worker", (long long)moved,
             (long long)atomic_load(&sf__stats.moved_bytes));
  int n = snprintf(buf, sizeof buf,
                   "%s: %lld tasks (%lld failed, %lld retries), %lld actors, %lld actor calls%s "
                   "in %.3f s\n",
                   prog_name(), (long long)tasks, (long long)atomic_load(&sf__stats.tasks_failed),
                   (long long)atomic_load(&sf__stats.retries),
                   (long long)atomic_load(&sf__stats.actors), (long long)calls, extra,
                   now_s() - started);
  if (n > 0)
    (void)sf__write_all(2, buf, (size_t)n);
}
