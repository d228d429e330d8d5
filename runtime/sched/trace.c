/*
 * trace.c — `--trace FILE.json`: a Chrome trace / Perfetto JSON file with
 * one complete ("X") event per task attempt and actor call, on every node
 * of the run.
 *
 * Key design choices:
 *  - Each thread appends events to its own growing array, registered once
 *    in a global list; recording takes no lock and makes no system call.
 *    The file is opened before the run (an unwritable path, a directory
 *    or a missing folder is a usage error, not an hour of work traced for
 *    nothing) and written once, at the end of the run (or when the run
 *    ends in a runtime error), so tracing costs little while the work runs.
 *  - A regular file is written beside the path and renamed over it; a
 *    FIFO, a character device or a link is never replaced (see "the trace
 *    file" below: the rules of every file sflow writes, core's outfile.c,
 *    which follow the shell's `>`).
 *  - pid is the node (0 the head, 1..n the workers in hostfile order, each
 *    named by a process_name event with its host), tid the thread: 0 is
 *    main, 1..n the pool's workers.  A thread runs one attempt at a time,
 *    so slices on a track nest perfectly as Perfetto requires.  "M" events
 *    name the process and every thread.
 *  - A worker does not keep its events: each goes to the cluster layer's
 *    hook (sf__trace_cluster.worker_event), which batches them for the
 *    head (cluster/worker/trace_worker.c); the head's side of those frames adds
 *    them here with sf__trace_remote_event.  This file calls nothing
 *    above the scheduler (docs/architecture.md, "Hooks").
 *  - Worker timestamps are on the worker's clock; the head converts them
 *    to its own with the offset control.c estimates from heartbeats
 *    (NTP-style, the sample with the smallest round trip), at write time,
 *    so every event of a node uses the same, best, offset.
 *  - On the head, each task sent to a worker is an async span ("b"/"e",
 *    cat "dispatch") from the moment the head queued the submit frame to
 *    the moment its result arrived; the worker's slice for the attempt
 *    lies inside it.
 *  - Every string is written as valid JSON whatever its bytes: valid UTF-8
 *    passes through unchanged, control characters become \u00XX, and each
 *    maximal ill-formed subsequence becomes one U+FFFD (the rule of
 *    Unicode's "best practice for U+FFFD substitution", which is what
 *    Python's bytes.decode("utf-8", "replace") and browsers do), so a
 *    fail() message built from binary file contents reads as the same text
 *    a UTF-8 decoder with replacement would show.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sched.h"

bool sf__trace_on;

typedef struct event {
  const char *name, *cat;
  char *error;
  double ts, dur;   /* µs on this process's trace clock */
  int32_t attempt;
} event;

typedef struct track {
  struct track *next;
  int32_t tid;
  event *ev;
  size_t n, cap;
} track;

/* An event of another node (times on that node's clock, in ns) or a
 * dispatch span of the head (node > 0 too: where the task went). */
typedef struct remote_event {
  char *name, *cat, *error; /* owned */
  uint64_t ts_ns, dur_ns;   /* worker events: the worker's clock */
  double ts, dur;           /* dispatch spans: this process's trace clock */
  uint64_t id;              /* dispatch spans: the task id */
  int32_t node, tid, attempt;
  bool dispatch;
} remote_event;

/* A counter track's sample ("C" event): Perfetto draws each name as a
 * graph.  The sampler thread (runtime/obs) and std.train add them, a few
 * a second, so one locked array is enough. */
typedef struct counter {
  const char *name; /* a literal */
  double ts, v;
} counter;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static counter *ctr; /* under lock */
static size_t ctr_n, ctr_cap;
static track *tracks;
static _Thread_local track *mine;
static double t_start;
static remote_event *rev; /* under lock */
static size_t rev_n, rev_cap;
static bool written; /* under lock: no more remote events once set */

/* ------------------------------------------------------------- clock */

/* A worker's clock may be shifted by SFLOW_TEST_CLOCK_SKEW_MS (tests: the
 * alignment must undo it, as it undoes the offset between two hosts). */
static int64_t skew_ns;

uint64_t sf__trace_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + (uint64_t)skew_ns;
}

static double now_us(void) { return (double)sf__trace_clock_ns() * 1e-3; }

__attribute__((constructor)) static void trace_clock(void) { t_start = now_us(); }

double sf__trace_now(void) { return sf__trace_on ? now_us() - t_start : 0; }

/* ------------------------------------------------------------ hooks */

/* The cluster layer's part (sf__cluster_install; docs/architecture.md,
 * "Hooks"): on a worker each event goes to its batch for the head
 * (cluster/trace_ship.c); on the head, the nodes' names and clock
 * offsets.  NULL members: one node, nothing shipped. */
sf__trace_cluster_hooks sf__trace_cluster;
static bool worker; /* this process is a worker of a traced run */

void sf__trace_worker_begin(void) {
  const char *s = getenv("SFLOW_TEST_CLOCK_SKEW_MS");
  if (s && *s)
    skew_ns = strtoll(s, NULL, 10) * 1000000;
  t_start = now_us();
  worker = true;
  sf__trace_on = true;
}

static int nodes_of_run(void) { return sf__trace_cluster.nodes ? sf__trace_cluster.nodes() : 1; }

/* --------------------------------------------------------- recording */

static int32_t my_tid(void) { return sf__worker_id() < 0 ? 100000 : sf__worker_id(); }

void sf__trace_event(const char *name, const char *cat, double t0, int32_t attempt,
                     const char *error) {
  if (!sf__trace_on)
    return;
  double t1 = now_us() - t_start;
  if (t1 < t0)
    t1 = t0;
  if (worker) {
    if (sf__trace_cluster.worker_event)
      sf__trace_cluster.worker_event(name, cat, (uint64_t)((t0 + t_start) * 1e3),
                                     (uint64_t)((t1 - t0) * 1e3), my_tid(), attempt, error);
    return;
  }
  if (!mine) {
    track *t = calloc(1, sizeof *t);
    if (!t)
      return;
    t->tid = my_tid();
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
  *e = (event){name, cat, error ? strdup(error) : NULL, t0, t1 - t0, attempt};
  __atomic_store_n(&t->n, t->n + 1, __ATOMIC_RELEASE);
}

static char *dup_bytes(const char *p, size_t n) {
  char *s = malloc(n + 1);
  if (s) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

/* Under lock: room for one more remote event, or NULL. */
static remote_event *rev_push_locked(void) {
  if (written)
    return NULL;
  if (rev_n == rev_cap) {
    size_t cap = rev_cap ? rev_cap * 2 : 1024;
    remote_event *p = realloc(rev, cap * sizeof *p);
    if (!p)
      return NULL;
    rev = p;
    rev_cap = cap;
  }
  return &rev[rev_n++];
}

void sf__trace_dispatch(const char *name, double t0, int node, uint64_t id, int32_t attempt,
                        const char *error) {
  if (!sf__trace_on || worker)
    return;
  double t1 = now_us() - t_start;
  pthread_mutex_lock(&lock);
  remote_event *e = rev_push_locked();
  if (e)
    *e = (remote_event){.name = strdup(name), .cat = strdup("dispatch"),
                        .error = error ? strdup(error) : NULL, .ts = t0,
                        .dur = t1 > t0 ? t1 - t0 : 0, .id = id, .node = node,
                        .attempt = attempt, .dispatch = true};
  pthread_mutex_unlock(&lock);
}

void sf__trace_remote_event(int node, const sf__trace_text *name, const sf__trace_text *cat,
                            const sf__trace_text *error, uint64_t ts_ns, uint64_t dur_ns,
                            int32_t tid, int32_t attempt) {
  if (!sf__trace_on || worker)
    return;
  pthread_mutex_lock(&lock);
  remote_event *e = rev_push_locked();
  if (e)
    *e = (remote_event){.name = dup_bytes(name->p, name->n), .cat = dup_bytes(cat->p, cat->n),
                        .error = error->n ? dup_bytes(error->p, error->n) : NULL,
                        .ts_ns = ts_ns, .dur_ns = dur_ns, .node = node, .tid = tid,
                        .attempt = attempt};
  pthread_mutex_unlock(&lock);
}

void sf__trace_counter(const char *name, double value) {
  if (!sf__trace_on || worker)
    return;
  double ts = now_us() - t_start;
  pthread_mutex_lock(&lock);
  if (!written && ctr_n == ctr_cap) {
    size_t cap = ctr_cap ? ctr_cap * 2 : 1024;
    counter *c = realloc(ctr, cap * sizeof *c);
    if (c) {
      ctr = c;
      ctr_cap = cap;
    }
  }
  if (!written && ctr_n < ctr_cap)
    ctr[ctr_n++] = (counter){name, ts, value};
  pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------ writing */

static void put_json_str(FILE *f, const char *s) {
  sf__buf b;
  char small[256];
  sf__buf_init(&b, small, sizeof small);
  s = s ? s : "";
  sf__buf_json_str(&b, s, strlen(s));
  fwrite(b.data, 1, b.len, f);
  sf__buf_free(&b);
}

/* ---------------------------------------------------- the trace file */

/* Where the trace goes is decided before the run, from what the path names,
 * by the rule every file sflow writes follows (core's outfile.c,
 * docs/runtime.md "Files sflow writes"): nothing or a regular file is
 * replaced whole at the end (a temporary file beside it, renamed over it,
 * so a reader never sees half a trace); a symlink is followed and stays a
 * link; a FIFO or a character device is written in place (opening a FIFO
 * waits for a reader, as `>` does); the file of stdout or stderr is
 * written through that descriptor, after the program's output; a
 * directory, a block device or a socket is an error before the run. */
static FILE *out;          /* opened before the run: a duplicate of file.fd */
static sf__outfile file;   /* where out goes, committed at the end */

bool sf__trace_open(char *err, size_t errlen) {
  char why[300];
  if (!sf__outfile_open(&file, sf__options.trace, 0, why, sizeof why)) {
    snprintf(err, errlen, "cannot write the trace to '%s': %s", sf__options.trace, why);
    return false;
  }
  int fd = fcntl(file.fd, F_DUPFD_CLOEXEC, 3);
  out = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!out) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    sf__outfile_abort(&file);
    snprintf(err, errlen, "cannot write the trace to '%s': %s", sf__options.trace, strerror(e));
    return false;
  }
  sf__trace_on = true;
  return true;
}

void sf__trace_discard(void) {
  if (!out)
    return;
  fclose(out);
  out = NULL;
  sf__outfile_abort(&file);
  sf__trace_on = false;
}

static void thread_name(int32_t tid, char *name, size_t n) {
  if (tid == 0)
    snprintf(name, n, "main");
  else if (tid == 100000)
    snprintf(name, n, "watchdog");
  else
    snprintf(name, n, "worker %d", (int)tid);
}

static void put_meta(FILE *f, const char *what, int pid, int tid, const char *name) {
  fprintf(f, ",\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", what,
          pid, tid);
  put_json_str(f, name);
  fputs("}}", f);
}

static void put_x(FILE *f, const char *name, const char *cat, double ts, double dur, int pid,
                  int tid, int attempt, const char *error) {
  fputs(",\n{\"name\":", f);
  put_json_str(f, name);
  fputs(",\"cat\":", f);
  put_json_str(f, cat);
  fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{\"attempt\":%d",
          ts, dur, pid, tid, attempt);
  if (error) {
    fputs(",\"error\":", f);
    put_json_str(f, error);
  }
  fputs("}}", f);
}

/* A dispatch span: async begin and end events on the head. */
static void put_dispatch(FILE *f, const remote_event *e) {
  for (int end = 0; end < 2; end++) {
    fputs(",\n{\"name\":", f);
    put_json_str(f, e->name);
    fprintf(f, ",\"cat\":\"dispatch\",\"ph\":\"%s\",\"id\":\"t%llu.%d\",\"ts\":%.3f,\"pid\":0,"
            "\"tid\":0,\"args\":{\"node\":%d,\"attempt\":%d",
            end ? "e" : "b", (unsigned long long)e->id, (int)e->attempt,
            end ? e->ts + e->dur : e->ts, (int)e->node, (int)e->attempt);
    if (end && e->error) {
      fputs(",\"error\":", f);
      put_json_str(f, e->error);
    }
    fputs("}}", f);
  }
}

/* Names of the nodes and of the worker tracks seen in remote events. */
static void put_nodes(FILE *f) {
  int nodes = nodes_of_run();
  char host[256] = "", name[400];
  gethostname(host, sizeof host - 1);
  snprintf(name, sizeof name, nodes > 1 ? "node 0: head (%s)" : "node 0 (%s)", host);
  put_meta(f, "process_name", 0, 0, name);
  for (int k = 1; k < nodes; k++) {
    const char *h = sf__trace_cluster.host ? sf__trace_cluster.host(k) : NULL;
    if (!h)
      continue;
    snprintf(name, sizeof name, "node %d: %s", k, h);
    put_meta(f, "process_name", k, 0, name);
    fprintf(f, ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"sort_index\":%d}}", k, k);
  }
}

/* Flushes and closes the trace, then commits it (renamed into place, or
 * closed when written in place).  A reader of a FIFO that went away must
 * not end the run with SIGPIPE now that its work is done: the signal is
 * blocked on this thread (old: the mask before) from sf__trace_write's
 * first byte (a pipe raises it on the writing thread) and a pending one is
 * taken back here, so the failure is a notice like any other. */
static void finish(FILE *f, const char *path, const sigset_t *pipe_set, const sigset_t *old) {
  bool ok = fflush(f) == 0 && !ferror(f);
  int e = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    e = errno;
  }
  struct timespec zero = {0, 0};
  (void)sigtimedwait(pipe_set, NULL, &zero); /* signals of a kind do not queue */
  pthread_sigmask(SIG_SETMASK, old, NULL);
  if (!ok)
    sf__outfile_abort(&file);
  else if (!sf__outfile_commit(&file)) {
    ok = false;
    e = errno;
  }
  if (!ok)
    sf__notice("cannot write the trace to %s: %s", path, strerror(e));
}

void sf__trace_write(void) {
  if (!sf__trace_on || !out)
    return;
  sf__trace_on = false;
  const char *path = sf__options.trace;
  FILE *f = out;
  out = NULL;
  /* From the first byte: a trace longer than stdio's buffer (counter
   * tracks make most of them so) writes before finish's flush. */
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  fputs("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":0,"
        "\"args\":{\"sort_index\":0}}", f);
  put_nodes(f);
  /* Each node's clock offset, read before taking the lock: the control
   * thread adds events under control.c's lock, so the two locks are only
   * ever taken in that order. */
  int nodes = nodes_of_run();
  int64_t *offs = calloc((size_t)nodes, sizeof *offs);
  for (int k = 1; offs && k < nodes; k++) {
    (void)sf__trace_cluster.clock(k, &offs[k]); /* none yet: 0, the best guess */
  }
  pthread_mutex_lock(&lock);
  written = true;
  for (track *t = tracks; t; t = t->next) {
    char name[32];
    thread_name(t->tid, name, sizeof name);
    put_meta(f, "thread_name", 0, t->tid, name);
    size_t n = __atomic_load_n(&t->n, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
      event *e = &t->ev[i];
      put_x(f, e->name, e->cat, e->ts, e->dur, 0, t->tid, e->attempt, e->error);
    }
  }
  /* Worker events, on the head's clock; each (node, thread) track named
   * once (a small table: nodes times pool threads). */
  struct { int32_t node, tid; } *seen = NULL;
  size_t nseen = 0;
  for (size_t i = 0; i < rev_n; i++) {
    remote_event *e = &rev[i];
    if (e->dispatch) {
      put_dispatch(f, e);
      continue;
    }
    int64_t off = offs && e->node < nodes ? offs[e->node] : 0;
    double ts = ((double)e->ts_ns - (double)off) * 1e-3 - t_start;
    put_x(f, e->name, e->cat, ts, (double)e->dur_ns * 1e-3, e->node, e->tid, e->attempt,
          e->error);
    size_t j = 0;
    while (j < nseen && !(seen[j].node == e->node && seen[j].tid == e->tid))
      j++;
    if (j == nseen) {
      void *p = realloc(seen, (nseen + 1) * sizeof *seen);
      if (!p)
        continue;
      seen = p;
      seen[nseen].node = e->node;
      seen[nseen++].tid = e->tid;
      char name[32];
      thread_name(e->tid, name, sizeof name);
      put_meta(f, "thread_name", e->node, e->tid, name);
    }
  }
  free(seen);
  for (size_t i = 0; i < ctr_n; i++) {
    fputs(",\n{\"name\":", f);
    put_json_str(f, ctr[i].name);
    fprintf(f, ",\"ph\":\"C\",\"ts\":%.3f,\"pid\":0,\"tid\":0,\"args\":{\"value\":%.17g}}",
            ctr[i].ts, isfinite(ctr[i].v) ? ctr[i].v : 0.0);
  }
  pthread_mutex_unlock(&lock);
  free(offs);
  fputs("\n]}\n", f);
  finish(f, path, &pipe_set, &old);
}
