/*
 * internal.h — names shared between the runtime's own files (prefix `sf__`).
 * Generated code never sees this header; it calls only what sflow.h declares.
 *
 * Key design choice: one header with a section per runtime file, in the
 * order a program meets them (memory, strings, arrays, printing, errors,
 * builtins, flags), so the whole internal surface reads top to bottom.
 *
 * Conventions every file follows:
 *  - A NULL sf_str* means the empty string and a NULL sf_array* means an
 *    empty array: zero-filled memory (a fresh str[] array, an actor field
 *    before init) must be a valid value, never a crash.
 *  - Arguments are borrowed; results documented "owned" carry +1.
 */
#ifndef SF_INTERNAL_H
#define SF_INTERNAL_H

#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sflow.h"

#define SF__VERSION "0.1.0"

/* ------------------------------------------------------------ mem.c */

/* Destructors for futures, actors and groups, filled in by the files that
 * implement them.  A destructor frees the object itself; with no destructor
 * registered the object's memory is simply freed. */
typedef void (*sf__dtor_fn)(sf_obj *obj);
extern sf__dtor_fn sf__obj_dtor[SF_OBJ_GROUP + 1];

/* sf_alloc for count * size bytes, with the multiplication checked. */
void *sf__alloc_n(size_t count, size_t size);
/* realloc of an sf_alloc block that never returns NULL (out of memory is a
 * runtime error). */
void *sf__realloc(void *p, size_t n);

/* Blocks of up to SF__BLOCK_MAX bytes recycled through per-thread caches
 * (futures with their task records: a million-task run allocates and frees
 * a million of them).  sf__block_alloc returns the block and its class,
 * which sf__block_free needs back; a larger size is plain sf_alloc, class
 * -1. */
#define SF__BLOCK_MAX 512
void *sf__block_alloc(size_t n, int32_t *cls);
void sf__block_free(void *p, int32_t cls);

/* ------------------------------------------------------------ str.c */

/* Bytes and length of a string, treating NULL as "". */
const char *sf__str_data(const sf_str *s);
int64_t sf__str_len(const sf_str *s);

/* Python repr() of a double / float into buf (NUL-terminated, returns the
 * length).  SF__FLOAT_BUF bytes always suffice. */
#define SF__FLOAT_BUF 32
int sf__fmt_f64_repr(double v, char *buf);
int sf__fmt_f32_repr(float v, char *buf);

/* Strict number parsing shared by casts and command-line flags.  The whole
 * of [s, s+len) must be the number; no surrounding whitespace. */
typedef enum { SF__PARSE_OK = 0, SF__PARSE_BAD, SF__PARSE_RANGE } sf__parse_status;
sf__parse_status sf__parse_i64(const char *s, size_t len, int64_t *out);
sf__parse_status sf__parse_i32(const char *s, size_t len, int32_t *out);
sf__parse_status sf__parse_f64(const char *s, size_t len, double *out);
sf__parse_status sf__parse_f32(const char *s, size_t len, float *out);
sf__parse_status sf__parse_bool(const char *s, size_t len, bool *out);

/* Writes s as a double-quoted sflow string literal (escapes for \" \\ and
 * control bytes) into buf of size n, cutting it to at most max_bytes of
 * content followed by "..." so error messages stay one readable line. */
void sf__quote(const char *s, size_t len, size_t max_bytes, char *buf, size_t n);
/* Appends s as a quoted literal, whole, to a print buffer (see print.c). */
struct sf__buf;
void sf__buf_put_quoted(struct sf__buf *b, const char *s, size_t len);

/* ---------------------------------------------------------- types.c */

/* True when a value of type t holds references that need retain/release. */
bool sf__type_has_refs(const sf_type *t);
/* The interned descriptor of "array of elem" (valid for the whole run).
 * Descriptors are compared by structure, never by pointer: the compiler
 * emits its own copies of the same types. */
const sf_type *sf__array_type(const sf_type *elem);

/* ---------------------------------------------------------- array.c */

/* Index helper: pointer to element i (no bounds check). */
static inline void *sf__array_at(const sf_array *a, int64_t i) {
  return (char *)a->data + i * (int64_t)a->elem->size;
}

/* ---------------------------------------------------------- print.c */

/* Appends the printed form of a value of type t at p to a growing buffer;
 * `nested` quotes strings (inside arrays and structs). */
typedef struct sf__buf {
  char *data;
  size_t len, cap;
  char *inline_data; /* the caller's fixed storage (may be NULL), not freed */
  size_t inline_cap;
} sf__buf;
void sf__buf_init(sf__buf *b, char *storage, size_t cap);
/* Makes room for n more bytes (doubling); the slow path of sf__buf_put. */
void sf__buf_grow(sf__buf *b, size_t n);
/* Inline: journal records and serialized values are many small puts, and a
 * call per put was a tenth of the cost of a journaled empty task. */
static inline void sf__buf_put(sf__buf *b, const char *s, size_t n) {
  if (n > b->cap - b->len)
    sf__buf_grow(b, n);
  if (n)
    memcpy(b->data + b->len, s, n);
  b->len += n;
}
void sf__buf_free(sf__buf *b);
void sf__format_value(sf__buf *b, const sf_type *t, const void *p, bool nested);
/* write(2) all of buf to fd, retrying on EINTR and partial writes. */
bool sf__write_all(int fd, const char *buf, size_t n);
/* When set (a worker of a --nodes run), sf_print_end hands each finished
 * line (with its newline) here instead of writing fd 1. */
extern void (*sf__print_hook)(const char *line, size_t n);
/* Set while a restarted actor replays a call whose result the head already
 * delivered: its lines were printed the first time (ractor.c). */
extern _Thread_local bool sf__print_mute;
/* When set, sf_print_end also appends each line it prints (or hands to
 * the hook) here: the output of one attempt of a --nodes task (task.c),
 * which travels with its result so the head can journal it. */
extern _Thread_local sf__buf *sf__print_keep;

/* ---------------------------------------------------------- error.c */

/* How a task attempt catches runtime errors instead of ending the program:
 * set sf__error_jmp (and optionally sf__error_handler) on the task's thread
 * before running it.  On an error the runtime formats the full message
 * ("file:line:col: runtime error: ...") into sf__error_message, calls the
 * handler if any, then longjmps to *sf__error_jmp with value 1.  With no jmp
 * set the message goes to stderr and the process exits with code 70. */
#define SF__ERROR_MAX 1024
#define SF__EXIT_RUNTIME 70
#define SF__EXIT_USAGE 2
typedef void (*sf__error_fn)(const char *message);
extern _Thread_local sf__error_fn sf__error_handler;
extern _Thread_local jmp_buf *sf__error_jmp;
extern _Thread_local char sf__error_message[SF__ERROR_MAX];
/* Retry count of the task attempt running on this thread (sf_attempt). */
extern _Thread_local int64_t sf__attempt;
/* Raises an already formatted message ("file:l:c: runtime error: ..."),
 * e.g. one caught on another thread. */
_Noreturn void sf__raise_message(const char *message);

/* ---------------------------------------------------------- sched.c */

/* A unit of work on the pool: a task attempt or an actor's mailbox drain. */
typedef struct sf__job {
  void (*run)(struct sf__job *job);
  struct sf__job *next; /* links in the shared queue */
} sf__job;

void sf__sched_start(void);              /* idempotent; first task or spawn */
void sf__sched_push_task(sf__job *j);    /* the caller's own deque */
void sf__sched_push_shared(sf__job *j);  /* the shared FIFO (actors, retries) */
int64_t sf__sched_queue_len(void);      /* tasks waiting in the caller's deque */
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

/* ----------------------------------------------------------- task.c */

extern _Thread_local int32_t sf__current_gpu; /* device of the running call, -1 */
int32_t sf__gpu_devices(void);                 /* weak: 0 unless the GPU layer says */
void sf__task_timed_out(void *task, int32_t attempt);
bool sf__future_ready(sf_future *f);
/* For the multi-node layer (remote.c): run a task here without journal or
 * placement (a worker serving the head); the type of a future's value;
 * complete a future from elsewhere (value moved in); wait for a result
 * without raising (false: message in err). */
sf_future *sf__task_submit_local(const sf_task_desc *d, void *args, uint64_t key);
const sf_type *sf__future_type(sf_future *f);
void sf__future_resolve(sf_future *f, void *value);
/* The same, journaling out[0..n) as the call's output (remote.c: what a
 * --nodes task printed, as the head printed it). */
void sf__future_resolve_out(sf_future *f, void *value, const char *out, size_t n);
void sf__future_reject(sf_future *f, const char *message);
bool sf__future_wait_result(sf_future *f, void *out, char *err, size_t errlen);
/* sf__task_submit_local starting at attempt `first` (sf__attempt, and the
 * @retry budget left), for a worker or a retry moved off a lost node; key
 * is the call's identity as the head gave it (builtins.c, random streams). */
/* out: if not NULL, the lines the successful attempt printed are appended
 * there before the future completes (remote.c journals them). */
sf_future *sf__task_submit_attempt(const sf_task_desc *d, void *args, int32_t first,
                                   sf__buf *out, uint64_t key);

/* --------------------------------------------------------- remote.c */

/* Placement across nodes: true when another node takes this task call.
 * args stays owned by the caller (copy what is needed); f is completed
 * later with sf__future_resolve / sf__future_reject; key (the call's
 * identity) goes with every attempt. */
bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq, uint64_t key);
/* Head, on the control thread (cluster.c, H.mu not held): a task result or
 * print output from worker `node`. */
struct sf__frame;
void sf__remote_on_result(int node, const struct sf__frame *f);
void sf__remote_on_print(int node, const char *s, size_t n);
/* Worker: a task-submit frame from the head (validated, queued, run on
 * runner threads; results go back with sf__worker_send_frame). */
void sf__remote_worker_start(void);
void sf__remote_worker_submit(const struct sf__frame *f);
/* Object store (remote.c, "objects"): an object frame, on the head from
 * the worker that holds a large result, on a worker from the head (a
 * fetch request or a release). */
void sf__remote_on_object(int node, const struct sf__frame *f);
void sf__remote_worker_object(const struct sf__frame *f);
/* Head: f's value is held by a worker (true when it is wanted already);
 * task.c calls sf__remote_demand when a held future is first wanted, and
 * sf__remote_future_gone when a held future's last reference goes (nothing
 * here can want the value any more: the worker may drop it). */
bool sf__future_held(sf_future *f);
void sf__remote_demand(sf_future *f);
void sf__remote_future_gone(sf_future *f);
/* A new reference to f unless its count already reached 0 (its destructor
 * runs or is about to): remote.c's weak pointers to held futures. */
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
/* Worker: serves the object store to other workers on listener fd
 * (a thread; remote.c). */
void sf__remote_objects_listen(int fd);
/* The task descriptor at offset off from &sf_program_desc, when that lies
 * in this executable and is a descriptor named name[0..nl); else NULL with
 * a message.  A peer's number is never followed further than that. */
const sf_task_desc *sf__remote_find_task(uint32_t off, const uint8_t *name, uint32_t nl,
                                         char *err, size_t errlen);
typedef struct sf__comm sf__comm;
/* The descriptor at offset off whose name is name[0..nl), checked like a
 * task's (same rules, as an sf_method_desc or sf_actor_desc). */
const sf_method_desc *sf__remote_find_method(uint32_t off, const uint8_t *name, uint32_t nl,
                                             char *err, size_t errlen);
const sf_actor_desc *sf__remote_find_class(uint32_t off, const uint8_t *name, uint32_t nl,
                                           char *err, size_t errlen);
/* Whether values of type t can travel (no futures, actors or groups). */
bool sf__remote_portable(const sf_type *t);
/* A GPU share placed with an actor or task: share in thousandths of one
 * GPU (<= 1000) or whole GPUs * 1000, 0 for none; while held, taken on
 * device dev of its node (a share) or on the devices in mask (whole). */
typedef struct sf__gpu_hold {
  int32_t share, dev;
  uint64_t mask;
  bool held;
} sf__gpu_hold;
/* The share @gpus(gpus) takes in this run, 0 when no node has a GPU (the
 * work then stays on the head, as in a single-node run). */
int32_t sf__remote_gpu_share(double gpus);
/* Placement for actors (ractor.c): a live node with `need` free slots,
 * the most free first, workers before the head on a tie (the head only
 * when head_ok); its slots are held until sf__remote_unplace.  With a GPU
 * share (gpu->share), the best fit among nodes where it is free, held
 * with the slots.  -1: none. */
int sf__remote_place(int need, sf__gpu_hold *gpu, bool head_ok, const bool *exclude);
void sf__remote_unplace(int node, int need, sf__gpu_hold *gpu);
bool sf__remote_active(void); /* a --nodes run on the head */
const char *sf__remote_lost_why(int node); /* NULL while alive */

/* Where the result of a call to an actor on another node goes: task.c
 * makes it, ractor.c completes it with sf__actor_complete. */
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
/* Appends to b what the head printed for output s[0..n) of node (with the
 * "[node K] " prefix when more than one node runs work; remote.c). */
void sf__remote_printed_as(int node, const char *s, size_t n, sf__buf *b);
/* The same, journaling out[0..on) as what the call printed (on the head,
 * as the head printed it). */
void sf__actor_complete_out(sf_actor *a, const sf_method_desc *md, const sf__sink *s, void *res,
                            const char *why, const char *out, size_t on);
struct sf__ractor;
void sf__actor_set_remote(sf_actor *a, struct sf__ractor *r);
/* Head (ractor.c): places a spawn on workers when it can: one actor
 * (n 1) or a gang of n members; true when it did (args consumed). */
bool sf__ractor_spawn(sf_actor **members, int64_t n, void *args);
/* Head: a call to an actor on a worker; args consumed. */
void sf__ractor_call(struct sf__ractor *r, const sf_method_desc *md, void *args, bool all,
                     const sf__sink *sink);
void sf__ractor_drop(struct sf__ractor *r); /* the handle is gone */
void sf__ractor_node_lost(int node, const char *why);
void sf__ractor_on_frame(int node, const struct sf__frame *f); /* control thread */
/* Worker: actor frames from the head. */
void sf__ractor_worker_frame(const struct sf__frame *f);
/* Worker side of task.c: an actor with a given identity, from init args
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

/* The collectives of one group.  Key design choice: one interface, whose
 * first implementation is shared memory between the members' threads; the
 * TCP ring (multi-node) and NCCL (device arrays) implement the same ops.
 * A collective may be handed an array whose only current copy is on the
 * device (a kernel just wrote it: collectives do not end a run of GPU
 * statements), so a host transport calls sf_array_host(a) before reading
 * it, or hands device arrays to nccl.h. */
typedef struct sf__comm sf__comm;
typedef struct sf__comm_ops {
  const char *name;
  void (*allreduce)(sf__comm *c, int64_t rank, sf_array *a, bool mean, const char *what,
                    const sf_loc *loc);
  void (*broadcast)(sf__comm *c, int64_t rank, sf_array *a, int64_t root, const sf_loc *loc);
  sf_array *(*allgather)(sf__comm *c, int64_t rank, sf_array *a, const sf_loc *loc); /* owned */
  void (*barrier)(sf__comm *c, int64_t rank, const sf_loc *loc);
} sf__comm_ops;
extern const sf__comm_ops sf__comm_shm; /* members on one machine */
sf__comm *sf__comm_new(int64_t n);
sf__comm *sf__comm_retain(sf__comm *c);
void sf__comm_release(sf__comm *c);
void sf__comm_abort(sf__comm *c, int64_t rank, const char *why);
_Atomic int64_t *sf__comm_pending(sf__comm *c, int64_t rank); /* member's call count */
/* A communicator over another transport: ops get c and reach their own
 * state with sf__comm_impl; impl_free(impl) runs with the last release. */
sf__comm *sf__comm_new_ops(int64_t n, const sf__comm_ops *ops, void *impl,
                           void (*impl_free)(void *));
void *sf__comm_impl(sf__comm *c);
/* For nccl.c: the group's NCCL state (made by its first device
 * collective, freed with c), and whether the group can no longer meet
 * (true, with the reason in why). */
struct sf__nccl_group;
_Atomic(struct sf__nccl_group *) *sf__comm_nccl(sf__comm *c);
bool sf__comm_failed(sf__comm *c, char *why, size_t n);
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
  _Atomic int64_t objects_fetched, object_bytes; /* remote.c: large results */
  _Atomic int64_t objects_moved, moved_bytes;     /* remote.c: worker to worker */
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
/* Every write to stdout or stderr while a run may show the progress line:
 * write(2) of buf, with the line cleared first and drawn again after when
 * it is on the same terminal (progress.c). */
bool sf__out_write(int fd, const char *buf, size_t n);
/* one when n == 1, else many: "1 task", "2 tasks", "1 retry". */
const char *sf__plural(int64_t n, const char *one, const char *many);
/* Start/stop of the run: the progress line and the summary. */
void sf__run_begin(const sf_program *prog);
void sf__run_end(void);

/* ----------------------------------------------------------- trace.c */

extern bool sf__trace_on;
double sf__trace_now(void); /* microseconds since start (0 when tracing is off) */
/* One complete event [t0, now) on this thread's track. */
void sf__trace_event(const char *name, const char *cat, double t0, int32_t attempt,
                     const char *error);
bool sf__trace_open(char *err, size_t errlen); /* before the run: --trace FILE.tmp */
void sf__trace_write(void); /* at exit: the JSON file */
/* The trace clock in ns (CLOCK_MONOTONIC; shifted on a worker by
 * SFLOW_TEST_CLOCK_SKEW_MS): heartbeat answers carry it (cluster.c). */
uint64_t sf__trace_clock_ns(void);
/* Worker of a traced run (--sflow-trace): record, and ship batches. */
void sf__trace_worker_begin(void);
/* Worker: sends the pending events to the head now (before a result, from
 * the control loop, at shutdown); nothing when there are none. */
void sf__trace_ship(void);
/* Head: a task attempt sent to `node` at t0 (sf__trace_now) answered now. */
void sf__trace_dispatch(const char *name, double t0, int node, uint64_t id, int32_t attempt,
                        const char *error);
/* Head, control thread: a trace frame from worker `node`. */
struct sf__frame;
void sf__trace_remote(int node, const struct sf__frame *f);

/* ---------------------------------------------------------- serial.c */

/* Values to bytes and back, driven by type descriptors: used by
 * checkpoints, the journal and (later) the network. */
void sf__ser_value(sf__buf *b, const sf_type *t, const void *p);
/* Reads one value of type t into p (owned); false on malformed input. */
typedef struct sf__reader {
  const unsigned char *p, *end;
} sf__reader;
bool sf__de_value(sf__reader *r, const sf_type *t, void *p);
bool sf__de_u64(sf__reader *r, uint64_t *v);
void sf__ser_u64(sf__buf *b, uint64_t v);
uint32_t sf__crc32c(uint32_t crc, const void *data, size_t n);

/* --------------------------------------------------------- sha256.c */

/* SHA-256 in one call, or streamed: init, update any number of times,
 * final.  crypto.c builds HMAC-SHA256 and file hashing on it. */
typedef struct {
  uint32_t h[8];
  uint64_t bytes;   /* hashed so far */
  uint8_t buf[64];  /* a partial block */
  size_t used;
} sf__sha256_ctx;
void sf__sha256_init(sf__sha256_ctx *c);
void sf__sha256_update(sf__sha256_ctx *c, const void *data, size_t n);
void sf__sha256_final(sf__sha256_ctx *c, uint8_t out[32]);
void sf__sha256(const void *data, size_t n, uint8_t out[32]);
void sf__sha256_hex(const void *data, size_t n, char out[65]);

/* --------------------------------------------------------- journal.c */

enum { SF__REPLAY_LIVE = 0, SF__REPLAY_SKIP, SF__REPLAY_RERUN };
enum { SF__CAPTURE_OFF = 0, SF__CAPTURE_KEEP, SF__CAPTURE_MUTE };
/* The sink of one journaled call's print lines, on its runner's stack:
 * begin pushes it on this thread's stack (OFF pushes nothing: the lines
 * belong to the enclosing call), end pops it, out gives the lines it
 * kept (KEEP only) until free. */
typedef struct sf__capture sf__capture;
struct sf__capture {
  int mode;
  bool pushed;
  sf__buf buf;
  sf__capture *prev;
};
extern _Thread_local sf__capture *sf__capture_cur; /* print.c appends here */
void sf__capture_line(const char *s, size_t n);
bool sf__capture_muted(void);                      /* print.c: a replay prints nothing */
void sf__capture_begin(sf__capture *c, int mode);
void sf__capture_end(sf__capture *c);
const char *sf__capture_out(const sf__capture *c, size_t *n);
void sf__capture_free(sf__capture *c); /* ends it too */

int64_t sf__journal_next(void);  /* sequence number of main's next call, or -1 */
int64_t sf__spawn_id(void);      /* main's spawn counter (-1 off main) */
sf_future *sf__journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc);
/* out[0..n): the lines the call printed (its capture, or as the head
 * printed another node's). */
void sf__journal_task_done(int64_t seq, const sf_task_desc *d, void *res, const char *out,
                           size_t n);
int sf__journal_call_mode(sf_actor *a, int64_t seq);
void sf__journal_call_result(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res);
void sf__journal_call_done(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res,
                           const char *out, size_t n);
int64_t sf__journal_route_any(int64_t seq, sf_actor **members, int64_t n, int64_t best);
double sf__journal_value(double live); /* now()/rand on main: replayed or recorded */
void sf__journal_begin(const sf_program *prog, sf_value *args);
void sf__journal_end(bool success);
void sf__journal_flush(void);    /* synchronous, before a checkpoint */
int sf__mkdirs(const char *path); /* mkdir -p; 0 on success */
bool sf__checkpoint_restore(sf_actor *a);
void sf__checkpoint_maybe(sf_actor *a, bool after_all);
/* Groups restore as a whole, at the newest g.all epoch every member has a
 * valid checkpoint for (planned once, at spawn, on --resume). */
void sf__checkpoint_plan_group(const sf_actor_desc *d, int64_t id, int64_t n);
int64_t sf__checkpoint_group_epoch(const sf_actor_desc *d, int64_t id);
void sf__checkpoint_clear(void);
/* Worker (ractor.c): when set, checkpoints go to this hook instead of a
 * file; [p, p+n) is the serialized state, valid during the call. */
extern void (*sf__checkpoint_ship)(sf_actor *a, int64_t calls, int64_t epochs, const void *p,
                                   size_t n);
/* Head: writes a checkpoint a worker shipped, as the actor (d, spawn id,
 * rank) would have written it on one node. */
void sf__checkpoint_write_state(const sf_actor_desc *d, int64_t id, int64_t rank, int64_t calls,
                                int64_t epochs, const void *p, size_t n);
void sf__checkpoint_finish(void); /* a successful end: clear, and write no more */
bool sf__fault(const char *point); /* SFLOW_FAULT fault injection, tests only */
extern _Thread_local int sf__task_depth; /* > 0 inside a task or actor method */

/* -------------------------------------------------------- builtins.c */

extern int64_t sf__node_id; /* 0 on the head, k on the k-th --nodes host */

/* The random stream of the call running on this thread (main, a task
 * attempt, an actor message): its identity, the count of calls and spawns
 * it made (the next child's index) and its PCG32 state, made from the key
 * at the first draw.  Whoever runs a call saves the thread's, sets a fresh
 * one with the call's key (sf__rng_enter) and restores it after. */
typedef struct sf__rng {
  uint64_t key, children;
  uint64_t state, inc;
  bool live;
} sf__rng;
extern _Thread_local sf__rng sf__rng_cur;
uint64_t sf__rng_mix(uint64_t key, uint64_t index); /* the key of child `index` of key */
/* The key of the next task call or spawn the running call makes. */
static inline uint64_t sf__rng_child(void) {
  return sf__rng_mix(sf__rng_cur.key, sf__rng_cur.children++);
}
static inline sf__rng sf__rng_enter(uint64_t key) {
  sf__rng saved = sf__rng_cur;
  sf__rng_cur = (sf__rng){.key = key};
  return saved;
}
/* Worker: a line "sflow worker K: ..." on stderr (it reaches the head's). */
void sf__worker_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ----------------------------------------------------------- flags.c */

typedef enum {
  SF__PROGRESS_AUTO = 0,
  SF__PROGRESS_ALWAYS,
  SF__PROGRESS_NEVER
} sf__progress_mode;

/* The runtime's own command-line flags.  String values point into argv,
 * which lives for the whole run, so nothing here is ever freed. */
typedef struct sf__options_t {
  const char *nodes;          /* --nodes FILE, or NULL */
  const char *trace;          /* --trace FILE, or NULL */
  const char *checkpoint_dir; /* --checkpoint-dir DIR, or NULL */
  bool resume;                /* --resume */
  bool quiet;                 /* --quiet */
  bool require_gpu;           /* --require-gpu */
  int32_t progress;           /* sf__progress_mode */
  int64_t threads;            /* --threads N; 0 = one per CPU */
  bool journal;               /* --journal (default true): make the run resumable */
  /* Multi-node runs (net.h, docs/cluster.md). */
  const char *ssh_user;       /* --ssh-user USER, or NULL: the current user */
  const char *ssh_key;        /* --ssh-key FILE, or NULL: agent, then ~/.ssh/id_* */
  const char *known_hosts;    /* --known-hosts FILE, or NULL: ~/.ssh/known_hosts */
  const char *ssh_config;     /* --ssh-config FILE|none, or NULL: ~/.ssh/config, /etc/ssh */
  const char *remote_cache;   /* --remote-cache DIR, or NULL: .cache/sflow */
  bool accept_new_host_keys;  /* --accept-new-host-keys (trust on first use) */
  bool head_runs_work;        /* --head-runs-work (default true) */
  bool cluster_log;           /* --cluster-log: per-node progress on stderr */
  int64_t connect_timeout;    /* --connect-timeout S (default 10) */
  const char *worker;         /* hidden --sflow-worker ID@ADDR:PORT */
  const char *worker_cwd;     /* hidden --sflow-cwd: the head's folder, in hex */
  bool worker_trace;          /* hidden --sflow-trace: the head traces; ship events */
  const char *selftest;       /* hidden --sflow-selftest SPEC (tests, bench) */
} sf__options_t;
extern sf__options_t sf__options;

typedef enum {
  SF__FLAGS_OK = 0,    /* run the program */
  SF__FLAGS_HELP,      /* --help or -h: print sf__usage, exit 0 */
  SF__FLAGS_VERSION,   /* --version: print sf__version, exit 0 */
  SF__FLAGS_ERROR = -1 /* message in err: exit 2 */
} sf__flags_result;

/* Parses argv[1..argc) into one slot per workflow parameter (out has
 * prog->nparams slots) and into sf__options.  String slots are owned (+1)
 * on success and must be given back with sf__flags_release; on any other
 * result nothing is left allocated. */
int sf__parse_flags(const sf_program *prog, int argc, char **argv, sf_value *out,
                    char *err, size_t errlen);
void sf__flags_release(const sf_program *prog, sf_value *args);
void sf__usage(const sf_program *prog, FILE *f);
void sf__version(const sf_program *prog, FILE *f);
/* Optimal-string-alignment edit distance, shared with "did you mean". */
size_t sf__edit_distance(const char *a, const char *b);

#endif
