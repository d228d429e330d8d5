/*
 * conn.c — framed connections with deadlines over the codec of wire.c,
 * and the HMAC challenge-response handshake both sides run on them.
 *
 * Key design choice: a connection reads nothing but the handshake's
 * frames (at most 72 bytes) until its peer has proved the run's secret,
 * and never more than the frame it is completing needs: every header is
 * judged against its type's largest length (sf__wire_max_len) before any
 * room is made for it, so a stranger costs a few hundred bytes whatever
 * it claims.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto.h"

/* The frames of the handshake: all a connection reads before its peer
 * has proved the secret. */
static bool handshake_type(int type) {
  return type == SF__F_CHALLENGE || type == SF__F_AUTH || type == SF__F_AUTH_OK;
}
#define HANDSHAKE_MAX (4 + 4 + 32 + 32) /* sf__wire_max_len(SF__F_AUTH) */

/* -------------------------------------------------------- connections */

void sf__conn_init(sf__conn *c, int fd) { *c = (sf__conn){.fd = fd}; }

void sf__conn_close(sf__conn *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->rx);
  *c = (sf__conn){.fd = -1};
}

static int wait_fd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int left = deadline < 0 ? -1 : (int)(deadline - sf__now_ms());
    if (deadline >= 0 && left <= 0)
      return 0;
    struct pollfd p = {fd, ev, 0};
    int k = poll(&p, 1, left);
    if (k < 0 && errno == EINTR)
      continue;
    return k;
  }
}

int sf__conn_send(sf__conn *c, const sf__frame *f, int timeout_ms, char *err, size_t errlen) {
  sf__wbuf b = {0};
  if (sf__wire_encode(&b, f)) {
    sf__wbuf_free(&b);
    return sf__net_fail(err, errlen, "cannot encode %s frame", sf__wire_type_name(f->type));
  }
  int64_t deadline = timeout_ms < 0 ? -1 : sf__now_ms() + timeout_ms;
  size_t off = 0;
  while (off < b.n) {
    ssize_t k = send(c->fd, b.p + off, b.n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (wait_fd(c->fd, POLLOUT, deadline) > 0)
        continue;
      sf__wbuf_free(&b);
      return sf__net_fail(err, errlen, "timed out sending a %s frame", sf__wire_type_name(f->type));
    }
    sf__wbuf_free(&b);
    return sf__net_fail(err, errlen, "send failed: %s", strerror(errno));
  }
  sf__wbuf_free(&b);
  return 0;
}

/* How many bytes the frame at p takes (4 + len) once its header is there,
 * 0 before, -1 when the header is bad for this connection (the decoder or
 * sf__conn_next says why). */
static long frame_extent(const sf__conn *c, const uint8_t *p, size_t n) {
  if (n < SF__FRAME_HDR)
    return 0;
  uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
  if (p[4] != SF__WIRE_VERSION || p[5] == 0 || p[5] >= SF__F_COUNT || (p[6] | p[7]) ||
      len < SF__FRAME_HDR - 4 || len > sf__wire_max_len(p[5]) ||
      (!c->authed && !handshake_type(p[5])))
    return -1;
  return (long)len + 4;
}

/* Moves c->scan past the complete frames buffered; *want: how far the
 * buffer must reach to complete the next one (or to hold its header).
 * -1 when a header is bad. */
static int scan_frames(sf__conn *c, size_t *want) {
  for (;;) {
    long k = c->rx ? frame_extent(c, c->rx + c->scan, c->rx_n - c->scan) : 0;
    if (k < 0)
      return -1;
    if (k == 0 || c->rx_n - c->scan < (size_t)k) {
      *want = c->scan + (k ? (size_t)k : SF__FRAME_HDR);
      return 0;
    }
    c->scan += (size_t)k;
  }
}

/* Complete frames a fill leaves for the caller to take before it reads on. */
#define FILL_BATCH ((size_t)1 << 20)
/* Bytes one fill reads at most: a checkpoint frame of hundreds of MB (a
 * fine-tuned BERT's state) arriving as fast as it is read kept the head's
 * control loop inside one fill, sending no heartbeat, for seconds, so the
 * workers gave the head up.  Level-triggered poll brings the caller back. */
#define FILL_MAX ((size_t)8 << 20)

/* The buffer grows only toward frames whose headers passed their type's
 * limit, and before authentication it holds one handshake frame: what is
 * read is exactly what that frame lacks. */
int sf__conn_fill(sf__conn *c) {
  size_t got = 0;
  for (;;) {
    size_t want;
    if (scan_frames(c, &want))
      return 1; /* sf__conn_next says what is wrong */
    size_t done = c->scan - c->pending; /* complete, not yet taken */
    if (done && (!c->authed || done >= FILL_BATCH))
      return 1;
    size_t end = c->authed ? c->rx_n + 65536 : want;
    if (end > c->rx_cap) {
      size_t cap = !c->authed ? 2 * HANDSHAKE_MAX : c->rx_cap ? c->rx_cap * 2 : 131072;
      while (cap < end)
        cap *= 2;
      uint8_t *p = realloc(c->rx, cap);
      if (!p)
        return -1;
      c->rx = p;
      c->rx_cap = cap;
    }
    size_t ask = c->authed ? c->rx_cap - c->rx_n : want - c->rx_n;
    ssize_t k = recv(c->fd, c->rx + c->rx_n, ask, MSG_DONTWAIT);
    if (k > 0) {
      c->rx_n += (size_t)k;
      got += (size_t)k;
      if ((size_t)k < ask || got >= FILL_MAX)
        return 1;
      continue;
    }
    if (k == 0)
      return 0;
    if (errno == EINTR)
      continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
  }
}

int sf__conn_next(sf__conn *c, sf__frame *f, char *err, size_t errlen) {
  if (c->pending) {
    memmove(c->rx, c->rx + c->pending, c->rx_n - c->pending);
    c->rx_n -= c->pending;
    c->scan = c->scan > c->pending ? c->scan - c->pending : 0;
    c->pending = 0;
  }
  if (!c->authed && c->rx_n >= 6 && c->rx[4] == SF__WIRE_VERSION && c->rx[5] &&
      c->rx[5] < SF__F_COUNT && !handshake_type(c->rx[5])) {
    uint32_t len = (uint32_t)c->rx[0] | (uint32_t)c->rx[1] << 8 | (uint32_t)c->rx[2] << 16 |
                   (uint32_t)c->rx[3] << 24;
    return sf__net_fail(err, errlen,
                        "a %s frame of %u bytes before authentication (until then only the "
                        "handshake's frames, at most %d bytes, are read)",
                        sf__wire_type_name(c->rx[5]), len, HANDSHAKE_MAX);
  }
  long k = sf__wire_decode(c->rx, c->rx_n, f, err, errlen);
  if (k <= 0)
    return (int)k;
  c->pending = (size_t)k;
  return 1;
}

uint8_t *sf__conn_take(sf__conn *c, size_t *n) {
  size_t k = c->pending, rest = c->rx_n - k;
  *n = k;
  if (k < SF__TAKE_INPLACE) {
    uint8_t *p = malloc(k ? k : 1);
    if (p && k)
      memcpy(p, c->rx, k);
    return p; /* the next sf__conn_next drops it from rx as usual */
  }
  /* The bytes after the frame (at most a fill's worth) move instead. */
  size_t cap = 131072;
  while (cap < rest + 65536)
    cap *= 2;
  uint8_t *nrx = malloc(cap);
  if (!nrx)
    return NULL;
  memcpy(nrx, c->rx + k, rest);
  uint8_t *p = c->rx;
  uint8_t *shrunk = realloc(p, k); /* gives back the room it grew for */
  if (shrunk)
    p = shrunk;
  c->rx = nrx;
  c->rx_cap = cap;
  c->rx_n = rest;
  c->scan = c->scan > k ? c->scan - k : 0;
  c->pending = 0;
  return p;
}

int sf__conn_recv(sf__conn *c, sf__frame *f, int timeout_ms, char *err, size_t errlen) {
  int64_t deadline = timeout_ms < 0 ? -1 : sf__now_ms() + timeout_ms;
  for (;;) {
    int r = sf__conn_next(c, f, err, errlen);
    if (r != 0)
      return r;
    int w = wait_fd(c->fd, POLLIN, deadline);
    if (w <= 0)
      return w == 0 ? sf__net_fail(err, errlen, "timed out waiting for the peer")
                    : sf__net_fail(err, errlen, "poll failed: %s", strerror(errno));
    int k = sf__conn_fill(c);
    if (k == 0)
      return 0;
    if (k < 0)
      return sf__net_fail(err, errlen, "receive failed: %s", strerror(errno));
  }
}

/* --------------------------------------------------------- handshake */

static void auth_mac(const uint8_t secret[SF__SECRET_LEN], const char *role,
                     const uint8_t first[32], const uint8_t second[32], uint32_t node,
                     uint8_t out[32]) {
  uint8_t msg[96];
  size_t n = strlen(role);
  memcpy(msg, role, n);
  memcpy(msg + n, first, 32);
  memcpy(msg + n + 32, second, 32);
  for (int i = 0; i < 4; i++)
    msg[n + 64 + (size_t)i] = (uint8_t)(node >> (8 * i));
  sf__hmac_sha256(secret, SF__SECRET_LEN, msg, n + 68, out);
}

int sf__auth_challenge(sf__conn *c, uint8_t nonce[32], int timeout_ms, char *err,
                       size_t errlen) {
  sf__frame f = {.type = SF__F_CHALLENGE};
  if (sf__random_bytes(f.u.challenge.nonce, 32))
    return sf__net_fail(err, errlen, "no randomness for the challenge");
  memcpy(nonce, f.u.challenge.nonce, 32);
  return sf__conn_send(c, &f, timeout_ms, err, errlen);
}

int sf__auth_answer(sf__conn *c, const sf__frame *f, const uint8_t secret[SF__SECRET_LEN],
                    const uint8_t nonce[32], uint32_t *node, int timeout_ms, char *err,
                    size_t errlen) {
  if (f->type != SF__F_AUTH)
    return sf__net_fail(err, errlen, "expected an auth frame, got %s", sf__wire_type_name(f->type));
  uint8_t want[32], nonce_w[32];
  memcpy(nonce_w, f->u.auth.nonce, 32);
  auth_mac(secret, "sflow-auth-1 worker", nonce, nonce_w, f->u.auth.node, want);
  if (!sf__ct_equal(want, f->u.auth.mac, 32))
    return sf__net_fail(err, errlen, "wrong HMAC: the peer does not know this run's secret");
  *node = f->u.auth.node;
  sf__frame ok = {.type = SF__F_AUTH_OK};
  auth_mac(secret, "sflow-auth-1 head", nonce_w, nonce, *node, ok.u.auth_ok.mac);
  if (sf__conn_send(c, &ok, timeout_ms, err, errlen))
    return -1;
  c->authed = true;
  return 0;
}

int sf__auth_head(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t *node,
                  int timeout_ms, char *err, size_t errlen) {
  uint8_t nonce[32];
  if (sf__auth_challenge(c, nonce, timeout_ms, err, errlen))
    return -1;
  sf__frame f;
  int r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "peer closed the connection before authenticating");
  if (r < 0)
    return -1;
  return sf__auth_answer(c, &f, secret, nonce, node, timeout_ms, err, errlen);
}

int sf__auth_worker(sf__conn *c, const uint8_t secret[SF__SECRET_LEN], uint32_t node,
                    int timeout_ms, char *err, size_t errlen) {
  sf__frame f;
  int r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "head closed the connection before the challenge");
  if (r < 0)
    return -1;
  if (f.type != SF__F_CHALLENGE)
    return sf__net_fail(err, errlen, "expected a challenge, got %s", sf__wire_type_name(f.type));
  uint8_t nonce_h[32];
  memcpy(nonce_h, f.u.challenge.nonce, 32);
  sf__frame a = {.type = SF__F_AUTH};
  a.u.auth.node = node;
  if (sf__random_bytes(a.u.auth.nonce, 32))
    return sf__net_fail(err, errlen, "no randomness for the nonce");
  uint8_t nonce_w[32];
  memcpy(nonce_w, a.u.auth.nonce, 32);
  auth_mac(secret, "sflow-auth-1 worker", nonce_h, nonce_w, node, a.u.auth.mac);
  if (sf__conn_send(c, &a, timeout_ms, err, errlen))
    return -1;
  r = sf__conn_recv(c, &f, timeout_ms, err, errlen);
  if (r == 0)
    return sf__net_fail(err, errlen, "authentication refused by the head (wrong secret?)");
  if (r < 0)
    return -1;
  uint8_t want[32];
  auth_mac(secret, "sflow-auth-1 head", nonce_w, nonce_h, node, want);
  if (f.type != SF__F_AUTH_OK || !sf__ct_equal(want, f.u.auth_ok.mac, 32))
    return sf__net_fail(err, errlen, "the head did not prove the secret");
  c->authed = true;
  return 0;
}
