/*
 * group_ring.c — a group member's collectives across the nodes of a
 * --nodes run, for the actors of ractor_worker.c.
 *
 * This is the collective interface's TCP-ring transport (sched.h,
 * sf__coll_transport; registered by sf__cluster_install): ring.c's
 * allreduce, broadcast and barrier between the members' processes;
 * members on one worker use it over loopback.  NCCL for device arrays is
 * the device transport that sf__comm_new stacks on it (nccl.c): it meets
 * the members through ring_meet and carries its unique id in a broadcast
 * over the ring.  Links come up at the member's first
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
 * program sees the error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "worker_internal.h"

#define RING_TIMEOUT_MS 10000

struct wring {
  pthread_mutex_t mu;
  uint64_t id;
  int rank, size;
  sf__peer *peers;
  bool up;
  _Atomic bool stopped;
  char broken[300];       /* why collectives fail now, or "" */
  sf__ring ring;
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

#define GREETING SF__GREETING_LEN /* u64 ring, u32 rank, 32-byte MAC */
#define RING_NONCE SF__GREET_NONCE

/* The greeting on a link: the acceptor opens with a fresh nonce, which
 * the MAC covers, so a greeting seen on the wire cannot be replayed to
 * take a member's place.  The ring id and rank go little-endian, as
 * sf__greet_accept reads them. */
static void greeting(const uint8_t nonce[RING_NONCE], uint64_t ring, uint32_t rank,
                     uint8_t out[GREETING]) {
  uint8_t msg[18 + RING_NONCE + 12];
  memcpy(msg, "sflow-actor-ring-2", 18);
  memcpy(msg + 18, nonce, RING_NONCE);
  memcpy(msg + 18 + RING_NONCE, &ring, 8);
  memcpy(msg + 26 + RING_NONCE, &rank, 4);
  for (int i = 0; i < 8; i++)
    out[i] = (uint8_t)(ring >> (8 * i));
  for (int i = 0; i < 4; i++)
    out[8 + i] = (uint8_t)(rank >> (8 * i));
  sf__hmac_sha256(sf__worker_secret(), SF__SECRET_LEN, msg, sizeof msg, out + 12);
}

static bool io_full(int fd, void *p, size_t n, bool wr, int64_t deadline) {
  size_t off = 0;
  while (off < n) {
    int left = (int)(deadline - sf__now_ms());
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

/* The acceptor's greeters (sf__greeters, ring.c): up to 32 links greeted
 * at once, each opened with a fresh nonce and dropped after 5 s without a
 * greeting; every refusal is a note in the worker's output. */
static void greet_refuse(void *ctx, const char *why) {
  (void)ctx;
  sf__worker_note("refused a ring connection: %s", why);
}

static bool greet_check(void *ctx, const sf__greeter *g, uint64_t ring, uint32_t from) {
  uint8_t want[GREETING];
  greeting(g->nonce, ring, from, want);
  if (sf__ct_equal(want + 12, g->got + 12, 32))
    return true;
  greet_refuse(ctx, "bad greeting");
  return false;
}

/* Each link that proves the secret goes on the list for the member
 * waiting for it (ring_up), whichever ring it is for. */
static void *acceptor_main(void *arg) {
  (void)arg;
  int lfd = sf__worker_data_fd();
  static sf__greeters gs;
  sf__greeters_init(&gs, SF__GREET_SLOTS_MAX, true, greet_check, greet_refuse, NULL);
  for (;;) {
    uint64_t ring;
    uint32_t from;
    int fd = sf__greet_accept(&gs, lfd, sf__now_ms() + 1000, &ring, &from);
    if (fd < 0)
      continue;
    rlink *l = calloc(1, sizeof *l);
    if (!l) {
      greet_refuse(NULL, "out of memory");
      close(fd);
      continue;
    }
    *l = (rlink){NULL, ring, from, fd};
    pthread_mutex_lock(&AC.mu);
    l->next = AC.list;
    AC.list = l;
    pthread_cond_broadcast(&AC.cv);
    pthread_mutex_unlock(&AC.mu);
  }
  return NULL;
}

/* Connects the member to its neighbours (once); false with why. */
static bool ring_up(wring *w, char *err, size_t n) {
  if (w->up)
    return true;
  if (w->broken[0])
    return snprintf(err, n, "%s", w->broken), false;
  int64_t deadline = sf__now_ms() + RING_TIMEOUT_MS;
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
    if (atomic_load(&w->stopped) || sf__now_ms() >= deadline) {
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
    sf__group_ring_stop(w);
  return true;
}

void sf__group_ring_stop(wring *w) {
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

bool sf__group_ring_broken(wring *w) { return w && w->broken[0]; }

static void ring_free(void *p) {
  wring *w = p;
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

static wring *ring_for(void *s, const char *what, const sf_loc *loc) {
  wring *w = s;
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

/* The members meet: every member must pass arrays of one element type
 * and (b->same_len) one length: a small allreduce with max of (len, -len,
 * kind, -kind) tells.  The same round fills the view for a device
 * transport stacked here: every member offered its array (b->gpu >= 0),
 * one length, and every member on a GPU of its own (member r contributes
 * 1 + its GPU at slot 5 + r; NCCL refuses two ranks on one GPU). */
static void agree(wring *w, sf__coll_buf *b, sf__coll_view *view, const sf_loc *loc) {
  const char *what = b->what;
  int64_t len = b->count, kind = b->a ? b->elem->kind : -1;
  size_t nv = 5 + (size_t)w->size;
  int64_t fixed[5 + 16], *v = nv <= 21 ? fixed : calloc(nv, sizeof *v);
  if (!v)
    sf_runtime_error(loc, "%s: out of memory", what);
  memset(v, 0, nv * sizeof *v);
  v[0] = len;
  v[1] = -len;
  v[2] = kind;
  v[3] = -kind;
  v[4] = b->gpu >= 0 ? -1 : 0; /* max: -1 only when every member offered */
  if (b->gpu >= 0)
    v[5 + w->rank] = 1 + b->gpu;
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
  if ((b->same_len && !same) || k0 != -k1)
    sf_runtime_error(loc, "%s: members pass arrays of different %s", what,
                     k0 != -k1 ? "element types" : "lengths");
  b->met = true;
  view->device = on;
  view->shares[0] = view->shares[1] = -1;
}

static void ring_meet(void *s, int64_t rank, sf__coll_buf *b, sf__coll_view *v,
                      const sf_loc *loc) {
  (void)rank;
  agree(ring_for(s, b->what, loc), b, v, loc);
}

/* The members meet unless a device transport met them for this call. */
static wring *ring_begin(void *s, sf__coll_buf *b, const sf_loc *loc) {
  wring *w = ring_for(s, b->what, loc);
  sf__coll_view v;
  if (!b->met)
    agree(w, b, &v, loc);
  sf_array_host(b->a);
  return w;
}

static void ring_allreduce(void *s, int64_t rank, sf__coll_buf *b, bool mean, const sf_loc *loc) {
  (void)rank;
  b->reduce = b->same_len = true;
  wring *w = ring_begin(s, b, loc);
  sf__dtype dt;
  if (!b->a || !b->count || !dtype_of(b->elem, &dt))
    return;
  char err[300];
  if (r_allreduce(w, b->data, (size_t)b->count, dt, SF__OP_SUM, err, sizeof err))
    ring_fail(w, b->what, err, loc);
  if (!mean)
    return;
  int64_t n = b->count, by = w->size;
  switch (dt) {
  case SF__DT_F32: for (int64_t i = 0; i < n; i++) ((float *)b->data)[i] /= (float)by; break;
  case SF__DT_F64: for (int64_t i = 0; i < n; i++) ((double *)b->data)[i] /= (double)by; break;
  case SF__DT_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)b->data)[i] /= (int32_t)by; break;
  default: for (int64_t i = 0; i < n; i++) ((int64_t *)b->data)[i] /= by; break;
  }
}

static void plain_only(const sf__coll_buf *b, const sf_loc *loc) {
  if (b->a && sf__type_has_refs(b->elem))
    sf_runtime_error(loc, "%s: arrays of %s cannot travel between nodes", b->what, b->elem->name);
}

static void ring_broadcast(void *s, int64_t rank, sf__coll_buf *b, int64_t root,
                           const sf_loc *loc) {
  (void)rank;
  b->same_len = true;
  wring *w = ring_begin(s, b, loc);
  plain_only(b, loc);
  char err[300];
  if (b->count && r_broadcast(w, b->data, (size_t)b->count * (size_t)b->elem->size, (int)root,
                              err, sizeof err))
    ring_fail(w, b->what, err, loc);
}

static sf_array *ring_allgather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  wring *w = ring_begin(s, b, loc);
  plain_only(b, loc);
  const sf_type *elem = b->elem;
  int64_t *lens = calloc((size_t)w->size, sizeof *lens);
  if (!lens)
    sf_runtime_error(loc, "allgather: out of memory");
  lens[rank] = b->count;
  char err[300];
  if (r_allreduce(w, lens, (size_t)w->size, SF__DT_I64, SF__OP_SUM, err, sizeof err)) {
    free(lens);
    ring_fail(w, "allgather", err, loc);
  }
  int64_t total = 0;
  for (int k = 0; k < w->size; k++)
    total += lens[k];
  sf_array *out = sf_array_new(elem, total, loc);
  size_t es = (size_t)elem->size;
  int64_t pos = 0;
  for (int k = 0; k < w->size; k++) {
    if (k == rank && lens[k])
      memcpy((char *)out->data + pos * (int64_t)es, b->data, (size_t)lens[k] * es);
    if (lens[k] && r_broadcast(w, (char *)out->data + pos * (int64_t)es, (size_t)lens[k] * es, k,
                               err, sizeof err)) {
      free(lens);
      sf_release(out);
      ring_fail(w, "allgather", err, loc);
    }
    pos += lens[k];
  }
  free(lens);
  return out;
}

/* reduce_scatter: the ring's allreduce, of which this member keeps its
 * shard: the shard's values are then the allreduce's bits by
 * construction (a ring reduce-scatter alone would end each chunk at the
 * member the ring's order gives, not at sf__coll_shard's owner).  It moves
 * twice the bytes of a reduce-scatter; what sharding saves here is the
 * optimizer's work and state, not the wire. */
static void ring_reduce_scatter(void *s, int64_t rank, sf__coll_buf *b, bool mean,
                                const sf_loc *loc) {
  ring_allreduce(s, rank, b, mean, loc);
}

/* all_gather: each member's shard broadcast from it, in rank order (as
 * ring_allgather's parts). */
static void ring_all_gather(void *s, int64_t rank, sf__coll_buf *b, const sf_loc *loc) {
  b->same_len = true;
  wring *w = ring_begin(s, b, loc);
  plain_only(b, loc);
  if (!b->a || !b->count)
    return;
  size_t es = (size_t)b->elem->size;
  char err[300];
  for (int k = 0; k < w->size; k++) {
    int64_t lo, hi;
    sf__coll_shard(b->count, k, w->size, &lo, &hi);
    if (hi > lo && r_broadcast(w, (char *)b->data + lo * (int64_t)es, (size_t)(hi - lo) * es, k,
                               err, sizeof err))
      ring_fail(w, b->what, err, loc);
  }
  (void)rank;
}

static void ring_barrier(void *s, int64_t rank, const char *what, const sf_loc *loc) {
  (void)rank;
  wring *w = ring_for(s, what, loc);
  char err[300];
  if (r_barrier(w, err, sizeof err))
    ring_fail(w, what, err, loc);
}

/* A collective of this member failed elsewhere (the device transport):
 * every later one fails at once, and the head hears the ring is broken. */
static void ring_abort(void *s, int64_t rank, const char *why) {
  (void)rank;
  wring *w = s;
  snprintf(w->broken, sizeof w->broken, "%s", why);
}

/* A member's method failed: nothing here.  Its peers, on other nodes,
 * are bounded by the ring's timeout, and a failed call is not a broken
 * ring (the head restarts a group only for that). */
static void ring_member_failed(void *s, int64_t rank, const char *why) {
  (void)s, (void)rank, (void)why;
}

static bool ring_failed(void *s, char *why, size_t n) {
  wring *w = s;
  if (atomic_load(&w->stopped))
    snprintf(why, n, "the group is being restarted (a member's node was lost)");
  else if (w->broken[0])
    snprintf(why, n, "%s", w->broken);
  else
    return false;
  return true;
}

static void *ring_init(int64_t n, const void *arg) {
  const sf__ring_group_arg *g = arg;
  wring *w = calloc(1, sizeof *w);
  if (!w || !(w->peers = calloc((size_t)n, sizeof *g->peers))) {
    free(w);
    return NULL;
  }
  memcpy(w->peers, g->peers, (size_t)n * sizeof *g->peers);
  pthread_mutex_init(&w->mu, NULL);
  w->id = g->ring;
  w->rank = (int)g->rank;
  w->size = (int)n;
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
  return w;
}

const sf__coll_transport sf__coll_ring = {
    .name = "tcp ring", .init = ring_init, .allreduce = ring_allreduce,
    .broadcast = ring_broadcast, .allgather = ring_allgather,
    .reduce_scatter = ring_reduce_scatter, .all_gather = ring_all_gather, .barrier = ring_barrier,
    .meet = ring_meet, .abort = ring_abort, .member_failed = ring_member_failed,
    .failed = ring_failed, .destroy = ring_free};

sf__comm *sf__group_ring_comm(int64_t rank, int64_t size, uint64_t ring, const sf__peer *peers) {
  sf__ring_group_arg arg = {rank, ring, peers};
  return sf__comm_new(size, SF__COLL_RING, &arg, ring);
}
