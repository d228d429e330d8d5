/*
 * actor.c — actors and groups on the thread pool (sched.c): spawning,
 * mailboxes, running one message at a time, g.all gathers and g.any
 * routing, and the worker's side of actors a head placed here.
 *
 * Key design choices:
 *  - An actor is a mailbox plus a "scheduled" flag: the first message sent
 *    to an idle actor puts its drain job on the shared queue; the drain
 *    runs messages one at a time in the order they were sent, so methods
 *    never run concurrently and need no locks.  `init` is the first message.
 *  - A call is one allocation: its message lives in the block of its
 *    future (future.c), as a task's record does.
 *  - A method that fails fails its call; the actor lives on (as in Ray).
 *    A failed init breaks the actor: every later call fails naming it.
 *  - Durability is behind task.c's hooks (sf__durable): a message's run
 *    asks the journal how to treat the call before it runs and records it
 *    after, and a checkpoint may follow; this file holds their wrappers.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "task_internal.h"

/* ----------------------------------------------------------- hooks */

/* The actors' half of sf__durable and sf__place (task.c): empty members
 * mean no journal, no checkpoints, nothing placed elsewhere. */
static int64_t spawn_id(void) { return sf__durable.spawn_id ? sf__durable.spawn_id() : -1; }
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
static bool place_spawn(sf_actor **members, int64_t n, void *args) {
  return sf__place.spawn && sf__place.spawn(members, n, args);
}

/* ------------------------------------------------------------- actors */

_Thread_local sf_actor *sf__running_actor;

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
  struct sf__ractor *remote; /* head: the actor runs on a worker (ractor_head.c) */
  bool preset;               /* the state came with it (a restart): no init */
  bool here;                 /* a group member counted in members_here */
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

/* The group members placed in this process and not freed: the callers
 * that may multiply at once, among whom the products share the pool
 * (blas.c's gemm_split).  Counted when the runtime posts a member's init,
 * which it does whether init then runs or the member is restored from a
 * checkpoint (--resume) or shipped with its state (a restart), so a
 * resumed group shares the pool as the fresh one did. */
static _Atomic int64_t members_here;

int64_t sf__group_members_here(void) { return atomic_load_explicit(&members_here, memory_order_relaxed); }

static void actor_dtor(sf_obj *o) {
  sf_actor *a = (sf_actor *)o;
  if (a->here)
    atomic_fetch_sub_explicit(&members_here, 1, memory_order_relaxed);
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

__attribute__((constructor)) static void actor_init(void) {
  sf__obj_dtor[SF_OBJ_ACTOR] = actor_dtor;
  sf__obj_dtor[SF_OBJ_GROUP] = group_dtor;
}

sf_actor *sf__current_actor(void) { return sf__running_actor; }
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
                       const char *why, int64_t journal_seq, const char *out, size_t on,
                       sf_actor *drop);

/* One message's run, as its steps below hand it on. */
typedef struct run {
  const sf_method_desc *md; /* init or the called method (NULL: no init) */
  int mode;                 /* SF__REPLAY_*: how the journal treats the call */
  const char *why;          /* NULL, or why the message failed */
  void *res;                /* the result slot: small, or on the heap */
  sf__capture cap;          /* a journaled call's lines, until its record */
  bool unloaded;            /* its place in the actor's load given back */
  _Alignas(16) unsigned char small[256];
} run;

/* Begin call hooks: the result slot, and how the journal treats the call
 * (live, or on --resume answered from it: skipped when the restored
 * state holds it already, else re-run muted). */
static void run_begin(sf_actor *a, msg *m, run *r) {
  r->md = m->kind == MSG_INIT ? a->desc->init : m->m;
  int32_t size = m->kind == MSG_INIT ? 0 : type_size(r->md->result);
  r->res = size <= (int32_t)sizeof r->small ? r->small : sf_alloc((size_t)size);
  memset(r->res, 0, (size_t)size);
  r->why = NULL;
  r->unloaded = false;
  r->mode = m->kind == MSG_CALL ? journal_call_mode(a, m->seq) : SF__REPLAY_LIVE;
  /* What a journaled call prints is recorded with its result, so the sink
   * lives until the record is appended (run_end; popped as soon as the
   * method returns: nothing printed after that on this thread is the
   * call's). */
  r->cap = (sf__capture){.mode = SF__CAPTURE_OFF};
}

/* Whether the method runs; why not, when that fails the message.  An init
 * whose state came from a checkpoint (restored here, or shipped with a
 * restart) does not run again, nor does a call the state already holds. */
static bool run_admitted(sf_actor *a, msg *m, run *r) {
  if (m->kind == MSG_INIT && (a->preset || checkpoint_restore(a)))
    return false;
  if (a->broken) {
    r->why = a->broken;
    return false;
  }
  if (atomic_load_explicit(&a->stopped, memory_order_relaxed)) {
    r->why = "the actor was stopped (its group restarts elsewhere)";
    return false;
  }
  return r->mode != SF__REPLAY_SKIP && r->md;
}

/* Runs the method with this thread set up as the call's: the running
 * actor, the call's output sink (kept for the journal, or muted on a
 * replay), print muting and keeping for a worker's call, and the call's
 * random stream; all restored after.  Then its trace event, and a failed
 * member aborts its group's collectives. */
static void run_method(sf_actor *a, msg *m, run *r) {
  sf_actor *saved = sf__running_actor;
  sf__running_actor = a;
  sf__capture_begin(&r->cap, r->mode == SF__REPLAY_RERUN ? SF__CAPTURE_MUTE
                             : m->seq >= 0               ? SF__CAPTURE_KEEP
                                                         : SF__CAPTURE_OFF);
  double t0 = sf__trace_now();
  bool was_muted = sf__print_mute;
  sf__buf *was_kept = sf__print_keep;
  /* Message j of the actor (init 0, its calls 1, 2, ... counted by the
   * state, so a restored or restarted actor goes on where it was). */
  uint64_t msg_no = m->kind == MSG_INIT ? 0 : (uint64_t)a->calls + 1;
  sf__rng was_rng = sf__rng_enter(sf__rng_mix(a->key, msg_no));
  bool was_no_grad = sf__no_grad; /* std.nn's switch: every call starts recording */
  sf__no_grad = false;
  bool was_autocast = sf__autocast; /* and in f32 */
  sf__autocast = false;
  int32_t was_ckpt = sf__nn_ckpt_depth; /* outside any nn.checkpoint's forward */
  sf__nn_ckpt_depth = 0;
  sf__print_mute = was_muted || m->mute;
  if (m->keep)
    sf__print_keep = m->keep;
  if (!sf__guarded(NULL, r->md->thunk, a->state, m->args, r->res))
    r->why = sf__caught();
  sf__print_mute = was_muted;
  sf__print_keep = was_kept;
  sf__rng_cur = was_rng;
  sf__no_grad = was_no_grad;
  sf__autocast = was_autocast;
  sf__nn_ckpt_depth = was_ckpt;
  sf__capture_end(&r->cap);
  sf__running_actor = saved;
  sf__trace_event(r->md->name, m->kind == MSG_INIT ? "init" : "call", t0, 0, r->why);
  if (r->why && a->comm) /* members waiting for this one must not hang */
    sf__comm_abort(a->comm, a->rank, r->why);
}

/* An init's end: a failure breaks the actor for every later call. */
static void init_end(sf_actor *a, msg *m, run *r) {
  if (r->why && !a->broken) {
    char buf[SF__ERROR_MAX + 64];
    snprintf(buf, sizeof buf, "actor '%s' failed in init: %s", a->desc->name, r->why);
    a->broken = strdup(buf);
  }
  sf_value_release(r->md ? r->md->args : NULL, m->args);
}

/* A call's end: counted, its result to its future (journaled first when
 * it ran live) or its gather's slot, or dropped; a checkpoint may follow. */
static void call_end(sf_actor *a, msg *m, run *r) {
  const sf_method_desc *md = r->md;
  if (r->mode != SF__REPLAY_SKIP) { /* a skipped call is already counted */
    a->calls++;
    a->epochs += m->all;
  }
  size_t on;
  const char *out = sf__capture_out(&r->cap, &on);
  /* Out of the load before the answer: a caller that has it and calls
   * g.any next must see this member idle (tests/run/actors
   * group_all_any_one: ties round robin). */
  atomic_fetch_sub_explicit(a->pending, 1, memory_order_relaxed);
  r->unloaded = true;
  if (m->f) {
    if (r->why) {
      sf__future_fail(m->f, "call of '%s' failed: %s", md->name, r->why);
    } else {
      if (r->mode == SF__REPLAY_LIVE && m->seq >= 0)
        journal_call_done(a, m->seq, md, r->res, out, on);
      sf__future_set(m->f, r->res);
    }
  } else if (m->g) {
    gather_put(m->g, a, md, m->idx, r->res, r->why, r->mode == SF__REPLAY_LIVE ? m->seq : -1,
               out, on, NULL);
  } else if (!r->why) {
    sf_value_release(md->result, r->res);
  }
  sf_value_release(md->args, m->args);
  SF__COUNT(calls_done);
  if (!r->why && r->mode != SF__REPLAY_SKIP)
    checkpoint_maybe(a, m->all);
}

/* End call hooks: a replayed call takes its answer (and prints its
 * lines) from the journal, then the init's or the call's end. */
static void run_end(sf_actor *a, msg *m, run *r) {
  if (r->mode != SF__REPLAY_LIVE && !r->why) /* the journal holds the answer */
    journal_call_result(a, m->seq, r->md, r->res);
  if (m->kind == MSG_INIT)
    init_end(a, m, r);
  else
    call_end(a, m, r);
}

/* The message is done with: its sink, its result slot, its place in the
 * actor's load, and the message itself. */
static void run_free(sf_actor *a, msg *m, run *r) {
  sf__capture_free(&r->cap);
  if (r->res != r->small)
    sf_free(r->res);
  if (!r->unloaded)
    atomic_fetch_sub_explicit(a->pending, 1, memory_order_relaxed);
  sf_future *f = m->f;
  if (m->heap)
    sf_free(m);
  if (f)
    sf_release(f); /* the message's reference; may free m with it */
}

/* Runs one message on a: init or a method, catching its errors. */
static void run_msg(sf_actor *a, msg *m) {
  run r;
  run_begin(a, m, &r);
  if (run_admitted(a, m, &r))
    run_method(a, m, &r);
  run_end(a, m, &r);
  run_free(a, m, &r);
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
                       const char *why, int64_t journal_seq, const char *out, size_t on,
                       sf_actor *drop) {
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
  sf_release(drop); /* before the waiter wakes: see sf__actor_complete_drop */
  if (atomic_fetch_sub(&g->left, 1) == 1) {
    if (g->error) {
      sf_release(g->out);
      g->f->error = g->error;
      sf__future_finish(g->f, FUT_FAILED);
    } else {
      sf__future_set(g->f, g->out ? (void *)&g->out : NULL);
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
  sf_retain(a);
  sf__actor_complete_drop(a, md, s, res, why, out, on);
}

/* Everything that reads the actor (its call count, the journal, the
 * pending count) happens before the reference is given back, and the
 * reference is given back before the waiter wakes: a program that drops
 * its handle right after the await then drops the actor's last
 * reference itself, so a remote actor's slots are free for its next
 * spawn (a group spawned right after another was dropped otherwise found
 * a slot still held and stayed on the head: cluster/shard_nodes). */
void sf__actor_complete_drop(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                             const char *why, const char *out, size_t on) {
  if (s->seq >= 0 && !why)
    a->calls = s->calls; /* the handle's count, for the journal's index */
  SF__COUNT(calls_done);
  atomic_fetch_sub_explicit(a->pending, 1, memory_order_relaxed);
  if (s->f) {
    if (!why && s->seq >= 0)
      journal_call(a, s->seq, md, res, out, on);
    sf_release(a);
    if (why)
      sf__future_fail(s->f, "call of '%s' failed: %s", md->name, why);
    else
      sf__future_set(s->f, res);
    sf_release(s->f);
  } else if (s->gather) {
    gather_put(s->gather, a, md, s->idx, res, why, s->seq, out, on, a);
  } else {
    if (!why)
      sf_value_release(md->result, res);
    sf_release(a);
  }
}

#define DRAIN_BATCH 64

static void drain(sf__job *j) {
  sf_actor *a = (sf_actor *)((char *)j - offsetof(sf_actor, drain));
  sf__sched_prompt();
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
  if (a->comm) {
    a->here = true;
    atomic_fetch_add_explicit(&members_here, 1, memory_order_relaxed);
  }
  if (a->comm && a->rank == 0)
    checkpoint_plan_group(d, a->id, a->size); /* one common epoch for all */
  a->restore_epoch = a->comm ? checkpoint_group_epoch(d, a->id) : -1;
  msg *m = msg_new(d->init ? d->init->args : NULL, args, retain_args);
  m->kind = MSG_INIT;
  m->loc = loc;
  post(a, m);
}

sf_actor *sf_actor_spawn(const sf_actor_desc *d, void *args, const sf_loc *loc) {
  (void)sf__demand_of(d->cpus, d->gpus, d->name, loc); /* the notice / --require-gpu */
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
  (void)sf__demand_of(d->cpus, d->gpus, d->name, loc);
  sf_group *g = sf_alloc(sizeof *g);
  *g = (sf_group){.hdr = {1, SF_OBJ_GROUP, 0}, .desc = d, .n = n};
  g->members = sf__alloc_n((size_t)(n ? n : 1), sizeof *g->members);
  sf__comm *comm = n > 0 ? sf__comm_new(n, SF__COLL_SHM, NULL, 0) : NULL;
  int64_t id = spawn_id();
  uint64_t key = sf__rng_child(); /* the group's; member i's is mix(key, i) */
  for (int64_t i = 0; i < n; i++)
    g->members[i] = actor_alloc(d, id, i, n, i ? sf__comm_retain(comm) : comm,
                                sf__rng_mix(key, (uint64_t)i));
  /* A gang on workers (ractor_head.c), all or nothing; else here. */
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
  sf_future *f = sf__future_alloc(md->result, sizeof(msg) + asize, (void **)&m);
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
    sf_future *f = sf__future_alloc(md->result, 0, NULL);
    sf__sink sk = {f, NULL, 0, seq, 0};
    sf_retain(f); /* the sink's reference */
    SF__COUNT(calls);
    atomic_fetch_add_explicit(a->pending, 1, memory_order_relaxed);
    sf__place.call(a->remote, md, args, false, &sk);
    return f;
  }
  sf__value_detach(md->args, args); /* tensors: the actor's own, as on another node */
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
  sf_future *f = sf__future_alloc(rt, 0, NULL);
  int64_t seq = journal_next();
  if (g->n == 0) {
    sf_array *out = has_result ? sf_array_new(m->result, 0, loc) : NULL;
    sf__future_set(f, has_result ? (void *)&out : NULL);
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
    sf__value_detach(m->args, mm->args); /* each member its own tensors */
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

int64_t sf_group_rank(void) { return sf__running_actor ? sf__running_actor->rank : 0; }
int64_t sf_group_size(void) { return sf__running_actor ? sf__running_actor->size : 1; }

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
