/*
 * objects_worker.c — a worker's side of the object store of a --nodes
 * run: the large results this worker keeps, served to the head over the
 * control connection and to other workers over its object listener, and
 * the fetch of another worker's object (the design, the ownership rules
 * and the failures are described in head/objects_head.c).
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

#include "worker_internal.h"


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
    uint64_t k = o->n - off < SF__OBJ_CHUNK ? o->n - off : SF__OBJ_CHUNK;
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
