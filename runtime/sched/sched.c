/*
 * sched.c — the thread pool every task, actor call and collective runs on.
 *
 * One worker thread per CPU (or --threads N), started at the first task or
 * spawn, so a program without either never starts a thread.  Key design
 * choices:
 *
 *  - Work stealing for tasks.  Each thread that submits tasks (the main
 *    thread and every worker) owns a Chase-Lev deque: it pushes and pops at
 *    the bottom without locks, idle workers steal the oldest task from the
 *    top with one compare-and-swap.  A million tiny tasks cost one
 *    allocation and a few atomic operations each.
 *  - One shared FIFO for everything else (actor mailboxes that became
 *    runnable, retries started by the timeout watchdog): a mutex-protected
 *    list, cheap at actor-call rates and fair across actors.
 *  - Waiting helps.  A thread that awaits a future outside an actor runs
 *    other *tasks* while it waits (never actor work: an actor method
 *    resumed on top of an unrelated stack could deadlock a collective).
 *    When it cannot help it sleeps on a futex in the future's state word.
 *  - Blocking compensates.  A worker that blocks (await inside an actor
 *    method, a collective, a timed-out attempt that will not come back)
 *    counts itself out; if no worker is left to run queued work, a spare
 *    thread starts.  Group members that wait for each other in a barrier
 *    therefore always make progress, whatever the pool size: that is how a
 *    group is "placed as one gang" on one machine.  Spare threads end
 *    after a second of idleness once the pool is back to its size.
 *  - Idle workers park.  One that runs out of work looks once more; at
 *    most about half the CPUs' worth keep looking a little longer (a
 *    bounded spin with sched_yield between rounds), and the rest sleep on
 *    a futex at once.  A submitter wakes one sleeper only when nobody is
 *    looking and no wake-up is already on its way, so the fast path has no
 *    system call and --threads far above the CPU count costs idle threads
 *    nothing (Go's and Tokio's rule: see "idle workers" below).
 *    (Collectives wait differently: an adaptive pure spin, then a futex,
 *    never sched_yield, which on a machine with busy processes hands the
 *    core away for a whole time slice.  Here the yields stay: with a pure
 *    spin instead, tiny tasks ran 3-5x slower in bench/tasks on 2 shared
 *    cores; docs/performance.md.  But a thread whose yield came back a
 *    time slice late stops yielding for a while: yield_fast.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "flagnames.h"
#include "sched.h"

#define MAX_WORKERS 8192
_Static_assert(2 * SF__MAX_THREADS <= MAX_WORKERS,
               "--threads leaves room for the spares that stand in for blocked threads");
#define SPIN_ROUNDS 64        /* steal attempts before sleeping */
#define SPIN_NS 5000LL        /* the most a waiter spins before it sleeps */
#define LOAD_CHECK_NS 10000000LL /* how often sf__spin_ns looks at the machine's load */
#define SPARE_IDLE_NS 1000000000LL

/* ------------------------------------------------------------ futexes */

void sf__futex_wait(_Atomic uint32_t *word, uint32_t expect, int64_t timeout_ns) {
  struct timespec ts, *tp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = timeout_ns / 1000000000LL;
    ts.tv_nsec = timeout_ns % 1000000000LL;
    tp = &ts;
  }
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expect, tp, NULL, 0);
}

void sf__futex_wake(_Atomic uint32_t *word, int n) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

void sf__cond_wait_ns(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)ns;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

/* ----------------------------------------------------------- spinning */

int64_t sf__mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* More runnable threads than online CPUs on the whole machine, from the
 * fourth field of /proc/loadavg ("running/total"); false when it cannot
 * be read. */
static bool oversubscribed(void) {
  static long ncpus;
  if (!ncpus) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    ncpus = n > 0 ? n : 1;
  }
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  char buf[128];
  ssize_t k = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (k <= 0)
    return false;
  buf[k] = '\0';
  char *p = buf;
  for (int field = 0; field < 3 && p; field++)
    p = strchr(p + 1, ' ');
  return p && strtol(p + 1, NULL, 10) > ncpus;
}

static _Atomic int64_t spin_checked = INT64_MIN / 2, spin_budget = SPIN_NS;

/* The machine's load is read at most once per LOAD_CHECK_NS (a few
 * microseconds per read), by whichever waiter finds the figure stale. */
int64_t sf__spin_ns(void) {
  int64_t now = sf__mono_ns();
  int64_t last = atomic_load_explicit(&spin_checked, memory_order_relaxed);
  if (now - last >= LOAD_CHECK_NS && atomic_compare_exchange_strong(&spin_checked, &last, now))
    atomic_store_explicit(&spin_budget, oversubscribed() ? 0 : SPIN_NS, memory_order_relaxed);
  return atomic_load_explicit(&spin_budget, memory_order_relaxed);
}

/* sched_yield, unless yields were slow on this thread lately; false when
 * it did not yield or the yield came back late.  A yield that takes long
 * handed the core to another process for a time slice, and a waiter that
 * goes on yielding sees its event a slice late each time: beside two busy
 * loops a 1K allreduce through g.all took 2 ms a call, main and the idle
 * workers each yielding to a busy loop while the answer or the job waited.
 * Such a waiter sleeps on its futex instead, which its waker ends at once
 * (and the scheduler favours a woken sleeper).  After a slow yield the
 * thread skips yielding for YIELD_BACKOFF_NS, then tries again. */
#define YIELD_SLOW_NS 50000LL
#define YIELD_BACKOFF_NS 100000000LL
static _Thread_local int64_t slow_yield_at = INT64_MIN / 2;

static bool yield_fast(void) {
  int64_t t0 = sf__mono_ns();
  if (t0 - slow_yield_at < YIELD_BACKOFF_NS)
    return false;
  sched_yield();
  int64_t t1 = sf__mono_ns();
  if (t1 - t0 < YIELD_SLOW_NS)
    return true;
  slow_yield_at = t1;
  return false;
}

/* ------------------------------------------------------------- deques */

/* Chase-Lev work-stealing deque (Lê, Pop, Cohen, Zappa Nardelli, "Correct
 * and efficient work-stealing for weak memory models", PPoPP 2013), with
 * sequentially consistent atomics in place of fences so ThreadSanitizer
 * understands it.  Grown buffers are kept until the pool ends, because a
 * thief may still be reading the old one. */
typedef struct dq_buf {
  int64_t mask;
  struct dq_buf *older;
  _Atomic(sf__job *) slot[];
} dq_buf;

typedef struct deque {
  _Alignas(64) _Atomic int64_t top;
  _Alignas(64) _Atomic int64_t bottom;
  _Atomic(dq_buf *) buf;
  int64_t top_seen; /* the owner's last read of top (sf__sched_queue_at_least) */
} deque;

static dq_buf *dq_buf_new(int64_t cap, dq_buf *older) {
  dq_buf *b = sf_alloc(sizeof *b + (size_t)cap * sizeof(b->slot[0]));
  b->mask = cap - 1;
  b->older = older;
  return b;
}

static void dq_init(deque *d) {
  atomic_init(&d->top, 0);
  atomic_init(&d->bottom, 0);
  atomic_init(&d->buf, dq_buf_new(1024, NULL));
  d->top_seen = 0;
}

static void dq_push(deque *d, sf__job *j) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
  dq_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
  if (b - t > a->mask) {
    dq_buf *g = dq_buf_new((a->mask + 1) * 2, a);
    for (int64_t i = t; i < b; i++)
      atomic_store_explicit(&g->slot[i & g->mask],
                            atomic_load_explicit(&a->slot[i & a->mask], memory_order_relaxed),
                            memory_order_relaxed);
    atomic_store_explicit(&d->buf, g, memory_order_release);
    a = g;
  }
  atomic_store_explicit(&a->slot[b & a->mask], j, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b + 1, memory_order_seq_cst);
}

static sf__job *dq_pop(deque *d) {
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
  dq_buf *a = atomic_load_explicit(&d->buf, memory_order_relaxed);
  atomic_store_explicit(&d->bottom, b, memory_order_seq_cst);
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  if (t > b) {
    atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    return NULL;
  }
  sf__job *j = atomic_load_explicit(&a->slot[b & a->mask], memory_order_relaxed);
  if (t == b) { /* the last one: race the thieves for it */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
      j = NULL;
    atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
  }
  return j;
}

static sf__job *dq_steal(deque *d) {
  int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
  if (t >= b)
    return NULL;
  dq_buf *a = atomic_load_explicit(&d->buf, memory_order_acquire);
  sf__job *j = atomic_load_explicit(&a->slot[t & a->mask], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                               memory_order_relaxed))
    return NULL;
  return j;
}

static bool dq_empty(deque *d) {
  return atomic_load_explicit(&d->top, memory_order_relaxed) >=
         atomic_load_explicit(&d->bottom, memory_order_relaxed);
}

/* ------------------------------------------------------------ the pool */

typedef struct worker {
  deque dq;
  int32_t id;        /* 0 is the main thread */
  bool pool;         /* a pool thread (not the main thread) */
  uint32_t rng;      /* victim selection */
  pthread_t thread;
  struct worker *retired_next; /* on the retired list once a spare left */
} worker;

/* Spares that left stay reachable here, not freed: a thief may still be
 * looking at their (empty) deques. */
static worker *retired;

static struct {
  pthread_once_t once;
  int32_t target;                 /* pool size asked for */
  _Atomic int32_t nworkers;       /* slots used in workers[] */
  _Atomic int32_t nthreads;       /* live pool threads */
  _Atomic int32_t nsleeping;      /* parked, or about to park */
  _Atomic int32_t nspinning;      /* idle workers still looking for work */
  int32_t max_spinning;           /* at most this many look at once */
  _Atomic bool waking;            /* a wake-up is on its way to a parked worker */
  _Atomic int32_t nblocked;
  _Atomic uint32_t epoch;         /* futex word idle workers sleep on */
  _Atomic bool stopping;
  _Atomic(worker *) workers[MAX_WORKERS]; /* published by spawn_thread */

  pthread_mutex_t shared_lock;    /* the shared FIFO */
  sf__job *shared_head, *shared_tail;
  _Atomic int64_t shared_len;
  pthread_mutex_t spawn_lock;
} P = {.once = PTHREAD_ONCE_INIT,
       .shared_lock = PTHREAD_MUTEX_INITIALIZER,
       .spawn_lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local worker *self;
/* Tasks run inside waits on this thread's stack, nested. */
static _Thread_local int help_depth;

int32_t sf__worker_id(void) { return self ? self->id : -1; }
static int32_t cpu_count(void);

/* The pool's size, known before it starts: a throttle or a resource count
 * read before the first queued call must not see 0 (every call would then
 * run on the spot, and the pool would never start). */
int32_t sf__pool_size(void) {
  int32_t t = P.target;
  return t > 0 ? t : sf__options.threads > 0 ? (int32_t)sf__options.threads : cpu_count();
}

static worker *worker_new(bool pool) {
  worker *w = sf_alloc(sizeof *w);
  memset(w, 0, sizeof *w);
  dq_init(&w->dq);
  w->pool = pool;
  int32_t id = atomic_fetch_add(&P.nworkers, 1);
  if (id >= MAX_WORKERS)
    sf_runtime_error(NULL, "more than %d threads are blocked at once (deadlocked actors?)",
                     MAX_WORKERS);
  w->id = id;
  w->rng = 0x9e3779b9u * (uint32_t)(id + 1);
  atomic_store_explicit(&P.workers[id], w, memory_order_release);
  return w;
}

/* After new work was queued: wakes one parked worker, unless a worker is
 * still looking (it will find the work, or wake one as it gives up: see
 * spin_end and park) or a wake-up is already on its way (the worker it
 * reaches looks for everything queued since).  A submitter therefore
 * makes no system call while anyone looks, and a burst of calls wakes one
 * thread, not one per call. */
static void wake_one(void) {
  if (atomic_load_explicit(&P.nsleeping, memory_order_seq_cst) == 0 ||
      atomic_load_explicit(&P.nspinning, memory_order_seq_cst) > 0 ||
      atomic_load_explicit(&P.waking, memory_order_seq_cst))
    return;
  bool no = false;
  if (!atomic_compare_exchange_strong(&P.waking, &no, true))
    return;
  atomic_fetch_add_explicit(&P.epoch, 1, memory_order_seq_cst);
  sf__futex_wake(&P.epoch, 1);
}

static sf__job *shared_pop(void) {
  if (atomic_load_explicit(&P.shared_len, memory_order_seq_cst) == 0)
    return NULL;
  pthread_mutex_lock(&P.shared_lock);
  sf__job *j = P.shared_head;
  if (j) {
    P.shared_head = j->next;
    if (!P.shared_head)
      P.shared_tail = NULL;
    atomic_fetch_sub(&P.shared_len, 1);
  }
  pthread_mutex_unlock(&P.shared_lock);
  return j;
}

static uint32_t xorshift(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

/* A task from some other thread's deque, or NULL. */
static sf__job *steal_any(worker *w) {
  int32_t n = atomic_load_explicit(&P.nworkers, memory_order_acquire);
  if (n <= 1 && w && w->id == 0)
    return NULL;
  uint32_t start = xorshift(&w->rng) % (uint32_t)n;
  for (int32_t k = 0; k < n; k++) {
    worker *v = atomic_load_explicit(&P.workers[(start + (uint32_t)k) % (uint32_t)n],
                                     memory_order_acquire);
    if (!v || v == w || dq_empty(&v->dq))
      continue;
    sf__job *j = dq_steal(&v->dq);
    if (j)
      return j;
  }
  return NULL;
}

static bool anything_queued(void) {
  if (atomic_load(&P.shared_len) > 0)
    return true;
  int32_t n = atomic_load(&P.nworkers);
  for (int32_t i = 0; i < n; i++) {
    worker *w = atomic_load_explicit(&P.workers[i], memory_order_acquire);
    if (w && !dq_empty(&w->dq))
      return true;
  }
  return false;
}

static void *worker_main(void *arg);

static void spawn_thread(void) {
  pthread_mutex_lock(&P.spawn_lock);
  worker *w = worker_new(true);
  atomic_fetch_add(&P.nthreads, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 8u << 20);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&w->thread, &attr, worker_main, w);
  pthread_attr_destroy(&attr);
  pthread_mutex_unlock(&P.spawn_lock);
  if (rc != 0) {
    atomic_fetch_sub(&P.nthreads, 1);
    sf_runtime_error(NULL, "cannot start a worker thread: %s", strerror(rc));
  }
}

/* True when this spare thread may end: the pool is over its size. */
static bool surplus(void) {
  int32_t live = atomic_load(&P.nthreads) - atomic_load(&P.nblocked);
  return live > P.target;
}

/* ------------------------------------------------------ idle workers */

/* An idle worker looks for work once (every deque and the shared FIFO);
 * only a few of them at a time (max_spinning, about half the CPUs) go on
 * looking for SPIN_ROUNDS rounds, yielding between rounds, and the others
 * park on the epoch futex at once.  That is Go's and Tokio's rule: with
 * --threads far above the CPU count, the extra threads sleep instead of
 * each scanning every deque and yielding, which made 2048 threads on 2
 * cores take 10 s for 0.05 s of work.  A worker that just finished a job
 * may spin (the next job of a stream of tiny tasks usually comes within
 * microseconds, and a spinner finds it with no system call on either
 * side); so may the worker a wake-up reached. */

static bool spin_begin(void) {
  int32_t n = atomic_load(&P.nspinning);
  while (n < P.max_spinning)
    if (atomic_compare_exchange_weak(&P.nspinning, &n, n + 1))
      return true;
  return false;
}

/* A spinner stops looking.  Submitters did not wake anyone while it
 * looked: if it was the last one and leaves with a job, work it did not
 * see may be queued, so a parked worker takes over the looking. */
static void spin_end(bool found) {
  if (atomic_fetch_sub(&P.nspinning, 1) == 1 && found && anything_queued())
    wake_one();
}

static sf__job *look_once(worker *w) {
  sf__job *j = steal_any(w);
  return j ? j : shared_pop();
}

/* Work for an idle worker, or NULL.  spinning: it holds a place in
 * nspinning (which this gives back) and keeps looking; may_spin: it may
 * take a place if one is free. */
static sf__job *find_work(worker *w, bool spinning, bool may_spin) {
  sf__job *j = look_once(w);
  if (!spinning && (j || !may_spin || !spin_begin()))
    return j;
  for (int spin = 0; !j && spin < SPIN_ROUNDS; spin++) {
    bool fast = yield_fast();
    j = look_once(w);
    if (!fast)
      break; /* park: a submitter's futex wake reaches it at once */
  }
  spin_end(j != NULL);
  return j;
}

/* Sleeps until a wake-up, or a timeout: 100 ms while spares may retire,
 * else 1 s (a backstop; every queued job wakes a worker).  The worker
 * counts itself in nsleeping before its last look, and a submitter
 * queues before it reads nsleeping: one of the two sees the other.
 * Returns true when this worker took the wake-up in flight and must
 * look for work as a spinner. */
static bool park(int64_t *idle_since) {
  uint32_t e = atomic_load_explicit(&P.epoch, memory_order_seq_cst);
  atomic_fetch_add_explicit(&P.nsleeping, 1, memory_order_seq_cst);
  if (!anything_queued()) {
    if (!*idle_since)
      *idle_since = sf__mono_ns();
    bool spares = atomic_load(&P.nthreads) > P.target;
    sf__futex_wait(&P.epoch, e, spares ? 100000000LL : 1000000000LL);
  }
  atomic_fetch_sub_explicit(&P.nsleeping, 1, memory_order_seq_cst);
  /* Whoever leaves the sleepers first takes the wake-up, so one is never
   * left pending with nobody on the way. */
  if (!atomic_exchange(&P.waking, false))
    return false;
  atomic_fetch_add(&P.nspinning, 1);
  return true;
}

/* A spare no longer needed leaves, but only if the count still shows a
 * surplus after taking this thread out.  True when it left. */
static bool retire(void) {
  if (atomic_fetch_sub(&P.nthreads, 1) - 1 - atomic_load(&P.nblocked) < P.target) {
    atomic_fetch_add(&P.nthreads, 1);
    return false;
  }
  atomic_store(&P.workers[self->id], NULL); /* its deque is empty */
  pthread_mutex_lock(&P.spawn_lock);
  self->retired_next = retired;
  retired = self;
  pthread_mutex_unlock(&P.spawn_lock);
  return true;
}

/* Pool workers run tasks under SCHED_BATCH (SFLOW_SCHED_BATCH=0 keeps
 * the default policy): the kernel then does not let a worker that a
 * submitter just woke preempt the submitter.  With the default policy
 * every wake-up of a parked worker (main queueing a stream of tiny tasks
 * while the pool drains it) handed the core over at once: one cold round
 * of 200,000 tiny tasks made 9,000-14,000 voluntary and as many
 * involuntary context switches, 230-600 under SCHED_BATCH, and the
 * process's CPU time fell from 0.18-0.28 s to 0.13-0.14 s
 * (docs/performance.md, issue #34).  Actor messages are hand-offs whose
 * latency counts (a group's members meet at barriers; beside busy loops a
 * woken member that may not preempt waits a neighbour's slice): a worker
 * draining an actor goes back to the default policy (sf__sched_prompt)
 * and a task job puts it back (sf__sched_batch), one system call at each
 * change of kind only.  Nice values and fair shares are unchanged. */
static _Thread_local int8_t batch_state; /* 0 unknown/off, 1 batch, -1 prompt */
static _Thread_local bool pool_thread;   /* worker_main's threads only, never main */
static _Atomic int8_t batch_wanted = -1; /* -1: not read yet */

static void set_policy(int policy, int8_t state) {
  struct sched_param sp = {0};
  if (pthread_setschedparam(pthread_self(), policy, &sp) == 0)
    batch_state = state;
}

void sf__sched_batch(void) {
  if (batch_state == 1 || !pool_thread)
    return;
  int8_t want = atomic_load_explicit(&batch_wanted, memory_order_relaxed);
  if (want < 0) {
    const char *e = getenv("SFLOW_SCHED_BATCH");
    want = !(e && strcmp(e, "0") == 0);
    atomic_store_explicit(&batch_wanted, want, memory_order_relaxed);
  }
  if (want)
    set_policy(SCHED_BATCH, 1);
}

void sf__sched_prompt(void) {
  if (batch_state == 1)
    set_policy(SCHED_OTHER, -1);
}

static void batch_policy(void) {
  pool_thread = true;
  sf__sched_batch();
}

static void *worker_main(void *arg) {
  self = arg;
  batch_policy();
  int64_t idle_since = 0;
  bool spinning = false, ran = false;
  while (!atomic_load_explicit(&P.stopping, memory_order_relaxed)) {
    sf__job *j = dq_pop(&self->dq);
    if (!j)
      j = shared_pop();
    if (j && spinning)
      spin_end(true);
    else if (!j)
      j = find_work(self, spinning, ran);
    spinning = false;
    if (j) {
      idle_since = 0;
      ran = true;
      j->run(j);
      continue;
    }
    ran = false;
    spinning = park(&idle_since);
    if (!spinning && idle_since && sf__mono_ns() - idle_since > SPARE_IDLE_NS && surplus()) {
      if (retire())
        return NULL;
      idle_since = 0;
    }
  }
  if (spinning)
    spin_end(false);
  atomic_fetch_sub(&P.nthreads, 1);
  return NULL;
}

static int32_t cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0)
      return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)n : 1;
}

static void pool_start(void) {
  P.target = sf__options.threads > 0 ? (int32_t)sf__options.threads : cpu_count();
  int32_t cpus = cpu_count();
  P.max_spinning = (P.target < cpus ? P.target : cpus) / 2;
  if (P.max_spinning < 1)
    P.max_spinning = 1;
  if (!self)
    self = worker_new(false); /* the thread that started the pool: main */
  for (int32_t i = 0; i < P.target; i++)
    spawn_thread();
}

void sf__sched_start(void) { pthread_once(&P.once, pool_start); }

/* Gives the calling non-pool thread a deque of its own (the main thread
 * has one from pool_start). */
static worker *me(void) {
  sf__sched_start();
  if (!self)
    self = worker_new(false);
  return self;
}

void sf__sched_push_task(sf__job *j) {
  worker *w = me();
  dq_push(&w->dq, j);
  wake_one();
}

int64_t sf__sched_queue_len(void) {
  if (!self)
    return 0;
  return atomic_load_explicit(&self->dq.bottom, memory_order_relaxed) -
         atomic_load_explicit(&self->dq.top, memory_order_relaxed);
}

/* Top only grows, so bottom less an old read of top is at least the
 * length: while that bound is under n the answer is no without reading
 * top, the line every thief writes.  A submitter asks this once a task,
 * and reading top each time costs a cache miss per task while a thief
 * is stealing (8.6% of one `perf` profile of a cold round of 200,000
 * tasks with the thief on the other, idle core; under 0.5% on a loaded
 * machine, where the thief rarely runs at the same time). */
bool sf__sched_queue_at_least(int64_t n) {
  if (!self)
    return n <= 0;
  deque *d = &self->dq;
  int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
  if (b - d->top_seen < n)
    return false;
  d->top_seen = atomic_load_explicit(&d->top, memory_order_relaxed);
  return b - d->top_seen >= n;
}

void sf__sched_push_shared(sf__job *j) {
  sf__sched_start();
  j->next = NULL;
  pthread_mutex_lock(&P.shared_lock);
  if (P.shared_tail)
    P.shared_tail->next = j;
  else
    P.shared_head = j;
  P.shared_tail = j;
  atomic_fetch_add(&P.shared_len, 1);
  pthread_mutex_unlock(&P.shared_lock);
  wake_one();
}

/* ----------------------------------------------------------- blocking */

/* Compensation: a pool thread that blocks counts itself out.  For a
 * collective (eager) a spare starts at once, because the members it waits
 * for need threads now.  For an await the monitor thread decides a few
 * milliseconds later, and only if work is queued and nobody is idle: most
 * awaited futures complete within microseconds, and starting a thread for
 * each blocked link of a long chain of futures would start thousands. */
#define MONITOR_TICK_NS 2000000LL

static _Atomic uint32_t monitor_word;
static pthread_once_t monitor_once = PTHREAD_ONCE_INIT;

static void *monitor_main(void *arg) {
  (void)arg;
  for (;;) {
    uint32_t w = atomic_load(&monitor_word);
    if (atomic_load(&P.nblocked) == 0) {
      sf__futex_wait(&monitor_word, w, 100000000LL);
      continue;
    }
    struct timespec ts = {0, MONITOR_TICK_NS};
    nanosleep(&ts, NULL);
    int32_t live = atomic_load(&P.nthreads) - atomic_load(&P.nblocked);
    if (atomic_load(&P.nsleeping) == 0 && anything_queued())
      for (; live < P.target; live++)
        spawn_thread();
  }
  return NULL;
}

static void monitor_start(void) {
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &attr, monitor_main, NULL);
  pthread_attr_destroy(&attr);
}

static void block_begin(bool eager) {
  if (!self || !self->pool)
    return;
  if (atomic_fetch_add(&P.nblocked, 1) == 0 && !eager) {
    pthread_once(&monitor_once, monitor_start);
    atomic_fetch_add(&monitor_word, 1);
    sf__futex_wake(&monitor_word, 1);
  }
  if (eager) {
    int32_t live = atomic_load(&P.nthreads) - atomic_load(&P.nblocked);
    if (live < P.target && atomic_load(&P.nsleeping) == 0)
      spawn_thread();
  }
}

void sf__sched_block_begin(void) { block_begin(true); }

void sf__sched_block_end(void) {
  if (!self || !self->pool)
    return;
  atomic_fetch_sub(&P.nblocked, 1);
}

/* A thread stuck in an abandoned attempt (see task.c): count it out for
 * good until it returns, and make up for it. */
void sf__sched_thread_lost(void) {
  atomic_fetch_add(&P.nblocked, 1);
  spawn_thread();
}
void sf__sched_thread_back(void) { atomic_fetch_sub(&P.nblocked, 1); }

bool sf__sched_in_pool(void) { return self && self->pool; }

void sf__sched_wait(_Atomic uint32_t *word, uint32_t done_mask, uint32_t waiters_bit,
                    bool may_help) {
  /* Only a thread that is not inside a task helps (main, waiting in the
   * workflow): a task picked up on top of a waiting task could be one
   * that depends on it, and neither would ever finish.  Tasks run this
   * way do not help in turn. */
  may_help = may_help && self && !self->pool && help_depth == 0;
  int spins = 0;
  for (;;) {
    uint32_t s = atomic_load_explicit(word, memory_order_acquire);
    if (s & done_mask)
      return;
    if (may_help) {
      /* Oldest first, from our own deque and then the others': awaiting
       * in submission order (a batch, a chain of futures) then finds the
       * task it needs, or one that is ready. */
      sf__job *j = dq_steal(&self->dq);
      if (!j && !dq_empty(&self->dq))
        continue; /* lost a race with a thief: look again */
      if (!j)
        j = steal_any(self);
      if (j) {
        help_depth++;
        j->run(j);
        help_depth--;
        spins = 0;
        continue;
      }
    }
    if (++spins < 64) {
      if (!yield_fast())
        spins = 64; /* look once more, then sleep (yield_fast) */
      continue;
    }
    if (!(s & waiters_bit) &&
        !atomic_compare_exchange_weak(word, &s, s | waiters_bit))
      continue;
    block_begin(false);
    sf__futex_wait(word, s | waiters_bit, may_help ? 1000000LL : 100000000LL);
    sf__sched_block_end();
  }
}

/* Depth of tasks run inline by awaits on this thread (future.c, task.c). */
_Thread_local int sf__inline_depth;

/* --------------------------------------------------------- parallel for */

/* fn over [0, n) in chunks on the pool, the caller taking part: the CPU
 * version of a kernel launch.  Chunks are claimed from a shared counter,
 * so a job that starts late finds nothing left and returns; the shared
 * record is reference counted because such a job may start after the
 * caller has returned.  A runtime error in a chunk is caught there and
 * raised again on the caller, where it belongs (a task, or main): the
 * lowest failing chunk's. */
typedef struct pfor {
  _Atomic int64_t refs, next, done;
  int64_t n, chunk, nchunks;
  void (*fn)(void *ctx, int64_t lo, int64_t hi);
  void *ctx;
  _Atomic uint32_t finished; /* futex word: 1 when all chunks are done */
  _Atomic bool failed;
  pthread_mutex_t fail_mu;   /* error and fail_chunk */
  int64_t fail_chunk;        /* the lowest chunk that failed */
  char error[SF__ERROR_MAX];
  sf__job jobs[];
} pfor;

static void pfor_release(pfor *p) {
  if (atomic_fetch_sub(&p->refs, 1) == 1) {
    pthread_mutex_destroy(&p->fail_mu);
    sf_free(p);
  }
}

static __attribute__((noinline)) void pfor_chunk(pfor *p, int64_t c) {
  jmp_buf jb, *saved = sf__error_jmp;
  sf_frame *saved_frames = sf__error_frames;
  sf__error_jmp = &jb;
  sf__error_frames = sf_frames;
  if (setjmp(jb) == 0) {
    int64_t lo = c * p->chunk, hi = lo + p->chunk < p->n ? lo + p->chunk : p->n;
    p->fn(p->ctx, lo, hi);
  } else {
    /* The lowest failing chunk's error is the one raised, so a kernel
     * failing in several threads reports its lowest failing thread (each
     * chunk runs its threads in order), whatever the chunks' timing. */
    pthread_mutex_lock(&p->fail_mu);
    if (!atomic_load(&p->failed) || c < p->fail_chunk) {
      p->fail_chunk = c;
      memcpy(p->error, sf__error_message, sizeof p->error);
      atomic_store(&p->failed, true);
    }
    pthread_mutex_unlock(&p->fail_mu);
  }
  sf__error_jmp = saved;
  sf__error_frames = saved_frames;
}

static void pfor_work(pfor *p) {
  for (;;) {
    int64_t c = atomic_fetch_add(&p->next, 1);
    if (c >= p->nchunks)
      return;
    pfor_chunk(p, c);
    if (atomic_fetch_add(&p->done, 1) + 1 == p->nchunks) {
      atomic_store(&p->finished, 1);
      sf__futex_wake(&p->finished, INT32_MAX);
    }
  }
}

static void pfor_job(sf__job *j) {
  pfor *p = *(pfor **)(j + 1);
  pfor_work(p);
  pfor_release(p);
}

void sf__parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                      void *ctx) {
  sf__sched_start();
  /* --threads N means N threads compute: the caller (main, or a task on
   * a worker) and N - 1 helpers.  Counting the caller on top of the pool
   * ran "one thread" loops on two, against the BLAS (told the pool size)
   * and against a peer held to one thread. */
  int64_t workers = P.target > 1 ? P.target : 1;
  int64_t nchunks = n / (grain > 0 ? grain : 1);
  if (nchunks > 4 * workers)
    nchunks = 4 * workers; /* a few chunks per thread balance uneven ones */
  if (nchunks <= 1) {
    fn(ctx, 0, n);
    return;
  }
  int64_t helpers = nchunks - 1 < workers - 1 ? nchunks - 1 : workers - 1;
  /* Each helper job is an sf__job followed by the record's address. */
  size_t jsz = sizeof(sf__job) + sizeof(pfor *);
  pfor *p = sf_alloc(sizeof *p + (size_t)helpers * jsz);
  atomic_init(&p->refs, helpers + 1);
  atomic_init(&p->next, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->finished, 0);
  atomic_init(&p->failed, false);
  pthread_mutex_init(&p->fail_mu, NULL);
  p->fail_chunk = INT64_MAX;
  p->n = n;
  p->nchunks = nchunks;
  p->chunk = (n + nchunks - 1) / nchunks;
  p->nchunks = (n + p->chunk - 1) / p->chunk;
  p->fn = fn;
  p->ctx = ctx;
  for (int64_t i = 0; i < helpers; i++) {
    sf__job *j = (sf__job *)((char *)p->jobs + (size_t)i * jsz);
    j->run = pfor_job;
    *(pfor **)(j + 1) = p;
    sf__sched_push_shared(j);
  }
  pfor_work(p);
  while (!atomic_load(&p->finished)) {
    block_begin(false);
    sf__futex_wait(&p->finished, 0, 1000000LL);
    sf__sched_block_end();
  }
  char error[SF__ERROR_MAX];
  bool failed = atomic_load(&p->failed);
  if (failed)
    memcpy(error, p->error, sizeof error);
  pfor_release(p);
  if (failed)
    sf__raise_message(error);
}
