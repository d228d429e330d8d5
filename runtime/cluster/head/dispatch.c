/*
 * dispatch.c — the head's side of task calls placed on the nodes of a
 * --nodes run: submission, the backlog, retries, future arguments, the
 * head's own runners, node loss and workers' print output.
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
 * Calls made inside a running task stay on the node that runs it (a task
 * waiting for children that wait for a slot it holds could never finish).
 * Where a call goes is placement.c's; a result over the object threshold
 * stays on its worker (objects_head.c); the worker's side is
 * worker/worker_tasks.c.
 * print output of a worker's attempts reaches the head as print frames,
 * prefixed here with "[node K] " when more than one node runs work.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remote_internal.h"

sf__remote_ledger sf__remote = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* =================================================== portable values */

/* Whether a value of type t can travel (serial.c writes futures, actors
 * and groups as markers that come back empty). */
bool sf__remote_portable(const sf_type *t) {
  if (!t)
    return true;
  switch (t->kind) {
  case SF_VOID: case SF_BOOL: case SF_I32: case SF_I64: case SF_F32: case SF_F64: case SF_STR:
  case SF_FN: /* an index into the executable's own table (core/fnval.c) */
  case SF_TENSOR: /* shape and data, through the nn layer's hooks (core/serial.c) */
    return true;
  case SF_ARRAY:
    return sf__remote_portable(t->elem);
  case SF_MAP:
    return sf__remote_portable(t->fields[0].type) && sf__remote_portable(t->elem);
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
 * portable values at the top level (dispatch.c sends their value, their
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

/* ============================================================== head */

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
rtask *sf__rtask_of(const sf_future *f) {
  for (rtask *t = R.fbuckets[fbucket(f)]; t; t = t->fnext)
    if (t->f == f)
      return t;
  return NULL;
}

rtask *sf__rtask_find(uint64_t id) {
  for (rtask *t = R.buckets[id % NBUCKETS]; t; t = t->hnext)
    if (t->id == id)
      return t;
  return NULL;
}

void sf__rtask_unhash(rtask *t) {
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
static void encode_submit(sf__wbuf *b, rtask *t) {
  sf__frame f = {.type = SF__F_TASK_SUBMIT};
  f.u.task_submit.task = t->id;
  f.u.task_submit.fn = (uint32_t)(int32_t)((const char *)t->d - (const char *)&sf_program_desc);
  f.u.task_submit.attempt = (uint32_t)t->attempt;
  f.u.task_submit.key = t->key;
  f.u.task_submit.args = (sf__bytes){t->payload, t->n};
  sf__wire_encode(b, &f);
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

void sf__remote_dispatch_locked(outbox *ob) {
  if (R.wait_head && R.wait_dirty)
    wake_waiting_locked(ob);
  bool woke = false;
  rtask *prev = NULL;
  int32_t gpu_miss = INT32_MAX; /* the smallest share that found no room */
  for (rtask *t = R.back_head, *nx; t; t = nx) {
    nx = t->next;
    int best = -1;
    if (!t->gpu.share)
      best = sf__remote_place_near_locked(t);
    else if (t->gpu.share < gpu_miss &&
             (best = sf__remote_place_gpu_locked(&t->gpu, true, false, 1)) < 0)
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

void sf__outbox_send(outbox *ob) {
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
void sf__rtask_free(rtask *t) {
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

void sf__rtask_fail(rtask *t, const char *cause) {
  char *msg = NULL;
  if (asprintf(&msg, "task '%s' failed after %d %s: %s", t->d->name, (int)t->attempt + 1,
               sf__plural(t->attempt + 1, "attempt", "attempts"), cause) < 0)
    msg = NULL;
  sf__future_reject(t->f, msg ? msg : cause);
  free(msg);
  sf__rtask_free(t);
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
    sf__rtask_unhash(t);
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
    sf__rtask_fail(l, l->gpu.share ? gwhy : why);
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
 * lost) set R.wait_dirty, and the next sf__remote_dispatch_locked checks them all.
 * The payload is then built from the argument block: a complete future's
 * value inline, a failed one's message, a held one as a reference the
 * worker fetches from the owner's object listener. */

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
void sf__rtask_requeue_locked(rtask *t, bool front, outbox *ob) {
  if (!t->args) {
    back_push(t, front);
    return;
  }
  sf__refs_drop_locked(t, ob);
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
    rtask *p = sf__rtask_of(g);
    if (p && p->held && R.alive[p->node] && R.oport[p->node])
      continue;
    ready = false;
    if (p && p->held && R.alive[p->node] && !p->fetching) {
      if (!p->strong) { /* t's argument block holds a reference */
        sf_retain(p->f);
        p->strong = true;
      }
      p->wanted = p->fetching = true;
      sf__obj_encode(ob, p->node, p->id, 0, p->obj_total);
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
    rtask *p = g && !done ? sf__rtask_of(g) : NULL;
    if (!g) {
      put_u8(&b, SF__ARG_NONE);
    } else if (!done && !(p && p->held)) {
      ok = false; /* not ready after all (deps_ready_locked said it was) */
    } else if (done) { /* complete: the value, or why it failed */
      int32_t vs = sf__value_size(ft->elem);
      _Alignas(16) unsigned char tmp[256];
      void *v = vs <= (int32_t)sizeof tmp ? tmp : calloc(1, (size_t)vs);
      char err[SF__ERROR_MAX + 256];
      if (!v) {
        ok = false;
      } else if (sf__future_wait_result(g, v, err, sizeof err)) {
        put_u8(&b, SF__ARG_VALUE);
        if (vs)
          sf__ser_value(&b, ft->elem, v);
        sf_value_release(ft->elem, v);
      } else {
        put_u8(&b, SF__ARG_FAILED);
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
      put_u8(&b, SF__ARG_REF);
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
    sf__refs_drop_locked(t, ob);      /* a half-built payload's */
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
  rtask *t = R.state > 0 ? sf__rtask_find(id) : NULL;
  if (t && t->waiting)
    (void)wake_one_locked(t, &ob);
  sf__remote_dispatch_locked(&ob);
  rtask *stuck = drain_if_stuck_locked();
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
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
    int32_t asize = sf__value_size(d->args);
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
    int32_t rsize = sf__value_size(d->result);
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
    sf__rtask_unhash(t);
    sf__refs_drop_locked(t, &ob);
    R.inflight[0]--;
    sf__remote_gpu_give_locked(t->node, &t->gpu);
    sf__remote_dispatch_locked(&ob);
    pthread_mutex_unlock(&R.mu);
    sf__outbox_send(&ob);
    if (ok) {
      sf__future_resolve_out(t->f, res, out.data, out.len);
      sf__rtask_free(t);
    } else {
      sf__future_reject(t->f, err); /* local attempts ran the rest of the budget */
      sf__rtask_free(t);
    }
    sf__buf_free(&out);
    if (res != rbuf)
      free(res);
  }
  return NULL;
}

/* ----------------------------------------------------- node loss */

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
    sf__remote_gpu_give_locked(t->node, &t->gpu);
    if (t->held) {
      free(t->obj);
      t->obj = NULL;
      t->held = t->fetching = false;
      t->users = 0; /* payloads naming it fail their fetch and are rebuilt */
      if (!t->strong && !sf__future_try_retain(t->f)) {
        sf__rtask_unhash(t); /* its future is being freed: nothing can want it */
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
      sf__rtask_requeue_locked(t, true, &ob);
    } else {
      sf__rtask_unhash(t);
      sf__refs_drop_locked(t, &ob);
      t->node = -1;
      t->next = failed;
      failed = t;
    }
  }
  rtask *stuck = drain_if_stuck_locked();
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  char cause[512];
  snprintf(cause, sizeof cause, "node %d was lost: %s", node, why);
  while (failed) {
    rtask *nx = failed->next;
    char held[700];
    if (failed->obj_chunks < 0)
      snprintf(held, sizeof held, "%s (it held the task's result, %llu bytes, not yet fetched)",
               cause, (unsigned long long)failed->obj_total);
    sf__rtask_fail(failed, failed->obj_chunks < 0 ? held : cause);
    failed = nx;
  }
  fail_stuck(stuck);
  while (dropped) {
    rtask *nx = dropped->next;
    sf__rtask_free(dropped);
    dropped = nx;
  }
  sf__ractor_node_lost(node, why); /* actors restart elsewhere */
}

/* ------------------------------------------------------- activation */

bool sf__remote_activate(void) {
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

/* ------------------------------------------------------- submission */

/* A call with future arguments: keeps its argument block (and so the
 * futures) and waits on R.wait_head until they are ready (see "future
 * arguments"); told when a pending one completes. */
static bool submit_waiting(rtask *t, const sf_task_desc *d, void *args, sf_future *f) {
  size_t asize = (size_t)sf__value_size(d->args);
  t->args = malloc(asize ? asize : 1);
  if (!t->args) {
    free(t);
    return false;
  }
  memcpy(t->args, args, asize);
  sf_value_retain(d->args, t->args);
  t->d = d;
  t->gpu.share = d->gpus > 0 ? sf__remote_share_of(d->gpus) : 0;
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
  sf__remote_dispatch_locked(&ob);
  rtask *stuck = drain_if_stuck_locked();
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  fail_stuck(stuck);
  return true;
}

bool sf__remote_task(const sf_task_desc *d, void *args, sf_future *f, int64_t seq,
                     uint64_t key) {
  (void)seq; /* sf__future_resolve journals main's calls */
  if (R.state < 0 || sf__task_depth > 0)
    return false;
  if (!sf__remote_activate())
    return false;
  /* No GPU on any node: @gpus work stays where it is (the CPU notice, or
   * --require-gpu's error, as in a single-node run). */
  if (d->gpus > 0 && !sf__remote_gpus_learn())
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
  t->gpu.share = d->gpus > 0 ? sf__remote_share_of(d->gpus) : 0;
  sf_retain(f);
  t->f = f;
  t->strong = true;
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  t->id = ++R.next_id;
  hash_put(t);
  back_push(t, false);
  rtask *stuck = drain_if_stuck_locked();
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  fail_stuck(stuck);
  return true;
}

static void printed_as(int node, const char *s, size_t n, sf__buf *b);

/* Completes (or retries) a worker node's task from its answer: status 0
 * and the serialized value, or status 1 and the cause; out[0..on): what
 * the attempt printed (journaled with the value, as the head printed it).
 * slot: the task still holds its slot on node (not so once its result
 * became an object). */
void sf__rtask_finish(int node, rtask *t, int status, const uint8_t *p, size_t n, const char *out,
                      size_t on, bool slot) {
  const sf_type *rt = sf__future_type(t->f);
  int32_t rsize = sf__value_size(rt);
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
    sf__refs_done_locked(node, t, &ob);
  }
  sf__remote_gpu_give_locked(t->node, &t->gpu);
  if (!good && t->attempt < t->d->retry) {
    t->attempt++;
    atomic_fetch_add(&sf__stats.retries, 1);
    sf__rtask_requeue_locked(t, true, &ob);
    retry = true;
  } else {
    sf__rtask_unhash(t);
    sf__refs_drop_locked(t, &ob);
  }
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (!retry) {
    if (good) {
      sf__buf pb;
      char store[512];
      sf__buf_init(&pb, store, sizeof store);
      if (on)
        printed_as(node, out, on, &pb);
      sf__future_resolve_out(t->f, res, pb.data, pb.len);
      sf__buf_free(&pb);
      sf__rtask_free(t);
    } else {
      sf__rtask_fail(t, cause);
    }
  }
  if (res != rbuf)
    free(res);
}

void sf__remote_on_result(int node, const sf__frame *fr) {
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_find(fr->u.task_result.task) : NULL;
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
    sf__obj_start(node, t, fr);
  else if (fr->u.task_result.status == 3)
    sf__obj_input_lost(node, t, fr);
  else
    sf__rtask_finish(node, t, fr->u.task_result.status, fr->u.task_result.value.p,
                     fr->u.task_result.value.n, (const char *)fr->u.task_result.output.p,
                     fr->u.task_result.output.n, true);
}

/* ----------------------------------------------------- remote print */

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
