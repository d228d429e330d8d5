/*
 * trace.c — `--trace FILE.json`: a Chrome trace / Perfetto JSON file with
 * one complete ("X") event per task attempt and actor call.
 *
 * Key design choices:
 *  - Each thread appends events to its own growing array, registered once
 *    in a global list; recording takes no lock and makes no system call.
 *    The file is opened before the run (an unwritable path is a usage
 *    error, not an hour of work traced for nothing) and written once, at
 *    the end of the run (or when the run ends in a runtime error), so
 *    tracing costs little while the work runs.
 *  - pid is the node (0 on one machine), tid the thread: 0 is main, 1..n
 *    the pool's workers.  A thread runs one attempt at a time, so slices on
 *    a track nest perfectly as Perfetto requires.  "M" events name the
 *    process and every thread.
 *  - args carry the attempt number and, for a failed attempt, the error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

bool sf__trace_on;

typedef struct event {
  const char *name, *cat;
  double ts, dur;
  int32_t attempt;
  char *error;
} event;

typedef struct track {
  struct track *next;
  int32_t tid;
  event *ev;
  size_t n, cap;
} track;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static track *tracks;
static _Thread_local track *mine;
static double t_start;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

__attribute__((constructor)) static void trace_clock(void) { t_start = now_us(); }

double sf__trace_now(void) { return sf__trace_on ? now_us() - t_start : 0; }

void sf__trace_event(const char *name, const char *cat, double t0, int32_t attempt,
                     const char *error) {
  if (!sf__trace_on)
    return;
  double t1 = now_us() - t_start;
  if (!mine) {
    track *t = calloc(1, sizeof *t);
    if (!t)
      return;
    t->tid = sf__worker_id() < 0 ? 100000 : sf__worker_id();
    pthread_mutex_lock(&lock);
    t->next = tracks;
    tracks = t;
    pthread_mutex_unlock(&lock);
    mine = t;
  }
  track *t = mine;
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    event *ev = realloc(t->ev, cap * sizeof *ev);
    if (!ev)
      return; /* tracing never ends a run */
    pthread_mutex_lock(&lock); /* the writer may be reading t->ev */
    t->ev = ev;
    t->cap = cap;
    pthread_mutex_unlock(&lock);
  }
  event *e = &t->ev[t->n];
  *e = (event){name, cat, t0, t1 - t0 > 0 ? t1 - t0 : 0, attempt, error ? strdup(error) : NULL};
  __atomic_store_n(&t->n, t->n + 1, __ATOMIC_RELEASE);
}

static void put_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static FILE *out;      /* the temporary file, opened before the run */
static char tmp[4096]; /* its name: FILE.tmp, renamed to FILE at the end */

bool sf__trace_open(char *err, size_t errlen) {
  const char *path = sf__options.trace;
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  out = fopen(tmp, "w");
  if (!out) {
    snprintf(err, errlen, "cannot write the trace to '%s': %s", path, strerror(errno));
    return false;
  }
  sf__trace_on = true;
  return true;
}

void sf__trace_write(void) {
  if (!sf__trace_on || !out)
    return;
  sf__trace_on = false;
  const char *path = sf__options.trace;
  FILE *f = out;
  out = NULL;
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,"
          "\"args\":{\"name\":\"node %lld\"}}",
          (long long)sf__node_id, (long long)sf__node_id);
  pthread_mutex_lock(&lock);
  for (track *t = tracks; t; t = t->next) {
    char name[32];
    if (t->tid == 0)
      snprintf(name, sizeof name, "main");
    else if (t->tid == 100000)
      snprintf(name, sizeof name, "watchdog");
    else
      snprintf(name, sizeof name, "worker %d", (int)t->tid);
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            (long long)sf__node_id, (int)t->tid, name);
    size_t n = __atomic_load_n(&t->n, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
      event *e = &t->ev[i];
      fputs(",\n{\"name\":", f);
      put_json_str(f, e->name);
      fputs(",\"cat\":", f);
      put_json_str(f, e->cat);
      fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%lld,\"tid\":%d,"
              "\"args\":{\"attempt\":%d",
              e->ts, e->dur, (long long)sf__node_id, (int)t->tid, (int)e->attempt);
      if (e->error) {
        fputs(",\"error\":", f);
        put_json_str(f, e->error);
      }
      fputs("}}", f);
    }
  }
  pthread_mutex_unlock(&lock);
  fputs("\n]}\n", f);
  bool ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0)
    sf__notice("cannot write the trace to %s", path);
}
