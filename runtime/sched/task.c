/*
 * task.c — futures, tasks, actors and groups on the thread pool (sched.c).
 *
 * Key design choices:
 *  - One allocation per call.  A task call allocates its future, the slot
 *    for the result, the task record and a copy of the argument block as
 *    one block; the future's reference count keeps it alive (the running
 *    task holds one reference).  An actor call does the same with its
 *    mailbox message.
 *  - A future is a 32-bit state word (pending, done, failed, plus a
 *    "someone sleeps here" bit) that awaiting threads wait on with a futex,
 *    and the value inline after it.  Completing is one atomic exchange; the
 *    wake-up system call happens only when a waiter went to sleep.
 *  - Retries run on the same worker, at once, with the same argument block
 *    (thunks borrow their arguments).  @timeout cannot stop a thread, so an
 *    attempt that overruns is abandoned: the watchdog gives the task to a
 *    new attempt (or fails it), the pool gets a spare thread, and whatever
 *    the old attempt returns later is dropped.
 *  - An actor is a mailbox plus a "scheduled" flag: the first message sent
 *    to an idle actor puts its drain job on the shared queue; the drain
 *    runs messages one at a time in the order they were sent, so methods
 *    never run concurrently and need no locks.  `init` is the first message.
 *  - A method that fails fails its call; the actor lives on (as in Ray).
 *    A failed init breaks the actor: every later call fails naming it.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched.h"

/* ----------------------------------------------------------- hooks */

/* The layers above install these before any thread (docs/architecture.md,
 * "Hooks"): durability its journal and checkpoints (sf__durable_install),
 * the cluster its placement on other nodes (sf__cluster_install).  With
 * none installed (a unit test of this layer alone) nothing is journaled,
 * checkpointed or placed elsewhere.  A held future or a remote actor
 * exists only once the placer placed something, so those calls need no
 * test. */
sf__durable_hooks sf__durable;
sf__placer sf__place;

static int64_t journal_next(void) { return sf__durable.next ? sf__durable.next() : -1; }
static int64_t spawn_id(void) { return sf__durable.spawn_id ? sf__durable.spawn_id() : -1; }
static sf_future *journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc) {
  return sf__durable.task_replay ? sf__durable.task_replay(seq, d, loc) : NULL;
}
static void journal_task_done(int64_t seq, const sf_task_desc *d, void *res, const char *out,
                              size_t n) {
  if (sf__durable.task_done)
    sf__durable.task_done(seq, d, res, out, n);
}
static int journal_call_mode(sf_actor *a, int64_t seq) {
  return sf__durable.call_mode ? sf__durable.call_mode(a, seq) : SF__REPLAY_LIVE;
}
static void journal_call_result(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res) {
  if (sf__durable.call_result)
    sf__durable.call_result(a, seq, m, res);
}
static void journal_call_done(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res,
                              const char *out, size_t n) {
  if (sf__durable.call_done)
    sf__durable.call_done(a, seq, m, res, out, n);
}
static int64_t journal_route_any(int64_t seq, sf_actor **members, int64_t n, int64_t best) {
  return sf__durable.route_any ? sf__durable.route_any(seq, members, n, best) : best;
}
static bool checkpoint_restore(sf_actor *a) {
  return sf__durable.restore && sf__durable.restore(a);
}
static void checkpoint_maybe(sf_actor *a, bool after_all) {
  if (sf__durable.checkpoint)
    sf__durable.checkpoint(a, after_all);
}
static void checkpoint_plan_group(const sf_actor_desc *d, int64_t id, int64_t n) {
  if (sf__durable.plan_group)
    sf__durable.plan_group(d, id, n);
}
static int64_t checkpoint_group_epoch(const sf_actor_desc *d, int64_t id) {
  return sf__durable.group_epoch ? sf__durable.group_epoch(d, id) : -1;
}
static bool place_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq,
                       uint64_t key) {
  return sf__place.task && sf__place.task(d, args, f, seq, key);
}
static bool place_spawn(sf_actor **members, int64_t n, void *args) {
  return sf__place.spawn && sf__place.spawn(members, n, args);
}

enum { FUT_PENDING = 0, FUT_DONE = 1, FUT_FAILED = 2, FUT_STATUS = 3, FUT_WAITERS = 4, FUT_LOCK = 8,
       FUT_WANTED = 16, FUT_HELD = 32 /* remote.c objects: see future_want */ };

struct sf_future {
  sf_obj hdr;
  _Atomic uint32_t state;
  int32_t flags;
  const sf_type *type; /* NULL: no value */
  char *error;         /* the message of a failed future (heap) */
  struct task_rec *task; /* the task making the value, if any */
  struct task_rec *parked; /* tasks waiting for this value to start (FUT_LOCK) */
  sf__fwaiter *notify;     /* remote.c: told when the value exists (FUT_LOCK) */
  _Alignas(16) unsigned char value[];
};

_Thread_local int sf__task_depth;

/* The actor whose method (or init) runs on this thread. */
static _Thread_local sf_actor *current_actor;

#define MAX_INLINE_DEPTH 128
#define THROTTLE 64 /* queued tasks per pool thread before a submitter runs its own */

static int32_t type_size(const sf_type *t) { return t && t->kind != SF_VOID ? t->size : 0; }
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Runs a task thunk (task) or a method thunk (method, on state) with
 * runtime errors caught: false (message in sf__error_message) when it
 * failed.  Kept out of line so that no caller variable lives across the
 * setjmp. */
static __attribute__((noinline)) bool guarded(void (*task)(void *, void *),
                                              void (*method)(void *, void *, void *),
                                              void *state, void *args, void *res) {
  jmp_buf jb, *saved = sf__error_jmp;
  int depth = sf__task_depth;
  sf__error_jmp = &jb;
  if (setjmp(jb) != 0) {
    sf__error_jmp = saved;
    sf__task_depth = depth;
    return false;
  }
  sf__task_depth++;
  if (method)
    method(state, args, res);
  else
    task(args, res);
  sf__task_depth--;
  sf__error_jmp = saved;
  return true;
}

/* ------------------------------------------------------------ futures */

static void notify_all(sf__fwaiter *w, bool done) {
  while (w) {
    sf__fwaiter *next = w->next;
    w->fn(w, done);
    w = next;
  }
}

static void future_dtor(sf_obj *o) {
  sf_future *f = (sf_future *)o;
  /* remote.c objects: a value a worker still holds that nobody here can
   * ask for any more (one flag test for every other future). */
  if (atomic_load_explicit(&f->state, memory_order_relaxed) & FUT_HELD)
    sf__place.future_gone(f);
  if (f->notify)
    notify_all(f->notify, false);
  if (f->type && (atomic_load(&f->state) & FUT_STATUS) == FUT_DONE)
    sf_value_release(f->type, f->value);
  free(f->error);
  sf__block_free(f, f->hdr.flags);
}

/* A pending future with `extra` more bytes after its value, 16-aligned. */
static sf_future *future_alloc(const sf_type *t, size_t extra, void **extra_out) {
  size_t vsize = (size_t)type_size(t);
  size_t head = round16(sizeof(sf_future) + vsize);
  int32_t cls;
  sf_future *f = sf__block_alloc(head + extra, &cls);
  f->hdr = (sf_obj){1, SF_OBJ_FUTURE, cls}; /* flags: the block's class */
  atomic_init(&f->state, FUT_PENDING);
  f->flags = 0;
  f->type = vsize ? t : NULL;
  f->error = NULL;
  f->task = NULL;
  f->parked = NULL;
  f->notify = NULL;
  if (vsize)
    memset(f->value, 0, vsize);
  if (extra_out)
    *extra_out = (char *)f + head;
  return f;
}

static void tasks_unparked(struct task_rec *list);

static void future_finish(sf_future *f, uint32_t status) {
  uint32_t old = atomic_load_explicit(&f->state, memory_order_relaxed);
  for (;;) {
    if (old & FUT_LOCK) { /* a task is parking here: a few instructions */
      old = atomic_load_explicit(&f->state, memory_order_relaxed);
      continue;
    }
    if (atomic_compare_exchange_weak_explicit(&f->state, &old, status, memory_order_acq_rel,
                                              memory_order_relaxed))
      break;
  }
  if (old & FUT_WAITERS)
    sf__futex_wake(&f->state, INT32_MAX);
  if (f->parked) { /* no task can park any more: the status is final */
    struct task_rec *list = f->parked;
    f->parked = NULL;
    tasks_unparked(list);
  }
  if (f->notify) {
    sf__fwaiter *w = f->notify;
    f->notify = NULL;
    notify_all(w, true);
  }
}

/* ---- remote.c objects: a future whose value a worker holds (HELD) is
 * fetched only once something wants it (WANTED: an await, or a task
 * parked on it).  The two marks are set by atomic or; whichever comes
 * second asks remote.c for the value, so exactly one does. */
static void future_want(sf_future *f) {
  if (atomic_load_explicit(&f->state, memory_order_acquire) & (FUT_STATUS | FUT_WANTED))
    return;
  uint32_t old = atomic_fetch_or_explicit(&f->state, FUT_WANTED, memory_order_acq_rel);
  if ((old & (FUT_STATUS | FUT_WANTED | FUT_HELD)) == FUT_HELD)
    sf__place.demand(f);
}

bool sf__future_held(sf_future *f) {
  uint32_t old = atomic_fetch_or_explicit(&f->state, FUT_HELD, memory_order_acq_rel);
  return (old & FUT_WANTED) != 0;
}

bool sf__future_try_retain(sf_future *f) {
  int64_t rc = __atomic_load_n(&f->hdr.rc, __ATOMIC_RELAXED);
  while (rc > 0)
    if (__atomic_compare_exchange_n(&f->hdr.rc, &rc, rc + 1, true, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED))
      return true;
  return false;
}

/* Takes the FUT_LOCK bit of pending f; false once f is complete. */
static bool future_lock(sf_future *f) {
  uint32_t s = atomic_load_explicit(&f->state, memory_order_relaxed);
  for (;;) {
    if (s & FUT_STATUS)
      return false;
    if (s & FUT_LOCK) {
      s = atomic_load_explicit(&f->state, memory_order_relaxed);
      continue;
    }
    if (atomic_compare_exchange_weak_explicit(&f->state, &s, s | FUT_LOCK, memory_order_acquire,
                                              memory_order_relaxed))
      return true;
  }
}

bool sf__future_notify(sf_future *f, sf__fwaiter *w) {
  if (!future_lock(f))
    return false;
  w->next = f->notify;
  f->notify = w;
  atomic_fetch_and_explicit(&f->state, ~(uint32_t)FUT_LOCK, memory_order_release);
  return true;
}
/* ---- end of remote.c objects */

/* Parks task t on pending future f: t starts when f completes.  False if
 * f is already complete. */
static bool park_on(sf_future *f, struct task_rec *t, struct task_rec **link) {
  future_want(f);
  if (!future_lock(f))
    return false;
  *link = f->parked;
  f->parked = t;
  atomic_fetch_and_explicit(&f->state, ~(uint32_t)FUT_LOCK, memory_order_release);
  return true;
}

/* Completes f with the result at res (moved in). */
static void future_set(sf_future *f, void *res) {
  if (f->type && res)
    memcpy(f->value, res, (size_t)f->type->size);
  future_finish(f, FUT_DONE);
}

static void future_fail(sf_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void future_fail(sf_future *f, const char *fmt, ...) {
  char buf[SF__ERROR_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  f->error = strdup(buf);
  future_finish(f, FUT_FAILED);
}

sf_future *sf_future_done(const sf_type *t, void *value) {
  sf_future *f = future_alloc(t, 0, NULL);
  future_set(f, value);
  return f;
}

sf_future *sf__future_failed(const sf_type *t, const char *message) {
  sf_future *f = future_alloc(t, 0, NULL);
  future_fail(f, "%s", message);
  return f;
}

bool sf__future_ready(sf_future *f) {
  return (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS) != 0;
}

static bool task_claim_inline(struct task_rec *t);

static void future_wait(sf_future *f) {
  if (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS)
    return;
  future_want(f);
  /* The awaited task has not started: run it here, now.  It cannot depend
   * on the waiter, and this is what makes fork-join recursion and chains
   * of futures cheap.  The depth bound keeps the stack small. */
  if (f->task && sf__inline_depth < MAX_INLINE_DEPTH && task_claim_inline(f->task) &&
      (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS))
    return;
  sf__stats_wait_begin();
  sf__sched_wait(&f->state, FUT_STATUS, FUT_WAITERS, current_actor == NULL);
  sf__stats_wait_end();
}

/* The message of an error caught on this thread, without the
 * "runtime error: " marker: "file:line:col: fail: negative". */
static const char *cause(void) {
  static const char mark[] = "runtime error: ";
  char *m = sf__error_message, *p = strstr(m, mark);
  if (p)
    memmove(p, p + sizeof mark - 1, strlen(p + sizeof mark - 1) + 1);
  return m;
}

void sf_future_get(sf_future *f, void *out, const sf_loc *loc) {
  if (!f)
    sf_runtime_error(loc, "await on a future that was never set");
  future_wait(f);
  if ((atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS) == FUT_FAILED)
    sf_runtime_error(loc, "%s", f->error ? f->error : "failed");
  if (!f->type || !out)
    return;
  memcpy(out, f->value, (size_t)f->type->size);
  sf_value_retain(f->type, out);
}

sf_array *sf_future_get_all(sf_array *futures, const sf_type *t, const sf_loc *loc) {
  int64_t n = futures ? futures->len : 0;
  sf_future **fs = n ? futures->data : NULL;
  /* Wait for all first, so the first error reported is the first in
   * order and no half-built array is left behind.  Held values (remote.c
   * objects) are all asked for before the first wait, so they come in
   * parallel. */
  for (int64_t i = 0; i < n; i++)
    if (fs[i])
      future_want(fs[i]);
  for (int64_t i = 0; i < n; i++)
    if (fs[i])
      future_wait(fs[i]);
  sf_array *out = sf_array_new(t, n, loc);
  for (int64_t i = 0; i < n; i++) {
    if (fs[i] && (atomic_load(&fs[i]->state) & FUT_STATUS) == FUT_FAILED) {
      sf_release(out);
      sf_runtime_error(loc, "%s", fs[i]->error ? fs[i]->error : "failed");
    }
    sf_future_get(fs[i], sf__array_at(out, i), loc);
  }
  return out;
}

/* ---------------------------------------------------------- resources */

/* Shares of a GPU are counted in thousandths so sums stay exact. */
#define SHARE_UNIT 1000
#define MAX_GPUS 64

static struct {
  pthread_mutex_t lock;
  bool ready;
  int32_t ncpus, cpus_used;
  int32_t ngpus;
  int32_t gpu_used[MAX_GPUS];
  sf__job *waiting, *waiting_tail; /* jobs waiting for resources */
  bool notice_given;
} R = {.lock = PTHREAD_MUTEX_INITIALIZER};

_Thread_local int32_t sf__current_gpu = -1;

__attribute__((weak)) int32_t sf__gpu_devices(void) { return 0; }

static void resources_init(void) {
  if (R.ready)
    return;
  R.ncpus = sf__pool_size();
  int32_t g = sf__gpu_devices();
  R.ngpus = g < 0 ? 0 : g > MAX_GPUS ? MAX_GPUS : g;
  R.ready = true;
}

/* What one call asks for, clamped to what this run has. */
typedef struct demand {
  int32_t cpus;   /* extra CPU slots (beyond the one the thread is) */
  int32_t gpu;    /* thousandths of one GPU (<= 1000), or whole GPUs * 1000 */
} demand;

static demand demand_of(double cpus, double gpus, const char *name, const sf_loc *loc) {
  demand d = {0, 0};
  if (gpus > 0) {
    pthread_mutex_lock(&R.lock);
    resources_init();
    int32_t ngpus = R.ngpus;
    bool notice = !R.notice_given;
    R.notice_given = true;
    pthread_mutex_unlock(&R.lock);
    if (ngpus == 0) {
      if (sf__options.require_gpu)
        sf_runtime_error(loc, "%s asks for @gpus(%g) but this machine has no GPU "
                         "(--require-gpu is set)", name, gpus);
      if (notice && !sf__options.quiet)
        sf__notice("no GPU found: work that asks for @gpus runs on the CPU");
    } else {
      d.gpu = (int32_t)(gpus * SHARE_UNIT + 0.5);
      if (d.gpu > SHARE_UNIT * ngpus)
        d.gpu = SHARE_UNIT * ngpus;
    }
  }
  if (cpus > 1) {
    pthread_mutex_lock(&R.lock);
    resources_init();
    int32_t c = (int32_t)(cpus + 0.999);
    d.cpus = (c > R.ncpus ? R.ncpus : c) - 1;
    pthread_mutex_unlock(&R.lock);
  }
  return d;
}

/* Takes the resources of d if they are free now; sets *dev to the GPU. */
static bool resources_take(demand d, int32_t *dev) {
  *dev = -1;
  if (d.cpus == 0 && d.gpu == 0)
    return true;
  bool ok = true;
  pthread_mutex_lock(&R.lock);
  if (R.cpus_used + d.cpus > (R.ncpus > 1 ? R.ncpus - 1 : 0) && d.cpus > 0)
    ok = false;
  int32_t best = -1;
  if (ok && d.gpu > 0) {
    if (d.gpu <= SHARE_UNIT) { /* a share of one device: best fit */
      for (int32_t i = 0; i < R.ngpus; i++)
        if (R.gpu_used[i] + d.gpu <= SHARE_UNIT &&
            (best < 0 || R.gpu_used[i] > R.gpu_used[best]))
          best = i;
      ok = best >= 0;
    } else { /* whole devices: the first n idle ones */
      int32_t need = d.gpu / SHARE_UNIT, idle = 0;
      for (int32_t i = 0; i < R.ngpus; i++)
        idle += R.gpu_used[i] == 0;
      ok = idle >= need;
    }
  }
  if (ok) {
    R.cpus_used += d.cpus;
    if (d.gpu > 0 && d.gpu <= SHARE_UNIT) {
      R.gpu_used[best] += d.gpu;
      *dev = best;
    } else if (d.gpu > SHARE_UNIT) {
      int32_t need = d.gpu / SHARE_UNIT;
      for (int32_t i = 0; i < R.ngpus && need; i++)
        if (R.gpu_used[i] == 0) {
          R.gpu_used[i] = SHARE_UNIT;
          if (*dev < 0)
            *dev = i;
          need--;
        }
    }
  }
  pthread_mutex_unlock(&R.lock);
  return ok;
}

static void resources_give(demand d, int32_t dev) {
  if (d.cpus == 0 && d.gpu == 0)
    return;
  pthread_mutex_lock(&R.lock);
  R.cpus_used -= d.cpus;
  if (d.gpu > 0 && d.gpu <= SHARE_UNIT && dev >= 0)
    R.gpu_used[dev] -= d.gpu;
  else if (d.gpu > SHARE_UNIT)
    for (int32_t i = dev, need = d.gpu / SHARE_UNIT; i >= 0 && i < R.ngpus && need; i++)
      if (R.gpu_used[i] == SHARE_UNIT) {
        R.gpu_used[i] = 0;
        need--;
      }
  /* Everything that waited gets another chance. */
  sf__job *w = R.waiting;
  R.waiting = R.waiting_tail = NULL;
  pthread_mutex_unlock(&R.lock);
  while (w) {
    sf__job *next = w->next;
    sf__sched_push_shared(w);
    w = next;
  }
}

static void resources_wait(sf__job *j) {
  pthread_mutex_lock(&R.lock);
  j->next = NULL;
  if (R.waiting_tail)
    R.waiting_tail->next = j;
  else
    R.waiting = j;
  R.waiting_tail = j;
  pthread_mutex_unlock(&R.lock);
}

/* -------------------------------------------------------------- tasks */

typedef struct task_rec {
  sf__job job;              /* in a deque: runs the task unless claimed */
  sf__job again;            /* a retry after a timeout, or after waiting for resources */
  _Atomic int32_t claimed;  /* set by whoever runs the first attempt */
  struct task_rec *next_parked; /* in a future's list of parked tasks */
  const sf_task_desc *d;
  sf_future *f;
  const sf_loc *loc;
  _Atomic int32_t owner;    /* the attempt whose result counts; -1: finished */
  _Atomic int32_t inflight; /* attempts running (the args live until 0) */
  demand need;
  int64_t seq;              /* journal sequence number, or -1 */
  uint64_t key;             /* the call's identity: every attempt's random stream */
  sf__buf *out;             /* the successful attempt's print lines go here, or NULL */
  _Alignas(16) unsigned char args[];
} task_rec;

#define TASK_FROM_JOB(j) ((task_rec *)(j))
#define TASK_FROM_AGAIN(j) ((task_rec *)((char *)(j) - offsetof(task_rec, again)))

static void run_task(task_rec *t);
static void task_schedule(task_rec *t);
static _Thread_local int32_t submit_first_attempt; /* sf__task_submit_attempt */
static _Thread_local sf__buf *submit_out;           /* sf__task_submit_attempt */
static sf_future *task_submit(const sf_task_desc *d, void *args, int64_t seq, struct demand need,
                              bool may_go_remote, uint64_t key, const sf_loc *loc);

/* A deque entry holds a reference to the future (the block it lives in):
 * the task may have run inline and finished long before the entry is
 * popped. */
static void run_task_job(sf__job *j) {
  task_rec *t = TASK_FROM_JOB(j);
  sf_future *f = t->f;
  if (atomic_exchange_explicit(&t->claimed, 1, memory_order_acq_rel) == 0)
    run_task(t);
  sf_release(f);
}

static void run_task_again(sf__job *j) {
  task_rec *t = TASK_FROM_AGAIN(j);
  sf_future *f = t->f;
  run_task(t);
  sf_release(f);
}

static bool task_claim_inline(task_rec *t) {
  /* Not a task with a deadline: an abandoned attempt would hold the
   * waiter hostage until it returned. */
  if (t->d->timeout > 0 || atomic_load_explicit(&t->claimed, memory_order_relaxed) ||
      atomic_exchange_explicit(&t->claimed, 1, memory_order_acq_rel))
    return false;
  sf__inline_depth++;
  /* Dataflow start holds here too: a task handed futures starts once
   * their values exist, as it does when parked, so its lines always come
   * after its producers' (which --resume relies on: it prints the
   * producer's record at the producer's call).  The producers run here
   * if nobody has started them.  t is ours now: its arguments stay put. */
  const sf_type *a = t->d->args;
  for (int32_t i = 0; a && i < a->nfields; i++)
    if (a->fields[i].type->kind == SF_FUTURE) {
      sf_future *dep = *(sf_future **)(t->args + a->fields[i].offset);
      if (dep)
        future_wait(dep);
    }
  run_task(t);
  sf__inline_depth--;
  return true;
}

static void task_args_done(task_rec *t) {
  if (atomic_fetch_sub(&t->inflight, 1) == 1) {
    sf_value_release(t->d->args, t->args);
    sf_release(t->f); /* the task's own reference */
  }
}

/* Runs attempts of t until one succeeds, the retries run out, or the
 * watchdog takes the task away from this thread. */
static void run_task(task_rec *t) {
  const sf_task_desc *d = t->d;
  int32_t dev;
  if (!resources_take(t->need, &dev)) {
    sf_retain(t->f); /* the waiting entry's reference */
    resources_wait(&t->again);
    return;
  }
  int32_t size = type_size(d->result);
  _Alignas(16) unsigned char small[256];
  void *res = size <= (int32_t)sizeof small ? small : sf_alloc((size_t)size);
  sf_actor *saved_actor = current_actor;
  int64_t saved_attempt = sf__attempt;
  int32_t saved_gpu = sf__current_gpu;
  /* A journaled call (or a --nodes main-level call kept for the head's
   * journal, t->out) owns its lines: its own sink, never the enclosing
   * call's, even when it runs inline inside that call. */
  sf__capture cap;
  sf__capture_begin(&cap, t->seq >= 0 || t->out ? SF__CAPTURE_KEEP : SF__CAPTURE_OFF);
  /* A --nodes attempt (remote.c): its lines are kept per attempt, and only
   * the successful one's reach t->out (an abandoned attempt never writes
   * there: its caller may be gone). */
  sf__buf *saved_keep = sf__print_keep;
  sf__buf keep;
  if (t->out) {
    sf__buf_init(&keep, NULL, 0);
    sf__print_keep = &keep;
  }
  current_actor = NULL;
  sf__current_gpu = dev;
  sf__rng saved_rng = sf__rng_cur;
  int32_t attempt = atomic_load(&t->owner);
  for (;;) {
    memset(res, 0, (size_t)size);
    sf__rng_cur = (sf__rng){.key = t->key}; /* a retry draws what the first attempt drew */
    if (t->out)
      keep.len = 0;
    sf__attempt = attempt;
    double t0 = sf__trace_now();
    void *deadline = NULL;
    if (d->timeout > 0) {
      sf_retain(t->f); /* keeps t alive for the watchdog */
      deadline = sf__watch_begin(t, attempt, d->timeout);
    }
    SF__COUNT(started);
    bool ok = guarded(d->thunk, NULL, NULL, t->args, res);
    SF__COUNT(finished);
    if (deadline && !sf__watch_end(deadline))
      sf_release(t->f);
    const char *why = ok ? NULL : cause();
    sf__trace_event(d->name, "task", t0, attempt, why);
    int32_t mine = attempt;
    if (ok) {
      if (atomic_compare_exchange_strong(&t->owner, &mine, -1)) {
        if (t->seq >= 0) {
          size_t n;
          const char *out = sf__capture_out(&cap, &n);
          journal_task_done(t->seq, d, res, out, n);
        }
        if (t->out && keep.len)
          sf__buf_put(t->out, keep.data, keep.len);
        future_set(t->f, res);
        SF__COUNT(tasks_done);
      } else {
        sf_value_release(d->result, res); /* abandoned by the watchdog */
        sf__sched_thread_back();
      }
      break;
    }
    if (attempt < d->retry) {
      if (!atomic_compare_exchange_strong(&t->owner, &mine, attempt + 1)) {
        sf__sched_thread_back();
        break;
      }
      attempt = attempt + 1;
      atomic_fetch_add_explicit(&sf__stats.retries, 1, memory_order_relaxed);
      continue;
    }
    if (atomic_compare_exchange_strong(&t->owner, &mine, -1)) {
      atomic_fetch_add_explicit(&sf__stats.tasks_failed, 1, memory_order_relaxed);
      future_fail(t->f, "task '%s' failed after %d %s: %s", d->name, (int)attempt + 1,
                  sf__plural(attempt + 1, "attempt", "attempts"), why);
    } else {
      sf__sched_thread_back();
    }
    break;
  }
  sf__capture_free(&cap);
  if (t->out) {
    sf__print_keep = saved_keep;
    sf__buf_free(&keep);
  }
  current_actor = saved_actor;
  sf__attempt = saved_attempt;
  sf__current_gpu = saved_gpu;
  sf__rng_cur = saved_rng;
  if (res != small)
    sf_free(res);
  resources_give(t->need, dev);
  task_args_done(t);
}

/* Called by the watchdog (progress.c) when attempt `attempt` of t ran past
 * its @timeout: hands the task to a new attempt or fails it. */
static void timed_out(task_rec *t, int32_t attempt);

void sf__task_timed_out(void *task, int32_t attempt) {
  task_rec *t = task;
  sf_future *f = t->f;
  timed_out(t, attempt);
  sf_release(f);
}

static void timed_out(task_rec *t, int32_t attempt) {
  int32_t mine = attempt;
  const sf_task_desc *d = t->d;
  if (attempt < d->retry) {
    if (!atomic_compare_exchange_strong(&t->owner, &mine, attempt + 1))
      return; /* it finished just now */
    atomic_fetch_add(&sf__stats.retries, 1);
    sf__sched_thread_lost();
    sf__trace_event(d->name, "timeout", sf__trace_now() - d->timeout * 1e6, attempt, "timed out");
    atomic_fetch_add(&t->inflight, 1);
    sf_retain(t->f); /* the queue entry's reference */
    sf__sched_push_shared(&t->again);
    return;
  }
  if (!atomic_compare_exchange_strong(&t->owner, &mine, -1))
    return;
  sf__sched_thread_lost();
  atomic_fetch_add(&sf__stats.tasks_failed, 1);
  future_fail(t->f, "task '%s' failed after %d %s: timed out after %gs (@timeout)",
              d->name, (int)attempt + 1, sf__plural(attempt + 1, "attempt", "attempts"), d->timeout);
}

sf_future *sf_task_call(const sf_task_desc *d, void *args, const sf_loc *loc) {
  /* Taken before a replay answers the call, so the calls after it keep
   * the identities they had in the journaled run. */
  uint64_t key = sf__rng_child();
  int64_t seq = journal_next();
  if (seq >= 0) {
    sf_future *jf = journal_task_replay(seq, d, loc);
    if (jf) {
      sf_value_release(d->args, args);
      return jf;
    }
  }
  demand need = demand_of(d->cpus, d->gpus, d->name, loc);
  return task_submit(d, args, seq, need, true, key, loc);
}

/* Whether any argument of d is a future (such a call may park). */
static bool future_args(const sf_task_desc *d) {
  const sf_type *a = d->args;
  for (int32_t i = 0; a && i < a->nfields; i++)
    if (a->fields[i].type->kind == SF_FUTURE)
      return true;
  return false;
}

#define INLINE_ARGS 256 /* argument bytes a call run on the spot may have */

/* Past the throttle (plenty queued already), a call that can only ever
 * run here, now, needs no heap record: no deque entry, no park, no
 * watchdog, no resource wait, no other node can see it.  Its record lives
 * on this stack for the attempt(s) and only the future (the value) is
 * allocated.  This is libgomp's undeferred task, and it keeps the memory a
 * million pipelined calls touch to their futures. */
static bool run_on_the_spot(const sf_task_desc *d, demand need, bool may_go_remote,
                            size_t asize) {
  return d->timeout <= 0 && need.cpus == 0 && need.gpu == 0 && asize <= INLINE_ARGS &&
         sf__inline_depth < MAX_INLINE_DEPTH && (!may_go_remote || !sf__options.nodes) &&
         sf__sched_queue_len() >= THROTTLE * (int64_t)sf__pool_size() && !future_args(d);
}

/* Fills a task record for f: a first attempt not yet claimed (claimed 1:
 * one that only the caller will run), arguments copied in. */
static void task_rec_init(task_rec *t, sf_future *f, const sf_task_desc *d, void *args,
                          size_t asize, int64_t seq, demand need, int32_t claimed,
                          uint64_t key, const sf_loc *loc) {
  t->job.run = claimed ? NULL : run_task_job;
  t->job.next = NULL;
  t->again.run = claimed ? NULL : run_task_again;
  t->again.next = NULL;
  atomic_init(&t->claimed, claimed);
  t->next_parked = NULL;
  t->d = d;
  t->f = f;
  t->loc = loc;
  atomic_init(&t->owner, submit_first_attempt);
  atomic_init(&t->inflight, 1);
  t->need = need;
  t->seq = seq;
  t->key = key;
  t->out = submit_out;
  submit_out = NULL; /* not for the calls this task makes, should it run inline */
  if (asize)
    memcpy(t->args, args, asize);
}

/* The shared part of sf_task_call and sf__task_submit_local. */
static sf_future *task_submit(const sf_task_desc *d, void *args, int64_t seq, demand need,
                              bool may_go_remote, uint64_t key, const sf_loc *loc) {
  size_t asize = (size_t)type_size(d->args);
  task_rec *t;
  if (run_on_the_spot(d, need, may_go_remote, asize)) {
    _Alignas(16) unsigned char rec[sizeof(task_rec) + INLINE_ARGS];
    t = (task_rec *)rec;
    sf_future *f = future_alloc(d->result, 0, NULL);
    task_rec_init(t, f, d, args, asize, seq, need, 1, key, loc);
    f->hdr.rc = 2; /* the caller's and the attempt's (task_args_done) */
    SF__COUNT(tasks);
    sf__inline_depth++;
    run_task(t);
    sf__inline_depth--;
    return f;
  }
  sf_future *f = future_alloc(d->result, sizeof(task_rec) + asize, (void **)&t);
  task_rec_init(t, f, d, args, asize, seq, need, 0, key, loc);
  f->task = t;
  /* Three references: the caller's, the task's (until its last attempt
   * ends) and the deque entry's. */
  f->hdr.rc = 3; /* not yet shared: a plain store */
  SF__COUNT(tasks);
  if (may_go_remote && place_task(d, t->args, f, seq, key)) {
    /* Another node runs it; remote.c copied what it needs and completes
     * f.  The local record is finished without running. */
    atomic_store(&t->claimed, 1);
    atomic_store(&t->owner, -1);
    task_args_done(t);
    sf_release(f); /* the deque entry's reference: no entry */
    return f;
  }
  task_schedule(t);
  return f;
}

/* Queues t, or parks it on the first of its future arguments that is still
 * pending (dataflow: a task handed a future starts when the value exists,
 * so a chain of tasks runs link after link on one worker instead of
 * blocking a thread per link).  A parked task holds the reference its
 * queue entry would hold. */
static void task_schedule(task_rec *t) {
  const sf_type *a = t->d->args;
  for (int32_t i = 0; a && i < a->nfields; i++)
    if (a->fields[i].type->kind == SF_FUTURE) {
      sf_future *dep = *(sf_future **)(t->args + a->fields[i].offset);
      if (dep && park_on(dep, t, &t->next_parked))
        return;
    }
  if (t->d->timeout > 0) {
    sf__sched_push_shared(&t->job); /* never run by a helping main thread */
  } else if (sf__sched_queue_len() >= THROTTLE * (int64_t)sf__pool_size() &&
             t->need.cpus == 0 && t->need.gpu == 0 && sf__inline_depth < MAX_INLINE_DEPTH) {
    /* Plenty queued already: run this one here, now (as libgomp does past
     * its queue limit).  The workers stay busy with the queue, and the
     * submitter does useful work instead of growing it. */
    sf__inline_depth++;
    run_task_job(&t->job);
    sf__inline_depth--;
  } else {
    sf__sched_push_task(&t->job);
  }
}

static void tasks_unparked(task_rec *list) {
  while (list) {
    task_rec *next = list->next_parked;
    list->next_parked = NULL;
    task_schedule(list); /* its other futures may still be pending */
    list = next;
  }
}

sf_future *sf__task_submit_local(const sf_task_desc *d, void *args, uint64_t key) {
  demand need = {0, 0};
  return task_submit(d, args, -1, need, false, key, NULL);
}

/* remote.c (multi-node): the same, starting at attempt `first`. */
sf_future *sf__task_submit_attempt(const sf_task_desc *d, void *args, int32_t first,
                                   sf__buf *out, uint64_t key) {
  submit_first_attempt = first;
  submit_out = out;
  sf_future *f = sf__task_submit_local(d, args, key);
  submit_first_attempt = 0;
  submit_out = NULL;
  return f;
}

const sf_type *sf__future_type(sf_future *f) { return f->type; }

void sf__future_resolve_out(sf_future *f, void *value, const char *out, size_t n) {
  if (f->task && f->task->seq >= 0)
    journal_task_done(f->task->seq, f->task->d, value, out, n);
  SF__COUNT(tasks_done);
  future_set(f, value);
}

void sf__future_resolve(sf_future *f, void *value) { sf__future_resolve_out(f, value, NULL, 0); }

void sf__future_reject(sf_future *f, const char *message) {
  atomic_fetch_add_explicit(&sf__stats.tasks_failed, 1, memory_order_relaxed);
  future_fail(f, "%s", message);
}

bool sf__future_wait_result(sf_future *f, void *out, char *err, size_t errlen) {
  future_wait(f);
  if ((atomic_load(&f->state) & FUT_STATUS) == FUT_FAILED) {
    snprintf(err, errlen, "%s", f->error ? f->error : "failed");
    return false;
  }
  if (f->type && out) {
    memcpy(out, f->value, (size_t)f->type->size);
    sf_value_retain(f->type, out);
  }
  return true;
}

/* ------------------------------------------------------------- actors */

enum { MSG_INIT, MSG_CALL };

typedef struct gather {
  _Atomic int64_t left;
  sf_future *f;   /* the group call's future (holds out when done) */
  sf_array *out;  /* results, NULL when the method returns nothing */
  pthread_mutex_t lock;
  char *error;    /* the first member's failure */
} gather;

typedef struct msg {
  struct msg *next;
  int32_t kind;
  bool heap;                 /* allocated on its own (group calls) */
  const sf_method_desc *m;
  sf_future *f;              /* the call's future (a reference), or NULL */
  gather *g;
  int64_t idx;               /* slot in g->out */
  const sf_loc *loc;
  int64_t seq;               /* journal sequence number, or -1 */
  bool all;                  /* part of a g.all call */
  bool mute;                 /* worker: a replayed call, its print muted */
  sf__buf *keep;             /* worker: what the call prints, kept for its result */
  _Alignas(16) unsigned char args[];
} msg;

struct sf_actor {
  sf_obj hdr;
  const sf_actor_desc *desc;
  int64_t rank, size;
  sf__comm *comm;            /* the group's collectives, or NULL */
  void *state;
  int64_t id;                /* spawn number: journal/checkpoint identity */
  uint64_t key;              /* random streams: message j draws from mix(key, j) */
  int64_t calls;             /* calls completed (the state holds them) */
  int64_t restored;          /* calls in the checkpoint it was restored from */
  int64_t epochs;            /* g.all calls completed (group checkpoints) */
  int64_t restore_epoch;     /* --resume: the group's common checkpoint, or -1 */
  char *broken;              /* why init failed */
  struct sf__ractor *remote; /* head: the actor runs on a worker (ractor.c) */
  bool preset;               /* the state came with it (a restart): no init */
  _Atomic bool stopped;      /* worker: moved elsewhere; calls fail unrun */
  _Atomic int64_t own_pending;
  _Atomic int64_t *pending;  /* queued + running calls (for g.any); in the
                                communicator for a group member */
  pthread_mutex_t lock;
  msg *head, *tail;
  bool scheduled;
  sf__job drain;
};

struct sf_group {
  sf_obj hdr;
  const sf_actor_desc *desc;
  int64_t n;
  _Atomic int64_t next;
  sf_actor **members;
};

static void actor_dtor(sf_obj *o) {
  sf_actor *a = (sf_actor *)o;
  if (a->remote)
    sf__place.drop(a->remote);
  sf_value_release(a->desc->state, a->state);
  sf_free(a->state);
  free(a->broken);
  sf__comm_release(a->comm);
  pthread_mutex_destroy(&a->lock);
  sf_free(a);
}

static void group_dtor(sf_obj *o) {
  sf_group *g = (sf_group *)o;
  for (int64_t i = 0; i < g->n; i++)
    sf_release(g->members[i]);
  sf_free(g->members);
  sf_free(g);
}

__attribute__((constructor)) static void task_init(void) {
  sf__obj_dtor[SF_OBJ_FUTURE] = future_dtor;
  sf__obj_dtor[SF_OBJ_ACTOR] = actor_dtor;
  sf__obj_dtor[SF_OBJ_GROUP] = group_dtor;
}

sf_actor *sf__current_actor(void) { return current_actor; }
int64_t sf__actor_rank(sf_actor *a) { return a->rank; }
int64_t sf__actor_size(sf_actor *a) { return a->size; }
sf__comm *sf__actor_comm(sf_actor *a) { return a->comm; }
const sf_actor_desc *sf__actor_desc(sf_actor *a) { return a->desc; }
void *sf__actor_state(sf_actor *a) { return a->state; }
int64_t sf__actor_id(sf_actor *a) { return a->id; }
uint64_t sf__actor_key(sf_actor *a) { return a->key; }
int64_t sf__actor_calls(sf_actor *a) { return a->calls; }
void sf__actor_set_calls(sf_actor *a, int64_t n) { a->calls = a->restored = n; }
int64_t sf__actor_restored(sf_actor *a) { return a->restored; }
int64_t sf__actor_epochs(sf_actor *a) { return a->epochs; }
void sf__actor_set_epochs(sf_actor *a, int64_t e) { a->epochs = e; }
int64_t sf__actor_restore_epoch(sf_actor *a) { return a->restore_epoch; }
void sf__actor_set_restore_epoch(sf_actor *a, int64_t e) { a->restore_epoch = e; }

static void drain(sf__job *j);
static void gather_put(gather *g, sf_actor *a, const sf_method_desc *md, int64_t idx, void *res,
                       const char *why, int64_t journal_seq, const char *out, size_t on);

/* Runs one message on a: init or a method, catching its errors. */
static void run_msg(sf_actor *a, msg *m) {
  const sf_method_desc *md = m->kind == MSG_INIT ? a->desc->init : m->m;
  int32_t size = m->kind == MSG_INIT ? 0 : type_size(md->result);
  _Alignas(16) unsigned char small[256];
  void *res = size <= (int32_t)sizeof small ? small : sf_alloc((size_t)size);
  memset(res, 0, (size_t)size);
  const char *why = NULL;
  int mode = m->kind == MSG_CALL ? journal_call_mode(a, m->seq) : SF__REPLAY_LIVE;
  /* What a journaled call prints is recorded with its result, so the sink
   * lives until the record is appended below (popped as soon as the
   * method returns: nothing printed after that on this thread is the
   * call's). */
  sf__capture cap = {.mode = SF__CAPTURE_OFF};
  if (m->kind == MSG_INIT && (a->preset || checkpoint_restore(a))) {
    /* The state came from a checkpoint: init does not run again. */
  } else if (a->broken) {
    why = a->broken;
  } else if (atomic_load_explicit(&a->stopped, memory_order_relaxed)) {
    why = "the actor was stopped (its group restarts elsewhere)";
  } else if (mode == SF__REPLAY_SKIP) {
    /* The state (from a checkpoint) already includes this call. */
  } else if (md) {
    sf_actor *saved = current_actor;
    current_actor = a;
    sf__capture_begin(&cap, mode == SF__REPLAY_RERUN ? SF__CAPTURE_MUTE
                            : m->seq >= 0          ? SF__CAPTURE_KEEP
                                                   : SF__CAPTURE_OFF);
    double t0 = sf__trace_now();
    bool was_muted = sf__print_mute;
    sf__buf *was_kept = sf__print_keep;
    /* Message j of the actor (init 0, its calls 1, 2, ... counted by the
     * state, so a restored or restarted actor goes on where it was). */
    uint64_t msg_no = m->kind == MSG_INIT ? 0 : (uint64_t)a->calls + 1;
    sf__rng was_rng = sf__rng_enter(sf__rng_mix(a->key, msg_no));
    sf__print_mute = was_muted || m->mute;
    if (m->keep)
      sf__print_keep = m->keep;
    if (!guarded(NULL, md->thunk, a->state, m->args, res))
      why = cause();
    sf__print_mute = was_muted;
    sf__print_keep = was_kept;
    sf__rng_cur = was_rng;
    sf__capture_end(&cap);
    current_actor = saved;
    sf__trace_event(md->name, m->kind == MSG_INIT ? "init" : "call", t0, 0, why);
    if (why && a->comm) /* members waiting for this one must not hang */
      sf__comm_abort(a->comm, a->rank, why);
  }
  if (mode != SF__REPLAY_LIVE && !why) /* the journal holds the answer */
    journal_call_result(a, m->seq, md, res);
  if (m->kind == MSG_INIT) {
    if (why && !a->broken) {
      char buf[SF__ERROR_MAX + 64];
      snprintf(buf, sizeof buf, "actor '%s' failed in init: %s", a->desc->name, why);
      a->broken = strdup(buf);
    }
    sf_value_release(md ? md->args : NULL, m->args);
  } else {
    if (mode != SF__REPLAY_SKIP) { /* a skipped call is already counted */
      a->calls++;
      a->epochs += m->all;
    }
    size_t on;
    const char *out = sf__capture_out(&cap, &on);
    if (m->f) {
      if (why) {
        future_fail(m->f, "call of '%s' failed: %s", md->name, why);
      } else {
        if (mode == SF__REPLAY_LIVE && m->seq >= 0)
          journal_call_done(a, m->seq, md, res, out, on);
        future_set(m->f, res);
      }
    } else if (m->g) {
      gather_put(m->g, a, md, m->idx, res, why, mode == SF__REPLAY_LIVE ? m->seq : -1, out, on);
    } else if (!why) {
      sf_value_release(md->result, res);
    }
    sf_value_release(md->args, m->args);
    SF__COUNT(calls_done);
    if (!why && mode != SF__REPLAY_SKIP)
      checkpoint_maybe(a, m->all);
  }
  sf__capture_free(&cap);
  if (res != small)
    sf_free(res);
  atomic_fetch_sub_explicit(a->pending, 1, memory_order_relaxed);
  sf_future *f = m->f;
  if (m->heap)
    sf_free(m);
  if (f)
    sf_release(f); /* the message's reference; may free m with it */
}

/* journal: a call's result with out[0..on), the lines it printed (its
 * own capture, or as the head printed another node's). */
static void journal_call(sf_actor *a, int64_t seq, const sf_method_desc *md, void *res,
                         const char *out, size_t on) {
  journal_call_done(a, seq, md, res, out, on);
}

/* Member idx of a g.all call is done: its value (res, moved in) or why it
 * failed.  The last member completes the call's future. */
static void gather_put(gather *g, sf_actor *a, const sf_method_desc *md, int64_t idx, void *res,
                       const char *why, int64_t journal_seq, const char *out, size_t on) {
  if (why) {
    pthread_mutex_lock(&g->lock);
    if (!g->error) {
      char buf[SF__ERROR_MAX + 64];
      snprintf(buf, sizeof buf, "call of '%s' on member %" PRId64 " failed: %s", md->name, idx,
               why);
      g->error = strdup(buf);
    }
    pthread_mutex_unlock(&g->lock);
  } else {
    if (journal_seq >= 0)
      journal_call(a, journal_seq, md, res, out, on);
    if (g->out)
      memcpy(sf__array_at(g->out, idx), res, (size_t)type_size(md->result));
    else
      sf_value_release(md->result, res);
  }
  if (atomic_fetch_sub(&g->left, 1) == 1) {
    if (g->error) {
      sf_release(g->out);
      g->f->error = g->error;
      future_finish(g->f, FUT_FAILED);
    } else {
      future_set(g->f, g->out ? (void *)&g->out : NULL);
    }
    sf_release(g->f);
    pthread_mutex_destroy(&g->lock);
    sf_free(g);
  }
}

void sf__actor_complete(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                        const char *why) {
  sf__actor_complete_out(a, md, s, res, why, NULL, 0);
}

void sf__actor_complete_out(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                            const char *why, const char *out, size_t on) {
  if (s->seq >= 0 && !why)
    a->calls = s->calls; /* the handle's count, for the journal's index */
  if (s->f) {
    if (why) {
      future_fail(s->f, "call of '%s' failed: %s", md->name, why);
    } else {
      if (s->seq >= 0)
        journal_call(a, s->seq, md, res, out, on);
      future_set(s->f, res);
    }
    sf_release(s->f);
  } else if (s->gather) {
    gather_put(s->gather, a, md, s->idx, res, why, s->seq, out, on);
  } else if (!why) {
    sf_value_release(md->result, res);
  }
  SF__COUNT(calls_done);
  atomic_fetch_sub_explicit(a->pending, 1, memory_order_relaxed);
}

#define DRAIN_BATCH 64

static void drain(sf__job *j) {
  sf_actor *a = (sf_actor *)((char *)j - offsetof(sf_actor, drain));
  for (int k = 0; k < DRAIN_BATCH; k++) {
    pthread_mutex_lock(&a->lock);
    msg *m = a->head;
    if (!m) {
      a->scheduled = false;
      pthread_mutex_unlock(&a->lock);
      sf_release(a); /* the drain's reference */
      return;
    }
    a->head = m->next;
    if (!a->head)
      a->tail = NULL;
    pthread_mutex_unlock(&a->lock);
    run_msg(a, m);
  }
  sf__sched_push_shared(&a->drain); /* let other actors run, then go on */
}

static void post(sf_actor *a, msg *m) {
  m->next = NULL;
  atomic_fetch_add_explicit(a->pending, 1, memory_order_relaxed);
  pthread_mutex_lock(&a->lock);
  if (a->tail)
    a->tail->next = m;
  else
    a->head = m;
  a->tail = m;
  bool start = !a->scheduled;
  a->scheduled = true;
  pthread_mutex_unlock(&a->lock);
  if (start) {
    sf_retain(a);
    sf__sched_push_shared(&a->drain);
  }
}

static msg *msg_new(const sf_type *args, void *src, bool retain_copy) {
  size_t asize = (size_t)type_size(args);
  msg *m = sf_alloc(sizeof(msg) + asize);
  memset(m, 0, sizeof *m);
  m->heap = true;
  m->seq = -1;
  if (asize && src) {
    memcpy(m->args, src, asize);
    if (retain_copy)
      sf_value_retain(args, m->args);
  } else if (asize) {
    memset(m->args, 0, asize);
  }
  return m;
}

/* An actor whose init is not posted yet (see post_init). */
static sf_actor *actor_alloc(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t size,
                             sf__comm *comm, uint64_t key) {
  sf__sched_start();
  sf_actor *a = sf_alloc(sizeof *a);
  memset(a, 0, sizeof *a);
  a->hdr = (sf_obj){1, SF_OBJ_ACTOR, 0};
  a->desc = d;
  a->rank = rank;
  a->size = size;
  a->comm = comm;
  a->pending = comm ? sf__comm_pending(comm, rank) : &a->own_pending;
  a->state = sf_alloc((size_t)type_size(d->state) + 1);
  memset(a->state, 0, (size_t)type_size(d->state));
  pthread_mutex_init(&a->lock, NULL);
  a->drain.run = drain;
  a->id = id;
  a->key = key;
  a->restore_epoch = -1;
  atomic_fetch_add_explicit(&sf__stats.actors, 1, memory_order_relaxed);
  return a;
}

/* Posts init, the first message: args (NULL: zeroes) are copied. */
static void post_init(sf_actor *a, void *args, bool retain_args, const sf_loc *loc) {
  const sf_actor_desc *d = a->desc;
  if (a->comm && a->rank == 0)
    checkpoint_plan_group(d, a->id, a->size); /* one common epoch for all */
  a->restore_epoch = a->comm ? checkpoint_group_epoch(d, a->id) : -1;
  msg *m = msg_new(d->init ? d->init->args : NULL, args, retain_args);
  m->kind = MSG_INIT;
  m->loc = loc;
  post(a, m);
}

sf_actor *sf_actor_spawn(const sf_actor_desc *d, void *args, const sf_loc *loc) {
  (void)demand_of(d->cpus, d->gpus, d->name, loc); /* the notice / --require-gpu */
  uint64_t key = sf__rng_child();
  sf_actor *a = actor_alloc(d, spawn_id(), 0, 1, NULL, key);
  if (place_spawn(&a, 1, args)) /* placed on a worker; it took args */
    return a;
  post_init(a, args, false, loc);
  return a;
}

sf_group *sf_group_spawn(const sf_actor_desc *d, int64_t n, void *args, const sf_loc *loc) {
  if (n < 0) {
    sf_value_release(d->init ? d->init->args : NULL, args);
    sf_runtime_error(loc, "spawn: group size must not be negative, got %" PRId64, n);
  }
  (void)demand_of(d->cpus, d->gpus, d->name, loc);
  sf_group *g = sf_alloc(sizeof *g);
  *g = (sf_group){.hdr = {1, SF_OBJ_GROUP, 0}, .desc = d, .n = n};
  g->members = sf__alloc_n((size_t)(n ? n : 1), sizeof *g->members);
  sf__comm *comm = n > 0 ? sf__comm_new(n) : NULL;
  int64_t id = spawn_id();
  uint64_t key = sf__rng_child(); /* the group's; member i's is mix(key, i) */
  for (int64_t i = 0; i < n; i++)
    g->members[i] = actor_alloc(d, id, i, n, i ? sf__comm_retain(comm) : comm,
                                sf__rng_mix(key, (uint64_t)i));
  /* A gang on workers (ractor.c), all or nothing; else here. */
  if (n > 0 && place_spawn(g->members, n, args))
    return g;
  /* Members post their init before this returns; restores run there and
   * read restore_epoch, so the plan must be made first: see post_init. */
  for (int64_t i = 0; i < n; i++)
    post_init(g->members[i], args, true, loc);
  sf_value_release(d->init ? d->init->args : NULL, args);
  return g;
}

/* A call message embedded in its future (one allocation), holding the
 * message's reference to it; the caller posts it. */
static msg *call_msg(const sf_method_desc *md, void *args, int64_t seq, const sf_loc *loc) {
  size_t asize = (size_t)type_size(md->args);
  msg *m;
  sf_future *f = future_alloc(md->result, sizeof(msg) + asize, (void **)&m);
  memset(m, 0, sizeof *m);
  m->kind = MSG_CALL;
  m->m = md;
  m->f = f;
  m->loc = loc;
  m->seq = seq;
  if (asize)
    memcpy(m->args, args, asize);
  sf_retain(f); /* the message's reference */
  SF__COUNT(calls);
  return m;
}

/* A call on actor a: a message for a local actor, a sink for a remote one. */
static sf_future *call_one(sf_actor *a, const sf_method_desc *md, void *args, int64_t seq,
                           const sf_loc *loc) {
  if (a->remote) {
    sf_future *f = future_alloc(md->result, 0, NULL);
    sf__sink sk = {f, NULL, 0, seq, 0};
    sf_retain(f); /* the sink's reference */
    SF__COUNT(calls);
    atomic_fetch_add_explicit(a->pending, 1, memory_order_relaxed);
    sf__place.call(a->remote, md, args, false, &sk);
    return f;
  }
  msg *m = call_msg(md, args, seq, loc);
  sf_future *f = m->f;
  post(a, m);
  return f;
}

sf_future *sf_actor_call(sf_actor *a, const sf_method_desc *m, void *args, const sf_loc *loc) {
  if (!a) {
    sf_value_release(m->args, args);
    sf_runtime_error(loc, "call of '%s' on an actor that was never spawned", m->name);
  }
  return call_one(a, m, args, journal_next(), loc);
}

sf_future *sf_group_call_all(sf_group *g, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  if (!g) {
    sf_value_release(m->args, args);
    sf_runtime_error(loc, "call of '%s' on a group that was never spawned", m->name);
  }
  bool has_result = m->result && m->result->kind != SF_VOID;
  const sf_type *rt = has_result ? sf__array_type(m->result) : NULL;
  sf_future *f = future_alloc(rt, 0, NULL);
  int64_t seq = journal_next();
  if (g->n == 0) {
    sf_array *out = has_result ? sf_array_new(m->result, 0, loc) : NULL;
    future_set(f, has_result ? (void *)&out : NULL);
    sf_value_release(m->args, args);
    return f;
  }
  gather *ga = sf_alloc(sizeof *ga);
  atomic_init(&ga->left, g->n);
  ga->f = f;
  ga->out = has_result ? sf_array_new(m->result, g->n, loc) : NULL;
  ga->error = NULL;
  pthread_mutex_init(&ga->lock, NULL);
  sf_retain(f); /* the gather's reference */
  for (int64_t i = 0; i < g->n; i++) {
    /* Every member gets its own copy of the argument block; the last one
     * takes over the caller's references, the others retain. */
    msg *mm = msg_new(m->args, args, i + 1 < g->n);
    if (g->members[i]->remote) {
      sf__sink sk = {NULL, ga, i, seq, 0};
      SF__COUNT(calls);
      atomic_fetch_add_explicit(g->members[i]->pending, 1, memory_order_relaxed);
      sf__place.call(g->members[i]->remote, m, mm->args, true, &sk);
      sf_free(mm);
      continue;
    }
    mm->kind = MSG_CALL;
    mm->m = m;
    mm->g = ga;
    mm->idx = i;
    mm->loc = loc;
    mm->seq = seq;
    mm->all = true;
    SF__COUNT(calls);
    post(g->members[i], mm);
  }
  return f;
}

sf_future *sf_group_call_any(sf_group *g, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  if (!g || g->n == 0) {
    sf_value_release(m->args, args);
    sf_runtime_error(loc, "call of '%s' on an empty group", m->name);
  }
  int64_t seq = journal_next();
  /* Least loaded member; ties go round robin so equal members share. */
  int64_t start = atomic_fetch_add_explicit(&g->next, 1, memory_order_relaxed);
  int64_t best = start % g->n, best_load = INT64_MAX;
  for (int64_t k = 0; k < g->n; k++) {
    int64_t i = (start + k) % g->n;
    int64_t load = atomic_load_explicit(g->members[i]->pending, memory_order_relaxed);
    if (load < best_load) {
      best = i;
      best_load = load;
      if (load == 0)
        break;
    }
  }
  /* On --resume a replayed call goes to the member that answered it. */
  best = journal_route_any(seq, g->members, g->n, best);
  return call_one(g->members[best], m, args, seq, loc);
}

sf_future *sf_group_call_one(sf_group *g, int64_t i, const sf_method_desc *m, void *args,
                             const sf_loc *loc) {
  int64_t n = g ? g->n : 0;
  if ((uint64_t)i >= (uint64_t)n) {
    sf_value_release(m->args, args);
    sf_index_fail(i, n, loc);
  }
  return call_one(g->members[i], m, args, journal_next(), loc);
}

int64_t sf_group_len(sf_group *g) { return g ? g->n : 0; }

int64_t sf_group_rank(void) { return current_actor ? current_actor->rank : 0; }
int64_t sf_group_size(void) { return current_actor ? current_actor->size : 1; }

/* ------------------------------------------------ actors of a worker */

void sf__actor_set_remote(sf_actor *a, struct sf__ractor *r) { a->remote = r; }
void sf__actor_stop(sf_actor *a) { atomic_store(&a->stopped, true); }

sf_actor *sf__actor_spawn_at(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t size,
                             sf__comm *comm, void *init_args, void *state, int64_t calls,
                             int64_t epochs, uint64_t key) {
  sf_actor *a = actor_alloc(d, id, rank, size, comm, key);
  if (state) {
    memcpy(a->state, state, (size_t)type_size(d->state));
    a->preset = true;
    a->calls = a->restored = calls;
    a->epochs = epochs;
  }
  post_init(a, state ? NULL : init_args, false, NULL);
  return a;
}

sf_future *sf__actor_post(sf_actor *a, const sf_method_desc *md, void *args, bool all,
                          bool mute, sf__buf *keep) {
  msg *m = call_msg(md, args, -1, NULL);
  m->all = all;
  m->mute = mute;
  m->keep = keep;
  sf_future *f = m->f;
  post(a, m);
  return f;
}
