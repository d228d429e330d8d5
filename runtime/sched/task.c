/*
 * task.c — task calls on the thread pool (sched.c): the call record, its
 * attempts, retries and @timeout, dataflow start on future arguments, and
 * the hooks through which the layers above journal and place calls.
 *
 * Key design choices:
 *  - One allocation per call.  A task call allocates its future, the slot
 *    for the result, the task record and a copy of the argument block as
 *    one block; the future's reference count keeps it alive (the running
 *    task holds one reference).  Past the throttle a call that can only
 *    run here runs on the spot with its record on the stack.
 *  - Retries run on the same worker, at once, with the same argument block
 *    (thunks borrow their arguments).  @timeout cannot stop a thread, so an
 *    attempt that overruns is abandoned: the watchdog gives the task to a
 *    new attempt (or fails it), the pool gets a spare thread, and whatever
 *    the old attempt returns later is dropped.
 * Futures are in future.c, @cpus/@gpus in resources.c, actors in actor.c;
 * what they share is in task_internal.h.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "task_internal.h"

/* ----------------------------------------------------------- hooks */

/* The layers above install these before any thread (docs/architecture.md,
 * "Hooks"): durability its journal and checkpoints (sf__durable_install),
 * the cluster its placement on other nodes (sf__cluster_install).  With
 * none installed (a unit test of this layer alone) nothing is journaled,
 * checkpointed or placed elsewhere.  A held future or a remote actor
 * exists only once the placer placed something, so those calls need no
 * test.  Each wrapper lives in the file that calls it (actor.c has the
 * actors'); journal_next, which both call, is in task_internal.h. */
sf__durable_hooks sf__durable;
sf__placer sf__place;

static sf_future *journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc) {
  return sf__durable.task_replay ? sf__durable.task_replay(seq, d, loc) : NULL;
}
static void journal_task_done(int64_t seq, const sf_task_desc *d, void *res, const char *out,
                              size_t n) {
  if (sf__durable.task_done)
    sf__durable.task_done(seq, d, res, out, n);
}
static bool place_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq,
                       uint64_t key) {
  return sf__place.task && sf__place.task(d, args, f, seq, key);
}

/* ------------------------------------------------------ caught errors */

_Thread_local int sf__task_depth;

/* Kept out of line so that no caller variable lives across the setjmp. */
int32_t (*sf__call_begin_hook)(void);
void (*sf__call_end_hook)(int32_t mark);
void (*sf__call_fail_hook)(int32_t mark);

__attribute__((noinline)) bool sf__guarded(void (*task)(void *, void *),
                                           void (*method)(void *, void *, void *),
                                           void *state, void *args, void *res) {
  jmp_buf jb, *saved = sf__error_jmp;
  sf_frame *saved_frames = sf__error_frames;
  int depth = sf__task_depth;
  int32_t mark = sf__call_begin_hook ? sf__call_begin_hook() : 0;
  sf__error_jmp = &jb;
  sf__error_frames = sf_frames; /* the call's locals are released on an error */
  if (setjmp(jb) != 0) {
    sf__error_jmp = saved;
    sf__error_frames = saved_frames;
    sf__task_depth = depth;
    if (sf__call_fail_hook)
      sf__call_fail_hook(mark);
    return false;
  }
  sf__task_depth++;
  if (method)
    method(state, args, res);
  else
    task(args, res);
  /* The GPU's deferred kernel checks of this call (gpu.c): a failure found
   * now is the call's own. */
  if (sf__call_end_hook)
    sf__call_end_hook(mark);
  sf__task_depth--;
  sf__error_jmp = saved;
  sf__error_frames = saved_frames;
  return true;
}

/* The message of an error caught on this thread, without the
 * "runtime error: " marker: "file:line:col: fail: negative". */
const char *sf__caught(void) {
  static const char mark[] = "runtime error: ";
  char *m = sf__error_message, *p = strstr(m, mark);
  if (p)
    memmove(p, p + sizeof mark - 1, strlen(p + sizeof mark - 1) + 1);
  return m;
}

/* -------------------------------------------------------------- tasks */

#define THROTTLE 64 /* queued tasks per pool thread before a submitter runs its own */

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
  sf__demand need;
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
static sf_future *task_submit(const sf_task_desc *d, void *args, int64_t seq, sf__demand need,
                              bool may_go_remote, uint64_t key, const sf_loc *loc);

/* A deque entry holds a reference to the future (the block it lives in):
 * the task may have run inline and finished long before the entry is
 * popped. */
static void run_task_job(sf__job *j) {
  task_rec *t = TASK_FROM_JOB(j);
  sf_future *f = t->f;
  sf__sched_batch();
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

bool sf__task_claim_inline(task_rec *t) {
  /* Not a task with a deadline: an abandoned attempt would hold the
   * waiter hostage until it returned.  Nor one that reserves @cpus or
   * @gpus: run here it would hold none of them, so a waiter (main awaiting
   * the first of several such calls) ran one more than the pool has room
   * for; it waits for the pool to place it instead. */
  if (t->d->timeout > 0 || t->need.cpus != 0 || t->need.gpu != 0 ||
      atomic_load_explicit(&t->claimed, memory_order_relaxed) ||
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
        sf__future_wait(dep);
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
  /* When they are not free, t->again waits for a give-back, holding a
   * reference to t->f. */
  if (!sf__resources_take(t->need, &dev, &t->again, t->f))
    return;
  int32_t size = type_size(d->result);
  _Alignas(16) unsigned char small[256];
  void *res = size <= (int32_t)sizeof small ? small : sf_alloc((size_t)size);
  sf_actor *saved_actor = sf__running_actor;
  int64_t saved_attempt = sf__attempt;
  int32_t saved_gpu = sf__current_gpu;
  /* A journaled call (or a --nodes main-level call kept for the head's
   * journal, t->out) owns its lines: its own sink, never the enclosing
   * call's, even when it runs inline inside that call. */
  sf__capture cap;
  sf__capture_begin(&cap, t->seq >= 0 || t->out ? SF__CAPTURE_KEEP : SF__CAPTURE_OFF);
  /* A --nodes attempt (dispatch.c): its lines are kept per attempt, and only
   * the successful one's reach t->out (an abandoned attempt never writes
   * there: its caller may be gone). */
  sf__buf *saved_keep = sf__print_keep;
  sf__buf keep;
  if (t->out) {
    sf__buf_init(&keep, NULL, 0);
    sf__print_keep = &keep;
  }
  sf__running_actor = NULL;
  sf__current_gpu = dev;
  sf__rng saved_rng = sf__rng_cur;
  bool saved_no_grad = sf__no_grad; /* std.nn's switch: every call starts recording */
  sf__no_grad = false;
  bool saved_autocast = sf__autocast; /* and in f32 */
  sf__autocast = false;
  int32_t saved_ckpt = sf__nn_ckpt_depth; /* outside any nn.checkpoint's forward */
  sf__nn_ckpt_depth = 0;
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
    bool ok = sf__guarded(d->thunk, NULL, NULL, t->args, res);
    SF__COUNT(finished);
    if (deadline && !sf__watch_end(deadline))
      sf_release(t->f);
    const char *why = ok ? NULL : sf__caught();
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
        sf__future_set(t->f, res);
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
      sf__future_fail(t->f, "task '%s' failed after %d %s: %s", d->name, (int)attempt + 1,
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
  sf__running_actor = saved_actor;
  sf__attempt = saved_attempt;
  sf__current_gpu = saved_gpu;
  sf__rng_cur = saved_rng;
  sf__no_grad = saved_no_grad;
  sf__autocast = saved_autocast;
  sf__nn_ckpt_depth = saved_ckpt;
  if (res != small)
    sf_free(res);
  sf__resources_give(t->need, dev);
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
  sf__future_fail(t->f, "task '%s' failed after %d %s: timed out after %gs (@timeout)",
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
  sf__demand need = sf__demand_of(d->cpus, d->gpus, d->name, loc);
  sf__value_detach(d->args, args); /* tensors: the call's own, as on another node */
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
static bool run_on_the_spot(const sf_task_desc *d, sf__demand need, bool may_go_remote,
                            size_t asize) {
  return d->timeout <= 0 && need.cpus == 0 && need.gpu == 0 && asize <= INLINE_ARGS &&
         sf__inline_depth < MAX_INLINE_DEPTH && (!may_go_remote || !sf__options.nodes) &&
         sf__sched_queue_at_least(THROTTLE * (int64_t)sf__pool_size()) && !future_args(d);
}

/* Fills a task record for f: a first attempt not yet claimed (claimed 1:
 * one that only the caller will run), arguments copied in. */
static void task_rec_init(task_rec *t, sf_future *f, const sf_task_desc *d, void *args,
                          size_t asize, int64_t seq, sf__demand need, int32_t claimed,
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
static sf_future *task_submit(const sf_task_desc *d, void *args, int64_t seq, sf__demand need,
                              bool may_go_remote, uint64_t key, const sf_loc *loc) {
  size_t asize = (size_t)type_size(d->args);
  task_rec *t;
  if (run_on_the_spot(d, need, may_go_remote, asize)) {
    _Alignas(16) unsigned char rec[sizeof(task_rec) + INLINE_ARGS];
    t = (task_rec *)rec;
    sf_future *f = sf__future_alloc(d->result, 0, NULL);
    task_rec_init(t, f, d, args, asize, seq, need, 1, key, loc);
    f->hdr.rc = 2; /* the caller's and the attempt's (task_args_done) */
    SF__COUNT(tasks);
    sf__inline_depth++;
    run_task(t);
    sf__inline_depth--;
    return f;
  }
  sf_future *f = sf__future_alloc(d->result, sizeof(task_rec) + asize, (void **)&t);
  task_rec_init(t, f, d, args, asize, seq, need, 0, key, loc);
  f->task = t;
  /* Three references: the caller's, the task's (until its last attempt
   * ends) and the deque entry's. */
  f->hdr.rc = 3; /* not yet shared: a plain store */
  SF__COUNT(tasks);
  if (may_go_remote && place_task(d, t->args, f, seq, key)) {
    /* Another node runs it; dispatch.c copied what it needs and completes
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
      if (dep && sf__future_park(dep, t, &t->next_parked))
        return;
    }
  if (t->d->timeout > 0) {
    sf__sched_push_shared(&t->job); /* never run by a helping main thread */
  } else if (sf__sched_queue_at_least(THROTTLE * (int64_t)sf__pool_size()) &&
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

void sf__tasks_unparked(task_rec *list) {
  while (list) {
    task_rec *next = list->next_parked;
    list->next_parked = NULL;
    task_schedule(list); /* its other futures may still be pending */
    list = next;
  }
}

sf_future *sf__task_submit_local(const sf_task_desc *d, void *args, uint64_t key) {
  sf__demand need = {0, 0};
  return task_submit(d, args, -1, need, false, key, NULL);
}

/* dispatch.c, worker_tasks.c (multi-node): the same, starting at attempt `first`. */
sf_future *sf__task_submit_attempt(const sf_task_desc *d, void *args, int32_t first,
                                   sf__buf *out, uint64_t key) {
  submit_first_attempt = first;
  submit_out = out;
  sf_future *f = sf__task_submit_local(d, args, key);
  submit_first_attempt = 0;
  submit_out = NULL;
  return f;
}

void sf__future_resolve_out(sf_future *f, void *value, const char *out, size_t n) {
  if (f->task && f->task->seq >= 0)
    journal_task_done(f->task->seq, f->task->d, value, out, n);
  SF__COUNT(tasks_done);
  sf__future_set(f, value);
}

void sf__future_resolve(sf_future *f, void *value) { sf__future_resolve_out(f, value, NULL, 0); }
