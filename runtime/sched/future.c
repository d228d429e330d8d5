/*
 * future.c — futures: the value of a task or actor call that may not
 * exist yet, awaited by any thread.
 *
 * Key design choice: a future is a 32-bit state word (pending, done,
 * failed, plus a "someone sleeps here" bit) that awaiting threads wait on
 * with a futex, and the value inline after it.  Completing is one atomic
 * exchange; the wake-up system call happens only when a waiter went to
 * sleep.  An await of a task nobody has started runs it on the spot
 * (task.c), which makes fork-join recursion and chains of futures cheap;
 * a task handed a pending future parks on it and starts when the value
 * exists.  The layout and the inline helpers are in task_internal.h.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "task_internal.h"
#include "metrics.h"

static void notify_all(sf__fwaiter *w, bool done) {
  while (w) {
    sf__fwaiter *next = w->next;
    w->fn(w, done);
    w = next;
  }
}

static void future_dtor(sf_obj *o) {
  sf_future *f = (sf_future *)o;
  /* objects.c: a value a worker still holds that nobody here can
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

__attribute__((constructor)) static void future_init(void) {
  sf__obj_dtor[SF_OBJ_FUTURE] = future_dtor;
}

void sf__future_finish(sf_future *f, uint32_t status) {
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
    sf__tasks_unparked(list);
  }
  if (f->notify) {
    sf__fwaiter *w = f->notify;
    f->notify = NULL;
    notify_all(w, true);
  }
}

/* ---- objects.c: a future whose value a worker holds (HELD) is
 * fetched only once something wants it (WANTED: an await, or a task
 * parked on it).  The two marks are set by atomic or; whichever comes
 * second asks objects.c for the value, so exactly one does. */
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
/* ---- end of objects.c */

bool sf__future_park(sf_future *f, struct task_rec *t, struct task_rec **link) {
  future_want(f);
  if (!future_lock(f))
    return false;
  *link = f->parked;
  f->parked = t;
  atomic_fetch_and_explicit(&f->state, ~(uint32_t)FUT_LOCK, memory_order_release);
  return true;
}

void sf__future_fail(sf_future *f, const char *fmt, ...) {
  char buf[SF__ERROR_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  f->error = strdup(buf);
  sf__metric_event(buf); /* the dashboard's recent errors */
  sf__future_finish(f, FUT_FAILED);
}

sf_future *sf_future_done(const sf_type *t, void *value) {
  sf_future *f = sf__future_alloc(t, 0, NULL);
  sf__future_set(f, value);
  return f;
}

sf_future *sf__future_failed(const sf_type *t, const char *message) {
  sf_future *f = sf__future_alloc(t, 0, NULL);
  sf__future_fail(f, "%s", message);
  return f;
}

bool sf__future_ready(sf_future *f) {
  return (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS) != 0;
}

void sf__future_wait(sf_future *f) {
  if (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS)
    return;
  future_want(f);
  /* The awaited task has not started: run it here, now.  It cannot depend
   * on the waiter, and this is what makes fork-join recursion and chains
   * of futures cheap.  The depth bound keeps the stack small. */
  if (f->task && sf__inline_depth < MAX_INLINE_DEPTH && sf__task_claim_inline(f->task) &&
      (atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS))
    return;
  sf__stats_wait_begin();
  sf__sched_wait(&f->state, FUT_STATUS, FUT_WAITERS, sf__running_actor == NULL);
  sf__stats_wait_end();
}

void sf_future_get(sf_future *f, void *out, const sf_loc *loc) {
  if (!f)
    sf_runtime_error(loc, "await on a future that was never set");
  sf__future_wait(f);
  if ((atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS) == FUT_FAILED)
    sf_runtime_error(loc, "%s", f->error ? f->error : "failed");
  if (!f->type || !out)
    return;
  memcpy(out, f->value, (size_t)f->type->size);
  sf_value_retain(f->type, out);
}

sf_str *sf_future_error(sf_future *f, const sf_loc *loc) {
  if (!f)
    sf_runtime_error(loc, "failure() of a future that was never set");
  sf__future_wait(f);
  if ((atomic_load_explicit(&f->state, memory_order_acquire) & FUT_STATUS) != FUT_FAILED)
    return sf_str_new("", 0);
  const char *e = f->error ? f->error : "failed";
  return sf_str_new(e, (int64_t)strlen(e));
}

sf_array *sf_future_get_all(sf_array *futures, const sf_type *t, const sf_loc *loc) {
  int64_t n = futures ? futures->len : 0;
  sf_future **fs = n ? futures->data : NULL;
  /* Every future is waited for before an error is raised, so the first
   * error reported is the first in order (a failed or unset future) and
   * no half-built array is left behind.  Held values (objects.c objects)
   * are all asked for before the first wait, so they come in parallel.
   * One pass waits and copies: a cold array of 200,000 futures is read
   * twice, not three times (each future its own cache line). */
  for (int64_t i = 0; i < n; i++)
    if (fs[i])
      future_want(fs[i]);
  sf_array *out = sf_array_new(t, n, loc);
  int64_t bad = -1;
  for (int64_t i = 0; i < n; i++) {
    if (!fs[i]) {
      if (bad < 0)
        bad = i;
      continue;
    }
    sf__future_wait(fs[i]);
    if (bad >= 0)
      continue;
    if ((atomic_load(&fs[i]->state) & FUT_STATUS) == FUT_FAILED)
      bad = i;
    else
      sf_future_get(fs[i], sf__array_at(out, i), loc);
  }
  if (bad >= 0) {
    sf_release(out);
    if (!fs[bad])
      sf_runtime_error(loc, "await on a future that was never set");
    sf_runtime_error(loc, "%s", fs[bad]->error ? fs[bad]->error : "failed");
  }
  return out;
}

/* ------------------------------------------------- for the cluster layer */

const sf_type *sf__future_type(sf_future *f) { return f->type; }

void sf__future_reject(sf_future *f, const char *message) {
  atomic_fetch_add_explicit(&sf__stats.tasks_failed, 1, memory_order_relaxed);
  sf__future_fail(f, "%s", message);
}

bool sf__future_wait_result(sf_future *f, void *out, char *err, size_t errlen) {
  sf__future_wait(f);
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
