/*
 * task_internal.h — what the scheduler's call files share and no other
 * file sees: the future's layout and state bits (future.c), a call's
 * resource demand (resources.c), running a thunk with its errors caught
 * (task.c) and the actor running on this thread (actor.c).  sched.h holds
 * what these files give the rest of the runtime; this header is included
 * by future.c, resources.c, task.c and actor.c only.
 *
 * Key design choice: the helpers on every call's path (allocating and
 * completing a future, the journal's sequence number) are static inline
 * here, so splitting one file into four costs a tiny task no call it did
 * not make before; everything else is an ordinary function of the file
 * that owns it, a section per file.
 */
#ifndef SF_TASK_INTERNAL_H
#define SF_TASK_INTERNAL_H

#include <stdatomic.h>
#include <string.h>

#include "sched.h"

/* Awaits and throttled submits run tasks inline on the caller's stack up
 * to this depth (future.c, task.c). */
#define MAX_INLINE_DEPTH 128

static inline int32_t type_size(const sf_type *t) {
  return t && t->kind != SF_VOID ? t->size : 0;
}
static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The journal's sequence number of main's next call, or -1 (task.c and
 * actor.c: every call of main takes one; sf__durable in sched.h). */
static inline int64_t journal_next(void) {
  return sf__durable.next ? sf__durable.next() : -1;
}

/* ---------------------------------------------------------- future.c */

enum { FUT_PENDING = 0, FUT_DONE = 1, FUT_FAILED = 2, FUT_STATUS = 3, FUT_WAITERS = 4, FUT_LOCK = 8,
       FUT_WANTED = 16, FUT_HELD = 32 /* objects.c: see future_want */ };

struct task_rec;

struct sf_future {
  sf_obj hdr;
  _Atomic uint32_t state;
  int32_t flags;
  const sf_type *type; /* NULL: no value */
  char *error;         /* the message of a failed future (heap) */
  struct task_rec *task; /* the task making the value, if any */
  struct task_rec *parked; /* tasks waiting for this value to start (FUT_LOCK) */
  sf__fwaiter *notify;     /* objects.c: told when the value exists (FUT_LOCK) */
  _Alignas(16) unsigned char value[];
};

/* A pending future with `extra` more bytes after its value, 16-aligned. */
static inline sf_future *sf__future_alloc(const sf_type *t, size_t extra, void **extra_out) {
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

/* Completes f with status (FUT_DONE, FUT_FAILED): wakes its waiters,
 * schedules the tasks parked on it and tells its notify list. */
void sf__future_finish(sf_future *f, uint32_t status);

/* Completes f with the result at res (moved in). */
static inline void sf__future_set(sf_future *f, void *res) {
  if (f->type && res)
    memcpy(f->value, res, (size_t)f->type->size);
  sf__future_finish(f, FUT_DONE);
}

/* Fails f with the formatted message. */
void sf__future_fail(sf_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Until f is complete: runs its task here if nobody started it, else
 * sleeps (helping the pool unless an actor's method waits). */
void sf__future_wait(sf_future *f);
/* Parks task t on pending future f: t starts when f completes.  False if
 * f is already complete. */
bool sf__future_park(sf_future *f, struct task_rec *t, struct task_rec **link);

/* ------------------------------------------------------- resources.c */

/* What one call asks for, clamped to what this run has. */
typedef struct sf__demand {
  int32_t cpus;   /* extra CPU slots (beyond the one the thread is) */
  int32_t gpu;    /* thousandths of one GPU (<= 1000), or whole GPUs * 1000 */
} sf__demand;

/* Most calls ask for nothing: the three calls below test that inline and
 * reach resources.c (its lock) only for a call that asks for something. */
sf__demand sf__demand_ask(double cpus, double gpus, const char *name, const sf_loc *loc);
bool sf__resources_take_some(sf__demand d, int32_t *dev, sf__job *j, void *keep);
void sf__resources_give_some(sf__demand d, int32_t dev);

/* The demand of @cpus(cpus) @gpus(gpus) on this machine; the notice (or
 * --require-gpu's error, at loc) when it asks for a GPU there is none of. */
static inline sf__demand sf__demand_of(double cpus, double gpus, const char *name,
                                       const sf_loc *loc) {
  if (!(gpus > 0) && !(cpus > 1))
    return (sf__demand){0, 0};
  return sf__demand_ask(cpus, gpus, name, loc);
}
/* Takes the resources of d if they are free now (sets *dev to the GPU);
 * otherwise, in the same hold of the lock, puts j on the waiting list with
 * a reference to keep, to be queued again at the next give-back. */
static inline bool sf__resources_take(sf__demand d, int32_t *dev, sf__job *j, void *keep) {
  *dev = -1;
  return (d.cpus == 0 && d.gpu == 0) || sf__resources_take_some(d, dev, j, keep);
}
/* Gives them back; every job that waited for resources is queued again. */
static inline void sf__resources_give(sf__demand d, int32_t dev) {
  if (d.cpus != 0 || d.gpu != 0)
    sf__resources_give_some(d, dev);
}

/* ------------------------------------------------------------ task.c */

/* Runs a task thunk (task) or a method thunk (method, on state) with
 * runtime errors caught: false (message in sf__error_message) when it
 * failed. */
bool sf__guarded(void (*task)(void *, void *), void (*method)(void *, void *, void *),
                 void *state, void *args, void *res);
/* The message of an error caught on this thread, without the
 * "runtime error: " marker: "file:line:col: fail: negative". */
const char *sf__caught(void);
/* An await's inline run of t (future.c): true if this thread ran it. */
bool sf__task_claim_inline(struct task_rec *t);
/* The tasks parked on a future that completed, scheduled (future.c). */
void sf__tasks_unparked(struct task_rec *list);

/* ----------------------------------------------------------- actor.c */

/* The actor whose method (or init) runs on this thread, or NULL. */
extern _Thread_local sf_actor *sf__running_actor;

#endif
