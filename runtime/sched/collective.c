/*
 * collective.c — allreduce, broadcast, allgather, reduce_scatter,
 * all_gather (of shards) and barrier over the members of an actor group,
 * on one machine.
 *
 * Key design choices:
 *  - The members' threads meet in a generation barrier (a mutex for the
 *    arrivals, a futex word to sleep on) and work on each other's arrays
 *    directly: no copies through a shared buffer.  allreduce is a
 *    reduce-scatter then allgather in place: member r adds its 1/n slice
 *    of every other member's array into the same slice of its own array,
 *    everyone passes a barrier, then r copies the finished slice into
 *    every other member's array.  Each member reads and writes len/n
 *    elements of each array, so the work is spread evenly, as in a ring.
 *    Arrays of up to 4 KiB skip the slicing: each member reduces all of
 *    it (in the same order), one barrier fewer.
 *  - Waiting is blocking and prompt: a member that is not the last to
 *    arrive spins for an adaptive budget of up to 50 us (spin_for_round;
 *    not when a member it waits for last ran on this CPU), then sleeps on
 *    a futex that the last arriving member wakes.  No sched_yield: under CPU
 *    contention it hands the core to a busy process for a whole time slice
 *    (a 10-element allreduce took 4 ms beside two busy loops on 2 cores;
 *    docs/performance.md).  A sleeping member counts itself out of the
 *    pool (sf__sched_block_begin), so the members always get threads to
 *    run on whatever the pool size.
 *  - If a member fails while others wait, the group's communicator is
 *    aborted: the waiters fail with an error naming the member instead of
 *    hanging, and every later collective of the group fails at once.
 *  - This file is the collective interface (sched.h, sf__coll_transport):
 *    the entry points generated code calls, the group object, the registry
 *    of transports, and the first transport, shared memory.  A group picks
 *    its transport when it forms (sf__comm_new): its host transport (shared
 *    memory here, the TCP ring of group_ring.c on a worker), with the
 *    device transport (NCCL, nccl.c) stacked on it when the GPU layer
 *    registered one.  Every collective is one indirect call from there.
 *  - The members' slots point at sf__coll_bufs on their own stacks, so
 *    no member leaves a call while another may still read its slot: the
 *    errors found by comparing the slots (lengths, element types) pass
 *    one more barrier before they are raised (leave).
 *  - Device arrays: the first barrier (shm_meet) shows every member what
 *    every other brought, so all choose alike; when some member's only
 *    current copy was on the device, each copies its own to the host and
 *    the group meets once more before reading each other's arrays.
 */
#define _GNU_SOURCE /* sched_getcpu */
#include <inttypes.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched.h"
#include "metrics.h"

/* A member's spin budget (spin_for_round), touched by that member only;
 * a cache line each, so the members' updates do not bounce. */
typedef struct spin_state {
  _Alignas(64) int64_t budget; /* ns; below SPIN_MIN_NS: sleep at once */
  int32_t skipped;             /* waits slept without spinning since the last probe */
} spin_state;

/* The state of the shared-memory transport: one per group, shared by
 * the members' threads. */
typedef struct shm {
  int64_t n;
  pthread_mutex_t lock;
  int64_t arrived;
  _Atomic int64_t gen;  /* the barrier's round: read without the lock by waiters */
  _Atomic uint32_t word;     /* futex: bumped when a round ends or the group aborts */
  _Atomic int32_t sleepers;  /* members asleep on word (a wake only when > 0) */
  _Atomic int32_t *cpu;      /* per member: the CPU it last arrived on */
  spin_state *spin;          /* per member: how long it spins before it sleeps */
  char *aborted; /* why the group can no longer meet, or NULL */
  sf__coll_buf **slot;      /* per member: what it brought to this round */
  _Atomic int64_t *pending; /* per member: calls queued or running (sf__comm's) */
  bool *here;               /* per member: waiting in this round */
  int32_t *where; /* per member: its array's sf_array.where, before the barrier */
} shm;

/* A group: the transport it picked when it formed, and what actor.c
 * counts per member. */
struct sf__comm {
  _Atomic int64_t rc;
  int64_t n;
  _Atomic int64_t *pending;
  const sf__coll_transport *t; /* every collective goes here */
  void *ts;
  const sf__coll_transport *host; /* t, or the one t is stacked on */
  void *hs;
};

/* How long a member waits in a collective for members that have no call
 * queued or running before the run fails instead of hanging: those
 * members cannot arrive unless new calls reach them. */
#define STUCK_SECONDS 3
#define CHECK_NS 1000000000LL /* how often a sleeping member looks for stuck ones */
/* A waiting member's spin budget (spin_for_round). */
#define SPIN_MAX_NS 50000 /* about what a futex sleep and wake-up cost */
#define SPIN_MIN_NS 2000  /* below it, sleep at once */
#define SPIN_PROBE 16     /* ...spinning only every 16th wait, to see if spins pay again */

const sf__coll_transport *sf__coll_transports[SF__COLL_KINDS] = {[SF__COLL_SHM] = &sf__coll_shm};

static void *shm_init(int64_t n, const void *arg) {
  shm *c = sf_alloc(sizeof *c);
  memset(c, 0, sizeof *c);
  c->n = n;
  c->pending = (_Atomic int64_t *)arg;
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->word, 0);
  atomic_init(&c->sleepers, 0);
  c->slot = sf__alloc_n((size_t)n, sizeof *c->slot);
  memset(c->slot, 0, (size_t)n * sizeof *c->slot);
  c->here = sf__alloc_n((size_t)n, sizeof *c->here);
  memset(c->here, 0, (size_t)n * sizeof *c->here);
  c->where = sf__alloc_n((size_t)n, sizeof *c->where);
  memset(c->where, 0, (size_t)n * sizeof *c->where);
  c->cpu = sf__alloc_n((size_t)n, sizeof *c->cpu);
  memset((void *)c->cpu, 0xff, (size_t)n * sizeof *c->cpu); /* -1: not seen yet */
  c->spin = aligned_alloc(64, (size_t)n * sizeof *c->spin);
  if (!c->spin)
    sf_runtime_error(NULL, "out of memory for a group of %" PRId64, n);
  for (int64_t k = 0; k < n; k++)
    c->spin[k] = (spin_state){.budget = SPIN_MAX_NS};
  return c;
}

static void shm_destroy(void *s) {
  shm *c = s;
  pthread_mutex_destroy(&c->lock);
  free(c->aborted);
  sf_free(c->slot);
  sf_free(c->here);
  sf_free(c->where);
  sf_free((void *)c->cpu);
  free(c->spin);
  sf_free(c);
}

sf__comm *sf__comm_new(int64_t n, int kind, const void *arg, uint64_t id) {
  const sf__coll_transport *host = kind >= 0 && kind < SF__COLL_KINDS ? sf__coll_transports[kind]
                                                                      : NULL;
  if (!host)
    return NULL;
  sf__comm *c = sf_alloc(sizeof *c);
  memset(c, 0, sizeof *c);
  atomic_init(&c->rc, 1);
  c->n = n;
  c->pending = sf__alloc_n((size_t)n, sizeof *c->pending);
  for (int64_t i = 0; i < n; i++)
    atomic_init(&c->pending[i], 0);
  c->host = c->t = host;
  c->hs = c->ts = host->init(n, kind == SF__COLL_SHM ? (const void *)c->pending : arg);
  if (!c->hs) {
    sf_free((void *)c->pending);
    sf_free(c);
    return NULL;
  }
  /* A lone member never reaches a transport (the entry points). */
  const sf__coll_transport *dev = sf__coll_transports[SF__COLL_NCCL];
  sf__coll_stack st = {host, c->hs, id};
  void *ds = dev && n > 1 ? dev->init(n, &st) : NULL;
  if (ds) {
    c->t = dev;
    c->ts = ds;
  }
  return c;
}

_Atomic int64_t *sf__comm_pending(sf__comm *c, int64_t rank) { return &c->pending[rank]; }

void *sf__comm_host(sf__comm *c) { return c->hs; }

const char *sf__comm_transport(sf__comm *c) { return c->t->name; }

sf__comm *sf__comm_retain(sf__comm *c) {
  if (c)
    atomic_fetch_add(&c->rc, 1);
  return c;
}

void sf__comm_release(sf__comm *c) {
  if (!c || atomic_fetch_sub(&c->rc, 1) != 1)
    return;
  /* The stacked transport first: NCCL's communicators end before the
   * host transport's links close. */
  c->t->destroy(c->ts);
  if (c->host != c->t)
    c->host->destroy(c->hs);
  sf_free((void *)c->pending);
  sf_free(c);
}

void sf__comm_abort(sf__comm *c, int64_t rank, const char *why) {
  if (c)
    c->t->member_failed(c->ts, rank, why);
}

/* Members that are not in this round and have nothing to run: "0, 2". */
static bool idle_missing(shm *c, char *out, size_t n) {
  size_t o = 0;
  bool any = false;
  out[0] = '\0';
  for (int64_t k = 0; k < c->n; k++) {
    if (c->here[k])
      continue;
    if (atomic_load(&c->pending[k]) > 0)
      return false;
    if (o + 24 < n)
      o += (size_t)snprintf(out + o, n - o, "%s%" PRId64, any ? ", " : "", k);
    any = true;
  }
  return any;
}

/* Wakes every member asleep in the barrier: its round ended, or the group
 * aborted.  The store to word and the load of sleepers are sequentially
 * consistent, as are a sleeper's increment of sleepers and its load of
 * word: either the waker sees the sleeper, or the sleeper sees the new
 * word (and the new round) and does not sleep. */
static void wake_members(shm *c) {
  atomic_fetch_add(&c->word, 1);
  if (atomic_load(&c->sleepers) > 0)
    sf__futex_wake(&c->word, INT32_MAX);
}

/* The group can no longer meet: the waiters fail with why. */
static void shm_abort_with(shm *c, const char *why) {
  pthread_mutex_lock(&c->lock);
  bool first = !c->aborted;
  if (first)
    c->aborted = strdup(why);
  pthread_mutex_unlock(&c->lock);
  if (first)
    wake_members(c);
}

static void shm_abort(void *s, int64_t rank, const char *why) {
  (void)rank;
  shm_abort_with(s, why);
}

/* A member that failed can no longer arrive: the group fails too, with
 * the member named. */
static void shm_member_failed(void *s, int64_t rank, const char *why) {
  char buf[SF__ERROR_MAX + 64];
  snprintf(buf, sizeof buf, "member %" PRId64 " of the group failed: %s", rank, why);
  shm_abort_with(s, buf);
}

static bool shm_failed(void *s, char *why, size_t n) {
  shm *c = s;
  pthread_mutex_lock(&c->lock);
  bool failed = c->aborted != NULL;
  if (failed)
    snprintf(why, n, "%s", c->aborted);
  pthread_mutex_unlock(&c->lock);
  return failed;
}

/* The calling member's communicator and rank; NULL for a lone actor. */
static sf__comm *mine(int64_t *rank) {
  sf_actor *a = sf__current_actor();
  *rank = a ? sf__actor_rank(a) : 0;
  return a ? sf__actor_comm(a) : NULL;
}

static bool round_over(shm *c, int64_t gen) {
  return atomic_load_explicit(&c->gen, memory_order_acquire) != gen;
}

/* Members usually arrive within microseconds of each other: a pure spin
 * catches them without a system call on either side, and a futex sleep
 * costs far more than its system call (the sleeper's CPU may idle, and
 * waking it took 50 us on the 2-core development VM; a member woken late
 * arrives late at the next barrier, so one sleep tends to start a chain of
 * them).  So a member spins for about as long as a sleep would cost, then
 * sleeps: spin-then-block.  The spin adapts per member, as glibc's
 * adaptive mutexes and Go's spinning do: a spin that catches the round
 * doubles the member's next budget (up to SPIN_MAX_NS), one that times
 * out halves it, and below SPIN_MIN_NS the member sleeps at once, probing
 * with a short spin only every SPIN_PROBE-th wait.  Beside busy processes
 * the partner is often preempted, spins fail, and within a few calls the
 * member only sleeps: busy neighbours lose a few short spins, never a
 * core.  Spinning is skipped outright when another member last ran on
 * this CPU (it cannot arrive while we hold the core; members that wake
 * each other through the futex tend to end up on one CPU). */

static bool spin_until(shm *c, int64_t gen, int64_t budget) {
  int64_t end = sf__mono_ns() + budget;
  for (int i = 1;; i++) {
    if (round_over(c, gen))
      return true;
    sf__cpu_relax();
    if (i % 64 == 0 && sf__mono_ns() > end)
      return round_over(c, gen);
  }
}

static bool spin_for_round(shm *c, int64_t rank, int32_t cpu, int64_t gen) {
  if (cpu < 0)
    return false;
  for (int64_t k = 0; k < c->n; k++)
    if (k != rank && atomic_load_explicit(&c->cpu[k], memory_order_relaxed) == cpu)
      return false;
  spin_state *sp = &c->spin[rank];
  int64_t budget = sp->budget;
  if (budget < SPIN_MIN_NS) {
    if (++sp->skipped < SPIN_PROBE)
      return false;
    sp->skipped = 0;
    budget = SPIN_MIN_NS;
  }
  bool caught = spin_until(c, gen, budget);
  sp->budget = caught ? (budget * 2 < SPIN_MAX_NS ? budget * 2 : SPIN_MAX_NS) : budget / 2;
  return caught;
}

/* With c->lock held, once per CHECK_NS of sleeping: after STUCK_SECONDS
 * checks in a row that found members with nothing to run, the group fails
 * instead of hanging. */
static void check_stuck(shm *c, int64_t rank, int *stuck) {
  char who[256];
  *stuck = idle_missing(c, who, sizeof who) ? *stuck + 1 : 0;
  if (*stuck < STUCK_SECONDS || c->aborted)
    return;
  char buf[512];
  snprintf(buf, sizeof buf, "member %" PRId64 " waits for members %s, which have no "
           "call to run (every member must make the same collective calls: call the "
           "method through g.all)", rank, who);
  c->aborted = strdup(buf);
}

/* Sleeps until round gen is over (true) or the group aborted (false, the
 * reason in why). */
static bool sleep_for_round(shm *c, int64_t rank, int64_t gen, char *why, size_t n) {
  int stuck = 0;
  int64_t next_check = sf__mono_ns() + CHECK_NS;
  for (;;) {
    atomic_fetch_add(&c->sleepers, 1);
    uint32_t w = atomic_load(&c->word);
    int64_t left = next_check - sf__mono_ns();
    if (!round_over(c, gen) && left > 0)
      sf__futex_wait(&c->word, w, left);
    atomic_fetch_sub(&c->sleepers, 1);
    if (round_over(c, gen))
      return true;
    pthread_mutex_lock(&c->lock);
    bool found = false;
    if (!c->aborted && sf__mono_ns() >= next_check) {
      next_check = sf__mono_ns() + CHECK_NS;
      check_stuck(c, rank, &stuck);
      found = c->aborted != NULL;
    }
    bool over = round_over(c, gen), failed = c->aborted != NULL;
    if (failed && !over)
      snprintf(why, n, "%s", c->aborted);
    pthread_mutex_unlock(&c->lock);
    if (found)
      wake_members(c); /* the other waiters fail with the same message */
    if (over)
      return true;
    if (failed)
      return false;
  }
}

static void barrier(shm *c, int64_t rank, const char *what, const sf_loc *loc) {
  char why[SF__ERROR_MAX + 64];
  pthread_mutex_lock(&c->lock);
  if (c->aborted) {
    snprintf(why, sizeof why, "%s", c->aborted);
    pthread_mutex_unlock(&c->lock);
    sf_runtime_error(loc, "%s: %s", what, why);
  }
  int64_t gen = atomic_load_explicit(&c->gen, memory_order_relaxed);
  if (++c->arrived == c->n) { /* the last one: end the round, wake the others */
    atomic_store_explicit(&c->cpu[rank], sched_getcpu(), memory_order_relaxed);
    c->arrived = 0;
    memset(c->here, 0, (size_t)c->n * sizeof *c->here);
    atomic_store(&c->gen, gen + 1);
    pthread_mutex_unlock(&c->lock);
    wake_members(c);
    return;
  }
  c->here[rank] = true;
  pthread_mutex_unlock(&c->lock);
  int32_t cpu = sched_getcpu();
  atomic_store_explicit(&c->cpu[rank], cpu, memory_order_relaxed);
  if (spin_for_round(c, rank, cpu, gen))
    return;
  sf__sched_block_begin();
  bool ok = sleep_for_round(c, rank, gen, why, sizeof why);
  sf__sched_block_end();
  if (!ok)
    sf_runtime_error(loc, "%s: %s", what, why);
}

/* Raises msg once no member can still be reading this member's slot:
 * after a barrier that the other members pass on the same path (each
 * raises the same error, or, in allgather, returns after its own last
 * barrier). */
_Noreturn static void leave(shm *c, int64_t rank, const char *what, const char *msg,
                            const sf_loc *loc) {
  barrier(c, rank, what, loc);
  sf_runtime_error(loc, "%s", msg);
}

static bool numeric(const sf_type *t) {
  return t && (t->kind == SF_F32 || t->kind == SF_F64 || t->kind == SF_I32 || t->kind == SF_I64);
}

/* After the first barrier: every member checks every buffer the same
 * way, so all of them raise the same error, or none does.  A member that
 * brought no array counts as an empty one of any type.  The slots point
 * at the members' own stack frames (sf__coll_buf), so a member must not
 * raise while another may still be reading its slot: an error passes one
 * more barrier first (leave), which every member reaches since every
 * member finds the same error. */
static void check_same(shm *c, int64_t rank, const char *what, bool need_numeric,
                       const sf_loc *loc) {
  int64_t n0 = c->slot[0]->count;
  char msg[SF__ERROR_MAX / 2];
  msg[0] = 0;
  for (int64_t k = 0; k < c->n && !msg[0]; k++) {
    const sf__coll_buf *o = c->slot[k];
    if (need_numeric && o->a && !numeric(o->elem))
      snprintf(msg, sizeof msg, "%s: arrays of %s cannot be reduced", what, o->elem->name);
    else if (o->count != n0)
      snprintf(msg, sizeof msg, "%s: member %" PRId64 " has %" PRId64 " elements but member 0 "
               "has %" PRId64, what, k, o->count, n0);
  }
  if (msg[0])
    leave(c, rank, what, msg, loc);
}

static void add_into(const sf_type *t, void *acc, const void *x, int64_t n) {
  switch (t->kind) {
  case SF_F32: for (int64_t i = 0; i < n; i++) ((float *)acc)[i] += ((const float *)x)[i]; break;
  case SF_F64: for (int64_t i = 0; i < n; i++) ((double *)acc)[i] += ((const double *)x)[i]; break;
  case SF_I32:
    for (int64_t i = 0; i < n; i++)
      ((uint32_t *)acc)[i] += ((const uint32_t *)x)[i];
    break;
  default:
    for (int64_t i = 0; i < n; i++)
      ((uint64_t *)acc)[i] += ((const uint64_t *)x)[i];
    break;
  }
}

static void divide(const sf_type *t, void *acc, int64_t n, int64_t by) {
  switch (t->kind) {
  case SF_F32: for (int64_t i = 0; i < n; i++) ((float *)acc)[i] /= (float)by; break;
  case SF_F64: for (int64_t i = 0; i < n; i++) ((double *)acc)[i] /= (double)by; break;
  case SF_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)acc)[i] /= (int32_t)by; break;
  default: for (int64_t i = 0; i < n; i++) ((int64_t *)acc)[i] /= by; break;
  }
}


/* --------------------------------------------- shared-memory transport */

/* Element i of a member's buffer. */
static void *at(const sf__coll_buf *b, int64_t i) {
  return (char *)b->data + i * (int64_t)b->elem->size;
}

/* Before the first barrier: what the member brings, and where it is. */
static void publish(shm *c, int64_t rank, sf__coll_buf *b) {
  c->slot[rank] = b;
  c->where[rank] = b->a ? b->a->where : SF__WHERE_HOST;
}

/* The members meet with their buffers (the first barrier of a call) for
 * a device transport stacked here.  Every member computes the view from
 * the same slots, so every member sees the same. */
static void shm_meet(void *s, int64_t rank, sf__coll_buf *b, sf__coll_view *v, const sf_loc *loc) {
  shm *c = s;
  publish(c, rank, b);
  barrier(c, rank, b->what, loc);
  b->met = true;
  v->device = true;
  v->shares[0] = v->shares[1] = -1;
  const sf__coll_buf *b0 = c->slot[0];
  for (int64_t k = 0; k < c->n && v->device; k++) {
    const sf__coll_buf *o = c->slot[k];
    v->device = o->gpu >= 0 && o->count == b0->count && o->elem->kind == b0->elem->kind;
  }
  for (int64_t k = 0; k < c->n && v->device; k++)
    for (int64_t j = 0; j < k && v->device; j++)
      if (c->slot[j]->gpu == c->slot[k]->gpu) {
        v->device = false;
        v->shares[0] = j;
        v->shares[1] = k;
      }
}

/* The first meeting of a host call (unless meet was it), then: when any
 * member's only current copy was on the device, each copies its own to
 * the host and the group meets once more before anyone reads another's. */
static void shm_begin(shm *c, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  if (!b->met) {
    publish(c, rank, b);
    barrier(c, rank, b->what, loc);
  }
  bool staged = false;
  for (int64_t k = 0; k < c->n && !staged; k++)
    staged = c->where[k] == SF__WHERE_DEVICE;
  if (!staged)
    return;
  sf_array_host(b->a);
  barrier(c, rank, b->what, loc);
}

/* A small array: every member computes the whole result into its own
 * buffer, then (after a barrier: no one reads the arrays any more) writes
 * it into its array.  Two barriers instead of three, which is most of the
 * cost of a small collective.  Each element is summed exactly as in the
 * sliced path (its slice owner's value first, then the others in rank
 * order), so every member gets the same bits as there. */
#define SMALL_REDUCE 4096 /* bytes */
static void small_allreduce(shm *c, int64_t rank, const sf_type *t, int64_t len, bool mean,
                            const char *what, const sf_loc *loc) {
  _Alignas(16) char acc[SMALL_REDUCE];
  size_t esz = (size_t)t->size;
  for (int64_t r = 0; r < c->n; r++) {
    int64_t lo = len * r / c->n, hi = len * (r + 1) / c->n;
    if (hi <= lo)
      continue;
    char *dst = acc + lo * (int64_t)esz;
    memcpy(dst, at(c->slot[r], lo), (size_t)(hi - lo) * esz);
    for (int64_t k = 0; k < c->n; k++)
      if (k != r)
        add_into(t, dst, at(c->slot[k], lo), hi - lo);
    if (mean)
      divide(t, dst, hi - lo, c->n);
  }
  barrier(c, rank, what, loc); /* every array is read before anyone writes */
  if (len)
    memcpy(c->slot[rank]->data, acc, (size_t)len * esz);
}

static void shm_allreduce(void *s, int64_t rank, sf__coll_buf *b, bool mean, const sf_loc *loc) {
  shm *c = s;
  const char *what = b->what;
  shm_begin(c, rank, b, loc);
  check_same(c, rank, what, true, loc);
  const sf__coll_buf *first = c->slot[0];
  int64_t len = first->count;
  const sf_type *t = first->elem;
  int64_t lo = len * rank / c->n, hi = len * (rank + 1) / c->n;
  size_t esz = (size_t)t->size;
  if ((size_t)len * esz <= SMALL_REDUCE) {
    small_allreduce(c, rank, t, len, mean, what, loc);
    return;
  }
  /* Member r sums slice r of every array into its own array, in place... */
  char *mine_data = hi > lo ? at(b, lo) : NULL;
  for (int64_t k = 0; k < c->n && hi > lo; k++)
    if (k != rank)
      add_into(t, mine_data, at(c->slot[k], lo), hi - lo);
  if (mean && hi > lo)
    divide(t, mine_data, hi - lo, c->n);
  barrier(c, rank, what, loc); /* every slice is summed before anyone copies */
  /* ...then copies its finished slice into every other member's array. */
  for (int64_t k = 0; k < c->n && hi > lo; k++)
    if (k != rank)
      memcpy(at(c->slot[k], lo), mine_data, (size_t)(hi - lo) * esz);
  barrier(c, rank, what, loc); /* every slice is written before anyone returns */
}

/* reduce_scatter: the first half of shm_allreduce.  Member r sums its
 * shard (the allreduce's slice r) of every array into its own array, its
 * own value first and then the others in rank order, as the sliced and
 * the small allreduce both do, so the shard holds the allreduce's bits;
 * a barrier, and no member returns while another may still read its
 * array. */
static void shm_reduce_scatter(void *s, int64_t rank, sf__coll_buf *b, bool mean,
                               const sf_loc *loc) {
  shm *c = s;
  const char *what = b->what;
  shm_begin(c, rank, b, loc);
  check_same(c, rank, what, true, loc);
  const sf_type *t = c->slot[0]->elem;
  int64_t lo, hi;
  sf__coll_shard(c->slot[0]->count, rank, c->n, &lo, &hi);
  if (hi > lo) {
    char *mine_data = at(b, lo);
    for (int64_t k = 0; k < c->n; k++)
      if (k != rank)
        add_into(t, mine_data, at(c->slot[k], lo), hi - lo);
    if (mean)
      divide(t, mine_data, hi - lo, c->n);
  }
  barrier(c, rank, what, loc); /* every array is read before anyone returns */
}

/* all_gather: the second half of shm_allreduce, each member copying its
 * shard into every other member's array. */
static void shm_all_gather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  shm *c = s;
  shm_begin(c, rank, b, loc);
  check_same(c, rank, b->what, true, loc);
  int64_t lo, hi;
  sf__coll_shard(c->slot[0]->count, rank, c->n, &lo, &hi);
  size_t esz = (size_t)c->slot[0]->elem->size;
  for (int64_t k = 0; k < c->n && hi > lo; k++)
    if (k != rank)
      memcpy(at(c->slot[k], lo), at(b, lo), (size_t)(hi - lo) * esz);
  barrier(c, rank, b->what, loc); /* every shard is written before anyone returns */
}

static void shm_broadcast(void *s, int64_t rank, sf__coll_buf *b, int64_t root,
                          const sf_loc *loc) {
  shm *c = s;
  shm_begin(c, rank, b, loc);
  check_same(c, rank, b->what, false, loc);
  const sf__coll_buf *src = c->slot[root];
  if (rank != root && b->count) {
    if (sf__type_has_refs(b->elem))
      for (int64_t i = 0; i < b->count; i++) {
        sf_value_retain(b->elem, at(src, i));
        sf_value_release(b->elem, at(b, i));
      }
    memcpy(b->data, src->data, (size_t)b->count * (size_t)b->elem->size);
  }
  barrier(c, rank, b->what, loc);
}

/* Whether every member that brought an array brought one of elem's
 * kind (this member's); else the error in msg.  Members may judge
 * differently (one that brought none has no kind to differ). */
static bool same_kind(sf__coll_buf *const *parts, int64_t n, const sf_type *elem, int64_t rank,
                      char *msg, size_t len) {
  for (int64_t k = 0; k < n; k++) {
    const sf__coll_buf *o = parts[k];
    if (o->a && o->elem->kind != elem->kind) {
      snprintf(msg, len, "allgather: member %" PRId64 " sends %s but member %" PRId64
               " sends %s", k, o->elem->name, rank, elem->name);
      return false;
    }
  }
  return true;
}

/* Concatenation of the buffers parts[0..n) (all of elem's kind) as a
 * new array of elem. */
static sf_array *concat(sf__coll_buf *const *parts, int64_t n, const sf_type *elem,
                        const sf_loc *loc) {
  int64_t total = 0;
  for (int64_t k = 0; k < n; k++)
    total += parts[k]->count;
  sf_array *out = sf_array_new(elem, total, loc);
  int64_t pos = 0;
  for (int64_t k = 0; k < n; k++) {
    const sf__coll_buf *o = parts[k];
    int64_t m = o->count;
    if (m)
      memcpy(sf__array_at(out, pos), o->data, (size_t)m * (size_t)elem->size);
    if (sf__type_has_refs(elem))
      for (int64_t i = 0; i < m; i++)
        sf_value_retain(elem, sf__array_at(out, pos + i));
    pos += m;
  }
  return out;
}

/* One barrier after the reading, on the error path too (leave): a member
 * that judges the kinds differ leaves with the others. */
static sf_array *shm_allgather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  shm *c = s;
  shm_begin(c, rank, b, loc);
  char msg[SF__ERROR_MAX / 2];
  if (!same_kind(c->slot, c->n, b->elem, rank, msg, sizeof msg))
    leave(c, rank, b->what, msg, loc);
  sf_array *out = concat(c->slot, c->n, b->elem, loc);
  barrier(c, rank, b->what, loc);
  return out;
}

static void shm_barrier(void *s, int64_t rank, const char *what, const sf_loc *loc) {
  barrier(s, rank, what, loc);
}

const sf__coll_transport sf__coll_shm = {
    .name = "shared memory", .shared_memory = true, .init = shm_init,
    .allreduce = shm_allreduce, .broadcast = shm_broadcast, .allgather = shm_allgather,
    .reduce_scatter = shm_reduce_scatter, .all_gather = shm_all_gather, .barrier = shm_barrier, .meet = shm_meet, .abort = shm_abort,
    .member_failed = shm_member_failed, .failed = shm_failed, .destroy = shm_destroy};

/* -------------------------------------------------------- entry points */

/* Checks common to every transport run here, once; the transport the
 * group picked sees groups of two or more only. */

/* The member's part of a call: its whole array (NULL: none, as an empty
 * array of elem). */
static sf__coll_buf buf_of(sf_array *a, const sf_type *elem, const char *what) {
  return (sf__coll_buf){.a = a, .data = a ? a->data : NULL, .elem = a ? a->elem : elem,
                        .count = a ? a->len : 0, .what = what, .gpu = -1};
}

/* A transport call that returned, as a "collective" slice inside the
 * member's method on the trace: how many calls a step makes (a tensor[]
 * goes in buckets, docs/nn.md) and how long each waited. */
static void traced(const char *what, double t0) {
  if (sf__trace_on)
    sf__trace_event(what, "collective", t0, 0, NULL);
}

/* --metrics-port's collective families: calls, bytes (this member's) and
 * seconds, by operation; m0 is sf__mono_ns() at the call's start, 0 when
 * metrics are off. */
static void counted(const char *what, int64_t m0, const sf__coll_buf *b) {
  if (!m0)
    return;
  char l[64];
  snprintf(l, sizeof l, "op=\"%s\"", what);
  sf__metric_add("sflow_collective_calls_total", l, 1);
  sf__metric_add("sflow_collective_bytes_total", l, (double)b->count * (double)b->elem->size);
  sf__metric_add("sflow_collective_seconds_total", l, (double)(sf__mono_ns() - m0) * 1e-9);
}

static int64_t count_start(void) { return sf__metrics_on ? sf__mono_ns() : 0; }

/* The reducing collectives, one path: the checks, one call of the
 * group's transport, its trace span and its metrics.  A group of one
 * changes nothing (its shard is the whole array). */
enum { ALLREDUCE, REDUCE_SCATTER, ALL_GATHER };

static void reduce_call(int op, sf_array *a, bool mean, const char *what, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  if (a && !numeric(a->elem))
    sf_runtime_error(loc, "%s: arrays of %s cannot be %s", what, a->elem->name,
                     op == ALL_GATHER ? "gathered in shards" : "reduced");
  if (!c || c->n <= 1)
    return;
  sf__coll_buf b = buf_of(a, &sf_type_f32, what);
  double t0 = sf__trace_now();
  int64_t m0 = count_start();
  switch (op) {
  case ALLREDUCE: c->t->allreduce(c->ts, rank, &b, mean, loc); break;
  case REDUCE_SCATTER: c->t->reduce_scatter(c->ts, rank, &b, mean, loc); break;
  default: c->t->all_gather(c->ts, rank, &b, loc); break;
  }
  traced(what, t0);
  counted(what, m0, &b);
}

void sf_allreduce_sum(sf_array *a, const sf_loc *loc) {
  reduce_call(ALLREDUCE, a, false, "allreduce_sum", loc);
}
void sf_allreduce_mean(sf_array *a, const sf_loc *loc) {
  reduce_call(ALLREDUCE, a, true, "allreduce_mean", loc);
}
void sf__reduce_scatter(sf_array *a, bool mean, const sf_loc *loc) {
  reduce_call(REDUCE_SCATTER, a, mean, "reduce_scatter", loc);
}
void sf__all_gather(sf_array *a, const sf_loc *loc) {
  reduce_call(ALL_GATHER, a, false, "all_gather", loc);
}

void sf_broadcast(sf_array *a, int64_t root, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  int64_t n = c ? c->n : 1;
  if (root < 0 || root >= n)
    sf_runtime_error(loc, "broadcast: root %" PRId64 " is not a member of a group of %" PRId64,
                     root, n);
  if (n <= 1)
    return;
  sf__coll_buf b = buf_of(a, &sf_type_f32, "broadcast");
  double t0 = sf__trace_now();
  int64_t m0 = count_start();
  c->t->broadcast(c->ts, rank, &b, root, loc);
  traced("broadcast", t0);
  counted("broadcast", m0, &b);
}

sf_array *sf_allgather(sf_array *a, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  sf__coll_buf b = buf_of(a, &sf_type_f32, "allgather");
  if (c && c->n > 1) {
    int64_t m0 = count_start();
    sf_array *r = c->t->allgather(c->ts, rank, &b, loc);
    counted("allgather", m0, &b);
    return r;
  }
  sf_array_host(a); /* a kernel may just have written it (nccl.c) */
  sf__coll_buf *one = &b;
  return concat(&one, 1, b.elem, loc); /* a copy */
}

void sf_barrier(const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  if (c && c->n > 1)
    c->t->barrier(c->ts, rank, "barrier", loc);
}
