/*
 * route.c — routes, their versions (endpoints) and the replicas' queues:
 * weighted choice of a version, the power of two choices over its
 * replicas by queue length, bounded queues, and dynamic batching in next.
 *
 * Key design choice: a replica's load is what it has queued plus the
 * batch it is running, both under its version's mutex, so the two choices
 * compare exact numbers; the batch wait is measured from the oldest queued
 * request's arrival (Ray's batch_wait_timeout_s), so a request waits at
 * most wait_ms for company however the replica's loop is timed.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

const double sf__lat_le[SF__LAT_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1.0,   2.5,  5.0,  10.0};
const double sf__batch_le[SF__BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
const int sf__codes[SF__NCODES] = {200, 400, 401, 404, 405, 408, 413, 500, 503, 504, 0};

static pthread_mutex_t eps_mu = PTHREAD_MUTEX_INITIALIZER;
static sf__endpoint *eps[256];
static int64_t neps;

sf__endpoint *sf__endpoint_get(int64_t id, const sf_loc *loc) {
  pthread_mutex_lock(&eps_mu);
  sf__endpoint *e = id >= 1 && id <= neps ? eps[id - 1] : NULL;
  pthread_mutex_unlock(&eps_mu);
  if (!e)
    sf_runtime_error(loc, "serve: no endpoint %" PRId64 " (an Endpoint comes from serve.route)", id);
  return e;
}

/* A thread's own xorshift64* stream: the two choices need no lock. */
static uint64_t rnd(void) {
  static _Thread_local uint64_t x;
  if (!x)
    x = (uint64_t)sf__mono_ns() ^ ((uint64_t)(uintptr_t)&x << 16) ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x * 2685821657736338717ull;
}

/* ------------------------------------------ spinning before sleeping */

/* A request's round trip is two hand-offs: the connection's thread to the
 * replica's (the queue) and back (the answer).  Each one that finds its
 * thread asleep on a condition costs a futex wake and two context
 * switches, most of a no-op request's time (docs/performance.md, "HTTP
 * floor (issue 34)").  A thread about to sleep therefore first spins a
 * little while on the state it waits for; a signal that finds no sleeper
 * makes no system call.  At most one thread fewer than the cores spins at
 * once, so spinners never take every core from the threads they wait on;
 * the others sleep at once, as before; and a thread whose spins miss
 * backs off (sf__spin). */
static _Atomic int spinners;
static int spin_cap = -1;
static int64_t spin_ns = -1;

static void spin_init(void) {
  const char *v = getenv("SFLOW_SERVE_SPIN_US");
  double us = 20.0;
  if (v && *v) {
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x >= 0 && x <= 1e6))
      fprintf(stderr, "sflow: SFLOW_SERVE_SPIN_US=%.40s is not a number of microseconds in "
              "0..1000000; using 20\n", v);
    else
      us = x;
  }
  spin_ns = (int64_t)(us * 1e3);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  spin_cap = n > 1 ? (int)n - 1 : 0;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

bool sf__spin(bool (*ready)(void *), void *arg) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, spin_init);
  if (!spin_ns || ready(arg))
    return ready(arg);
  /* A thread whose spins keep running out (the other side is not
   * running: a loaded machine) spins ever more rarely: after each miss it
   * sleeps at once the next 1, 2, 4 ... 64 times; a hit starts over. */
  static _Thread_local uint32_t skip, backoff;
  if (skip) {
    skip--;
    return false;
  }
  if (atomic_fetch_add(&spinners, 1) >= spin_cap) {
    atomic_fetch_sub(&spinners, 1);
    return false;
  }
  int64_t until = sf__mono_ns() + spin_ns;
  bool ok = false;
  for (int i = 1;; i++) {
    if ((ok = ready(arg)))
      break;
    cpu_relax();
    if (!(i & 63) && sf__mono_ns() >= until)
      break;
  }
  atomic_fetch_sub(&spinners, 1);
  backoff = ok ? 0 : backoff ? (backoff < 64 ? 2 * backoff : 64) : 1;
  skip = backoff;
  return ok;
}

void sf__cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

/* Descriptors compare by structure (the compiler emits its own copies);
 * a struct's name and size settle it for a request type. */
static bool same_type(const sf_type *a, const sf_type *b) {
  return a == b || (a->size == b->size && a->kind == b->kind && a->name && b->name &&
                    !strcmp(a->name, b->name));
}

sf__route *sf__route_find(sf__server *s, const char *path) {
  int64_t n = atomic_load(&s->nroutes);
  for (int64_t i = 0; i < n; i++)
    if (!strcmp(s->routes[i]->path, path))
      return s->routes[i];
  return NULL;
}

/* Paths are printed into /metrics labels and matched byte for byte, so
 * they keep to the characters of a plain URL path. */
static bool path_ok(const char *p) {
  if (p[0] != '/' || strlen(p) >= sizeof(((sf__route *)0)->path))
    return false;
  for (; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr("/_.-", *p)))
      return false;
  return true;
}

sf__endpoint *sf__endpoint_new(sf__server *s, const char *path, const char *version,
                               const sf_type *T, int64_t max_batch, double wait_ms,
                               int64_t queue, int64_t weight, const char *token,
                               const sf_loc *loc) {
  if (!path_ok(path) || !strcmp(path, "/healthz") || !strcmp(path, "/metrics"))
    sf_runtime_error(loc, "serve.route: path \"%.100s\" must start with '/', hold only letters, "
                     "digits and /_.- (under 128 bytes) and not be /healthz or /metrics", path);
  for (const char *v = version; *v; v++)
    if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') ||
          strchr("_.-", *v)))
      sf_runtime_error(loc, "serve.route: version \"%.60s\" may hold only letters, digits and _.-",
                       version);
  if (!version[0] || strlen(version) >= 64)
    sf_runtime_error(loc, "serve.route: a version needs 1 to 63 characters");
  if (max_batch < 1 || max_batch > 4096)
    sf_runtime_error(loc, "serve.route: max_batch %" PRId64 " is not in 1..4096", max_batch);
  if (!(wait_ms >= 0 && wait_ms <= 60000))
    sf_runtime_error(loc, "serve.route: wait_ms %g is not in 0..60000", wait_ms);
  if (queue < 1 || queue > 1000000)
    sf_runtime_error(loc, "serve.route: queue %" PRId64 " is not in 1..1000000", queue);
  if (weight < 0)
    sf_runtime_error(loc, "serve.route: weight %" PRId64 " is negative", weight);
  if (strlen(token) >= sizeof(((sf__route *)0)->token))
    sf_runtime_error(loc, "serve.route: the token is longer than 255 bytes");
  pthread_mutex_lock(&s->mu);
  sf__route *r = sf__route_find(s, path);
  if (!r) {
    if (s->nroutes == 64) {
      pthread_mutex_unlock(&s->mu);
      sf_runtime_error(loc, "serve.route: more than 64 routes");
    }
    r = sf_alloc(sizeof *r);
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    /* Before the route is published: connections read it unlocked. */
    snprintf(r->token, sizeof r->token, "%s", token);
    r->token_len = strlen(token);
    pthread_mutex_init(&r->mu, NULL);
    s->routes[s->nroutes] = r;
    atomic_fetch_add(&s->nroutes, 1);
  }
  /* The route's token is its first version's; a later version may
   * repeat it or say nothing, not name another. */
  if (token[0] && strcmp(token, r->token)) {
    pthread_mutex_unlock(&s->mu);
    sf_runtime_error(loc, "serve.route: %s has %s token; every version must give the same or none",
                     path, r->token_len ? "another" : "no");
  }
  if (r->neps && !same_type(T, r->eps[0]->T)) {
    pthread_mutex_unlock(&s->mu);
    sf_runtime_error(loc, "serve.route: %s takes %s (version %s), so every version must; not %s", path,
                     r->eps[0]->T->name, r->eps[0]->version, T->name);
  }
  for (int64_t i = 0; i < r->neps; i++)
    if (!strcmp(r->eps[i]->version, version)) {
      pthread_mutex_unlock(&s->mu);
      sf_runtime_error(loc, "serve.route: %s already has a version \"%s\"", path, version);
    }
  if (r->neps == 16) {
    pthread_mutex_unlock(&s->mu);
    sf_runtime_error(loc, "serve.route: more than 16 versions of %s", path);
  }
  sf__endpoint *e = sf_alloc(sizeof *e);
  memset(e, 0, sizeof *e);
  e->srv = s;
  e->route = r;
  snprintf(e->version, sizeof e->version, "%s", version);
  e->T = T;
  e->max_batch = max_batch;
  e->wait_ns = (int64_t)(wait_ms * 1e6);
  e->qcap = queue;
  atomic_store(&e->weight, weight);
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_lock(&eps_mu);
  if (neps == 256) {
    pthread_mutex_unlock(&eps_mu);
    pthread_mutex_unlock(&s->mu);
    sf_runtime_error(loc, "serve.route: more than 256 endpoints");
  }
  eps[neps++] = e;
  e->id = neps;
  pthread_mutex_unlock(&eps_mu);
  r->eps[r->neps] = e;
  atomic_fetch_add(&r->neps, 1);
  pthread_mutex_unlock(&s->mu);
  return e;
}

int64_t sf__endpoint_add_replica(sf__endpoint *e) {
  sf__replica *p = sf_alloc(sizeof *p);
  memset(p, 0, sizeof *p);
  sf__cond_init_mono(&p->cv);
  pthread_mutex_lock(&e->mu);
  if (e->nreps == e->reps_cap) {
    int64_t cap = e->reps_cap ? 2 * e->reps_cap : 8;
    sf__replica **reps = sf_alloc(sizeof *reps * (size_t)cap);
    if (e->nreps)
      memcpy(reps, e->reps, sizeof *reps * (size_t)e->nreps);
    /* Dispatchers read e->reps only under mu, so the old array can go. */
    sf_free(e->reps);
    e->reps = reps;
    e->reps_cap = cap;
  }
  int64_t r = e->nreps;
  e->reps[e->nreps++] = p;
  pthread_mutex_unlock(&e->mu);
  return r;
}

static sf__replica *replica(sf__endpoint *e, int64_t r, const char *what, const sf_loc *loc) {
  if (r < 0 || r >= e->nreps) {
    int64_t n = e->nreps;
    pthread_mutex_unlock(&e->mu);
    sf_runtime_error(loc, "serve.%s: replica %" PRId64 " of %s (%s) was never added (it has %" PRId64
                     "; serve.add_replica gives the numbers)", what, r, e->route->path, e->version, n);
  }
  return e->reps[r];
}

sf__replica *sf__replica_at(sf__endpoint *e, int64_t r, const char *what, const sf_loc *loc) {
  return replica(e, r, what, loc);
}

bool sf__same_type(const sf_type *a, const sf_type *b) { return same_type(a, b); }

/* Queued, in a batch of next, or running after take. */
static int64_t load(const sf__replica *p) { return p->qlen + p->batch_len + p->nrunning; }

/* The version: weighted at random among those with a live replica. */
static sf__endpoint *pick_version(sf__route *r) {
  int64_t n = atomic_load(&r->neps), total = 0;
  for (int64_t i = 0; i < n; i++)
    total += atomic_load(&r->eps[i]->weight);
  if (total <= 0)
    return n ? r->eps[0] : NULL;
  int64_t x = (int64_t)(rnd() % (uint64_t)total);
  for (int64_t i = 0; i < n; i++) {
    x -= atomic_load(&r->eps[i]->weight);
    if (x < 0)
      return r->eps[i];
  }
  return r->eps[n - 1];
}

static void enqueue(sf__replica *p, sf__sreq *q) {
  q->next = NULL;
  if (p->tail)
    p->tail->next = q;
  else
    p->head = q;
  p->tail = q;
  __atomic_store_n(&p->qlen, p->qlen + 1, __ATOMIC_RELEASE); /* read by a spinning next */
}

int sf__route_dispatch(sf__route *r, sf__sreq *q, const char **why) {
  sf__endpoint *e = pick_version(r);
  if (!e || atomic_load(&e->weight) <= 0) {
    *why = "no version of this route takes traffic (every weight is 0)";
    return 503;
  }
  pthread_mutex_lock(&e->mu);
  /* The power of two choices among the replicas not removed. */
  int64_t live = 0;
  for (int64_t i = 0; i < e->nreps; i++)
    live += !e->reps[i]->removed;
  sf__replica *a = NULL, *b = NULL;
  if (live > 0) {
    int64_t i = (int64_t)(rnd() % (uint64_t)live), j = live > 1 ? (int64_t)(rnd() % (uint64_t)(live - 1)) : -1;
    if (j >= i)
      j++;
    for (int64_t k = 0, seen = 0; k < e->nreps; k++) {
      if (e->reps[k]->removed)
        continue;
      if (seen == i)
        a = e->reps[k];
      if (seen == j)
        b = e->reps[k];
      seen++;
    }
    if (b && load(b) < load(a)) {
      sf__replica *t = a;
      a = b;
      b = t;
    }
  }
  int status = 503;
  *why = live ? "every queue of the replicas chosen is full; retry later"
              : "no replica of this version is ready yet (starting, or every one failed); retry later";
  sf__replica *to = a && a->qlen < e->qcap ? a : b && b->qlen < e->qcap ? b : NULL;
  if (to) {
    enqueue(to, q);
    status = 0;
  }
  pthread_mutex_unlock(&e->mu);
  /* After the unlock, so the replica it wakes does not wake into a held
   * mutex (a replica is never freed, only removed). */
  if (to)
    pthread_cond_signal(&to->cv);
  return status;
}

void sf__route_count(sf__server *s, sf__route *r, int status, double seconds) {
  if (!r)
    r = &s->other;
  int c = SF__NCODES - 1;
  for (int i = 0; i < SF__NCODES - 1; i++)
    if (sf__codes[i] == status)
      c = i;
  pthread_mutex_lock(&r->mu);
  r->codes[c]++;
  r->lat_hist[sf__lat_bucket(seconds)]++;
  r->lat_count++;
  r->lat_sum += seconds;
  pthread_mutex_unlock(&r->mu);
}

void sf__route_wake_all(sf__server *s) {
  int64_t n = atomic_load(&s->nroutes);
  for (int64_t i = 0; i < n; i++) {
    sf__route *r = s->routes[i];
    for (int64_t j = 0; j < atomic_load(&r->neps); j++) {
      sf__endpoint *e = r->eps[j];
      pthread_mutex_lock(&e->mu);
      for (int64_t k = 0; k < e->nreps; k++)
        pthread_cond_broadcast(&e->reps[k]->cv);
      pthread_mutex_unlock(&e->mu);
    }
  }
}

int sf__lat_bucket(double seconds) {
  int b = 0;
  while (b < SF__LAT_BUCKETS && seconds > sf__lat_le[b])
    b++;
  return b;
}

char *sf__error_body(const char *msg, size_t *len) {
  sf__buf b;
  sf__buf_init(&b, NULL, 0);
  sf__buf_put(&b, "{\"error\": ", 10);
  sf__buf_json_str(&b, msg, strlen(msg));
  sf__buf_put(&b, "}\n", 3); /* the NUL, not counted */
  *len = b.len - 1;
  return b.data;
}

void sf__sreq_drop(sf__sreq *q) {
  if (atomic_fetch_sub(&q->refs, 1) != 1)
    return;
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  sf_free(q->body);
  sf__buf_free(&q->out);
  sf_free(q);
}

void sf__sreq_answer(sf__sreq *q, int status, char *body, size_t len) {
  pthread_mutex_lock(&q->mu);
  if (q->abandoned) {
    sf_free(body); /* the client was answered 504 */
  } else {
    q->status = status;
    q->body = body;
    q->body_len = len;
    q->done = true;
    atomic_store_explicit(&q->ready, true, memory_order_release);
  }
  bool wake = !q->abandoned;
  pthread_mutex_unlock(&q->mu);
  /* After the unlock (the queue's hold keeps q until the drop), so the
   * connection's thread does not wake into a held mutex. */
  if (wake)
    pthread_cond_signal(&q->cv);
  sf__sreq_drop(q);
}

static void answer_error(sf__sreq *q, int status, const char *msg) {
  size_t n;
  char *body = sf__error_body(msg, &n);
  sf__sreq_answer(q, status, body, n);
}

/* Answers a list of requests with one error (a batch left unanswered). */
static void fail_list(sf__endpoint *e, sf__sreq *q, const char *msg) {
  while (q) {
    sf__sreq *next = q->next;
    if (q->value) {
      sf_value_release(e->T, q->value);
      sf_free(q->value);
      q->value = NULL;
    }
    answer_error(q, 500, msg);
    q = next;
  }
}


/* ------------------------------------------------ replicas that die */

/* Between a replica's next and its reply its thread's runtime errors go
 * through on_replica_error first: an error that unwinds the replica's
 * loop (its jump target is the one the loop was called under, not a
 * nested task's) takes the replica out and sends what it held to the
 * others.  Thread-local, armed by next, disarmed by reply or the next
 * next, and by the handler itself. */
static _Thread_local struct {
  bool armed;
  sf__endpoint *e;
  int64_t r;
  jmp_buf *jmp;
  sf__error_fn prev;
} tl;

static void on_replica_error(const char *msg);

static void arm(sf__endpoint *e, int64_t r) {
  if (!tl.armed) {
    tl.prev = sf__error_handler;
    sf__error_handler = on_replica_error;
    tl.armed = true;
  }
  tl.e = e;
  tl.r = r;
  tl.jmp = sf__error_jmp;
}

static void disarm(void) {
  if (tl.armed) {
    sf__error_handler = tl.prev;
    tl.armed = false;
  }
}

void sf__replica_arm(sf__endpoint *e, int64_t r) { arm(e, r); }

void sf__replica_misused(sf__endpoint *e, int64_t r) {
  if (!tl.armed || tl.e != e || tl.r != r)
    arm(e, r);
}
void sf__replica_disarm(void) { disarm(); }

/* A request back to the route: another replica, or 503 when none can. */
static void retry(sf__endpoint *e, sf__sreq *q, const char *msg) {
  if (++q->tries > 3) {
    char m[700];
    snprintf(m, sizeof m, "%d replicas failed on this request; the last: %s", q->tries, msg);
    sf_value_release(e->T, q->value);
    sf_free(q->value);
    q->value = NULL;
    answer_error(q, 500, m);
    return;
  }
  q->next = NULL;
  const char *why;
  if (sf__route_dispatch(e->route, q, &why)) {
    sf_value_release(e->T, q->value);
    sf_free(q->value);
    q->value = NULL;
    answer_error(q, 503, "the replica holding this request failed and no other can take it");
  }
}

static void replica_died(sf__endpoint *e, int64_t r, const char *msg) {
  pthread_mutex_lock(&e->mu);
  sf__replica *p = e->reps[r];
  p->dead = true;
  __atomic_store_n(&p->removed, true, __ATOMIC_RELAXED);
  sf__sreq *held = p->batch, *queued = p->head, *running = p->running;
  uint64_t n = (uint64_t)(p->batch_len + p->qlen);
  p->batch = p->head = p->tail = p->running = NULL;
  p->batch_len = p->nrunning = 0;
  __atomic_store_n(&p->qlen, 0, __ATOMIC_RELAXED);
  if (e->ndead < 64)
    e->dead[e->ndead++] = r;
  e->retries += n;
  pthread_mutex_unlock(&e->mu);
  for (sf__sreq *q = held, *next; q; q = next) {
    next = q->next;
    q->value = q->copy; /* the batch's array held the original */
    q->copy = NULL;
    retry(e, q, msg);
  }
  for (sf__sreq *q = queued, *next; q; q = next) {
    next = q->next;
    retry(e, q, msg);
  }
  /* take's requests: those that sent nothing yet go elsewhere as a
   * batch's do; a stream already begun cannot, and ends with an error
   * event. */
  for (sf__sreq *q = running, *next; q; q = next) {
    next = q->next;
    pthread_mutex_lock(&q->mu);
    bool begun = q->streaming;
    pthread_mutex_unlock(&q->mu);
    if (begun) {
      if (q->copy) {
        sf_value_release(e->T, q->copy);
        sf_free(q->copy);
        q->copy = NULL;
      }
      sf__stream_abort(q, msg);
    } else {
      pthread_mutex_lock(&e->mu);
      e->retries++;
      pthread_mutex_unlock(&e->mu);
      q->value = q->copy;
      q->copy = NULL;
      q->id = 0;
      retry(e, q, msg);
    }
  }
}

static void on_replica_error(const char *msg) {
  if (sf__error_jmp != tl.jmp) /* a nested task's error: caught below the loop */
    return;
  sf__error_fn prev = tl.prev;
  sf__endpoint *e = tl.e;
  int64_t r = tl.r;
  disarm();
  replica_died(e, r, msg);
  if (prev)
    prev(msg);
}

/* The retained copies of a batch, dropped once it is answered. */
static void drop_copies(sf__endpoint *e, sf__sreq *q) {
  for (; q; q = q->next)
    if (q->copy) {
      sf_value_release(e->T, q->copy);
      sf_free(q->copy);
      q->copy = NULL;
    }
}

sf_array *sf__endpoint_dead(sf__endpoint *e, const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  int64_t n = e->ndead;
  sf_array *a = sf_array_new(&sf_type_i64, n, loc);
  memcpy(a->data, e->dead, sizeof(int64_t) * (size_t)n);
  e->ndead = 0;
  pthread_mutex_unlock(&e->mu);
  return a;
}

int64_t sf__endpoint_live(sf__endpoint *e) {
  pthread_mutex_lock(&e->mu);
  int64_t n = 0;
  for (int64_t i = 0; i < e->nreps; i++)
    n += !e->reps[i]->removed;
  pthread_mutex_unlock(&e->mu);
  return n;
}

/* ------------------------------------------------------- next, reply */

/* What a replica's next waits for: a request queued, or the end. */
struct spin_on {
  sf__endpoint *e;
  sf__replica *p;
};

static bool replica_ready(void *arg) {
  struct spin_on *w = arg;
  return __atomic_load_n(&w->p->qlen, __ATOMIC_ACQUIRE) > 0 ||
         __atomic_load_n(&w->p->removed, __ATOMIC_RELAXED) ||
         atomic_load_explicit(&w->e->srv->state, memory_order_relaxed) == SF__CLOSED;
}

sf_array *sf__endpoint_next(sf__endpoint *e, int64_t r, const sf_type *T, double timeout_ms,
                            const sf_loc *loc) {
  disarm();
  if (!same_type(T, e->T))
    sf_runtime_error(loc, "serve.next: the route %s (%s) takes %s, not %s", e->route->path,
                     e->version, e->T->name, T->name);
  pthread_mutex_lock(&e->mu);
  sf__replica *p = replica(e, r, "next", loc);
  if (p->batch) {
    sf__sreq *left = p->batch;
    p->batch = NULL;
    p->batch_len = 0;
    pthread_mutex_unlock(&e->mu);
    drop_copies(e, left);
    fail_list(e, left, "the replica asked for its next batch without answering this one");
    pthread_mutex_lock(&e->mu);
  }
  bool blocked = false, spun = false;
  int64_t give_up = timeout_ms > 0 ? sf__mono_ns() + (int64_t)(timeout_ms * 1e6) : INT64_MAX;
  for (;;) {
    bool closed = e->srv->state == SF__CLOSED || p->removed;
    if (p->qlen == 0 && (closed || sf__mono_ns() >= give_up))
      break;
    int64_t now = sf__mono_ns();
    bool full = p->qlen >= e->max_batch;
    bool due = p->qlen > 0 && now >= p->head->arrived_ns + e->wait_ns;
    if (full || due || (p->qlen > 0 && closed))
      break;
    if (p->qlen == 0 && !spun) {
      /* Once per call, a spin for the next request before sleeping. */
      spun = true;
      struct spin_on w = {e, p};
      pthread_mutex_unlock(&e->mu);
      sf__spin(replica_ready, &w);
      pthread_mutex_lock(&e->mu);
      continue;
    }
    if (!blocked) {
      sf__sched_block_begin();
      blocked = true;
    }
    if (p->qlen == 0 && give_up == INT64_MAX) {
      pthread_cond_wait(&p->cv, &e->mu);
    } else if (p->qlen == 0) {
      struct timespec ts = {.tv_sec = give_up / 1000000000, .tv_nsec = give_up % 1000000000};
      pthread_cond_timedwait(&p->cv, &e->mu, &ts);
    } else {
      int64_t at = p->head->arrived_ns + e->wait_ns;
      struct timespec ts = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
      pthread_cond_timedwait(&p->cv, &e->mu, &ts);
    }
  }
  int64_t n = p->qlen < e->max_batch ? p->qlen : e->max_batch;
  sf__sreq *first = p->head, *last = NULL;
  for (int64_t i = 0; i < n; i++) {
    last = last ? last->next : first;
  }
  if (n) {
    p->head = last->next;
    if (!p->head)
      p->tail = NULL;
    last->next = NULL;
    __atomic_store_n(&p->qlen, p->qlen - n, __ATOMIC_RELAXED);
    p->batch = first;
    p->batch_len = n;
    int b = 0;
    while (b < SF__BATCH_BUCKETS && (double)n > sf__batch_le[b])
      b++;
    e->batch_hist[b]++;
    e->batch_count++;
    e->batch_sum += (uint64_t)n;
  }
  pthread_mutex_unlock(&e->mu);
  if (blocked)
    sf__sched_block_end();
  /* Each request's decoded value moves into the array: no copy of its
   * references, no release. */
  sf_array *a = sf_array_new(T, n, loc);
  int64_t i = 0;
  for (sf__sreq *q = first; i < n; q = q->next, i++) {
    memcpy(sf__array_at(a, i), q->value, (size_t)T->size);
    /* The copy that a retry elsewhere would need if this replica died. */
    q->copy = q->value;
    sf_value_retain(T, q->copy);
    q->value = NULL;
  }
  if (n)
    arm(e, r);
  return a;
}

void sf__endpoint_reply(sf__endpoint *e, int64_t r, sf_array *answers, const sf_loc *loc) {
  sf__endpoint_reply_status(e, r, answers, NULL, loc);
}

/* The status of answer i: statuses[i], or 200 without them. */
static int status_of(const sf_array *statuses, int64_t i) {
  return statuses ? (int)((const int64_t *)statuses->data)[i] : 200;
}

/* NULL when statuses (an i64[], or NULL) fit n answers, else why not. */
static const char *statuses_bad(const sf_array *statuses, int64_t n, char *msg, size_t len) {
  if (!statuses)
    return NULL;
  if (statuses->len != n) {
    snprintf(msg, len, "the handler gave %" PRId64 " statuses for a batch of %" PRId64,
             statuses->len, n);
    return msg;
  }
  for (int64_t i = 0; i < n; i++)
    if (status_of(statuses, i) < 200 || status_of(statuses, i) > 599) {
      snprintf(msg, len, "status %" PRId64 " (answer %" PRId64 ") is not in 200..599",
               ((const int64_t *)statuses->data)[i], i);
      return msg;
    }
  return NULL;
}

void sf__endpoint_reply_status(sf__endpoint *e, int64_t r, sf_array *answers,
                               sf_array *statuses, const sf_loc *loc) {
  disarm();
  pthread_mutex_lock(&e->mu);
  sf__replica *p = replica(e, r, "reply", loc);
  sf__sreq *q = p->batch;
  int64_t n = p->batch_len;
  p->batch = NULL;
  p->batch_len = 0;
  pthread_mutex_unlock(&e->mu);
  drop_copies(e, q);
  int64_t got = answers ? answers->len : 0;
  char msg[200];
  if (statuses)
    sf_array_host(statuses);
  if (got != n || statuses_bad(statuses, n, msg, sizeof msg)) {
    if (got != n)
      snprintf(msg, sizeof msg, "the handler gave %" PRId64 " answers for a batch of %" PRId64, got, n);
    fail_list(e, q, msg);
    sf_runtime_error(loc, "serve.reply: %s (%s, replica %" PRId64 "): %s", e->route->path,
                     e->version, r, msg);
  }
  if (n)
    sf_array_host(answers);
  pthread_mutex_lock(&e->mu);
  e->answered += (uint64_t)n;
  pthread_mutex_unlock(&e->mu);
  for (int64_t i = 0; i < n; i++) {
    sf__sreq *next = q->next;
    char err[600];
    size_t len;
    char *body = sf__json_encode(sf__array_at(answers, i), answers->elem, &len, err, sizeof err);
    if (body)
      sf__sreq_answer(q, status_of(statuses, i), body, len);
    else
      answer_error(q, 500, err);
    q = next;
  }
}

void sf__endpoint_remove(sf__endpoint *e, int64_t r, const sf_loc *loc) {
  pthread_mutex_lock(&e->mu);
  sf__replica *p = replica(e, r, "remove_replica", loc);
  __atomic_store_n(&p->removed, true, __ATOMIC_RELAXED);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&e->mu);
}

int64_t sf__endpoint_queued(sf__endpoint *e) {
  pthread_mutex_lock(&e->mu);
  int64_t n = 0;
  for (int64_t i = 0; i < e->nreps; i++)
    n += load(e->reps[i]);
  pthread_mutex_unlock(&e->mu);
  return n;
}

int64_t sf__endpoint_answered(sf__endpoint *e) {
  pthread_mutex_lock(&e->mu);
  int64_t n = (int64_t)e->answered;
  pthread_mutex_unlock(&e->mu);
  return n;
}
