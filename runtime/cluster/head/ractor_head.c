/*
 * ractor_head.c — the head's side of actors and actor groups of a --nodes
 * run: placed on workers, called through frames, and restarted from their
 * checkpoints when a node is lost.
 *
 * Head.  sf_actor_spawn and sf_group_spawn (actor.c) offer every spawn made
 * by workflow main here.  When the class's state and init arguments can
 * travel (serial.c; no futures or actors inside), the actor is placed
 * on the live node with the most free
 * slots (placement.c keeps the slots; an actor holds max(1, @cpus) of them
 * for its lifetime; the head, node 0, is a candidate when it runs work,
 * and a chosen head keeps the actor local, as on one node).  An @gpus
 * actor goes only where a share of a GPU is free (best fit, placement.c) and
 * holds it with its slots; with no GPU in the run or none free, it stays
 * local (a spawn never waits).
 * A group is a gang: every member on a worker with a free slot (spread
 * first, several on one worker only when they must), or the whole group
 * stays on the head.  Each member of an @gpus group holds its own share,
 * placed as a lone @gpus actor's is; when the shares do not all fit, the
 * whole group stays on the head.  The head keeps the handle (an sf_actor whose
 * `remote` points here); every call is serialized at once, logged and sent
 * in an actor-call frame; the worker's answer (actor-result, keyed by the
 * actor's wire id and the call's sequence number) completes the call's
 * future, or its member slot of a g.all gather, through task.c
 * (sf__actor_complete), so failures read exactly as on one node.
 *
 * Key design choice: the head owns recovery, as it owns task retries.  It
 * keeps, per actor, the newest checkpoint the worker shipped (actor-state:
 * calls, g.all epoch, serialized state; also written to the checkpoint
 * folder with checkpoint.c so --resume finds it) and the log of calls made
 * since that checkpoint.  When the actor's node is lost and @restarts has
 * budget left, the actor is created again on another live worker from that
 * checkpoint (or from its init arguments when there is none), and every
 * logged call after the checkpoint is sent again, in order: results of
 * calls already delivered are dropped, the others complete their futures.
 * A call's sequence number is the actor's call count after it, which is
 * what checkpoints count too, so "after the checkpoint" is `seq > calls`.
 * Each incarnation has a fresh wire id, so nothing from an old one is ever
 * taken for the new one.  Without budget, or without a live worker, the
 * pending calls fail with a message naming the actor and the cause, and
 * so does every later call.
 *
 * Groups.  Members run their collectives over a TCP ring (ring.c) built
 * from the workers' data listeners, also between members on one worker
 * (correct first: loopback, not shared memory): the TCP-ring transport
 * of collective.c's interface (group_ring.c).  Checkpoints of
 * members are taken at g.all epochs; the head keeps the last few per
 * member, and a group whose member's node is lost restarts as a whole:
 * every member (also those on live nodes, which are stopped) is created
 * again from the newest epoch all members have, with a new ring id, and
 * each replays its calls after that epoch, so their collectives meet again.
 * A member's neighbours often see it die (a reset link) before the head
 * sees its control connection close, so a failure that a broken ring
 * caused (actor-result status 2) is held back until the loss arrives, or
 * for the heartbeat timeout plus a second, before it is delivered.  It is
 * held also when the group has no restarts left, so the call fails with
 * the node's loss, not with a neighbour's "closed the connection".
 *
 * --resume.  Actors are placed as in any run.  Each handle here is first
 * restored from the checkpoint folder as a local actor would be (a
 * group's members at their newest common epoch), and the worker's actor
 * is created from that state.  main's calls then go by the journal:
 * those the state already holds are answered from it and not sent; those
 * it answers that the state does not hold are sent muted, to rebuild the
 * rest of the state.
 *
 * The worker's side is ractor_worker.c; the frames' payloads are in
 * proto/proto.h.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "head.h"

#define GROUP_CKPTS 4 /* checkpoints kept per group member, newest first */

static void put_u32(sf__buf *b, uint32_t v) { sf__buf_put(b, (const char *)&v, 4); }
static void put_u64(sf__buf *b, uint64_t v) { sf__buf_put(b, (const char *)&v, 8); }
static void put_bytes(sf__buf *b, const void *p, uint32_t n) {
  put_u32(b, n);
  sf__buf_put(b, p, n);
}

/* ============================================================== head */

typedef struct rcall {
  struct rcall *next;
  uint64_t seq;           /* the actor's call count after this call */
  const sf_method_desc *md;
  uint8_t *payload;       /* name, flags, args: as sent */
  uint32_t n;
  bool delivered;
  char *held;             /* a failure held back: its group may restart */
  int64_t held_until;     /* ... then it is delivered (ms, monotonic) */
  sf__sink sink;
} rcall;

/* A checkpoint: its state p[0..n) lies inside b (the frame it arrived
 * in, or the file --resume read), shared with the file writer and the
 * send queues of restarts, never copied (docs/cluster.md, "Group
 * restart"). */
typedef struct ckpt {
  uint64_t calls, epoch;
  sf__shared *b;
  const uint8_t *p;
  uint32_t n;
} ckpt;

typedef struct rgroup rgroup;

struct sf__ractor {
  struct sf__ractor *next; /* RA.list */
  sf_actor *a;             /* the head's handle; valid while calls are pending */
  const sf_actor_desc *d;
  int64_t id, rank, size;
  uint64_t key;            /* random streams: the actor's identity (actor.c) */
  uint64_t wid;            /* wire id of the running incarnation */
  int node, need;
  sf__gpu_hold gpu;        /* @gpus: held with the slots, for its lifetime */
  int restarts_left;
  uint64_t seq;            /* calls made */
  sf__shared *init;        /* serialized init arguments, or NULL */
  ckpt ck[GROUP_CKPTS];    /* newest first; ck[0] alone for a single actor */
  int nck;
  rcall *log, *log_tail;   /* calls a restart may replay, oldest first */
  uint64_t trimmed;        /* calls up to this one are no longer logged */
  rcall *undelivered;      /* a hint: the oldest call not delivered, or NULL */
  char *dead;              /* why calls fail now */
  rgroup *g;
};

struct rgroup {
  int64_t n, alive;        /* members, members not dropped */
  struct sf__ractor **m;
  uint64_t ring;           /* ring id of the running incarnation */
  int restarts_left;
};

static struct {
  pthread_mutex_t mu;
  struct sf__ractor *list;
  uint64_t next_wid, next_ring;
} RA = {.mu = PTHREAD_MUTEX_INITIALIZER};

typedef struct sf__ractor ractor;

/* A call whose result must be delivered outside RA.mu. */
typedef struct done {
  struct done *next;
  sf_actor *a;
  const sf_method_desc *md;
  sf__sink sink;
  char *why;
} done;

static void done_add(done **l, sf_actor *a, const sf_method_desc *md, const sf__sink *s,
                     const char *why) {
  done *d = calloc(1, sizeof *d);
  if (!d)
    return;
  *d = (done){*l, a, md, *s, strdup(why)};
  *l = d;
}

/* Fails each call of the list (the actor's references are given back). */
static void done_fail(done *l) {
  while (l) {
    done *nx = l->next;
    sf__actor_complete(l->a, l->md, &l->sink, NULL, l->why ? l->why : "failed");
    sf_release(l->a);
    free(l->why);
    free(l);
    l = nx;
  }
}

static bool may_restart(ractor *r) {
  return (r->g ? r->g->restarts_left : r->restarts_left) > 0;
}

static void rcall_free(rcall *c) {
  free(c->held);
  free(c->payload);
  free(c);
}

static void ckpt_free(ckpt *c) {
  sf__shared_unref(c->b);
  *c = (ckpt){0};
}

static ractor *find_wid(uint64_t wid) {
  for (ractor *r = RA.list; r; r = r->next)
    if (r->wid == wid)
      return r;
  return NULL;
}

/* ----------------------------------------------------------- frames */

/* Bodies from this size on are sent from where they lie; smaller ones are
 * copied into the frame, which costs less than a piece of their own. */
#define BODY_INPLACE ((size_t)64 << 10)

/* Queues r's create frame (from `from`, or its init arguments) for r->node,
 * then the bytes of more (the calls it replays), as one run.  The state
 * goes from where it lies (sf__cluster_send_parts): a restart runs on the
 * control thread, and copying two fine-tuned BERT members' 280 MB states
 * there (three times each, as encoding once did) kept it from the
 * heartbeats for over 3 s on two loaded cores.  A lost node: its hook
 * restarts the actor. */
static void send_create(ractor *r, const ckpt *from, const sf__wbuf *more) {
  sf__buf b;
  char store[512];
  sf__buf_init(&b, store, sizeof store);
  uint32_t nl = (uint32_t)strlen(r->d->name);
  put_u32(&b, nl);
  sf__buf_put(&b, r->d->name, nl);
  put_u64(&b, (uint64_t)r->id);
  put_u64(&b, r->key);
  put_u32(&b, (uint32_t)r->rank);
  put_u32(&b, (uint32_t)r->size);
  put_u64(&b, r->g ? r->g->ring : 0);
  put_u64(&b, from ? from->calls : 0);
  put_u64(&b, from ? from->epoch : 0);
  sf__buf_put(&b, from ? "\1" : "\0", 1);
  sf__shared *body = from ? from->b : r->init;
  const uint8_t *bp = from ? from->p : r->init ? r->init->p : NULL;
  uint32_t bn = from ? from->n : r->init ? (uint32_t)r->init->n : 0;
  put_u32(&b, bn); /* the body follows the frame's start, then the peers */
  sf__wbuf peers = {0};
  for (int64_t i = 0; r->g && i < r->g->n; i++) {
    char addr[64] = "0.0.0.0";
    uint16_t port = 1;
    (void)sf__cluster_data_addr(r->g->m[i]->node, addr, sizeof addr, &port);
    sf__wire_put_peer(&peers, addr, port);
  }
  sf__buf tail;
  char tstore[512];
  sf__buf_init(&tail, tstore, sizeof tstore);
  put_bytes(&tail, peers.p, (uint32_t)peers.n);
  sf__wbuf_free(&peers);
  sf__frame f = {.type = SF__F_ACTOR_CREATE};
  f.u.actor_create.actor = r->wid;
  f.u.actor_create.cls = (uint32_t)(int32_t)((const char *)r->d - (const char *)&sf_program_desc);
  f.u.actor_create.args = (sf__bytes){(const uint8_t *)b.data, (uint32_t)b.len};
  sf__wbuf head = {0};
  if (!sf__wire_encode_open(&head, &f, (size_t)bn + tail.len)) {
    sf__part parts[4] = {{head.p, head.n, NULL},
                         {bp, bn, bn >= BODY_INPLACE ? body : NULL},
                         {tail.data, tail.len, NULL},
                         {more ? more->p : NULL, more ? more->n : 0, NULL}};
    (void)sf__cluster_send_parts(r->node, parts, 4);
  }
  sf__wbuf_free(&head);
  sf__buf_free(&tail);
  sf__buf_free(&b);
}

/* mute: a replay of a delivered call (flags bit 2): its lines were
 * printed when it first ran. */
static void encode_call(sf__wbuf *out, ractor *r, rcall *c, bool mute) {
  uint32_t nl;
  memcpy(&nl, c->payload, 4);
  c->payload[4 + nl] = (uint8_t)((c->payload[4 + nl] & 1) | (mute ? 2 : 0));
  sf__frame f = {.type = SF__F_ACTOR_CALL};
  f.u.actor_call.actor = r->wid;
  f.u.actor_call.seq = c->seq;
  f.u.actor_call.method =
      (uint32_t)(int32_t)((const char *)c->md - (const char *)&sf_program_desc);
  f.u.actor_call.args = (sf__bytes){c->payload, c->n};
  sf__wire_encode(out, &f);
}

static void send_buf(int node, sf__wbuf *b) {
  if (b->n)
    (void)sf__cluster_send(node, b->p, b->n); /* a lost node: its hook restarts */
  sf__wbuf_free(b);
}

/* ------------------------------------------------------------ spawn */

/* A gang: every member on a worker with room, all or none.  Each member
 * goes to the worker with the most free slots at that point, so members
 * spread first and share a worker only when they must. */
/* Places every member of a gang on workers (never the head), each with
 * its own share of a GPU when gpu is set (an @gpus group); all or none. */
static bool place_gang(int *nodes, int64_t n, int need, sf__gpu_hold *const *gpu) {
  for (int64_t i = 0; i < n; i++) {
    nodes[i] = sf__remote_place(need, gpu ? gpu[i] : NULL, false, NULL);
    if (nodes[i] < 0) {
      for (int64_t k = 0; k < i; k++)
        sf__remote_unplace(nodes[k], need, gpu ? gpu[k] : NULL);
      return false;
    }
  }
  return true;
}

static void restart_one(ractor *r, int node, const char *why, done **fails);
static void restart_group(rgroup *g, int node, const char *why, done **fails);

static bool offset_ok(const void *p) {
  intptr_t off = (const char *)p - (const char *)&sf_program_desc;
  return off >= INT32_MIN && off <= INT32_MAX;
}

/* --resume: each member's handle here is restored from its newest
 * checkpoint (a group's members from the newest epoch they all have, as
 * actor.c does for local actors), and the state is serialized into
 * out[i] for the create frame (out[i].b NULL: from init).  The handle's
 * call counts then tell the journal which of main's calls the state
 * already holds (sf__ractor_call). */
static void restore_handles(sf_actor **members, int64_t n, const sf_actor_desc *d, ckpt *out) {
  if (n > 1) {
    sf__checkpoint_plan_group(d, sf__actor_id(members[0]), n);
    int64_t e = sf__checkpoint_group_epoch(d, sf__actor_id(members[0]));
    for (int64_t i = 0; i < n; i++)
      sf__actor_set_restore_epoch(members[i], e);
  }
  for (int64_t i = 0; i < n; i++) {
    out[i] = (ckpt){0};
    if (!sf__checkpoint_restore(members[i]))
      continue;
    sf__buf b;
    sf__buf_init(&b, NULL, 0);
    if (sf__value_size(d->state))
      sf__ser_value(&b, d->state, sf__actor_state(members[i]));
    out[i].calls = (uint64_t)sf__actor_calls(members[i]);
    out[i].epoch = (uint64_t)sf__actor_epochs(members[i]);
    out[i].b = sf__shared_copy(b.data, b.len); /* main's thread: a copy is no harm */
    if (out[i].b) {
      out[i].p = out[i].b->p;
      out[i].n = (uint32_t)b.len;
    }
    sf__buf_free(&b);
  }
}

bool sf__ractor_spawn(sf_actor **members, int64_t n, void *args) {
  sf_actor *a0 = members[0];
  const sf_actor_desc *d = sf__actor_desc(a0);
  const sf_type *it = d->init ? d->init->args : NULL;
  if (sf__task_depth > 0 || sf__actor_id(a0) < 0 || n > SF__GROUP_MAX || !sf__remote_active())
    return false;
  /* @gpus: a node with a free share holds it for the actor's lifetime;
   * with no GPU in the run, or none free now, the actor stays here. */
  sf__gpu_hold gpu = {d->gpus > 0 ? sf__remote_gpu_share(d->gpus) : 0, -1, 0, false};
  if (d->gpus > 0 && !gpu.share)
    return false;
  if (!sf__remote_portable(d->state) || !sf__remote_portable(it) || !offset_ok(d))
    return false;
  int need = d->cpus > 1 ? (int)ceil(d->cpus) : 1;
  int nodes[SF__GROUP_MAX];
  sf__gpu_hold holds[SF__GROUP_MAX], *hp[SF__GROUP_MAX];
  for (int64_t i = 0; i < n; i++) {
    holds[i] = gpu;
    hp[i] = &holds[i];
  }
  if (n == 1) {
    nodes[0] = sf__remote_place(need, &holds[0], true, NULL);
    if (nodes[0] <= 0) /* the head (it keeps the slots) or nowhere: local */
      return false;
  } else if (!place_gang(nodes, n, need, gpu.share ? hp : NULL)) {
    return false; /* an @gpus group with too few free shares stays here whole */
  }
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  if (sf__value_size(it))
    sf__ser_value(&b, it, args);
  sf_value_release(it, args);
  ckpt *restored = sf__options.resume ? calloc((size_t)n, sizeof *restored) : NULL;
  if (restored)
    restore_handles(members, n, d, restored);
  rgroup *g = NULL;
  if (n > 1) {
    g = calloc(1, sizeof *g);
    g->m = calloc((size_t)n, sizeof *g->m);
    g->n = g->alive = n;
    g->restarts_left = d->restarts;
  }
  pthread_mutex_lock(&RA.mu);
  if (g)
    g->ring = ++RA.next_ring;
  for (int64_t i = 0; i < n; i++) {
    ractor *r = calloc(1, sizeof *r);
    r->a = members[i];
    r->d = d;
    r->id = sf__actor_id(members[i]);
    r->key = sf__actor_key(members[i]);
    r->rank = i;
    r->size = n;
    r->node = nodes[i];
    r->need = need;
    r->gpu = holds[i];
    r->restarts_left = d->restarts;
    r->wid = ++RA.next_wid;
    r->init = b.len ? sf__shared_copy(b.data, b.len) : NULL;
    if (restored && restored[i].b) { /* starts from its checkpoint */
      r->ck[0] = restored[i];
      r->nck = 1;
      r->trimmed = restored[i].calls; /* main's calls up to it are not sent */
    }
    r->g = g;
    if (g)
      g->m[i] = r;
    r->next = RA.list;
    RA.list = r;
    sf__actor_set_remote(members[i], r);
  }
  /* Frames after every member exists: the peer lists name them all. */
  for (int64_t i = 0; i < n; i++) {
    ractor *r = g ? g->m[i] : RA.list;
    send_create(r, r->nck ? &r->ck[0] : NULL, NULL);
  }
  if (sf__options.cluster_log) { /* where it went: tests/launch checks the ranks hold it */
    char where[16 * SF__GROUP_MAX / 4] = "";
    for (int64_t i = 0; i < n && strlen(where) + 16 < sizeof where; i++)
      snprintf(where + strlen(where), sizeof where - strlen(where), "%s%d", i ? "," : "",
               nodes[i]);
    sf__cluster_note("sflow: %s '%s' placed on node%s %s", n > 1 ? "group" : "actor", d->name,
                     n > 1 ? "s" : "", where);
  }
  /* A node lost between placement and now was handled before this actor
   * was in the list: handle it here (the hook skips actors moved since). */
  done *fails = NULL;
  for (int64_t i = 0; i < n; i++) {
    ractor *r = g ? g->m[i] : RA.list;
    const char *why = r->node > 0 ? sf__remote_lost_why(r->node) : NULL;
    if (why && g) {
      restart_group(g, r->node, why, &fails);
      break;
    }
    if (why)
      restart_one(r, r->node, why, &fails);
  }
  pthread_mutex_unlock(&RA.mu);
  done_fail(fails);
  sf__buf_free(&b);
  free(restored); /* the states moved into the ractors */
  return true;
}

/* ------------------------------------------------------------- calls */

/* Completes a call of main's from the journal (its value and the lines
 * it printed), without journaling it again. */
static void answer_from_journal(sf_actor *a, const sf_method_desc *md, const sf__sink *sink) {
  int32_t rsize = sf__value_size(md->result);
  _Alignas(16) unsigned char rbuf[256];
  void *res = rsize <= (int32_t)sizeof rbuf ? rbuf : calloc(1, (size_t)rsize);
  memset(res, 0, (size_t)rsize);
  sf__journal_call_result(a, sink->seq, md, res);
  sf__sink s = *sink;
  s.seq = -1; /* answered, not journaled again */
  sf__actor_complete(a, md, &s, res, NULL);
  if (res != rbuf)
    free(res);
}

void sf__ractor_call(ractor *r, const sf_method_desc *md, void *args, bool all,
                     const sf__sink *sink) {
  sf_actor *a = r->a;
  sf_retain(a); /* until the call is complete */
  if (!sf__remote_portable(md->args) || !sf__remote_portable(md->result) || !offset_ok(md)) {
    sf_value_release(md->args, args);
    char why[256];
    snprintf(why, sizeof why,
             "its arguments or result cannot travel to node %d, where actor '%s' runs "
             "(futures or actors inside)", r->node, r->d->name);
    sf__actor_complete(a, md, sink, NULL, why);
    sf_release(a);
    return;
  }
  /* --resume: a call the restored state holds is answered from the
   * journal and not sent; one the journal answers but the state does not
   * hold runs on the worker, muted, to rebuild the state, and its answer
   * (and output) comes from the journal, as for a local actor. */
  int mode = sf__options.resume && sink->seq >= 0 ? sf__journal_call_mode(a, sink->seq)
                                                  : SF__REPLAY_LIVE;
  if (mode == SF__REPLAY_SKIP) {
    sf_value_release(md->args, args);
    pthread_mutex_lock(&RA.mu);
    ++r->seq;
    pthread_mutex_unlock(&RA.mu);
    answer_from_journal(a, md, sink);
    sf_release(a);
    return;
  }
  rcall *c = calloc(1, sizeof *c);
  sf__buf b;
  char store[512];
  sf__buf_init(&b, store, sizeof store);
  uint32_t nl = (uint32_t)strlen(md->name);
  put_u32(&b, nl);
  sf__buf_put(&b, md->name, nl);
  sf__buf_put(&b, all ? "\1" : "\0", 1);
  if (sf__value_size(md->args))
    sf__ser_value(&b, md->args, args);
  sf_value_release(md->args, args);
  c->payload = malloc(b.len);
  memcpy(c->payload, b.data, b.len);
  c->n = (uint32_t)b.len;
  sf__buf_free(&b);
  c->md = md;
  c->sink = *sink;
  pthread_mutex_lock(&RA.mu);
  if (r->dead) {
    char *why = strdup(r->dead);
    pthread_mutex_unlock(&RA.mu);
    rcall_free(c);
    sf__actor_complete(a, md, sink, NULL, why ? why : "the actor is lost");
    free(why);
    sf_release(a);
    return;
  }
  c->seq = ++r->seq;
  c->sink.calls = (int64_t)c->seq;
  c->delivered = mode == SF__REPLAY_RERUN; /* the journal answers it, below */
  if (r->log_tail)
    r->log_tail->next = c;
  else
    r->log = c;
  r->log_tail = c;
  if (!r->undelivered && !c->delivered)
    r->undelivered = c;
  sf__wbuf out = {0};
  encode_call(&out, r, c, c->delivered);
  send_buf(r->node, &out);
  pthread_mutex_unlock(&RA.mu);
  if (mode == SF__REPLAY_RERUN) {
    answer_from_journal(a, md, sink);
    sf_release(a);
  }
}

/* Drops delivered calls a restart will not replay: all of them when no
 * restart can happen, else those at or before the oldest checkpoint kept.
 * Results come in call order, so the delivered calls are a prefix of the
 * log and only its front is looked at. */
static void trim_log(ractor *r) {
  uint64_t upto = UINT64_MAX;
  if (may_restart(r))
    upto = r->nck ? r->ck[r->nck - 1].calls : 0;
  while (r->log && r->log->delivered && r->log->seq <= upto) {
    rcall *c = r->log;
    r->log = c->next;
    r->trimmed = c->seq;
    if (r->undelivered == c)
      r->undelivered = NULL;
    rcall_free(c);
  }
  if (!r->log)
    r->log_tail = NULL;
}

/* The logged call with sequence number seq: usually the first one not
 * delivered yet (r->undelivered), else a search (replays after a restart). */
static rcall *find_call(ractor *r, uint64_t seq) {
  if (r->undelivered && r->undelivered->seq == seq)
    return r->undelivered;
  rcall *c = r->log;
  while (c && c->seq != seq)
    c = c->next;
  return c;
}

/* Delivers held failures whose group did not restart in time. */
static void *holder_main(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {0, 200 * 1000000};
    nanosleep(&ts, NULL);
    done *fails = NULL;
    int64_t now = sf__now_ms();
    pthread_mutex_lock(&RA.mu);
    for (ractor *r = RA.list; r; r = r->next) {
      bool any = false;
      for (rcall *c = r->log; c; c = c->next)
        if (c->held && !c->delivered && now >= c->held_until) {
          done_add(&fails, r->a, c->md, &c->sink, c->held);
          c->delivered = true;
          if (r->undelivered == c)
            r->undelivered = c->next;
          any = true;
        }
      if (any)
        trim_log(r);
    }
    pthread_mutex_unlock(&RA.mu);
    done_fail(fails);
  }
  return NULL;
}

/* Caller holds RA.mu. */
static void start_holder(void) {
  static bool started;
  pthread_t th;
  if (!started && !pthread_create(&th, NULL, holder_main, NULL)) {
    pthread_detach(th);
    started = true;
  }
}

static void on_result(int node, const sf__frame *f) {
  pthread_mutex_lock(&RA.mu);
  ractor *r = find_wid(f->u.actor_result.actor);
  rcall *c = r && r->node == node ? find_call(r, f->u.actor_result.seq) : NULL;
  if (!c || c->delivered || c->held) { /* a replay, or a stale incarnation */
    pthread_mutex_unlock(&RA.mu);
    return;
  }
  if (f->u.actor_result.status == 2 && r->g) {
    /* The member failed in a collective because its ring broke: most
     * likely a member's node died, and its loss may not have reached us
     * yet (the neighbours' sockets can tell before the control
     * connection does).  Wait for the loss, which restarts the group and
     * reruns this call, or (no restarts left) fails it with the loss as
     * its cause rather than the ring's symptom; without one, the failure
     * is delivered. */
    c->held = strndup((const char *)f->u.actor_result.value.p, f->u.actor_result.value.n);
    c->held_until = sf__now_ms() + SF__HEARTBEAT_TIMEOUT_MS + 1000;
    start_holder();
    pthread_mutex_unlock(&RA.mu);
    return;
  }
  c->delivered = true;
  if (r->undelivered == c)
    r->undelivered = c->next;
  sf__sink sink = c->sink;
  const sf_method_desc *md = c->md;
  sf_actor *a = r->a;
  trim_log(r);
  pthread_mutex_unlock(&RA.mu);

  int32_t rsize = sf__value_size(md->result);
  _Alignas(16) unsigned char rbuf[256];
  void *res = rsize <= (int32_t)sizeof rbuf ? rbuf : calloc(1, (size_t)rsize);
  memset(res, 0, (size_t)rsize);
  char why[SF__ERROR_MAX + 64];
  bool good = f->u.actor_result.status == 0;
  if (good) {
    sf__reader rd = {f->u.actor_result.value.p,
                     f->u.actor_result.value.p + f->u.actor_result.value.n};
    if (rsize && (!sf__de_value(&rd, md->result, res) || rd.p != rd.end)) {
      sf_value_release(md->result, res);
      snprintf(why, sizeof why, "node %d sent a malformed result", node);
      good = false;
    }
  } else {
    snprintf(why, sizeof why, "%.*s", (int)f->u.actor_result.value.n,
             (const char *)f->u.actor_result.value.p);
  }
  /* What the call printed, journaled as the head printed it: --resume
   * prints it again for a call the journal answers. */
  sf__buf pb;
  char store[512];
  sf__buf_init(&pb, store, sizeof store);
  if (good && f->u.actor_result.output.n && sink.seq >= 0)
    sf__remote_printed_as(node, (const char *)f->u.actor_result.output.p,
                          f->u.actor_result.output.n, &pb);
  sf__actor_complete_drop(a, md, &sink, good ? res : NULL, good ? NULL : why, pb.data, pb.len);
  sf__buf_free(&pb);
  if (res != rbuf)
    free(res);
}

/* Checkpoint files are written by one thread, not the control thread (an
 * fsync must not hold up heartbeats and results of every node); a newer
 * state of a single actor replaces its older one still waiting.  A group
 * member's never does: --resume needs an epoch every member has on disk,
 * and a member whose epoch 2 gave way to its epoch 4 in the queue, while
 * another member's node died before shipping its epoch 4, would leave the
 * group none (tests/cluster group_resume under load).  Its waiting files
 * are only trimmed to the newest the folder keeps (@checkpoint(keep)),
 * since checkpoint.c would delete older ones as soon as they are written. */
typedef struct wfile {
  struct wfile *next;
  const sf_actor_desc *d;
  int64_t id, rank;
  ckpt c; /* a copy */
} wfile;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_cond_t idle;    /* the queue is empty and nothing is being written */
  wfile *head, *tail;
  bool running, busy;
} WF = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
        .idle = PTHREAD_COND_INITIALIZER};

static void *writer_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&WF.mu);
    while (!WF.head)
      pthread_cond_wait(&WF.cv, &WF.mu);
    wfile *w = WF.head;
    WF.head = w->next;
    if (!WF.head)
      WF.tail = NULL;
    WF.busy = true;
    pthread_mutex_unlock(&WF.mu);
    int64_t slow = sf__fault_value("head-checkpoint-slow"); /* tests: a slow disk, in ms */
    if (slow > 0)
      nanosleep(&(struct timespec){slow / 1000, slow % 1000 * 1000000}, NULL);
    sf__checkpoint_write_state(w->d, w->id, w->rank, (int64_t)w->c.calls, (int64_t)w->c.epoch,
                               w->c.p, w->c.n);
    ckpt_free(&w->c);
    free(w);
    pthread_mutex_lock(&WF.mu);
    WF.busy = false;
    if (!WF.head)
      pthread_cond_broadcast(&WF.idle);
    pthread_mutex_unlock(&WF.mu);
  }
  return NULL;
}

/* At exit (also a failed run's): the shipped checkpoints reach the disk,
 * within a bound, so --resume starts from the newest. */
static void writer_drain(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  pthread_mutex_lock(&WF.mu);
  while ((WF.head || WF.busy) && pthread_cond_timedwait(&WF.idle, &WF.mu, &ts) == 0)
    ;
  pthread_mutex_unlock(&WF.mu);
}

/* The writer shares the state's bytes with the actor's list (a
 * reference, not a copy: this runs on the control thread). */
static void queue_file(const sf_actor_desc *d, int64_t id, int64_t rank, bool member,
                       const ckpt *c) {
  ckpt ref = {c->calls, c->epoch, sf__shared_ref(c->b), c->p, c->n};
  int keep = d->checkpoint_keep > 0 ? d->checkpoint_keep : 3; /* checkpoint.c's KEEP */
  pthread_mutex_lock(&WF.mu);
  int waiting = 0;
  wfile *oldest = NULL;
  for (wfile *w = WF.head; w; w = w->next)
    if (w->d == d && w->id == id && w->rank == rank) {
      if (!member) {
        ckpt_free(&w->c);
        w->c = ref;
        pthread_mutex_unlock(&WF.mu);
        return;
      }
      if (!oldest)
        oldest = w;
      waiting++;
    }
  if (oldest && waiting >= keep) { /* the oldest waiting one would be deleted at once */
    wfile **pp = &WF.head, *prev = NULL;
    while (*pp != oldest) {
      prev = *pp;
      pp = &(*pp)->next;
    }
    *pp = oldest->next;
    if (WF.tail == oldest)
      WF.tail = prev;
    ckpt_free(&oldest->c);
    free(oldest);
  }
  wfile *w = calloc(1, sizeof *w);
  if (w) {
    *w = (wfile){NULL, d, id, rank, ref};
    if (WF.tail)
      WF.tail->next = w;
    else
      WF.head = w;
    WF.tail = w;
    pthread_t th;
    if (!WF.running && !pthread_create(&th, NULL, writer_main, NULL)) {
      pthread_detach(th);
      WF.running = true;
      atexit(writer_drain);
    }
    pthread_cond_signal(&WF.cv);
  } else {
    ckpt_free(&ref);
  }
  pthread_mutex_unlock(&WF.mu);
}

void sf__ractor_on_state(int node, const sf__frame *f, sf__shared *bytes) {
  pthread_mutex_lock(&RA.mu);
  ractor *r = find_wid(f->u.actor_state.actor);
  if (!r || r->node != node || (r->nck && f->u.actor_state.calls <= r->ck[0].calls) ||
      f->u.actor_state.calls > r->seq) {
    pthread_mutex_unlock(&RA.mu);
    return;
  }
  /* Kept where it arrived (control.c hands the frame's buffer over). */
  ckpt c = {f->u.actor_state.calls, f->u.actor_state.epoch, sf__shared_ref(bytes),
            f->u.actor_state.state.p, f->u.actor_state.state.n};
  /* A single actor needs only its newest; a member keeps a few, for the
   * epoch every member has. */
  int keep = r->g ? GROUP_CKPTS : 1;
  if (r->nck == keep)
    ckpt_free(&r->ck[--r->nck]);
  memmove(&r->ck[1], &r->ck[0], (size_t)r->nck * sizeof r->ck[0]);
  r->ck[0] = c;
  r->nck++;
  trim_log(r);
  /* The same file a single-node run writes, for --resume. */
  queue_file(r->d, r->id, r->rank, r->g != NULL, &c);
  pthread_mutex_unlock(&RA.mu);
}

void sf__ractor_on_frame(int node, const sf__frame *f) {
  if (f->type == SF__F_ACTOR_RESULT)
    on_result(node, f);
}

/* ---------------------------------------------------------- recovery */

/* The actor can no longer run: every undelivered call fails with why,
 * and so will every later one.  Caller holds RA.mu. */
static void kill_actor(ractor *r, const char *why, done **fails) {
  free(r->dead);
  r->dead = strdup(why);
  for (rcall *c = r->log; c;) {
    rcall *nx = c->next;
    if (!c->delivered)
      done_add(fails, r->a, c->md, &c->sink, why);
    rcall_free(c);
    c = nx;
  }
  r->log = r->log_tail = r->undelivered = NULL;
  if (r->node >= 0)
    sf__remote_unplace(r->node, r->need, &r->gpu);
  r->node = -1;
  r->wid = 0;
}

/* Sends the actor's create frame (from `from`, or its init) and every
 * logged call after it, in order, to r->node.  Caller holds RA.mu. */
static void relaunch(ractor *r, const ckpt *from) {
  r->wid = ++RA.next_wid;
  sf__wbuf out = {0};
  uint64_t after = from ? from->calls : 0;
  for (rcall *c = r->log; c; c = c->next) {
    if (c->seq <= after)
      continue; /* a held failure the checkpoint is past: delivered in time */
    free(c->held); /* it runs again now */
    c->held = NULL;
    encode_call(&out, r, c, c->delivered);
  }
  send_create(r, from, &out);
  sf__wbuf_free(&out);
}

static void lost_why(char *out, size_t n, ractor *r, int node, const char *why) {
  snprintf(out, n, "actor '%s'%s lost with node %d (%s)", r->d->name,
           r->g ? " (a group member)" : "", node, why);
}

static void restart_one(ractor *r, int node, const char *why, done **fails) {
  char cause[768];
  lost_why(cause, sizeof cause, r, node, why);
  sf__remote_unplace(node, r->need, &r->gpu);
  r->node = -1;
  if (r->restarts_left <= 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s; no restarts left (@restarts(%d))", cause, r->d->restarts);
    kill_actor(r, msg, fails);
    return;
  }
  int to = sf__remote_place(r->need, &r->gpu, false, NULL);
  if (to < 0) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s; no live node can take it", cause);
    kill_actor(r, msg, fails);
    return;
  }
  r->restarts_left--;
  r->node = to;
  const ckpt *from = r->nck ? &r->ck[0] : NULL;
  if (from)
    sf__notice("%s; restarted on node %d from its checkpoint after call %" PRIu64
               " (%d %s left)", cause, to, from->calls, r->restarts_left,
               sf__plural(r->restarts_left, "restart", "restarts"));
  else
    sf__notice("%s; restarted on node %d from init (%d %s left)", cause, to,
               r->restarts_left, sf__plural(r->restarts_left, "restart", "restarts"));
  relaunch(r, from);
}

/* The newest epoch every member has a checkpoint for, or -1 (none: all
 * restart from init). */
static int64_t common_epoch(rgroup *g) {
  ractor *m0 = g->m[0];
  for (int i = 0; i < m0->nck; i++) {
    uint64_t e = m0->ck[i].epoch;
    bool all = true;
    for (int64_t k = 1; k < g->n && all; k++) {
      bool has = false;
      for (int j = 0; j < g->m[k]->nck; j++)
        has |= g->m[k]->ck[j].epoch == e;
      all = has;
    }
    if (all)
      return (int64_t)e;
  }
  return -1;
}

static const ckpt *ckpt_at(ractor *r, int64_t epoch) {
  for (int j = 0; epoch >= 0 && j < r->nck; j++)
    if ((int64_t)r->ck[j].epoch == epoch)
      return &r->ck[j];
  return NULL;
}

/* A member's node is lost: the whole group restarts, every member on its
 * own live worker, from the newest common epoch, with a new ring. */
static void restart_group(rgroup *g, int node, const char *why, done **fails) {
  char cause[768];
  ractor *lost = NULL;
  for (int64_t i = 0; i < g->n; i++) {
    if (!g->m[i]) { /* the group is being dropped: nothing waits for it */
      for (int64_t k = 0; k < g->n; k++)
        if (g->m[k])
          kill_actor(g->m[k], "the group was dropped", fails);
      return;
    }
    if (g->m[i]->node == node)
      lost = g->m[i];
  }
  lost_why(cause, sizeof cause, lost, node, why);
  /* Stop the members on live nodes and give back every slot. */
  for (int64_t i = 0; i < g->n; i++) {
    ractor *r = g->m[i];
    if (r->node > 0 && r->node != node) {
      sf__frame f = {.type = SF__F_ACTOR_STOP};
      f.u.actor_stop.actor = r->wid;
      sf__wbuf out = {0};
      sf__wire_encode(&out, &f);
      send_buf(r->node, &out);
    }
    if (r->node >= 0)
      sf__remote_unplace(r->node, r->need, &r->gpu);
    r->node = -1;
  }
  char msg[1024] = "";
  int64_t epoch = common_epoch(g);
  if (g->restarts_left <= 0)
    snprintf(msg, sizeof msg, "%s; no restarts left for the group (@restarts(%d))", cause,
             lost->d->restarts);
  /* Members that ran ahead without collectives may have dropped the calls
   * a restart from that epoch needs: then the group cannot be rebuilt. */
  for (int64_t i = 0; i < g->n && !msg[0]; i++) {
    const ckpt *from = ckpt_at(g->m[i], epoch);
    if (g->m[i]->trimmed > (from ? from->calls : 0))
      snprintf(msg, sizeof msg, "%s; member %" PRId64 " has no checkpoint at the group's newest "
               "common epoch any more, so the group cannot restart", cause, i);
  }
  int nodes[SF__GROUP_MAX];
  sf__gpu_hold *hp[SF__GROUP_MAX];
  for (int64_t i = 0; i < g->n; i++)
    hp[i] = &g->m[i]->gpu;
  if (!msg[0] && !place_gang(nodes, g->n, lost->need, lost->gpu.share ? hp : NULL))
    snprintf(msg, sizeof msg, "%s; not enough free slots%s on live workers to restart the group "
             "of %" PRId64, cause, lost->gpu.share ? " and GPU shares" : "", g->n);
  if (msg[0]) {
    for (int64_t i = 0; i < g->n; i++)
      kill_actor(g->m[i], msg, fails);
    return;
  }
  g->restarts_left--;
  g->ring = ++RA.next_ring;
  for (int64_t i = 0; i < g->n; i++)
    g->m[i]->node = nodes[i];
  sf__notice("%s; the group of %" PRId64 " restarted %s (%d %s left)", cause, g->n,
             epoch >= 0 ? "from its common checkpoint" : "from init", g->restarts_left,
             sf__plural(g->restarts_left, "restart", "restarts"));
  for (int64_t i = 0; i < g->n; i++)
    relaunch(g->m[i], ckpt_at(g->m[i], epoch));
}

void sf__ractor_node_lost(int node, const char *why) {
  done *fails = NULL;
  pthread_mutex_lock(&RA.mu);
  for (ractor *r = RA.list; r; r = r->next) {
    if (r->node != node || r->dead)
      continue;
    if (r->g)
      restart_group(r->g, node, why, &fails);
    else
      restart_one(r, node, why, &fails);
  }
  pthread_mutex_unlock(&RA.mu);
  done_fail(fails);
}

void sf__ractor_drop(ractor *r) {
  pthread_mutex_lock(&RA.mu);
  for (ractor **p = &RA.list; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  if (r->node > 0) {
    sf__frame f = {.type = SF__F_ACTOR_STOP};
    f.u.actor_stop.actor = r->wid;
    sf__wbuf out = {0};
    sf__wire_encode(&out, &f);
    send_buf(r->node, &out);
    sf__remote_unplace(r->node, r->need, &r->gpu);
  }
  /* Only delivered calls are left: each pending one holds the handle. */
  for (rcall *c = r->log; c;) {
    rcall *nx = c->next;
    rcall_free(c);
    c = nx;
  }
  for (int i = 0; i < r->nck; i++)
    ckpt_free(&r->ck[i]);
  rgroup *g = r->g;
  if (g) {
    for (int64_t i = 0; i < g->n; i++)
      if (g->m[i] == r)
        g->m[i] = NULL;
    if (--g->alive == 0) {
      free(g->m);
      free(g);
    }
  }
  pthread_mutex_unlock(&RA.mu);
  sf__shared_unref(r->init);
  free(r->dead);
  free(r);
}

