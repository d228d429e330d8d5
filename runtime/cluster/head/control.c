/*
 * control.c — the head's control thread of a multi-node run.
 *
 * After start-up (launch.c) one control thread owns every socket and SSH
 * session: it sends heartbeats, declares a node lost when its connection
 * closes or it is silent for SF__HEARTBEAT_TIMEOUT_MS, forwards worker
 * stderr, refuses (and logs) strangers, and collects group results.
 *
 * Key design choice: while it runs, no other thread writes a socket; they
 * queue whole frames on a node (sf__cluster_send, sf__head_send_frame)
 * and wake it, so a slow or dead peer blocks nobody, only this thread
 * ever closes a connection, and the libssh2 sessions (not thread-safe)
 * have one user.  And nothing of a size that grows with the program's
 * values is copied on this thread or under H.mu: a checkpoint's state
 * (280 MB for a fine-tuned BERT) is queued in place (sf__cluster_send_parts)
 * and one that arrives is handed on in its receive buffer
 * (sf__conn_take), because a copy of two of them on two loaded cores kept
 * this thread from its heartbeats for over 3 s and the workers left.
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "head_internal.h"

#define PREAUTH_TIMEOUT_MS 5000

static void peer_str(int fd, char *buf, size_t n) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[64] = "?";
  uint16_t port = 0;
  if (!getpeername(fd, (struct sockaddr *)&ss, &sl))
    sf__addr_str((struct sockaddr *)&ss, sl, host, sizeof host, &port);
  snprintf(buf, n, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

static void mark_lost(node *nd, const char *why) {
  if (nd->lost || !nd->ready)
    return;
  if (H.stopping) { /* an orderly stop: workers leaving is expected */
    nd->alive = false;
    if (nd->conn.fd >= 0)
      sf__conn_close(&nd->conn);
    return;
  }
  nd->lost = true;
  nd->alive = false;
  H.lost_count++;
  int id = (int)(nd - H.nodes) + 1;
  if (nd->conn.fd >= 0)
    sf__conn_close(&nd->conn);
  sf__cluster_note("sflow: node %d (%s) lost: %s", id, nd->label, why);
  sf__head_out_clear(nd);
  if (H.lost_fn) { /* dispatch.c resubmits work: it takes H.mu itself */
    char reason[256];
    snprintf(reason, sizeof reason, "%s", why);
    sf__node_lost_fn fn = H.lost_fn;
    pthread_mutex_unlock(&H.mu);
    fn(id, reason);
    pthread_mutex_lock(&H.mu);
  }
  pthread_cond_broadcast(&H.cv);
}

/* HELLO after a good handshake: checks the executable hash. */
static int take_hello(node *nd, const sf__frame *f, char *err, size_t errlen) {
  if (f->type != SF__F_HELLO) {
    snprintf(err, errlen, "expected hello, got %s", sf__wire_type_name(f->type));
    return -1;
  }
  if (!sf__ct_equal(f->u.hello.exe_hash, H.exe_hash, SF__HASH_LEN)) {
    snprintf(err, errlen, "runs a different executable (content hash differs)");
    return -1;
  }
  nd->pid = f->u.hello.pid;
  nd->cpus = f->u.hello.cpus;
  nd->gpus = f->u.hello.gpus;
  nd->data_port = f->u.hello.data_port;
  nd->obj_port = f->u.hello.obj_port;
  snprintf(nd->hostname, sizeof nd->hostname, "%.*s", (int)f->u.hello.host.n,
           (const char *)f->u.hello.host.p);
  snprintf(nd->data_addr, sizeof nd->data_addr, "%.*s", (int)f->u.hello.data_addr.n,
           (const char *)f->u.hello.data_addr.p);
  return 0;
}

static void handle_frame(node *nd, const sf__frame *f);

/* Frames already buffered on nd's connection (they came with its hello,
 * or a fill stopped at its batch). */
static void take_frames(node *nd) {
  char err[256];
  sf__frame f;
  int k;
  while (nd->conn.fd >= 0 && (k = sf__conn_next(&nd->conn, &f, err, sizeof err)) != 0) {
    if (k < 0) {
      mark_lost(nd, err);
      return;
    }
    nd->last_rx = sf__now_ms();
    handle_frame(nd, &f);
  }
}

__attribute__((format(printf, 2, 3))) static void greet_drop(greeter *g, const char *fmt, ...) {
  char why[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  sf__cluster_note("sflow: refused control connection from %s: %s", g->who, why);
  sf__conn_close(&g->conn);
}

/* New connections on a listener: each becomes a greeter with the
 * challenge sent.  When PREAUTH_MAX are already waiting, the oldest is
 * dropped, so a flood of silent connections delays a real worker by at
 * most its own handshake's round trips, never by their timeout. */
static void accept_new(int lfd) {
  for (int burst = 0; burst < PREAUTH_MAX; burst++) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return;
    greeter *g = NULL;
    for (int i = 0; i < PREAUTH_MAX && !g; i++)
      if (H.greet[i].conn.fd < 0)
        g = &H.greet[i];
    if (!g) {
      g = &H.greet[0];
      for (int i = 1; i < PREAUTH_MAX; i++)
        if (H.greet[i].deadline < g->deadline)
          g = &H.greet[i];
      greet_drop(g, "%d connections were authenticating at once; dropped the oldest",
                 PREAUTH_MAX);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sf__conn_init(&g->conn, fd);
    peer_str(fd, g->who, sizeof g->who);
    g->node = 0;
    g->deadline = sf__now_ms() + PREAUTH_TIMEOUT_MS;
    char err[256];
    /* 40 bytes on a new socket: its buffer is empty, so never a wait. */
    if (sf__auth_challenge(&g->conn, g->nonce, 0, err, sizeof err))
      greet_drop(g, "%s", err);
  }
}

/* The greeter proved to be node nd and said hello: nd is ready. */
static void promote(greeter *g, node *nd) {
  int id = (int)(nd - H.nodes) + 1;
  nd->conn = g->conn;
  sf__conn_init(&g->conn, -1);
  nd->ready = nd->alive = true;
  nd->last_rx = sf__now_ms();
  nd->start_s = (double)(sf__now_ms() - H.t0) / 1000.0;
  if (logging())
    sf__cluster_note(
        "sflow: node %d ready: %s (host %s, pid %u, %u cpus, objects on %s:%u, %s, %.2f s)", id,
        nd->label, nd->hostname, nd->pid, nd->cpus, nd->data_addr, nd->obj_port,
        nd->copied ? "copied" : "cached", nd->start_s);
  take_frames(nd);
}

/* What a greeter sent: its auth frame, then its hello. */
static void greet_read(greeter *g) {
  int r = sf__conn_fill(&g->conn);
  char err[256];
  sf__frame f;
  int k;
  while ((k = sf__conn_next(&g->conn, &f, err, sizeof err)) == 1) {
    if (!g->node) {
      uint32_t id = 0;
      if (sf__auth_answer(&g->conn, &f, H.secret, g->nonce, &id, 0, err, sizeof err)) {
        greet_drop(g, "%s", err);
        return;
      }
      if (id < 1 || id > (uint32_t)H.n || H.nodes[id - 1].ready) {
        greet_drop(g, "node %u %s", id,
                   id < 1 || id > (uint32_t)H.n ? "does not exist" : "is already connected");
        return;
      }
      g->node = id;
      g->deadline = sf__now_ms() + PREAUTH_TIMEOUT_MS;
      continue;
    }
    node *nd = &H.nodes[g->node - 1];
    if (nd->ready) {
      greet_drop(g, "node %u is already connected", g->node);
      return;
    }
    if (take_hello(nd, &f, err, sizeof err)) {
      sf__cluster_note("sflow: refused node %u from %s: %s", g->node, g->who, err);
      snprintf(nd->error, sizeof nd->error, "%s: worker %s", nd->label, err);
      sf__conn_close(&g->conn);
      return;
    }
    promote(g, nd);
    return;
  }
  if (k < 0)
    greet_drop(g, "%s", err);
  else if (r == 0)
    greet_drop(g, "closed the connection before %s", g->node ? "its hello" : "authenticating");
  else if (r < 0)
    greet_drop(g, "receive failed: %s", strerror(errno));
}

static void greet_expire(int64_t t) {
  for (int i = 0; i < PREAUTH_MAX; i++) {
    greeter *g = &H.greet[i];
    if (g->conn.fd >= 0 && t >= g->deadline)
      greet_drop(g, "%s within %.0f s", g->node ? "no hello" : "did not authenticate",
                 PREAUTH_TIMEOUT_MS / 1000.0);
  }
}

void sf__head_pump_ssh(node *nd) {
  if (!nd->ssh || !nd->ssh_open)
    return;
  char prefix[32];
  snprintf(prefix, sizeof prefix, "[node %d] ", (int)(nd - H.nodes) + 1);
  if (sf__ssh_pump(nd->ssh, 2, prefix) == 0) {
    nd->ssh_open = false;
    if (!nd->ready && !nd->error[0])
      snprintf(nd->error, sizeof nd->error,
               "%s: the worker exited before connecting back (see its output above)", nd->label);
    else if (nd->ready)
      mark_lost(nd, "its process ended (SSH channel closed)");
  }
}

/* ---------------------------------------------------- the send queue */

/* A node's outgoing bytes are a list of pieces in order: frames copied
 * into a growing buffer, and bytes sent from where they lie in a blob.
 * The tail is a copy piece whenever one was appended last, so small frames
 * go into one buffer and leave in few sends. */

static size_t seg_len(const oseg *s) { return s->blob ? s->n : s->b.n; }
static const uint8_t *seg_ptr(const oseg *s) { return s->blob ? s->p : s->b.p; }

static void seg_free(oseg *s) {
  sf__wbuf_free(&s->b);
  sf__shared_unref(s->blob);
  free(s);
}

void sf__head_out_clear(node *nd) {
  while (nd->out) {
    oseg *nx = nd->out->next;
    seg_free(nd->out);
    nd->out = nx;
  }
  nd->out_tail = NULL;
}

static bool out_pending(const node *nd) {
  for (const oseg *s = nd->out; s; s = s->next)
    if (s->off < seg_len(s))
      return true;
  return false;
}

static void out_append(node *nd, oseg *first, oseg *last) {
  if (nd->out_tail)
    nd->out_tail->next = first;
  else
    nd->out = first;
  nd->out_tail = last;
}

/* The copy buffer at the tail, made when the tail is a blob or there is
 * none; NULL when out of memory. */
static sf__wbuf *out_buf(node *nd) {
  if (nd->out_tail && !nd->out_tail->blob)
    return &nd->out_tail->b;
  oseg *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  out_append(nd, s, s);
  return &s->b;
}

static bool wb_grow(sf__wbuf *b, size_t extra) {
  if (b->cap - b->n >= extra)
    return true;
  size_t cap = b->cap ? b->cap : 65536;
  while (cap - b->n < extra)
    cap *= 2;
  uint8_t *p = realloc(b->p, cap);
  if (!p)
    return false;
  b->p = p;
  b->cap = cap;
  return true;
}

/* Writes what nd->out holds without blocking: 0 when all is written or
 * the socket is full, -1 on an error (message in err). */
/* At most FLUSH_MAX bytes per call: a restarted group's members are sent
 * their checkpoints (hundreds of MB each for a fine-tuned BERT), and a
 * receiver that keeps up kept the loop in one flush while the other nodes
 * got no heartbeat.  What is left goes when poll says the socket can take
 * it. */
#define FLUSH_MAX ((size_t)8 << 20)

static int flush_out(node *nd, char *err, size_t errlen) {
  size_t sent = 0;
  while (nd->conn.fd >= 0 && nd->out && sent < FLUSH_MAX) {
    oseg *s = nd->out;
    if (s->off == seg_len(s)) {
      if (s == nd->out_tail && !s->blob) { /* all written: kept for the next frames */
        s->b.n = s->off = 0;
        break;
      }
      nd->out = s->next;
      if (!nd->out)
        nd->out_tail = NULL;
      seg_free(s);
      continue;
    }
    ssize_t k = send(nd->conn.fd, seg_ptr(s) + s->off, seg_len(s) - s->off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      s->off += (size_t)k;
      sent += (size_t)k;
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      break;
    snprintf(err, errlen, "send failed: %s", k < 0 ? strerror(errno) : "closed");
    return -1;
  }
  oseg *s = nd->out; /* a copy buffer written in part: its front goes */
  if (s && !s->blob && s->off > (1u << 20) && s->off > s->b.n / 2) {
    memmove(s->b.p, s->b.p + s->off, s->b.n - s->off);
    s->b.n -= s->off;
    s->off = 0;
  }
  return 0;
}

/* Set by the control thread itself: comparing with H.thread would read it
 * while pthread_create may still be writing it. */
static _Thread_local bool is_control_thread;

static bool on_control_thread(void) { return is_control_thread; }

/* Frames go through nd->out, in order with the task frames of dispatch.c.
 * The control thread (or anyone while it is not running) writes at once;
 * another thread leaves the writing to the control thread and wakes it,
 * so that only the control thread ever closes a connection. */
void sf__head_send_frame(node *nd, const sf__frame *f) {
  char err[128];
  sf__wbuf *b = nd->conn.fd >= 0 ? out_buf(nd) : NULL;
  if (!b || sf__wire_encode(b, f))
    return;
  if (on_control_thread()) {
    if (flush_out(nd, err, sizeof err))
      mark_lost(nd, err);
  } else if (!H.thread_running) { /* start-up and stop: bounded, blocking */
    int64_t deadline = sf__now_ms() + 1000;
    while (out_pending(nd)) {
      if (flush_out(nd, err, sizeof err)) {
        mark_lost(nd, err);
        return;
      }
      if (out_pending(nd)) {
        if (sf__now_ms() > deadline) {
          mark_lost(nd, "timed out sending");
          return;
        }
        struct pollfd pf = {nd->conn.fd, POLLOUT, 0};
        poll(&pf, 1, 50);
      }
    }
  } else {
    sf__head_wake();
  }
}

/* The pieces of parts[0..k) as a chain of their own: consecutive copied
 * parts in one buffer, each blob part in its own piece.  false when out
 * of memory (nothing made). */
static bool chain_parts(const sf__part *parts, int k, oseg **first, oseg **last) {
  *first = *last = NULL;
  for (int i = 0; i < k; i++) {
    if (!parts[i].n)
      continue;
    oseg *s = *last;
    if (parts[i].blob || !s || s->blob) {
      s = calloc(1, sizeof *s);
      if (!s)
        goto fail;
      if (*last)
        (*last)->next = s;
      else
        *first = s;
      *last = s;
    }
    if (parts[i].blob) {
      s->blob = sf__shared_ref(parts[i].blob);
      s->p = parts[i].p;
      s->n = parts[i].n;
    } else {
      if (!wb_grow(&s->b, parts[i].n))
        goto fail;
      memcpy(s->b.p + s->b.n, parts[i].p, parts[i].n);
      s->b.n += parts[i].n;
    }
  }
  return true;
fail:
  while (*first) {
    oseg *nx = (*first)->next;
    seg_free(*first);
    *first = nx;
  }
  *last = NULL;
  return false;
}

int sf__cluster_send_parts(int id, const sf__part *parts, int k) {
  pthread_mutex_lock(&H.mu);
  if (!H.started || H.stopping || id < 1 || id > H.n || !H.nodes[id - 1].alive ||
      H.nodes[id - 1].conn.fd < 0) {
    pthread_mutex_unlock(&H.mu);
    return -1;
  }
  node *nd = &H.nodes[id - 1];
  bool was_empty = !out_pending(nd);
  bool copies_only = true;
  size_t total = 0;
  for (int i = 0; i < k; i++) {
    copies_only &= !parts[i].blob;
    total += parts[i].n;
  }
  if (copies_only) { /* the usual case: onto the tail's buffer */
    sf__wbuf *b = out_buf(nd);
    if (!b || !wb_grow(b, total)) {
      pthread_mutex_unlock(&H.mu);
      return -1;
    }
    for (int i = 0; i < k; i++) {
      memcpy(b->p + b->n, parts[i].p, parts[i].n);
      b->n += parts[i].n;
    }
  } else {
    oseg *first, *last;
    if (!chain_parts(parts, k, &first, &last)) {
      pthread_mutex_unlock(&H.mu);
      return -1;
    }
    if (first)
      out_append(nd, first, last);
  }
  /* On the control thread (a result led to more work) the bytes leave
   * with the next round, together with the rest of this batch. */
  bool ctl = on_control_thread();
  pthread_mutex_unlock(&H.mu);
  if (!ctl && was_empty)
    sf__head_wake();
  return 0;
}

int sf__cluster_send(int id, const void *bytes, size_t n) {
  sf__part part = {bytes, n, NULL};
  return sf__cluster_send_parts(id, &part, 1);
}

/* Heartbeats answered at once after a node is ready, when tracing: enough
 * samples for a good clock offset before the first events arrive, instead
 * of one per SF__HEARTBEAT_MS. */
#define CLOCK_BURST 8

static void heartbeat(node *nd) {
  static uint64_t seq;
  sf__frame hb = {.type = SF__F_HEARTBEAT};
  hb.u.heartbeat.seq = ++seq;
  hb.u.heartbeat.time_ns = sf__trace_clock_ns();
  sf__head_send_frame(nd, &hb);
}

/* A heartbeat's answer: one sample of the worker's clock offset. */
static void clock_sample(node *nd, const sf__frame *f) {
  uint64_t t0 = f->u.clock.head_ns, t1 = f->u.clock.worker_ns, t2 = sf__trace_clock_ns();
  if (t0 > t2)
    return; /* not a time we sent */
  uint64_t rtt = t2 - t0;
  if (!nd->clock_n || rtt < nd->clock_rtt) {
    nd->clock_rtt = rtt;
    nd->clock_off = (int64_t)(t1 - (t0 + rtt / 2));
  }
  if (++nd->clock_n == CLOCK_BURST && logging())
    sf__cluster_note("sflow: node %d clock offset %+.3f ms (round trip %.3f ms)",
                     (int)(nd - H.nodes) + 1, (double)nd->clock_off / 1e6,
                     (double)nd->clock_rtt / 1e6);
  if (nd->clock_n < CLOCK_BURST && sf__options.trace)
    heartbeat(nd);
}

bool sf__cluster_clock(int id, int64_t *offset_ns, uint64_t *rtt_ns) {
  *offset_ns = 0;
  *rtt_ns = 0;
  if (!H.started || id < 1 || id > H.n)
    return false;
  pthread_mutex_lock(&H.mu);
  node *nd = &H.nodes[id - 1];
  bool ok = nd->clock_n > 0;
  if (ok) {
    *offset_ns = nd->clock_off;
    *rtt_ns = nd->clock_rtt;
  }
  pthread_mutex_unlock(&H.mu);
  return ok;
}

bool sf__cluster_silence(int id, double *now_s, double *max_s) {
  *now_s = *max_s = 0;
  if (!H.started || id < 1 || id > H.n)
    return false;
  pthread_mutex_lock(&H.mu);
  node *nd = &H.nodes[id - 1];
  bool ok = nd->alive;
  if (ok) {
    *now_s = (double)(sf__now_ms() - nd->last_rx) / 1000.0;
    *max_s = (double)nd->quiet_max / 1000.0;
  }
  pthread_mutex_unlock(&H.mu);
  return ok;
}

/* A checkpoint (hundreds of MB for a fine-tuned BERT) goes to
 * ractor_head.c in the buffer it arrived in, which it keeps: no copy on
 * this thread. */
static void take_state(node *nd) {
  size_t n;
  uint8_t *p = sf__conn_take(&nd->conn, &n);
  sf__shared *blob = p ? sf__shared_wrap(p, n) : NULL;
  sf__frame f;
  char err[64];
  pthread_mutex_unlock(&H.mu); /* as for task results */
  if (blob && sf__wire_decode(blob->p, blob->n, &f, err, sizeof err) > 0)
    sf__ractor_on_state((int)(nd - H.nodes) + 1, &f, blob);
  sf__shared_unref(blob);
  pthread_mutex_lock(&H.mu);
}

static void handle_frame(node *nd, const sf__frame *f) {
  switch (f->type) {
  case SF__F_HEARTBEAT: break; /* last_rx is enough */
  case SF__F_CLOCK: clock_sample(nd, f); break;
  case SF__F_TRACE: sf__trace_remote((int)(nd - H.nodes) + 1, f); break;
  case SF__F_METRICS: sf__metrics_remote((int)(nd - H.nodes) + 1, f); break;
  case SF__F_LOG:
    sf__cluster_note("[node %d] %.*s", (int)(nd - H.nodes) + 1, (int)f->u.log.line.n,
                     (const char *)f->u.log.line.p);
    break;
  case SF__F_TASK_RESULT:
  case SF__F_PRINT:
    /* dispatch.c completes futures and may send more work: without H.mu,
     * which only this thread's own bookkeeping needs (f points into this
     * node's receive buffer, which only this thread touches). */
    pthread_mutex_unlock(&H.mu);
    if (f->type == SF__F_TASK_RESULT)
      sf__remote_on_result((int)(nd - H.nodes) + 1, f);
    else
      sf__remote_on_print((int)(nd - H.nodes) + 1, (const char *)f->u.print.line.p,
                          f->u.print.line.n);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_OBJECT: /* a chunk of a large result (objects_head.c) */
    pthread_mutex_unlock(&H.mu); /* as for task results */
    sf__remote_on_object((int)(nd - H.nodes) + 1, f);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_ACTOR_RESULT:
    pthread_mutex_unlock(&H.mu); /* as for task results */
    sf__ractor_on_frame((int)(nd - H.nodes) + 1, f);
    pthread_mutex_lock(&H.mu);
    break;
  case SF__F_ACTOR_STATE: take_state(nd); break;
  case SF__F_GROUP_DONE:
    if (f->u.group_done.group == H.group_seq) {
      nd->group_done = true;
      nd->group_ok = f->u.group_done.ok;
      nd->group_ns = f->u.group_done.elapsed_ns;
      snprintf(nd->group_msg, sizeof nd->group_msg, "%.*s", (int)f->u.group_done.message.n,
               (const char *)f->u.group_done.message.p);
      pthread_cond_broadcast(&H.cv);
    }
    break;
  default:
    sf__cluster_note("sflow: node %d sent an unexpected %s frame", (int)(nd - H.nodes) + 1,
                     sf__wire_type_name(f->type));
  }
}

static void read_node(node *nd) {
  /* Bytes of a frame still arriving are a sign of life too: a worker
   * sending a large checkpoint has its heartbeat answers queued behind it. */
  size_t before = nd->conn.rx_n;
  int r = sf__conn_fill(&nd->conn);
  if (nd->conn.rx_n > before)
    nd->last_rx = sf__now_ms();
  take_frames(nd);
  if (nd->conn.fd < 0)
    return; /* lost: a malformed frame */
  if (r == 0)
    mark_lost(nd, "its control connection closed (process died?)");
  else if (r < 0)
    mark_lost(nd, strerror(errno));
}

/* One round of the control loop; the caller holds H.mu. */
void sf__head_control_round(int timeout_ms, int64_t *next_hb) {
  struct pollfd pf[1 + MAX_LISTEN + PREAUTH_MAX + 2 * 1024];
  node *owner[1 + MAX_LISTEN + PREAUTH_MAX + 2 * 1024];
  greeter *gowner[PREAUTH_MAX];
  int np = 0, ng = 0, nl = H.nlisten; /* the layout of pf, whatever changes meanwhile */
  pf[np] = (struct pollfd){H.wake[0], POLLIN, 0};
  owner[np++] = NULL;
  for (int i = 0; i < nl; i++) {
    pf[np] = (struct pollfd){H.listen_fd[i], POLLIN, 0};
    owner[np++] = NULL;
  }
  for (int i = 0; i < PREAUTH_MAX; i++)
    if (H.greet[i].conn.fd >= 0) {
      gowner[ng++] = &H.greet[i];
      pf[np] = (struct pollfd){H.greet[i].conn.fd, POLLIN, 0};
      owner[np++] = NULL;
    }
  for (int i = 0; i < H.n && np < (int)(sizeof pf / sizeof pf[0]) - 2; i++) {
    node *nd = &H.nodes[i];
    if (nd->conn.fd >= 0) {
      char err[128];
      if (out_pending(nd) && flush_out(nd, err, sizeof err)) {
        mark_lost(nd, err);
        continue;
      }
      short ev = POLLIN | (out_pending(nd) ? POLLOUT : 0);
      pf[np] = (struct pollfd){nd->conn.fd, ev, 0};
      owner[np++] = nd;
    }
    if (nd->ssh_open) {
      pf[np] = (struct pollfd){sf__ssh_socket(nd->ssh), POLLIN, 0};
      owner[np++] = nd;
    }
  }
  pthread_mutex_unlock(&H.mu);
  poll(pf, (nfds_t)np, timeout_ms);
  pthread_mutex_lock(&H.mu);
  if (pf[0].revents) {
    char buf[64];
    while (read(H.wake[0], buf, sizeof buf) > 0) {
    }
  }
  /* Greeters first: a slot they free can take a new connection below. */
  for (int i = 0; i < ng; i++)
    if (pf[1 + nl + i].revents && gowner[i]->conn.fd == pf[1 + nl + i].fd)
      greet_read(gowner[i]);
  for (int i = 1; i <= nl; i++)
    if (pf[i].revents & POLLIN)
      accept_new(pf[i].fd);
  for (int i = 1 + nl + ng; i < np; i++) {
    node *nd = owner[i];
    if (!pf[i].revents)
      continue;
    if (nd->conn.fd == pf[i].fd) {
      if (pf[i].revents & POLLOUT) {
        char err[128];
        if (flush_out(nd, err, sizeof err)) {
          mark_lost(nd, err);
          continue;
        }
      }
      if (pf[i].revents & (POLLIN | POLLERR | POLLHUP))
        read_node(nd);
    } else
      sf__head_pump_ssh(nd);
  }
  /* SSH output can arrive without the socket looking readable (libssh2
   * buffers), so every round pumps every open channel. */
  for (int i = 0; i < H.n; i++)
    sf__head_pump_ssh(&H.nodes[i]);
  int64_t t = sf__now_ms();
  greet_expire(t);
  for (int i = 0; i < H.n; i++) {
    node *nd = &H.nodes[i];
    if (nd->alive && t - nd->last_rx > nd->quiet_max)
      nd->quiet_max = t - nd->last_rx;
    if (nd->alive && t - nd->last_rx > SF__HEARTBEAT_TIMEOUT_MS) {
      char why[96];
      snprintf(why, sizeof why, "no heartbeat for %.1f s", (double)(t - nd->last_rx) / 1000.0);
      mark_lost(nd, why);
    }
  }
  if (t >= *next_hb) {
    /* How late this round is: what the workers' 3 s allowance must cover. */
    if (*next_hb && t - (*next_hb - SF__HEARTBEAT_MS) > H.hb_gap_max)
      H.hb_gap_max = t - (*next_hb - SF__HEARTBEAT_MS);
    *next_hb = t + SF__HEARTBEAT_MS;
    for (int i = 0; i < H.n; i++)
      if (H.nodes[i].alive)
        heartbeat(&H.nodes[i]);
  }
}

void *sf__head_control_thread(void *arg) {
  (void)arg;
  is_control_thread = true;
  int64_t next_hb = 0;
  pthread_mutex_lock(&H.mu);
  while (!H.stopping)
    sf__head_control_round(100, &next_hb);
  pthread_mutex_unlock(&H.mu);
  return NULL;
}

void sf__head_note_silences(void) {
  if (!logging())
    return;
  sf__cluster_note("sflow: heartbeats: longest gap between rounds %.2f s (a node is lost after "
                   "%.1f s of silence)", (double)H.hb_gap_max / 1000.0,
                   SF__HEARTBEAT_TIMEOUT_MS / 1000.0);
  for (int i = 0; i < H.n; i++)
    if (H.nodes[i].ready)
      sf__cluster_note("sflow: node %d: longest silence %.2f s%s", i + 1,
                       (double)H.nodes[i].quiet_max / 1000.0, H.nodes[i].lost ? " (lost)" : "");
}

void sf__head_wake(void) {
  if (H.wake[1] >= 0) {
    char c = 1;
    (void)!write(H.wake[1], &c, 1);
  }
}

