/*
 * sched.h — the local scheduling layer's internal names (prefix `sf__`):
 * the work-stealing pool (sched.c), futures (future.c), @cpus and @gpus
 * (resources.c), tasks and the hooks the layers above install (task.c),
 * actors and groups (actor.c), collectives (collective.c), progress,
 * counters and timeouts (progress.c) and traces (trace.c).  What the
 * four call files share only among themselves is in task_internal.h.
 * Above core.h, below durable.h, gpu.h and cluster.h
 * (docs/architecture.md, "Runtime layers").
 *
 * Key design choice: the scheduler knows nothing of the journal, the GPU
 * or other nodes.  It calls them through hooks it owns and they install
 * at start-up; a section per file, in the order a task meets them.
 */
#ifndef SF_SCHED_H
#define SF_SCHED_H

#include "core.h"

/* ---------------------------------------------------------- sched.c */

/* A unit of work on the pool: a task attempt or an actor's mailbox drain. */
typedef struct sf__job {
  void (*run)(struct sf__job *job);
  struct sf__job *next; /* links in the shared queue */
} sf__job;

void sf__sched_start(void);              /* idempotent; first task or spawn */
void sf__sched_push_task(sf__job *j);    /* the caller's own deque */
/* A pool worker about to run a task job (SCHED_BATCH) or an actor's
 * messages (the default policy): sched.c, batch_policy. */
void sf__sched_batch(void);
void sf__sched_prompt(void);
void sf__sched_push_shared(sf__job *j);  /* the shared FIFO (actors, retries) */
int64_t sf__sched_queue_len(void);      /* tasks waiting in the caller's deque */
bool sf__sched_queue_at_least(int64_t n); /* the same, compared: no read of top while clearly under */
/* Waits until (*word & done_mask) != 0, sleeping on the futex with
 * waiters_bit set in *word; may_help runs queued tasks meanwhile. */
void sf__sched_wait(_Atomic uint32_t *word, uint32_t done_mask, uint32_t waiters_bit,
                    bool may_help);
/* Around any wait that does not help (collectives, mutexes held long): a
 * pool thread counts itself out so a spare can take its place. */
void sf__sched_block_begin(void);
void sf__sched_block_end(void);
void sf__sched_thread_lost(void); /* a thread stuck in an abandoned attempt */
void sf__sched_thread_back(void);
bool sf__sched_in_pool(void);
int32_t sf__worker_id(void);      /* 0 main, 1.. pool threads, -1 others */
int32_t sf__pool_size(void);
extern _Thread_local int sf__inline_depth;
void sf__futex_wait(_Atomic uint32_t *word, uint32_t expect, int64_t timeout_ns);
/* fn(ctx, lo, hi) over [0, n) in chunks of at least grain on the pool, the
 * caller taking part; a runtime error in a chunk is raised on the caller. */
void sf__parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                      void *ctx);
void sf__futex_wake(_Atomic uint32_t *word, int n);
/* Waiting that is prompt under CPU contention (sched.c): spin for at most
 * sf__spin_ns() nanoseconds with sf__cpu_relax between polls, then sleep
 * on a futex that the other side wakes.  Never sched_yield: on a busy
 * machine it gives the core to another process for a whole time slice.
 * sf__spin_ns is 0 while the machine has more runnable threads than CPUs
 * (a spinner would only take the core from the thread it waits for). */
int64_t sf__spin_ns(void);
int64_t sf__mono_ns(void); /* CLOCK_MONOTONIC in nanoseconds */
static inline void sf__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#else
  __asm__ volatile("" ::: "memory");
#endif
}
/* pthread_cond_timedwait for at most ns nanoseconds (ns < 1 s) from now. */
void sf__cond_wait_ns(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ns);

/* --------------------------------------------------------- future.c */

bool sf__future_ready(sf_future *f);
/* For the multi-node layer (dispatch.c, worker_tasks.c): the type of a future's value;
 * fail a future from elsewhere; wait for a result without raising
 * (false: message in err). */
const sf_type *sf__future_type(sf_future *f);
void sf__future_reject(sf_future *f, const char *message);
bool sf__future_wait_result(sf_future *f, void *out, char *err, size_t errlen);
/* Head: f's value is held by a worker (true when it is wanted already). */
bool sf__future_held(sf_future *f);
/* A new reference to f unless its count already reached 0 (its destructor
 * runs or is about to): cluster/head/objects_head.c's weak pointers to held futures. */
bool sf__future_try_retain(sf_future *f);
/* Told once when a future completes (done) or is freed still pending
 * (!done); fn owns w from then on.  sf__future_notify is false when f is
 * complete already (w not taken). */
typedef struct sf__fwaiter {
  struct sf__fwaiter *next;
  void (*fn)(struct sf__fwaiter *w, bool done);
} sf__fwaiter;
bool sf__future_notify(sf_future *f, sf__fwaiter *w);
/* Worker: a future that failed with message (a failed input of a task
 * sent here, which fails as it would where it was made). */
sf_future *sf__future_failed(const sf_type *t, const char *message);

/* ------------------------------------------------------ resources.c */

extern _Thread_local int32_t sf__current_gpu; /* device of the running call, -1 */
int32_t sf__gpu_devices(void);                 /* weak: 0 unless the GPU layer says */
bool sf__no_gpu_notice_first(void);            /* true once: who tells "no GPU" */

/* Hooks around each task call and actor method (sf__guarded, task.c),
 * set by the GPU layer: begin's result goes to end (after a call that
 * returned; it may raise the call's error) or to fail (after one that
 * raised).  NULL: nothing to do. */
extern int32_t (*sf__call_begin_hook)(void);
extern void (*sf__call_end_hook)(int32_t mark);
extern void (*sf__call_fail_hook)(int32_t mark);

/* ----------------------------------------------------------- task.c */

void sf__task_timed_out(void *task, int32_t attempt);
/* For the multi-node layer (dispatch.c, worker_tasks.c): run a task here without journal or
 * placement (a worker serving the head); complete a future from elsewhere
 * (value moved in). */
sf_future *sf__task_submit_local(const sf_task_desc *d, void *args, uint64_t key);
void sf__future_resolve(sf_future *f, void *value);
/* The same, journaling out[0..n) as the call's output (dispatch.c: what a
 * --nodes task printed, as the head printed it). */
void sf__future_resolve_out(sf_future *f, void *value, const char *out, size_t n);
/* sf__task_submit_local starting at attempt `first` (sf__attempt, and the
 * @retry budget left), for a worker or a retry moved off a lost node; key
 * is the call's identity as the head gave it (builtins.c, random streams). */
/* out: if not NULL, the lines the successful attempt printed are appended
 * there before the future completes (dispatch.c journals them). */
sf_future *sf__task_submit_attempt(const sf_task_desc *d, void *args, int32_t first,
                                   sf__buf *out, uint64_t key);

/* Hooks task.c owns and the layers above install before any thread
 * (docs/architecture.md, "Hooks").  NULL members: the layer is absent
 * (nothing journaled, checkpointed or placed elsewhere).
 *
 * Durability (sf__durable_install, durable/): the journal's sequence
 * numbers, replay and records of main's task and actor calls, and actors'
 * checkpoints; each member is the journal.c or checkpoint.c function of
 * the same name in durable.h. */
enum { SF__REPLAY_LIVE = 0, SF__REPLAY_SKIP, SF__REPLAY_RERUN }; /* call_mode */
extern _Thread_local int sf__task_depth; /* > 0 inside a task or actor method */
typedef struct sf__durable_hooks {
  int64_t (*next)(void);     /* sf__journal_next */
  int64_t (*spawn_id)(void); /* sf__spawn_id */
  sf_future *(*task_replay)(int64_t seq, const sf_task_desc *d, const sf_loc *loc);
  void (*task_done)(int64_t seq, const sf_task_desc *d, void *res, const char *out, size_t n);
  int (*call_mode)(sf_actor *a, int64_t seq);
  void (*call_result)(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res);
  void (*call_done)(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res,
                    const char *out, size_t n);
  int64_t (*route_any)(int64_t seq, sf_actor **members, int64_t n, int64_t best);
  bool (*restore)(sf_actor *a);                   /* sf__checkpoint_restore */
  void (*checkpoint)(sf_actor *a, bool after_all); /* sf__checkpoint_maybe */
  void (*plan_group)(const sf_actor_desc *d, int64_t id, int64_t n);
  int64_t (*group_epoch)(const sf_actor_desc *d, int64_t id);
} sf__durable_hooks;
extern sf__durable_hooks sf__durable;
/* Placement on other nodes (sf__cluster_install, cluster/): task places a
 * task call (sf__remote_task), spawn an actor or a gang (sf__ractor_spawn);
 * true when another node took it.  call and drop reach an actor placed
 * elsewhere (sf__ractor_call, sf__ractor_drop); demand and future_gone a
 * future whose value a worker holds (sf__remote_demand,
 * sf__remote_future_gone). */
struct sf__ractor;
struct sf__sink; /* actor.c */
typedef struct sf__placer {
  bool (*task)(const sf_task_desc *d, void *args, sf_future *f, int64_t seq, uint64_t key);
  bool (*spawn)(sf_actor **members, int64_t n, void *args);
  void (*call)(struct sf__ractor *r, const sf_method_desc *md, void *args, bool all,
               const struct sf__sink *sink);
  void (*drop)(struct sf__ractor *r);
  void (*demand)(sf_future *f);
  void (*future_gone)(sf_future *f);
} sf__placer;
extern sf__placer sf__place;

/* ---------------------------------------------------------- actor.c */

typedef struct sf__comm sf__comm;
/* Member rank's shard of an array of len elements over n members:
 * [len*rank/n, len*(rank+1)/n), the slices shared memory's allreduce sums
 * (so shards differ in size by at most one element). */
static inline void sf__coll_shard(int64_t len, int64_t rank, int64_t n, int64_t *lo, int64_t *hi) {
  *lo = n > 0 ? len * rank / n : 0;
  *hi = n > 0 ? len * (rank + 1) / n : len;
}
/* The sharded collectives over the current actor's group (a group of one
 * changes nothing): reduce_scatter sums (mean) into this member's shard of
 * a, all_gather fills every member's a from every member's shard. */
void sf__reduce_scatter(sf_array *a, bool mean, const sf_loc *loc);
void sf__all_gather(sf_array *a, const sf_loc *loc);
/* Where the result of a call to an actor on another node goes: actor.c
 * makes it, ractor_head.c completes it with sf__actor_complete. */
typedef struct sf__sink {
  sf_future *f;     /* h.m(): the call's future (a reference), or NULL */
  void *gather;     /* g.all: the call's gather, member idx */
  int64_t idx, seq; /* seq: journal sequence number, or -1 */
  int64_t calls;    /* the actor's call count after this call (the journal's
                       index: --resume skips what a checkpoint holds) */
} sf__sink;
/* res (moved in) is the value when why is NULL. */
void sf__actor_complete(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                        const char *why);
/* The same, journaling out[0..on) as what the call printed (on the head,
 * as the head printed it). */
void sf__actor_complete_out(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                            const char *why, const char *out, size_t on);
/* The same, giving back the caller's reference to a before the waiter
 * wakes (a remote call's reference: the waiter may drop the last one). */
void sf__actor_complete_drop(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                             const char *why, const char *out, size_t on);
struct sf__ractor;
void sf__actor_set_remote(sf_actor *a, struct sf__ractor *r);
/* Worker side of actor.c: an actor with a given identity, from init args
 * or (state non-NULL, moved in) a checkpointed state. */
sf_actor *sf__actor_spawn_at(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t size,
                             sf__comm *comm, void *init_args, void *state, int64_t calls,
                             int64_t epochs, uint64_t key);
/* keep (or NULL) collects what the call prints, for its result frame. */
sf_future *sf__actor_post(sf_actor *a, const sf_method_desc *md, void *args, bool all,
                          bool mute, sf__buf *keep);
/* Worker: the head moved this actor elsewhere; its queued calls fail. */
void sf__actor_stop(sf_actor *a);
sf_actor *sf__current_actor(void);
/* Group members placed in this process and alive, restored ones included:
 * the callers that may multiply at once (gpu layer's product split). */
int64_t sf__group_members_here(void);
int64_t sf__actor_rank(sf_actor *a);
int64_t sf__actor_size(sf_actor *a);
const sf_actor_desc *sf__actor_desc(sf_actor *a);
void *sf__actor_state(sf_actor *a);
int64_t sf__actor_id(sf_actor *a);
uint64_t sf__actor_key(sf_actor *a); /* its random streams' identity (builtins.c) */
int64_t sf__actor_calls(sf_actor *a);
void sf__actor_set_calls(sf_actor *a, int64_t n); /* after a restore */
int64_t sf__actor_restored(sf_actor *a);
int64_t sf__actor_epochs(sf_actor *a);
void sf__actor_set_epochs(sf_actor *a, int64_t e);
int64_t sf__actor_restore_epoch(sf_actor *a);
void sf__actor_set_restore_epoch(sf_actor *a, int64_t e);

/* ----------------------------------------------------- collective.c */

/* The collectives of one group, behind one interface (docs/architecture.md,
 * "Collectives").  Key design choice: a group picks its transport once,
 * when it forms, and every collective goes through that transport's
 * vtable.  Three transports register in sf__coll_transports: shared memory
 * between the members' threads (this file), the TCP ring between nodes
 * (group_ring.c, installed by sf__cluster_install) and NCCL (nccl.c,
 * installed by sf__gpu_install).  NCCL stacks on the group's host
 * transport: it meets the members through it (meet), runs a collective on
 * the device when every member's array is there, on GPUs of their own,
 * and otherwise hands the call to the host transport. */

/* One member's part of a collective: count elements of elem at data
 * (host memory), from the member's array a (NULL: it brought none; a
 * device transport reads a->dev).  A host transport calls sf_array_host(a)
 * before it reads data: a kernel may just have written the array. */
typedef struct sf__coll_buf {
  sf_array *a;
  void *data;
  const sf_type *elem;
  int64_t count;
  const char *what; /* "allreduce_sum", ... for messages */
  /* meet: set by the device transport before the members meet */
  bool reduce;      /* the call reduces (its elements must be numbers) */
  bool same_len;    /* every member must bring one length */
  int64_t gpu;      /* >= 0: this member's array can go on the device, on
                       GPU gpu (unique across the group's nodes); -1: not */
  /* set by meet: the members met for this call, the host transport's
   * own call skips its first meeting */
  bool met;
} sf__coll_buf;

/* What meet tells every member alike. */
typedef struct sf__coll_view {
  bool device;       /* every member offered its array (gpu >= 0), one length and
                        element type, every one on a GPU of its own */
  int64_t shares[2]; /* two members that offered on one GPU, or -1 (shared memory) */
} sf__coll_view;

/* A transport's state is per group (shared memory: one for all members)
 * or per member (the ring: one per process); every op gets the caller's
 * rank.  The ops raise a runtime error at loc on failure, naming `what`. */
typedef struct sf__coll_transport {
  const char *name;
  bool shared_memory; /* members read each other's buffers: a device collective
                         ends with a barrier before a buffer is reused */
  /* State for a group of n (arg: the transport's own parameters); NULL when
   * it cannot be made. */
  void *(*init)(int64_t n, const void *arg);
  void (*allreduce)(void *s, int64_t rank, sf__coll_buf *b, bool mean, const sf_loc *loc);
  void (*broadcast)(void *s, int64_t rank, sf__coll_buf *b, int64_t root, const sf_loc *loc);
  sf_array *(*allgather)(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc); /* owned */
  /* Sharded collectives (ZeRO, docs/train.md): every member brings the
   * whole array of one length, member r's shard is sf__coll_shard's.
   * reduce_scatter leaves the group's sum (mean) in this member's shard of
   * b, bitwise the allreduce's values there; the rest of b is unspecified.
   * all_gather copies every member's shard of its b into every member's b
   * (in place). */
  void (*reduce_scatter)(void *s, int64_t rank, sf__coll_buf *b, bool mean, const sf_loc *loc);
  void (*all_gather)(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc);
  void (*barrier)(void *s, int64_t rank, const char *what, const sf_loc *loc);
  /* The members meet with their buffers (a device transport asks; NULL in
   * a device transport): checks one element type (and length) and fills v. */
  void (*meet)(void *s, int64_t rank, sf__coll_buf *b, sf__coll_view *v, const sf_loc *loc);
  /* The group can no longer meet: waiting and later collectives fail with
   * why (a collective of member rank failed). */
  void (*abort)(void *s, int64_t rank, const char *why);
  /* A member's method failed outside any collective: members waiting for
   * it must not hang (the ring: its peers' ring timeout bounds them). */
  void (*member_failed)(void *s, int64_t rank, const char *why);
  /* True, with the reason, once the group can no longer meet. */
  bool (*failed)(void *s, char *why, size_t n);
  void (*destroy)(void *s);
} sf__coll_transport;

/* The registry, a hook of this layer (NULL: the layer that owns the
 * transport is absent).  init's arg: SHM NULL; RING group_ring.c's
 * sf__ring_group_arg; NCCL an sf__coll_stack. */
enum { SF__COLL_SHM, SF__COLL_RING, SF__COLL_NCCL, SF__COLL_KINDS };
extern const sf__coll_transport *sf__coll_transports[SF__COLL_KINDS];
extern const sf__coll_transport sf__coll_shm;
/* What a device transport is stacked on; id names the group's incarnation
 * (the ring id: a restarted group gets a new one; 0 in one process). */
typedef struct sf__coll_stack {
  const sf__coll_transport *host;
  void *hs;
  uint64_t id;
} sf__coll_stack;

typedef struct sf__comm sf__comm;
/* A group of n over the host transport `kind` (SHM, RING), with the device
 * transport stacked on it when one is registered; NULL when the transport
 * is not registered or cannot start. */
sf__comm *sf__comm_new(int64_t n, int kind, const void *arg, uint64_t id);
sf__comm *sf__comm_retain(sf__comm *c);
void sf__comm_release(sf__comm *c);
/* Member rank's method failed: members waiting for it must not hang. */
void sf__comm_abort(sf__comm *c, int64_t rank, const char *why);
_Atomic int64_t *sf__comm_pending(sf__comm *c, int64_t rank); /* member's call count */
void *sf__comm_host(sf__comm *c); /* the host transport's state (group_ring.c's) */
const char *sf__comm_transport(sf__comm *c); /* "nccl over shared memory", ... */
struct sf_actor;
sf__comm *sf__actor_comm(sf_actor *a);

/* -------------------------------------------------------- progress.c */

/* Run-wide counters, for the progress line, the summary and the trace.
 * The ones bumped for every task and call are per thread (one writer, no
 * locked instruction, no shared cache line); sf__counters_sum adds them. */
typedef struct sf__counters {
  _Atomic int64_t tasks, tasks_done, started, finished, calls, calls_done;
  struct sf__counters *next;
} sf__counters;
extern _Thread_local sf__counters *sf__my_counters;
sf__counters *sf__counters_register(void);
void sf__counters_sum(sf__counters *total);
#define SF__COUNT_BY(field, k)                                                            \
  do {                                                                                    \
    sf__counters *c_ = sf__my_counters ? sf__my_counters : sf__counters_register();       \
    atomic_store_explicit(&c_->field,                                                     \
                          atomic_load_explicit(&c_->field, memory_order_relaxed) + (k),   \
                          memory_order_relaxed);                                          \
  } while (0)
#define SF__COUNT(field) SF__COUNT_BY(field, 1)

typedef struct sf__stats_t {
  _Atomic int64_t tasks_failed, retries;
  _Atomic int64_t objects_fetched, object_bytes; /* cluster objects: large results */
  _Atomic int64_t objects_moved, moved_bytes;     /* cluster objects: worker to worker */
  _Atomic int64_t actors;
  _Atomic int64_t waiting; /* threads blocked in await */
  _Atomic int64_t replayed, checkpoints, restored;
} sf__stats_t;
extern sf__stats_t sf__stats;
void sf__stats_wait_begin(void);
void sf__stats_wait_end(void);
/* "prog: notice: ..." on stderr, one line, unless --quiet. */
void sf__notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* @timeout: registers attempt `attempt` of task; returns a handle for end. */
void *sf__watch_begin(void *task, int32_t attempt, double seconds);
bool sf__watch_end(void *handle); /* true if it fired */
void sf__progress_clear(void);
/* What a std module says the run is doing, shown on the progress line in
 * place of the bare counters: SF__STATUS_SWEEP (std.tune) wins over
 * SF__STATUS_TRAIN (std.train), whose trials it may run.  text is copied;
 * NULL clears the slot.  sf__progress_wanted is false when no line is
 * shown, so a caller can skip formatting. */
enum { SF__STATUS_TRAIN, SF__STATUS_SWEEP, SF__STATUS_SLOTS };
void sf__progress_status(int slot, const char *text);
bool sf__progress_wanted(void);
/* seconds as the line shows a time left: "42 s", "3:07", "1:02:09". */
void sf__fmt_duration(char *buf, size_t n, double seconds);
/* Every write to stdout or stderr while a run may show the progress line:
 * write(2) of buf, with the line cleared first and drawn again after when
 * it is on the same terminal (progress.c). */
bool sf__out_write(int fd, const char *buf, size_t n);
/* one when n == 1, else many: "1 task", "2 tasks", "1 retry". */
const char *sf__plural(int64_t n, const char *one, const char *many);
/* Start/stop of the run: the progress line and the summary. */
void sf__run_begin(const sf_program *prog);
/* Installs this layer's hooks in the core (main.c, before any thread):
 * print's writes through sf__out_write, and the progress line cleared
 * before a runtime error's message. */
void sf__sched_install(void);
void sf__run_end(void);

/* ----------------------------------------------------------- trace.c */

extern bool sf__trace_on;
double sf__trace_now(void); /* microseconds since start (0 when tracing is off) */
/* One complete event [t0, now) on this thread's track. */
void sf__trace_event(const char *name, const char *cat, double t0, int32_t attempt,
                     const char *error);
/* One sample of a counter track (name a literal) at now: queue length,
 * RSS, device memory, samples/s (docs/observability.md). */
void sf__trace_counter(const char *name, double value);
/* Before the run (and before any node starts): the --trace path is checked
 * and opened (a temporary file beside it, or the FIFO or device itself). */
bool sf__trace_open(char *err, size_t errlen);
void sf__trace_discard(void); /* the run did not start: no trace, no temporary file */
void sf__trace_write(void); /* at exit: the JSON file */
/* The trace clock in ns (CLOCK_MONOTONIC; shifted on a worker by
 * SFLOW_TEST_CLOCK_SKEW_MS): heartbeat answers carry it (control.c). */
uint64_t sf__trace_clock_ns(void);
/* Worker of a traced run (--sflow-trace): record, and ship batches. */
void sf__trace_worker_begin(void);
/* The cluster's part of tracing (installed by sf__cluster_install):
 * worker_event takes each event of a worker (times in ns on its trace
 * clock) for its next batch to the head; on the head, nodes is the run's
 * node count, host(k) node k's host (NULL: unknown) and clock(k) its
 * clock offset (cluster/head/trace_head.c, worker/trace_worker.c). */
typedef struct sf__trace_cluster_hooks {
  void (*worker_event)(const char *name, const char *cat, uint64_t ts_ns, uint64_t dur_ns,
                       int32_t tid, int32_t attempt, const char *error);
  int (*nodes)(void);
  const char *(*host)(int k);
  bool (*clock)(int k, int64_t *offset_ns);
} sf__trace_cluster_hooks;
extern sf__trace_cluster_hooks sf__trace_cluster;
/* Head: one event of worker `node`, as its trace frame carried it. */
typedef struct sf__trace_text {
  const char *p;
  size_t n;
} sf__trace_text;
void sf__trace_remote_event(int node, const sf__trace_text *name, const sf__trace_text *cat,
                            const sf__trace_text *error, uint64_t ts_ns, uint64_t dur_ns,
                            int32_t tid, int32_t attempt);
/* Head: a task attempt sent to `node` at t0 (sf__trace_now) answered now. */
void sf__trace_dispatch(const char *name, double t0, int node, uint64_t id, int32_t attempt,
                        const char *error);

/* -------------------------------------------------------- taskmap.c */

/* std.data's `map<T, R>(f: fn(T) -> future<R>, xs: T[], in_flight, ordered)
 * -> R[]` (an @extern): the task f names over every element, at most
 * in_flight calls at once; results in element order, or (ordered false)
 * in the order the calls finished. */
sf_array *sf_std_data_map(int64_t f, sf_array *xs, int64_t in_flight, bool ordered,
                          const sf_type *T, const sf_type *R, const sf_loc *loc);

#endif
