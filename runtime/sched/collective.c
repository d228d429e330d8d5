/*
 * collective.c — allreduce, broadcast, allgather and barrier over the
 * members of an actor group, on one machine.
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
 *    arrive spins for a few microseconds (not when the machine has more
 *    runnable threads than cores, sf__spin_ns, nor when a member it waits
 *    for last ran on this CPU), then sleeps on a futex
 *    that the last arriving member wakes.  No sched_yield: under CPU
 *    contention it hands the core to a busy process for a whole time slice
 *    (a 10-element allreduce took 4 ms beside two busy loops on 2 cores;
 *    docs/performance.md).  A sleeping member counts itself out of the
 *    pool (sf__sched_block_begin), so the members always get threads to
 *    run on whatever the pool size.
 *  - If a member fails while others wait, the group's communicator is
 *    aborted: the waiters fail with an error naming the member instead of
 *    hanging, and every later collective of the group fails at once.
 *  - This file is the shared-memory transport; the TCP ring between nodes
 *    (group_ring.c, over ring.c) and NCCL for device arrays implement the same
 *    operations, installed with sf__comm_new_ops.
 *  - Device arrays (nccl.c): after the first barrier every member sees what
 *    every other member brought, so all choose the same path: NCCL when
 *    every array is on the device and the members are on distinct GPUs,
 *    otherwise the device arrays are copied to the host and the group
 *    meets once more before the shared-memory path (see device_path).
 */
#define _GNU_SOURCE /* sched_getcpu */
#include <inttypes.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched.h"

struct sf__comm {
  const sf__comm_ops *ops; /* the transport */
  _Atomic int64_t rc;
  int64_t n;
  pthread_mutex_t lock;
  int64_t arrived;
  _Atomic int64_t gen;  /* the barrier's round: read without the lock by waiters */
  _Atomic uint32_t word;     /* futex: bumped when a round ends or the group aborts */
  _Atomic int32_t sleepers;  /* members asleep on word (a wake only when > 0) */
  _Atomic int32_t *cpu;      /* per member: the CPU it last arrived on */
  char *aborted; /* why the group can no longer meet, or NULL */
  sf_array **slot;
  _Atomic int64_t *pending; /* per member: calls queued or running */
  bool *here;               /* per member: waiting in this round */
  void *impl;               /* another transport's state (sf__comm_new_ops) */
  void (*impl_free)(void *);
  /* nccl.c: device collectives */
  int32_t *where; /* per member: its array's sf_array.where, before the barrier */
  _Atomic(struct sf__nccl_group *) nccl;
};

/* How long a member waits in a collective for members that have no call
 * queued or running before the run fails instead of hanging: those
 * members cannot arrive unless new calls reach them. */
#define STUCK_SECONDS 3
#define CHECK_NS 1000000000LL /* how often a sleeping member looks for stuck ones */

sf__comm *sf__comm_new(int64_t n) {
  sf__comm *c = sf_alloc(sizeof *c);
  memset(c, 0, sizeof *c);
  atomic_init(&c->rc, 1);
  c->ops = &sf__comm_shm;
  c->n = n;
  pthread_mutex_init(&c->lock, NULL);
  atomic_init(&c->word, 0);
  atomic_init(&c->sleepers, 0);
  c->slot = sf__alloc_n((size_t)n, sizeof *c->slot);
  memset(c->slot, 0, (size_t)n * sizeof *c->slot);
  c->pending = sf__alloc_n((size_t)n, sizeof *c->pending);
  for (int64_t i = 0; i < n; i++)
    atomic_init(&c->pending[i], 0);
  c->here = sf__alloc_n((size_t)n, sizeof *c->here);
  memset(c->here, 0, (size_t)n * sizeof *c->here);
  c->where = sf__alloc_n((size_t)n, sizeof *c->where);
  memset(c->where, 0, (size_t)n * sizeof *c->where);
  c->cpu = sf__alloc_n((size_t)n, sizeof *c->cpu);
  memset((void *)c->cpu, 0xff, (size_t)n * sizeof *c->cpu); /* -1: not seen yet */
  atomic_init(&c->nccl, NULL);
  return c;
}

_Atomic int64_t *sf__comm_pending(sf__comm *c, int64_t rank) { return &c->pending[rank]; }

sf__comm *sf__comm_new_ops(int64_t n, const sf__comm_ops *ops, void *impl,
                           void (*impl_free)(void *)) {
  sf__comm *c = sf__comm_new(n);
  c->ops = ops;
  c->impl = impl;
  c->impl_free = impl_free;
  return c;
}

void *sf__comm_impl(sf__comm *c) { return c->impl; }

/* Members that are not in this round and have nothing to run: "0, 2". */
static bool idle_missing(sf__comm *c, char *out, size_t n) {
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

sf__comm *sf__comm_retain(sf__comm *c) {
  if (c)
    atomic_fetch_add(&c->rc, 1);
  return c;
}

void sf__comm_release(sf__comm *c) {
  if (!c || atomic_fetch_sub(&c->rc, 1) != 1)
    return;
  pthread_mutex_destroy(&c->lock);
  free(c->aborted);
  if (c->impl_free)
    c->impl_free(c->impl);
  sf_free(c->slot);
  sf_free((void *)c->pending);
  sf_free(c->here);
  if (sf__comm_dev.group_free)
    sf__comm_dev.group_free(atomic_load(&c->nccl));
  sf_free(c->where);
  sf_free((void *)c->cpu);
  sf_free(c);
}

/* Wakes every member asleep in the barrier: its round ended, or the group
 * aborted.  The store to word and the load of sleepers are sequentially
 * consistent, as are a sleeper's increment of sleepers and its load of
 * word: either the waker sees the sleeper, or the sleeper sees the new
 * word (and the new round) and does not sleep. */
static void wake_members(sf__comm *c) {
  atomic_fetch_add(&c->word, 1);
  if (atomic_load(&c->sleepers) > 0)
    sf__futex_wake(&c->word, INT32_MAX);
}

void sf__comm_abort(sf__comm *c, int64_t rank, const char *why) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  bool first = !c->aborted;
  if (first) {
    char buf[SF__ERROR_MAX + 64];
    snprintf(buf, sizeof buf, "member %" PRId64 " of the group failed: %s", rank, why);
    c->aborted = strdup(buf);
  }
  pthread_mutex_unlock(&c->lock);
  if (first)
    wake_members(c);
}

_Atomic(struct sf__nccl_group *) *sf__comm_nccl(sf__comm *c) { return &c->nccl; }

bool sf__comm_failed(sf__comm *c, char *why, size_t n) {
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

static bool round_over(sf__comm *c, int64_t gen) {
  return atomic_load_explicit(&c->gen, memory_order_acquire) != gen;
}

/* Members usually arrive within microseconds of each other: a pure spin
 * catches them without a system call on either side.  It is skipped when
 * another member last ran on this CPU (it cannot arrive while we hold the
 * core; members that wake each other through the futex tend to end up on
 * one CPU) and on an oversubscribed machine (sf__spin_ns is 0). */
static bool spin_for_round(sf__comm *c, int64_t rank, int32_t cpu, int64_t gen) {
  int64_t budget = sf__spin_ns();
  if (budget <= 0 || cpu < 0)
    return false;
  for (int64_t k = 0; k < c->n; k++)
    if (k != rank && atomic_load_explicit(&c->cpu[k], memory_order_relaxed) == cpu)
      return false;
  int64_t end = sf__mono_ns() + budget;
  for (int i = 1;; i++) {
    if (round_over(c, gen))
      return true;
    sf__cpu_relax();
    if (i % 64 == 0 && sf__mono_ns() > end)
      return round_over(c, gen);
  }
}

/* With c->lock held, once per CHECK_NS of sleeping: after STUCK_SECONDS
 * checks in a row that found members with nothing to run, the group fails
 * instead of hanging. */
static void check_stuck(sf__comm *c, int64_t rank, int *stuck) {
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
static bool sleep_for_round(sf__comm *c, int64_t rank, int64_t gen, char *why, size_t n) {
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

static void barrier(sf__comm *c, int64_t rank, const char *what, const sf_loc *loc) {
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

static bool numeric(const sf_type *t) {
  return t && (t->kind == SF_F32 || t->kind == SF_F64 || t->kind == SF_I32 || t->kind == SF_I64);
}

/* After the first barrier: every member checks every array the same way,
 * so all of them raise the same error, or none does. */
static void check_same(sf__comm *c, int64_t rank, const char *what, bool need_numeric,
                       const sf_loc *loc) {
  sf_array *me = c->slot[rank];
  for (int64_t k = 0; k < c->n; k++) {
    sf_array *o = c->slot[k];
    int64_t n0 = c->slot[0] ? c->slot[0]->len : 0, nk = o ? o->len : 0;
    if (need_numeric && o && !numeric(o->elem))
      sf_runtime_error(loc, "%s: arrays of %s cannot be reduced", what, o->elem->name);
    if (nk != n0)
      sf_runtime_error(loc, "%s: member %" PRId64 " has %" PRId64 " elements but member 0 has %"
                       PRId64, what, k, nk, n0);
  }
  (void)me;
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

/* ------------------------------------------------ device arrays (nccl.c) */

sf__comm_device sf__comm_dev;

/* Before the first barrier: what the member brings, and where it is. */
static void publish(sf__comm *c, int64_t rank, sf_array *a) {
  c->slot[rank] = a;
  c->where[rank] = a ? a->where : SF__WHERE_HOST;
}

/* After the first barrier.  True when nccl.c ran the whole of op on the
 * device; otherwise every member's array is current on the host when it
 * returns.  The inputs (c->where, the arrays' shapes) are the same for
 * every member, so every member takes the same branch. */
static bool device_path(sf__comm *c, int64_t rank, sf__dev_op *op, const sf_loc *loc) {
  int64_t on = 0;
  for (int64_t k = 0; k < c->n; k++)
    on += c->where[k] == SF__WHERE_DEVICE;
  if (on == 0)
    return false;
  if (on == c->n && sf__comm_dev.run && sf__comm_dev.run(c, rank, c->slot, c->n, op, loc)) {
    /* A root may finish before the last member has read the slots. */
    barrier(c, rank, op->what, loc);
    return true;
  }
  sf_array_host(c->slot[rank]); /* staged through the host: each its own */
  barrier(c, rank, op->what, loc);
  return false;
}

/* --------------------------------------------- shared-memory transport */

/* A small array: every member computes the whole result into its own
 * buffer, then (after a barrier: no one reads the arrays any more) writes
 * it into its array.  Two barriers instead of three, which is most of the
 * cost of a small collective.  Each element is summed exactly as in the
 * sliced path (its slice owner's value first, then the others in rank
 * order), so every member gets the same bits as there. */
#define SMALL_REDUCE 4096 /* bytes */
static void small_allreduce(sf__comm *c, int64_t rank, const sf_type *t, int64_t len, bool mean,
                            const char *what, const sf_loc *loc) {
  _Alignas(16) char acc[SMALL_REDUCE];
  size_t esz = t ? (size_t)t->size : 0;
  for (int64_t r = 0; r < c->n; r++) {
    int64_t lo = len * r / c->n, hi = len * (r + 1) / c->n;
    if (hi <= lo)
      continue;
    char *dst = acc + lo * (int64_t)esz;
    memcpy(dst, (char *)c->slot[r]->data + lo * (int64_t)esz, (size_t)(hi - lo) * esz);
    for (int64_t k = 0; k < c->n; k++)
      if (k != r)
        add_into(t, dst, (char *)c->slot[k]->data + lo * (int64_t)esz, hi - lo);
    if (mean)
      divide(t, dst, hi - lo, c->n);
  }
  barrier(c, rank, what, loc); /* every array is read before anyone writes */
  if (len)
    memcpy(c->slot[rank]->data, acc, (size_t)len * esz);
}

static void shm_allreduce(sf__comm *c, int64_t rank, sf_array *a, bool mean, const char *what,
                          const sf_loc *loc) {
  publish(c, rank, a);
  barrier(c, rank, what, loc);
  sf__dev_op op = {.kind = SF__DEV_ALLREDUCE, .what = what, .mean = mean};
  if (device_path(c, rank, &op, loc))
    return;
  check_same(c, rank, what, true, loc);
  sf_array *first = c->slot[0];
  int64_t len = first ? first->len : 0;
  const sf_type *t = first ? first->elem : NULL;
  int64_t lo = len * rank / c->n, hi = len * (rank + 1) / c->n;
  size_t esz = t ? (size_t)t->size : 0;
  if ((size_t)len * esz <= SMALL_REDUCE) {
    small_allreduce(c, rank, t, len, mean, what, loc);
    return;
  }
  /* Member r sums slice r of every array into its own array, in place... */
  char *mine_data = hi > lo ? (char *)c->slot[rank]->data + lo * (int64_t)esz : NULL;
  for (int64_t k = 0; k < c->n && hi > lo; k++)
    if (k != rank)
      add_into(t, mine_data, (char *)c->slot[k]->data + lo * (int64_t)esz, hi - lo);
  if (mean && hi > lo)
    divide(t, mine_data, hi - lo, c->n);
  barrier(c, rank, what, loc); /* every slice is summed before anyone copies */
  /* ...then copies its finished slice into every other member's array. */
  for (int64_t k = 0; k < c->n && hi > lo; k++)
    if (k != rank)
      memcpy((char *)c->slot[k]->data + lo * (int64_t)esz, mine_data, (size_t)(hi - lo) * esz);
  barrier(c, rank, what, loc); /* every slice is written before anyone returns */
}

static void shm_broadcast(sf__comm *c, int64_t rank, sf_array *a, int64_t root,
                          const sf_loc *loc) {
  publish(c, rank, a);
  barrier(c, rank, "broadcast", loc);
  sf__dev_op op = {.kind = SF__DEV_BROADCAST, .what = "broadcast", .root = root};
  if (device_path(c, rank, &op, loc))
    return;
  check_same(c, rank, "broadcast", false, loc);
  sf_array *src = c->slot[root];
  if (rank != root && a && a->len) {
    if (sf__type_has_refs(a->elem))
      for (int64_t i = 0; i < a->len; i++) {
        sf_value_retain(a->elem, sf__array_at(src, i));
        sf_value_release(a->elem, sf__array_at(a, i));
      }
    memcpy(a->data, src->data, (size_t)a->len * (size_t)a->elem->size);
  }
  barrier(c, rank, "broadcast", loc);
}

/* Concatenation of the arrays parts[0..n) (NULL: empty) as a new array. */
static sf_array *concat(sf_array **parts, int64_t n, const sf_type *elem, int64_t rank,
                        const sf_loc *loc) {
  int64_t total = 0;
  for (int64_t k = 0; k < n; k++) {
    sf_array *o = parts[k];
    if (o && o->elem->kind != elem->kind)
      sf_runtime_error(loc, "allgather: member %" PRId64 " sends %s but member %" PRId64
                       " sends %s", k, o->elem->name, rank, elem->name);
    total += o ? o->len : 0;
  }
  sf_array *out = sf_array_new(elem, total, loc);
  int64_t at = 0;
  for (int64_t k = 0; k < n; k++) {
    sf_array *o = parts[k];
    int64_t m = o ? o->len : 0;
    if (m)
      memcpy(sf__array_at(out, at), o->data, (size_t)m * (size_t)elem->size);
    if (sf__type_has_refs(elem))
      for (int64_t i = 0; i < m; i++)
        sf_value_retain(elem, sf__array_at(out, at + i));
    at += m;
  }
  return out;
}

static sf_array *shm_allgather(sf__comm *c, int64_t rank, sf_array *a, const sf_loc *loc) {
  publish(c, rank, a);
  barrier(c, rank, "allgather", loc);
  sf__dev_op op = {.kind = SF__DEV_ALLGATHER, .what = "allgather"};
  if (device_path(c, rank, &op, loc))
    return op.out;
  sf_array *out = concat(c->slot, c->n, a ? a->elem : &sf_type_f32, rank, loc);
  barrier(c, rank, "allgather", loc);
  return out;
}

static void shm_barrier(sf__comm *c, int64_t rank, const sf_loc *loc) {
  barrier(c, rank, "barrier", loc);
}

const sf__comm_ops sf__comm_shm = {"shared memory", shm_allreduce, shm_broadcast, shm_allgather,
                                   shm_barrier};

/* -------------------------------------------------------- entry points */

/* Checks common to every transport run here, once; the transport sees
 * groups of two or more only. */

static void allreduce(sf_array *a, bool mean, const char *what, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  if (a && !numeric(a->elem))
    sf_runtime_error(loc, "%s: arrays of %s cannot be reduced", what, a->elem->name);
  if (c && c->n > 1)
    c->ops->allreduce(c, rank, a, mean, what, loc);
}

void sf_allreduce_sum(sf_array *a, const sf_loc *loc) { allreduce(a, false, "allreduce_sum", loc); }
void sf_allreduce_mean(sf_array *a, const sf_loc *loc) { allreduce(a, true, "allreduce_mean", loc); }

void sf_broadcast(sf_array *a, int64_t root, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  int64_t n = c ? c->n : 1;
  if (root < 0 || root >= n)
    sf_runtime_error(loc, "broadcast: root %" PRId64 " is not a member of a group of %" PRId64,
                     root, n);
  if (n > 1)
    c->ops->broadcast(c, rank, a, root, loc);
}

sf_array *sf_allgather(sf_array *a, const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  if (c && c->n > 1)
    return c->ops->allgather(c, rank, a, loc);
  sf_array_host(a); /* a kernel may just have written it (nccl.c) */
  return concat(&a, 1, a ? a->elem : &sf_type_f32, rank, loc); /* a copy */
}

void sf_barrier(const sf_loc *loc) {
  int64_t rank;
  sf__comm *c = mine(&rank);
  if (c && c->n > 1)
    c->ops->barrier(c, rank, loc);
}
