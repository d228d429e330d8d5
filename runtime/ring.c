/*
 * ring.c — collectives for host arrays over a TCP ring: the transport the
 * scheduler uses for a group whose members live on different nodes.
 *
 * Allreduce is the bandwidth-optimal ring algorithm (Patarasuk and Yuan):
 * the buffer is cut into `size` chunks; in n-1 reduce-scatter steps each
 * member sends one chunk to its successor while it receives another from
 * its predecessor and adds it in; after them member r owns the full sum of
 * chunk r+1, and n-1 allgather steps pass the finished chunks around.
 * Every member sends and receives 2(n-1)/n of the buffer, the minimum.
 *
 * Key design choices:
 *  - Pipelined: within a step, sending and receiving run at once on
 *    non-blocking sockets under one poll, and received bytes are reduced as
 *    soon as whole elements arrive, so the network and the adds overlap and
 *    a large chunk never waits for itself.
 *  - Deterministic: each chunk is summed in one fixed ring order and then
 *    copied, so every member ends with bitwise identical results.
 *  - Bounded: no progress for timeout_ms (a dead or stopped peer) is an
 *    error naming the neighbour, never a hang.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net.h"


static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

size_t sf__dtype_size(sf__dtype t) {
  switch (t) {
  case SF__DT_F32: case SF__DT_I32: return 4;
  default: return 8;
  }
}

/* ------------------------------------------------------------ reduce */

#define REDUCE_LOOP(T)                                                  \
  do {                                                                  \
    T *d = dst;                                                         \
    const T *s = src;                                                   \
    switch (op) {                                                       \
    case SF__OP_SUM: for (size_t i = 0; i < n; i++) d[i] += s[i]; break; \
    case SF__OP_MAX: for (size_t i = 0; i < n; i++) if (s[i] > d[i]) d[i] = s[i]; break; \
    case SF__OP_MIN: for (size_t i = 0; i < n; i++) if (s[i] < d[i]) d[i] = s[i]; break; \
    }                                                                   \
  } while (0)

static void reduce(void *dst, const void *src, size_t n, sf__dtype t, sf__redop op) {
  switch (t) {
  case SF__DT_F32: REDUCE_LOOP(float); break;
  case SF__DT_F64: REDUCE_LOOP(double); break;
  case SF__DT_I32: REDUCE_LOOP(int32_t); break;
  default: REDUCE_LOOP(int64_t); break;
  }
}

/* ------------------------------------------------------------- setup */

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void sf__ring_init(sf__ring *r, int rank, int size, int prev_fd, int next_fd) {
  *r = (sf__ring){rank, size, prev_fd, next_fd, 30000, 256 << 10, NULL, 0};
  if (prev_fd >= 0)
    tune(prev_fd);
  if (next_fd >= 0 && next_fd != prev_fd)
    tune(next_fd);
}

void sf__ring_close(sf__ring *r) {
  if (r->prev_fd >= 0)
    close(r->prev_fd);
  if (r->next_fd >= 0 && r->next_fd != r->prev_fd)
    close(r->next_fd);
  free(r->scratch);
  r->prev_fd = r->next_fd = -1;
  r->scratch = NULL;
  r->scratch_n = 0;
}

int sf__ring_listen(const char *addr, uint16_t *port, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int g = getaddrinfo(addr, "0", &hints, &ai);
  if (g)
    return sf__net_fail(err, errlen, "bad data-plane address %s: %s", addr, gai_strerror(g));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    return sf__net_fail(err, errlen, "cannot listen on %s: %s", addr, strerror(e));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                         : ((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* Blocking full read/write with a deadline on a (possibly non-blocking) fd. */
static int io_all(int fd, void *buf, size_t n, bool wr, int64_t deadline) {
  uint8_t *p = buf;
  while (n) {
    ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k == 0 && !wr)
      return -1;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return -1;
    int left = (int)(deadline - now_ms());
    struct pollfd pf = {fd, wr ? POLLOUT : POLLIN, 0};
    if (left <= 0 || poll(&pf, 1, left) == 0)
      return -1;
  }
  return 0;
}

/* The greeting on a ring link: group id, sender rank, HMAC over both. */
static void link_mac(const uint8_t secret[SF__SECRET_LEN], uint64_t group, uint32_t rank,
                     uint8_t out[32]) {
  uint8_t msg[24] = "sflow-ring-1";
  for (int i = 0; i < 8; i++)
    msg[12 + i] = (uint8_t)(group >> (8 * i));
  for (int i = 0; i < 4; i++)
    msg[20 + i] = (uint8_t)(rank >> (8 * i));
  sf__hmac_sha256(secret, SF__SECRET_LEN, msg, sizeof msg, out);
}

static int dial(const sf__peer *p, int64_t deadline, char *err, size_t errlen) {
  char port[8];
  snprintf(port, sizeof port, "%u", p->port);
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(p->addr, port, &hints, &ai))
    return sf__net_fail(err, errlen, "bad peer address %s", p->addr);
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : connect(fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc && errno == EINPROGRESS) {
    struct pollfd pf = {fd, POLLOUT, 0};
    int left = (int)(deadline - now_ms());
    int e = 0;
    socklen_t el = sizeof e;
    if (left > 0 && poll(&pf, 1, left) == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) &&
        !e)
      rc = 0;
    else
      errno = e ? e : ETIMEDOUT;
  }
  if (rc) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return sf__net_fail(err, errlen, "cannot connect to ring peer %s:%u: %s", p->addr, p->port,
                strerror(e));
  }
  return fd;
}

int sf__ring_connect(sf__ring *r, uint64_t group, int rank, int size, const sf__peer *peers,
                     int listen_fd, const uint8_t secret[SF__SECRET_LEN], int timeout_ms,
                     char *err, size_t errlen) {
  sf__ring_init(r, rank, size, -1, -1);
  r->timeout_ms = timeout_ms;
  if (size == 1)
    return 0;
  int64_t deadline = now_ms() + timeout_ms;
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  int out = dial(&peers[next], deadline, err, errlen);
  if (out < 0)
    return -1;
  uint8_t hello[44];
  for (int i = 0; i < 8; i++)
    hello[i] = (uint8_t)(group >> (8 * i));
  for (int i = 0; i < 4; i++)
    hello[8 + i] = (uint8_t)((uint32_t)rank >> (8 * i));
  link_mac(secret, group, (uint32_t)rank, hello + 12);
  if (io_all(out, hello, sizeof hello, true, deadline)) {
    close(out);
    return sf__net_fail(err, errlen, "cannot greet ring peer %s:%u", peers[next].addr, peers[next].port);
  }
  /* Accept until the predecessor shows up with a valid greeting; anything
   * else (a stranger, a stale ring) is dropped. */
  int in = -1;
  while (in < 0) {
    struct pollfd pf = {listen_fd, POLLIN, 0};
    int left = (int)(deadline - now_ms());
    if (left <= 0 || poll(&pf, 1, left) <= 0) {
      close(out);
      return sf__net_fail(err, errlen, "ring member %d did not connect within %d ms", prev, timeout_ms);
    }
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      continue;
    uint8_t got[44], want[32];
    int64_t greet_deadline = now_ms() + 5000 < deadline ? now_ms() + 5000 : deadline;
    if (io_all(fd, got, sizeof got, false, greet_deadline)) {
      close(fd);
      continue;
    }
    uint64_t g = 0;
    uint32_t from = 0;
    for (int i = 0; i < 8; i++)
      g |= (uint64_t)got[i] << (8 * i);
    for (int i = 0; i < 4; i++)
      from |= (uint32_t)got[8 + i] << (8 * i);
    link_mac(secret, g, from, want);
    if (g != group || from != (uint32_t)prev || !sf__ct_equal(want, got + 12, 32)) {
      fprintf(stderr, "sflow: refused a ring connection (group %llu, rank %u): %s\n",
              (unsigned long long)g, from,
              sf__ct_equal(want, got + 12, 32) ? "unexpected group or rank" : "wrong HMAC");
      close(fd);
      continue;
    }
    in = fd;
  }
  sf__ring_init(r, rank, size, in, out);
  r->timeout_ms = timeout_ms;
  return 0;
}

/* ------------------------------------------------------------ engine */

/* One step: send [sbuf, sbuf+sn) to next while receiving rn bytes from
 * prev into rbuf; when red_dst is set, received whole elements are reduced
 * into red_dst as they arrive (rbuf is then scratch). */
typedef struct step {
  const uint8_t *sbuf;
  size_t sn;
  uint8_t *rbuf;
  size_t rn;
  uint8_t *red_dst;
  sf__dtype t;
  sf__redop op;
} step;

static int run_step(sf__ring *r, const step *s, char *err, size_t errlen) {
  size_t sent = 0, got = 0, reduced = 0, es = sf__dtype_size(s->t);
  int64_t last = now_ms();
  while (sent < s->sn || got < s->rn) {
    bool progress = false;
    if (sent < s->sn) {
      size_t want = s->sn - sent < r->segment ? s->sn - sent : r->segment;
      ssize_t k = send(r->next_fd, s->sbuf + sent, want, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        sent += (size_t)k;
        progress = true;
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return sf__net_fail(err, errlen, "ring rank %d: sending to rank %d failed: %s", r->rank,
                    (r->rank + 1) % r->size, strerror(errno));
      }
    }
    if (got < s->rn) {
      size_t want = s->rn - got < r->segment ? s->rn - got : r->segment;
      ssize_t k = recv(r->prev_fd, s->rbuf + got, want, MSG_DONTWAIT);
      if (k > 0) {
        got += (size_t)k;
        progress = true;
        size_t whole = got / es * es;
        if (s->red_dst && whole > reduced) {
          reduce(s->red_dst + reduced, s->rbuf + reduced, (whole - reduced) / es, s->t, s->op);
          reduced = whole;
        }
      } else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        return sf__net_fail(err, errlen, "ring rank %d: rank %d closed the connection", r->rank,
                    (r->rank + r->size - 1) % r->size);
      }
    }
    if (progress) {
      last = now_ms();
      continue;
    }
    struct pollfd pf[2] = {{r->next_fd, sent < s->sn ? POLLOUT : 0, 0},
                           {r->prev_fd, got < s->rn ? POLLIN : 0, 0}};
    int left = (int)(last + r->timeout_ms - now_ms());
    if (left <= 0 || (poll(pf, 2, left) == 0 && now_ms() - last >= r->timeout_ms))
      return sf__net_fail(err, errlen, "ring rank %d: no progress for %d ms (a peer died or stalled)",
                  r->rank, r->timeout_ms);
  }
  return 0;
}

static bool scratch(sf__ring *r, size_t n) {
  if (r->scratch_n >= n)
    return true;
  void *p = realloc(r->scratch, n);
  if (!p)
    return false;
  r->scratch = p;
  r->scratch_n = n;
  return true;
}

/* Chunk c of count elements cut into size parts: first element and length. */
static void chunk(size_t count, int size, int c, size_t *off, size_t *len) {
  size_t base = count / (size_t)size, extra = count % (size_t)size;
  *off = (size_t)c * base + ((size_t)c < extra ? (size_t)c : extra);
  *len = base + ((size_t)c < extra ? 1 : 0);
}

int sf__ring_allreduce(sf__ring *r, void *buf, size_t count, sf__dtype t, sf__redop op,
                       char *err, size_t errlen) {
  int n = r->size;
  if (n == 1 || count == 0)
    return 0;
  size_t es = sf__dtype_size(t), maxlen = (count + (size_t)n - 1) / (size_t)n;
  if (!scratch(r, maxlen * es))
    return sf__net_fail(err, errlen, "out of memory for a %zu-byte ring buffer", maxlen * es);
  uint8_t *b = buf;
  for (int s = 0; s < n - 1; s++) { /* reduce-scatter */
    size_t so, sl, ro, rl;
    chunk(count, n, ((r->rank - s) % n + n) % n, &so, &sl);
    chunk(count, n, ((r->rank - s - 1) % n + n) % n, &ro, &rl);
    step st = {b + so * es, sl * es, r->scratch, rl * es, b + ro * es, t, op};
    if (run_step(r, &st, err, errlen))
      return -1;
  }
  for (int s = 0; s < n - 1; s++) { /* allgather */
    size_t so, sl, ro, rl;
    chunk(count, n, ((r->rank + 1 - s) % n + n) % n, &so, &sl);
    chunk(count, n, ((r->rank - s) % n + n) % n, &ro, &rl);
    step st = {b + so * es, sl * es, b + ro * es, rl * es, NULL, t, op};
    if (run_step(r, &st, err, errlen))
      return -1;
  }
  return 0;
}

/* Pipelined ring broadcast: the root streams segments to its successor,
 * each member forwards segment k while it receives k+1. */
int sf__ring_broadcast(sf__ring *r, void *buf, size_t bytes, int root, char *err,
                       size_t errlen) {
  int n = r->size;
  if (n == 1 || bytes == 0)
    return 0;
  int pos = ((r->rank - root) % n + n) % n; /* distance from the root */
  uint8_t *b = buf;
  size_t seg = r->segment;
  for (size_t off = 0; off < bytes + (pos > 0 && pos < n - 1 ? seg : 0); off += seg) {
    /* Receive segment at off (not on the root), send segment at off - seg
     * (members in the middle) or at off (the root). */
    size_t rl = pos > 0 && off < bytes ? (bytes - off < seg ? bytes - off : seg) : 0;
    size_t soff = pos == 0 ? off : off - seg;
    size_t sl = 0;
    if (pos < n - 1 && (pos == 0 || off >= seg) && soff < bytes)
      sl = bytes - soff < seg ? bytes - soff : seg;
    step st = {sl ? b + soff : b, sl, b + (rl ? off : 0), rl, NULL, SF__DT_F32, SF__OP_SUM};
    if (run_step(r, &st, err, errlen))
      return -1;
  }
  return 0;
}

int sf__ring_barrier(sf__ring *r, char *err, size_t errlen) {
  int64_t one[1] = {1};
  /* An allreduce of one element per member: nobody leaves before every
   * member has contributed. */
  int64_t v[64] = {0};
  size_t n = (size_t)r->size < 64 ? (size_t)r->size : 64;
  for (size_t i = 0; i < n; i++)
    v[i] = one[0];
  return sf__ring_allreduce(r, v, n, SF__DT_I64, SF__OP_SUM, err, errlen);
}
