/*
 * remote.c — task calls placed on the nodes of a --nodes run, and run by
 * the workers.
 *
 * Head.  sf_task_call offers every call here (sf__remote_task).  A call
 * made by workflow main, whose argument and result types can travel
 * (serial.c; no futures or actors inside, except top-level future<T>
 * parameters of portable T), is taken (an @gpus call only when some node
 * of the run has a GPU): its arguments are serialized at once into a task
 * record, which goes to a FIFO backlog.  A call with future arguments
 * first waits on a wait list, without a thread, until each future is
 * complete here or held by a worker ("future arguments" below).  The
 * dispatcher hands backlog entries to the node holding most of a call's
 * input bytes when it has a free slot, else to the live
 * node with the most free slots (slots from the hostfile or the worker's
 * CPU count; the head, node 0, counts with its pool size when
 * --head-runs-work), so each node has at most `slots` tasks in flight and
 * the rest wait at the head, going to whichever node frees a slot first.
 * Frames for one node are encoded into one buffer per dispatch round and
 * handed to the control thread in one piece (sf__cluster_send), which
 * writes them without blocking.  Tasks placed on the head run on runner
 * threads here (submit locally, wait, complete the caller's future).
 *
 * Key design choice: the head owns every retry.  A worker runs exactly one
 * attempt per submission (the attempt number travels in the frame, so
 * attempt() is right there) and answers with the value or the failure;
 * a failure, or the loss of the node (sf__cluster_on_node_lost), puts the
 * task back at the front of the backlog with the next attempt while the
 * @retry budget lasts, so retries land on any live node.  When the budget
 * is spent the future fails with the same message a local run gives
 * ("task 'x' failed after N attempts: cause").  With no live node able to
 * take work, waiting tasks fail with a message saying so.
 *
 * GPUs.  Each node has a count of GPUs (the hostfile's gpus=N, else what
 * its worker detected and sent in its hello; the head's from its own GPU
 * layer when it runs work), learned at the first @gpus call.  An @gpus
 * task also needs a free share there, counted in thousandths per device
 * as task.c counts locally and fitted the same way (a share on the
 * fullest device where it fits, whole devices for more than one), on the
 * node left with the least (best fit).  The share is given back when the
 * attempt ends there, however it ends.  A GPU task that fits nowhere stays
 * in the backlog and the calls behind it still go.  Actors hold a share
 * for their lifetime (sf__remote_place with an sf__gpu_hold).
 *
 * Calls made inside a running task stay on the node that runs it (a task
 * waiting for children that wait for a slot it holds could never finish).
 * Actors and groups are placed by ractor.c, on the same slots: an actor
 * holds its slots for its lifetime (sf__remote_place), and the task
 * dispatcher counts them as taken.
 *
 * Identity of a task across processes of the same executable: the
 * descriptor's offset from &sf_program_desc (load addresses differ under
 * PIE, offsets do not), plus its name.  A worker checks that the offset
 * lies inside its own executable image, is aligned, and points at a
 * descriptor whose name, thunk and types also lie inside the image and
 * whose name equals the one sent; anything else is answered with an error
 * result, never followed blindly.
 *
 * Task-submit payload: u32 name length, name, then the arguments (the
 * SF_STRUCT d->args, serial.c; a future parameter as an ARG_ form: unset,
 * its value, its failure, or a reference to a worker's object).
 * Task-result: status 0 + the serialized value, status 1 + the failure's
 * cause as text, status 2 + a reference to a large value the worker keeps
 * in its object store (u64 object id, u64 size), which the head fetches in
 * object frames only when main wants it ("objects"), or status 3 + u64
 * object id + why: an input object could not be fetched.
 *
 * Ownership (objects).  A task record holds a reference to its future
 * (strong) while it waits, runs, or its held result is wanted or being
 * fetched; once the result is held and nothing awaits it, the record keeps
 * a weak pointer (strong = false), so main dropping its last reference
 * runs the future's destructor, which (FUT_HELD set) calls
 * sf__remote_future_gone: the record is freed and its owner releases the
 * object.  A call with future arguments keeps its argument block, and so a
 * reference to each future, until its record is freed: while a consumer
 * waits or runs, the future of each input (and so the input's record and
 * object) lives.  A held record keeps its own argument block too (lineage:
 * it can be re-run).  Anything that must turn a weak pointer strong does so
 * only while a reference is known to exist (the caller's in
 * sf__remote_demand, a consumer's argument block), or with
 * sf__future_try_retain, which fails once the count reached 0.  Besides,
 * `users` counts the payloads that name a held object; an object the head
 * fetched while payloads still name it is pinned (R.pins) and released on
 * its owner when the last of them is done.
 *
 * Failures (objects).  A lost owner re-runs its held results that can
 * still be wanted (lineage, within their @retry) or fails them naming the
 * loss.  A consumer whose fetch fails answers status 3: it waits again
 * without spending an attempt, avoiding that node, while the producer
 * re-runs (avoiding it too) or fails; a failed input reaches the consumer
 * as a failed future, so it fails as a local call awaiting it would.
 *
 * Worker.  sf__remote_worker_submit (on the worker's control loop) checks
 * the frame and queues it; runner threads (grown on demand) deserialize
 * the arguments, run one attempt with sf__task_submit_attempt on a private
 * copy of the descriptor whose @retry equals that attempt, wait, and send
 * the result.  print output goes to the head as print frames (print.c's
 * hook), which prefixes it with "[node K] " when more than one node runs
 * work.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

/* ============================================================ shared */

/* Whether a value of type t can travel (serial.c writes futures, actors
 * and groups as markers that come back empty). */
bool sf__remote_portable(const sf_type *t) {
  if (!t)
    return true;
  switch (t->kind) {
  case SF_VOID: case SF_BOOL: case SF_I32: case SF_I64: case SF_F32: case SF_F64: case SF_STR:
    return true;
  case SF_ARRAY:
    return sf__remote_portable(t->elem);
  case SF_STRUCT:
    for (int32_t i = 0; i < t->nfields; i++)
      if (!sf__remote_portable(t->fields[i].type))
        return false;
    return true;
  default:
    return false;
  }
}

/* Whether a task's arguments can travel: portable values, and futures of
 * portable values at the top level (remote.c sends their value, their
 * failure, or a reference to a worker's object); *futs: some future. */
static bool args_portable(const sf_type *a, bool *futs) {
  *futs = false;
  if (!a || a->kind != SF_STRUCT)
    return sf__remote_portable(a);
  for (int32_t i = 0; i < a->nfields; i++) {
    const sf_type *ft = a->fields[i].type;
    if (ft->kind == SF_FUTURE) {
      if (!sf__remote_portable(ft->elem))
        return false;
      *futs = true;
    } else if (!sf__remote_portable(ft)) {
      return false;
    }
  }
  return true;
}

static int64_t env_i64(const char *name, int64_t dflt) {
  const char *v = getenv(name);
  char *end;
  long long x = v && *v ? strtoll(v, &end, 10) : 0;
  return v && *v && !*end ? (int64_t)x : dflt;
}

static int32_t value_size(const sf_type *t) {
  return t && t->kind != SF_VOID ? t->size : 0;
}

/* "task 'x' failed after N attempts: CAUSE" -> CAUSE. */
static const char *cause_of(const char *msg) {
  if (strncmp(msg, "task '", 6))
    return msg;
  const char *p = strstr(msg, "' failed after ");
  p = p ? strstr(p, ": ") : NULL;
  return p ? p + 2 : msg;
}

/* ============================================================== head */

/* A held object a task's payload names: where, and whose result it is. */
typedef struct objref {
  uint64_t id, size;
  int node;
  const char *name; /* the producer's task name (static) */
} objref;

typedef struct rtask {
  struct rtask *next;  /* backlog, head-local queue or the wait list */
  struct rtask *wprev; /* the wait list is doubly linked (O(1) removal) */
  struct rtask *hnext; /* hash chain */
  struct rtask *fnext; /* chain of the future-pointer hash */
  uint64_t id;
  const sf_task_desc *d;
  sf_future *f;        /* a reference while strong (see "Ownership"), else a
                        * weak pointer cleared by sf__remote_future_gone */
  bool strong;
  void *args;          /* future arguments: the argument block (its references
                        * held) until the task record is freed; else NULL */
  bool waiting;        /* on the wait list: some future argument is not ready */
  bool front;          /* leaves the wait list for the front of the backlog */
  objref *refs;        /* held objects the current payload names (nrefs) */
  int nrefs;
  int pref;            /* node holding most of those bytes, or -1 */
  int users;           /* payloads of other tasks naming this one's held result */
  int avoid;           /* a node its held result could not be fetched from, or 0 */
  uint8_t *payload;    /* name + args, as sent */
  uint32_t n;
  int32_t attempt;
  uint64_t key;        /* the call's identity (random streams), sent with each attempt */
  int node;            /* -1: waiting in the backlog */
  sf__gpu_hold gpu;    /* @gpus: the share, and where it is taken */
  /* objects: a result held by worker `node` (slot freed), wanted by the
   * head (awaited), being fetched */
  bool held, wanted, fetching;
  int obj_chunks;
  uint8_t *obj;        /* (obj_total) bytes, obj_got of them received */
  uint64_t obj_total, obj_got;
  char *out;           /* a held result's output, as printed here (journal) */
  size_t out_n;
  double trace_t0;     /* --trace: when the submit frame was queued */
} rtask;

#define NBUCKETS 4096
#define SHARE_UNIT 1000 /* as task.c: shares of a GPU in thousandths */
#define MAX_NODE_GPUS 64
/* A worker holds up to PIPELINE x slots tasks: `slots` running and the
 * next ones already there when they finish (no round trip between them). */
#define PIPELINE 2

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;     /* head runners */
  int state;             /* 0 unknown, 1 active, -1 inactive */
  int n;                 /* nodes, head included */
  int *slots, *inflight;
  int *held;             /* slots held by actors placed there (ractor.c) */
  int gpu_state;         /* 0 not learned yet, 1 some node has a GPU, -1 none */
  int *gpus;             /* devices per node (at most MAX_NODE_GPUS) */
  int32_t (*gpu_used)[MAX_NODE_GPUS]; /* per node and device: thousandths taken */
  bool *alive;
  char **lost_why;
  rtask *back_head, *back_tail;
  rtask *local_head, *local_tail;
  rtask *buckets[NBUCKETS];
  rtask *fbuckets[NBUCKETS]; /* by future pointer (tasks not yet freed) */
  rtask *wait_head, *wait_tail; /* tasks waiting for future arguments */
  bool wait_dirty;           /* something may have made any of them ready */
  int32_t share_max;         /* the largest GPU share a backlog task asked for */
  struct pin *pins;          /* objects fetched by the head that payloads still name */
  char (*oaddr)[64];         /* per node: the object listener (port 0: none) */
  uint16_t *oport;
  int locality;              /* SFLOW_OBJECT_LOCALITY: 1 prefer the holder, 0 no, -1 avoid */
  uint64_t next_id;
  int runners, idle_runners;
} R = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static size_t fbucket(const sf_future *f) { return ((uintptr_t)f >> 4) % NBUCKETS; }

static void hash_put(rtask *t) {
  rtask **b = &R.buckets[t->id % NBUCKETS];
  t->hnext = *b;
  *b = t;
  b = &R.fbuckets[fbucket(t->f)];
  t->fnext = *b;
  *b = t;
}

/* The task (not yet freed) whose future is f. */
static rtask *ffind(const sf_future *f) {
  for (rtask *t = R.fbuckets[fbucket(f)]; t; t = t->fnext)
    if (t->f == f)
      return t;
  return NULL;
}

static rtask *hash_find(uint64_t id) {
  for (rtask *t = R.buckets[id % NBUCKETS]; t; t = t->hnext)
    if (t->id == id)
      return t;
  return NULL;
}

static void hash_del(rtask *t) {
  for (rtask **p = &R.buckets[t->id % NBUCKETS]; *p; p = &(*p)->hnext)
    if (*p == t) {
      *p = t->hnext;
      break;
    }
  for (rtask **p = &R.fbuckets[fbucket(t->f)]; *p; p = &(*p)->fnext)
    if (*p == t) {
      *p = t->fnext;
      break;
    }
}

static void back_push(rtask *t, bool front) {
  t->node = -1;
  if (t->gpu.share > R.share_max)
    R.share_max = t->gpu.share;
  if (front) {
    t->next = R.back_head;
    R.back_head = t;
    if (!R.back_tail)
      R.back_tail = t;
  } else {
    t->next = NULL;
    if (R.back_tail)
      R.back_tail->next = t;
    else
      R.back_head = t;
    R.back_tail = t;
  }
}

/* Whether a live node can take t (any task when t is NULL): a slot, and
 * enough GPUs when t asks for a share (a task of whole GPUs was clamped to
 * the largest node, which may since have been lost). */
static bool any_capacity(const rtask *t) {
  for (int i = 0; i < R.n; i++)
    if (R.alive[i] && R.slots[i] > 0 &&
        (!t || !t->gpu.share || R.gpus[i] * SHARE_UNIT >= t->gpu.share))
      return true;
  return false;
}

/* Per-node frame buffers of one dispatch round. */
typedef struct outbox {
  sf__wbuf *wb;
  int n;
} outbox;

static void encode_submit(sf__wbuf *b, rtask *t) {
  sf__frame f = {.type = SF__F_TASK_SUBMIT};
  f.u.task_submit.task = t->id;
  f.u.task_submit.fn = (uint32_t)(int32_t)((const char *)t->d - (const char *)&sf_program_desc);
  f.u.task_submit.attempt = (uint32_t)t->attempt;
  f.u.task_submit.key = t->key;
  f.u.task_submit.args = (sf__bytes){t->payload, t->n};
  sf__wire_encode(b, &f);
}

/* Free slots of node i for one more task (actors hold slots for their
 * lifetime; tasks still get one slot of a node they fill, so a program
 * whose actors take every slot oversubscribes rather than waits forever). */
static int free_slots(int i) {
  int room = R.slots[i] - R.held[i];
  if (R.slots[i] > 0 && room < 1)
    room = 1;
  return room * (i ? PIPELINE : 1) - R.inflight[i];
}

/* The live node with the most free slots, or -1. */
static int place_cpu_locked(void) {
  int best = -1, best_free = 0;
  for (int i = 0; i < R.n; i++) {
    int fr = free_slots(i);
    if (R.alive[i] && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  return best;
}

/* The live node other than p with the most free slots; -1 when none is
 * free now (while another live node could take work later: wait for
 * it), else place_cpu_locked's answer. */
static int place_away_locked(int p) {
  int best = -1, best_free = 0;
  bool other = false; /* another live node (busy or not): wait for it */
  for (int i = 0; i < R.n; i++) {
    int fr = free_slots(i);
    other |= i != p && R.alive[i] && R.slots[i] > 0;
    if (i != p && R.alive[i] && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  return best >= 0 || other ? best : place_cpu_locked();
}

/* Objects: a task whose payload names held objects goes to the node that
 * holds most of their bytes when it has a free slot (no copy at all);
 * else, as any task, to the node with the most free slots.
 * SFLOW_OBJECT_LOCALITY=-1 (tests) avoids that node instead, so that the
 * bytes must move worker to worker.  A task re-run because its result
 * could not be fetched from node `avoid` does not go back there (the
 * head may not have seen that node die yet). */
static int place_near_locked(const rtask *t) {
  if (t->avoid > 0 && t->avoid < R.n && R.alive[t->avoid])
    return place_away_locked(t->avoid);
  int p = t->pref;
  bool near = p > 0 && p < R.n && R.alive[p];
  if (near && R.locality > 0 && free_slots(p) > 0)
    return p;
  if (!near || R.locality >= 0)
    return place_cpu_locked();
  return place_away_locked(p);
}

/* What is left on node i once a share of h->share is taken there (best
 * fit: the least is best), or -1 when it does not fit; *dev / *mask:
 * where. */
static int gpu_fit(int i, const sf__gpu_hold *h, int32_t *dev, uint64_t *mask) {
  const int32_t *u = R.gpu_used[i];
  int left = -1;
  if (h->share <= SHARE_UNIT) { /* a share of one device: the fullest that fits */
    for (int k = 0; k < R.gpus[i]; k++)
      if (u[k] + h->share <= SHARE_UNIT &&
          (left < 0 || SHARE_UNIT - u[k] - h->share < left)) {
        left = SHARE_UNIT - u[k] - h->share;
        *dev = k;
      }
    return left;
  }
  int need = h->share / SHARE_UNIT, idle = 0; /* whole devices: idle ones */
  uint64_t m = 0;
  for (int k = 0; k < R.gpus[i]; k++)
    if (u[k] == 0) {
      if (idle < need)
        m |= (uint64_t)1 << k;
      idle++;
    }
  if (idle < need)
    return -1;
  *mask = m;
  *dev = __builtin_ctzll(m);
  return (idle - need) * SHARE_UNIT;
}

/* The live node (the head only when head_ok) with `room` free slots
 * (free_slots for tasks, unheld ones for actors) where h's share fits
 * best (ties: the most free); takes the share there.  -1: none now. */
static int place_gpu_locked(sf__gpu_hold *h, bool head_ok, bool actor, int need) {
  int best = -1, best_left = 0, best_free = 0;
  int32_t best_dev = -1;
  uint64_t best_mask = 0;
  for (int k = 1; k <= R.n; k++) {
    int i = k % R.n; /* workers first, then the head: ties go to a worker */
    int32_t dev = -1;
    uint64_t mask = 0;
    int fr = actor ? R.slots[i] - R.held[i] - need + 1 : free_slots(i);
    if (!R.alive[i] || (i == 0 && !head_ok) || fr <= 0 || R.gpus[i] <= 0)
      continue;
    int left = gpu_fit(i, h, &dev, &mask);
    if (left >= 0 && (best < 0 || left < best_left || (left == best_left && fr > best_free))) {
      best = i;
      best_left = left;
      best_free = fr;
      best_dev = dev;
      best_mask = mask;
    }
  }
  if (best < 0)
    return -1;
  if (h->share <= SHARE_UNIT)
    R.gpu_used[best][best_dev] += h->share;
  else
    for (int k = 0; k < R.gpus[best]; k++)
      if (best_mask >> k & 1)
        R.gpu_used[best][k] = SHARE_UNIT;
  h->dev = best_dev;
  h->mask = best_mask;
  h->held = true;
  return best;
}

/* Gives h's share back to node i (once; a no-op without one). */
static void gpu_give_locked(int i, sf__gpu_hold *h) {
  if (!h || !h->held)
    return;
  h->held = false;
  if (i < 0 || i >= R.n)
    return;
  if (h->share <= SHARE_UNIT)
    R.gpu_used[i][h->dev] -= h->share;
  else
    for (int k = 0; k < R.gpus[i]; k++)
      if (h->mask >> k & 1)
        R.gpu_used[i][k] = 0;
}

/* Takes t (after prev, or first when prev is NULL) out of the backlog. */
static void backlog_unlink(rtask *prev, rtask *t) {
  if (prev)
    prev->next = t->next;
  else
    R.back_head = t->next;
  if (R.back_tail == t)
    R.back_tail = prev;
}

/* Hands backlog entries to nodes with free slots (and, for @gpus, a free
 * GPU share); the caller holds R.mu and sends the outbox after releasing
 * it.  A GPU task that fits nowhere now stays where it is and the ones
 * behind it still go: CPU work does not queue behind a busy GPU. */
static void wake_waiting_locked(outbox *ob);

static void dispatch_locked(outbox *ob) {
  if (R.wait_head && R.wait_dirty)
    wake_waiting_locked(ob);
  bool woke = false;
  rtask *prev = NULL;
  int32_t gpu_miss = INT32_MAX; /* the smallest share that found no room */
  for (rtask *t = R.back_head, *nx; t; t = nx) {
    nx = t->next;
    int best = -1;
    if (!t->gpu.share)
      best = place_near_locked(t);
    else if (t->gpu.share < gpu_miss && (best = place_gpu_locked(&t->gpu, true, false, 1)) < 0)
      gpu_miss = t->gpu.share;
    if (best < 0 && !t->gpu.share)
      break; /* no free slot anywhere */
    if (best < 0) {
      prev = t;
      continue;
    }
    backlog_unlink(prev, t);
    t->next = NULL;
    t->node = best;
    R.inflight[best]++;
    if (best == 0) {
      if (R.local_tail)
        R.local_tail->next = t;
      else
        R.local_head = t;
      R.local_tail = t;
      woke = true;
    } else {
      if (!ob->wb)
        ob->wb = calloc((size_t)R.n, sizeof *ob->wb);
      if (ob->wb)
        encode_submit(&ob->wb[best], t);
      t->trace_t0 = sf__trace_now();
    }
  }
  if (woke)
    pthread_cond_broadcast(&R.cv);
}

static void outbox_send(outbox *ob) {
  if (!ob->wb)
    return;
  for (int i = 1; i < R.n; i++) {
    if (ob->wb[i].n)
      (void)sf__cluster_send(i, ob->wb[i].p, ob->wb[i].n); /* a lost node: its hook requeues */
    sf__wbuf_free(&ob->wb[i]);
  }
  free(ob->wb);
  ob->wb = NULL;
}

/* Outside R.mu: releasing futures may run sf__remote_future_gone. */
static void task_free(rtask *t) {
  if (t->strong)
    sf_release(t->f);
  if (t->args) {
    sf_value_release(t->d->args, t->args);
    free(t->args);
  }
  free(t->refs);
  free(t->out);
  free(t->obj);
  free(t->payload);
  free(t);
}

static void fail_task(rtask *t, const char *cause) {
  char *msg = NULL;
  if (asprintf(&msg, "task '%s' failed after %d %s: %s", t->d->name, (int)t->attempt + 1,
               sf__plural(t->attempt + 1, "attempt", "attempts"), cause) < 0)
    msg = NULL;
  sf__future_reject(t->f, msg ? msg : cause);
  free(msg);
  task_free(t);
}

/* What still waits and no live node can take (none at all, or none with
 * a GPU for @gpus work) leaves the backlog; returns it (linked by next)
 * for the caller to fail outside R.mu. */
static rtask *drain_if_stuck_locked(void) {
  /* Called at every submission: when some live node can take any task the
   * backlog has ever held, skip the walk (O(nodes), not O(backlog)). */
  if (!R.back_head)
    return NULL;
  bool cpu = false;
  int most = 0;
  for (int i = 0; i < R.n; i++)
    if (R.alive[i] && R.slots[i] > 0) {
      cpu = true;
      if (R.gpus && R.gpus[i] > most)
        most = R.gpus[i];
    }
  if (cpu && most * SHARE_UNIT >= R.share_max)
    return NULL;
  rtask *l = NULL, **lt = &l, *prev = NULL;
  for (rtask *t = R.back_head, *nx; t; t = nx) {
    nx = t->next;
    if (any_capacity(t)) {
      prev = t;
      continue;
    }
    backlog_unlink(prev, t);
    hash_del(t);
    t->next = NULL;
    *lt = t;
    lt = &t->next;
  }
  return l;
}

static void fail_stuck(rtask *l) {
  char why[512] = "no live node can take work";
  for (int i = 1; i < R.n; i++)
    if (R.lost_why[i]) {
      snprintf(why, sizeof why, "no live node can take work (node %d lost: %s%s)", i,
               R.lost_why[i], R.slots[0] ? "" : "; the head does not run work");
      break;
    }
  while (l) {
    rtask *nx = l->next;
    char gwhy[600];
    if (l->gpu.share)
      snprintf(gwhy, sizeof gwhy, "%s (it asks for @gpus and no live node has a GPU)", why);
    fail_task(l, l->gpu.share ? gwhy : why);
    l = nx;
  }
}

/* ----------------------------------------------- future arguments
 *
 * A call whose arguments include futures waits on R.wait_head (no
 * thread blocks) until each future argument is complete here or held by
 * a worker.  A future completing wakes the calls waiting for it (a
 * waiter registered with sf__future_notify, naming the call's id); events
 * that may concern any waiting call (a result becoming held, a node
 * lost) set R.wait_dirty, and the next dispatch_locked checks them all.
 * The payload is then built from the argument block: a complete future's
 * value inline, a failed one's message, a held one as a reference the
 * worker fetches from the owner's object listener. */

#define ARG_NONE 0   /* a future never set */
#define ARG_VALUE 1  /* the value follows (serial.c) */
#define ARG_FAILED 2 /* u32 length, the failure's message */
#define ARG_REF 3    /* u32 owner, u64 object id, u64 size, u16 port, u8 n, address */

/* An object the head fetched (its task record is gone) that payloads
 * still name: released on its owner when the last of them is done. */
typedef struct pin {
  struct pin *next;
  uint64_t id, size;
  int node, users;
} pin;

static void obj_encode(outbox *ob, int node, uint64_t id, uint64_t offset, uint64_t total) {
  if (node < 1 || node >= R.n || !R.alive[node])
    return;
  if (!ob->wb && !(ob->wb = calloc((size_t)R.n, sizeof *ob->wb)))
    return;
  sf__frame f = {.type = SF__F_OBJECT};
  f.u.object.object = id;
  f.u.object.offset = offset;
  f.u.object.total = total;
  sf__wire_encode(&ob->wb[node], &f);
}

static void obj_release_locked(outbox *ob, int node, uint64_t id, uint64_t size, const char *name) {
  obj_encode(ob, node, id, size, size);
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) released on node %d", (unsigned long long)id,
               name ? name : "?", (unsigned long long)size, node);
}

/* t's payload no longer names its objects (it ended, or is rebuilt). */
static void refs_drop_locked(rtask *t, outbox *ob) {
  for (int i = 0; i < t->nrefs; i++) {
    const objref *r = &t->refs[i];
    rtask *p = hash_find(r->id);
    if (p && p->held && p->node == r->node && p->obj_total == r->size) {
      p->users--;
      continue;
    }
    for (pin **pp = &R.pins; *pp; pp = &(*pp)->next)
      if ((*pp)->id == r->id && (*pp)->node == r->node) {
        pin *q = *pp;
        if (--q->users == 0) {
          *pp = q->next;
          obj_release_locked(ob, q->node, q->id, q->size, r->name);
          free(q);
        }
        break;
      }
  }
  free(t->refs);
  t->refs = NULL;
  t->nrefs = 0;
  t->pref = -1;
}

/* Worker node answered for t: its inputs were fetched (or used in place). */
static void refs_done_locked(int node, rtask *t, outbox *ob) {
  for (int i = 0; i < t->nrefs; i++) {
    const objref *r = &t->refs[i];
    if (r->node != node) {
      atomic_fetch_add(&sf__stats.objects_moved, 1);
      atomic_fetch_add(&sf__stats.moved_bytes, (int64_t)r->size);
    }
    if (!sf__options.cluster_log)
      continue;
    if (r->node == node)
      sf__notice("object %llu (task '%s', %llu bytes) used in place on node %d",
                 (unsigned long long)r->id, r->name, (unsigned long long)r->size, node);
    else
      sf__notice("object %llu (task '%s', %llu bytes) moved from node %d to node %d",
                 (unsigned long long)r->id, r->name, (unsigned long long)r->size, r->node, node);
  }
  refs_drop_locked(t, ob);
}

/* Onto the wait list: first (a retry), or last (a new call: calls leave
 * it in the order they were made). */
static void wait_push_locked(rtask *t, bool front) {
  t->waiting = true;
  t->front = front;
  if (front) {
    t->wprev = NULL;
    t->next = R.wait_head;
    if (R.wait_head)
      R.wait_head->wprev = t;
    else
      R.wait_tail = t;
    R.wait_head = t;
  } else {
    t->next = NULL;
    t->wprev = R.wait_tail;
    if (R.wait_tail)
      R.wait_tail->next = t;
    else
      R.wait_head = t;
    R.wait_tail = t;
  }
}

static void wait_unlink_locked(rtask *t) {
  if (t->wprev)
    t->wprev->next = t->next;
  else
    R.wait_head = t->next;
  if (t->next)
    t->next->wprev = t->wprev;
  else
    R.wait_tail = t->wprev;
  t->next = t->wprev = NULL;
  t->waiting = false;
}

static bool wake_one_locked(rtask *t, outbox *ob);

/* Back to waiting (future arguments: the payload is rebuilt, since where
 * the inputs are may have changed) or to the backlog. */
static void requeue_locked(rtask *t, bool front, outbox *ob) {
  if (!t->args) {
    back_push(t, front);
    return;
  }
  refs_drop_locked(t, ob);
  free(t->payload);
  t->payload = NULL;
  t->n = 0;
  t->node = -1;
  wait_push_locked(t, front);
  (void)wake_one_locked(t, ob); /* its inputs may be ready already */
}

static const sf_type *field_type(const rtask *t, int32_t i) { return t->d->args->fields[i].type; }
static void *field_at(const rtask *t, int32_t i) {
  return (char *)t->args + t->d->args->fields[i].offset;
}

/* Whether every future argument of t is complete or held by a live
 * worker.  A held one whose owner has no object listener is fetched by
 * the head (then it completes here). */
static bool deps_ready_locked(rtask *t, outbox *ob) {
  bool ready = true;
  for (int32_t i = 0; i < t->d->args->nfields; i++) {
    if (field_type(t, i)->kind != SF_FUTURE)
      continue;
    sf_future *g = *(sf_future **)field_at(t, i);
    if (!g || sf__future_ready(g))
      continue;
    rtask *p = ffind(g);
    if (p && p->held && R.alive[p->node] && R.oport[p->node])
      continue;
    ready = false;
    if (p && p->held && R.alive[p->node] && !p->fetching) {
      if (!p->strong) { /* t's argument block holds a reference */
        sf_retain(p->f);
        p->strong = true;
      }
      p->wanted = p->fetching = true;
      obj_encode(ob, p->node, p->id, 0, p->obj_total);
    }
  }
  return ready;
}

static void put_u8(sf__buf *b, uint8_t v) { sf__buf_put(b, (const char *)&v, 1); }
static void put_u32(sf__buf *b, uint32_t v) { sf__buf_put(b, (const char *)&v, 4); }

/* Serializes t's arguments (deps_ready_locked said yes) into t->payload,
 * naming held objects in t->refs. */
static bool payload_build_locked(rtask *t) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  uint32_t nl = (uint32_t)strlen(t->d->name);
  put_u32(&b, nl);
  sf__buf_put(&b, t->d->name, nl);
  int64_t *near = calloc((size_t)R.n, sizeof *near);
  bool ok = near != NULL;
  for (int32_t i = 0; ok && i < t->d->args->nfields; i++) {
    const sf_type *ft = field_type(t, i);
    if (ft->kind != SF_FUTURE) {
      sf__ser_value(&b, ft, field_at(t, i));
      continue;
    }
    sf_future *g = *(sf_future **)field_at(t, i);
    bool done = g && sf__future_ready(g); /* never waited for here */
    rtask *p = g && !done ? ffind(g) : NULL;
    if (!g) {
      put_u8(&b, ARG_NONE);
    } else if (!done && !(p && p->held)) {
      ok = false; /* not ready after all (deps_ready_locked said it was) */
    } else if (done) { /* complete: the value, or why it failed */
      int32_t vs = value_size(ft->elem);
      _Alignas(16) unsigned char tmp[256];
      void *v = vs <= (int32_t)sizeof tmp ? tmp : calloc(1, (size_t)vs);
      char err[SF__ERROR_MAX + 256];
      if (!v) {
        ok = false;
      } else if (sf__future_wait_result(g, v, err, sizeof err)) {
        put_u8(&b, ARG_VALUE);
        if (vs)
          sf__ser_value(&b, ft->elem, v);
        sf_value_release(ft->elem, v);
      } else {
        put_u8(&b, ARG_FAILED);
        put_u32(&b, (uint32_t)strlen(err));
        sf__buf_put(&b, err, strlen(err));
      }
      if (v && v != tmp)
        free(v);
    } else {
      objref *nr = realloc(t->refs, (size_t)(t->nrefs + 1) * sizeof *nr);
      if (!nr) {
        ok = false;
        break;
      }
      t->refs = nr;
      t->refs[t->nrefs++] = (objref){p->id, p->obj_total, p->node, p->d->name};
      p->users++;
      near[p->node] += (int64_t)p->obj_total;
      uint8_t al = (uint8_t)strlen(R.oaddr[p->node]);
      put_u8(&b, ARG_REF);
      put_u32(&b, (uint32_t)p->node);
      sf__ser_u64(&b, p->id);
      sf__ser_u64(&b, p->obj_total);
      sf__buf_put(&b, (const char *)&R.oport[p->node], 2);
      put_u8(&b, al);
      sf__buf_put(&b, R.oaddr[p->node], al);
    }
  }
  t->pref = -1;
  for (int i = 1; ok && i < R.n; i++)
    if (near[i] && (t->pref < 0 || near[i] > near[t->pref]))
      t->pref = i;
  free(near);
  t->payload = ok && b.len <= UINT32_MAX ? malloc(b.len ? b.len : 1) : NULL;
  if (t->payload) {
    memcpy(t->payload, b.data, b.len);
    t->n = (uint32_t)b.len;
  }
  sf__buf_free(&b);
  return t->payload != NULL;
}

/* Moves waiting t to the backlog when its future arguments are all
 * ready (its payload built); false when it still waits. */
static bool wake_one_locked(rtask *t, outbox *ob) {
  if (!deps_ready_locked(t, ob))
    return false;
  if (!payload_build_locked(t)) { /* out of memory: try again at the next scan */
    refs_drop_locked(t, ob);      /* a half-built payload's */
    R.wait_dirty = true;
    return false;
  }
  wait_unlink_locked(t);
  back_push(t, t->front);
  t->front = false;
  return true;
}

/* Moves every waiting task whose future arguments are all ready to the
 * backlog.  Only after events that may concern any of them (a result
 * became held, a node was lost, the listeners became known): a future
 * completing wakes just the tasks waiting for it (dep_ready), so a
 * dataflow graph of n calls costs O(n), not a scan of the list per
 * completion. */
static void wake_waiting_locked(outbox *ob) {
  R.wait_dirty = false;
  for (rtask *t = R.wait_head, *nx; t; t = nx) {
    nx = t->next;
    (void)wake_one_locked(t, ob);
  }
}

/* The waiter registered on a future argument of task `task`. */
typedef struct dwait {
  sf__fwaiter w; /* first: dep_ready gets &w */
  uint64_t task;
} dwait;

/* A future argument completed (or was freed still pending). */
static void dep_ready(sf__fwaiter *w, bool done) {
  uint64_t id = ((dwait *)w)->task;
  free(w);
  if (!done)
    return;
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? hash_find(id) : NULL;
  if (t && t->waiting)
    (void)wake_one_locked(t, &ob);
  dispatch_locked(&ob);
  rtask *stuck = drain_if_stuck_locked();
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  fail_stuck(stuck);
}

/* --------------------------------------------------- head runners */

static void *head_runner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&R.mu);
    while (!R.local_head) {
      R.idle_runners++;
      pthread_cond_wait(&R.cv, &R.mu);
      R.idle_runners--;
    }
    rtask *t = R.local_head;
    R.local_head = t->next;
    if (!R.local_head)
      R.local_tail = NULL;
    pthread_mutex_unlock(&R.mu);

    const sf_task_desc *d = t->d;
    int32_t asize = value_size(d->args);
    _Alignas(16) unsigned char abuf[256];
    void *args = asize <= (int32_t)sizeof abuf ? abuf : calloc(1, (size_t)asize);
    memset(args, 0, (size_t)asize);
    if (t->args) { /* future arguments: the futures themselves (a held one is fetched here) */
      memcpy(args, t->args, (size_t)asize);
      sf_value_retain(d->args, args);
    } else {
      uint32_t nl;
      memcpy(&nl, t->payload, 4);
      sf__reader r = {t->payload + 4 + nl, t->payload + t->n};
      sf__de_value(&r, d->args, args); /* our own bytes */
    }
    sf__buf out; /* what the attempt prints here, for the journal */
    sf__buf_init(&out, NULL, 0);
    sf_future *lf = sf__task_submit_attempt(d, args, t->attempt, &out, t->key);
    SF__COUNT_BY(tasks, -1); /* the call was counted once already */
    if (args != abuf)
      free(args);
    int32_t rsize = value_size(d->result);
    _Alignas(16) unsigned char rbuf[256];
    void *res = rsize <= (int32_t)sizeof rbuf ? rbuf : calloc(1, (size_t)rsize);
    char err[SF__ERROR_MAX + 256];
    bool ok = sf__future_wait_result(lf, res, err, sizeof err);
    sf_release(lf);
    if (ok) /* sf__future_resolve counts it */
      SF__COUNT_BY(tasks_done, -1);
    else
      atomic_fetch_sub(&sf__stats.tasks_failed, 1);

    outbox ob = {0};
    pthread_mutex_lock(&R.mu);
    hash_del(t);
    refs_drop_locked(t, &ob);
    R.inflight[0]--;
    gpu_give_locked(t->node, &t->gpu);
    dispatch_locked(&ob);
    pthread_mutex_unlock(&R.mu);
    outbox_send(&ob);
    if (ok) {
      sf__future_resolve_out(t->f, res, out.data, out.len);
      task_free(t);
    } else {
      sf__future_reject(t->f, err); /* local attempts ran the rest of the budget */
      task_free(t);
    }
    sf__buf_free(&out);
    if (res != rbuf)
      free(res);
  }
  return NULL;
}

/* ----------------------------------------------------- node loss */

static bool activate(void);

static void on_node_lost(int node, const char *why) {
  outbox ob = {0};
  rtask *failed = NULL;
  pthread_mutex_lock(&R.mu);
  if (node < 1 || node >= R.n || !R.alive[node]) {
    pthread_mutex_unlock(&R.mu);
    return;
  }
  R.alive[node] = false;
  R.wait_dirty = true; /* calls waiting on its held results */
  free(R.lost_why[node]);
  R.lost_why[node] = strdup(why);
  for (pin **pp = &R.pins; *pp;) { /* what the head fetched from it is here already */
    pin *q = *pp;
    if (q->node == node) {
      *pp = q->next;
      free(q);
    } else {
      pp = &q->next;
    }
  }
  rtask *dropped = NULL; /* held results nobody here can want: forgotten */
  /* Its tasks, oldest first, go back to the front of the backlog. */
  rtask *mine = NULL;
  for (int b = 0; b < NBUCKETS; b++)
    for (rtask *t = R.buckets[b]; t; t = t->hnext)
      if (t->node == node) {
        t->next = mine;
        mine = t;
      }
  /* Sort by id (submission order) so retries keep the program's order. */
  rtask *sorted = NULL;
  while (mine) {
    rtask *t = mine;
    mine = t->next;
    rtask **p = &sorted;
    while (*p && (*p)->id > t->id)
      p = &(*p)->next;
    t->next = *p;
    *p = t;
  }
  /* sorted is descending: pushing each at the front leaves ascending. */
  while (sorted) {
    rtask *t = sorted;
    sorted = t->next;
    /* objects: a held result's slot was freed with the reference; the
     * task re-runs from its arguments (lineage) or fails naming it. */
    t->obj_chunks = t->held ? -1 : 0;
    gpu_give_locked(t->node, &t->gpu);
    if (t->held) {
      free(t->obj);
      t->obj = NULL;
      t->held = t->fetching = false;
      t->users = 0; /* payloads naming it fail their fetch and are rebuilt */
      if (!t->strong && !sf__future_try_retain(t->f)) {
        hash_del(t); /* its future is being freed: nothing can want it */
        t->node = -1;
        t->next = dropped;
        dropped = t;
        continue;
      }
      t->strong = true;
    } else {
      R.inflight[node]--;
    }
    if (t->attempt < t->d->retry) {
      t->attempt++;
      atomic_fetch_add(&sf__stats.retries, 1);
      requeue_locked(t, true, &ob);
    } else {
      hash_del(t);
      refs_drop_locked(t, &ob);
      t->node = -1;
      t->next = failed;
      failed = t;
    }
  }
  rtask *stuck = drain_if_stuck_locked();
  dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  char cause[512];
  snprintf(cause, sizeof cause, "node %d was lost: %s", node, why);
  while (failed) {
    rtask *nx = failed->next;
    char held[700];
    if (failed->obj_chunks < 0)
      snprintf(held, sizeof held, "%s (it held the task's result, %llu bytes, not yet fetched)",
               cause, (unsigned long long)failed->obj_total);
    fail_task(failed, failed->obj_chunks < 0 ? held : cause);
    failed = nx;
  }
  fail_stuck(stuck);
  while (dropped) {
    rtask *nx = dropped->next;
    task_free(dropped);
    dropped = nx;
  }
  sf__ractor_node_lost(node, why); /* actors restart elsewhere */
}

/* ------------------------------------------------ actor placement */

bool sf__remote_active(void) { return activate(); }

const char *sf__remote_lost_why(int node) {
  pthread_mutex_lock(&R.mu);
  const char *w = node > 0 && node < R.n && !R.alive[node] ? R.lost_why[node] : NULL;
  pthread_mutex_unlock(&R.mu);
  return w; /* kept until the end of the run */
}

int sf__remote_place(int need, sf__gpu_hold *gpu, bool head_ok, const bool *exclude) {
  pthread_mutex_lock(&R.mu);
  if (gpu && gpu->share) { /* exclude is for gangs, which ask for no GPU */
    int at = R.gpu_state > 0 ? place_gpu_locked(gpu, head_ok, true, need) : -1;
    if (at >= 0)
      R.held[at] += need;
    pthread_mutex_unlock(&R.mu);
    return at;
  }
  int best = -1, best_free = 0;
  for (int k = 1; k <= R.n; k++) {
    int i = k % R.n; /* workers first, then the head: ties go to a worker */
    if (!R.alive[i] || (i == 0 && !head_ok) || (exclude && exclude[i]))
      continue;
    int fr = R.slots[i] - R.held[i];
    if (fr >= need && fr > best_free) {
      best = i;
      best_free = fr;
    }
  }
  if (best >= 0)
    R.held[best] += need;
  pthread_mutex_unlock(&R.mu);
  return best;
}

void sf__remote_unplace(int node, int need, sf__gpu_hold *gpu) {
  pthread_mutex_lock(&R.mu);
  if (node >= 0 && node < R.n) {
    R.held[node] -= need;
    gpu_give_locked(node, gpu);
  }
  pthread_mutex_unlock(&R.mu);
}

/* ------------------------------------------------------- activation */

static bool activate(void) {
  pthread_mutex_lock(&R.mu);
  if (R.state) {
    bool on = R.state > 0;
    pthread_mutex_unlock(&R.mu);
    return on;
  }
  int n = sf__cluster_nodes();
  if (n <= 1 || sf__options.worker) {
    R.state = -1;
    pthread_mutex_unlock(&R.mu);
    return false;
  }
  R.n = n;
  R.slots = calloc((size_t)n, sizeof *R.slots);
  R.inflight = calloc((size_t)n, sizeof *R.inflight);
  R.alive = calloc((size_t)n, sizeof *R.alive);
  R.lost_why = calloc((size_t)n, sizeof *R.lost_why);
  R.held = calloc((size_t)n, sizeof *R.held);
  R.oaddr = calloc((size_t)n, sizeof *R.oaddr);
  R.oport = calloc((size_t)n, sizeof *R.oport);
  R.locality = (int)env_i64("SFLOW_OBJECT_LOCALITY", 1);
  if (!R.slots || !R.inflight || !R.alive || !R.lost_why || !R.held || !R.oaddr || !R.oport) {
    R.state = -1;
    pthread_mutex_unlock(&R.mu);
    return false;
  }
  for (int i = 1; i < n; i++) {
    sf__node_info ni;
    if (sf__cluster_node(i, &ni)) {
      R.slots[i] = ni.slots > 0 ? ni.slots : 1;
      R.alive[i] = ni.alive;
    }
    if (!sf__cluster_obj_addr(i, R.oaddr[i], sizeof R.oaddr[i], &R.oport[i]))
      R.oport[i] = 0; /* its held objects go through the head */
  }
  if (sf__options.head_runs_work) {
    sf__sched_start();
    int32_t k = sf__pool_size();
    R.slots[0] = k > 0 ? k : 1;
    R.alive[0] = true;
    for (int i = 0; i < R.slots[0]; i++) {
      pthread_t th;
      if (!pthread_create(&th, NULL, head_runner, NULL)) {
        pthread_detach(th);
        R.runners++;
      }
    }
    if (!R.runners)
      R.slots[0] = 0;
  }
  R.state = 1;
  pthread_mutex_unlock(&R.mu);
  sf__cluster_on_node_lost(on_node_lost);
  return true;
}

/* Learns each node's GPUs at the first @gpus call: the hostfile's gpus=N,
 * else what the worker detected and reported in its hello (cluster.c);
 * the head's own, when it runs work, from its GPU layer, which is started
 * only now so that CPU-only programs never load it.  Returns whether some
 * node has one. */
static bool gpus_learn(void) {
  pthread_mutex_lock(&R.mu);
  int st = R.gpu_state, head = R.slots[0];
  pthread_mutex_unlock(&R.mu);
  if (st)
    return st > 0;
  int32_t hg = head > 0 ? sf__gpu_devices() : 0;
  int *g = calloc((size_t)R.n, sizeof *g);
  int32_t(*u)[MAX_NODE_GPUS] = calloc((size_t)R.n, sizeof *u);
  bool any = false;
  for (int i = 0; g && u && i < R.n; i++) {
    sf__node_info ni;
    int k = i == 0 ? hg : sf__cluster_node(i, &ni) ? ni.gpus : 0;
    g[i] = k < 0 ? 0 : k > MAX_NODE_GPUS ? MAX_NODE_GPUS : k;
    any |= g[i] > 0 && R.slots[i] > 0;
  }
  pthread_mutex_lock(&R.mu);
  if (!R.gpu_state) {
    R.gpus = g;
    R.gpu_used = u;
    R.gpu_state = g && u && any ? 1 : -1;
    g = NULL;
    u = NULL;
  }
  st = R.gpu_state;
  pthread_mutex_unlock(&R.mu);
  free(g);
  free(u);
  return st > 0;
}

/* t's share in thousandths, clamped like task.c's demand_of to what the
 * largest node has. */
static int32_t gpu_share(double gpus) {
  int most = 0;
  for (int i = 0; i < R.n; i++)
    most = R.gpus[i] > most ? R.gpus[i] : most;
  int32_t s = (int32_t)(gpus * SHARE_UNIT + 0.5);
  if (s < 1)
    s = 1;
  return s > SHARE_UNIT * most ? SHARE_UNIT * most : s;
}

int32_t sf__remote_gpu_share(double gpus) {
  return gpus > 0 && activate() && gpus_learn() ? gpu_share(gpus) : 0;
}

/* A call with future arguments: keeps its argument block (and so the
 * futures) and waits on R.wait_head until they are ready (see "future
 * arguments"); told when a pending one completes. */
static bool submit_waiting(rtask *t, const sf_task_desc *d, void *args, sf_future *f) {
  size_t asize = (size_t)value_size(d->args);
  t->args = malloc(asize ? asize : 1);
  if (!t->args) {
    free(t);
    return false;
  }
  memcpy(t->args, args, asize);
  sf_value_retain(d->args, t->args);
  t->d = d;
  t->gpu.share = d->gpus > 0 ? gpu_share(d->gpus) : 0;
  sf_retain(f);
  t->f = f;
  t->strong = true;
  pthread_mutex_lock(&R.mu);
  t->id = ++R.next_id;
  pthread_mutex_unlock(&R.mu);
  /* Told (by id) when a pending argument completes.  One that completes
   * before t is on the wait list finds no task: the check below, made
   * after t is, sees it complete. */
  for (int32_t i = 0; i < d->args->nfields; i++) {
    if (field_type(t, i)->kind != SF_FUTURE)
      continue;
    sf_future *g = *(sf_future **)field_at(t, i);
    dwait *w = g && !sf__future_ready(g) ? malloc(sizeof *w) : NULL;
    if (!w && g && !sf__future_ready(g)) {
      pthread_mutex_lock(&R.mu);
      R.wait_dirty = true; /* no waiter: found by a later scan */
      pthread_mutex_unlock(&R.mu);
    }
    if (w) {
      w->w.fn = dep_ready;
      w->task = t->id;
      if (!sf__future_notify(g, &w->w))
        free(w); /* complete already */
    }
  }
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  hash_put(t);
  t->node = -1;
  wait_push_locked(t, false);
  (void)wake_one_locked(t, &ob);
  dispatch_locked(&ob);
  rtask *stuck = drain_if_stuck_locked();
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  fail_stuck(stuck);
  return true;
}

bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq,
                     uint64_t key) {
  (void)seq; /* sf__future_resolve journals main's calls */
  if (R.state < 0 || sf__task_depth > 0)
    return false;
  if (!activate())
    return false;
  /* No GPU on any node: @gpus work stays where it is (the CPU notice, or
   * --require-gpu's error, as in a single-node run). */
  if (d->gpus > 0 && !gpus_learn())
    return false;
  bool futs;
  if (!args_portable(d->args, &futs) || !sf__remote_portable(d->result))
    return false;
  intptr_t off = (const char *)d - (const char *)&sf_program_desc;
  if (off < INT32_MIN || off > INT32_MAX)
    return false;
  rtask *t = calloc(1, sizeof *t);
  if (!t)
    return false;
  t->pref = -1;
  t->key = key;
  if (futs)
    return submit_waiting(t, d, args, f);
  sf__buf b;
  char store[512];
  sf__buf_init(&b, store, sizeof store);
  uint32_t nl = (uint32_t)strlen(d->name);
  sf__buf_put(&b, (const char *)&nl, 4);
  sf__buf_put(&b, d->name, nl);
  sf__ser_value(&b, d->args, args);
  t->payload = b.len <= UINT32_MAX ? malloc(b.len) : NULL;
  if (t->payload)
    memcpy(t->payload, b.data, b.len);
  t->n = (uint32_t)b.len;
  sf__buf_free(&b);
  if (!t->payload) {
    free(t);
    return false;
  }
  t->d = d;
  t->gpu.share = d->gpus > 0 ? gpu_share(d->gpus) : 0;
  sf_retain(f);
  t->f = f;
  t->strong = true;
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  t->id = ++R.next_id;
  hash_put(t);
  back_push(t, false);
  rtask *stuck = drain_if_stuck_locked();
  dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  fail_stuck(stuck);
  return true;
}

static void printed_as(int node, const char *s, size_t n, sf__buf *b);

/* Completes (or retries) a worker node's task from its answer: status 0
 * and the serialized value, or status 1 and the cause; out[0..on): what
 * the attempt printed (journaled with the value, as the head printed it).
 * slot: the task still holds its slot on node (not so once its result
 * became an object). */
static void finish(int node, rtask *t, int status, const uint8_t *p, size_t n,
                   const char *out, size_t on, bool slot) {
  const sf_type *rt = sf__future_type(t->f);
  int32_t rsize = value_size(rt);
  _Alignas(16) unsigned char rbuf[256];
  void *res = rsize <= (int32_t)sizeof rbuf ? rbuf : calloc(1, (size_t)rsize);
  memset(res, 0, (size_t)rsize);
  char cause[SF__ERROR_MAX + 64];
  bool good = status == 0;
  if (good) {
    sf__reader r = {p, p + n};
    if (rsize && (!sf__de_value(&r, rt, res) || r.p != r.end)) {
      sf_value_release(rt, res);
      memset(res, 0, (size_t)rsize);
      snprintf(cause, sizeof cause, "node %d sent a malformed result", node);
      good = false;
    }
  } else {
    snprintf(cause, sizeof cause, "%.*s", (int)n, (const char *)p);
  }
  outbox ob = {0};
  bool retry = false;
  pthread_mutex_lock(&R.mu);
  free(t->obj);
  t->obj = NULL;
  t->held = t->fetching = false;
  if (slot) {
    R.inflight[node]--;
    refs_done_locked(node, t, &ob);
  }
  gpu_give_locked(t->node, &t->gpu);
  if (!good && t->attempt < t->d->retry) {
    t->attempt++;
    atomic_fetch_add(&sf__stats.retries, 1);
    requeue_locked(t, true, &ob);
    retry = true;
  } else {
    hash_del(t);
    refs_drop_locked(t, &ob);
  }
  dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  if (!retry) {
    if (good) {
      sf__buf pb;
      char store[512];
      sf__buf_init(&pb, store, sizeof store);
      if (on)
        printed_as(node, out, on, &pb);
      sf__future_resolve_out(t->f, res, pb.data, pb.len);
      sf__buf_free(&pb);
      task_free(t);
    } else {
      fail_task(t, cause);
    }
  }
  if (res != rbuf)
    free(res);
}

static void obj_start(int node, rtask *t, const sf__frame *fr);
static void input_lost(int node, rtask *t, const sf__frame *fr);

void sf__remote_on_result(int node, const sf__frame *fr) {
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? hash_find(fr->u.task_result.task) : NULL;
  bool ok = t && t->node == node && node > 0 && !t->held;
  pthread_mutex_unlock(&R.mu);
  if (!ok) {
    sf__notice("node %d answered for unknown task %llu (ignored)", node,
               (unsigned long long)fr->u.task_result.task);
    return;
  }
  /* Only this thread (the control thread) completes tasks of worker nodes,
   * so t stays valid between the locked sections. */
  if (sf__trace_on) {
    char why[SF__ERROR_MAX];
    uint8_t st = fr->u.task_result.status;
    const sf__bytes *v = &fr->u.task_result.value;
    if (st == 1)
      snprintf(why, sizeof why, "%.*s", (int)v->n, (const char *)v->p);
    else if (st == 3)
      snprintf(why, sizeof why, "an input could not be fetched: %.*s", (int)(v->n - 8),
               (const char *)v->p + 8);
    sf__trace_dispatch(t->d->name, t->trace_t0, node, t->id, t->attempt,
                       st == 1 || st == 3 ? why : NULL);
  }
  if (fr->u.task_result.status == 2)
    obj_start(node, t, fr);
  else if (fr->u.task_result.status == 3)
    input_lost(node, t, fr);
  else
    finish(node, t, fr->u.task_result.status, fr->u.task_result.value.p,
           fr->u.task_result.value.n, (const char *)fr->u.task_result.output.p,
           fr->u.task_result.output.n, true);
}

/* ------------------------------------------------------- objects
 *
 * A worker keeps a result whose serialized form is over the threshold
 * (SFLOW_OBJECT_THRESHOLD bytes, default 1 MiB) in its object store and
 * answers with status 2: u64 object id (the task id) and u64 size.  The
 * head frees the task's slot at once and leaves the future pending; when
 * the value is first wanted (task.c: an await, or a task parked on it) it
 * asks the owner for the bytes (an empty object frame at offset 0),
 * receives them in order in object
 * frames of OBJ_CHUNK bytes, materializes the value exactly as the inline
 * path would (same bytes, same decoder), and releases the object (an
 * empty object frame with offset == total).  Chunks arrive over the one
 * control connection, so they must come in order: any other offset, a
 * different total, or an empty chunk fails the attempt as a malformed
 * result (retried per @retry).  A lost owner re-runs the task while its
 * @retry budget lasts (lineage: the task record still holds its
 * arguments), else the task fails naming the lost result.  Other workers
 * fetch objects directly from the owner ("worker to worker objects"); the
 * ownership rules are in the file's header. */

#define OBJ_CHUNK ((uint32_t)256 << 10)
#define OBJ_MAX ((uint64_t)1 << 40)

static void obj_send(int node, uint64_t id, uint64_t offset, uint64_t total) {
  sf__frame f = {.type = SF__F_OBJECT};
  f.u.object.object = id;
  f.u.object.offset = offset;
  f.u.object.total = total;
  sf__wbuf b = {0};
  sf__wire_encode(&b, &f);
  if (b.n)
    (void)sf__cluster_send(node, b.p, b.n); /* a lost node: its hook requeues */
  sf__wbuf_free(&b);
}

static void obj_start(int node, rtask *t, const sf__frame *fr) {
  uint64_t id, total;
  memcpy(&id, fr->u.task_result.value.p, 8); /* 16 bytes: wire.c checked */
  memcpy(&total, fr->u.task_result.value.p + 8, 8);
  if (id != t->id || total == 0 || total > OBJ_MAX) {
    char cause[128];
    snprintf(cause, sizeof cause, "node %d sent a bad object reference (%llu bytes)", node,
             (unsigned long long)total);
    finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  char *out = NULL; /* kept until the value is fetched */
  size_t on = fr->u.task_result.output.n;
  if (on && (out = malloc(on)))
    memcpy(out, fr->u.task_result.output.p, on);
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  R.inflight[node]--; /* the worker is done with it: its slot is free */
  refs_done_locked(node, t, &ob);
  gpu_give_locked(t->node, &t->gpu);
  t->held = true;
  R.wait_dirty = true; /* calls waiting on it may go now */
  t->users = 0;
  free(t->out);
  t->out = out;
  t->out_n = out ? on : 0;
  t->obj_total = total;
  t->obj_got = 0;
  t->obj_chunks = 0;
  pthread_mutex_unlock(&R.mu);
  if (sf__options.cluster_log)
    sf__notice("task '%s' result (%llu bytes) held by node %d as object %llu", t->d->name,
               (unsigned long long)total, node, (unsigned long long)id);
  /* Wanted already (main awaits it, or a re-run of a wanted one): fetch
   * now; else sf__remote_demand does when it is.  Not wanted: the record
   * keeps only a weak pointer, so that main dropping its last reference
   * lets the object go (sf__remote_future_gone).  Calls waiting for it as
   * an argument may go now. */
  sf_future *f = t->f;
  bool wanted = sf__future_held(f);
  pthread_mutex_lock(&R.mu);
  bool go = (wanted || t->wanted) && !t->fetching;
  t->fetching |= go;
  bool weak = !t->fetching && t->strong;
  if (weak)
    t->strong = false;
  dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  if (go)
    obj_send(node, id, 0, total); /* fetch it all */
  if (weak)
    sf_release(f); /* t may be gone after this */
}

/* Node answered that an input object of t could not be fetched (its
 * owner lost, or not holding it): t goes back to waiting, its attempt
 * not charged; the object's task re-runs within its @retry (lineage),
 * or fails naming the lost object, and then t runs with that failure as
 * its argument (it fails as a local call awaiting a failed future does). */
static void input_lost(int node, rtask *t, const sf__frame *fr) {
  uint64_t id;
  memcpy(&id, fr->u.task_result.value.p, 8); /* at least 8 bytes: wire.c checked */
  char why[300];
  snprintf(why, sizeof why, "%.*s", (int)(fr->u.task_result.value.n - 8),
           (const char *)fr->u.task_result.value.p + 8);
  outbox ob = {0};
  rtask *failed = NULL;
  char cause[700] = "";
  pthread_mutex_lock(&R.mu);
  int owner = -1;
  for (int i = 0; i < t->nrefs; i++)
    if (t->refs[i].id == id)
      owner = t->refs[i].node;
  if (owner < 0) { /* not an input of t's: an ordinary failure, charged */
    pthread_mutex_unlock(&R.mu);
    snprintf(cause, sizeof cause, "node %d reported object %llu lost, which is not an input",
             node, (unsigned long long)id);
    finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  rtask *p = hash_find(id);
  R.inflight[node]--;
  gpu_give_locked(t->node, &t->gpu);
  requeue_locked(t, true, &ob); /* not an attempt of t's */
  t->avoid = owner;
  if (p && p->held && p->node == owner) {
    /* Lost there: forget it (release it should the owner still run). */
    obj_encode(&ob, owner, id, p->obj_total, p->obj_total);
    p->held = p->fetching = false;
    p->users = 0;
    p->obj_chunks = -1;
    if (!p->strong) { /* t's argument block holds a reference */
      sf_retain(p->f);
      p->strong = true;
    }
    snprintf(cause, sizeof cause,
             "its result (object %llu, %llu bytes on node %d) could not be fetched by node %d: %s",
             (unsigned long long)id, (unsigned long long)p->obj_total, owner, node, why);
    if (sf__options.cluster_log)
      sf__notice("object %llu (task '%s') lost on node %d (node %d asked for it: %s)%s",
                 (unsigned long long)id, p->d->name, owner, node, why,
                 p->attempt < p->d->retry ? "; re-running the task" : "");
    if (p->attempt < p->d->retry) {
      p->attempt++;
      p->avoid = owner;
      atomic_fetch_add(&sf__stats.retries, 1);
      requeue_locked(p, true, &ob);
    } else {
      hash_del(p);
      refs_drop_locked(p, &ob);
      p->node = -1;
      failed = p;
    }
  }
  dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  if (failed)
    fail_task(failed, cause); /* t, waiting on it, is told */
}

void sf__remote_demand(sf_future *f) {
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? ffind(f) : NULL;
  if (t && !t->strong) { /* the caller holds a reference */
    sf_retain(f);
    t->strong = true;
  }
  bool go = t && t->held && !t->fetching;
  int node = t ? t->node : 0;
  uint64_t id = t ? t->id : 0, total = t ? t->obj_total : 0;
  if (t) { /* not held now (a re-run): obj_start fetches when it is */
    t->wanted = true;
    t->fetching |= go;
  }
  pthread_mutex_unlock(&R.mu);
  if (go)
    obj_send(node, id, 0, total);
}

void sf__remote_on_object(int node, const sf__frame *fr) {
  uint64_t id = fr->u.object.object;
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? hash_find(id) : NULL;
  if (!t || !t->fetching || t->node != node) {
    pthread_mutex_unlock(&R.mu);
    sf__notice("node %d sent a chunk of unknown object %llu (ignored)", node,
               (unsigned long long)id);
    return;
  }
  const sf__bytes *d = &fr->u.object.data;
  const char *bad = NULL;
  if (!fr->u.object.total)
    bad = "no longer holds";
  else if (fr->u.object.total != t->obj_total || fr->u.object.offset != t->obj_got || !d->n)
    bad = "sent a malformed chunk of";
  else if (!t->obj && !(t->obj = malloc(t->obj_total)))
    bad = "sent more than the head has memory for:";
  if (!bad) {
    memcpy(t->obj + t->obj_got, d->p, d->n); /* wire.c: offset + n <= total */
    t->obj_got += d->n;
    t->obj_chunks++;
  }
  bool done = bad || t->obj_got == t->obj_total;
  pin *q = NULL;
  if (done && !bad && t->users > 0 && (q = malloc(sizeof *q))) {
    /* Payloads of calls not yet done name it: released when they are. */
    *q = (pin){R.pins, id, t->obj_total, node, t->users};
    R.pins = q;
  }
  pthread_mutex_unlock(&R.mu);
  if (!done)
    return;
  if (!q) {
    obj_send(node, id, t->obj_total, t->obj_total); /* release */
    if (sf__options.cluster_log && !bad)
      sf__notice("object %llu (task '%s', %llu bytes) released on node %d", (unsigned long long)id,
                 t->d->name, (unsigned long long)t->obj_total, node);
  }
  if (bad) {
    char cause[160];
    snprintf(cause, sizeof cause, "node %d %s object %llu", node, bad, (unsigned long long)id);
    finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, false);
    return;
  }
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) fetched from node %d in %d %s",
               (unsigned long long)id, t->d->name, (unsigned long long)t->obj_total, node,
               t->obj_chunks, sf__plural(t->obj_chunks, "chunk", "chunks"));
  atomic_fetch_add(&sf__stats.objects_fetched, 1);
  atomic_fetch_add(&sf__stats.object_bytes, t->obj_total);
  finish(node, t, 0, t->obj, t->obj_total, t->out, t->out_n, false);
}

/* The last reference to held future f went (task.c, its destructor): no
 * call here can want the value any more, and no call waiting or running
 * names it (they hold references to f), so its owner drops it. */
void sf__remote_future_gone(sf_future *f) {
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? ffind(f) : NULL;
  if (t && (t->strong || !t->held))
    t = NULL; /* not this record's (it holds a reference while it is not held) */
  if (t) {
    hash_del(t);
    if (t->users > 0) { /* not expected: payloads hold f; kept for them */
      pin *q = malloc(sizeof *q);
      if (q) {
        *q = (pin){R.pins, t->id, t->obj_total, t->node, t->users};
        R.pins = q;
      }
    } else {
      obj_release_locked(&ob, t->node, t->id, t->obj_total, t->d->name);
    }
    refs_drop_locked(t, &ob);
  }
  pthread_mutex_unlock(&R.mu);
  outbox_send(&ob);
  if (t)
    task_free(t); /* weak: f is not released again */
}

/* Appends to b what the head prints for output s[0..n) of node: as it
 * is with one node running work, else every line prefixed "[node K] ".
 * The journal keeps a remote task's output in this form, so --resume
 * prints what the run printed. */
static void printed_as(int node, const char *s, size_t n, sf__buf *b) {
  int working = 0;
  pthread_mutex_lock(&R.mu);
  for (int i = 0; i < R.n; i++)
    working += R.slots[i] > 0;
  pthread_mutex_unlock(&R.mu);
  if (working <= 1) {
    sf__buf_put(b, s, n);
    return;
  }
  char prefix[32];
  int pl = snprintf(prefix, sizeof prefix, "[node %d] ", node);
  size_t i = 0;
  while (i < n) {
    const char *nl = memchr(s + i, '\n', n - i);
    size_t e = nl ? (size_t)(nl - s) + 1 : n;
    sf__buf_put(b, prefix, (size_t)pl);
    sf__buf_put(b, s + i, e - i);
    i = e;
  }
  if (b->len && b->data[b->len - 1] != '\n')
    sf__buf_put(b, "\n", 1);
}

void sf__remote_printed_as(int node, const char *s, size_t n, sf__buf *b) {
  printed_as(node, s, n, b);
}

void sf__remote_on_print(int node, const char *s, size_t n) {
  /* Every line of the output gets the prefix; one write for all. */
  sf__buf b;
  char store[1024];
  sf__buf_init(&b, store, sizeof store);
  printed_as(node, s, n, &b);
  (void)sf__out_write(1, b.data, b.len);
  sf__buf_free(&b);
}

/* ============================================================ worker */

typedef struct wjob {
  struct wjob *next;
  uint64_t id;
  const sf_task_desc *d; /* the private copy for this attempt */
  int32_t attempt;
  uint64_t key;          /* the call's identity, as the head gave it */
  uint8_t *args;         /* serialized arguments */
  uint32_t n;
} wjob;

/* Descriptor copies with @retry equal to the attempt: exactly one attempt
 * runs here, and its failure message counts the attempts made so far. */
typedef struct dcopy {
  struct dcopy *next;
  const sf_task_desc *orig;
  int32_t attempt;
  sf_task_desc d;
} dcopy;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wjob *head, *tail;
  int runners, idle, queued;
  dcopy *copies;
  uintptr_t lo[16], hi[16]; /* this executable's loaded segments */
  bool exec[16];
  int nseg;
} WK = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int seg_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  /* The first object is the executable itself. */
  for (int i = 0; i < info->dlpi_phnum && WK.nseg < 16; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
      continue;
    WK.lo[WK.nseg] = info->dlpi_addr + ph->p_vaddr;
    WK.hi[WK.nseg] = WK.lo[WK.nseg] + ph->p_memsz;
    WK.exec[WK.nseg] = (ph->p_flags & PF_X) != 0;
    WK.nseg++;
  }
  return 1;
}

/* Whether [p, p+n) lies in one loaded segment (executable when code). */
static bool in_image(const void *p, size_t n, bool code) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < WK.nseg; i++)
    if (a >= WK.lo[i] && a <= WK.hi[i] && n <= WK.hi[i] - a && (!code || WK.exec[i]))
      return true;
  return false;
}

static size_t image_room(const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (int i = 0; i < WK.nseg; i++)
    if (a >= WK.lo[i] && a < WK.hi[i])
      return WK.hi[i] - a;
  return 0;
}

static bool type_ok(const sf_type *t) { return in_image(t, sizeof *t, false); }

static pthread_once_t seg_once = PTHREAD_ONCE_INIT;
static void seg_init(void) { dl_iterate_phdr(seg_cb, NULL); }

/* The descriptor of `size` bytes at offset off whose first field, a name,
 * equals name[0..nl); what names the kind in errors. */
static const void *find_desc(uint32_t off, size_t size, size_t align, const uint8_t *name,
                             uint32_t nl, const char *what, char *err, size_t errlen) {
  pthread_once(&seg_once, seg_init);
  uintptr_t a = (uintptr_t)&sf_program_desc;
  __asm__("" : "+r"(a));
  a += (uintptr_t)(intptr_t)(int32_t)off;
  const char *p = (const char *)a;
  if (((uintptr_t)p % align) || !in_image(p, size, false)) {
    snprintf(err, errlen, "no %s descriptor at offset %d", what, (int32_t)off);
    return NULL;
  }
  const char *dname = *(const char *const *)p;
  size_t room = image_room(dname);
  if (!room || room < (size_t)nl + 1 || memcmp(dname, name, nl) || dname[nl] != '\0') {
    snprintf(err, errlen, "the %s descriptor at offset %d is not '%.*s'", what, (int32_t)off,
             (int)(nl > 200 ? 200 : nl), (const char *)name);
    return NULL;
  }
  return p;
}

const sf_method_desc *sf__remote_find_method(uint32_t off, const uint8_t *name, uint32_t nl,
                                             char *err, size_t errlen) {
  const sf_method_desc *d = find_desc(off, sizeof *d, _Alignof(sf_method_desc), name, nl,
                                      "method", err, errlen);
  if (d && (!in_image((const void *)(uintptr_t)d->thunk, 1, true) ||
            (d->args && (!type_ok(d->args) || d->args->kind != SF_STRUCT)) ||
            (d->result && !type_ok(d->result)))) {
    snprintf(err, errlen, "the method descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  return d;
}

const sf_actor_desc *sf__remote_find_class(uint32_t off, const uint8_t *name, uint32_t nl,
                                           char *err, size_t errlen) {
  const sf_actor_desc *d = find_desc(off, sizeof *d, _Alignof(sf_actor_desc), name, nl,
                                     "actor", err, errlen);
  if (d && (!type_ok(d->state) || d->state->kind != SF_STRUCT ||
            (d->init && !in_image(d->init, sizeof *d->init, false)))) {
    snprintf(err, errlen, "the actor descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  if (d && d->init) { /* init is checked like any method */
    char e2[64];
    uint32_t n2 = 0;
    while (n2 < 256 && in_image(d->init->name + n2, 1, false) && d->init->name[n2])
      n2++;
    intptr_t ioff = (const char *)d->init - (const char *)&sf_program_desc;
    if (n2 >= 256 || !in_image(d->init->name, n2 + 1, false) ||
        !sf__remote_find_method((uint32_t)(int32_t)ioff, (const uint8_t *)d->init->name, n2, e2,
                                sizeof e2)) {
      snprintf(err, errlen, "the actor descriptor of '%s' is damaged", d->name);
      return NULL;
    }
  }
  return d;
}

/* The descriptor at offset off, if it is one and is called name. */
const sf_task_desc *sf__remote_find_task(uint32_t off, const uint8_t *name, uint32_t nl,
                                         char *err, size_t errlen) {
  const sf_task_desc *d = find_desc(off, sizeof *d, _Alignof(sf_task_desc), name, nl, "task",
                                    err, errlen);
  if (d && (!in_image((const void *)(uintptr_t)d->thunk, 1, true) || !type_ok(d->args) ||
            d->args->kind != SF_STRUCT || (d->result && !type_ok(d->result)))) {
    snprintf(err, errlen, "the task descriptor of '%s' is damaged", d->name);
    return NULL;
  }
  return d;
}

/* out[0..on): what the attempt printed (sent with a value, never with a
 * failure); left out when it would not fit in the frame with the value. */
static void worker_reply(uint64_t id, int status, const void *p, size_t n, const char *out,
                         size_t on) {
  sf__frame f = {.type = SF__F_TASK_RESULT};
  f.u.task_result.task = id;
  f.u.task_result.status = (uint8_t)status;
  f.u.task_result.value = (sf__bytes){p, (uint32_t)n};
  if (status != 1 && on && on <= SF__FRAME_MAX / 2 && n <= SF__FRAME_MAX / 2 - 64)
    f.u.task_result.output = (sf__bytes){(const uint8_t *)out, (uint32_t)on};
  sf__trace_ship(); /* the attempt's trace event reaches the head before its result */
  sf__worker_send_frame(&f);
}

static void print_to_head(const char *line, size_t n) {
  sf__frame f = {.type = SF__F_PRINT};
  f.u.log.line = (sf__bytes){(const uint8_t *)line, (uint32_t)n};
  sf__worker_send_frame(&f);
}

/* -------------------------------------------------- worker objects
 *
 * The store: large results by object id until the head releases them
 * (or this process exits with the run), served to the head over the
 * control connection and to other workers over the object listener.
 * Serving runs on its own thread, so the control loop keeps answering
 * heartbeats; `users` keeps an object alive while a thread sends it. */

typedef struct wobj {
  struct wobj *next;
  uint64_t id;
  uint8_t *p;
  size_t n;
  int users;
  bool dropped;
} wobj;

static struct {
  pthread_mutex_t mu;
  wobj *list;
} WO = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint64_t env_u64(const char *name, uint64_t dflt) {
  const char *v = getenv(name);
  char *end;
  unsigned long long x = v && *v ? strtoull(v, &end, 10) : 0;
  return v && *v && !*end ? (uint64_t)x : dflt;
}

static size_t obj_threshold(void) { return (size_t)env_u64("SFLOW_OBJECT_THRESHOLD", 1u << 20); }

static bool obj_keep(uint64_t id, const void *p, size_t n) {
  wobj *o = calloc(1, sizeof *o);
  uint8_t *c = o ? malloc(n) : NULL;
  if (!c) {
    free(o);
    return false; /* the inline path still works */
  }
  memcpy(c, p, n);
  o->id = id;
  o->p = c;
  o->n = n;
  pthread_mutex_lock(&WO.mu);
  o->next = WO.list; /* a re-run with the same id shadows an older copy */
  WO.list = o;
  pthread_mutex_unlock(&WO.mu);
  return true;
}

static void obj_unuse_locked(wobj *o) {
  if (--o->users == 0 && o->dropped) {
    free(o->p);
    free(o);
  }
}

static wobj *obj_use(uint64_t id) {
  pthread_mutex_lock(&WO.mu);
  wobj *o = WO.list;
  while (o && o->id != id)
    o = o->next;
  if (o)
    o->users++;
  pthread_mutex_unlock(&WO.mu);
  return o;
}

static void obj_unuse(wobj *o) {
  pthread_mutex_lock(&WO.mu);
  obj_unuse_locked(o);
  pthread_mutex_unlock(&WO.mu);
}

/* SFLOW_OBJECT_SERVE_DELAY_MS (tests): a window to kill the owner in
 * before it sends an object. */
static void obj_delay(void) {
  uint64_t delay = env_u64("SFLOW_OBJECT_SERVE_DELAY_MS", 0);
  if (delay) {
    struct timespec ts = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

typedef struct serve {
  wobj *o;
  uint64_t from;
} serve;

static void *obj_serve(void *arg) {
  serve *sv = arg;
  obj_delay();
  wobj *o = sv->o;
  for (uint64_t off = sv->from; off < o->n;) {
    uint64_t k = o->n - off < OBJ_CHUNK ? o->n - off : OBJ_CHUNK;
    sf__frame f = {.type = SF__F_OBJECT};
    f.u.object.object = o->id;
    f.u.object.offset = off;
    f.u.object.total = o->n;
    f.u.object.data = (sf__bytes){o->p + off, (uint32_t)k};
    sf__worker_send_frame(&f);
    off += k;
  }
  pthread_mutex_lock(&WO.mu);
  obj_unuse_locked(o);
  pthread_mutex_unlock(&WO.mu);
  free(sv);
  return NULL;
}

void sf__remote_worker_object(const sf__frame *f) {
  uint64_t id = f->u.object.object, off = f->u.object.offset, total = f->u.object.total;
  if (f->u.object.data.n)
    return; /* the head sends requests only */
  pthread_mutex_lock(&WO.mu);
  wobj **pp = &WO.list;
  while (*pp && (*pp)->id != id)
    pp = &(*pp)->next;
  wobj *o = *pp;
  if (o && off == total) { /* release */
    *pp = o->next;
    o->dropped = true;
    o->users++;
    obj_unuse_locked(o);
    pthread_mutex_unlock(&WO.mu);
    return;
  }
  serve *sv = o && o->n == total ? malloc(sizeof *sv) : NULL;
  if (sv) {
    o->users++;
    *sv = (serve){o, off};
  }
  pthread_mutex_unlock(&WO.mu);
  pthread_t th;
  if (sv && pthread_create(&th, NULL, obj_serve, sv) == 0) {
    pthread_detach(th);
    return;
  }
  if (sv) {
    pthread_mutex_lock(&WO.mu);
    obj_unuse_locked(o);
    pthread_mutex_unlock(&WO.mu);
    free(sv);
  }
  if (off == total)
    return; /* releasing what we do not hold */
  sf__frame no = {.type = SF__F_OBJECT}; /* total 0: not held here */
  no.u.object.object = id;
  sf__worker_send_frame(&no);
}

/* ------------------------------------------ worker to worker objects
 *
 * Each worker serves its store on a second listener (the first is the
 * group rings', which accept synchronously during set-up).  The owner
 * opens with a fresh 32-byte nonce; the fetcher answers with the object
 * id and HMAC(run secret, "sflow-obj-2" | nonce | id), so a greeting seen
 * on the wire cannot be replayed on another connection; the owner then
 * sends u64 size (0: not held here) and the bytes.  A greeting that does
 * not prove the secret is refused, with a line on stderr.  At most
 * OBJ_CONNS connections are served at once (each holds a thread): more
 * are closed at once, so strangers cannot exhaust the worker's threads.
 * Before its greeting a connection reads nothing but those 40 bytes, has
 * OBJ_GREET_TIMEOUT_S to send them, and counts against OBJ_PREAUTH, so
 * silent strangers hold at most half the slots, briefly. */

#define OBJ_IO_TIMEOUT_S 30
#define OBJ_GREET_TIMEOUT_S 5
#define OBJ_NONCE 32
#define OBJ_CONNS 64
#define OBJ_PREAUTH (OBJ_CONNS / 2)
static const char obj_tag[] = "sflow-obj-2";
static _Atomic int obj_conns, obj_preauth;

static void obj_mac(const uint8_t nonce[OBJ_NONCE], uint64_t id, uint8_t mac[SF__HASH_LEN]) {
  uint8_t msg[sizeof obj_tag - 1 + OBJ_NONCE + 8];
  memcpy(msg, obj_tag, sizeof obj_tag - 1);
  memcpy(msg + sizeof obj_tag - 1, nonce, OBJ_NONCE);
  memcpy(msg + sizeof obj_tag - 1 + OBJ_NONCE, &id, 8);
  sf__hmac_sha256(sf__worker_secret(), SF__SECRET_LEN, msg, sizeof msg, mac);
}

static void io_timeouts_s(int fd, int seconds) {
  struct timeval tv = {seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void io_timeouts(int fd) { io_timeouts_s(fd, OBJ_IO_TIMEOUT_S); }

/* Reads exactly n bytes; false on end of stream, error or timeout. */
static bool read_full(int fd, void *p, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t k = read(fd, (char *)p + got, n - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    got += (size_t)k;
  }
  return true;
}

/* A line on this worker's stderr, which reaches the head's as a log
 * line: "sflow worker K: ...". */
void sf__worker_note(const char *fmt, ...) {
  char line[600];
  int k = snprintf(line, sizeof line, "sflow worker %lld: ", (long long)sf__node_id);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + k, sizeof line - (size_t)k - 1, fmt, ap);
  va_end(ap);
  size_t n = (size_t)k + (m < 0 ? 0 : (size_t)m);
  if (n > sizeof line - 2)
    n = sizeof line - 2;
  line[n++] = '\n';
  (void)sf__write_all(2, line, n);
}

static wobj *obj_use(uint64_t id);
static void obj_unuse(wobj *o);
static void obj_delay(void);

/* The end of a connection's greeting, passed or not. */
static void obj_greeted(bool *pre) {
  if (*pre)
    atomic_fetch_sub(&obj_preauth, 1);
  *pre = false;
}

static void *obj_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  bool pre = true; /* counted in obj_preauth until the greeting is checked */
  io_timeouts_s(fd, OBJ_GREET_TIMEOUT_S);
  char who[80] = "?";
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[64] = "?", serv[16] = "?";
  if (!getpeername(fd, (struct sockaddr *)&ss, &sl) &&
      !getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv,
                   NI_NUMERICHOST | NI_NUMERICSERV))
    snprintf(who, sizeof who, "%s:%s", host, serv);
  uint8_t nonce[OBJ_NONCE], greet[8 + SF__HASH_LEN], mac[SF__HASH_LEN];
  uint64_t id;
  if (sf__random_bytes(nonce, sizeof nonce) ||
      !sf__write_all(fd, (const char *)nonce, sizeof nonce)) {
    close(fd);
    obj_greeted(&pre);
    atomic_fetch_sub(&obj_conns, 1);
    return NULL;
  }
  errno = 0;
  if (!read_full(fd, greet, sizeof greet)) {
    sf__worker_note("refused object connection from %s: no greeting%s", who,
                    errno == EAGAIN || errno == EWOULDBLOCK ? " within 5 s" : "");
    close(fd);
    obj_greeted(&pre);
    atomic_fetch_sub(&obj_conns, 1);
    return NULL;
  }
  memcpy(&id, greet, 8);
  obj_mac(nonce, id, mac);
  obj_greeted(&pre);
  if (!sf__ct_equal(mac, greet + 8, SF__HASH_LEN)) {
    sf__worker_note("refused object connection from %s: wrong HMAC", who);
    close(fd);
    atomic_fetch_sub(&obj_conns, 1);
    return NULL;
  }
  io_timeouts(fd); /* proved: the bytes may take longer */
  wobj *o = obj_use(id);
  obj_delay();
  uint64_t total = o ? o->n : 0;
  if (sf__write_all(fd, (const char *)&total, 8) && o)
    (void)sf__write_all(fd, (const char *)o->p, o->n); /* a gone fetcher: its own error */
  if (o)
    obj_unuse(o);
  close(fd);
  atomic_fetch_sub(&obj_conns, 1);
  return NULL;
}

static void *obj_accept(void *arg) {
  int lfd = (int)(intptr_t)arg;
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
        continue;
      struct timespec ts = {0, 100 * 1000000L}; /* out of descriptors: not a spin */
      nanosleep(&ts, NULL);
      continue;
    }
    if (atomic_fetch_add(&obj_conns, 1) >= OBJ_CONNS) {
      atomic_fetch_sub(&obj_conns, 1);
      static _Atomic int told;
      if (!atomic_exchange(&told, 1))
        sf__worker_note("more than %d object connections at once: closing the rest", OBJ_CONNS);
      close(fd);
      continue;
    }
    if (atomic_fetch_add(&obj_preauth, 1) >= OBJ_PREAUTH) {
      atomic_fetch_sub(&obj_preauth, 1);
      atomic_fetch_sub(&obj_conns, 1);
      static _Atomic int told_pre;
      if (!atomic_exchange(&told_pre, 1))
        sf__worker_note("more than %d object connections greeting at once: closing the rest",
                        OBJ_PREAUTH);
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t th;
    if (pthread_create(&th, NULL, obj_conn, (void *)(intptr_t)fd) == 0) {
      pthread_detach(th);
    } else {
      close(fd);
      atomic_fetch_sub(&obj_preauth, 1);
      atomic_fetch_sub(&obj_conns, 1);
    }
  }
  return NULL;
}

void sf__remote_objects_listen(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  pthread_t th;
  if (pthread_create(&th, NULL, obj_accept, (void *)(intptr_t)fd) == 0)
    pthread_detach(th);
}

/* The bytes of object id (size bytes) from the worker at addr:port into a
 * new buffer; NULL with why[] when that fails. */
static uint8_t *obj_fetch(const char *addr, uint16_t port, uint64_t id, uint64_t size,
                          char *why, size_t wl) {
  char ps[8];
  snprintf(ps, sizeof ps, "%u", port);
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(addr, ps, &hints, &ai)) {
    snprintf(why, wl, "bad object address %s", addr);
    return NULL;
  }
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0)
    io_timeouts(fd); /* SO_SNDTIMEO bounds connect too */
  int rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  uint8_t *buf = NULL;
  uint64_t total = 0;
  if (rc) {
    snprintf(why, wl, "cannot connect to %s:%u: %s", addr, port, strerror(errno));
  } else {
    uint8_t nonce[OBJ_NONCE], greet[8 + SF__HASH_LEN];
    bool greeted = read_full(fd, nonce, sizeof nonce);
    memcpy(greet, &id, 8);
    if (greeted)
      obj_mac(nonce, id, greet + 8);
    if (!greeted || !sf__write_all(fd, (const char *)greet, sizeof greet) ||
        !read_full(fd, &total, 8))
      snprintf(why, wl, "%s:%u closed the connection", addr, port);
    else if (total == 0)
      snprintf(why, wl, "it no longer holds the object");
    else if (total != size)
      snprintf(why, wl, "it sent %llu bytes where %llu were expected",
               (unsigned long long)total, (unsigned long long)size);
    else if (!(buf = malloc(size)))
      snprintf(why, wl, "out of memory for %llu bytes", (unsigned long long)size);
    else if (!read_full(fd, buf, size)) {
      snprintf(why, wl, "%s:%u closed the connection mid-object", addr, port);
      free(buf);
      buf = NULL;
    }
  }
  if (fd >= 0)
    close(fd);
  return buf;
}

/* Reads one future argument of type ft (a future<T>) into *out. */
static int de_future(sf__reader *r, const sf_type *ft, sf_future **out, uint64_t *lost,
                     char *why, size_t wl) {
  if (r->p >= r->end)
    return -1;
  uint8_t tag = *r->p++;
  const sf_type *vt = ft->elem;
  int32_t vs = value_size(vt);
  if (tag == ARG_NONE)
    return 0;
  if (tag == ARG_FAILED) {
    uint32_t n;
    if (r->end - r->p < 4 || (memcpy(&n, r->p, 4), n > (uint64_t)(r->end - r->p - 4)))
      return -1;
    char *m = strndup((const char *)r->p + 4, n);
    r->p += 4 + n;
    if (!m)
      return -1;
    *out = sf__future_failed(vt, m);
    free(m);
    return 0;
  }
  const uint8_t *bytes = NULL;
  uint64_t nbytes = 0;
  uint8_t *fetched = NULL;
  wobj *local = NULL;
  sf__reader vr = *r;
  if (tag == ARG_REF) {
    uint32_t node;
    uint64_t id, size;
    uint16_t port;
    if (r->end - r->p < 4 + 8 + 8 + 2 + 1)
      return -1;
    memcpy(&node, r->p, 4);
    memcpy(&id, r->p + 4, 8);
    memcpy(&size, r->p + 12, 8);
    memcpy(&port, r->p + 20, 2);
    uint8_t al = r->p[22];
    r->p += 23;
    if (r->end - r->p < al || al >= 64)
      return -1;
    char addr[64];
    memcpy(addr, r->p, al);
    addr[al] = '\0';
    r->p += al;
    if ((int64_t)node == sf__node_id) { /* held here: used in place */
      if (!(local = obj_use(id)) || local->n != size) {
        if (local)
          obj_unuse(local);
        *lost = id;
        snprintf(why, wl, "node %u no longer holds object %llu", node, (unsigned long long)id);
        return 1;
      }
      bytes = local->p;
      nbytes = local->n;
    } else {
      char w2[200];
      if (!(fetched = obj_fetch(addr, port, id, size, w2, sizeof w2))) {
        *lost = id;
        snprintf(why, wl, "object %llu from node %u: %s", (unsigned long long)id, node, w2);
        return 1;
      }
      bytes = fetched;
      nbytes = size;
    }
    vr = (sf__reader){bytes, bytes + nbytes};
  } else if (tag != ARG_VALUE) {
    return -1;
  }
  _Alignas(16) unsigned char tmp[256];
  void *v = vs <= (int32_t)sizeof tmp ? tmp : calloc(1, (size_t)vs);
  int rc = v ? 0 : -1;
  if (v) {
    memset(v, 0, (size_t)vs);
    if (vs && !sf__de_value(&vr, vt, v)) {
      sf_value_release(vt, v);
      rc = -1;
    } else if (tag == ARG_REF && vr.p != vr.end) {
      sf_value_release(vt, v);
      rc = -1;
    } else {
      *out = sf_future_done(vt, v);
    }
    if (v != tmp)
      free(v);
  }
  if (tag == ARG_VALUE)
    *r = vr;
  if (local)
    obj_unuse(local);
  free(fetched);
  return rc;
}

/* The arguments of d from the head's payload into args (zeroed): the
 * serial.c layout, a future as one of the ARG_ forms.  0, -1 malformed,
 * 1 an input object could not be had (*lost, why). */
static int de_args(const sf_task_desc *d, const uint8_t *p, uint32_t n, void *args,
                   uint64_t *lost, char *why, size_t wl) {
  sf__reader r = {p, p + n};
  const sf_type *a = d->args;
  for (int32_t i = 0; i < a->nfields; i++) {
    const sf_type *ft = a->fields[i].type;
    void *fp = (char *)args + a->fields[i].offset;
    int rc = ft->kind == SF_FUTURE ? de_future(&r, ft, (sf_future **)fp, lost, why, wl)
                                   : sf__de_value(&r, ft, fp) ? 0 : -1;
    if (rc)
      return rc;
  }
  return r.p == r.end ? 0 : -1;
}

static void *worker_runner(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&WK.mu);
    while (!WK.head) {
      WK.idle++;
      pthread_cond_wait(&WK.cv, &WK.mu);
      WK.idle--;
    }
    wjob *j = WK.head;
    WK.head = j->next;
    if (!WK.head)
      WK.tail = NULL;
    WK.queued--;
    pthread_mutex_unlock(&WK.mu);

    const sf_task_desc *d = j->d;
    int32_t asize = value_size(d->args);
    void *args = calloc(1, asize ? (size_t)asize : 1);
    uint64_t lost = 0;
    char why[300];
    int de = args ? de_args(d, j->args, j->n, args, &lost, why, sizeof why) : -1;
    if (de) {
      if (args)
        sf_value_release(d->args, args);
      free(args);
      static const char msg[] = "malformed task arguments from the head";
      if (de > 0) { /* an input object is lost: the head re-makes it */
        uint8_t v[8 + sizeof why];
        memcpy(v, &lost, 8);
        size_t wn = strlen(why);
        memcpy(v + 8, why, wn);
        worker_reply(j->id, 3, v, 8 + wn, NULL, 0);
      } else {
        worker_reply(j->id, 1, msg, sizeof msg - 1, NULL, 0);
      }
    } else {
      sf__buf out; /* the attempt's print lines, sent with its value */
      sf__buf_init(&out, NULL, 0);
      sf_future *f = sf__task_submit_attempt(d, args, j->attempt, &out, j->key);
      free(args);
      int32_t rsize = value_size(d->result);
      void *res = calloc(1, rsize ? (size_t)rsize : 1);
      char err[SF__ERROR_MAX + 256];
      bool ok = res && sf__future_wait_result(f, res, err, sizeof err);
      sf_release(f);
      if (ok) {
        sf__buf b;
        char store[512];
        sf__buf_init(&b, store, sizeof store);
        if (rsize)
          sf__ser_value(&b, d->result, res);
        uint64_t ref[2] = {j->id, b.len};
        if (b.len > obj_threshold() && obj_keep(j->id, b.data, b.len))
          worker_reply(j->id, 2, ref, sizeof ref, out.data, out.len); /* objects: stays here */
        else
          worker_reply(j->id, 0, b.data, b.len, out.data, out.len);
        sf__buf_free(&b);
        sf_value_release(d->result, res);
      } else {
        const char *c = res ? cause_of(err) : "out of memory";
        worker_reply(j->id, 1, c, strlen(c), NULL, 0);
      }
      sf__buf_free(&out);
      free(res);
    }
    free(j->args);
    free(j);
  }
  return NULL;
}

void sf__remote_worker_start(void) {
  sf__sched_start();
  pthread_once(&seg_once, seg_init);
  sf__print_hook = print_to_head;
}

void sf__remote_worker_submit(const sf__frame *f) {
  char err[300];
  const uint8_t *p = f->u.task_submit.args.p;
  uint32_t n = f->u.task_submit.args.n, nl = 0;
  const sf_task_desc *d = NULL;
  if (n < 4 || (memcpy(&nl, p, 4), nl > n - 4) || nl == 0)
    snprintf(err, sizeof err, "malformed task-submit payload");
  else
    d = sf__remote_find_task(f->u.task_submit.fn, p + 4, nl, err, sizeof err);
  int32_t attempt = (int32_t)f->u.task_submit.attempt;
  if (d && (attempt < 0 || attempt > d->retry)) {
    snprintf(err, sizeof err, "attempt %u of '%s' is beyond its @retry(%d)",
             f->u.task_submit.attempt, d->name, d->retry);
    d = NULL;
  }
  if (!d) {
    char line[400];
    int k = snprintf(line, sizeof line, "sflow worker %lld: refused a task: %s\n",
                     (long long)sf__node_id, err);
    (void)sf__write_all(2, line, (size_t)(k < (int)sizeof line ? k : (int)sizeof line - 1));
    worker_reply(f->u.task_submit.task, 1, err, strlen(err), NULL, 0);
    return;
  }
  wjob *j = calloc(1, sizeof *j);
  uint8_t *a = malloc(n - 4 - nl + 1);
  if (!j || !a) {
    free(j);
    free(a);
    static const char msg[] = "out of memory on the worker";
    worker_reply(f->u.task_submit.task, 1, msg, sizeof msg - 1, NULL, 0);
    return;
  }
  memcpy(a, p + 4 + nl, n - 4 - nl);
  j->id = f->u.task_submit.task;
  j->attempt = attempt;
  j->key = f->u.task_submit.key;
  j->args = a;
  j->n = n - 4 - nl;
  pthread_mutex_lock(&WK.mu);
  dcopy *c = WK.copies;
  while (c && !(c->orig == d && c->attempt == attempt))
    c = c->next;
  if (!c && (c = calloc(1, sizeof *c))) {
    c->orig = d;
    c->attempt = attempt;
    c->d = *d;
    c->d.retry = attempt;
    c->next = WK.copies;
    WK.copies = c;
  }
  j->d = c ? &c->d : d;
  if (WK.tail)
    WK.tail->next = j;
  else
    WK.head = j;
  WK.tail = j;
  WK.queued++;
  int cap = sf__pool_size(); /* --threads: the hostfile's slots, or the CPUs */
  bool spawn = WK.queued > WK.idle && WK.runners < (cap > 0 ? cap : 1);
  if (spawn)
    WK.runners++;
  pthread_cond_signal(&WK.cv);
  pthread_mutex_unlock(&WK.mu);
  if (spawn) {
    pthread_t th;
    if (pthread_create(&th, NULL, worker_runner, NULL)) {
      pthread_mutex_lock(&WK.mu);
      WK.runners--;
      pthread_mutex_unlock(&WK.mu);
    } else {
      pthread_detach(th);
    }
  }
}
