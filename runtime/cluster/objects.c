/*
 * objects.c — the object store of a --nodes run: large task results kept
 * by the worker that computed them, fetched by the head only when main
 * wants them, and by other workers directly from the owner.
 *
 * Key design choice: a large result never moves until someone wants its
 * bytes, and the head's task record (dispatch.c) decides how long the
 * worker keeps it: the object is released when that record goes (or,
 * while calls still name it, when the last of them is done).
 *
 * A worker keeps a result whose serialized form is over the threshold
 * (SFLOW_OBJECT_THRESHOLD bytes, default 1 MiB) in its object store and
 * answers with status 2: u64 object id (the task id) and u64 size.  The
 * head frees the task's slot at once and leaves the future pending; when
 * the value is first wanted (future.c: an await, or a task parked on it) it
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
 * fetch objects directly from the owner ("worker to worker objects").
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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "remote_internal.h"

#define OBJ_CHUNK ((uint32_t)256 << 10)
#define OBJ_MAX ((uint64_t)1 << 40)

/* ============================================================== head */

void sf__obj_encode(outbox *ob, int node, uint64_t id, uint64_t offset, uint64_t total) {
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
  sf__obj_encode(ob, node, id, size, size);
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) released on node %d", (unsigned long long)id,
               name ? name : "?", (unsigned long long)size, node);
}

/* t's payload no longer names its objects (it ended, or is rebuilt). */
void sf__refs_drop_locked(rtask *t, outbox *ob) {
  for (int i = 0; i < t->nrefs; i++) {
    const objref *r = &t->refs[i];
    rtask *p = sf__rtask_find(r->id);
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
void sf__refs_done_locked(int node, rtask *t, outbox *ob) {
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
  sf__refs_drop_locked(t, ob);
}

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

void sf__obj_start(int node, rtask *t, const sf__frame *fr) {
  uint64_t id, total;
  memcpy(&id, fr->u.task_result.value.p, 8); /* 16 bytes: wire.c checked */
  memcpy(&total, fr->u.task_result.value.p + 8, 8);
  if (id != t->id || total == 0 || total > OBJ_MAX) {
    char cause[128];
    snprintf(cause, sizeof cause, "node %d sent a bad object reference (%llu bytes)", node,
             (unsigned long long)total);
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  char *out = NULL; /* kept until the value is fetched */
  size_t on = fr->u.task_result.output.n;
  if (on && (out = malloc(on)))
    memcpy(out, fr->u.task_result.output.p, on);
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  R.inflight[node]--; /* the worker is done with it: its slot is free */
  sf__refs_done_locked(node, t, &ob);
  sf__remote_gpu_give_locked(t->node, &t->gpu);
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
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
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
void sf__obj_input_lost(int node, rtask *t, const sf__frame *fr) {
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
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, true);
    return;
  }
  rtask *p = sf__rtask_find(id);
  R.inflight[node]--;
  sf__remote_gpu_give_locked(t->node, &t->gpu);
  sf__rtask_requeue_locked(t, true, &ob); /* not an attempt of t's */
  t->avoid = owner;
  if (p && p->held && p->node == owner) {
    /* Lost there: forget it (release it should the owner still run). */
    sf__obj_encode(&ob, owner, id, p->obj_total, p->obj_total);
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
      sf__rtask_requeue_locked(p, true, &ob);
    } else {
      sf__rtask_unhash(p);
      sf__refs_drop_locked(p, &ob);
      p->node = -1;
      failed = p;
    }
  }
  sf__remote_dispatch_locked(&ob);
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (failed)
    sf__rtask_fail(failed, cause); /* t, waiting on it, is told */
}

void sf__remote_demand(sf_future *f) {
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_of(f) : NULL;
  if (t && !t->strong) { /* the caller holds a reference */
    sf_retain(f);
    t->strong = true;
  }
  bool go = t && t->held && !t->fetching;
  int node = t ? t->node : 0;
  uint64_t id = t ? t->id : 0, total = t ? t->obj_total : 0;
  if (t) { /* not held now (a re-run): sf__obj_start fetches when it is */
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
  rtask *t = R.state > 0 ? sf__rtask_find(id) : NULL;
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
    sf__rtask_finish(node, t, 1, (const uint8_t *)cause, strlen(cause), NULL, 0, false);
    return;
  }
  if (sf__options.cluster_log)
    sf__notice("object %llu (task '%s', %llu bytes) fetched from node %d in %d %s",
               (unsigned long long)id, t->d->name, (unsigned long long)t->obj_total, node,
               t->obj_chunks, sf__plural(t->obj_chunks, "chunk", "chunks"));
  atomic_fetch_add(&sf__stats.objects_fetched, 1);
  atomic_fetch_add(&sf__stats.object_bytes, t->obj_total);
  sf__rtask_finish(node, t, 0, t->obj, t->obj_total, t->out, t->out_n, false);
}

/* The last reference to held future f went (future.c, its destructor): no
 * call here can want the value any more, and no call waiting or running
 * names it (they hold references to f), so its owner drops it. */
void sf__remote_future_gone(sf_future *f) {
  outbox ob = {0};
  pthread_mutex_lock(&R.mu);
  rtask *t = R.state > 0 ? sf__rtask_of(f) : NULL;
  if (t && (t->strong || !t->held))
    t = NULL; /* not this record's (it holds a reference while it is not held) */
  if (t) {
    sf__rtask_unhash(t);
    if (t->users > 0) { /* not expected: payloads hold f; kept for them */
      pin *q = malloc(sizeof *q);
      if (q) {
        *q = (pin){R.pins, t->id, t->obj_total, t->node, t->users};
        R.pins = q;
      }
    } else {
      obj_release_locked(&ob, t->node, t->id, t->obj_total, t->d->name);
    }
    sf__refs_drop_locked(t, &ob);
  }
  pthread_mutex_unlock(&R.mu);
  sf__outbox_send(&ob);
  if (t)
    sf__rtask_free(t); /* weak: f is not released again */
}

/* ============================================================ worker */

/* -------------------------------------------------- worker objects
 *
 * The store: large results by object id until the head releases them
 * (or this process exits with the run), served to the head over the
 * control connection and to other workers over the object listener.
 * Serving runs on its own thread, so the control loop keeps answering
 * heartbeats; `users` keeps an object alive while a thread sends it. */

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

size_t sf__obj_threshold(void) { return (size_t)env_u64("SFLOW_OBJECT_THRESHOLD", 1u << 20); }

bool sf__wobj_keep(uint64_t id, const void *p, size_t n) {
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

wobj *sf__wobj_use(uint64_t id) {
  pthread_mutex_lock(&WO.mu);
  wobj *o = WO.list;
  while (o && o->id != id)
    o = o->next;
  if (o)
    o->users++;
  pthread_mutex_unlock(&WO.mu);
  return o;
}

void sf__wobj_unuse(wobj *o) {
  pthread_mutex_lock(&WO.mu);
  obj_unuse_locked(o);
  pthread_mutex_unlock(&WO.mu);
}

/* SFLOW_OBJECT_SERVE_DELAY_MS (tests): a window to kill the owner in
 * before it sends an object. */
void sf__obj_delay(void) {
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
  sf__obj_delay();
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
  wobj *o = sf__wobj_use(id);
  sf__obj_delay();
  uint64_t total = o ? o->n : 0;
  if (sf__write_all(fd, (const char *)&total, 8) && o)
    (void)sf__write_all(fd, (const char *)o->p, o->n); /* a gone fetcher: its own error */
  if (o)
    sf__wobj_unuse(o);
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
uint8_t *sf__obj_fetch(const char *addr, uint16_t port, uint64_t id, uint64_t size, char *why,
                       size_t wl) {
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
