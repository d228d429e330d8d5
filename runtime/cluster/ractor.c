/*
 * ractor.c — actors and actor groups of a --nodes run, placed on workers,
 * and restarted from their checkpoints when a node is lost.
 *
 * Head.  sf_actor_spawn and sf_group_spawn (task.c) offer every spawn made
 * by workflow main here.  When the class's state and init arguments can
 * travel (serial.c; no futures or actors inside), the actor is placed
 * on the live node with the most free
 * slots (remote.c keeps the slots; an actor holds max(1, @cpus) of them
 * for its lifetime; the head, node 0, is a candidate when it runs work,
 * and a chosen head keeps the actor local, as on one node).  An @gpus
 * actor goes only where a share of a GPU is free (best fit, remote.c) and
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
 * (correct first: loopback, not shared memory), behind
 * collective.c's sf__comm_ops (see "ring transport" below).  Checkpoints of
 * members are taken at g.all epochs; the head keeps the last few per
 * member, and a group whose member's node is lost restarts as a whole:
 * every member (also those on live nodes, which are stopped) is created
 * again from the newest epoch all members have, with a new ring id, and
 * each replays its calls after that epoch, so their collectives meet again.
 * A member's neighbours often see it die (a reset link) before the head
 * sees its control connection close, so a failure that a broken ring
 * caused (actor-result status 2) is held back until the loss arrives, or
 * for the heartbeat timeout plus a second, before it is delivered.
 *
 * --resume.  Actors are placed as in any run.  Each handle here is first
 * restored from the checkpoint folder as a local actor would be (a
 * group's members at their newest common epoch), and the worker's actor
 * is created from that state.  main's calls then go by the journal:
 * those the state already holds are answered from it and not sent; those
 * it answers that the state does not hold are sent muted, to rebuild the
 * state in order, and answered from it at once; the rest run live.
 *
 * Worker.  Actor frames arrive on the control loop: actor-create builds a
 * local actor with task.c's machinery (init, or the shipped state and call
 * counts), actor-call posts the call to its mailbox (so calls run one at a
 * time, in order), and one reply thread per actor sends each result in
 * order as its future completes.  Checkpoints are shipped instead of
 * written (checkpoint.c's sf__checkpoint_ship), and only after the result
 * of the call they include has been sent, so the head never holds a
 * checkpoint that covers a call whose result it lost.
 *
 * Payloads.  actor-create: u32 class-name length, class name, u64 spawn
 * id, u32 rank, u32 size, u64 ring id (0: alone), u64 calls, u64 epochs,
 * u8 from (0: init arguments, 1: a checkpointed state), u32 length + bytes
 * (those arguments or that state), u32 length + peer list (size entries,
 * as in group-setup; empty when alone).  actor-call: u32 method-name
 * length, name, u8 flags (1: part of g.all; 2: a replay of a call whose
 * result was delivered, its print output muted), then the arguments.  Class
 * and method are named by descriptor offset plus name, checked by the
 * worker like tasks (remote.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

#define RING_TIMEOUT_MS 10000
#define GROUP_CKPTS 4 /* checkpoints kept per group member, newest first */

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int32_t value_size(const sf_type *t) { return t && t->kind != SF_VOID ? t->size : 0; }

static void put_u32(sf__buf *b, uint32_t v) { sf__buf_put(b, (const char *)&v, 4); }
static void put_u64(sf__buf *b, uint64_t v) { sf__buf_put(b, (const char *)&v, 8); }
static void put_bytes(sf__buf *b, const void *p, uint32_t n) {
  put_u32(b, n);
  sf__buf_put(b, p, n);
}

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

typedef struct ckpt {
  uint64_t calls, epoch;
  uint8_t *p;
  uint32_t n;
} ckpt;

typedef struct rgroup rgroup;

struct sf__ractor {
  struct sf__ractor *next; /* RA.list */
  sf_actor *a;             /* the head's handle; valid while calls are pending */
  const sf_actor_desc *d;
  int64_t id, rank, size;
  uint64_t key;            /* random streams: the actor's identity (task.c) */
  uint64_t wid;            /* wire id of the running incarnation */
  int node, need;
  sf__gpu_hold gpu;        /* @gpus: held with the slots, for its lifetime */
  int restarts_left;
  uint64_t seq;            /* calls made */
  uint8_t *init;           /* serialized init arguments */
  uint32_t ninit;
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
  free(c->p);
  *c = (ckpt){0};
}

static ractor *find_wid(uint64_t wid) {
  for (ractor *r = RA.list; r; r = r->next)
    if (r->wid == wid)
      return r;
  return NULL;
}

/* ----------------------------------------------------------- frames */

static void encode_create(sf__wbuf *out, ractor *r, const ckpt *from) {
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
  if (from)
    put_bytes(&b, from->p, from->n);
  else
    put_bytes(&b, r->init, r->ninit);
  sf__wbuf peers = {0};
  for (int64_t i = 0; r->g && i < r->g->n; i++) {
    char addr[64] = "0.0.0.0";
    uint16_t port = 1;
    (void)sf__cluster_data_addr(r->g->m[i]->node, addr, sizeof addr, &port);
    sf__wire_put_peer(&peers, addr, port);
  }
  put_bytes(&b, peers.p, (uint32_t)peers.n);
  sf__wbuf_free(&peers);
  sf__frame f = {.type = SF__F_ACTOR_CREATE};
  f.u.actor_create.actor = r->wid;
  f.u.actor_create.cls = (uint32_t)(int32_t)((const char *)r->d - (const char *)&sf_program_desc);
  f.u.actor_create.args = (sf__bytes){(const uint8_t *)b.data, (uint32_t)b.len};
  sf__wire_encode(out, &f);
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
 * task.c does for local actors), and the state is serialized into
 * out[i] for the create frame (out[i].p NULL: from init).  The handle's
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
    if (value_size(d->state))
      sf__ser_value(&b, d->state, sf__actor_state(members[i]));
    out[i].calls = (uint64_t)sf__actor_calls(members[i]);
    out[i].epoch = (uint64_t)sf__actor_epochs(members[i]);
    out[i].p = malloc(b.len ? b.len : 1);
    if (out[i].p) {
      memcpy(out[i].p, b.data, b.len);
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
  if (value_size(it))
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
    r->init = b.len ? malloc(b.len) : NULL;
    if (r->init)
      memcpy(r->init, b.data, b.len);
    r->ninit = r->init ? (uint32_t)b.len : 0;
    if (restored && restored[i].p) { /* starts from its checkpoint */
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
    sf__wbuf out = {0};
    encode_create(&out, r, r->nck ? &r->ck[0] : NULL);
    send_buf(r->node, &out);
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
  int32_t rsize = value_size(md->result);
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
  if (value_size(md->args))
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
    int64_t now = now_ms();
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
  if (f->u.actor_result.status == 2 && r->g && may_restart(r)) {
    /* The member failed in a collective because its ring broke: most
     * likely a member's node died, and its loss may not have reached us
     * yet (the neighbours' sockets can tell before the control
     * connection does).  Wait for the loss, which restarts the group and
     * reruns this call; without one, the failure is delivered. */
    c->held = strndup((const char *)f->u.actor_result.value.p, f->u.actor_result.value.n);
    c->held_until = now_ms() + SF__HEARTBEAT_TIMEOUT_MS + 1000;
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

  int32_t rsize = value_size(md->result);
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
  sf__actor_complete_out(a, md, &sink, good ? res : NULL, good ? NULL : why, pb.data, pb.len);
  sf__buf_free(&pb);
  sf_release(a);
  if (res != rbuf)
    free(res);
}

/* Checkpoint files are written by one thread, not the control thread (an
 * fsync must not hold up heartbeats and results of every node); a newer
 * state of an actor replaces its older one still waiting. */
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

static void queue_file(const sf_actor_desc *d, int64_t id, int64_t rank, const ckpt *c) {
  uint8_t *p = malloc(c->n + 1);
  if (!p)
    return;
  memcpy(p, c->p, c->n);
  pthread_mutex_lock(&WF.mu);
  for (wfile *w = WF.head; w; w = w->next)
    if (w->d == d && w->id == id && w->rank == rank) {
      ckpt_free(&w->c);
      w->c = (ckpt){c->calls, c->epoch, p, c->n};
      pthread_mutex_unlock(&WF.mu);
      return;
    }
  wfile *w = calloc(1, sizeof *w);
  if (w) {
    *w = (wfile){NULL, d, id, rank, {c->calls, c->epoch, p, c->n}};
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
    free(p);
  }
  pthread_mutex_unlock(&WF.mu);
}

static void on_state(int node, const sf__frame *f) {
  pthread_mutex_lock(&RA.mu);
  ractor *r = find_wid(f->u.actor_state.actor);
  if (!r || r->node != node || (r->nck && f->u.actor_state.calls <= r->ck[0].calls) ||
      f->u.actor_state.calls > r->seq) {
    pthread_mutex_unlock(&RA.mu);
    return;
  }
  ckpt c = {f->u.actor_state.calls, f->u.actor_state.epoch, malloc(f->u.actor_state.state.n + 1),
            f->u.actor_state.state.n};
  if (!c.p) {
    pthread_mutex_unlock(&RA.mu);
    return;
  }
  memcpy(c.p, f->u.actor_state.state.p, c.n);
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
  queue_file(r->d, r->id, r->rank, &c);
  pthread_mutex_unlock(&RA.mu);
}

void sf__ractor_on_frame(int node, const sf__frame *f) {
  if (f->type == SF__F_ACTOR_RESULT)
    on_result(node, f);
  else if (f->type == SF__F_ACTOR_STATE)
    on_state(node, f);
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
  encode_create(&out, r, from);
  uint64_t after = from ? from->calls : 0;
  for (rcall *c = r->log; c; c = c->next) {
    if (c->seq <= after)
      continue; /* a held failure the checkpoint is past: delivered in time */
    free(c->held); /* it runs again now */
    c->held = NULL;
    encode_call(&out, r, c, c->delivered);
  }
  send_buf(r->node, &out);
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
  free(r->init);
  free(r->dead);
  free(r);
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
  uint8_t *p;
  uint32_t n;
} wstate;

typedef struct wring wring;
static bool ring_broken(wring *w);

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

static void w_state(uint64_t wid, const wstate *s) {
  sf__frame f = {.type = SF__F_ACTOR_STATE};
  f.u.actor_state.actor = wid;
  f.u.actor_state.calls = s->calls;
  f.u.actor_state.epoch = s->epoch;
  f.u.actor_state.state = (sf__bytes){s->p, s->n};
  sf__worker_send_frame(&f);
}

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
      int32_t rsize = value_size(md->result);
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
        w_result(w->wid, it->seq, ring_broken(w->ring) ? 2 : 1, c, strlen(c));
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
        w_state(w->wid, ready);
      free(ready->p);
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
  if (!s || !(s->p = malloc(n ? n : 1))) {
    free(s);
    return;
  }
  memcpy(s->p, p, n);
  s->n = (uint32_t)n;
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
      w_state(w->wid, s);
    free(s->p);
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

static sf__comm *ring_comm(int64_t rank, int64_t size, uint64_t ring, const sf__peer *peers);

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
    int32_t vs = value_size(t);
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
    sf__comm *comm = size > 1 ? ring_comm(rank, size, ring, pl) : NULL;
    w->ring = comm ? sf__comm_impl(comm) : NULL;
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
    int32_t as = value_size(md->args);
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

static void ring_stop(wring *r);

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
    ring_stop(w->ring); /* a member blocked in a collective returns */
}

void sf__ractor_worker_frame(const sf__frame *f) {
  switch (f->type) {
  case SF__F_ACTOR_CREATE: w_create(f); break;
  case SF__F_ACTOR_CALL: w_call(f); break;
  case SF__F_ACTOR_STOP: w_stop(f); break;
  default: break;
  }
}

/* --------------------------------------------------- ring transport */

/* A group member's collectives across nodes: collective.c's sf__comm_ops
 * over a TCP ring (ring.c's allreduce, broadcast and barrier); members on
 * one worker use it over loopback.  Links come up at the member's first
 * collective: it dials its successor's data listener, which opens with a
 * fresh nonce, and greets it with HMAC(secret, "sflow-actor-ring-2" |
 * nonce | ring id | rank) (no replay of a seen greeting); the acceptor
 * thread checks greetings and hands each link to the member waiting for
 * it, so rings of several groups, several members of one worker, and a
 * restarted group (under a new ring id) share one listener without taking
 * each other's links.  A waiting member counts its pool thread out
 * (sf__sched_block_begin), so members on one worker always get threads.  A
 * collective that fails (a lost neighbour: an error within the ring
 * timeout, never a hang) fails the call, and every later collective of
 * that member fails at once: the group is restarted by the head, or the
 * program sees the error. */
struct wring {
  pthread_mutex_t mu;
  uint64_t id;
  int rank, size;
  sf__peer *peers;
  bool up;
  _Atomic bool stopped;
  char broken[300];       /* why collectives fail now, or "" */
  sf__ring ring;
  sf__nccl_comm *nc;      /* device collectives, made at the first one */
};

typedef struct rlink {
  struct rlink *next;
  uint64_t ring;
  uint32_t from;
  int fd;
} rlink;

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rlink *list;
  bool running;
} AC = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

#define GREETING 44 /* u64 ring, u32 rank, 32-byte MAC */
#define RING_NONCE 32

/* The greeting on a link: the acceptor opens with a fresh nonce, which
 * the MAC covers, so a greeting seen on the wire cannot be replayed to
 * take a member's place. */
static void greeting(const uint8_t nonce[RING_NONCE], uint64_t ring, uint32_t rank,
                     uint8_t out[GREETING]) {
  uint8_t msg[18 + RING_NONCE + 12];
  memcpy(msg, "sflow-actor-ring-2", 18);
  memcpy(msg + 18, nonce, RING_NONCE);
  memcpy(msg + 18 + RING_NONCE, &ring, 8);
  memcpy(msg + 26 + RING_NONCE, &rank, 4);
  memcpy(out, &ring, 8);
  memcpy(out + 8, &rank, 4);
  sf__hmac_sha256(sf__worker_secret(), SF__SECRET_LEN, msg, sizeof msg, out + 12);
}

static bool io_full(int fd, void *p, size_t n, bool wr, int64_t deadline) {
  size_t off = 0;
  while (off < n) {
    int left = (int)(deadline - now_ms());
    struct pollfd pf = {fd, wr ? POLLOUT : POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, left) <= 0)
      return false;
    ssize_t k = wr ? send(fd, (uint8_t *)p + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT)
                   : recv(fd, (uint8_t *)p + off, n - off, MSG_DONTWAIT);
    if (k > 0)
      off += (size_t)k;
    else if (k == 0 || (errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK))
      return false;
  }
  return true;
}

/* Links being greeted: the acceptor keeps up to GREET_MAX at once, each
 * with its own deadline, and reads them as bytes arrive, so a peer that
 * connects and says nothing holds up neither the accept loop nor other
 * links, and is dropped after GREET_TIMEOUT_MS.  Nothing but the 44-byte
 * greeting is read before the MAC is checked. */
#define GREET_MAX 32
#define GREET_TIMEOUT_MS 5000

typedef struct greeting_conn {
  int fd; /* -1: a free slot */
  int64_t deadline;
  uint8_t nonce[RING_NONCE];
  uint8_t got[GREETING];
  size_t n;
} greeting_conn;

static void greet_refuse(greeting_conn *g, const char *why) {
  sf__worker_note("refused a ring connection: %s", why);
  close(g->fd);
  g->fd = -1;
}

/* A new link: the nonce goes out at once (32 bytes into an empty socket
 * buffer never wait); the oldest is dropped when all slots are taken. */
static void greet_accept(greeting_conn *gs, int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return;
  greeting_conn *g = NULL;
  for (int i = 0; i < GREET_MAX && !g; i++)
    if (gs[i].fd < 0)
      g = &gs[i];
  if (!g) {
    g = &gs[0];
    for (int i = 1; i < GREET_MAX; i++)
      if (gs[i].deadline < g->deadline)
        g = &gs[i];
    greet_refuse(g, "too many connections greeting at once; dropped the oldest");
  }
  *g = (greeting_conn){fd, now_ms() + GREET_TIMEOUT_MS, {0}, {0}, 0};
  if (sf__random_bytes(g->nonce, sizeof g->nonce) ||
      send(fd, g->nonce, sizeof g->nonce, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof g->nonce)
    greet_refuse(g, "cannot send the nonce");
}

/* Bytes of a greeting; a complete one that proves the secret becomes a
 * link for the member waiting for it. */
static void greet_read(greeting_conn *g) {
  ssize_t k = recv(g->fd, g->got + g->n, sizeof g->got - g->n, MSG_DONTWAIT);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (k <= 0) {
    greet_refuse(g, "bad greeting (closed before it was complete)");
    return;
  }
  g->n += (size_t)k;
  if (g->n < sizeof g->got)
    return;
  uint64_t ring;
  uint32_t from;
  uint8_t want[GREETING];
  memcpy(&ring, g->got, 8);
  memcpy(&from, g->got + 8, 4);
  greeting(g->nonce, ring, from, want);
  if (!sf__ct_equal(want + 12, g->got + 12, 32)) {
    greet_refuse(g, "bad greeting");
    return;
  }
  rlink *l = calloc(1, sizeof *l);
  if (!l) {
    greet_refuse(g, "out of memory");
    return;
  }
  *l = (rlink){NULL, ring, from, g->fd};
  g->fd = -1;
  pthread_mutex_lock(&AC.mu);
  l->next = AC.list;
  AC.list = l;
  pthread_cond_broadcast(&AC.cv);
  pthread_mutex_unlock(&AC.mu);
}

static void *acceptor_main(void *arg) {
  (void)arg;
  int lfd = sf__worker_data_fd();
  static greeting_conn gs[GREET_MAX];
  for (int i = 0; i < GREET_MAX; i++)
    gs[i].fd = -1;
  for (;;) {
    struct pollfd pf[1 + GREET_MAX];
    greeting_conn *who[1 + GREET_MAX];
    int np = 0;
    pf[np] = (struct pollfd){lfd, POLLIN, 0};
    who[np++] = NULL;
    int64_t t = now_ms(), next = t + 1000;
    for (int i = 0; i < GREET_MAX; i++) {
      if (gs[i].fd < 0)
        continue;
      if (t >= gs[i].deadline) {
        greet_refuse(&gs[i], "no greeting within 5 s");
        continue;
      }
      if (gs[i].deadline < next)
        next = gs[i].deadline;
      pf[np] = (struct pollfd){gs[i].fd, POLLIN, 0};
      who[np++] = &gs[i];
    }
    if (poll(pf, (nfds_t)np, (int)(next - t)) <= 0)
      continue;
    for (int i = 1; i < np; i++)
      if (pf[i].revents)
        greet_read(who[i]);
    if (pf[0].revents & POLLIN)
      greet_accept(gs, lfd);
  }
  return NULL;
}

/* Connects the member to its neighbours (once); false with why. */
static bool ring_up(wring *w, char *err, size_t n) {
  if (w->up)
    return true;
  if (w->broken[0])
    return snprintf(err, n, "%s", w->broken), false;
  int64_t deadline = now_ms() + RING_TIMEOUT_MS;
  int next = (w->rank + 1) % w->size, prev = (w->rank + w->size - 1) % w->size;
  uint8_t nonce[RING_NONCE], hello[GREETING];
  int out = sf__ring_dial(&w->peers[next], deadline, err, n);
  bool greeted = out >= 0 && io_full(out, nonce, sizeof nonce, false, deadline);
  if (greeted)
    greeting(nonce, w->id, (uint32_t)w->rank, hello);
  if (out >= 0 && (!greeted || !io_full(out, hello, sizeof hello, true, deadline))) {
    close(out);
    out = sf__net_fail(err, n, "cannot greet ring peer %s:%u", w->peers[next].addr,
                       w->peers[next].port);
  }
  int in = -1;
  pthread_mutex_lock(&AC.mu);
  while (out >= 0 && in < 0) {
    for (rlink **p = &AC.list; *p; p = &(*p)->next)
      if ((*p)->ring == w->id && (*p)->from == (uint32_t)prev) {
        rlink *l = *p;
        *p = l->next;
        in = l->fd;
        free(l);
        break;
      }
    if (in >= 0)
      break;
    if (atomic_load(&w->stopped) || now_ms() >= deadline) {
      snprintf(err, n, "group member %d did not connect within %d ms (every member must make "
               "the same collective calls: call the method through g.all)", prev,
               RING_TIMEOUT_MS);
      break;
    }
    sf__cond_wait_ns(&AC.cv, &AC.mu, 100 * 1000000);
  }
  pthread_mutex_unlock(&AC.mu);
  if (in < 0) {
    if (out >= 0)
      close(out);
    snprintf(w->broken, sizeof w->broken, "%s", err);
    return false;
  }
  pthread_mutex_lock(&w->mu);
  sf__ring_init(&w->ring, w->rank, w->size, in, out);
  w->ring.timeout_ms = RING_TIMEOUT_MS;
  w->up = true;
  bool stopped = atomic_load(&w->stopped);
  pthread_mutex_unlock(&w->mu);
  if (stopped) /* stopped while connecting: fail like a cut link */
    ring_stop(w);
  return true;
}

static void ring_stop(wring *w) {
  atomic_store(&w->stopped, true);
  pthread_mutex_lock(&w->mu);
  if (w->up) { /* wakes a member polling its links; the fds stay valid */
    shutdown(w->ring.prev_fd, SHUT_RDWR);
    shutdown(w->ring.next_fd, SHUT_RDWR);
  }
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&AC.mu);
  pthread_cond_broadcast(&AC.cv);
  pthread_mutex_unlock(&AC.mu);
}

static bool ring_broken(wring *w) { return w && w->broken[0]; }

static void ring_free(void *p) {
  wring *w = p;
  sf__nccl_comm_free(w->nc, w->broken[0] || atomic_load(&w->stopped));
  if (w->up)
    sf__ring_close(&w->ring);
  free(w->peers);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

/* ring.c's operations with the pool thread counted out while it waits on
 * the network, as in a shared-memory collective: members placed on one
 * worker need threads to arrive at all. */
static int r_allreduce(wring *w, void *buf, size_t n, sf__dtype t, sf__redop op, char *err,
                       size_t el) {
  sf__sched_block_begin();
  int rc = sf__ring_allreduce(&w->ring, buf, n, t, op, err, el);
  sf__sched_block_end();
  return rc;
}

static int r_broadcast(wring *w, void *buf, size_t bytes, int root, char *err, size_t el) {
  sf__sched_block_begin();
  int rc = sf__ring_broadcast(&w->ring, buf, bytes, root, err, el);
  sf__sched_block_end();
  return rc;
}

static int r_barrier(wring *w, char *err, size_t el) {
  sf__sched_block_begin();
  int rc = sf__ring_barrier(&w->ring, err, el);
  sf__sched_block_end();
  return rc;
}

static wring *ring_for(sf__comm *c, const char *what, const sf_loc *loc) {
  wring *w = sf__comm_impl(c);
  char err[300];
  sf__sched_block_begin();
  bool up = ring_up(w, err, sizeof err);
  sf__sched_block_end();
  if (!up)
    sf_runtime_error(loc, "%s: %s", what, err);
  return w;
}

static void ring_fail(wring *w, const char *what, const char *err, const sf_loc *loc) {
  snprintf(w->broken, sizeof w->broken, "an earlier collective failed: %s", err);
  sf_runtime_error(loc, "%s: %s", what, err);
}

static bool dtype_of(const sf_type *t, sf__dtype *out) {
  switch (t ? t->kind : -1) {
  case SF_F32: *out = SF__DT_F32; return true;
  case SF_F64: *out = SF__DT_F64; return true;
  case SF_I32: *out = SF__DT_I32; return true;
  case SF_I64: *out = SF__DT_I64; return true;
  default: return false;
  }
}

/* Whether this member's array could take part in a device collective:
 * its only current copy is on a GPU, its elements can travel as NCCL
 * types, and NCCL loads here (else, with a notice once, the group stages
 * through the host: slower, same results). */
static bool device_ready(sf_array *a, bool reduce) {
  if (!a || !a->len || a->where != SF__WHERE_DEVICE || !a->dev)
    return false;
  sf__dtype dt;
  if (reduce ? !dtype_of(a->elem, &dt) : sf__type_has_refs(a->elem))
    return false;
  const char *e = getenv("SFLOW_NCCL");
  if (e && (!strcmp(e, "off") || !strcmp(e, "0")))
    return false;
  char why[256];
  if (sf__nccl_load(why, sizeof why))
    return true;
  static _Atomic int told;
  if (!atomic_exchange(&told, 1))
    sf__notice("node %lld: %s; device collectives of groups here stage through the host",
               (long long)sf__node_id, why);
  return false;
}

/* Every member must pass arrays of one element type and (same_len) one
 * length: a small allreduce with max of (len, -len, kind, -kind) tells.
 * The same round tells whether the group can run the collective on the
 * device (returned): every member's array device_ready, one length, and
 * every member on a GPU of its own (member r contributes 1 + its node and
 * device at slot 5 + r; NCCL refuses two ranks on one GPU). */
static bool agree(wring *w, sf_array *a, bool same_len, bool reduce, const char *what,
                  const sf_loc *loc) {
  int64_t len = a ? a->len : 0, kind = a ? a->elem->kind : -1;
  bool dev = device_ready(a, reduce);
  size_t nv = 5 + (size_t)w->size;
  int64_t fixed[5 + 16], *v = nv <= 21 ? fixed : calloc(nv, sizeof *v);
  if (!v)
    sf_runtime_error(loc, "%s: out of memory", what);
  memset(v, 0, nv * sizeof *v);
  v[0] = len;
  v[1] = -len;
  v[2] = kind;
  v[3] = -kind;
  v[4] = dev ? -1 : 0; /* max: -1 only when every member is ready */
  if (dev)
    v[5 + w->rank] = 1 + sf__node_id * 4096 + sf__gpu_array_device(a);
  char err[300];
  if (r_allreduce(w, v, nv, SF__DT_I64, SF__OP_MAX, err, sizeof err)) {
    if (v != fixed)
      free(v);
    ring_fail(w, what, err, loc);
  }
  bool same = v[0] == -v[1], on = v[4] == -1 && same;
  for (int i = 0; on && i < w->size; i++)
    for (int j = 0; on && j < i; j++)
      on = v[5 + i] != v[5 + j];
  int64_t k0 = v[2], k1 = v[3];
  if (v != fixed)
    free(v);
  if ((same_len && !same) || k0 != -k1)
    sf_runtime_error(loc, "%s: members pass arrays of different %s", what,
                     k0 != -k1 ? "element types" : "lengths");
  return on;
}

/* ---- device collectives across nodes: NCCL, its unique id carried from
 * member 0 to the others over the group's ring (links the run secret
 * authenticates, as the control connections are), one communicator per
 * ring, that is per incarnation of the group: a restarted group has a new
 * ring id and so a new communicator. */

static bool id_send(void *ctx, const uint8_t *p, size_t n, char *err, size_t errn) {
  return r_broadcast(ctx, (void *)p, n, 0, err, errn) == 0;
}

static bool id_recv(void *ctx, uint8_t *p, size_t n, double timeout_s, char *err, size_t errn) {
  (void)timeout_s; /* the ring's own timeout bounds the wait */
  return r_broadcast(ctx, p, n, 0, err, errn) == 0;
}

static bool ring_stopped(void *ctx, char *why, size_t n) {
  wring *w = ctx;
  if (!atomic_load(&w->stopped))
    return false;
  snprintf(why, n, "the group is being restarted (a member's node was lost)");
  return true;
}

/* Runs op on the device for member w->rank; raises on failure, naming
 * the collective and the cause, and marks the ring broken. */
static void device_collective(wring *w, sf_array *a, sf__dev_op *op, const sf_loc *loc) {
  char err[SF__ERROR_MAX / 2];
  sf__nccl_watch watch = {ring_stopped, w, 0, NULL};
  if (!sf__gpu_ready(loc))
    sf_runtime_error(loc, "%s: the array is on a GPU but the GPU is not usable", op->what);
  sf__gpu_use_device(sf__gpu_array_device(a));
  sf__sched_block_begin();
  if (!w->nc) {
    sf__nccl_carrier car = {id_send, id_recv, w};
    w->nc = sf__nccl_comm_join(w->rank, w->size, w->id, 0, &car, &watch, err, sizeof err);
  }
  bool ok = w->nc && sf__nccl_run(w->nc, a, w->size, op, &watch, err, sizeof err, loc);
  sf__sched_block_end();
  if (!ok) {
    char what[64];
    snprintf(what, sizeof what, "%s on the device (NCCL)", op->what);
    ring_fail(w, what, err, loc);
  }
}

static void ring_allreduce(sf__comm *c, int64_t rank, sf_array *a, bool mean, const char *what,
                           const sf_loc *loc) {
  (void)rank;
  wring *w = ring_for(c, what, loc);
  if (agree(w, a, true, true, what, loc)) {
    sf__dev_op op = {.kind = SF__DEV_ALLREDUCE, .what = what, .mean = mean};
    device_collective(w, a, &op, loc);
    return;
  }
  sf_array_host(a);
  sf__dtype dt;
  if (!a || !a->len || !dtype_of(a->elem, &dt))
    return;
  char err[300];
  if (r_allreduce(w, a->data, (size_t)a->len, dt, SF__OP_SUM, err, sizeof err))
    ring_fail(w, what, err, loc);
  if (!mean)
    return;
  int64_t n = a->len, by = w->size;
  switch (dt) {
  case SF__DT_F32: for (int64_t i = 0; i < n; i++) ((float *)a->data)[i] /= (float)by; break;
  case SF__DT_F64: for (int64_t i = 0; i < n; i++) ((double *)a->data)[i] /= (double)by; break;
  case SF__DT_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)a->data)[i] /= (int32_t)by; break;
  default: for (int64_t i = 0; i < n; i++) ((int64_t *)a->data)[i] /= by; break;
  }
}

static void plain_only(sf_array *a, const char *what, const sf_loc *loc) {
  if (a && sf__type_has_refs(a->elem))
    sf_runtime_error(loc, "%s: arrays of %s cannot travel between nodes", what, a->elem->name);
}

static void ring_broadcast(sf__comm *c, int64_t rank, sf_array *a, int64_t root,
                           const sf_loc *loc) {
  (void)rank;
  wring *w = ring_for(c, "broadcast", loc);
  if (agree(w, a, true, false, "broadcast", loc)) {
    sf__dev_op op = {.kind = SF__DEV_BROADCAST, .what = "broadcast", .root = root};
    device_collective(w, a, &op, loc);
    return;
  }
  sf_array_host(a);
  plain_only(a, "broadcast", loc);
  char err[300];
  if (a && a->len &&
      r_broadcast(w, a->data, (size_t)a->len * (size_t)a->elem->size, (int)root,
                         err, sizeof err))
    ring_fail(w, "broadcast", err, loc);
}

static sf_array *ring_allgather(sf__comm *c, int64_t rank, sf_array *a, const sf_loc *loc) {
  wring *w = ring_for(c, "allgather", loc);
  if (agree(w, a, false, false, "allgather", loc)) { /* one length: NCCL's allgather */
    sf__dev_op op = {.kind = SF__DEV_ALLGATHER, .what = "allgather"};
    device_collective(w, a, &op, loc);
    return op.out;
  }
  sf_array_host(a);
  plain_only(a, "allgather", loc);
  const sf_type *elem = a ? a->elem : &sf_type_f32;
  int64_t *lens = calloc((size_t)w->size, sizeof *lens);
  if (!lens)
    sf_runtime_error(loc, "allgather: out of memory");
  lens[rank] = a ? a->len : 0;
  char err[300];
  if (r_allreduce(w, lens, (size_t)w->size, SF__DT_I64, SF__OP_SUM, err,
                         sizeof err)) {
    free(lens);
    ring_fail(w, "allgather", err, loc);
  }
  int64_t total = 0;
  for (int k = 0; k < w->size; k++)
    total += lens[k];
  sf_array *out = sf_array_new(elem, total, loc);
  size_t es = (size_t)elem->size;
  int64_t at = 0;
  for (int k = 0; k < w->size; k++) {
    if (k == rank && lens[k])
      memcpy((char *)out->data + at * (int64_t)es, a->data, (size_t)lens[k] * es);
    if (lens[k] && r_broadcast(w, (char *)out->data + at * (int64_t)es,
                                      (size_t)lens[k] * es, k, err, sizeof err)) {
      free(lens);
      sf_release(out);
      ring_fail(w, "allgather", err, loc);
    }
    at += lens[k];
  }
  free(lens);
  return out;
}

static void ring_barrier(sf__comm *c, int64_t rank, const sf_loc *loc) {
  (void)rank;
  wring *w = ring_for(c, "barrier", loc);
  char err[300];
  if (r_barrier(w, err, sizeof err))
    ring_fail(w, "barrier", err, loc);
}

static const sf__comm_ops ring_ops = {"tcp ring", ring_allreduce, ring_broadcast, ring_allgather,
                                      ring_barrier};

static sf__comm *ring_comm(int64_t rank, int64_t size, uint64_t ring, const sf__peer *peers) {
  wring *w = calloc(1, sizeof *w);
  if (!w || !(w->peers = calloc((size_t)size, sizeof *peers))) {
    free(w);
    return NULL;
  }
  memcpy(w->peers, peers, (size_t)size * sizeof *peers);
  pthread_mutex_init(&w->mu, NULL);
  w->id = ring;
  w->rank = (int)rank;
  w->size = (int)size;
  if (sf__worker_data_fd() < 0)
    snprintf(w->broken, sizeof w->broken, "node %lld has no data-plane listener",
             (long long)sf__node_id);
  pthread_mutex_lock(&AC.mu);
  if (!AC.running && sf__worker_data_fd() >= 0) {
    pthread_t th;
    if (!pthread_create(&th, NULL, acceptor_main, NULL)) {
      pthread_detach(th);
      AC.running = true;
    }
  }
  pthread_mutex_unlock(&AC.mu);
  return sf__comm_new_ops(size, &ring_ops, w, ring_free);
}
