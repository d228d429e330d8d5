/*
 * ractor_worker.c — the actors a worker of a --nodes run holds for the
 * head (ractor_head.c).
 *
 * Actor frames arrive on the control loop, which hands them (in place
 * when large, sf__conn_take) to one actor-frame thread that takes them in
 * order: actor-create builds a local actor with actor.c's machinery (init,
 * or the shipped state and call counts), actor-call posts the call to its
 * mailbox (so calls run one at a time, in order), and one reply thread
 * per actor sends each result in order as its future completes.  The loop
 * itself only answers heartbeats and reads on, so decoding a restarted
 * BERT member's 280 MB state (a second or more on a loaded core) never
 * reads to the head as a silent node.  Checkpoints are shipped instead of
 * written (checkpoint.c's sf__checkpoint_ship), encoded on the actor's
 * thread, and only after the result of the call they include has been
 * sent, so the head never holds a checkpoint that covers a call whose
 * result it lost.
 *
 * A group member's collectives go over its ring (group_ring.c), made with
 * its create frame and stopped with the actor.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "worker_internal.h"

/* A bounds-checked reader over a payload (little-endian hosts only, as
 * serial.c). */
typedef struct prd {
  const uint8_t *p, *end;
  bool ok;
} prd;
static bool rd_take(prd *r, void *out, size_t n) {
  if (!r->ok || (size_t)(r->end - r->p) < n)
    return r->ok = false;
  memcpy(out, r->p, n);
  r->p += n;
  return true;
}
static sf__bytes rd_bytes(prd *r) {
  uint32_t n = 0;
  sf__bytes b = {NULL, 0};
  if (!rd_take(r, &n, 4) || (size_t)(r->end - r->p) < n) {
    r->ok = false;
    return b;
  }
  b.p = r->p;
  b.n = n;
  r->p += n;
  return b;
}

/* ============================================================ worker */

typedef struct witem {
  struct witem *next;
  uint64_t seq;
  sf_future *f;           /* the call's future, or NULL: refused */
  const sf_method_desc *md;
  char *refused;          /* why it was not run */
  sf__buf out;            /* what the call printed, sent with its value */
} witem;

typedef struct wstate {
  struct wstate *next;
  uint64_t calls, epoch;
  sf__wbuf frame; /* the actor-state frame, encoded */
} wstate;


/* One actor on this worker.  Never freed: a stopped one stays in the
 * table, marked, so a late checkpoint of its thread finds it. */
typedef struct wactor {
  struct wactor *next;
  uint64_t wid;
  sf_actor *a;            /* NULL when the create frame was refused */
  const sf_actor_desc *d;
  char *error;            /* why it was refused */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  witem *head, *tail;     /* calls in order, for the reply thread */
  uint64_t sent;          /* results sent up to this sequence number */
  wstate *states;         /* checkpoints waiting for their call's result */
  _Atomic bool stop;      /* read by the reply thread without mu */
  wring *ring;            /* a group member's transport, or NULL */
} wactor;

static struct {
  pthread_mutex_t mu;
  wactor *list;
} WA = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void w_result_out(uint64_t wid, uint64_t seq, int status, const void *p, size_t n,
                         const sf__buf *out) {
  sf__frame f = {.type = SF__F_ACTOR_RESULT};
  f.u.actor_result.actor = wid;
  f.u.actor_result.seq = seq;
  f.u.actor_result.status = (uint8_t)status;
  f.u.actor_result.value = (sf__bytes){p, (uint32_t)n};
  if (!status && out && out->len && out->len <= SF__FRAME_MAX / 2 &&
      n <= SF__FRAME_MAX / 2 - 64) /* the head journals it; more: not kept */
    f.u.actor_result.output = (sf__bytes){(const uint8_t *)out->data, (uint32_t)out->len};
  sf__trace_ship(); /* the call's trace event reaches the head before its result */
  sf__worker_send_frame(&f);
}

static void w_result(uint64_t wid, uint64_t seq, int status, const void *p, size_t n) {
  w_result_out(wid, seq, status, p, n, NULL);
}

static void w_state(wstate *s) { sf__worker_send_encoded(&s->frame); }

/* "call of 'A.m' failed: CAUSE" -> CAUSE: the head words it again. */
static const char *call_cause(const char *msg) {
  if (strncmp(msg, "call of '", 9))
    return msg;
  const char *p = strstr(msg, "' failed: ");
  return p ? p + 10 : msg;
}

/* Sends each call's result in order as it completes, then the checkpoints
 * that include it. */
static void *reply_main(void *arg) {
  wactor *w = arg;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    while (!w->head && !w->stop)
      pthread_cond_wait(&w->cv, &w->mu);
    witem *it = w->head;
    if (!it) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    w->head = it->next;
    if (!w->head)
      w->tail = NULL;
    pthread_mutex_unlock(&w->mu);
    const sf_method_desc *md = it->md;
    char err[SF__ERROR_MAX + 256];
    if (it->f) {
      int32_t rsize = sf__value_size(md->result);
      void *res = calloc(1, rsize ? (size_t)rsize : 1);
      bool ok = res && sf__future_wait_result(it->f, res, err, sizeof err);
      sf_release(it->f);
      if (ok) {
        sf__buf b;
        char store[512];
        sf__buf_init(&b, store, sizeof store);
        if (rsize)
          sf__ser_value(&b, md->result, res);
        if (!w->stop)
          w_result_out(w->wid, it->seq, 0, b.data, b.len, &it->out);
        sf__buf_free(&b);
        sf_value_release(md->result, res);
      } else if (!w->stop) {
        const char *c = res ? call_cause(err) : "out of memory on the worker";
        /* Status 2 when the member's ring is broken: the head may be
         * about to restart the group. */
        w_result(w->wid, it->seq, sf__group_ring_broken(w->ring) ? 2 : 1, c, strlen(c));
      }
      free(res);
    } else if (!w->stop) {
      w_result(w->wid, it->seq, 1, it->refused, strlen(it->refused));
    }
    pthread_mutex_lock(&w->mu);
    if (it->seq > w->sent)
      w->sent = it->seq;
    wstate *ready = NULL, **p = &w->states;
    while (*p) {
      wstate *s = *p;
      if (s->calls <= w->sent) {
        *p = s->next;
        s->next = ready;
        ready = s;
      } else {
        p = &s->next;
      }
    }
    bool stop = w->stop;
    pthread_mutex_unlock(&w->mu);
    while (ready) { /* at most one or two; order does not matter to the head */
      wstate *nx = ready->next;
      if (!stop)
        w_state(ready);
      sf__wbuf_free(&ready->frame);
      free(ready);
      ready = nx;
    }
    free(it->refused);
    sf__buf_free(&it->out);
    free(it);
  }
  return NULL;
}

static wactor *w_find(uint64_t wid) {
  pthread_mutex_lock(&WA.mu);
  wactor *w = WA.list;
  while (w && w->wid != wid)
    w = w->next;
  pthread_mutex_unlock(&WA.mu);
  return w;
}

/* checkpoint.c, on the actor's thread between two calls. */
static void ship(sf_actor *a, int64_t calls, int64_t epochs, const void *p, size_t n) {
  pthread_mutex_lock(&WA.mu);
  wactor *w = WA.list;
  while (w && w->a != a)
    w = w->next;
  pthread_mutex_unlock(&WA.mu);
  if (!w || n > UINT32_MAX)
    return;
  wstate *s = calloc(1, sizeof *s);
  if (!s)
    return;
  /* Encoded here, on the actor's thread: the one copy the state costs. */
  sf__frame f = {.type = SF__F_ACTOR_STATE};
  f.u.actor_state.actor = w->wid;
  f.u.actor_state.calls = (uint64_t)calls;
  f.u.actor_state.epoch = (uint64_t)epochs;
  f.u.actor_state.state = (sf__bytes){p, (uint32_t)n};
  if (sf__wire_encode(&s->frame, &f)) {
    sf__wbuf_free(&s->frame);
    free(s);
    return;
  }
  s->calls = (uint64_t)calls;
  s->epoch = (uint64_t)epochs;
  pthread_mutex_lock(&w->mu);
  bool now = w->sent >= s->calls && !w->stop;
  if (!now && !w->stop) {
    s->next = w->states;
    w->states = s;
    s = NULL;
  }
  pthread_mutex_unlock(&w->mu);
  if (s) {
    if (now)
      w_state(s);
    sf__wbuf_free(&s->frame);
    free(s);
  }
}

static void w_push(wactor *w, witem *it) {
  pthread_mutex_lock(&w->mu);
  if (w->tail)
    w->tail->next = it;
  else
    w->head = it;
  w->tail = it;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}


static void w_create(const sf__frame *f) {
  char err[300] = "";
  prd r = {f->u.actor_create.args.p, f->u.actor_create.args.p + f->u.actor_create.args.n, true};
  uint32_t nl = 0, rank = 0, size = 0;
  uint64_t id = 0, key = 0, ring = 0, calls = 0, epochs = 0;
  uint8_t from = 0;
  const uint8_t *name = NULL;
  if (rd_take(&r, &nl, 4) && (size_t)(r.end - r.p) >= nl) {
    name = r.p;
    r.p += nl;
  } else {
    r.ok = false;
  }
  rd_take(&r, &id, 8);
  rd_take(&r, &key, 8);
  rd_take(&r, &rank, 4);
  rd_take(&r, &size, 4);
  rd_take(&r, &ring, 8);
  rd_take(&r, &calls, 8);
  rd_take(&r, &epochs, 8);
  rd_take(&r, &from, 1);
  sf__bytes body = rd_bytes(&r);
  sf__bytes peers = rd_bytes(&r);
  const sf_actor_desc *d = NULL;
  sf__peer *pl = NULL;
  if (!r.ok || r.p != r.end || nl == 0 || from > 1 || size == 0 || size > SF__GROUP_MAX ||
      rank >= size || (size > 1) != (ring != 0) || id > INT64_MAX || epochs > calls ||
      calls > INT64_MAX)
    snprintf(err, sizeof err, "malformed actor-create payload");
  else
    d = sf__remote_find_class(f->u.actor_create.cls, name, nl, err, sizeof err);
  if (d && size > 1) {
    pl = calloc(size, sizeof *pl);
    size_t off = 0;
    for (uint32_t i = 0; pl && i < size; i++)
      if (!sf__wire_peer(peers, &off, pl[i].addr, sizeof pl[i].addr, &pl[i].port))
        d = NULL;
    if (!pl || !d || off != peers.n) {
      snprintf(err, sizeof err, "malformed peer list for a group of %u", size);
      d = NULL;
    }
  } else if (d && peers.n) {
    snprintf(err, sizeof err, "malformed actor-create payload (peers without a group)");
    d = NULL;
  }
  /* The arguments or the state, read with this executable's types. */
  const sf_type *t = d ? (from ? d->state : d->init ? d->init->args : NULL) : NULL;
  void *val = NULL;
  if (d) {
    int32_t vs = sf__value_size(t);
    val = calloc(1, vs ? (size_t)vs : 1);
    sf__reader rd = {body.p, body.p + body.n};
    if (!val || (vs && !sf__de_value(&rd, t, val)) || rd.p != rd.end) {
      if (val && vs)
        sf_value_release(t, val);
      free(val);
      val = NULL;
      snprintf(err, sizeof err, "malformed %s for actor '%s'",
               from ? "checkpointed state" : "init arguments", d->name);
      d = NULL;
    }
  }
  wactor *w = calloc(1, sizeof *w);
  if (!w) {
    free(pl);
    free(val);
    return;
  }
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  w->wid = f->u.actor_create.actor;
  w->d = d;
  w->sent = calls;
  if (d) {
    sf__comm *comm = size > 1 ? sf__group_ring_comm(rank, size, ring, pl) : NULL;
    w->ring = comm ? sf__comm_host(comm) : NULL;
    sf__checkpoint_ship = ship; /* before the actor can run a call */
    w->a = sf__actor_spawn_at(d, (int64_t)id, rank, size, comm, from ? NULL : val,
                              from ? val : NULL, (int64_t)calls, (int64_t)epochs, key);
  } else {
    w->error = strdup(err);
    sf__worker_note("refused an actor: %s", err);
  }
  free(val); /* its references moved into the actor */
  free(pl);
  pthread_mutex_lock(&WA.mu);
  w->next = WA.list;
  WA.list = w;
  pthread_mutex_unlock(&WA.mu);
  pthread_t th;
  if (!pthread_create(&th, NULL, reply_main, w))
    pthread_detach(th);
}

static void w_call(const sf__frame *f) {
  wactor *w = w_find(f->u.actor_call.actor);
  uint64_t seq = f->u.actor_call.seq;
  char err[400] = "";
  if (!w || w->stop) {
    snprintf(err, sizeof err, "node %lld has no actor %llu", (long long)sf__node_id,
             (unsigned long long)f->u.actor_call.actor);
    w_result(f->u.actor_call.actor, seq ? seq : 1, 1, err, strlen(err));
    return;
  }
  witem *it = calloc(1, sizeof *it);
  if (!it)
    return;
  it->seq = seq;
  sf__buf_init(&it->out, NULL, 0);
  const uint8_t *p = f->u.actor_call.args.p;
  uint32_t n = f->u.actor_call.args.n, nl = 0;
  const sf_method_desc *md = NULL;
  if (!w->a)
    snprintf(err, sizeof err, "%s", w->error);
  else if (n < 5 || (memcpy(&nl, p, 4), nl > n - 5) || nl == 0 || p[4 + nl] > 3)
    snprintf(err, sizeof err, "malformed actor-call payload");
  else if ((md = sf__remote_find_method(f->u.actor_call.method, p + 4, nl, err, sizeof err))) {
    size_t cl = strlen(w->d->name);
    if (strncmp(md->name, w->d->name, cl) || md->name[cl] != '.') {
      snprintf(err, sizeof err, "'%s' is not a method of actor '%s'", md->name, w->d->name);
      md = NULL;
    }
  }
  if (md) {
    int32_t as = sf__value_size(md->args);
    void *args = calloc(1, as ? (size_t)as : 1);
    sf__reader rd = {p + 5 + nl, p + n};
    if (!args || (as && !sf__de_value(&rd, md->args, args)) || rd.p != rd.end) {
      if (args && as)
        sf_value_release(md->args, args);
      snprintf(err, sizeof err, "malformed arguments for '%s'", md->name);
    } else {
      it->md = md;
      it->f = sf__actor_post(w->a, md, args, p[4 + nl] & 1, p[4 + nl] & 2, &it->out);
    }
    free(args);
  }
  if (!it->f) {
    if (w->a)
      sf__worker_note("refused an actor call: %s", err);
    it->refused = strdup(err);
  }
  w_push(w, it);
}


static void w_stop(const sf__frame *f) {
  wactor *w = w_find(f->u.actor_stop.actor);
  if (!w)
    return;
  pthread_mutex_lock(&w->mu);
  w->stop = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->a)
    sf__actor_stop(w->a);
  if (w->ring)
    sf__group_ring_stop(w->ring); /* a member blocked in a collective returns */
}

static void w_frame(const sf__frame *f) {
  switch (f->type) {
  case SF__F_ACTOR_CREATE: w_create(f); break;
  case SF__F_ACTOR_CALL: w_call(f); break;
  case SF__F_ACTOR_STOP: w_stop(f); break;
  default: break;
  }
}

/* Actor frames waiting for the actor-frame thread, oldest first: each
 * one's own bytes (the loop's receive buffer moves on). */
typedef struct wframe {
  struct wframe *next;
  uint8_t *p;
  size_t n;
} wframe;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wframe *head, *tail;
  bool running;
} WQ = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *frames_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&WQ.mu);
    while (!WQ.head)
      pthread_cond_wait(&WQ.cv, &WQ.mu);
    wframe *q = WQ.head;
    WQ.head = q->next;
    if (!WQ.head)
      WQ.tail = NULL;
    pthread_mutex_unlock(&WQ.mu);
    sf__frame f;
    char err[128];
    if (sf__wire_decode(q->p, q->n, &f, err, sizeof err) > 0) /* it was valid on the loop */
      w_frame(&f);
    free(q->p);
    free(q);
  }
  return NULL;
}

void sf__ractor_worker_take(sf__conn *c) {
  wframe *q = calloc(1, sizeof *q);
  if (q)
    q->p = sf__conn_take(c, &q->n);
  if (!q || !q->p) {
    free(q);
    sf__worker_note("out of memory for an actor frame of %zu bytes; it is dropped", c->pending);
    return;
  }
  pthread_mutex_lock(&WQ.mu);
  if (WQ.tail)
    WQ.tail->next = q;
  else
    WQ.head = q;
  WQ.tail = q;
  pthread_t th;
  if (!WQ.running && !pthread_create(&th, NULL, frames_main, NULL)) {
    pthread_detach(th);
    WQ.running = true;
  }
  pthread_cond_signal(&WQ.cv);
  pthread_mutex_unlock(&WQ.mu);
}

