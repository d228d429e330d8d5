/*
 * ring.c — collectives for host arrays over TCP: the transport the
 * scheduler uses for a group whose members live on different nodes.
 *
 * Allreduce takes one of three algorithms by message size, as MPICH's and
 * Open MPI's tuned decision functions do (thresholds in cluster.h, measured in
 * docs/performance.md):
 *  - small: recursive doubling.  log2(p) rounds in which partners (rank
 *    xor 2^k) swap whole buffers and both reduce, so the latency is
 *    log2(p) message hops instead of the ring's 2(p-1).
 *  - medium: recursive halving then doubling (Rabenseifner): a
 *    reduce-scatter whose halves shrink each round, then an allgather that
 *    grows them back; 2 log2(p) hops and the ring's minimal volume.
 *  - large: the bandwidth-optimal ring (Patarasuk and Yuan): the buffer is
 *    cut into `size` chunks; in n-1 reduce-scatter steps each member sends
 *    one chunk to its successor while it receives another from its
 *    predecessor and adds it in; n-1 allgather steps pass the finished
 *    chunks around.  Every member sends 2(n-1)/n of the buffer, the
 *    minimum, and only to its neighbour.  The 2(n-1) steps run as one
 *    stream (Open MPI's segmented ring, NCCL's): the chunk sent in step
 *    s+1 is the one received in step s, so its bytes leave as soon as
 *    they have arrived and been reduced, not when the whole step is done.
 * A group whose size is not a power of two is folded first (MPICH): of the
 * first 2*rem members (rem = p - 2^floor(log2 p)) each even one hands its
 * buffer to the odd one after it and gets the result back at the end.
 *
 * Key design choices:
 *  - Deterministic: every element is reduced along one fixed tree, and
 *    each pairwise reduction puts the lower ranks' operand first, so all
 *    members end with bitwise identical results.  Recursive doubling
 *    computes each element on every member, where the order matters
 *    (max(-0.0, +0.0) keeps its first operand); the other two reduce each
 *    element on one member and copy it.
 *  - Pipelined: sending and receiving run at once on non-blocking
 *    sockets under one poll, and received bytes are reduced as soon as
 *    whole elements arrive, so the network and the adds overlap (and, in
 *    the ring, consecutive steps too).
 *  - Blocking waits: a member with nothing to do sleeps in poll() rather
 *    than spinning; with more members than cores (4 on 2 here) a spinning
 *    member takes the core its peer needs (measured: 22 us per hop with
 *    poll, 85 us spinning with sched_yield, milliseconds spinning hard).
 *  - Bounded: no progress for timeout_ms (a dead or stopped peer) is an
 *    error naming the neighbour, never a hang.
 *  - One accept loop: the greeters (sf__greet_accept) read the greetings
 *    of connections on a data-plane listener side by side, each within
 *    its own deadline; sf__ring_connect and group_ring.c's acceptor thread
 *    both take their links through it, each with its own MAC check and
 *    refusal messages.
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


size_t sf__dtype_size(sf__dtype t) {
  switch (t) {
  case SF__DT_F32: case SF__DT_I32: return 4;
  default: return 8;
  }
}

/* ------------------------------------------------------------ reduce */

/* d op= s, elementwise.  first: s is the first operand (it comes from
 * lower ranks), so max/min ties and NaNs resolve the same way on every
 * member whichever side it stands.  The stores are unconditional so that
 * the loops vectorize (a compare and a blend, or maxps/minps, whose
 * operand order matches these expressions exactly). */
#define REDUCE_LOOP(T)                                                  \
  do {                                                                  \
    T *restrict d = dst;                                                \
    const T *restrict s = src;                                          \
    switch (op * 2 + first) {                                           \
    case SF__OP_SUM * 2: for (size_t i = 0; i < n; i++) d[i] = d[i] + s[i]; break; \
    case SF__OP_SUM * 2 + 1: for (size_t i = 0; i < n; i++) d[i] = s[i] + d[i]; break; \
    case SF__OP_MAX * 2: for (size_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; break; \
    case SF__OP_MAX * 2 + 1: for (size_t i = 0; i < n; i++) d[i] = d[i] > s[i] ? d[i] : s[i]; break; \
    case SF__OP_MIN * 2: for (size_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; break; \
    case SF__OP_MIN * 2 + 1: for (size_t i = 0; i < n; i++) d[i] = d[i] < s[i] ? d[i] : s[i]; break; \
    }                                                                   \
  } while (0)

/* gcc 12 at -O2 leaves these loops scalar (its very cheap cost model
 * gives up on a loop whose count is not known), so the adds ran one
 * element at a time; clang vectorizes them at -O2 already.  Lane-wise SSE
 * adds, compares and blends round exactly as the scalar code does, so
 * the results stay bitwise the same. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static void reduce(void *restrict dst, const void *restrict src, size_t n, sf__dtype t,
                   sf__redop op, int first) {
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
  *r = (sf__ring){.rank = rank, .size = size, .prev_fd = prev_fd, .next_fd = next_fd,
                  .timeout_ms = 30000, .segment = 64 << 10, .rd_max = SF__RING_RD_MAX,
                  .halving_max = SF__RING_HALVING_MAX};
  if (prev_fd >= 0)
    tune(prev_fd);
  if (next_fd >= 0 && next_fd != prev_fd)
    tune(next_fd);
}

void sf__ring_link(sf__ring *r, int peer, int fd) {
  if (r->nlinks == SF__RING_LINKS) {
    close(fd);
    return;
  }
  tune(fd);
  r->links[r->nlinks].rank = peer;
  r->links[r->nlinks++].fd = fd;
}

void sf__ring_close(sf__ring *r) {
  if (r->prev_fd >= 0)
    close(r->prev_fd);
  if (r->next_fd >= 0 && r->next_fd != r->prev_fd)
    close(r->next_fd);
  for (int i = 0; i < r->nlinks; i++)
    close(r->links[i].fd);
  free(r->scratch);
  r->prev_fd = r->next_fd = -1;
  r->nlinks = 0;
  r->scratch = NULL;
  r->scratch_n = 0;
}

/* ----------------------------------------------------------- topology */

/* Folding a group of p into the largest power of two p2 <= p: the first
 * 2*rem members pair up, the even one of each pair sits out (-1) and the
 * odd one stands for both; the others move down by rem.  Renumbered ranks
 * keep the order of the real ones, so a block of consecutive renumbered
 * ranks always stands for a block of consecutive real ones. */
static int pow2_floor(int p) {
  int p2 = 1;
  while (p2 * 2 <= p)
    p2 *= 2;
  return p2;
}

static int fold_rank(int p, int rank) {
  int rem = p - pow2_floor(p);
  if (rank < 2 * rem)
    return rank % 2 ? rank / 2 : -1;
  return rank - rem;
}

static int unfold_rank(int p, int nr) {
  int rem = p - pow2_floor(p);
  return nr < rem ? 2 * nr + 1 : nr + rem;
}

/* Whether a and b exchange directly in recursive doubling or halving. */
static bool partners(int p, int a, int b) {
  int rem = p - pow2_floor(p);
  if (a > b) {
    int t = a;
    a = b;
    b = t;
  }
  if (b < 2 * rem && a % 2 == 0 && b == a + 1)
    return true; /* the fold */
  int na = fold_rank(p, a), nb = fold_rank(p, b);
  return na >= 0 && nb >= 0 && __builtin_popcount((unsigned)(na ^ nb)) == 1;
}

bool sf__ring_needs_link(int p, int a, int b) {
  if (a == b || (a + 1) % p == b || (b + 1) % p == a)
    return false;
  return partners(p, a, b);
}

/* The socket to use with partner peer.  A ring neighbour's link serves
 * both directions; with two members each is the other's next and prev,
 * and both use the link the lower one dialed. */
static int link_fd(const sf__ring *r, int peer) {
  int next = (r->rank + 1) % r->size, prev = (r->rank + r->size - 1) % r->size;
  if (peer == next && (peer != prev || r->rank < peer))
    return r->next_fd;
  if (peer == prev)
    return r->prev_fd;
  for (int i = 0; i < r->nlinks; i++)
    if (r->links[i].rank == peer)
      return r->links[i].fd;
  return -1;
}

/* Whether every partner link is there (sf__ring_init alone builds only
 * the ring). */
static bool have_links(const sf__ring *r) {
  int p = r->size, nr = fold_rank(p, r->rank), p2 = pow2_floor(p);
  if (r->rank < 2 * (p - p2) && link_fd(r, r->rank ^ 1) < 0)
    return false;
  for (int mask = 1; nr >= 0 && mask < p2; mask <<= 1)
    if (link_fd(r, unfold_rank(p, nr ^ mask)) < 0)
      return false;
  return true;
}

int sf__ring_listen(const char *addr, uint16_t *port, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_PASSIVE, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  int g = getaddrinfo(addr, "0", &hints, &ai);
  if (g)
    return sf__net_fail(err, errlen, "bad data-plane address %s: %s", addr, gai_strerror(g));
  /* Non-blocking: whoever accepts polls first, and a connection reset
   * between the poll and the accept must not block it. */
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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
    int left = (int)(deadline - sf__now_ms());
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

int sf__ring_dial(const sf__peer *p, int64_t deadline, char *err, size_t errlen) {
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
    int left = (int)(deadline - sf__now_ms());
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

/* Dials peer and sends the greeting; the socket, or -1 with err. */
static int dial_greet(const sf__peer *peers, int peer, uint64_t group, int rank,
                      const uint8_t secret[SF__SECRET_LEN], int64_t deadline, char *err,
                      size_t errlen) {
  int fd = sf__ring_dial(&peers[peer], deadline, err, errlen);
  if (fd < 0)
    return -1;
  uint8_t hello[44];
  for (int i = 0; i < 8; i++)
    hello[i] = (uint8_t)(group >> (8 * i));
  for (int i = 0; i < 4; i++)
    hello[8 + i] = (uint8_t)((uint32_t)rank >> (8 * i));
  link_mac(secret, group, (uint32_t)rank, hello + 12);
  if (io_all(fd, hello, sizeof hello, true, deadline)) {
    close(fd);
    return sf__net_fail(err, errlen, "cannot greet ring peer %s:%u", peers[peer].addr,
                        peers[peer].port);
  }
  return fd;
}

/* ---------------------------------------------------------- greeters */

void sf__greeters_init(sf__greeters *s, int slots, bool nonce,
                       bool (*check)(void *ctx, const sf__greeter *g, uint64_t id,
                                     uint32_t rank),
                       void (*drop)(void *ctx, const char *why), void *ctx) {
  memset(s, 0, sizeof *s);
  s->slots = slots < 1 ? 1 : slots > SF__GREET_SLOTS_MAX ? SF__GREET_SLOTS_MAX : slots;
  s->timeout_ms = SF__GREET_TIMEOUT_MS;
  s->nonce = nonce;
  s->check = check;
  s->drop = drop;
  s->ctx = ctx;
  for (int i = 0; i < SF__GREET_SLOTS_MAX; i++)
    s->g[i].fd = -1;
}

void sf__greeters_close(sf__greeters *s) {
  for (int i = 0; i < s->slots; i++)
    if (s->g[i].fd >= 0) {
      close(s->g[i].fd);
      s->g[i].fd = -1;
    }
}

/* Closes g's connection, saying why through the owner's drop hook. */
static void greeter_drop(sf__greeters *s, sf__greeter *g, const char *why) {
  if (s->drop)
    s->drop(s->ctx, why);
  close(g->fd);
  g->fd = -1;
}

/* A new connection into a free slot (the oldest is dropped when none is);
 * a nonce goes out at once where the protocol has one (32 bytes into an
 * empty socket buffer never wait). */
static void greeter_add(sf__greeters *s, int listen_fd) {
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return;
  sf__greeter *g = NULL;
  for (int i = 0; i < s->slots && !g; i++)
    if (s->g[i].fd < 0)
      g = &s->g[i];
  if (!g) {
    g = &s->g[0];
    for (int i = 1; i < s->slots; i++)
      if (s->g[i].deadline < g->deadline)
        g = &s->g[i];
    greeter_drop(s, g, "too many connections greeting at once; dropped the oldest");
  }
  *g = (sf__greeter){.fd = fd, .deadline = sf__now_ms() + s->timeout_ms};
  if (s->nonce && (sf__random_bytes(g->nonce, sizeof g->nonce) ||
                   send(fd, g->nonce, sizeof g->nonce, MSG_NOSIGNAL | MSG_DONTWAIT) !=
                       (ssize_t)sizeof g->nonce))
    greeter_drop(s, g, "cannot send the nonce");
}

/* Reads what g has sent; its socket once a complete greeting passes the
 * owner's check (id and rank in *id, *rank), else -1.  Nothing beyond
 * the greeting is read before the check. */
static int greeter_read(sf__greeters *s, sf__greeter *g, uint64_t *id, uint32_t *rank) {
  ssize_t k = recv(g->fd, g->got + g->n, sizeof g->got - g->n, MSG_DONTWAIT);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return -1;
  if (k <= 0) {
    greeter_drop(s, g, "bad greeting (closed before it was complete)");
    return -1;
  }
  g->n += (size_t)k;
  if (g->n < sizeof g->got)
    return -1;
  uint64_t grp = 0;
  uint32_t from = 0;
  for (int i = 0; i < 8; i++)
    grp |= (uint64_t)g->got[i] << (8 * i);
  for (int i = 0; i < 4; i++)
    from |= (uint32_t)g->got[8 + i] << (8 * i);
  int fd = g->fd;
  g->fd = -1;
  if (s->check(s->ctx, g, grp, from)) {
    *id = grp;
    *rank = from;
    return fd;
  }
  close(fd);
  return -1;
}

int sf__greet_accept(sf__greeters *s, int listen_fd, int64_t deadline, uint64_t *id,
                     uint32_t *rank) {
  char why[64];
  for (;;) {
    int64_t t = sf__now_ms(), wake = deadline;
    if (t >= deadline)
      return -1;
    struct pollfd pf[1 + SF__GREET_SLOTS_MAX];
    sf__greeter *who[1 + SF__GREET_SLOTS_MAX];
    int np = 0;
    pf[np] = (struct pollfd){listen_fd, POLLIN, 0};
    who[np++] = NULL;
    for (int i = 0; i < s->slots; i++) {
      sf__greeter *g = &s->g[i];
      if (g->fd < 0)
        continue;
      if (t >= g->deadline) {
        snprintf(why, sizeof why, "no greeting within %d s", (s->timeout_ms + 999) / 1000);
        greeter_drop(s, g, why);
        continue;
      }
      if (g->deadline < wake)
        wake = g->deadline;
      pf[np] = (struct pollfd){g->fd, POLLIN, 0};
      who[np++] = g;
    }
    if (poll(pf, (nfds_t)np, (int)(wake - t)) <= 0)
      continue;
    for (int i = 1; i < np; i++)
      if (pf[i].revents && who[i]->fd >= 0) {
        int fd = greeter_read(s, who[i], id, rank);
        if (fd >= 0)
          return fd;
      }
    if (pf[0].revents & POLLIN)
      greeter_add(s, listen_fd);
  }
}

/* ------------------------------------------------------- ring links */

/* The state the self-test ring's greeting check needs. */
typedef struct {
  uint64_t group;
  const uint8_t *secret;
} ring_greet;

/* A greeting of this group proving the secret; a refusal is said on
 * stderr (a stale ring or a stranger). */
static bool ring_check(void *ctx, const sf__greeter *g, uint64_t grp, uint32_t rank) {
  const ring_greet *rg = ctx;
  uint8_t want[32];
  link_mac(rg->secret, grp, rank, want);
  bool mac = sf__ct_equal(want, g->got + 12, 32);
  if (grp == rg->group && mac)
    return true;
  fprintf(stderr, "sflow: refused a ring connection (group %llu, rank %u): %s\n",
          (unsigned long long)grp, rank, mac ? "unexpected group" : "wrong HMAC");
  return false;
}

/* Every member first dials (its successor, then its partners above it)
 * and then accepts (its predecessor and its partners below it): dialing
 * never waits for the other side to accept, since the listener's backlog
 * completes the connection, so no order of members can deadlock. */
int sf__ring_connect(sf__ring *r, uint64_t group, int rank, int size, const sf__peer *peers,
                     int listen_fd, const uint8_t secret[SF__SECRET_LEN], int timeout_ms,
                     char *err, size_t errlen) {
  sf__ring_init(r, rank, size, -1, -1);
  r->timeout_ms = timeout_ms;
  if (size == 1)
    return 0;
  int64_t deadline = sf__now_ms() + timeout_ms;
  int next = (rank + 1) % size, prev = (rank + size - 1) % size, waiting = 1;
  /* Connections accepted but not yet greeted are read side by side, so a
   * stranger that connects and says nothing holds up no member's link. */
  ring_greet rg = {group, secret};
  sf__greeters gs;
  sf__greeters_init(&gs, 16, false, ring_check, NULL, &rg);
  r->next_fd = dial_greet(peers, next, group, rank, secret, deadline, err, errlen);
  if (r->next_fd < 0)
    goto fail;
  tune(r->next_fd);
  for (int peer = 0; peer < size; peer++) {
    if (!sf__ring_needs_link(size, rank, peer))
      continue;
    if (peer < rank) {
      waiting++;
      continue;
    }
    int fd = dial_greet(peers, peer, group, rank, secret, deadline, err, errlen);
    if (fd < 0)
      goto fail;
    sf__ring_link(r, peer, fd);
  }
  while (waiting > 0) {
    uint64_t grp;
    uint32_t from;
    int fd = sf__greet_accept(&gs, listen_fd, deadline, &grp, &from);
    if (fd < 0) {
      int missing = prev;
      for (int peer = 0; r->prev_fd >= 0 && peer < rank; peer++)
        if (sf__ring_needs_link(size, rank, peer) && link_fd(r, peer) < 0) {
          missing = peer;
          break;
        }
      sf__net_fail(err, errlen, "ring member %d did not connect within %d ms", missing,
                   timeout_ms);
      goto fail;
    }
    if (from == (uint32_t)prev && r->prev_fd < 0) {
      tune(fd);
      r->prev_fd = fd;
    } else if (from < (uint32_t)rank && sf__ring_needs_link(size, rank, (int)from) &&
               link_fd(r, (int)from) < 0) {
      sf__ring_link(r, (int)from, fd);
    } else {
      fprintf(stderr, "sflow: refused a ring connection (group %llu, rank %u): "
              "unexpected rank\n", (unsigned long long)group, from);
      close(fd);
      continue;
    }
    waiting--;
  }
  sf__greeters_close(&gs);
  return 0;
fail:
  sf__greeters_close(&gs);
  sf__ring_close(r);
  return -1;
}

/* ------------------------------------------------------------ engine */

/* One non-blocking send: the bytes the kernel took, 0 when the socket is
 * full, -1 (with err) when the connection failed. */
static ssize_t send_some(const sf__ring *r, int fd, int to, const void *p, size_t n, char *err,
                         size_t errlen) {
  ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (k >= 0)
    return k;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    return 0;
  return sf__net_fail(err, errlen, "ring rank %d: sending to rank %d failed: %s", r->rank, to,
                      strerror(errno));
}

/* One non-blocking receive: the bytes read, 0 when none are there, -1
 * (with err) when the peer closed the connection or it failed. */
static ssize_t recv_some(const sf__ring *r, int fd, int from, void *p, size_t n, char *err,
                         size_t errlen) {
  ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
  if (k > 0)
    return k;
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  return sf__net_fail(err, errlen, "ring rank %d: rank %d closed the connection", r->rank, from);
}

/* Reduces the whole elements among the first `have` bytes of the window
 * into dst and moves the bytes of an element cut by the last receive to
 * the window's start; returns the bytes reduced. */
static size_t reduce_window(uint8_t *win, size_t have, uint8_t *dst, sf__dtype t, sf__redop op,
                            int first) {
  size_t es = sf__dtype_size(t), whole = have / es * es;
  if (whole) {
    reduce(dst, win, whole / es, t, op, first);
    memmove(win, win + whole, have - whole);
  }
  return whole;
}

/* Sleeps until sfd can take bytes (out) or rfd has some (in).  *last is
 * when the wait began (0: none yet; the clock is read only then, not on
 * every pass); timeout_ms without progress is an error. */
static int wait_io(const sf__ring *r, int sfd, bool out, int rfd, bool in, int64_t *last,
                   char *err, size_t errlen) {
  if (!*last)
    *last = sf__now_ms();
  struct pollfd pf[2] = {{sfd, out ? POLLOUT : 0, 0}, {rfd, in ? POLLIN : 0, 0}};
  int left = (int)(*last + r->timeout_ms - sf__now_ms());
  if (left <= 0 || (poll(pf, 2, left) == 0 && sf__now_ms() - *last >= r->timeout_ms))
    return sf__net_fail(err, errlen, "ring rank %d: no progress for %d ms (a peer died or stalled)",
                        r->rank, r->timeout_ms);
  return 0;
}

/* One step: send [sbuf, sbuf+sn) to member `to` while receiving rn bytes
 * from member `from` into rbuf; when red_dst is set, received whole
 * elements are reduced into red_dst as they arrive, with the received
 * operand first when `first` is set, and rbuf is a window of `segment`
 * bytes (plus one element) that every receive reuses: the bytes the kernel
 * copies in are still in cache when the reduction reads them, instead of
 * streaming a chunk-sized scratch buffer through memory twice.  Sends and
 * plain receives ask for everything that is left: the kernel moves what
 * the socket holds, and fewer calls cost less CPU. */
typedef struct step {
  int to, from;
  const uint8_t *sbuf;
  size_t sn;
  uint8_t *rbuf;
  size_t rn;
  uint8_t *red_dst;
  sf__dtype t;
  sf__redop op;
  int first;
} step;

static int run_step(sf__ring *r, const step *s, char *err, size_t errlen) {
  size_t sent = 0, got = 0, reduced = 0;
  int sfd = s->sn ? link_fd(r, s->to) : -1, rfd = s->rn ? link_fd(r, s->from) : -1;
  int64_t last = 0;
  while (sent < s->sn || got < s->rn) {
    ssize_t ks = 0, kr = 0;
    if (sent < s->sn && (ks = send_some(r, sfd, s->to, s->sbuf + sent, s->sn - sent, err,
                                        errlen)) < 0)
      return -1;
    sent += (size_t)ks;
    if (got < s->rn) {
      size_t part = got - reduced; /* bytes of an element cut by the last receive */
      size_t want = s->rn - got < r->segment || !s->red_dst ? s->rn - got : r->segment;
      if ((kr = recv_some(r, rfd, s->from, s->red_dst ? s->rbuf + part : s->rbuf + got, want, err,
                          errlen)) < 0)
        return -1;
      got += (size_t)kr;
      if (kr && s->red_dst)
        reduced += reduce_window(s->rbuf, got - reduced, s->red_dst + reduced, s->t, s->op,
                                 s->first);
    }
    if (ks || kr)
      last = 0;
    else if (wait_io(r, sfd, sent < s->sn, rfd, got < s->rn, &last, err, errlen))
      return -1;
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

/* ----------------------------------------------------------- allreduce */

/* Chunk c of count elements cut into size parts: first element and length. */
static void chunk(size_t count, int size, int c, size_t *off, size_t *len) {
  size_t base = count / (size_t)size, extra = count % (size_t)size;
  *off = (size_t)c * base + ((size_t)c < extra ? (size_t)c : extra);
  *len = base + ((size_t)c < extra ? 1 : 0);
}

/* The ring as one stream.  In step s member rank sends chunk rank - s and
 * receives chunk rank - s - 1 (mod n), for s = 0 .. 2(n-1)-1: reduced into
 * its own copy in the first n-1 steps (reduce-scatter), copied over it in
 * the rest (allgather).  The chunk sent in step s+1 is the one received
 * in step s, across the boundary between the phases too, so the send
 * stream is this member's own chunk followed by the receive stream less
 * its last chunk, and a byte may leave as soon as it has been received
 * and, in the reduce-scatter, reduced.  One poll loop runs both streams,
 * the sends bounded by that progress, so a chunk moves on as it arrives
 * instead of waiting for all of it (Open MPI's segmented ring,
 * NCCL's pipelined ring).  Receives are never held back, so members
 * cannot wait on each other in a cycle.
 *
 * Bytes are read from b only after the member's own contribution to them
 * is final, and the allgather overwrites a chunk only with bytes whose
 * final value already depends on every byte this member sent of it, so
 * the overlap never reads or overwrites a byte too early.  The reduction
 * order is the step-by-step ring's. */
typedef struct stream {
  int step;       /* the step it is in */
  size_t off;     /* bytes done in that step: sent, or received */
  size_t total;   /* bytes done in all steps */
  size_t reduced; /* of those received in the step, the bytes reduced */
} stream;

/* Chunk c (mod n) of the buffer in bytes: its length, *off its offset. */
static size_t ring_chunk(size_t count, int n, int c, size_t es, size_t *off) {
  size_t o, len;
  chunk(count, n, ((c % n) + n) % n, &o, &len);
  *off = o * es;
  return len * es;
}

/* The chunk a stream is in, after moving past finished steps and empty
 * chunks (count < n): in step s it is chunk base - s, where base is the
 * member's rank for its sends and its predecessor's for its receives. */
static size_t stream_chunk(stream *st, size_t count, int n, int base, size_t es, size_t *off) {
  size_t len = ring_chunk(count, n, base - st->step, es, off);
  while (st->off == len) {
    st->step++;
    st->off = st->reduced = 0;
    len = ring_chunk(count, n, base - st->step, es, off);
  }
  return len;
}

static int allreduce_ring(sf__ring *r, uint8_t *b, size_t count, sf__dtype t, sf__redop op,
                          char *err, size_t errlen) {
  int n = r->size, steps = 2 * (n - 1), next = (r->rank + 1) % n, prev = (r->rank + n - 1) % n;
  size_t es = sf__dtype_size(t), off, own = ring_chunk(count, n, r->rank, es, &off);
  if (!scratch(r, r->segment + es))
    return sf__net_fail(err, errlen, "out of memory for a %zu-byte ring buffer", r->segment);
  size_t rtotal = 0; /* the receive stream's length; the send stream's is own + that - last */
  for (int s = 0; s < steps; s++)
    rtotal += ring_chunk(count, n, prev - s, es, &off);
  size_t stotal = own + rtotal - ring_chunk(count, n, prev - (steps - 1), es, &off);
  int sfd = link_fd(r, next), rfd = link_fd(r, prev);
  stream snd = {0, 0, 0, 0}, rcv = {0, 0, 0, 0};
  size_t ready = own; /* bytes of the send stream that may leave (<= stotal) */
  uint8_t *win = r->scratch;
  int64_t last = 0;
  while (snd.total < stotal || rcv.total < rtotal) {
    ssize_t ks = 0, kr = 0;
    if (snd.total < ready) {
      /* As much as may leave: the kernel takes what fits in the socket,
       * and fewer, larger sends cost less CPU than segment-sized ones. */
      size_t so, sl = stream_chunk(&snd, count, n, r->rank, es, &so);
      size_t want = ready - snd.total < sl - snd.off ? ready - snd.total : sl - snd.off;
      if ((ks = send_some(r, sfd, next, b + so + snd.off, want, err, errlen)) < 0)
        return -1;
      snd.off += (size_t)ks;
      snd.total += (size_t)ks;
    }
    if (rcv.total < rtotal) {
      /* Reduce-scatter receives go through the window (segment bytes, so
       * the adds read them from cache); allgather ones straight into b. */
      size_t ro, rl = stream_chunk(&rcv, count, n, prev, es, &ro);
      bool rs = rcv.step < n - 1;
      size_t part = rcv.off - rcv.reduced; /* bytes of an element cut by the last receive */
      size_t want = rl - rcv.off < r->segment || !rs ? rl - rcv.off : r->segment;
      if ((kr = recv_some(r, rfd, prev, rs ? win + part : b + ro + rcv.off, want, err,
                          errlen)) < 0)
        return -1;
      rcv.off += (size_t)kr;
      rcv.total += (size_t)kr;
      if (kr && rs)
        rcv.reduced += reduce_window(win, rcv.off - rcv.reduced, b + ro + rcv.reduced, t, op, 0);
      /* Everything received and reduced may leave, but for the last chunk. */
      ready = own + rcv.total - (rcv.off - (rs ? rcv.reduced : rcv.off));
      ready = ready < stotal ? ready : stotal;
    }
    if (ks || kr)
      last = 0;
    else if (wait_io(r, sfd, snd.total < ready, rfd, rcv.total < rtotal, &last, err, errlen))
      return -1;
  }
  return 0;
}

/* The fold of a non-power-of-two group, before (in = true) and after the
 * algorithm proper: the even member of each of the first rem pairs sends
 * its buffer to the odd one, which reduces it in first (lower rank), and
 * later gets the finished buffer back.  Returns the renumbered rank, -1
 * for a member that sits out, or -2 on error. */
static int fold(sf__ring *r, uint8_t *b, size_t count, sf__dtype t, sf__redop op, bool in,
                char *err, size_t errlen) {
  int nr = fold_rank(r->size, r->rank);
  size_t bytes = count * sf__dtype_size(t);
  if (r->rank >= 2 * (r->size - pow2_floor(r->size)))
    return nr;
  int peer = r->rank ^ 1;
  step st = {peer, peer, NULL, 0, NULL, 0, NULL, t, op, 1};
  if ((nr < 0) == in) { /* the even one sends first, the odd one sends last */
    st.sbuf = b;
    st.sn = bytes;
  } else {
    st.rbuf = in ? r->scratch : b;
    st.rn = bytes;
    st.red_dst = in ? b : NULL;
  }
  return run_step(r, &st, err, errlen) ? -2 : nr;
}

/* Recursive doubling: in round k partners nr and nr ^ 2^k swap whole
 * buffers and both reduce, the lower side's operand first. */
static int allreduce_rd(sf__ring *r, uint8_t *b, size_t count, sf__dtype t, sf__redop op,
                        char *err, size_t errlen) {
  size_t bytes = count * sf__dtype_size(t);
  if (!scratch(r, bytes))
    return sf__net_fail(err, errlen, "out of memory for a %zu-byte buffer", bytes);
  int nr = fold(r, b, count, t, op, true, err, errlen), p2 = pow2_floor(r->size);
  if (nr == -2)
    return -1;
  for (int mask = 1; nr >= 0 && mask < p2; mask <<= 1) {
    int peer = unfold_rank(r->size, nr ^ mask);
    step st = {peer, peer, b, bytes, r->scratch, bytes, NULL, t, op, 0};
    if (run_step(r, &st, err, errlen))
      return -1;
    /* Not as it arrives: b is still being sent. */
    reduce(b, r->scratch, count, t, op, peer < r->rank);
  }
  return fold(r, b, count, t, op, false, err, errlen) == -2 ? -1 : 0;
}

/* Recursive halving and doubling (Rabenseifner): in round k of the
 * reduce-scatter partners nr and nr ^ 2^k split the range they share, each
 * sends the half it gives up and reduces the other half as it arrives;
 * after log2(p2) rounds each member owns 1/p2 of the result, and the
 * allgather retraces the rounds backwards, swapping finished halves. */
static int allreduce_halving(sf__ring *r, uint8_t *b, size_t count, sf__dtype t, sf__redop op,
                             char *err, size_t errlen) {
  size_t es = sf__dtype_size(t);
  if (!scratch(r, r->segment + es))
    return sf__net_fail(err, errlen, "out of memory for a %zu-byte buffer", r->segment);
  int nr = fold(r, b, count, t, op, true, err, errlen), p2 = pow2_floor(r->size), k = 0;
  if (nr == -2)
    return -1;
  size_t lo[32], hi[32]; /* the range held before round k */
  lo[0] = 0;
  hi[0] = count;
  for (int mask = 1; nr >= 0 && mask < p2; mask <<= 1, k++) {
    int peer = unfold_rank(r->size, nr ^ mask);
    size_t mid = lo[k] + (hi[k] - lo[k]) / 2;
    bool low = (nr & mask) == 0; /* keeps the lower half */
    size_t keep = low ? lo[k] : mid, keep_n = low ? mid - lo[k] : hi[k] - mid;
    size_t give = low ? mid : lo[k], give_n = low ? hi[k] - mid : mid - lo[k];
    step st = {peer, peer, b + give * es, give_n * es, r->scratch, keep_n * es, b + keep * es,
               t, op, peer < r->rank};
    if (run_step(r, &st, err, errlen))
      return -1;
    lo[k + 1] = keep;
    hi[k + 1] = keep + keep_n;
  }
  for (int mask = p2 >> 1; nr >= 0 && mask >= 1; mask >>= 1, k--) {
    int peer = unfold_rank(r->size, nr ^ mask);
    /* Round k-1 split [lo, hi) of k-1; this member holds [lo, hi) of k,
     * one half of it, and receives the other half. */
    size_t ro = (nr & mask) == 0 ? hi[k] : lo[k - 1];
    size_t rn = hi[k - 1] - lo[k - 1] - (hi[k] - lo[k]);
    step st = {peer, peer, b + lo[k] * es, (hi[k] - lo[k]) * es, b + ro * es, rn * es, NULL, t,
               op, 0};
    if (run_step(r, &st, err, errlen))
      return -1;
  }
  return fold(r, b, count, t, op, false, err, errlen) == -2 ? -1 : 0;
}

int sf__ring_allreduce(sf__ring *r, void *buf, size_t count, sf__dtype t, sf__redop op,
                       char *err, size_t errlen) {
  if (r->size == 1 || count == 0)
    return 0;
  size_t bytes = count * sf__dtype_size(t), halving_max = r->halving_max;
  bool linked = have_links(r);
  if (pow2_floor(r->size) != r->size && halving_max != SIZE_MAX)
    halving_max = 0; /* the fold's two whole-buffer transfers cost more */
  if (linked && bytes <= r->rd_max)
    return allreduce_rd(r, buf, count, t, op, err, errlen);
  /* Halving needs at least one element per member after the last split. */
  if (linked && bytes <= halving_max && count >= (size_t)r->size)
    return allreduce_halving(r, buf, count, t, op, err, errlen);
  return allreduce_ring(r, buf, count, t, op, err, errlen);
}

/* Pipelined ring broadcast: the root streams the buffer to its successor,
 * and every other member but the last forwards each byte as soon as it
 * has arrived (the ring allreduce's bound, with one chunk), so no member
 * waits for a whole segment before passing it on. */
int sf__ring_broadcast(sf__ring *r, void *buf, size_t bytes, int root, char *err,
                       size_t errlen) {
  int n = r->size;
  if (n == 1 || bytes == 0)
    return 0;
  int pos = ((r->rank - root) % n + n) % n; /* distance from the root */
  int next = (r->rank + 1) % n, prev = (r->rank + n - 1) % n;
  uint8_t *b = buf;
  size_t sn = pos < n - 1 ? bytes : 0, rn = pos > 0 ? bytes : 0, sent = 0, got = 0;
  int sfd = sn ? link_fd(r, next) : -1, rfd = rn ? link_fd(r, prev) : -1;
  int64_t last = 0;
  while (sent < sn || got < rn) {
    ssize_t ks = 0, kr = 0;
    size_t ready = pos == 0 ? sn : got < sn ? got : sn;
    if (sent < ready && (ks = send_some(r, sfd, next, b + sent, ready - sent, err, errlen)) < 0)
      return -1;
    sent += (size_t)ks;
    if (got < rn && (kr = recv_some(r, rfd, prev, b + got, rn - got, err, errlen)) < 0)
      return -1;
    got += (size_t)kr;
    ready = pos == 0 ? sn : got < sn ? got : sn;
    if (ks || kr)
      last = 0;
    else if (wait_io(r, sfd, sent < ready, rfd, got < rn, &last, err, errlen))
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
